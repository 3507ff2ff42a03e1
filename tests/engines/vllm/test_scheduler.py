"""vLLM v1's scheduler (engines/vllm/scheduler.py) on runs small enough to follow by hand, each step
1 s; the rules are vllm 0.32.0's (v1/core/sched/scheduler.py), derived by hand in
each test's comment."""

from __future__ import annotations

from kvcalc.calc.simulate import Request, simulate
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
