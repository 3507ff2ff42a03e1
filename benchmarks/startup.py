"""Start-up time of an installed ``kvcalc`` against the imports any typer + rich CLI pays.

What it measures: the whole-process wall time (``time.perf_counter`` around ``subprocess.run``)
of a fresh interpreter running each command below, with its output piped (so no colour):

=============  ==========================================================  ===============  =======
label          command                                                     compared with    goal
=============  ==========================================================  ===============  =======
typer+rich     ``python -c "import typer, rich"``                          (baseline)
+table         ``python -c "import typer, rich.console, rich.table"``      (baseline)
json           ``kvcalc estimate PRESET --tokens 32k --json``              typer+rich       <= 1.25
table          ``kvcalc estimate PRESET --tokens 32k``                     +table           <= 1.3
=============  ==========================================================  ===============  =======

``--json`` never imports rich, so it answers to the bare framework import; the table is drawn
with rich.console and rich.table, so it answers to the framework plus those two.

Where kvcalc runs: by default a **non-editable install** made for the run, as users get it. The
checkout is built into a wheel (``pip wheel --no-deps --no-build-isolation``: hatchling and
PyYAML must be installed, no network is used), installed with ``pip --python`` into a fresh
virtual environment in a temporary folder, which pip byte-compiles and which finds typer, rich
and the other dependencies through a ``.pth`` file naming this environment's site-packages. An
editable install is slower for a reason users never meet: it may run without cached bytecode
(``PYTHONDONTWRITEBYTECODE``) and reads the presets' YAML instead of the wheel's pre-parsed
JSON. ``--here`` times this environment's ``kvcalc`` instead (editable or not). The baselines
run with the same interpreter as kvcalc.

After two warm-up runs of each command the runs are interleaved (typer+rich, +table, json,
table, typer+rich, ...) so that a slow spell of the machine hits every command alike. The report
gives the median and the minimum of each command and each kvcalc command's ratio of medians to
its baseline.

Run it from the repository root with the project's virtual environment active::

    python benchmarks/startup.py               # 15 interleaved runs of each command
    python benchmarks/startup.py --runs 30 --preset qwen3-8b --json
    python benchmarks/startup.py --here        # this environment's kvcalc, as installed

It always exits 0: it is a benchmark, not a test (tests/test_startup.py guards the imports, and
tests/test_views.py that ``--json`` loads no rich).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WARMUP_RUNS = 2
# label -> (baseline label, goal for the ratio of medians)
GOALS = {"json": ("typer+rich", 1.25), "table": ("+table", 1.3)}


def _script(python: Path) -> Path:
    return python.with_name("kvcalc.exe" if os.name == "nt" else "kvcalc")


def _commands(python: Path, preset: str) -> dict[str, list[str]]:
    """The commands to time, by label; the baselines first."""
    script = _script(python)
    if not (script.is_file() and os.access(script, os.X_OK)):
        raise RuntimeError(f"no kvcalc console script beside {python}")
    args = [str(script), "estimate", preset, "--tokens", "32k"]
    return {
        "typer+rich": [str(python), "-c", "import typer, rich"],
        "+table": [str(python), "-c", "import typer, rich.console, rich.table"],
        "json": [*args, "--json"],
        "table": args,
    }


def _run(command: list[str], what: str) -> None:
    proc = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()[-2000:]}")


def install(into: Path) -> Path:
    """Build the checkout's wheel and install it, without network, into a new virtual
    environment under ``into`` whose dependencies are this environment's; its python."""
    wheels = into / "wheel"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    _run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(wheels), str(ROOT)], "pip wheel")
    (wheel,) = wheels.glob("kvcalc-*.whl")
    venv = into / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], "python -m venv")
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    probe = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    ours = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (Path(site) / "kvcalc-benchmark-deps.pth").write_text("\n".join(ours) + "\n", encoding="utf-8")
    _run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)], "pip install")
    return python


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
    env.pop("NO_COLOR", None)  # piped output has no colour anyway; keep the environment neutral
    for command in commands.values():
        for _ in range(WARMUP_RUNS):
            _time_once(command, env)
    times: dict[str, list[float]] = {label: [] for label in commands}
    for _ in range(runs):
        for label, command in commands.items():
            times[label].append(_time_once(command, env))
    return times


def summarise(times: dict[str, list[float]]) -> dict[str, object]:
    """Median and minimum per command (milliseconds); each kvcalc command's ratio of medians to
    its baseline, and whether it meets its goal."""
    medians = {label: statistics.median(samples) for label, samples in times.items()}
    results: dict[str, dict[str, object]] = {}
    for label, samples in times.items():
        entry: dict[str, object] = {
            "median_ms": round(medians[label] * 1000, 2),
            "min_ms": round(min(samples) * 1000, 2),
        }
        if label in GOALS:
            baseline, goal = GOALS[label]
            ratio = medians[label] / medians[baseline]
            entry |= {"baseline": baseline, "ratio": round(ratio, 3), "goal": goal, "goal_met": ratio <= goal}
        results[label] = entry
    return {
        "runs": len(next(iter(times.values()))),
        "python": sys.version.split()[0],
        "results": results,
        "goal_met": all(r.get("goal_met", True) for r in results.values()),
    }


def _print_table(summary: dict[str, object], preset: str, where: str) -> None:
    results = summary["results"]
    assert isinstance(results, dict)
    print(f"kvcalc start-up: {summary['runs']} interleaved runs, preset {preset}, Python {summary['python']}, {where}")
    print(f"{'command':<12}{'median ms':>11}{'min ms':>9}   ratio of medians")
    for label, r in results.items():
        ratio = ""
        if "ratio" in r:
            verdict = "met" if r["goal_met"] else "NOT met"
            ratio = f"   {r['ratio']:.2f} x {r['baseline']} (goal <= {r['goal']}: {verdict})"
        print(f"{label:<12}{r['median_ms']:>11.1f}{r['min_ms']:>9.1f}{ratio}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=15, help="timed runs per command (default 15)")
    parser.add_argument("--preset", default="llama-3.1-8b", help="preset to estimate (default llama-3.1-8b)")
    parser.add_argument("--here", action="store_true", help="time this environment's kvcalc, not a fresh install")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    try:
        with tempfile.TemporaryDirectory(prefix="kvcalc-startup-") as folder:
            python = Path(sys.executable) if args.here else install(Path(folder))
            where = "this environment" if args.here else "a fresh non-editable install"
            summary = summarise(measure(_commands(python, args.preset), max(args.runs, 1)))
    except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as exc:
        print(f"startup benchmark failed: {exc}", file=sys.stderr)
        return 0
    summary |= {"preset": args.preset, "install": where}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_table(summary, args.preset, where)
    return 0


if __name__ == "__main__":
    sys.exit(main())
