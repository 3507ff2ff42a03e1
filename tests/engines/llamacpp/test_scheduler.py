"""llama-server's slots (engines/llamacpp/scheduler.py, from tools/server/server-context.cpp at
llama.cpp 0c1e570) on small scenarios derived by hand: a stub step of 1 s, so every time is a
step count; and against the real llama-server's replays under load
(tests/fixtures/servers/llama-server-0c1e570/load-*/, its README says how they were made)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest

from kvcalc.api import Load, StepTimes, simulate
from kvcalc.calc.simulate import Request
from kvcalc.engines.llamacpp.scheduler import LlamaServerScheduler
from kvcalc.errors import UsageError
from tests.helpers.paths import FIXTURES
from tests.helpers.step_log import run_steps

SERVER = FIXTURES / "servers" / "llama-server-0c1e570"


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


# --- the prompt cache (server-context.cpp get_available_slot and update_slots at 0c1e570) ----------------

GROUP = [(0, 8)] * 4  # four requests of group 0, each prompt's first 8 tokens shared


def test_a_slot_that_held_the_group_reads_only_the_suffix() -> None:
    # 2 slots, prompts of 10 (8 shared) + 2 out. A at 0: no slot holds tokens, LRU, the last of
    # equals: slot 1; it reads 10 (step [0,1)), decodes 1 ([1,2)), ends at 2. B at 1: slot 1 busy,
    # slot 0 holds nothing (similarity 0), so slot 0: [1,2) feeds A's decode, then B's 10; B ends
    # at 3. Both slots hold group 0. C at 5: similarity 8/10 = 0.8 > 0.1 in both, the first of
    # equals: slot 0; n_past 8, it reads its 2 ([5,6)). D at 6: slot 1 (idle, 0.8): [6,7) C's
    # decode, D's 2; [7,8) D's decode. 2 x 8 tokens from the cache.
    scheduler = LlamaServerScheduler(2, 100, 512)
    _, log, done = run_steps(scheduler, [(0, 10, 2), (1, 10, 2), (5, 10, 2), (6, 10, 2)], GROUP)
    assert log.steps == [{0: 10}, {0: 1, 1: 10}, {1: 1}, {2: 2}, {2: 1, 3: 2}, {3: 1}]
    assert [done[i].finished_s for i in range(4)] == [2, 3, 7, 8]
    assert scheduler.hit_tokens == 16


def test_with_the_cache_off_every_prompt_is_read_whole() -> None:
    # cache_prompt false: n_past 0. The same run as above, C and D read their 10 each.
    scheduler = LlamaServerScheduler(2, 100, 512, prefix_caching=False)
    _, log, _ = run_steps(scheduler, [(0, 10, 2), (1, 10, 2), (5, 10, 2), (6, 10, 2)], GROUP)
    assert log.steps == [{0: 10}, {0: 1, 1: 10}, {1: 1}, {2: 10}, {2: 1, 3: 10}, {3: 1}]
    assert scheduler.hit_tokens == 0


def test_a_whole_prompt_in_the_cache_still_reads_its_last_token() -> None:
    # One slot, prompts of 8, all of it the shared prefix: B's n_past 8 is its whole prompt, so
    # n_past-- ("need to evaluate at least 1 token"): it reads 1 and samples its token.
    scheduler = LlamaServerScheduler(1, 100, 512)
    _, log, _ = run_steps(scheduler, [(0, 8, 1), (3, 8, 1)], [(0, 8), (0, 8)])
    assert log.steps == [{0: 8}, {1: 1}]
    assert scheduler.hit_tokens == 7


@pytest.mark.parametrize(("similarity", "steps", "hits"),
                         [(0.1, [{2: 2, 3: 2}], 16),  # by similarity: C slot 0 (group 1), D slot 1 (group 0)
                          (0.0, [{3: 10, 2: 10}], 0)])  # LRU only: C slot 1 (group 0), D slot 0 (group 1)  # fmt: skip
def test_a_slot_is_chosen_by_prompt_similarity_else_least_recently_used(similarity: float,
                                                                      steps: list[dict[int, int]],
                                                                      hits: int) -> None:  # fmt: skip
    # 2 slots. A (group 0, 10 + 1) takes slot 1 (LRU, last of equals), B (group 1, 10 + 3) slot 0;
    # A is released first (t=1), then B (t=3). C (group 1) and D (group 0) come at 5. With
    # slot_prompt_similarity 0.1 C takes slot 0, whose tokens share its 8 (0.8), D slot 1: each
    # reads 2, in slot order. With 0 (--slot-prompt-similarity 0) C takes the slot used longest
    # ago, slot 1 (group 0: nothing shared), D slot 0 (group 1): each reads 10, D first (slot 0).
    scheduler = LlamaServerScheduler(2, 100, 512, similarity=similarity)
    _, log, _ = run_steps(scheduler, [(0, 10, 1), (0, 10, 3), (5, 10, 1), (5, 10, 1)],
                          [(0, 8), (1, 8), (1, 8), (0, 8)])  # fmt: skip
    assert log.steps[:3] == [{1: 10, 0: 10}, {1: 1}, {1: 1}]
    assert log.steps[3:] == steps
    assert scheduler.hit_tokens == hits


def test_a_group_short_of_the_similarity_threshold_goes_by_lru() -> None:
    # Prompts of 100, 8 shared: 8 / 100 = 0.08, not over 0.1. A (group 0, + 1) in slot 1 ends at
    # t=1, B (group 0, + 3) in slot 0 at t=3. C (group 0) at 5 takes slot 1 (LRU), which held group 0:
    # it reads 92, n_past 8 all the same.
    scheduler = LlamaServerScheduler(2, 200, 512)
    _, log, _ = run_steps(scheduler, [(0, 100, 1), (0, 100, 3), (5, 100, 1)], [(0, 8)] * 3)
    assert log.steps[3:] == [{2: 92}]
    assert scheduler.hit_tokens == 8


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


# --- the real llama-server under load ----------------------------------------------------------------


def _replay(case: str, slots: int) -> tuple[dict[int, Any], list[dict[str, Any]]]:
    """The case's requests as the client sent them, simulated on the slots with the step times the
    same binary's calibration measured (load-calibration/calibration.json: a + b x tokens + c x
    decode context a step, d the HTTP handling); engine llama.cpp, -np N without -kvu: a stream of
    512 cells a slot, as the server ran (-c 512 x N); the prompt cache off, as the client asked
    (cache_prompt false)."""
    c = json.loads((SERVER / "load-calibration" / "calibration.json").read_text())["coefficients"]
    times = StepTimes(c["a_s"], c["b_s_per_token"], c["c_s_per_kv_token"], c["d_request_overhead_s"])
    results = json.loads((SERVER / case / "results.json").read_text())["results"]
    trace = tuple((r["send_s"], r["prompt_tokens"], r["completion_tokens"]) for r in results)
    load = Load(trace=trace, batch=slots, prefix_caching=False)
    report = simulate(str(SERVER / "load-model-config.json"), engine="llama.cpp", kv_budget=16 * 2**20,
                      max_model_len=512, step_times=times, load=load)  # fmt: skip
    assert "prefix caching off, as asked" in report.notes  # the client sent cache_prompt false (README)
    assert report.run.pool_units == slots * 512 and not report.run.refused
    return {d.request.id: d for d in report.run.done}, results


def _busy_at_arrival(spans: list[tuple[float, float]], slots: int) -> set[int]:
    """The requests that found every slot busy: as many earlier requests as slots still unfinished
    when they came (first come, first served: those hold the slots or are ahead in the queue)."""
    return {i for i, (start, _) in enumerate(spans)
            if sum(1 for s, e in spans[:i] if s < start < e) >= slots}  # fmt: skip


def _p(values: list[float], q: float) -> float:
    from kvcalc.calc.simulate import percentile

    return percentile(sorted(values), q)


@pytest.mark.parametrize(("case", "slots", "waiters", "also"), [("load-np2", 2, {5, 14, 15}, {7}),
                                                               ("load-np4", 4, set(range(4, 24)), set())])  # fmt: skip
def test_the_replay_matches_the_real_servers_latencies(case: str, slots: int, waiters: set[int],
                                                       also: set[int]) -> None:  # fmt: skip
    # The engine's own clock (server-context.cpp update_slots / get_timings at 0c1e570): prompt_ms
    # runs from the slot's start on the task to its first token, predicted_ms from there to the
    # last. So the wait for a slot plus the HTTP handling is (end - send) - (prompt_ms +
    # predicted_ms), TTFT (end - send) - predicted_ms, E2E end - send. The README's table: p50 and
    # p90 TTFT and E2E within 15% (measured: within 4% on load-np2, 7% on load-np4).
    done, results = _replay(case, slots)
    wall = [r["end_s"] - r["send_s"] for r in results]
    ttft = [w - r["predicted_ms"] / 1e3 for w, r in zip(wall, results, strict=True)]
    queue = [t - r["prompt_ms"] / 1e3 for t, r in zip(ttft, results, strict=True)]
    simulated = [done[r["id"]] for r in results]
    for measured, model in ((ttft, [d.ttft_s for d in simulated]), (wall, [d.e2e_s for d in simulated])):
        for q in (50, 90):
            assert _p(model, q) == pytest.approx(_p(measured, q), rel=0.15)
    # Who waited for a slot: on the server (the client's send and end) and in the simulation
    # (arrival and finish) the same requests, but in load-np2 the simulation also keeps id 7
    # waiting 11 ms: it ends id 4 (M 111, the longest output) 39 ms late (E2E 320 ms, measured 281),
    # just after id 7 comes. How long the measured waiters waited in all: within 15%.
    assert _busy_at_arrival([(r["send_s"], r["end_s"]) for r in results], slots) == waiters
    assert _busy_at_arrival([(d.request.arrival_s, d.finished_s) for d in simulated], slots) == waiters | also
    waited = sum(queue[i] for i in waiters)
    assert sum(simulated[i].queue_s for i in waiters) == pytest.approx(waited, rel=0.15)


def _launch_order(case: str, results: list[dict[str, Any]]) -> list[int]:
    """The requests in the order the server's slots took them (slots.log's ``launch_slot_ ...
    processing task`` lines), each task known by its prompt tokens and prompt time (its
    ``print_timing`` line, as the reply's timings give them)."""
    lines = (SERVER / case / "slots.log").read_text().splitlines()
    tasks = [int(m[1]) for line in lines if (m := re.search(r"task (\d+) \| processing task", line))]
    timing = {int(m[1]): (int(m[3]), float(m[2])) for line in lines
              if (m := re.search(r"task (\d+) \| prompt eval time = +([\d.]+) ms / +(\d+) tokens", line))}  # fmt: skip
    by_timing = {(r["prompt_tokens"], round(r["prompt_ms"], 2)): r["id"] for r in results}
    return [by_timing[timing[t]] for t in tasks]


def test_the_slots_take_requests_first_come_first_served() -> None:
    # server-queue.cpp pop_deferred_task at 0c1e570: each release puts the first deferred task back at
    # the front of the queue. load-np2's 16 requests were taken in the order they were sent, as the
    # simulator takes them (every request scheduled no earlier than the one sent before it).
    done, results = _replay("load-np2", 2)
    assert _launch_order("load-np2", results) == list(range(16))
    starts = [done[i].scheduled_s for i in range(16)]
    assert starts == sorted(starts)


def test_past_the_http_threads_the_order_is_the_thread_pools() -> None:
    # -np 4: llama-server starts max(np + 2, cores - 1) = 6 HTTP threads (tools/server/server.cpp,
    # n_threads_http), and a non-streamed request holds one until its reply: up to 10 requests
    # waited in cpp-httplib's pool before the task queue, and three adjacent pairs reached it the
    # other way round (README). Each was still taken within one place of its turn.
    _, results = _replay("load-np4", 4)
    order = _launch_order("load-np4", results)
    assert sorted(order) == list(range(24))
    assert [i for i, request in enumerate(order) if request != i] == [12, 13, 16, 17, 20, 21]
    assert all(abs(request - i) <= 1 for i, request in enumerate(order))
