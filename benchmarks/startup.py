"""Start-up time of the ``kvcalc`` command against a bare ``import typer, rich``.

What it measures: the whole-process wall time (``time.perf_counter`` around ``subprocess.run``)
of a fresh interpreter running::

    python -m kvcalc estimate PRESET --tokens 32k

and, when the ``kvcalc`` console script sits next to ``sys.executable``, of ``kvcalc estimate
PRESET --tokens 32k``, compared with the floor any typer + rich CLI pays::

    python -c "import typer, rich"

After two warm-up runs of each command the runs are interleaved (baseline, kvcalc, console
script, baseline, ...) so that a slow spell of the machine hits every command alike. The report
gives the median and the minimum of each command and the ratio of the medians; the goal is a
ratio below 1.5, i.e. kvcalc adds less than half again the cost of importing its CLI framework.

Run it from the repository root with the project's virtual environment active::

    python benchmarks/startup.py               # 15 interleaved runs of each command
    python benchmarks/startup.py --runs 30 --preset qwen3-8b --json

It always exits 0: it is a benchmark, not a test (tests/test_startup.py guards the imports).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

GOAL_RATIO = 1.5
WARMUP_RUNS = 2


def _commands(preset: str) -> dict[str, list[str]]:
    """The commands to time, by label; the baseline comes first."""
    args = ["estimate", preset, "--tokens", "32k"]
    commands = {
        "baseline": [sys.executable, "-c", "import typer, rich"],
        "python -m kvcalc": [sys.executable, "-m", "kvcalc", *args],
    }
    script = Path(sys.executable).with_name("kvcalc.exe" if os.name == "nt" else "kvcalc")
    if script.is_file() and os.access(script, os.X_OK):
        commands["kvcalc script"] = [str(script), *args]
    return commands


def _time_once(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, env=env, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        stderr = proc.stderr.decode(errors="replace").strip()
        raise RuntimeError(f"{' '.join(command)} exited {proc.returncode}: {stderr}")
    return elapsed


def measure(commands: dict[str, list[str]], runs: int) -> dict[str, list[float]]:
    """Wall times in seconds per label: warm-ups first (discarded), then interleaved runs."""
    env = {**os.environ, "COLUMNS": "160"}
    for command in commands.values():
        for _ in range(WARMUP_RUNS):
            _time_once(command, env)
    times: dict[str, list[float]] = {label: [] for label in commands}
    for _ in range(runs):
        for label, command in commands.items():
            times[label].append(_time_once(command, env))
    return times


def summarise(times: dict[str, list[float]]) -> dict[str, object]:
    """Median and minimum per command (milliseconds) and each command's ratio of medians."""
    base = statistics.median(times["baseline"])
    results: dict[str, dict[str, float]] = {}
    for label, samples in times.items():
        median = statistics.median(samples)
        results[label] = {
            "median_ms": round(median * 1000, 2),
            "min_ms": round(min(samples) * 1000, 2),
            "ratio": round(median / base, 3),
        }
    worst = max(r["ratio"] for label, r in results.items() if label != "baseline")
    return {
        "runs": len(times["baseline"]),
        "python": sys.version.split()[0],
        "results": results,
        "goal_ratio": GOAL_RATIO,
        "goal_met": worst < GOAL_RATIO,
    }


def _print_table(summary: dict[str, object], preset: str) -> None:
    results = summary["results"]
    assert isinstance(results, dict)
    print(f"kvcalc start-up: {summary['runs']} interleaved runs, preset {preset}, Python {summary['python']}")
    print(f"{'command':<20}{'median ms':>12}{'min ms':>10}{'ratio':>8}")
    for label, r in results.items():
        print(f"{label:<20}{r['median_ms']:>12.1f}{r['min_ms']:>10.1f}{r['ratio']:>8.2f}")
    verdict = "met" if summary["goal_met"] else "NOT met"
    print(f"goal (ratio of medians < {GOAL_RATIO}): {verdict}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=15, help="timed runs per command (default 15)")
    parser.add_argument("--preset", default="llama-3.1-8b", help="preset to estimate (default llama-3.1-8b)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    try:
        summary = summarise(measure(_commands(args.preset), max(args.runs, 1)))
    except (RuntimeError, OSError) as exc:
        print(f"startup benchmark failed: {exc}", file=sys.stderr)
        return 0
    summary["preset"] = args.preset
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_table(summary, args.preset)
    return 0


if __name__ == "__main__":
    sys.exit(main())
