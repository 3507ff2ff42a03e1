"""mlx_lm.server's scheduling (engines/mlx/scheduler.py, from mlx-lm 0.32.2's server.py and
generate.py BatchGenerator / generate_step) on small scenarios derived by hand: a stub step of
1 s, so every time is a step count."""

from __future__ import annotations

import math

from kvcalc.api import Load, StepTimes, simulate
from kvcalc.calc.simulate import Request
from kvcalc.engines.mlx.scheduler import MlxScheduler
from tests.helpers.step_log import run_steps


def test_batch_generator_decodes_then_reads_prompts_and_splits_a_step_ahead() -> None:
    # decode 2 and prompt 2 at a time, 3 prompt tokens a step. A (5, 3), B (1, 2), C (2, 1) at 0,
    # D (3, 1) at 0.5.
    # step 1: A and B join the prompts; B's prompt is its last token: split (a pass, 0 fed); A reads 3.
    # step 2: decode B (its last prompt token: 1st output at t=2); C joins (room 1); A reads its 4th
    #   (the last but one), C its 1st.
    # step 3: decode B (2nd output: ends at t=3); A and C have only their last token: split.
    # step 4: decode A (1st output, t=4) and C (1st and last, t=4); 2 decoding: no prompts (D waits).
    # step 5: decode A; D joins, reads 2. Step 6: decode A (3rd: ends t=6); D splits. Step 7: D's 1st.
    run, log, done = run_steps(MlxScheduler(10**6, decode_concurrency=2, prompt_concurrency=2, prefill_step_size=3),
                               [(0, 5, 3), (0, 1, 2), (0, 2, 1), (0.5, 3, 1)])  # fmt: skip
    assert log.steps == [{1: 0, 0: 3}, {1: 1, 0: 1, 2: 1}, {1: 1, 0: 0, 2: 0}, {0: 1, 2: 1}, {0: 1, 3: 2},
                         {0: 1, 3: 0}, {3: 1}]  # fmt: skip
    assert [(done[i].first_token_s, done[i].finished_s) for i in range(4)] == [(4, 6), (2, 3), (4, 4), (7, 7)]
    assert done[2].scheduled_s == 1 and done[3].scheduled_s == 4
    assert run.stalls == {"seqs": 4}  # steps 1-4 leave C or D waiting


def test_one_request_at_a_time_without_batching() -> None:
    # --kv-bits: generate_step. A (5, 3): 3 then 1 prompt tokens (all but the last, 3 a pass), the
    # last (1st output at t=3), 2 decodes (ends at t=5); B (1, 2) waits, then its only token (t=6), t=7.
    run, log, done = run_steps(MlxScheduler(10**6, batched=False, prefill_step_size=3), [(0, 5, 3), (0, 1, 2)])
    assert log.steps == [{0: 3}, {0: 1}, {0: 1}, {0: 1}, {0: 1}, {1: 1}, {1: 1}]
    assert [(done[i].first_token_s, done[i].finished_s) for i in range(2)] == [(3, 5), (6, 7)]
    assert run.stalls == {"seqs": 5}  # B waits through A's 5 steps


def test_nothing_is_refused() -> None:
    # No pool bounds the caches: a request longer than the memory's tokens still runs.
    assert MlxScheduler(100).refused(Request(0, 0, 1000, 1000)) is None


def test_the_engine_simulates_the_server() -> None:
    # Two requests of 4 + 2 at once, batched: step 1 reads both prompts' first 3 tokens, step 2
    # splits both, steps 3 and 4 decode both (1st and 2nd outputs): 4 steps.
    report = simulate("llama-3.1-8b", load=Load(rate=math.inf, count=2, prompt=4, output=2), engine="mlx",
                      kv_budget=2**30, step_times=StepTimes(1.0, 0.0))  # fmt: skip
    assert report.run.steps == 4
    assert [d.finished_s for d in report.run.done] == [4, 4]
    assert any(n.startswith("mlx_lm.server bounds no cache") for n in report.notes)
