"""vLLM v1's scheduler (engines/vllm/scheduler.py) on runs small enough to follow by hand, each step
1 s; the rules are vllm 0.32.0's (v1/core/sched/scheduler.py), derived by hand in
each test's comment."""

from __future__ import annotations

from kvcalc.calc.simulate import Live, Request, simulate
from kvcalc.engines.vllm.scheduler import VllmScheduler, VllmV0Scheduler


def _one_second(_shape: object) -> float:
    return 1.0


def _done(run: object) -> dict[int, object]:
    return {d.request.id: d for d in run.done}  # type: ignore[attr-defined]


def test_chunked_prefill_shares_the_token_budget_with_decodes() -> None:
    # 5 blocks of 4 (block 0 is the null block: 4 usable), budget 8. A, B: 6 + 3 each at 0.
    # Step 1: A's 6 prompt tokens (2 blocks), B's first 2 (1 block: the budget's rest).
    # Step 2: A decodes (its 7th token fits its 2 blocks), B's last 4 (a 2nd block): B's first token.
    # Step 3: both decode (8 tokens, 2 blocks each): A's 3rd token ends it.  Step 4: B's 3rd.
    scheduler = VllmScheduler(5, 4, max_num_batched_tokens=8, max_num_seqs=4, max_model_len=64)
    run = simulate([Request(0, 0.0, 6, 3), Request(1, 0.0, 6, 3)], scheduler, _one_second)
    a, b = _done(run)[0], _done(run)[1]
    assert (a.ttft_s, a.e2e_s) == (1.0, 3.0)
    assert (b.ttft_s, b.e2e_s) == (2.0, 4.0)
    assert run.preemptions == 0 and run.steps == 4


def test_the_last_running_request_is_preempted_and_recomputed() -> None:
    # 4 blocks of 4 (3 usable), budget 16. A, B: 4 + 6 each.
    # Step 1: both prompts, a block each; first tokens at 1 (1 block free).
    # Step 2: A's 5th token takes the free block; B's 5th needs one: none is free, and B is the last
    #   running: B is preempted (its block freed, progress dropped, first in line); nothing admitted.
    # Steps 3-5: A decodes within its 2 blocks; B (5 tokens now: 2 blocks) does not fit the 1 free.
    # Step 6: A's 9th token takes the last block; A's 6th token ends it, its 3 blocks freed.
    # Step 7: B recomputes 5 tokens (2 blocks) and samples its 2nd; steps 8-11 its 3rd to 6th.
    scheduler = VllmScheduler(4, 4, max_num_batched_tokens=16, max_num_seqs=4, max_model_len=64)
    run = simulate([Request(0, 0.0, 4, 6), Request(1, 0.0, 4, 6)], scheduler, _one_second)
    a, b = _done(run)[0], _done(run)[1]
    assert (a.e2e_s, a.preemptions) == (6.0, 0)
    assert (b.ttft_s, b.e2e_s, b.preemptions) == (1.0, 11.0, 1)
    assert run.preemptions == 1 and run.steps == 11
    assert run.stalls["kv"] == 5  # the preempting step 2 and steps 3-6 left B out for blocks


def test_max_num_seqs_caps_the_running_requests() -> None:
    # Plenty of blocks, max_num_seqs 1: B waits for A (4 + 2) to end at 2, then runs 3-4.
    scheduler = VllmScheduler(100, 4, max_num_batched_tokens=64, max_num_seqs=1, max_model_len=64)
    run = simulate([Request(0, 0.0, 4, 2), Request(1, 0.0, 4, 2)], scheduler, _one_second)
    assert (_done(run)[1].ttft_s, _done(run)[1].e2e_s) == (3.0, 4.0)
    assert run.stalls == {"seqs": 2}


def test_a_request_over_the_pool_or_max_model_len_is_refused() -> None:
    scheduler = VllmScheduler(4, 4, max_num_batched_tokens=16, max_num_seqs=4, max_model_len=64)
    # 4 + 10 tokens hold ceil(13 / 4) = 4 blocks at the end: more than the 3 usable.
    assert "4 blocks" in (scheduler.refused(Request(0, 0.0, 4, 10)) or "")
    assert "max_model_len" in (scheduler.refused(Request(0, 0.0, 60, 10)) or "")


def test_v0_multi_step_makes_a_new_request_wait_for_the_burst_to_end() -> None:
    # vLLM 0.6's V0 with --num-scheduler-steps 3 (vllm/sequence.py init_multi_step_from_lookahead_slots:
    # a decode runs num_lookahead_slots + 1 = 3 steps, a prefill 1). A: 4 + 6 at 0; B: 4 + 2 at 1.5.
    # Step 1 (0-1): A's prompt, its 1st token at 1. Step 2 (1-2): a burst of 3 decodes starts (A's 2nd).
    # B arrives at 1.5 but steps 3, 4 (2-4) end the burst (A's 3rd, 4th): B waits ("burst" twice).
    # Step 5 (4-5): B's prompt alone (prefills first, decodes paused): B's 1st token at 5 (TTFT 3.5).
    # Steps 6-7: a burst over A and B: B's 2nd at 6 ends it; A's 5th at 6, 6th at 7 ends A.
    scheduler = VllmV0Scheduler(100, 4, max_num_batched_tokens=64, max_num_seqs=8, max_model_len=64,
                                num_scheduler_steps=3)  # fmt: skip
    run = simulate([Request(0, 0.0, 4, 6), Request(1, 1.5, 4, 2)], scheduler, _one_second)
    a, b = _done(run)[0], _done(run)[1]
    assert (a.ttft_s, a.e2e_s) == (1.0, 7.0)
    assert (b.ttft_s, b.e2e_s) == (3.5, 4.5)
    assert run.steps == 7 and run.stalls == {"burst": 2}


def test_v0_without_chunked_prefill_pauses_decodes_for_a_prefill() -> None:
    # V0's _schedule_default ("Don't schedule decodes if prefills are scheduled"), one step a call.
    # A: 4 + 3 at 0; B: 4 + 1 at 1.5. Step 1 (0-1): A's prompt (1st token); step 2 (1-2): A's 2nd.
    # Step 3 (2-3): B's prompt alone, its only token at 3 (TTFT 1.5); A waits.
    # Step 4 (3-4): A's 3rd token ends it at 4 (V1 would have decoded A beside B's prompt: 3).
    scheduler = VllmV0Scheduler(100, 4, max_num_batched_tokens=64, max_num_seqs=8, max_model_len=64)
    run = simulate([Request(0, 0.0, 4, 3), Request(1, 1.5, 4, 1)], scheduler, _one_second)
    a, b = _done(run)[0], _done(run)[1]
    assert a.e2e_s == 4.0
    assert (b.ttft_s, b.e2e_s) == (1.5, 1.5)
    assert run.steps == 4


def test_v0_admits_whole_prompts_within_the_token_budget() -> None:
    # Budget 6: A's 4-token prompt joins (2 left); B's 4 do not fit the 2 and V0 does not chunk:
    # B waits for the next step ("budget"). Step 1: A's prompt (1 token out: done at 1).
    # Step 2: B's prompt, its token at 2.
    scheduler = VllmV0Scheduler(100, 4, max_num_batched_tokens=6, max_num_seqs=8, max_model_len=64)
    run = simulate([Request(0, 0.0, 4, 1), Request(1, 0.0, 4, 1)], scheduler, _one_second)
    assert (_done(run)[0].e2e_s, _done(run)[1].e2e_s) == (1.0, 2.0)
    assert run.stalls == {"budget": 1}


# --- prefix caching (vllm 0.32.0: v1/core/kv_cache_manager.py get_computed_blocks and allocate_slots,
# v1/core/block_pool.py get_new_blocks and free_blocks) ------------------------------------------------


def _recorded(tokens: list[int]) -> object:
    """A 1 s step that records the tokens each step with a prompt's tokens fed (the pure decode steps
    the simulator takes at once are timed by their first and last only)."""

    def step(shape: object) -> float:
        if shape.prefill_tokens:  # type: ignore[attr-defined]
            tokens.append(shape.tokens)  # type: ignore[attr-defined]
        return 1.0

    return step


def test_requests_sharing_a_prefix_feed_only_their_own_tokens() -> None:
    # Blocks of 16, budget 2048; 4 requests of a 256-token shared prefix + 20 own tokens, 2 outputs,
    # all at 0. Step 1: A feeds its 276 tokens: cdiv(276, 16) = 18 blocks, the 17 full ones cached at
    # once (16 of the prefix, 1 of A's own). B, C, D, admitted after it in the same step, hit the 16
    # prefix blocks (their 17th, tokens 256-271, is their own) and feed 276 - 256 = 20 tokens each,
    # with 2 new blocks (cdiv(276, 16) - 16). Step 1 feeds 276 + 3 x 20 = 336 tokens; the pool holds
    # 16 shared + 4 x 2 = 24 blocks. Step 2: each decodes its 277th token (in its 18th block) and ends
    # (a decode step: not recorded). Caching off: 4 x 276 = 1,104 tokens and 4 x 18 = 72 blocks.
    def run(caching: bool) -> tuple[list[int], int, int]:
        fed: list[int] = []
        scheduler = VllmScheduler(200, 16, max_num_batched_tokens=2048, max_num_seqs=8, max_model_len=4096,
                                  prefix_caching=caching)  # fmt: skip
        requests = [Request(i, 0.0, 276, 2, prefix=0, prefix_len=256) for i in range(4)]
        got = simulate(requests, scheduler, _recorded(fed))  # type: ignore[arg-type]
        return fed, got.peak_used, scheduler.hit_tokens

    assert run(True) == ([336], 24, 3 * 256)
    assert run(False) == ([1104], 72, 0)


def test_a_prompt_wholly_cached_recomputes_its_last_block() -> None:
    # A prompt of 32 tokens, all of it the shared prefix (2 full blocks of 16): A (1 output) feeds 32
    # and ends in step 1, its 2 blocks freed but kept cached. B, the same prompt at 5 s: its hit is
    # capped at 32 - 1 = 31 tokens, whole blocks of them: 1 block, 16 tokens; it feeds the other 16.
    fed: list[int] = []
    scheduler = VllmScheduler(10, 16, max_num_batched_tokens=2048, max_num_seqs=8, max_model_len=4096,
                              prefix_caching=True)  # fmt: skip
    requests = [Request(0, 0.0, 32, 1, prefix=0, prefix_len=32), Request(1, 5.0, 32, 1, prefix=0, prefix_len=32)]
    simulate(requests, scheduler, _recorded(fed))  # type: ignore[arg-type]
    assert fed == [32, 16] and scheduler.hit_tokens == 16


def test_freed_blocks_are_evicted_tail_first() -> None:
    # 6 blocks of 4 (5 usable, ids 1-5, the free queue in that order); prefixes of 8 tokens (2 blocks).
    # A (group 0, 9 tokens, 1 output) at 0 takes 1, 2 (its prefix's, cached), 3 (partial) and ends;
    # freed tail first: 3 (not cached) to the queue's front, 2 then 1 (cached) to its end: 3 4 5 2 1.
    # B (group 1, 13 tokens) at 10 takes 3, 4, 5 and 2, evicting group 0's SECOND block (2); the
    # queue's 1, group 0's first, survives. C (group 0, 9 tokens) at 20 hits block 1 only: 4 tokens
    # cached, 5 fed. Blocks evicted head first (1 before 2) would leave C no hit: 9 fed.
    fed: list[int] = []
    scheduler = VllmScheduler(6, 4, max_num_batched_tokens=64, max_num_seqs=4, max_model_len=64, prefix_caching=True)
    requests = [Request(0, 0.0, 9, 1, 0, 8), Request(1, 10.0, 13, 1, 1, 8), Request(2, 20.0, 9, 1, 0, 8)]
    simulate(requests, scheduler, _recorded(fed))  # type: ignore[arg-type]
    assert fed == [9, 13, 5] and scheduler.hit_tokens == 4


def test_a_preempted_request_hits_its_own_blocks_again() -> None:
    # 4 blocks of 4 (3 usable: 1 2 3), budget 16; A 4 + 5, B 4 + 6, at 0, no shared prefix.
    # Step 1: both prompts, a block each (1, 2), both full and cached; step 2: A's 5th token takes 3,
    # B's needs one: B preempted, its block 2 freed but cached (the queue: 2). Steps 3-5: B (5 tokens,
    # its hit 1 block, free) needs 2 - 1 + 1 = 2 blocks, 1 free; A ends at step 5 (3, 1 to the queue's
    # end: 2 3 1). Step 6: B hits its block 2 (4 tokens) and feeds its 5th alone, sampling its 2nd
    # output (a decode step: it reads 4 cached tokens and feeds 1); steps 7-10 the rest. Caching off it
    # recomputes its 5 tokens at step 6, a prefill. The steps with prompt tokens: 8 at step 1, then
    # none, or those 5.
    def run(caching: bool) -> list[int]:
        fed: list[int] = []
        scheduler = VllmScheduler(4, 4, max_num_batched_tokens=16, max_num_seqs=4, max_model_len=64,
                                  prefix_caching=caching)  # fmt: skip
        got = simulate([Request(0, 0.0, 4, 5), Request(1, 0.0, 4, 6)], scheduler, _recorded(fed))  # type: ignore[arg-type]
        b = _done(got)[1]
        assert (b.ttft_s, b.e2e_s, b.preemptions, got.steps) == (1.0, 10.0, 1, 10)  # type: ignore[attr-defined]
        return fed

    assert run(True) == [8]
    assert run(False) == [8, 5]


def _queue(scheduler: VllmScheduler) -> list[object]:
    """The free queue, front first: a run of anonymous blocks as its count, a hittable block as its
    hash (None: a hit took it off the queue)."""
    return [e if isinstance(e, int) else (e[0].key if e[0] is not None else None) for e in scheduler._queue]


def test_the_run_length_free_queue_evicts_in_vllms_order() -> None:
    # 12 blocks of 4: 11 usable, the queue one run [11]. Hashes (_key): group 0's block k is
    # -(k + 1); request 1's own block k is (1 << 32) | k.
    # A (group 0, prefix 8, prompt 10) takes 3 blocks: [8]; its 2 prefix blocks fill and are cached.
    # A ends: tail first, its partial 3rd block (uncached) to the front: [9]; then g0#1, g0#0 (cached)
    # to the end: [9, -2, -1]. B (id 1, no prefix, 8 tokens) takes 2: [7, -2, -1]; B is preempted:
    # its 2 full blocks (cached, hittable by B alone) to the end tail first: [7, -2, -1, B#1, B#0].
    # C (id 2, 8 tokens) takes 2 ([5, ...]) and ends: its 2 cached blocks no one can hit go to the
    # end as anonymous: [5, -2, -1, B#1, B#0, 2]. D (24 tokens) takes 6: the run of 5, then g0#1
    # (evicted): [-1, B#1, B#0, 2]. A group-0 prompt of 10 now hits 1 block (g0#0; g0#1 is gone),
    # B (9 tokens: 8 of them within its hit's cap) hits its 2. B is readmitted: B#0 and B#1 leave
    # the queue (emptied cells, not counted): [-1, None, None, 2], 3 free. E (8 tokens) takes 2:
    # g0#0 evicted, the empty cells skipped, 1 of the run: [1], and a group-0 prompt hits nothing.
    scheduler = VllmScheduler(12, 4, max_num_batched_tokens=64, max_num_seqs=8, max_model_len=64, prefix_caching=True)
    b_own = 1 << 32
    assert _queue(scheduler) == [11]
    a = Live(Request(0, 0.0, 10, 1, prefix=0, prefix_len=8))
    assert scheduler._allocate(a, 10)
    assert _queue(scheduler) == [8]
    a.computed, a.generated = 10, 1
    scheduler._free_blocks(a, preempted=False)
    assert _queue(scheduler) == [9, -2, -1]
    b = Live(Request(1, 0.0, 8, 4))
    assert scheduler._allocate(b, 8)
    b.computed, b.generated = 8, 1
    scheduler._free_blocks(b, preempted=True)
    b.computed = 0
    assert _queue(scheduler) == [7, -2, -1, b_own | 1, b_own]
    c = Live(Request(2, 0.0, 8, 1))
    assert scheduler._allocate(c, 8)
    c.computed, c.generated = 8, 1
    scheduler._free_blocks(c, preempted=False)
    assert _queue(scheduler) == [5, -2, -1, b_own | 1, b_own, 2]
    d = Live(Request(3, 0.0, 24, 1))
    assert scheduler._allocate(d, 24)
    assert _queue(scheduler) == [-1, b_own | 1, b_own, 2] and scheduler._free == 5
    assert len(scheduler._hit(Live(Request(4, 0.0, 10, 1, prefix=0, prefix_len=8)))) == 1
    hit = scheduler._hit(b)
    assert len(hit) == 2
    scheduler._adopt(b, hit)
    assert _queue(scheduler) == [-1, None, None, 2] and scheduler._free == 3
    assert scheduler._allocate(Live(Request(5, 0.0, 8, 1)), 8)
    assert _queue(scheduler) == [1] and scheduler._free == 1
    assert scheduler._hit(Live(Request(6, 0.0, 10, 1, prefix=0, prefix_len=8))) == []


def _decoding_pair(num_gpu_blocks: int) -> tuple[VllmScheduler, list[Live]]:
    # Two requests of 15 + 40 tokens, blocks of 16: one step reads both prompts (a block each) and
    # samples their first tokens, as the simulator's loop records it (computed 15, generated 1).
    scheduler = VllmScheduler(num_gpu_blocks, 16, max_num_batched_tokens=64, max_num_seqs=4, max_model_len=128)
    lives = [Live(Request(i, 0.0, 15, 40)) for i in range(2)]
    for live in lives:
        scheduler.admit(live)
    batch, _ = scheduler.schedule()
    assert [n for _, n in batch] == [15, 15]
    for live in lives:
        live.computed, live.generated = 15, 1
    return scheduler, lives


def test_steady_counts_the_blocks_each_request_holds_not_a_bound() -> None:
    # 4 blocks (3 usable), 2 held by the prompts: 1 free. The shortcut's bound (2 requests x
    # cdiv(k, 16) blocks) says even k = 1 needs 2 blocks; read one by one, a 16th token fits each
    # request's block (0 more) and a 17th needs a 2nd block each (2 > 1 free): k = 1 exactly.
    scheduler, _ = _decoding_pair(4)
    found = scheduler.steady()
    assert found is not None and found[1] == 1
    # 100 blocks (99 usable, 97 free): 40 - 1 sampled - 1 (none ends) = 38 steps, the bound
    # 2 x cdiv(38, 16) = 6 blocks surely fits.
    scheduler, _ = _decoding_pair(100)
    found = scheduler.steady()
    assert found is not None and found[1] == 38


def test_a_decode_at_a_block_boundary_takes_a_block() -> None:
    # 6 blocks (5 usable): the prompts hold 2. Each 16th token fits the block it holds (the decode
    # hot path takes nothing); each 17th needs a second block: 2 + 2 = 4 in use.
    scheduler, lives = _decoding_pair(6)
    batch, _ = scheduler.schedule()
    assert [n for _, n in batch] == [1, 1] and scheduler.used_units() == 2
    for live in lives:
        live.computed, live.generated = 16, 2
    batch, _ = scheduler.schedule()
    assert [n for _, n in batch] == [1, 1] and scheduler.used_units() == 4


def test_steady_takes_nothing_together_when_a_request_ends_within_two_steps() -> None:
    # Either request at 38 of its 40 tokens (computed 15 + 37) ends at its 40th: 40 - 38 - 1 = 1
    # step could be taken with none ending, under the 2 worth taking together. The oldest first
    # (read alone), then the newest (read in the scan of all).
    for ending in (0, 1):
        scheduler, lives = _decoding_pair(100)
        lives[ending].computed, lives[ending].generated = 52, 38
        assert scheduler.steady() is None
