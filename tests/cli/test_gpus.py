"""``kvcalc gpus``: the GPU presets --gpu takes (read from gpus.yaml), listed or shown one at a
time; their long list is named here rather than pasted into every --gpu help."""

from __future__ import annotations

import json

import pytest


def test_the_list_has_every_preset(run_cli) -> None:
    from kvcalc.gpus import GPUS

    result = run_cli("gpus", "--json")
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [row["name"] for row in rows] == [g.name for g in GPUS]


def test_the_table_fits_80_columns(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    result = run_cli("gpus")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    # H100 SXM: 85,017,755,648 B / 2^30 = 79.18 GiB; 3.35 TB/s; BF16 989.4 dense TFLOP/s; NVLink
    # 900 GB/s bidirectional = 450 each way.
    row = next(line for line in lines if "h100-sxm" in line)
    for cell in ("79.18 GiB", "3.35", "989.4", "nvlink 450"):
        assert cell in row, row


def test_one_preset_by_alias_with_its_sources(run_cli) -> None:
    result = run_cli("gpus", "rtx4090", "--json")
    assert result.exit_code == 0, result.stderr
    row = json.loads(result.stdout)
    # torch total_memory=24563MB: 24,563 x 2^20 = 24,563,000,000 + 24,563 x 48,576 = 25,756,172,288 B.
    assert (row["name"], row["runtime_bytes"]) == ("rtx-4090", 25_756_172_288)
    assert "torch total_memory=24563MB" in row["source"]
    shown = run_cli("gpus", "m4-max-64gb").stdout
    assert "unified_bytes   68,719,476,736" in shown  # 64 x 2^30


def test_an_unknown_gpu_is_one_line(run_cli) -> None:
    result = run_cli("gpus", "h10")
    assert result.exit_code == 2
    assert result.stderr.startswith("kvcalc: error: unknown GPU 'h10'; did you mean h100-sxm")
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_refused_name_points_at_the_list_and_names_the_argument(run_cli) -> None:
    # A name like no preset's would paste some 50 presets into one line: the command that lists
    # them is named instead. Under `kvcalc gpus` the name is the NAME argument, not fit's --gpu.
    far = run_cli("gpus", "zzz")
    assert far.exit_code == 2 and far.stderr == "kvcalc: error: unknown GPU 'zzz'; 'kvcalc gpus' lists them\n"
    shared = run_cli("gpus", "a100")  # the A100 comes in 40 and 80 GB
    assert shared.stderr == "kvcalc: error: NAME 'a100' comes in several memory sizes: choose a100-40gb or a100-80gb\n"
    fit = run_cli("fit", "llama-3.1-8b", "--gpu", "zzz")
    assert fit.stderr == "kvcalc: error: unknown GPU 'zzz'; 'kvcalc gpus' lists them (or give --gpu-memory SIZE)\n"
    assert run_cli("fit", "llama-3.1-8b", "--gpu", "a100").stderr.startswith("kvcalc: error: --gpu 'a100' comes")
