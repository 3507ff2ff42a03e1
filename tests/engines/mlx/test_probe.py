"""``kvcalc probe --engine mlx``: flags that do not apply are refused before anything runs; with
mlx-lm's Python (KVCALC_MLX_PYTHON or .venv-mlx) a real run agrees layer by layer."""

from __future__ import annotations

import pytest

from tests.conftest import assert_one_line_error
from tests.engines.mlx.test_mlx_conformance import PYTHON, needs_mlx


@pytest.mark.parametrize("flag", [["--block-size", "16"], ["--kv-budget", "1GiB"], ["--kv-dtype", "fp16"],
                                  ["--batch", "2"], ["--ubatch", "64"]])  # fmt: skip
def test_flags_of_other_probes_are_refused(run_cli, flag: list[str]) -> None:
    result = run_cli("probe", "qwen3-8b", "--engine", "mlx", *flag)
    assert result.exit_code == 2
    assert_one_line_error(result, flag[0], "mlx-lm probe")


def test_mlx_flags_are_refused_under_other_probes(run_cli) -> None:
    result = run_cli("probe", "qwen3-8b", "--kv-bits", "4")
    assert result.exit_code == 2
    assert_one_line_error(result, "--kv-bits", "--engine mlx")


def test_no_mlx_python_is_one_line(run_cli, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("KVCALC_MLX_PYTHON", str(tmp_path / "missing"))
    result = run_cli("probe", "qwen3-8b", "--engine", "mlx")
    assert result.exit_code == 2
    assert_one_line_error(result, "KVCALC_MLX_PYTHON", "is not a file")


@needs_mlx
def test_a_real_run_matches(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    assert PYTHON is not None
    monkeypatch.setenv("KVCALC_MLX_PYTHON", PYTHON)
    # Gemma 3 with its windows set to 200: 298 prompt tokens + 2 generated. Sliding layers ring at
    # 200 slots, the full layer holds 512 (299 -> 512 in one 256-step growth).
    result = run_cli("probe", "gemma-3-27b", "--engine", "mlx", "--tokens", "300", "--window", "200", "--json")
    assert result.exit_code == 0, result.stderr
    data = result.json()
    assert data["match"] is True
    row = 2 * 16 * 128 * 2
    assert data["measured_bytes"] == (7 * 200 + 1 * 512) * row


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--window", "5"), "--window applies to --engine mlx (the mlx-lm probe)"),
        (("--window", "5", "--kv-bits", "4"), "--kv-bits, --window apply to --engine mlx (the mlx-lm probe)"),
        (("--engine", "mlx", "--print-request"), "--print-request does not apply to the mlx-lm probe"),
        (("--engine", "mlx", "--print-request", "--batch", "2"), "--print-request, --batch do not apply to the mlx"),
    ],
)
def test_the_mlx_flag_refusals_agree_in_number(run_cli, flags: tuple[str, ...], message: str) -> None:
    """One flag 'applies' ('--window apply to' before), several 'apply'."""
    result = run_cli("probe", "llama-3.1-8b", *flags)
    assert result.exit_code == 2 and message in result.stderr
