"""SGLang's scheduler (engines/sglang/scheduler.py, from sglang 0.5.23's scheduler.py,
schedule_policy.py PrefillAdder, schedule_batch.py and mem_cache/prefill_budget.py) on small
scenarios derived by hand: a stub step of 1 s, so every time is a step count. A step is either a
prefill batch or a decode step of every running request, never both, unless mixed chunk is on."""

from __future__ import annotations

import math

import pytest

from kvcalc.api import Load, Serving, StepTimes, simulate
from kvcalc.calc.simulate import Batch, Live, Request
from kvcalc.engines.sglang.scheduler import SglangScheduler, default_chunked_prefill_size
from kvcalc.errors import UsageError
from tests.helpers.step_log import run_steps


def _sglang(pool: int, *, chunk: int | None = 100, running: int = 10, ignore_eos: bool = False,
            conservativeness: float = 1.0, mixed: bool = False, radix: bool = False,
            page: int = 1, recv: int = 1, swa: int | None = None, window: int | None = None,
            interval: int = 128) -> SglangScheduler:  # fmt: skip
    return SglangScheduler(pool, page, max_running_requests=running, context_len=1000, chunked_prefill_size=chunk,
                           ignore_eos=ignore_eos, schedule_conservativeness=conservativeness,
                           mixed_chunk=mixed, prefix_caching=radix, recv_interval=recv, swa_tokens=swa,
                           window=window, swa_eviction_interval=interval)  # fmt: skip


class _SwaWatch(SglangScheduler):
    """The SWA pool's used tokens after each step's scheduling (its allocations made)."""

    seen: list[int]

    def schedule(self) -> tuple[Batch, str | None]:
        batch, stall = super().schedule()
        self.seen.append(self.swa_used())
        return batch, stall


def _watch(pool: int, swa: int, window: int, *, chunk: int = 100, interval: int = 128) -> _SwaWatch:
    watch = _SwaWatch(pool, 1, max_running_requests=10, context_len=1000, chunked_prefill_size=chunk,
                      ignore_eos=True, swa_tokens=swa, window=window, swa_eviction_interval=interval)  # fmt: skip
    watch.seen = []
    return watch


def test_a_long_prompt_is_chunked_and_decode_waits_for_prefill() -> None:
    # chunked_prefill_size 4; A (6 prompt, 3 out) and B (3, 2) at t=0.
    # step 1: A's 6 > 4: its first chunk of 4 (the chunk budget spent: B waits, "budget").
    # step 2: A's last 2 (first token at t=2), B's first 2 of 3 (the 2 the budget leaves).
    # step 3: B's last 1 (first token t=3); A is running but a prefill step decodes nothing.
    # steps 4, 5: decode A and B (B's 2nd token ends it at t=4), then A alone (t=5).
    run, log, done = run_steps(_sglang(100, chunk=4), [(0, 6, 3), (0, 3, 2)])
    assert log.steps == [{0: 4}, {0: 2, 1: 2}, {1: 1}, {0: 1, 1: 1}, {0: 1}]
    assert (done[0].first_token_s, done[0].finished_s) == (2, 5)
    assert (done[1].first_token_s, done[1].finished_s) == (3, 4)
    # Gaps: A's 2nd token waits out B's prefill step (2 s), its 3rd 1 s; B's 2nd 1 s.
    assert sorted(run.itl) == [(1.0, 1), (1.0, 1), (2.0, 1)]
    assert run.stalls == {"budget": 1}


def test_mixed_chunk_decodes_the_running_requests_in_the_prefill_step() -> None:
    # chunked_prefill_size 4; A (2 prompt, 4 out) at t=0, B (6, 2) at t=0.5 (first seen at step 2).
    # Without mixed chunk: step 1 A's prompt (first token t=1); step 2 B's first chunk of 4, step 3
    # its last 2 (first token t=3): A waits both out; steps 4..6 decode (B ends at 4, A at 6).
    _, log, done = run_steps(_sglang(100, chunk=4), [(0, 2, 4), (0.5, 6, 2)])
    assert log.steps == [{0: 2}, {1: 4}, {1: 2}, {0: 1, 1: 1}, {0: 1}, {0: 1}]
    assert done[0].finished_s == 6
    # Mixed (PrefillAdder num_mixed_decode_tokens = 1 running request): the chunk budget is
    # 4 - 1 = 3, so B goes in chunks of 3 (steps 2 and 3), A decoding beside each (its 2nd and 3rd
    # tokens at t=2, 3); B's first token at t=3; step 4 decodes both: A's 4th and B's 2nd end them.
    _, log, done = run_steps(_sglang(100, chunk=4, mixed=True), [(0, 2, 4), (0.5, 6, 2)])
    assert log.steps == [{0: 2}, {1: 3, 0: 1}, {1: 3, 0: 1}, {0: 1, 1: 1}]
    assert (done[0].first_token_s, done[0].finished_s) == (1, 4)
    assert (done[1].first_token_s, done[1].finished_s) == (3, 4)


def test_a_request_arriving_mid_interval_is_read_at_the_next_poll() -> None:
    # --scheduler-recv-interval 3 (recv_skipper.py: the counter grows by the last batch's weight, decode
    # 1, no batch 1, prefill 1000; at 3 it resets and the requests are read). A (2 prompt, 10 out) at
    # t=0, B (2, 2) at t=1.5. Step 1 (t=0): no batch yet (counter 1), idle iterations until 3, then A
    # is read and prefilled (1st token t=1). Step 2: after a prefill (1000) it polls, nothing there:
    # decode A. B is seen from t=2, but step 3 (counter 1) and step 4 (2) do not poll: A decodes.
    # Step 5 (t=4, counter 3): B read and prefilled (1st token t=5); step 6 decodes both (B's 2nd ends
    # it at t=6); A's 10 tokens at t=1, 2, 3, 4, 6, 7, ..., 11: 11 steps.
    _, log, done = run_steps(_sglang(100, recv=3), [(0, 2, 10), (1.5, 2, 2)])
    assert log.steps == [{0: 2}, {0: 1}, {0: 1}, {0: 1}, {1: 2}, {0: 1, 1: 1}] + [{0: 1}] * 5
    assert (done[1].first_token_s, done[1].finished_s) == (5, 6)
    assert done[0].finished_s == 11
    # An interval of 1 (the default) reads B at step 3 (t=2): 1st token t=3, ended at t=4.
    _, log, done = run_steps(_sglang(100), [(0, 2, 10), (1.5, 2, 2)])
    assert log.steps[2:4] == [{1: 2}, {0: 1, 1: 1}]
    assert (done[1].first_token_s, done[1].finished_s) == (3, 4)


def test_a_prefill_resets_the_receive_counter() -> None:
    # Interval 2: A (2, 6) at 0, B (2, 2) at 1.5, C (2, 2) at 4.5. Step 1 (t=0) prefills A; step 2
    # (t=1, after a prefill: poll, empty) decodes A; step 3 (t=2, counter 1) decodes A though B waits;
    # step 4 (t=3, counter 2: poll) prefills B (1st token t=4); step 5 (t=4, poll after the prefill,
    # C not there yet) decodes A and B (B ends at t=5); C is seen from t=5: step 6 (counter 1) decodes
    # A; step 7 (t=6, counter 2: poll) prefills C (1st token t=7); step 8 decodes A and C (both end at
    # t=8: A's tokens at t=1, 2, 3, 5, 6, 8).
    _, log, done = run_steps(_sglang(100, recv=2), [(0, 2, 6), (1.5, 2, 2), (4.5, 2, 2)])
    assert log.steps == [{0: 2}, {0: 1}, {0: 1}, {1: 2}, {0: 1, 1: 1}, {0: 1}, {2: 2}, {0: 1, 2: 1}]
    assert {i: (d.first_token_s, d.finished_s) for i, d in done.items()} == {0: (1, 8), 1: (4, 5), 2: (7, 8)}


def test_mixed_chunk_needs_chunked_prefill() -> None:
    # scheduler.py is_mixed_chunk = chunked_prefill_size is not None and enable_mixed_chunk: without
    # chunking, B's prefill (step 2) runs alone; A's 2nd token waits for step 3.
    _, log, _ = run_steps(_sglang(100, chunk=None, mixed=True), [(0, 2, 3), (0.5, 6, 1)])
    assert log.steps[:3] == [{0: 2}, {1: 6}, {0: 1}]


def test_admission_reserves_new_token_ratio_of_the_running_outputs() -> None:
    # Pool 40; A (10, 10) at t=0, B (10, 10) arrives at t=1.5, so it is first seen at step 3.
    # step 3: A holds 11 tokens (prompt + 1 decoded), 2 outputs, 8 to go; free 29. B needs
    # 10 + 10 + 1 = 21 < 29 - 8 x ratio (0.7 less one decay step, 0.6990) = 23.4: admitted.
    # A then decodes in steps 2, 4..11 (10 tokens by t=11), B in 4..12 (first at t=3, 10th at t=12).
    run, log, done = run_steps(_sglang(40), [(0, 10, 10), (1.5, 10, 10)])
    assert log.steps[:4] == [{0: 10}, {0: 1}, {1: 10}, {0: 1, 1: 1}]
    assert (done[0].finished_s, done[1].first_token_s, done[1].finished_s) == (11, 3, 12)
    assert run.preemptions == 0


def test_ignore_eos_reserves_every_remaining_output() -> None:
    # The same with ignore_eos: A's 8 outputs to go are reserved whole: 21 < 29 - 8 = 21 fails, so
    # B waits; batch_is_full then holds admission shut (steps 3..10, "kv") until A ends at t=10.
    run, log, done = run_steps(_sglang(40, ignore_eos=True), [(0, 10, 10), (1.5, 10, 10)])
    assert log.steps[10] == {1: 10}
    assert (done[0].finished_s, done[1].first_token_s, done[1].finished_s) == (10, 11, 20)
    assert run.stalls == {"kv": 8}


def test_decode_out_of_memory_retracts_the_request_with_fewest_outputs() -> None:
    # Pool 21, schedule_conservativeness 0.1: new_token_ratio 0.07, so B (4, 10), arriving at 1.5,
    # is admitted at step 3 beside A (4, 10): 15 < 16 - 8 x 0.0699. Each decode step then takes 2
    # tokens: free 16 - 4 = 12 after step 3, 0 after step 9. Step 10: 2 > 0, retract: A has 8
    # outputs, B 7: B goes (its 10 tokens freed), to the back of the queue; A decodes alone.
    # Step 11: B needs 11 + 3 + 1 = 15, free 9: A decodes its 10th token (ends at t=11).
    # Step 12: B's prompt and 7 outputs again (11 tokens: its 8th output), then 13, 14.
    scheduler = _sglang(21, conservativeness=0.1)
    run, log, done = run_steps(scheduler, [(0, 4, 10), (1.5, 4, 10)])
    assert log.steps[8:12] == [{0: 1, 1: 1}, {0: 1}, {0: 1}, {1: 11}]
    assert (done[0].first_token_s, done[0].finished_s, done[0].preemptions) == (1, 11, 0)
    assert (done[1].first_token_s, done[1].finished_s, done[1].preemptions) == (3, 14, 1)
    assert run.preemptions == 1 and run.steps == 14
    assert scheduler.new_token_ratio == pytest.approx(0.07)  # back to init once idle


def test_max_running_requests_holds_the_next_request() -> None:
    # max_running_requests 1: B waits for A's end (steps 1 and 2 stall on "seqs").
    run, log, done = run_steps(_sglang(100, running=1), [(0, 2, 2), (0, 2, 2)])
    assert log.steps == [{0: 2}, {0: 1}, {1: 2}, {1: 1}]
    assert (done[1].first_token_s, done[1].finished_s) == (3, 4)
    assert run.stalls == {"seqs": 2}


def test_admission_counts_the_batch_once() -> None:
    # PrefillAdder allocates nothing (prepare_for_extend does, after it): remaining_total is the
    # pool's free tokens before the batch less the offsets. Pool 100: A (30, 5) reserves
    # 30 + 1 + 5 = 36; B needs 30 + 5 + 1 = 36 < 100 - 36 = 64: both in step 1 (counting A's 30
    # tokens twice, 36 < 70 - 36 = 34 would fail).
    _, log, _ = run_steps(_sglang(100, chunk=None), [(0, 30, 5), (0, 30, 5)])
    assert log.steps[0] == {0: 30, 1: 30}


def test_the_radix_cache_shares_a_groups_prefix_once_it_is_in_the_tree() -> None:
    # Pool 1,000, page 1, no chunking; 4 requests of 300 + 3 tokens, the first 256 shared (group 0):
    # A, B at 0, C at 0.5, D at 2.5. ratio 0.7.
    # step 1: A needs 300 + 3 + 1 = 304 < 1,000; B 304 < 1,000 - 304: both compute all 300 (the
    #   prefix is inserted only after the step): 600 tokens used.
    # step 2: A's prompt goes into the tree (group node 256, A's own 44); B's insert finds the 256
    #   there and frees its copy: 256 + 44 + 44 = 344. C matches 256 (< 300 - 1) and computes 44:
    #   388 used; its first token at t=2 (TTFT 1.5).
    # step 3: decode A, B, C (391). step 4: D (arrived 2.5) hits 256, computes 44: 435.
    # step 5: decode A, B, C and D (439): A's, B's and C's 3rd tokens end them; their own 46 tokens
    #   each stay in the tree, unlocked (evictable counts as free): step 6 decodes D alone with
    #   256 + 44 + 2 = 302 used.
    run, log, done = run_steps(_sglang(1000, chunk=None, radix=True), [(0, 300, 3), (0, 300, 3), (0.5, 300, 3),
                               (2.5, 300, 3)], [(0, 256)] * 4)  # fmt: skip
    assert log.steps == [{0: 300, 1: 300}, {2: 44}, {0: 1, 1: 1, 2: 1}, {3: 44}, {0: 1, 1: 1, 2: 1, 3: 1}, {3: 1}]
    assert [s.used_units for s in run.samples] == [600, 388, 391, 435, 439, 302]
    assert [done[i].ttft_s for i in range(4)] == [1, 1, 1.5, 1.5]
    scheduler = log.inner
    assert isinstance(scheduler, SglangScheduler) and scheduler.hit_tokens == 2 * 256
    # --disable-radix-cache: C computes all 300 in step 2.
    _, log, _ = run_steps(_sglang(1000, chunk=None), [(0, 300, 3), (0, 300, 3), (0.5, 300, 3), (2.5, 300, 3)],
                          [(0, 256)] * 4)  # fmt: skip
    assert log.steps[1] == {2: 300}


@pytest.mark.parametrize(("page", "hit", "used"), [(1, 255, [256, 257, 258]), (16, 240, [256, 272, 288])])
def test_the_hit_is_whole_pages_within_the_prompt_less_one(page: int, hit: int, used: list[int]) -> None:
    # A and B: prompts of 256 tokens, all of them the shared prefix; B arrives at 0.5. Step 1: A's
    # 256 (the tree's after the step). Step 2: B matches at most input_len - 1 = 255 tokens, in whole
    # pages: 255 (page 1) or 240 (page 16), and computes the rest: 1 token (257 used) or 16 (272).
    # Step 3: B's insert frees its copy of the tree's tokens (back to 256); A and B decode, each
    # taking a new page: 258, or 256 + 2 x 16 = 288.
    run, log, _ = run_steps(_sglang(1000, chunk=None, radix=True, page=page), [(0, 256, 2), (0.5, 256, 2)],
                            [(0, 256), (0, 256)])  # fmt: skip
    assert log.steps == [{0: 256}, {1: 256 - hit}, {0: 1, 1: 1}]
    assert [s.used_units for s in run.samples] == used
    assert isinstance(log.inner, SglangScheduler) and log.inner.hit_tokens == hit


def test_the_tree_evicts_least_recently_used_leaves_when_the_pool_needs_room() -> None:
    # Pool 200, page 1, no chunking; group 0's prefix 64. A (80 + 2) at 0: step 1 its 80; step 2
    # its decode ends it: the tree holds the prefix 64 and A's own 17, unlocked; 119 free.
    # B (group 0, 80 + 2) at 1.5: step 3 hits 64, computes 16; step 4 its decode ends it: the tree
    # holds 64 + 17 + 17 (B's), free 102. C (no group, 150 + 2) at 3.5: step 5 needs 153 < 102 + 98
    # evictable: its 150 tokens evict A's 17 (least recently used), B's 17, then the prefix (a leaf
    # once its children are gone): 50 free. D (group 0, 80 + 2) at 4.5 needs 83, over 50 - 0.7:
    # it waits out C's decode (step 6) and at step 7 computes all 80: its prefix was evicted.
    run, log, done = run_steps(_sglang(200, chunk=None, radix=True), [(0, 80, 2), (1.5, 80, 2), (3.5, 150, 2),
                               (4.5, 80, 2)], [(0, 64), (0, 64), (-1, 0), (0, 64)])  # fmt: skip
    assert log.steps == [{0: 80}, {0: 1}, {1: 16}, {1: 1}, {2: 150}, {2: 1}, {3: 80}, {3: 1}]
    assert isinstance(log.inner, SglangScheduler) and log.inner.hit_tokens == 64
    assert done[3].first_token_s == 7 and run.preemptions == 0


def test_a_retracted_requests_prompt_stays_in_the_tree() -> None:
    # Pool 60, page 1, conservativeness 0.1 (ratio 0.07): A (4 + 40) at 0, B (10 + 40) at 1.5.
    # Step 1 A's 4; step 2 A decodes; step 3 B needs 10 + 40 + 1 = 51 < 55 - 38 x 0.0699: its 10.
    # Both decode from step 4 (free 43 after it) to step 25 (free 1). Step 26 needs 2: retract B
    # (23 outputs to A's 24): its own 22 tokens freed (free 23), its prompt stays in the tree,
    # unlocked (release_req evicts only while the free tokens are under 20 x 1 kept request); ratio
    # min(1, (24 + 20) / 41) = 1. Step 27: B's 33 tokens hit its 10 and need 23 + 17 + 1 = 41, over
    # 22 + 10 - 10 (its own path, locked while weighed) - 15 x 1.0 = 7: it waits out A (ends at 41).
    # Step 42: B computes 23 (not 33): A's 43 tokens left in the tree are evicted for them; its 40th
    # output at step 58.
    _, log, done = run_steps(_sglang(60, chunk=None, conservativeness=0.1, radix=True), [(0, 4, 40), (1.5, 10, 40)])
    assert (log.steps[25], log.steps[41]) == ({0: 1}, {1: 23})
    assert (done[0].finished_s, done[1].finished_s, done[1].preemptions) == (41, 58, 1)
    assert isinstance(log.inner, SglangScheduler) and log.inner.hit_tokens == 10
    # --disable-radix-cache: B's whole 33 again at step 42.
    _, log, _ = run_steps(_sglang(60, chunk=None, conservativeness=0.1), [(0, 4, 40), (1.5, 10, 40)])
    assert log.steps[41] == {1: 33}


def test_requests_sglang_would_cut_or_refuse() -> None:
    # Pool 21, context 1000: max_req_len = min(999, 20) = 20; max_new_tokens is cut to
    # min(20 - prompt - 1, 21 - prompt - 1 - 1) = 15 for a prompt of 4.
    scheduler = _sglang(21)
    assert scheduler.refused(Request(0, 0, 4, 15)) is None
    assert "cut" in (scheduler.refused(Request(0, 0, 4, 16)) or "")
    assert "max_req_input_len" in (scheduler.refused(Request(0, 0, 15, 1)) or "")  # 15 >= 20 - 5
    assert "context length" in (_sglang(10_000).refused(Request(0, 0, 900, 101)) or "")


@pytest.mark.parametrize(("mib", "size"), [(16_384, 2048), (24_564, 4096), (40_960, 4096), (81_559, 8192),
                                           (143_771, 8192), (183_359, 16384), (None, 4096)])  # fmt: skip
def test_chunked_prefill_size_by_gpu_memory(mib: int | None, size: int) -> None:
    # arg_groups/memory_hook.py (0.5.23): < 20 GiB 2048, < 35 4096, < 60 4096, < 90 8192, < 160 8192,
    # else 16384; unknown 4096.
    assert default_chunked_prefill_size(mib)[0] == size


def test_chunked_prefill_size_of_a_24_gib_gpu_by_release() -> None:
    # sgl-project/sglang#37898 raised the 20-35 GiB tier from 2,048 to 4,096 (from 0.5.19).
    assert default_chunked_prefill_size(24_564, (0, 5, 18)) == (2048, "a GPU under 35 GiB")
    assert default_chunked_prefill_size(24_564, (0, 5, 19))[0] == 4096


def test_the_engine_simulates_over_its_token_pool() -> None:
    # A 1 GiB budget for Llama 3.1 8B: a token is 32 layers x 2 x 8 heads x 128 x 2 B = 131,072 B,
    # so 8,192 tokens. Three requests of 100 + 10 at once: one prefill step for all three (each
    # needs 111 of the pool), then 9 decode steps.
    report = simulate("llama-3.1-8b", load=Load(rate=math.inf, count=3, prompt=100, output=10), engine="sglang",
                      kv_budget=2**30, step_times=StepTimes(1.0, 0.0))  # fmt: skip
    assert report.run.pool_units == 8192
    assert report.run.steps == 10
    assert any(n.startswith("SGLang's scheduler: 8,192 tokens") for n in report.notes)


def test_enable_mixed_chunk_is_read_from_the_engine_options() -> None:
    # The same pool as above (8,192 tokens); A (100, 10) at t=0 and B (100, 2) at t=0.5, the GPU's
    # memory unknown: chunked_prefill_size 4,096. Separate steps: A's prefill (its 1st token), B's
    # prefill, then A's 9 more tokens in steps 3..11 (B's 2nd in step 3): 11 steps. Mixed: A's 2nd
    # token beside B's prefill in step 2, its 8 more in steps 3..10: 10 steps.
    load = Load(trace=((0.0, 100, 10), (0.5, 100, 2)))
    for options, steps, words in (({}, 11, "separate steps"), ({"mixed_chunk": True}, 10, "--enable-mixed-chunk")):
        report = simulate("llama-3.1-8b", load=load, serving=Serving("sglang", options=options), kv_budget=2**30,
                          step_times=StepTimes(1.0, 0.0))  # fmt: skip
        assert report.run.steps == steps
        assert any(words in n for n in report.notes if n.startswith("SGLang's scheduler"))


def test_the_receive_interval_is_read_from_the_engine_options() -> None:
    # The pool above; A (100, 10) at t=0, B (100, 2) at t=1.5. Interval 1: B read at t=2, prefilled in
    # step 3 (1st token t=3: TTFT 1.5). --scheduler-recv-interval 3: steps 3 and 4 decode A (counter
    # 1, 2), step 5 (t=4) reads and prefills B (1st token t=5: TTFT 3.5).
    load = Load(trace=((0.0, 100, 10), (1.5, 100, 2)))
    for options, ttft in (({}, 1.5), ({"recv_interval": 3}, 3.5)):
        report = simulate("llama-3.1-8b", load=load, serving=Serving("sglang", options=options), kv_budget=2**30,
                          step_times=StepTimes(1.0, 0.0))  # fmt: skip
        b = next(d for d in report.run.done if d.request.id == 1)
        assert b.first_token_s - b.request.arrival_s == ttft
    assert any("--scheduler-recv-interval" in n for n in report.notes if n.startswith("SGLang's scheduler"))


def test_a_mamba_hybrids_state_pool_bounds_the_running_requests() -> None:
    # Qwen3.5 0.8B: 18 linear-attention layers, each a conv state of 3 x (2 x 16 x 128 + 16 x 128) x 2 B
    # = 36,864 B and an SSM state of 16 x 128 x 128 x 4 B = 1,048,576 B: 19,537,920 B a request.
    # At 1 GiB the state pool gets 0.9 / 1.9 of it: int((508,614,548 - 19,537,920) // 19,537,920) = 25
    # slots, 3 a running request: max_running_requests 8 (the token pool, (2**30 - 26 x 19,537,920) //
    # 12,288 = 46,041 tokens, holds far more). Twelve requests at once: 8 run, 4 wait on "seqs".
    report = simulate("qwen3.5-0.8b", load=Load(rate=math.inf, count=12, prompt=20, output=4), engine="sglang",
                      kv_budget=2**30, step_times=StepTimes(1.0, 0.0))  # fmt: skip
    assert report.run.peak_running == 8 and report.run.stalls.get("seqs", 0) > 0
    assert any("state pool (25 slots, 3 a running request)" in n for n in report.notes)


def test_a_pool_sglang_refuses_to_start_is_one_error() -> None:
    # gpt-oss-20b's sliding layers keep a window of 128 (SGLang's sliding_window_size 127): an SWA pool
    # that a 1 MiB budget leaves is under the admission floor 127 + 1, so SGLang would not start.
    with pytest.raises(UsageError, match="SGLang refuses this: its sliding-window pool"):
        simulate("gpt-oss-20b", load=Load(rate=1.0, count=1, prompt=2, output=2), engine="sglang", kv_budget=2**20,
                 step_times=StepTimes(1.0, 0.0))  # fmt: skip


# The hybrid SWA pool (SWATokenToKVPoolAllocator), radix cache off: prefill_budget.py SWAPrefillBudget and
# estimate_swa_kv_tokens (a request's SWA estimate: max(min(extend, chunk budget) - window, 0) +
# min(extend + max_new, window) + page), common.py free_swa_out_of_window_slots, schedule_batch.py maybe_evict_swa.


def test_a_prompt_longer_than_the_swa_pool_goes_in_chunks_its_window_slides_between() -> None:
    # Full pool 1,000, SWA pool 30, window 8, chunk budget 16, page 1; A (40 prompt, 3 out): whole it would
    # need 40 + 3 + 1 = 44 SWA tokens, more than the pool, but a chunk of 16 needs (16 - 8) + 8 + 1 = 17.
    # step 1: A's first 16 (SWA used 16). step 2 (add_chunked_req): the chunk is at most remaining_swa -
    # page = 14 - 1 = 13; before it, its SWA below 16 - 8 = 8 is freed (8 used), then 13 more (21).
    # step 3: 30 - 21 - 1 = 8 tokens; frees below 29 - 8 = 21 (8 used), + 8 = 16. step 4: its last 3
    # (room 13); frees below 37 - 8 = 29, + 3 = 11. steps 5, 6 decode (the 1st no slide; the 2nd's 41 - 8
    # = 33 is under 29 + 128): 12, 13.
    watch = _watch(1000, 30, 8, chunk=16)
    _, log, done = run_steps(watch, [(0, 40, 3)])
    assert log.steps == [{0: 16}, {0: 13}, {0: 8}, {0: 3}, {0: 1}, {0: 1}]
    assert watch.seen == [16, 21, 16, 11, 12, 13]
    assert (done[0].first_token_s, done[0].finished_s) == (4, 6)
    # The plain pool: chunks of the whole budget, 16, 16, 8.
    _, log, _ = run_steps(_sglang(1000, chunk=16), [(0, 40, 3)])
    assert log.steps[:3] == [{0: 16}, {0: 16}, {0: 8}]


def test_a_request_waits_for_the_swa_pool_until_a_decode_frees_out_of_window_tokens() -> None:
    # Full pool 1,000 (never binds), SWA pool 20, window 4, eviction interval 4, page 1, ignore_eos.
    # A (10, 12) and B (10, 2) at t=0. step 1: A's estimate (10 - 4) + 4 + 1 = 11 < 20: prefilled (SWA
    # used 10, swa_offset 11); B's 11 < 20 - 11 = 9 is false: it waits ("swa"). step 2: B's 11 < 10 false;
    # A's 1st decode (decode_batch_idx 0: no slide): 11 used. step 3: 11 < 9 false; A's 2nd decode: 11 -
    # 4 = 7 >= 0 + 4, so its SWA below 7 is freed: 4 used, + 1 = 5. step 4: 11 < 15: B prefilled (15).
    # step 5: both decode (A's 12 - 4 = 8 < 7 + 4: no slide): 17; B ends. step 6, 7: A alone: 7, 8 (B's
    # 11 freed). step 8: 15 - 4 = 11 >= 7 + 4: below 11 freed (4), + 1 = 5. A's 12th token at t=13.
    watch = _watch(1000, 20, 4, interval=4)
    run, log, done = run_steps(watch, [(0, 10, 12), (0, 10, 2)])
    assert log.steps == [{0: 10}, {0: 1}, {0: 1}, {1: 10}, {0: 1, 1: 1}] + [{0: 1}] * 8
    assert watch.seen[:8] == [10, 11, 5, 15, 17, 7, 8, 5]
    assert (done[1].first_token_s, done[1].finished_s) == (4, 5)
    assert done[0].finished_s == 13
    assert run.stalls == {"swa": 3}
    # No slide (an interval past A's length): B waits for A to end at t=12, prefilled in step 13.
    _, log, done = run_steps(_sglang(1000, swa=20, window=4, interval=1000, ignore_eos=True),
                             [(0, 10, 12), (0, 10, 2)])  # fmt: skip
    assert (done[1].first_token_s, done[1].finished_s) == (13, 14)


def test_the_swa_pool_counts_and_refuses() -> None:
    # used_units: SGLang's num_used_tokens, the larger of the two pools' used tokens (pool_stats_observer.py);
    # a request's SWA tokens are among its full ones, so the full pool's here (A holds 10 + 1 + 1 = 12 after
    # step 3, 5 of them in the SWA pool).
    sched = _sglang(1000, swa=20, window=4, interval=4, ignore_eos=True)
    a = Live(Request(0, 0.0, 10, 12))
    sched.admit(a)
    for _ in range(3):
        for live, n in sched.schedule()[0]:
            live.computed += n
            live.generated += 1
    assert (sched.used_units(), sched.swa_used()) == (12, 5)
    # Without chunked prefill a request whose estimate is the SWA pool's or more never fits (swa_never_fits
    # with no chunk to cut): (30 - 4) + 4 + 1 = 31 >= 20.
    assert "sliding-window pool" in (_sglang(1000, chunk=None, swa=20, window=4).refused(Request(0, 0, 30, 2)) or "")
    assert _sglang(1000, chunk=None, swa=40, window=4).refused(Request(0, 0, 30, 2)) is None
    with pytest.raises(ValueError, match="radix cache"):
        _sglang(1000, swa=20, window=4, radix=True)


def test_an_swa_models_run_uses_both_pools() -> None:
    # gpt-oss-20b under SGLang: 12 full and 12 sliding layers of 2 x 8 heads x 64 x 2 B = 2,048 B, so
    # 24,576 B a token in each pool; a full-pool token costs 24,576 + 0.8 x 24,576 = 44,236.8 B
    # (HybridSWAPoolConfigurator): 45,000,000 B give 1,017 full tokens and int(1,017 x 0.8) = 813 SWA
    # tokens; sliding_window_size 127. Four requests of 300 + 4 at once, chunk budget 4,096:
    # step 1: each needs 305 full tokens (A: 305 < 1,017; B: 305 < 712; C would fit, 305 < 407) and an SWA
    # estimate of (300 - 127) + 127 + 1 = 301 (A: < 813, B: < 512, C: 301 < 211 fails): A and B only.
    # steps 2, 3 decode them (C still 301 < 211: "swa"); step 3, their 2nd decode, frees each one's SWA
    # below 301 - 127 = 174 (174 >= 128). step 4: C fits both (SWA 557 free); D not the full pool
    # (305 < 413 - 1.4 - 305 fails). step 5 decodes A, B (ending them) and C; step 6 D; steps 7-9 decode.
    report = simulate("gpt-oss-20b", load=Load(rate=math.inf, count=4, prompt=300, output=4), engine="sglang",
                      kv_budget=45_000_000, step_times=StepTimes(1.0, 0.0))  # fmt: skip
    assert report.run.pool_units == 1017
    firsts = {d.request.id: (d.first_token_s, d.finished_s) for d in report.run.done}
    assert firsts == {0: (1, 5), 1: (1, 5), 2: (4, 8), 3: (6, 9)}
    assert report.run.stalls["swa"] == 3
    assert any("SGLang's two pools" in n and "(813, window 127)" in n for n in report.notes)
    assert any("taken as off (--disable-radix-cache)" in n for n in report.notes)
