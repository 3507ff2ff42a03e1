"""llama-server's slots (engines/llamacpp/scheduler.py, from tools/server/server-context.cpp at
llama.cpp 0c1e570) on small scenarios derived by hand: a stub step of 1 s, so every time is a
step count."""

from __future__ import annotations

import math

import pytest

from kvcalc.api import Load, StepTimes, simulate
from kvcalc.calc.simulate import Request
from kvcalc.engines.llamacpp.scheduler import LlamaServerScheduler
from kvcalc.errors import UsageError
from tests.helpers.step_log import run_steps


def test_slots_take_requests_least_recently_used_last_of_equals() -> None:
    # 2 slots, n_batch 8. A and B arrive together: A takes slot 1 (both unused, t_last_used -1:
    # the last of equals), B slot 0. Step 1 reads prompts in slot order: B's 6, then A's 2 (the
    # batch's 8). B's first token at t=1; step 2: B decodes (1), A's last 4 (first token t=2).
    run, log, done = run_steps(LlamaServerScheduler(2, 100, 8), [(0, 6, 2), (0, 6, 2)])
    assert log.steps == [{1: 6, 0: 2}, {1: 1, 0: 4}, {0: 1}]
    assert (done[1].first_token_s, done[1].finished_s) == (1, 2)
    assert (done[0].first_token_s, done[0].finished_s) == (2, 3)
    assert run.steps == 3


def test_a_freed_slot_goes_to_the_next_request_by_lru() -> None:
    # A (2, 1) in slot 1 ends at t=1, B (2, 2) in slot 0 at t=2. C and D arrive at t=5: C takes
    # slot 1 (released first), D slot 0, so with n_batch 6 D's prompt of 4 is read first, C gets 2.
    run, log, done = run_steps(LlamaServerScheduler(2, 100, 6), [(0, 2, 1), (0, 2, 2), (5, 4, 1), (5, 4, 1)])
    assert log.steps == [{1: 2, 0: 2}, {1: 1}, {3: 4, 2: 2}, {2: 2}]
    assert (done[3].finished_s, done[2].finished_s) == (6, 7)
    assert run.makespan_s == 7  # idle from t=2 until the arrivals at t=5


def test_a_request_waits_first_come_first_served_for_a_slot() -> None:
    # One slot: B and C wait ("seqs", steps 1-3) for A's end, then run in turn.
    run, log, done = run_steps(LlamaServerScheduler(1, 100, 512), [(0, 2, 2), (0, 2, 1), (0, 2, 1)])
    assert log.steps == [{0: 2}, {0: 1}, {1: 2}, {2: 2}]
    assert [done[i].scheduled_s for i in range(3)] == [0, 2, 3]
    assert run.stalls == {"seqs": 3}
    assert run.preemptions == 0


def test_requests_over_the_slot_context_are_refused() -> None:
    # A slot of 100: a prompt of 100 is "exceeds the available context size"; 60 + 41 would stop
    # at the slot's context (ctx_shift off): 60 + 40 runs whole.
    scheduler = LlamaServerScheduler(2, 100, 512)
    assert "exceeds the available context size" in (scheduler.refused(Request(0, 0, 100, 1)) or "")
    assert "cut its output" in (scheduler.refused(Request(0, 0, 60, 41)) or "")
    assert scheduler.refused(Request(0, 0, 60, 40)) is None


def test_a_full_unified_cache_fails_the_run() -> None:
    # Two slots of 100 share 10 cells: two prompts of 6 need 12.
    with pytest.raises(UsageError, match="Context size has been exceeded"):
        run_steps(LlamaServerScheduler(2, 100, 16, unified_cells=10), [(0, 6, 2), (0, 6, 2)])


@pytest.mark.parametrize("engine", ["llama-server", "llama.cpp"])
def test_the_engine_simulates_its_slots(engine: str) -> None:
    # fit's workload is the server: batch 1 (-np 1), tokens = max_model_len 300, so n_ctx =
    # pad(300, 256) = 512 cells, one slot of 512 (unified, or its own stream of pad(512 / 1, 256)).
    # Three requests of 100 + 10 at once, one at a time: 1 prefill + 9 decode steps each.
    report = simulate("llama-3.1-8b", load=Load(rate=math.inf, count=3, prompt=100, output=10), engine=engine,
                      kv_budget=2**30, max_model_len=300, step_times=StepTimes(1.0, 0.0))  # fmt: skip
    assert report.run.pool_units == 512
    assert report.run.steps == 30
    assert any(n.startswith("llama-server's slots: -np 1 -c 512") for n in report.notes)


def test_an_engine_bundling_llama_cpp_keeps_the_default_scheduler() -> None:
    report = simulate("llama-3.1-8b", load=Load(rate=math.inf, count=1, prompt=100, output=10), engine="ollama",
                      kv_budget=2**30, max_model_len=300, step_times=StepTimes(1.0, 0.0))  # fmt: skip
    assert any("kvcalc has no model of its scheduler" in n for n in report.notes)
