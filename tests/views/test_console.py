"""The console the views draw on (kvcalc.views.console): every line fits 80 columns, piped or in a
real terminal, and no colour when asked for none."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.llama_cpp import needs_llama_cpp

WIDE_COMMANDS = [
    "estimate llama-3.1-8b --tokens 32k --batch 8",
    "estimate llama-3.1-8b --explain",
    "estimate gpt-oss-120b --tokens 128k --explain",
    "estimate qwen3-next-80b-a3b --tokens 256k --units binary",
    "estimate nemotron-h-8b --explain --engine vllm --tp 2",
    "estimate deepseek-v3 --engine vllm --vs-theoretical",
    "estimate llama-3.1-8b --engine llama.cpp --k-dtype q8_0 --explain",
    "estimate deepseek-v4-flash --explain",
    "estimate gemma-2-9b --tokens 128k",
    "compare llama-3.1-8b",
    "compare llama-3.1-8b --tokens " + ",".join(f"{k}k" for k in range(1, 41)),
    "compare llama-3.1-8b mistral-7b-v0.1 gpt-oss-20b qwen3-next-80b-a3b deepseek-v2-lite --tokens 4k,32k,128k "
    "--kv-dtype bf16,fp8 --chart",
    "fit llama-3.1-8b --gpu h100 --tokens 32k",
    "fit llama-3.1-70b --gpu a100-40gb --tokens 8k",
    "fit gemma-2-9b --gpu h100 --tokens 16k",
    "fit deepseek-v3 --gpu h200 --gpus 8 --engine vllm",
    "fit llama-3.1-8b --gpu rtx-4090 --engine llama.cpp --gpu-layers auto",
    "speed llama-3.1-8b --gpu h100 --prompt 1024 --output 128",
    "speed deepseek-v3 --gpu h200 --tp 8 --prompt 1024 --output 128",
    "presets",
    "presets show llama-3.1-8b",
]


def _too_wide(text: str, width: int) -> list[str]:
    from rich.cells import cell_len

    return [line for line in text.splitlines() if cell_len(line) > width]


@pytest.mark.parametrize("command", WIDE_COMMANDS)
def test_every_line_fits_80_columns(run_cli, monkeypatch, command: str) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    result = run_cli(*command.split())
    assert result.exit_code == 0, result.stderr
    assert _too_wide(result.stdout, 80) == []


@needs_llama_cpp
def test_the_llama_cpp_probe_fits_80_columns(run_cli, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    result = run_cli("probe", "nemotron-h-8b", "--tokens", "64", "--engine", "llama.cpp")
    assert result.exit_code == 0, result.stderr
    assert "matches byte for byte" in result.stdout and _too_wide(result.stdout, 80) == []


def test_piped_output_with_no_terminal_is_80_wide() -> None:
    # No COLUMNS and no terminal on any stream (the test's pipes): a default terminal's width.
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run([sys.executable, "-m", "kvcalc", "presets"], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert _too_wide(proc.stdout, 80) == [] and max(len(line) for line in proc.stdout.splitlines()) > 60


def test_a_preset_name_is_never_wrapped(run_cli, monkeypatch) -> None:
    from kvcalc.inputs.presets import load_presets

    monkeypatch.setenv("COLUMNS", "80")
    text = run_cli("presets").stdout
    for name in load_presets():
        assert any(f"│ {name} " in line or f"| {name} " in line for line in text.splitlines()), name


def test_no_color_after_the_command(run_cli) -> None:
    result = run_cli("estimate", "llama-3.1-8b", "--no-color")
    assert result.exit_code == 0, result.stderr
    assert "\x1b[" not in result.stdout


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_a_real_80x24_terminal(tmp_path: Path) -> None:
    # tmux gives the command a real terminal of 80 x 24: the width comes from the terminal itself.
    session = f"kvcalc-{os.getpid()}"
    out = tmp_path / "screen.txt"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TMUX")}
    command = f"{shlex.quote(sys.executable)} -m kvcalc fit llama-3.1-8b --gpu h100 --tokens 32k > {out}.tty 2>&1; " \
              f"{shlex.quote(sys.executable)} -m kvcalc estimate llama-3.1-8b --tokens 32k | cat > {out}"  # fmt: skip
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "80", "-y", "24", "sh", "-c",
                    command + "; sleep 30"], env=env, check=True, timeout=30)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and out.stat().st_size) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False, timeout=30)
    piped = out.read_text()
    assert "total" in piped and _too_wide(piped, 80) == []  # piped, with the terminal on stderr
    assert _too_wide(Path(f"{out}.tty").read_text(), 80) == []
