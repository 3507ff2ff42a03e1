"""Reading a request mix: ``kvcalc estimate MODEL --lengths FILE --json`` on a million requests
(and, with ``--big``, 25 million), against what reading such a file costs at all.

What it measures: the whole-process wall time and peak RSS of a fresh interpreter running each
command below on the same generated file. Each command runs under a tiny ``python -c`` wrapper
that starts it with ``subprocess.run`` and prints the child's wall time (``time.perf_counter``
around the run) and ``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` (the wrapper's own start-up
and memory are not counted):

==========  ==================================================================  ==================
label       command                                                             goal
==========  ==================================================================  ==================
csv         ``python -c "for row in csv.reader(open(F, newline='')): pass"``    (time floor)
import      ``python -c "import kvcalc"``                                       (memory floor)
kvcalc      ``python -m kvcalc estimate llama-3.1-8b --lengths F --json``       see below
==========  ==================================================================  ==================

Goals, absolute: 1 M requests in < 1.5 s and < 100 MB; 25 M in < 30 s and < 150 MB (memory that
does not grow with the requests). The report gives each figure and its ratio to the floor of its
kind measured in the same run (kvcalc's time / csv's, kvcalc's RSS / import's).

The files: a ``prompt,output`` header, then random lengths (prompt uniform in 1..8,192, output in
1..2,048, seeded), ~9.3 bytes a row: 1 M rows ~9 MB, 25 M ~235 MB, written to a temporary folder
that is removed afterwards. ``--distinct`` adds a file at kvcalc's bound on distinct lengths
(calc.requests.MAX_LENGTHS: one request of each length 1..MAX_LENGTHS), its worst case for memory
(and slow: every distinct length is one estimate, ~40 us each).

Run it from the repository root with the project's virtual environment active::

    python benchmarks/lengths.py               # 1 M requests, 3 runs of each command
    python benchmarks/lengths.py --big         # and 25 M (~250 MB of disk, about a minute a run)
    python benchmarks/lengths.py --runs 5 --json

The median wall time and the largest RSS of the runs are reported. It always exits 0: it is a
benchmark, not a test (tests/calc/test_requests.py holds what the reader must do).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
from itertools import chain
from pathlib import Path

PRESET = "llama-3.1-8b"
# file -> (seconds, MB): the goals for kvcalc's whole process
GOALS = {"1 M": (1.5, 100), "25 M": (30.0, 150)}
# Runs a command, then prints its wall time in seconds and its peak RSS in KiB (bytes on macOS).
WRAPPER = (
    "import resource, subprocess, sys, time\n"
    "start = time.perf_counter()\n"
    "proc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
    "elapsed = time.perf_counter() - start\n"
    "if proc.returncode:\n"
    "    sys.exit(proc.stderr.decode(errors='replace')[-2000:] or f'exit {proc.returncode}')\n"
    "print(elapsed, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
)
CSV_FLOOR = "import csv, sys\nfor row in csv.reader(open(sys.argv[1], newline='', encoding='utf-8')):\n    pass\n"
_ROWS_AT_ONCE = 1_000_000


def write_mix(path: Path, requests: int, seed: int = 0) -> int:
    """A CSV of ``requests`` random prompt,output rows; its size in bytes."""
    rng = random.Random(seed)
    prompts = [b"%d," % n for n in range(1, 8193)]
    outputs = [b"%d\n" % n for n in range(1, 2049)]
    with path.open("wb") as handle:
        handle.write(b"prompt,output\n")
        for start in range(0, requests, _ROWS_AT_ONCE):
            k = min(_ROWS_AT_ONCE, requests - start)
            rows = zip(rng.choices(prompts, k=k), rng.choices(outputs, k=k), strict=True)
            handle.write(b"".join(chain.from_iterable(rows)))
    return path.stat().st_size


def write_distinct(path: Path) -> int:
    """One request of each length 1..MAX_LENGTHS: the most distinct lengths kvcalc sizes."""
    from kvcalc.calc.requests import MAX_LENGTHS

    with path.open("wb") as handle:
        handle.write(b"tokens\n")
        for start in range(1, MAX_LENGTHS + 1, _ROWS_AT_ONCE):
            stop = min(start + _ROWS_AT_ONCE, MAX_LENGTHS + 1)
            handle.write(b"".join(b"%d\n" % n for n in range(start, stop)))
    return path.stat().st_size


def run_once(command: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of ``command`` in a fresh process."""
    proc = subprocess.run([sys.executable, "-c", WRAPPER, *command], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:6])} ... failed: {proc.stderr.strip()[-2000:]}")
    seconds, maxrss = proc.stdout.split()
    rss_bytes = int(maxrss) if sys.platform == "darwin" else int(maxrss) * 1024
    return float(seconds), rss_bytes / 1e6


def measure(path: Path, runs: int) -> dict[str, dict[str, float]]:
    """Median wall time and largest RSS of each command on ``path``, the runs interleaved."""
    commands = {
        "csv": [sys.executable, "-c", CSV_FLOOR, str(path)],
        "import": [sys.executable, "-c", "import kvcalc"],
        "kvcalc": [sys.executable, "-m", "kvcalc", "estimate", PRESET, "--lengths", str(path), "--json"],
    }
    samples: dict[str, list[tuple[float, float]]] = {label: [] for label in commands}
    for _ in range(runs):
        for label, command in commands.items():
            samples[label].append(run_once(command))
    return {
        label: {"seconds": statistics.median(s for s, _ in got), "rss_mb": max(m for _, m in got)}
        for label, got in samples.items()
    }


def report(label: str, requests: int, size: int, figures: dict[str, dict[str, float]]) -> dict[str, object]:
    kv, csv_floor, import_floor = figures["kvcalc"], figures["csv"], figures["import"]
    entry: dict[str, object] = {
        "file": label,
        "requests": requests,
        "file_mb": round(size / 1e6, 1),
        "seconds": round(kv["seconds"], 3),
        "rss_mb": round(kv["rss_mb"], 1),
        "csv_seconds": round(csv_floor["seconds"], 3),
        "import_rss_mb": round(import_floor["rss_mb"], 1),
        "time_ratio": round(kv["seconds"] / csv_floor["seconds"], 2),
        "rss_ratio": round(kv["rss_mb"] / import_floor["rss_mb"], 2),
    }
    if label in GOALS:
        seconds, megabytes = GOALS[label]
        entry |= {"goal_seconds": seconds, "goal_rss_mb": megabytes,
                  "goal_met": kv["seconds"] < seconds and kv["rss_mb"] < megabytes}  # fmt: skip
    return entry


def _print_entry(e: dict[str, object]) -> None:
    print(f"{e['file']}: {e['requests']:,} requests, {e['file_mb']} MB")
    goal_s = f"   goal < {e['goal_seconds']} s" if "goal_seconds" in e else ""
    goal_m = f"   goal < {e['goal_rss_mb']} MB" if "goal_rss_mb" in e else ""
    floor_s, floor_m = f"csv.reader ({e['csv_seconds']:.3f} s)", f"import kvcalc ({e['import_rss_mb']:.1f} MB)"
    print(f"  wall  {e['seconds']:>8.3f} s   = {e['time_ratio']:>5.2f} x {floor_s}{goal_s}")
    print(f"  RSS   {e['rss_mb']:>8.1f} MB  = {e['rss_ratio']:>5.2f} x {floor_m}{goal_m}")
    if "goal_met" in e:
        print(f"  goals {'met' if e['goal_met'] else 'NOT met'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3, help="runs of each command per file (default 3)")
    parser.add_argument("--big", action="store_true", help="also 25 M requests (~250 MB of temporary disk)")
    parser.add_argument("--distinct", action="store_true", help="also a file at the bound on distinct lengths")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    entries = []
    try:
        with tempfile.TemporaryDirectory(prefix="kvcalc-lengths-") as folder:
            files: list[tuple[str, int, Path, int]] = []
            for requests in [1_000_000] + ([25_000_000] if args.big else []):
                path = Path(folder) / f"mix-{requests}.csv"
                files.append((f"{requests // 1_000_000} M", requests, path, write_mix(path, requests)))
            if args.distinct:
                from kvcalc.calc.requests import MAX_LENGTHS

                path = Path(folder) / "distinct.csv"
                files.append((f"{MAX_LENGTHS:,} distinct", MAX_LENGTHS, path, write_distinct(path)))
            for label, requests, path, size in files:
                entry = report(label, requests, size, measure(path, max(args.runs, 1)))
                entries.append(entry)
                if not args.json:
                    _print_entry(entry)
                path.unlink()
    except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as exc:
        print(f"lengths benchmark failed: {exc}", file=sys.stderr)
        return 0
    if args.json:
        print(json.dumps({"python": sys.version.split()[0], "preset": PRESET, "results": entries}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
