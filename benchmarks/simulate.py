"""``kvcalc simulate`` on 10,000 requests, against a floor measured in the same run.

What it measures: the wall time of the simulation itself (``kvcalc.calc.simulate.simulate``: the
scheduler, the steps, every request's timeline) for 10,000 requests of 1,024 + 256 tokens arriving
at 20 a second (Poisson, seeded) on Llama 3.1 8B under vLLM on an H100, the pool and the step costs
built once beforehand (they are fit's and speed's, timed elsewhere). The floor: a plain Python loop
that touches every output token of those requests once (2.56 M increments) — what any simulation
that looked at each token would at least cost. Goal (issue 40): about a second on this machine
(2 cores), and the ratio to the floor it reports.

Measured here (2 shared cores, medians of 3, each beside the commit before it, b4239b5, in the same
session, six pairs), vLLM's prefix caching on as it is by default: 1.00-1.11 s, 17-19x its floor
of 0.06 s (before: 2.94-3.15 s, 49-57x, its block pool tracking every block by id), 24,077 steps of
which 15,692 are built one by one; with prefix caching off, the same within the noise (0.96-1.04 s).
Every request's TTFT and end to end are identical to before's.
Where the time goes now, about equally: vLLM's schedule, the step loop and the fast-forward's
checks (each a pass over ~110 running requests a step), then speed's step cost (~7 us a shape).

    python benchmarks/simulate.py             # 3 runs each, medians
    python benchmarks/simulate.py --runs 5

It always exits 0: a benchmark, not a test (tests/calc/test_simulate.py holds what the simulator
must do).
"""

from __future__ import annotations

import argparse
import statistics
import time

from kvcalc import api
from kvcalc.api._serving import as_serving
from kvcalc.api._simulate import _arrivals, _scheduler, _speed_step_time
from kvcalc.calc import simulate as sim

REQUESTS, PROMPT, OUTPUT, RATE = 10_000, 1024, 256, 20.0


def floor() -> float:
    start = time.perf_counter()
    tokens = [0] * REQUESTS
    for _ in range(OUTPUT):
        for i in range(REQUESTS):
            tokens[i] += 1
    return time.perf_counter() - start


def simulation() -> tuple[float, int]:
    serving = as_serving(None, engine="vllm")
    notes: list[str] = []
    scheduler, _, _, _ = _scheduler("llama-3.1-8b", "h100", serving, 1, PROMPT + OUTPUT, None, None, None)
    step_time, handling = _speed_step_time("llama-3.1-8b", "h100", serving, 1, notes)
    load = api.Load(rate=RATE, count=REQUESTS, prompt=PROMPT, output=OUTPUT)
    arrivals = _arrivals(load, [(PROMPT, OUTPUT)])
    start = time.perf_counter()
    run = sim.simulate(arrivals, scheduler, step_time, timeline=False, handling_s=handling)
    return time.perf_counter() - start, run.steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    floors = [floor() for _ in range(args.runs)]
    runs = [simulation() for _ in range(args.runs)]
    seconds = statistics.median(s for s, _ in runs)
    base = statistics.median(floors)
    print(f"floor (2.56 M token increments)   {base:.3f} s")
    print(f"simulate (10,000 requests)        {seconds:.3f} s, {runs[0][1]:,} steps")
    print(f"ratio to the floor                {seconds / base:.2f}x  (goal: about 1 s on 2 cores)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
