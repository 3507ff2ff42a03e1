"""The command line's process contract (kvcalc.cli.app): exit statuses, interrupts, closed and full
output streams, and errors that never echo a huge input."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error


def _interrupt(*_args: object, **_kwargs: object) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["estimate", "llama-3.1-8b"], 0),
        (["--help"], 0),
        ([], 0),  # no command: the help, as a question answered
        (["--version"], 0),
        (["estimate", "llama-3.1-8b", "--tokens", "lots"], 2),  # a bad value
        (["estimate", "llama-3.1-8b", "--no-such-flag"], 2),  # click's usage error
        (["no-such-command"], 2),
        (["estimate", "no-such-preset-xyz"], 1),  # nothing by that name
        (["estimate", "llama-3.1-8b", "--engine", "nope"], 2),
        (["fit", "llama-3.1-8b", "--kv-budget", "1GB", "--tokens", "8k", "--max-model-len", "4k"], 2),
        (["compare", "llama-3.1-8b", "--latent-dim", "-5"], 2),
    ],
)
def test_exit_status(run_cli, argv: list[str], code: int) -> None:
    assert run_cli(*argv).exit_code == code


@pytest.mark.parametrize(
    ("argv", "target"),
    [
        (["estimate", "llama-3.1-8b"], "kvcalc.api._estimate.compile_plan"),
        (["compare", "llama-3.1-8b"], "kvcalc.calc.compare.compare"),
        (["fit", "llama-3.1-8b", "--kv-budget", "10GB"], "kvcalc.calc.fit.fit"),
        (["presets"], "kvcalc.inputs.presets.load_presets"),
    ],
)
def test_ctrl_c_exits_130_saying_aborted(run_cli, monkeypatch, argv: list[str], target: str) -> None:
    # typer turns KeyboardInterrupt into Exit(130) and, outside standalone mode, *returns* 130;
    # kvcalc used to drop that return value and exit 0.
    monkeypatch.setattr(target, _interrupt)
    result = run_cli(*argv)
    assert result.exit_code == 130
    assert result.stderr.strip() == "kvcalc: aborted"
    assert result.stdout == ""


def test_real_sigint_exits_130(tmp_path: Path) -> None:
    # A real Ctrl-C at an arbitrary point of a run that takes a while: 130, one line, no traceback.
    lengths = tmp_path / "mix.csv"
    # Six million requests (48 MB) keep the streamed reader busy for seconds past start-up.
    with lengths.open("w") as mix:
        mix.write("prompt,output\n")
        for _ in range(6):
            mix.write("1000,24\n" * 1_000_000)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvcalc", "estimate", "llama-3.1-8b", "--lengths", str(lengths), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    if proc.returncode == 0:  # finished before the signal on a fast machine: nothing to judge
        pytest.skip("the run ended before the interrupt")
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "kvcalc: aborted"
    assert "Traceback" not in err


def _shell(command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=60, check=False, env={**os.environ}
    )


def test_closed_stdout_is_one_line() -> None:
    proc = _shell(f"'{sys.executable}' -m kvcalc estimate llama-3.1-8b >&-")
    assert proc.returncode == 1
    assert proc.stderr.strip() == "kvcalc: error: standard output is closed"


def test_full_stdout_is_one_line() -> None:
    proc = _shell(f"'{sys.executable}' -m kvcalc estimate llama-3.1-8b --json >/dev/full")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines == ["kvcalc: error: cannot write to standard output: No space left on device"], proc.stderr


def test_closed_stderr_keeps_the_exit_status() -> None:
    proc = _shell(f"'{sys.executable}' -m kvcalc estimate no-such-preset-xyz 2>&-")
    assert proc.returncode == 1
    assert proc.stdout == ""


def test_broken_pipe_is_quiet() -> None:
    proc = _shell(f"'{sys.executable}' -m kvcalc compare llama-3.1-8b --tokens 1k,2k,4k,8k,16k,32k | head -c 10")
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["estimate", "llama-3.1-8b", "--tokens", "9" * 401],
        ["estimate", "llama-3.1-8b", "--kv-dtype", "x" * 1_000_000],
        ["estimate", "x" * 100_000],
    ],
)
def test_errors_do_not_echo_huge_input(run_cli, argv: list[str]) -> None:
    line = assert_one_line_error(run_cli(*argv))
    assert len(line) <= 420
