"""The core's speed: one API estimate, a sweep of lengths, and a wide table, each beside a floor.

What it measures, and against which floor (measured in the same run, so a slow machine moves
both):

============  =============================================================  ==================  =====
label         what                                                           floor               goal
============  =============================================================  ==================  =====
api-8b        ``kvcalc.estimate(opened, tokens=T)``, llama-3.1-8b, per call  call floor          10 us
api-120b      the same for gpt-oss-120b (two groups: full and sliding)       call floor          15 us
sweep-json    ``kvcalc compare llama-3.1-8b --tokens <10,000> --json``       typer+rich          0.3 s
table-60      ``kvcalc compare llama-3.1-8b --tokens <60> --kv-dtype bf16,   +table              0.5 s
              fp8,q4_0`` drawn at 80 columns
============  =============================================================  ==================  =====

The call floor is a plain Python function taking ``estimate``'s keyword arguments and returning
one of them: what any call with that signature costs. ``typer+rich`` and ``+table`` are fresh
interpreters importing ``typer, rich`` (and ``rich.console, rich.table``), the least a CLI built on
them pays to start. Goals are absolute (the issue's), ratios say how far from the floor each is.
The API timings are the best of 7 rounds of 2,000 calls at different lengths, in this process;
the commands the median of ``--runs`` interleaved runs after a warm-up, by default with a fresh
non-editable install of the checkout made as ``startup.py`` makes it (byte-compiled, as users
get it; an editable checkout may compile every module on every run), ``--here`` with this
environment's ``python -m kvcalc``. ``sweep-json`` also reports, in-process, the share of its
time spent writing the JSON.

Request files (``--lengths``) are measured by ``benchmarks/lengths.py``; start-up alone by
``benchmarks/startup.py``. Run from the repository root::

    python benchmarks/core.py            # 7 runs of each command
    python benchmarks/core.py --runs 15 --json
    python benchmarks/core.py --here      # this environment's kvcalc, as installed

It always exits 0: a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

GOALS = {"api-8b": 10e-6, "api-120b": 15e-6, "sweep-json": 0.3, "table-60": 0.5}
SWEEP = ",".join(str(t) for t in range(1, 10_001))
TABLE = ",".join(str(t) for t in range(1000, 60_001, 1000))


def _floor_call(
    model: object,
    *,
    tokens: int | None = None,
    prompt: int | None = None,
    output: int | None = None,
    batch: int = 1,
    kv_dtype: object = None,
    engine: object = None,
    options: object = None,
    serving: object = None,
    tp: int = 1,
    pp: int = 1,
    dp: int = 1,
    layout: object = None,
    shared_prefix: int = 0,
) -> int | None:
    return tokens


def _per_call(call: Callable[[int], object], rounds: int = 7, calls: int = 2000) -> float:
    """Best seconds per call over ``rounds`` rounds of ``calls`` calls (each at its own length)."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for i in range(calls):
            call(1000 + i)
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def api_figures() -> dict[str, dict[str, float]]:
    import kvcalc

    floor = _per_call(lambda t: _floor_call("m", tokens=t))
    results = {}
    for label, name in (("api-8b", "llama-3.1-8b"), ("api-120b", "gpt-oss-120b")):
        opened = kvcalc.open_model(name)
        kvcalc.estimate(opened, tokens=1)  # the first call compiles
        seconds = _per_call(lambda t, m=opened: kvcalc.estimate(m, tokens=t))  # type: ignore[misc]
        results[label] = {"seconds": seconds, "floor_seconds": floor, "ratio": seconds / floor}
    return results


def json_share() -> float:
    """In-process: the share of the sweep's time spent turning its document into text."""
    from kvcalc.cli import main
    from kvcalc.views import json_text

    spent = 0.0
    dumps = json_text.dumps

    def timed(data: Any) -> str:
        nonlocal spent
        start = time.perf_counter()
        text = dumps(data)
        spent += time.perf_counter() - start
        return text

    json_text.dumps = timed
    try:
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            main(["compare", "llama-3.1-8b", "--tokens", SWEEP, "--json"])
        whole = time.perf_counter() - start
    finally:
        json_text.dumps = dumps
    return spent / whole


def _time_once(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, env=env, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])} ... exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
    return elapsed


def command_figures(runs: int, python: str) -> dict[str, dict[str, float]]:
    commands = {
        "typer+rich": [python, "-c", "import typer, rich"],
        "+table": [python, "-c", "import typer, rich.console, rich.table"],
        "sweep-json": [python, "-m", "kvcalc", "compare", "llama-3.1-8b", "--tokens", SWEEP, "--json"],
        "table-60": [python, "-m", "kvcalc", "compare", "llama-3.1-8b", "--tokens", TABLE, "--kv-dtype",
                     "bf16,fp8,q4_0"],
    }  # fmt: skip
    env = {**os.environ, "COLUMNS": "80"}
    env.pop("NO_COLOR", None)
    for command in commands.values():
        _time_once(command, env)  # warm-up: bytecode and the page cache
    times: dict[str, list[float]] = {label: [] for label in commands}
    for _ in range(runs):
        for label, command in commands.items():
            times[label].append(_time_once(command, env))
    medians = {label: statistics.median(samples) for label, samples in times.items()}
    floors = {"sweep-json": "typer+rich", "table-60": "+table"}
    return {
        label: {"seconds": medians[label], "floor_seconds": medians[floor], "ratio": medians[label] / medians[floor]}
        for label, floor in floors.items()
    }


def _install(into: Path) -> Path:
    """startup.py's fresh non-editable install of the checkout; its python."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from startup import install

    return install(into)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="interleaved runs of each command (default 7)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--here", action="store_true", help="run this environment's kvcalc, not a fresh install")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kvcalc-core-") as folder:
        python = sys.executable if args.here else str(_install(Path(folder)))
        figures = {**api_figures(), **command_figures(args.runs, python)}
    share = json_share()
    for label, entry in figures.items():
        entry["goal_seconds"] = GOALS[label]
        entry["meets_goal"] = entry["seconds"] <= GOALS[label]
    figures["sweep-json"]["json_writing_share"] = share
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    for label, entry in figures.items():
        unit, scale = ("us", 1e6) if label.startswith("api") else ("s", 1.0)
        print(
            f"{label:<11} {entry['seconds'] * scale:8.3f} {unit}  floor {entry['floor_seconds'] * scale:8.3f} {unit}"
            f"  x{entry['ratio']:5.2f}  goal {GOALS[label] * scale:g} {unit}"
            f"  {'met' if entry['meets_goal'] else 'NOT met'}"
        )
    print(f"sweep-json writes its JSON in {share:.0%} of its in-process time")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
