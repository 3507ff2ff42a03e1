"""``kvcalc fit``'s view: the budget block fits a default terminal, numbers whole, for a Mac (the
README's own example, whose MLX runtime label is 63 characters) and for a GPU under vLLM."""

from __future__ import annotations

import pytest

# The README's "Macs and MLX" example: Qwen3 32B at 4-bit on a 64 GB M4 Max.
MAC = ["fit", "qwen3-32b", "--engine", "mlx", "--gpu", "m4-max-64gb", "--tokens", "32k", "--weights", "18428694336"]
GPU = ["fit", "llama-3.1-70b", "--engine", "vllm", "--gpu", "h100-sxm", "--tp", "4", "--tokens", "32k"]


@pytest.mark.parametrize("argv", [MAC, GPU], ids=["mac-mlx", "h100-vllm"])
def test_fit_fits_80_columns(run_cli, monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    result = run_cli(*argv)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, "\n".join(line for line in lines if len(line) > 80)


@pytest.mark.parametrize("columns", [40, 60])
@pytest.mark.parametrize("argv", [MAC, GPU], ids=["mac-mlx", "h100-vllm"])
def test_the_budget_narrows_with_the_screen(
    run_cli, monkeypatch: pytest.MonkeyPatch, argv: list[str], columns: int
) -> None:
    """The budget was laid out for 80 columns whatever the screen: at 40 its figures were wrapped to
    column 44 ('85,017,755,648' alone on a 58-character line). Each figure stands whole beside its
    binary size within the width."""
    monkeypatch.setenv("COLUMNS", str(columns))
    result = run_cli(*argv)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    budget = lines[2 : next(i for i, line in enumerate(lines) if line.startswith("max tokens"))]
    assert max(len(line) for line in budget) <= columns, "\n".join(budget)
    for figure in ("51,539,607,552  48 GiB", "18,428,694,336  17.16 GiB") if argv is MAC else ():
        assert any(line.strip().endswith(figure) for line in budget), figure


def test_budget_keeps_each_figure_on_its_line(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each budget figure stands whole beside its binary size, however long its label: the wired
    limit of a 64 GB Mac is 3/4 of 64 GiB = 51,539,607,552 B = 48 GiB; the weights as given,
    18,428,694,336 B = 17.16 GiB; MLX's assumed 1 GiB stands under its 63-character label."""
    monkeypatch.setenv("COLUMNS", "80")
    lines = run_cli(*MAC).stdout.splitlines()
    assert 64 * 2**30 * 3 // 4 == 51_539_607_552
    assert any(line.split() == ["GPU", "memory", "51,539,607,552", "48", "GiB"] for line in lines), lines
    assert any(line.split() == ["-", "weights", "18,428,694,336", "17.16", "GiB"] for line in lines), lines
    label = next(i for i, line in enumerate(lines) if "activations of a prefill step" in line)
    assert lines[label + 1].split() == ["1,073,741,824", "1", "GiB"], lines[label : label + 2]
    # The figures stand in one column: each ends where the others do.
    budget = [line for line in lines if line.startswith(("  GPU memory", "  x wired", "  - weights", "  = KV"))]
    assert len(budget) == 4, lines
    ends = {len(line) - len(line.rstrip().rsplit("  ", 1)[1]) - 2 for line in [*budget, lines[label + 1]]}
    assert len(ends) == 1, ends


def test_fit_huge_budget_says_at_least(run_cli) -> None:
    args = ("fit", "llama-3.1-8b", "--kv-budget", "1000000TB", "--no-context-cap")
    data = run_cli(*args, "--json").json()
    # 10^18 bytes / 131,072 B per token = 7,629,394,531,250 tokens; the context search stops at 2^40.
    assert data["max_tokens"] == 10**18 // 131_072 == 7_629_394_531_250
    assert data["max_context"] == 2**40 and data["max_context_capped"] is True
    text = run_cli(*args).stdout
    assert "at least 1,099,511,627,776 tokens" in text
    assert "windowed" not in text


def test_fit_nothing_fits_says_so(run_cli) -> None:
    # 1,000,000 B / 131,072 B per token = 7 tokens: not one 4,096-token request.
    data = run_cli("fit", "llama-3.1-8b", "--kv-budget", "1MB", "--json").json()
    assert data["fits"] is False and data["max_concurrency"] == 0 and data["max_tokens"] == 7
    assert "nothing fits" in run_cli("fit", "llama-3.1-8b", "--kv-budget", "1MB").stdout


@pytest.mark.parametrize(
    ("units", "budget", "need"),
    [
        # 10GB = 10 x 10^9 B; decimal: 10 GB. Binary: 10^10 / 2^30 = 9.3132 -> 9.31 GiB.
        ("decimal", "10 GB", "536.87 MB"),
        ("binary", "9.31 GiB", "512 MiB"),
        ("both", "9.31 GiB / 10 GB", "512 MiB / 536.87 MB"),
    ],
)
def test_the_budget_honours_units(run_cli, units: str, budget: str, need: str) -> None:
    """fit accepted --units and its budget and verdict printed binary sizes whatever it said.
    Llama 3.1 8B, 4,096 tokens: 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 B (bf16) = 131,072 B
    a token, x 4,096 = 536,870,912 B = 512 MiB = 536.87 MB."""
    result = run_cli("fit", "llama-3.1-8b", "--kv-budget", "10GB", "--tokens", "4096", "--units", units)
    assert result.exit_code == 0, result.stderr
    assert f"10,000,000,000  {budget}\n" in result.stdout
    assert f"need 536,870,912 B ({need})" in result.stdout
