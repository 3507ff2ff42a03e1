"""Hardening, round 3 (issue 20): what a newcomer's and an adversarial run of kvcalc found, each
with the check that failed before its fix."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kvcalc import api
from kvcalc.calc.requests import Request
from kvcalc.errors import SourceError, UsageError
from tests.conftest import assert_one_line_error, fixture_config
from tests.helpers.gguf_files import typed_gguf_file
from tests.helpers.gguf_models import with_nextn
from tests.helpers.llama_cpp import needs_llama_cpp

# --- K and V formats: a K type alone leaves V at the engine's default ---------------------------------

# Llama-3.1-8B at 1,000 tokens in llama.cpp: 1,024 cells (n_ctx padded to 256), 32 layers, 8 KV
# heads x 128 dims = 1,024 elements per row. K q8_0: 32 blocks of 34 B = 1,088 B; V f16: 2,048 B.
LLAMA8B_Q8_K_F16_V = (1_088 + 2_048) * 32 * 1_024
assert LLAMA8B_Q8_K_F16_V == 102_760_448


def test_k_dtype_alone_leaves_v_at_the_engine_default_in_estimate() -> None:
    est = api.estimate("llama-3.1-8b", tokens=1000, serving=api.Serving(engine="llama.cpp", k_dtype="q8_0"))
    assert est.kv_dtype.name == "q8_0" and est.v_dtype is not None and est.v_dtype.name == "fp16"
    assert est.total_bytes == LLAMA8B_Q8_K_F16_V
    assert any("V format not given: fp16" in n for n in est.notes)


def test_k_dtype_alone_in_the_theoretical_engine_keeps_v_in_the_model_dtype() -> None:
    # 32 layers x 8 heads x 128 dims: K int8 isn't plain, so use fp8 for K: 1,024 B, V bf16 2,048 B
    est = api.estimate("llama-3.1-8b", tokens=1000, serving=api.Serving(k_dtype="fp8"))
    assert est.v_dtype is not None and est.v_dtype.name == "bf16"
    assert est.total_bytes == (1_024 + 2_048) * 32 * 1_000


def test_v_dtype_alone_leaves_k_at_the_engine_default() -> None:
    est = api.estimate("llama-3.1-8b", tokens=1000, serving=api.Serving(engine="llama.cpp", v_dtype="q8_0"))
    assert est.kv_dtype.name == "fp16" and est.total_bytes == LLAMA8B_Q8_K_F16_V


def test_kv_dtype_with_k_dtype_sets_v_from_kv_dtype() -> None:
    est = api.estimate(
        "llama-3.1-8b", tokens=1000, serving=api.Serving(engine="llama.cpp", kv_dtype="q4_0", k_dtype="q8_0")
    )
    assert est.v_dtype is not None and est.v_dtype.name == "q4_0"
    assert est.total_bytes == (1_088 + 32 * 18) * 32 * 1_024


def test_k_dtype_alone_in_fit_and_offload() -> None:
    report = api.fit(
        "llama-3.1-8b",
        tokens=1000,
        serving=api.Serving(engine="llama.cpp", k_dtype="q8_0"),
        capacity=api.Capacity(kv_budget=10**9),
    )
    assert report.workload.kv_dtype is not None and report.workload.kv_dtype.name == "q8_0"
    assert report.workload.v_dtype is not None and report.workload.v_dtype.name == "fp16"
    off = api.fit_offload("llama-3.1-8b", gpu_layers=33, gpu_memory=80 * 2**30, tokens=1000,
                          serving=api.Serving("llama.cpp", k_dtype="q8_0"))  # fmt: skip
    assert off.workload.v_dtype is not None and off.workload.v_dtype.name == "fp16"


def test_k_dtype_alone_on_the_command_line(run_cli) -> None:
    result = run_cli("estimate", "llama-3.1-8b", "--tokens", "1000", "--engine", "llama.cpp", "--k-dtype", "q8_0",
                     "--json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert result.json()["total_bytes"] == LLAMA8B_Q8_K_F16_V


@needs_llama_cpp
def test_k_dtype_alone_matches_the_real_llama_cpp() -> None:
    # llama.cpp 0c1e570 with -ctk q8_0 and no -ctv: V stays f16 (common/arg.cpp sets them apart)
    report = api.probe_llamacpp("llama-3.1-8b", tokens=1000, k_dtype="q8_0")
    assert report.request["type_k"] != report.request["type_v"]
    assert report.match, report.checks
    assert report.estimate.total_bytes == LLAMA8B_Q8_K_F16_V


# --- one checkpoint, one engine, one answer in every command ------------------------------------------

# Mamba-2.8B's checkpoint is float32: 11,073,382,400 B (the preset's weights); Gemma-2-9B's config
# says float32 too. Each engine decides once how it holds such a checkpoint (Engine.weights_dtype
# and model_dtype) and every command reads that decision.
MAMBA_FP32_BYTES = 11_073_382_400


@pytest.mark.parametrize(
    ("engine", "kv", "weights"),
    [
        ("theoretical", "fp32", MAMBA_FP32_BYTES),  # the checkpoint as its config stores it
        ("transformers", "fp32", MAMBA_FP32_BYTES),  # from_pretrained keeps float32
        ("vllm", "bf16", MAMBA_FP32_BYTES // 2),  # _resolve_auto_dtype: 16 bits
        ("sglang", "fp16", MAMBA_FP32_BYTES // 2),  # _get_and_verify_dtype: fp16 outside Gemma
        ("llama.cpp", "fp16", MAMBA_FP32_BYTES // 2),  # converted to a bf16 GGUF, cache f16
    ],
)
def test_a_float32_checkpoint_is_one_decision_per_engine(engine: str, kv: str, weights: int) -> None:
    est = api.estimate("mamba-2.8b", tokens=100, engine=engine)
    fit = api.fit("mamba-2.8b", gpu="h100", tokens=100, engine=engine, capacity=api.Capacity(overhead=0))
    speed = api.speed("mamba-2.8b", prompt=98, output=2, gpu="h100", sweep=[], engine=engine)
    weight_line = next(line for line in fit.budget.lines if line.label == "- weights")
    assert weight_line.bytes == speed.result.weights.total_bytes == weights
    assert est.kv_dtype.name == speed.kv_dtype.name == kv


@pytest.mark.parametrize("engine", ["theoretical", "vllm", "transformers", "llama.cpp"])
def test_gemma2_float32_reads_the_same_kv_format_in_estimate_and_speed(engine: str) -> None:
    est = api.estimate("gemma-2-9b", tokens=100, engine=engine)
    speed = api.speed("gemma-2-9b", prompt=98, output=2, gpu="h100", sweep=[], engine=engine)
    assert est.kv_dtype.name == speed.kv_dtype.name


# --- --explain computes: every printed product equals its printed result ---------------------------

_PRODUCT = re.compile(r"^\s*([\d,\s x+()]+?) = ([\d,]+) bytes")


def _products(lines: list[str]) -> list[tuple[str, int]]:
    found = []
    for line in lines:
        m = _PRODUCT.match(line)
        if m and ("x" in m.group(1) or "+" in m.group(1)):
            found.append((m.group(1), int(m.group(2).replace(",", ""))))
    return found


def _evaluate(expression: str) -> int:
    text = expression.replace(",", "").replace("x", "*")
    assert re.fullmatch(r"[\d\s*+()]+", text), expression
    return int(eval(text))  # digits, *, + and parentheses only, checked above


ENGINES = ("theoretical", "transformers", "vllm", "sglang", "llama.cpp")


def test_every_explain_product_equals_its_result() -> None:
    from kvcalc.inputs.presets import load_presets
    from kvcalc.views.estimate import explain_lines

    checked = 0
    for name in load_presets():
        for engine in ENGINES:
            try:
                est = api.estimate(name, tokens=3000, batch=2, engine=engine)
            except Exception:  # an engine that does not run this model says so elsewhere
                continue
            for expression, result in _products(explain_lines(est, "both")):
                assert _evaluate(expression) == result, (name, engine, expression, result)
                checked += 1
    assert checked > 300


def test_nemotron_h_state_says_each_part_and_its_format(run_cli) -> None:
    # Nemotron-H 8B: 24 Mamba layers; conv 8,192 + 2 x 8 x 128 = 10,240 channels x (4 - 1) = 30,720
    # elements in bf16 and a recurrent state of 128 heads x 64 x 128 = 1,048,576 elements in fp32
    # (mamba_ssm_cache_dtype absent: NemotronHForCausalLMConfig's float32).
    per_seq = 30_720 * 2 + 1_048_576 * 4
    result = run_cli("estimate", "nemotron-h-8b", "--tokens", "2048", "--explain")
    assert result.exit_code == 0, result.stderr
    assert "conv 30,720 elements in bf16 + recurrent 1,048,576 elements in fp32" in result.stdout
    assert f"24 x 1 x (30,720 x 2 + 1,048,576 x 4) = {24 * per_seq:,} bytes" in result.stdout
    data = run_cli("estimate", "nemotron-h-8b", "--tokens", "2048", "--json").json()
    mamba = next(g for g in data["groups"] if g["kind"] == "mamba")
    assert mamba["dtype"] == "mixed" and mamba["state_bytes"] == per_seq
    assert mamba["state_parts"] == [
        {"part": "conv", "elements": 30_720, "dtype": "bf16"},
        {"part": "recurrent", "elements": 1_048_576, "dtype": "fp32"},
    ]


def test_a_group_with_k_and_v_apart_says_mixed(run_cli) -> None:
    data = run_cli("estimate", "llama-3.1-8b", "--engine", "llama.cpp", "--k-dtype", "q8_0", "--json").json()
    (group,) = data["groups"]
    assert (group["dtype"], group["k_dtype"], group["v_dtype"]) == ("mixed", "q8_0", "fp16")


# --- fit: one context rule; weights that do not fit are an answer -------------------------------------


def test_a_request_past_the_model_limit_is_capped_and_not_called_a_fit() -> None:
    # Gemma-2-9B: max_position_embeddings 8,192. Whatever --tokens says, max context stops there.
    for tokens in (16_384, 131_072):
        report = api.fit("gemma-2-9b", gpu="h100", tokens=tokens)
        assert report.result.max_context == 8_192, tokens
        assert report.verdict is not None and not report.verdict.fits
        assert report.verdict.reason is not None and "past the model's context limit" in report.verdict.reason
    within = api.fit("gemma-2-9b", gpu="h100", tokens=8_192)
    assert within.verdict is not None and within.verdict.fits
    uncapped = api.fit("gemma-2-9b", gpu="h100", tokens=16_384, capacity=api.Capacity(context_cap=False))
    assert uncapped.verdict is not None and uncapped.verdict.fits


def test_weights_that_do_not_fit_are_a_verdict_exit_0(run_cli) -> None:
    # Llama-3.1-70B: 141,107,412,992 B of weights; an A100 40GB (42,298,834,944 B) x 0.9 less the 2 GiB
    # runtime leaves 35,921,467,801 B: 141,107,412,992 // 35,921,467,801 + 1 = 4 GPUs leave anything;
    # tp 5, 6 and 7 do not split its 64 query heads, tp 4 leaves too little for 8k tokens, tp 8 fits.
    result = run_cli("fit", "llama-3.1-70b", "--gpu", "a100-40gb", "--tokens", "8k", "--json")
    assert result.exit_code == 0, result.stderr
    data = result.json()
    assert data["fits"] is False and data["verdict"]["fits"] is False
    assert data["kv_budget_bytes"] == 35_921_467_801 - 141_107_412_992
    assert data["verdict"]["first_remedy"] == "8 GPUs (--tp 8)"
    text = run_cli("fit", "llama-3.1-70b", "--gpu", "a100-40gb", "--tokens", "8k")
    assert text.exit_code == 0 and "first change 8 GPUs (--tp 8)" in text.stdout


def test_every_command_notes_a_length_past_the_model_limit_once() -> None:
    # Gemma-2-9B's max_position_embeddings is 8,192; 131,072 tokens is past it (a note, not an error)
    said = "131,072 tokens is past the model's context limit (max_position_embeddings 8,192)"
    est = api.estimate("gemma-2-9b", tokens=131_072)
    assert sum(said in n for n in est.notes) == 1
    comp = api.compare(["gemma-2-9b"], tokens=[4096, 131_072])
    assert sum(said in n for n in comp.notes) == 1
    speed = api.speed("gemma-2-9b", prompt=131_000, output=72, gpu="h100", sweep=[])
    assert sum(said in n for n in speed.notes) == 1
    mix = api.estimate_requests("gemma-2-9b", [Request(prompt=100, output=28), Request(prompt=131_000, output=72)])
    assert sum("1 request(s), the longest " + said in n for n in mix.notes) == 1
    assert not any("past the model's context limit" in n for n in api.estimate("gemma-2-9b", tokens=8192).notes)


# --- tracebacks and hangs ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400"])
@pytest.mark.parametrize("flag", ["--bandwidth-efficiency", "--flops-efficiency"])
def test_a_non_finite_efficiency_is_one_line_exit_2(run_cli, flag: str, value: str) -> None:
    result = run_cli("speed", "llama-3.1-8b", "--gpu", "h100", "--prompt", "10", "--output", "2", flag, value)
    assert result.exit_code == 2
    assert_one_line_error(result, f"{flag} must be in (0, 1]")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), True, "0.5"])
def test_the_api_refuses_a_non_finite_efficiency_with_its_own_error(value: object) -> None:
    with pytest.raises(UsageError, match="bandwidth_efficiency must be in"):
        api.speed("llama-3.1-8b", prompt=10, output=2, gpu="h100", compute=api.Compute(bandwidth_efficiency=value))  # type: ignore[arg-type]


@pytest.mark.parametrize("lengths", [20, 60, 120])
def test_splitting_a_wide_table_lays_out_linearly_in_its_columns(monkeypatch, lengths: int) -> None:
    # compare with 30-60 lengths took 13 s to minutes: every way to cut the columns was laid out.
    # Now one layout per column (greedy), one per table (the even share-out) and one per table drawn.
    from kvcalc.views import table

    calls = 0
    real = table.layout

    def counted(grid: table.Grid, width: int) -> table.Layout | None:
        nonlocal calls
        calls += 1
        return real(grid, width)

    monkeypatch.setattr(table, "layout", counted)
    columns = (table.Column("variant", right=False), *(table.Column(f"T={t:,}") for t in range(lengths)))
    rows = tuple(("GQA-8", *(f"{t:,} MiB / {t * 1.05:,.2f} MB (0.25x)" for t in range(lengths))) for _ in range(4))
    parts = table.split(table.Grid("title", columns, rows), 80)
    assert len(parts) > 1 and all(fitted is not None for _, fitted in parts)
    for g, fitted in parts:
        assert fitted is not None
        assert sum(fitted.widths) + 3 * len(g.columns) + 1 - (0 if fitted.pad_edge else 2) <= 80
    assert calls <= 1 + lengths + 3 * len(parts)


def test_a_deep_model_costs_its_layer_kinds_not_its_layers(monkeypatch, tmp_path: Path) -> None:
    # 65,536 layers took speed 60 s and fit 9 s: every step summed every layer. Llama-3.1-8B's
    # geometry at 65,536 layers: 65,536 x 2 x 8 x 128 x 2 B = 268,435,456 B per token.
    config = fixture_config("Llama-3.1-8B.json") | {"num_hidden_layers": 65_536}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    from kvcalc.engines.base import Engine

    rows = 0
    real = Engine.rows

    def counted(self: Engine, cache: object, tp: int) -> tuple[int, int, int | None]:
        nonlocal rows
        rows += 1
        return real(self, cache, tp)  # type: ignore[arg-type]

    monkeypatch.setattr(Engine, "rows", counted)
    est = api.estimate(str(path), tokens=10)
    assert est.per_token_bytes == 268_435_456 and est.total_bytes == 10 * 268_435_456
    assert rows <= 2  # one layer kind, asked once per batch size
    report = api.speed(str(path), prompt=100, output=2, gpu="h100", weights=10**12, sweep=[1, 2])
    assert report.result.prefill.kv_bytes == 100 * 268_435_456


# --- exit codes and accepted nonsense -----------------------------------------------------------------


def test_an_unreadable_lengths_file_exits_1_as_an_unreadable_model_does(run_cli, tmp_path: Path) -> None:
    missing = run_cli("estimate", "llama-3.1-8b", "--lengths", str(tmp_path / "none.csv"))
    assert missing.exit_code == 1
    assert_one_line_error(missing, "cannot read --lengths file")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert run_cli("estimate", "llama-3.1-8b", "--lengths", str(fifo)).exit_code == 1
    assert run_cli("estimate", str(tmp_path / "none.json")).exit_code == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("prompt,prompt\n1,2\n", "the field 'prompt' is given twice"),
        ("Prompt, prompt ,output\n1,2,3\n", "the field 'prompt' is given twice"),
        ("prompt,outptu\n10,20\n", "field 'outptu' is not one kvcalc reads (prompt, output, tokens)"),
        ("prompt,output\n1,2,3\n", "line 2: more values than the header has columns"),
        ('{"prompt": 5, "prompt": 7}\n', "line 1: the field 'prompt' is given twice"),
    ],
)
def test_a_lengths_file_that_reads_two_ways_is_refused(run_cli, tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "mix.csv"
    path.write_text(text)
    result = run_cli("estimate", "llama-3.1-8b", "--lengths", str(path))
    assert result.exit_code == 1
    assert_one_line_error(result, message)


def test_a_lengths_file_past_the_distinct_lengths_bound_stops_there(monkeypatch, tmp_path: Path) -> None:
    # Memory grows with the distinct lengths, not the requests: past MAX_LENGTHS the file is
    # refused in one line naming the bound (shrunk here to 1,000 so the test stays small).
    from kvcalc.calc import requests

    monkeypatch.setattr(requests, "MAX_LENGTHS", 1000)
    path = tmp_path / "mix.csv"
    path.write_text("prompt,output\n" + "".join(f"{n},1\n" for n in range(1, 1001)) + "5,5\n" * 50)
    assert api.estimate_requests("llama-3.1-8b", path).requests == 1050  # 1,000 distinct: at the bound
    path.write_text("prompt,output\n" + "".join(f"{n},1\n" for n in range(1, 1002)))
    with pytest.raises(SourceError) as info:
        api.estimate_requests("llama-3.1-8b", path)
    assert str(info.value) == (
        f"lengths file {path} holds more than 1,000 distinct request lengths (prompt + output), the most kvcalc sizes"
    )


def test_an_unwritable_plot_exits_1(run_cli, tmp_path: Path) -> None:
    result = run_cli("compare", "llama-3.1-8b", "--plot", str(tmp_path / "no" / "x.png"))
    assert result.exit_code == 1
    assert_one_line_error(result, "cannot write")


def test_ctrl_c_while_a_plot_is_written_leaves_no_file(run_cli, monkeypatch, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    def interrupted(self: Figure, out: Any, **kwargs: Any) -> None:
        out.write(b"\x89PNG half a chart")
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "savefig", interrupted)
    target = tmp_path / "x.png"
    result = run_cli("compare", "llama-3.1-8b", "--plot", str(target))
    assert result.exit_code == 130
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["estimate", "llama-3.1-8b", "--kv-dtype", "int4", "--quant-group", "1" + "0" * 26],
         "--quant-group is implausibly large"),
        (["estimate", "llama-3.1-8b", "--engine", "vllm", "--block-size", "1" + "0" * 26],
         "--block-size is implausibly large"),
        (["estimate", "llama-3.1-8b", "--engine", "llama.cpp", "--ubatch", "1" + "0" * 26], "--ubatch is implausibly"),
        (["fit", "llama-3.1-8b", "--gpu", "h100", "--weights", "0"], "--weights must be a positive size"),
        (["speed", "llama-3.1-8b", "--gpu", "h100", "--prompt", "9", "--output", "2", "--weights", "0"],
         "--weights must be a positive size"),
        (["probe", "llama-3.1-8b", "--engine", "llama.cpp", "--timeout", "nan"], "--timeout must be a finite number"),
        (["probe", "llama-3.1-8b", "--engine", "llama.cpp", "--timeout", "inf"], "--timeout must be a finite number"),
        (["probe", "llama-3.1-8b", "--timeout", "60"], "--timeout applies to the real engines' probes"),
        (["estimate", "llama-3.1-8b", "--engine", "vllm@"], "names no release after '@'"),
        (["estimate", "llama-3.1-8b", "--tokens", "1e26"], "--tokens is implausibly large"),
        (["estimate", "llama-3.1-8b", "--tokens", "9" * 5000], "--tokens is implausibly large"),
    ],
)  # fmt: skip
def test_nonsense_is_refused_in_one_line(run_cli, argv: list[str], message: str) -> None:
    result = run_cli(*argv)
    assert result.exit_code == 2
    assert_one_line_error(result, message)


def test_a_whole_number_in_e_notation_is_read_exactly() -> None:
    from kvcalc.units import parse_count

    assert parse_count("1e6", what="--tokens") == 1_000_000 and parse_count("2E+5", what="--tokens") == 200_000


def test_a_5000_digit_number_in_a_config_says_so_without_python_s_limit_text(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "num_hidden_layers": ' + "9" * 5000 + "}")
    result = run_cli("estimate", str(path))
    line = assert_one_line_error(result, "a number in it has thousands of digits")
    assert "set_int_max_str_digits" not in line and result.exit_code == 1


def test_a_model_type_without_rules_is_read_generically_with_a_note(tmp_path: Path) -> None:
    config = fixture_config("Llama-3.1-8B.json") | {"model_type": "totally_new_arch"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    est = api.estimate(str(path), tokens=1000)
    assert est.total_bytes == 1000 * 131_072  # Llama geometry, read generically
    assert any("model type 'totally_new_arch' has no rules of its own" in n for n in est.notes)


def test_no_preset_and_no_gguf_architecture_says_it_was_read_generically() -> None:
    from kvcalc.inputs.gguf import ARCH_TYPES
    from kvcalc.inputs.hf.configs import is_checked_type
    from kvcalc.inputs.presets import load_presets

    assert all(is_checked_type(t) for t in ARCH_TYPES.values())
    for name in load_presets():
        assert not any("has no rules of its own" in n for n in api.estimate(name).notes), name


# --- the package and its data --------------------------------------------------------------------------


def test_dir_shows_the_lazy_public_api() -> None:
    import kvcalc

    names = dir(kvcalc)
    assert {"estimate", "fit", "speed", "compare", "ModelSpec", "UsageError"} <= set(names)
    assert set(kvcalc.__all__) <= set(names)


def test_no_machine_paths_in_the_repository() -> None:
    # A path on one machine (/tmp/..., /root/..., /home/...) means nothing to a reader elsewhere.
    root = Path(__file__).resolve().parents[1]
    pattern = re.compile(r"(?<![\w.])/(?:tmp|root|home|work|Users)/[\w.-]+")
    found = []
    for folder in ("model_presets", "src", "README.md", "docs"):
        paths = [root / folder] if (root / folder).is_file() else sorted((root / folder).rglob("*"))
        for path in paths:
            if path.is_file() and path.suffix in (".yaml", ".py", ".md", ".json"):
                found += [f"{path.name}: {m}" for m in pattern.findall(path.read_text(errors="replace"))]
    assert found == []


# --- every line fits the terminal ---------------------------------------------------------------------

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


def test_speed_on_a_gguf_with_no_tensors_takes_the_weights_given(tmp_path: Path) -> None:
    arch, keys = with_nextn("glm4moe", 3, 0)
    path = typed_gguf_file(tmp_path / "empty.gguf", arch, keys)
    with pytest.raises(SourceError, match=r"holds no tensors: give --weights SIZE$"):
        api.speed(str(path), prompt=10, output=2, compute=api.Compute(bandwidth=10**12, flops=10**15))
    report = api.speed(
        str(path), prompt=10, output=2, weights=10**9, compute=api.Compute(bandwidth=10**12, flops=10**15)
    )
    assert report.result.weights.total_bytes == 10**9


def test_a_local_folder_that_shadows_a_preset_says_which_was_read(monkeypatch, tmp_path: Path) -> None:
    folder = tmp_path / "llama-3.1-8b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(fixture_config("Mistral-7B-Instruct-v0.1.json")))
    monkeypatch.chdir(tmp_path)
    est = api.estimate("llama-3.1-8b", tokens=100)
    assert est.model.model_type == "mistral"  # the folder, not the preset
    assert any("is the local folder ./llama-3.1-8b, read instead of the bundled preset" in n for n in est.notes)
    monkeypatch.chdir(folder)
    assert not any("instead of the bundled preset" in n for n in api.estimate("llama-3.1-8b").notes)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "transformers"])
def test_k_and_v_formats_apart_are_refused_where_the_engine_has_one_format(run_cli, engine: str) -> None:
    result = run_cli("estimate", "llama-3.1-8b", "--engine", engine, "--k-dtype", "fp8")
    assert result.exit_code == 2
    assert_one_line_error(result, f"{engine} stores K and V in one format: give --kv-dtype")


def test_kv_dtype_beside_both_k_and_v_dtype_is_refused(run_cli) -> None:
    result = run_cli("estimate", "llama-3.1-8b", "--engine", "llama.cpp", "--kv-dtype", "f16", "--k-dtype", "q8_0",
                     "--v-dtype", "q4_0")  # fmt: skip
    assert result.exit_code == 2
    assert_one_line_error(result, "--kv-dtype changes nothing when --k-dtype and --v-dtype are both given")


def test_k_dtype_on_a_model_without_k_or_v_is_refused(run_cli) -> None:
    result = run_cli("estimate", "mamba-2.8b", "--k-dtype", "fp8")
    assert result.exit_code == 2
    assert_one_line_error(result, "mamba-2.8b caches no K or V rows")


def test_a_float32_checkpoint_held_as_stored_says_where_it_would_be_16_bits() -> None:
    said = "holds this fp32 checkpoint as stored; vLLM, SGLang and llama.cpp hold it in 16 bits"
    assert any(
        said in n for n in api.fit("mamba-2.8b", gpu="h100", tokens=100, capacity=api.Capacity(overhead=0)).notes
    )
    assert not any(said in n for n in api.fit("llama-3.1-8b", gpu="h100", tokens=100).notes)
