"""The step-by-step core and the ideal continuous batcher, on runs small enough to follow by hand:
every step takes 1 s (a stub step time), so times are step counts."""

from __future__ import annotations

import math

import pytest

from kvcalc.calc.simulate import (
    ClosedLoop,
    IdealBatcher,
    Length,
    Request,
    ShapeCache,
    StepShape,
    percentile,
    poisson,
    simulate,
    stats,
)


def _one_second(_shape: object) -> float:
    return 1.0


def _by_id(run: object) -> dict[int, object]:
    return {d.request.id: d for d in run.done}  # type: ignore[attr-defined]


def test_two_requests_join_whole_and_decode_together() -> None:
    # Pool 100 tokens. A (10 + 3) and B (20 + 2) at 0: step 1 feeds both prompts (first tokens at
    # 1), step 2 decodes both (B's 2nd token ends it at 2), step 3 decodes A (ends at 3).
    run = simulate([Request(0, 0.0, 10, 3), Request(1, 0.0, 20, 2)], IdealBatcher(100), _one_second)
    a, b = _by_id(run)[0], _by_id(run)[1]
    assert (a.ttft_s, a.e2e_s, a.tpot_s) == (1.0, 3.0, 1.0)
    assert (b.ttft_s, b.e2e_s) == (1.0, 2.0)
    assert run.steps == 3 and run.preemptions == 0


def test_a_request_that_cannot_grow_preempts_the_last_admitted() -> None:
    # Pool 12 tokens, A and B 5 + 4 each. Step 1: both prompts (10 held), first tokens at 1. Step 2:
    # both decode (12 held). Step 3: A needs a 13th token: B, the last admitted, is preempted (its 6
    # freed); B (5 + 2 = 7 to recompute) does not fit beside A's 7: A alone, steps 3 and 4 (A ends
    # at 4, its 8 freed). Step 5: B recomputes 7 tokens and samples its 3rd; step 6 its 4th.
    run = simulate([Request(0, 0.0, 5, 4), Request(1, 0.0, 5, 4)], IdealBatcher(12), _one_second)
    a, b = _by_id(run)[0], _by_id(run)[1]
    assert (a.e2e_s, a.preemptions) == (4.0, 0)
    assert (b.ttft_s, b.e2e_s, b.preemptions) == (1.0, 6.0, 1)
    assert run.steps == 6 and run.preemptions == 1 and run.stalls == {"kv": 2}
    # Gaps: A's 2nd-4th tokens and B's 2nd and 4th 1 s each (a step's time), B's 3rd 3 s (preempted
    # at step 3, back at step 5).
    assert sorted(run.itl) == [(1.0, 1), (1.0, 1), (1.0, 1), (1.0, 2), (3.0, 1)]


def test_a_token_budget_chunks_prompts_after_the_decodes() -> None:
    # Budget 4 a step, pool 100. A: 2 + 3, B: 6 + 2, both at 0.
    # Step 1: A's whole prompt (2), B joins (its 6 held) with the 2 left: A's 1st token at 1.
    # Step 2: A decodes (1), B's next chunk is the 3 left (5 of 6 read): A's 2nd at 2.
    # Step 3: A decodes, B's last prompt token: A's 3rd ends it at 3, B's 1st token at 3.
    # Step 4: B's 2nd ends it at 4. Without the budget both prompts go in step 1 (B's TTFT 1).
    run = simulate([Request(0, 0.0, 2, 3), Request(1, 0.0, 6, 2)], IdealBatcher(100, token_budget=4), _one_second)
    a, b = (next(d for d in run.done if d.request.id == i) for i in (0, 1))
    assert (a.ttft_s, a.e2e_s) == (1.0, 3.0)
    assert (b.ttft_s, b.e2e_s) == (3.0, 4.0)
    assert run.steps == 4 and run.peak_used == 4 + 6  # at step 3: A holds 2 + 2 fed tokens, B its 6


def test_a_request_longer_than_the_pool_is_refused_not_run() -> None:
    run = simulate([Request(0, 0.0, 10, 5)], IdealBatcher(12), _one_second)
    assert run.done == () and len(run.refused) == 1 and "14 tokens" in run.refused[0][1]


def test_arrivals_wait_for_the_engine_and_idle_time_passes() -> None:
    # A arrives at 0 (one step of prompt, ends at 1: output 1); B arrives at 5.5: the engine idles,
    # then B's step runs from 5.5 to 6.5.
    run = simulate([Request(0, 0.0, 4, 1), Request(1, 5.5, 4, 1)], IdealBatcher(50), _one_second)
    b = _by_id(run)[1]
    assert (b.scheduled_s, b.first_token_s, b.queue_s) == (5.5, 6.5, 0.0)
    assert run.makespan_s == 6.5


def test_handling_time_delays_every_request_before_its_first_step() -> None:
    run = simulate([Request(0, 0.0, 4, 1)], IdealBatcher(50), _one_second, handling_s=0.25)
    (d,) = run.done
    assert (d.queue_s, d.ttft_s) == (0.25, 1.25)


def test_a_closed_loop_sends_each_clients_next_request_when_the_last_ends() -> None:
    # 2 clients, 4 requests of 4 + 2: steps 1-2 serve requests 0 and 1 (end at 2); requests 2 and 3
    # arrive at 2 and end at 4.
    run = simulate(ClosedLoop([Length(4, 2)], users=2, count=4), IdealBatcher(50), _one_second)
    arrivals = sorted(d.request.arrival_s for d in run.done)
    assert arrivals == [0.0, 0.0, 2.0, 2.0] and run.makespan_s == 4.0


def test_poisson_arrivals_are_seeded_and_average_the_rate() -> None:
    lengths = [Length(10, 10)]
    first, again = poisson(lengths, 5.0, 2000, seed=7), poisson(lengths, 5.0, 2000, seed=7)
    assert first == again
    # 1,999 gaps of mean 1/5 s: the last arrival near 400 s (within 3 standard deviations:
    # sqrt(1,999) x 0.2 ~ 8.9 s).
    assert abs(first[-1].arrival_s - 1999 / 5) < 27
    assert all(r.arrival_s == 0 for r in poisson(lengths, math.inf, 5, seed=1))


def test_percentiles_interpolate_as_numpy_does() -> None:
    # numpy.percentile([1, 2, 3, 4], 90) = 3 + 0.7 x (4 - 3) = 3.7 (linear, the default).
    assert percentile([1.0, 2.0, 3.0, 4.0], 90) == pytest.approx(3.7)
    summary = stats([4.0, 1.0, 3.0, 2.0])
    assert (summary.mean, summary.p50, summary.count) == (2.5, 2.5, 4)


def test_a_step_time_is_remembered_by_its_whole_shape() -> None:
    # Two decode steps of one sequence that differ only in the cached tokens the decoding sequence
    # reads (decode_context 10 vs 11) cost 1 + 10 and 1 + 11 under this step time; asked again,
    # the first shape is not timed a second time.
    calls: list[StepShape] = []

    def step_time(shape: StepShape) -> float:
        calls.append(shape)
        return 1.0 + shape.decode_context

    timed = ShapeCache(step_time, size=2)
    a, b = StepShape(1, 10, 1, 0, 10, 10), StepShape(1, 10, 1, 0, 10, 11)
    assert (timed(a), timed(b), timed(a)) == (11.0, 12.0, 11.0)
    assert calls == [a, b]
    # A third shape fills it past its 2: it starts over, and a is timed again.
    c = StepShape(2, 20, 2, 0, 20, 20)
    assert (timed(c), timed(a)) == (21.0, 11.0)
    assert calls == [a, b, c, a]
