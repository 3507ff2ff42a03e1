"""vLLM v1's scheduler (engines/vllm/scheduler.py) on runs small enough to follow by hand, each step
1 s; the rules are vllm 0.32.0's (v1/core/sched/scheduler.py), derived by hand in
each test's comment."""

from __future__ import annotations

from kvcalc.calc.simulate import Live, Request, simulate
from kvcalc.engines.vllm.scheduler import VllmScheduler


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
