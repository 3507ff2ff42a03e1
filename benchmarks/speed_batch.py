"""`kvcalc speed` at huge batches: the sums over a batch's requests are in closed form (issue 36).

Before, the mean TTFT looped over every request (~8 us each: ``--batch 1000000000`` ran 10
minutes). Each row is one ``kvcalc.speed`` call on llama-3.1-8b, prompt 1,024, output 256, on an
H100, best of 5 (the model opened once, so each call pays the steps alone):

==============  ===========================================  =====================
label           what                                         goal
==============  ===========================================  =====================
batch-1         ``batch=1, sweep=[]``                         the floor
batch-1e9       ``batch=10**9, sweep=[]``                     under 2 x the floor
sweep-1e9       ``batch=1, sweep=[10**9]``: two rows           under 3 x the floor
batch-1e9-moe   deepseek-v3, tp 8, ``batch=10**9``             under 1 s
==============  ===========================================  =====================

    python benchmarks/speed_batch.py

It always exits 0: a benchmark, not a test.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def best(call: Callable[[], object], rounds: int = 5) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    import kvcalc

    llama = kvcalc.open_model("llama-3.1-8b")
    deepseek = kvcalc.open_model("deepseek-v3")

    def run(model: object, **kwargs: object) -> Callable[[], object]:
        args = {"prompt": 1024, "output": 256, "gpu": "h100-sxm", "sweep": [], **kwargs}
        return lambda: kvcalc.speed(model, **args)  # type: ignore[arg-type]

    floor = best(run(llama, batch=1))
    rows = {
        "batch-1": (floor, floor),
        "batch-1e9": (best(run(llama, batch=10**9)), 2 * floor),
        "sweep-1e9": (best(run(llama, batch=1, sweep=[10**9])), 3 * floor),
        "batch-1e9-moe": (best(run(deepseek, batch=10**9, tp=8)), 1.0),
    }
    for label, (seconds, goal) in rows.items():
        verdict = "met" if seconds <= goal else "NOT met"
        print(f"{label:<14} {seconds * 1e3:9.2f} ms  goal {goal * 1e3:9.2f} ms  {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
