"""``kvcalc probe MODEL --engine llama.cpp`` on recurrent and hybrid models: the real llama.cpp
(llama-cpp-python 0.3.36 = llama.cpp 0c1e570) builds the model's recurrent memory (llama_memory_recurrent,
src/llama-memory-recurrent.cpp) beside its KV cache, and the probe sets its R (conv history) and
S (SSM / delta-rule state) buffers beside kvcalc's state bytes, and K/V beside kvcalc's attention
layers, row by row, each with a pass/fail.

Two inputs: a GGUF file (the probe hands llama.cpp the file's own metadata) written with the keys
convert_hf_to_gguf.py writes (tests.helpers.gguf_models: ``convert`` and the qwen3next /
nemotron_h / falcon-h1 writers), and a preset (the probe writes the GGUF itself from
kvcalc's layers: llamacpp_probe.gguf_plan). The figures are derived by hand in the comments (f32
state rows, one per sequence, llama_hparams::n_embd_r = (d_conv - 1) x (d_inner + 2 x n_group x
d_state) and n_embd_s = d_state x d_inner, src/llama-hparams.cpp; lfm2 n_embd x (l_cache - 1)), or
are llama.cpp's own bytes for the converters' file, which the probe's preset file must reproduce.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvcalc import api
from kvcalc.dtypes import FP32
from kvcalc.engines.llamacpp import LlamaCpp
from kvcalc.engines.llamacpp.probe import (
    CONV,
    PLE,
    STATE,
    _context_result,
    _layer_list,
    _recurrent_rows,
    compare,
    context_request,
    gguf_plan,
    measure_file,
    probe_lines,
)
from kvcalc.errors import UsageError
from kvcalc.inputs import gguf as kvcalc_gguf
from kvcalc.inputs.presets import get_preset
from tests.helpers.gguf_files import gguf_file
from tests.helpers.gguf_models import (
    GRANITE_MICRO,
    SMALL_DSA,
    SMALL_FH,
    SMALL_KIMI,
    SMALL_M3,
    SMALL_MAMBA2,
    SMALL_NEXT,
    SMALL_NH,
    convert,
    dsa_keys,
    falcon_h1_keys,
    kimi_keys,
    minimax_keys,
    nemotron_h_keys,
    qwen3next_keys,
)
from tests.helpers.llama_cpp import needs_llama_cpp

gguf: Any = pytest.importorskip("gguf")

# GGUF files as the converters write them: (llama.cpp architecture, keys).
FILES: dict[str, Any] = {
    "mamba": lambda: ("mamba", convert("mamba", get_preset("mamba-2.8b").config)),
    "mamba2": lambda: ("mamba2", convert("mamba2", SMALL_MAMBA2)),
    "jamba": lambda: ("jamba", convert("jamba", get_preset("jamba-v0.1").config)),
    "granitehybrid": lambda: ("granitehybrid", convert("granitehybrid", GRANITE_MICRO)),
    "lfm2": lambda: ("lfm2", convert("lfm2", get_preset("lfm2-1.2b").config)),
    "qwen3next": lambda: ("qwen3next", qwen3next_keys(SMALL_NEXT)),
    "nemotron_h": lambda: ("nemotron_h", nemotron_h_keys(SMALL_NH)),
    "falcon-h1": lambda: ("falcon-h1", falcon_h1_keys(SMALL_FH)),
}

# Bytes of 1,000 tokens x 2 sequences (2 streams of 1,024 cells; n_ctx 2,000 padded to 2,048), by
# row: (K + V, R, S). f16 K/V: layers x 2 streams x 1,024 cells x 2 x KV heads x head dim x 2 B;
# f32 states: layers x 2 sequences x elements x 4 B.
HAND: dict[str, tuple[int, int, int]] = {
    # 64 layers, d_inner 5,120, state 16, conv 4: R 3 x 5,120; S 5,120 x 16
    "mamba": (0, 64 * 2 * 3 * 5_120 * 4, 64 * 2 * 5_120 * 16 * 4),  # 7,864,320 and 41,943,040
    # 8 layers, d_inner 2,048, 8 groups, state 128: R 3 x (2,048 + 2 x 8 x 128) = 12,288; S 128 x 2,048
    "mamba2": (0, 8 * 2 * 12_288 * 4, 8 * 2 * 128 * 2_048 * 4),  # 786,432 and 16,777,216
    # 4 attention layers of 8 KV heads x 128; 28 Mamba layers, d_inner 8,192, state 16
    "jamba": (4 * 2 * 1_024 * 2 * 8 * 128 * 2, 28 * 2 * 3 * 8_192 * 4, 28 * 2 * 8_192 * 16 * 4),
    # 4 attention layers of 8 KV heads x 64; 36 Mamba-2 layers: R 3 x (4,096 + 2 x 128); S 64 x 64 x 128
    "granitehybrid": (4 * 2 * 1_024 * 2 * 8 * 64 * 2, 36 * 2 * 3 * 4_352 * 4, 36 * 2 * 524_288 * 4),
    # 6 attention layers of 8 KV heads x 64; 10 conv layers: R (3 - 1) x 2,048, no S
    "lfm2": (6 * 2 * 1_024 * 2 * 8 * 64 * 2, 10 * 2 * 2 * 2_048 * 4, 0),
    # 2 attention layers of 2 KV heads x 64; 6 delta-net layers: R 3 x (2 x 2 x 32 + 4 x 32) = 768,
    # S 4 value heads x 32 x 32 = 4,096
    "qwen3next": (2 * 2 * 1_024 * 2 * 2 * 64 * 2, 6 * 2 * 768 * 4, 6 * 2 * 4_096 * 4),
    # 2 attention layers of 2 KV heads x 64; 4 Mamba-2 layers: R 3 x (512 + 2 x 2 x 32) = 1,920,
    # S 32 x 512 = 16,384; MLP layers hold nothing
    "nemotron_h": (2 * 2 * 1_024 * 2 * 2 * 64 * 2, 4 * 2 * 1_920 * 4, 4 * 2 * 16_384 * 4),
    # 3 layers, each attention (2 KV heads x 64) and Mamba-2: R 3 x (512 + 2 x 1 x 32) = 1,728, S 32 x 512
    "falcon-h1": (3 * 2 * 1_024 * 2 * 2 * 64 * 2, 3 * 2 * 1_728 * 4, 3 * 2 * 16_384 * 4),
}


def _file(arch_key: str, tmp_path: Path) -> Path:
    arch, keys = FILES[arch_key]()
    return gguf_file(tmp_path / f"{arch_key}.gguf", arch, keys)


def _rows(answer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["group"]: g for g in answer["groups"]}


@needs_llama_cpp
@pytest.mark.parametrize("arch", list(FILES))
def test_cli_probe_of_a_recurrent_gguf(arch: str, tmp_path: Path, run_cli: Any) -> None:
    path = _file(arch, tmp_path)
    result = run_cli("probe", str(path), "--engine", "llama.cpp", "--tokens", "1000", "--batch", "2", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    answer = json.loads(result.stdout)
    rows = _rows(answer)
    kv, r, s = HAND[arch]
    assert rows[CONV]["bytes"] == {"measured": r, "estimated": r}
    assert rows[STATE]["bytes"] == {"measured": s, "estimated": s}
    assert rows.get("full", {"bytes": {"measured": 0}})["bytes"]["measured"] == kv
    assert all(g["match"] for g in answer["groups"]) and answer["match"]
    assert answer["measured_bytes"] == answer["estimated_bytes"] == kv + r + s
    # one row (cell) per sequence in the recurrent memory
    assert rows[CONV]["cells"]["measured"] == rows[STATE]["cells"]["measured"] == 2
    assert any("P 0 bytes" in n for n in answer["notes"])  # what llama.cpp's P buffer is, and why left out
    text = run_cli("probe", str(path), "--engine", "llama.cpp", "--tokens", "1000", "--batch", "2")
    assert text.exit_code == 0 and "matches byte for byte" in text.stdout
    assert "conv (R)" in text.stdout and "state (S)" in text.stdout


# Presets: the probe writes the GGUF from kvcalc's layers (gguf_plan); llama.cpp must allocate for it
# what it allocates for the converters' file of the same config.
PRESETS = {
    "mamba-2.8b": lambda: ("mamba", convert("mamba", get_preset("mamba-2.8b").config)),
    "jamba-v0.1": lambda: ("jamba", convert("jamba", get_preset("jamba-v0.1").config)),
    "granite-4.0-h-micro": lambda: ("granitehybrid", convert("granitehybrid", GRANITE_MICRO)),
    "lfm2-1.2b": lambda: ("lfm2", convert("lfm2", get_preset("lfm2-1.2b").config)),
    "qwen3-next-80b-a3b": lambda: ("qwen3next", qwen3next_keys(get_preset("qwen3-next-80b-a3b").config)),
    "nemotron-h-8b": lambda: ("nemotron_h", nemotron_h_keys(get_preset("nemotron-h-8b").config)),
    "falcon-h1-7b": lambda: ("falcon-h1", falcon_h1_keys(get_preset("falcon-h1-7b").config)),
}


@needs_llama_cpp
@pytest.mark.parametrize("preset", list(PRESETS))
def test_cli_probe_of_a_recurrent_preset(preset: str, tmp_path: Path, run_cli: Any) -> None:
    result = run_cli("probe", preset, "--engine", "llama.cpp", "--tokens", "3000", "--batch", "3", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    answer = json.loads(result.stdout)
    assert answer["match"] and {CONV, STATE} <= set(_rows(answer))
    # The converters' file of the same config, measured by llama.cpp with the same context.
    arch, keys = PRESETS[preset]()
    path = gguf_file(tmp_path / f"{arch}.gguf", arch, keys)
    request = context_request(LlamaCpp(), 3000, 3, "fp16", "fp16")
    real = measure_file(path, [request], no_alloc=True)["results"][0]
    kv = sum(c["k_bytes"] + c["v_bytes"] for c in real["caches"])
    (memory,) = real["recurrent"]
    rows = _rows(answer)
    assert rows[CONV]["bytes"]["measured"] == memory["r_bytes"] > 0
    assert rows[STATE]["bytes"]["measured"] == memory["s_bytes"]
    assert rows.get("full", {"bytes": {"measured": 0}})["bytes"]["measured"] == kv
    assert answer["measured_bytes"] == kv + memory["r_bytes"] + memory["s_bytes"]


@needs_llama_cpp
def test_a_wrong_state_estimate_fails(tmp_path: Path, run_cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Were kvcalc's llama.cpp rule to keep the whole conv kernel (as vLLM does), the probe says so."""
    real = LlamaCpp.state_parts

    def whole_kernel(self: LlamaCpp, cache: Any) -> Any:
        (_, conv_type), recurrent = real(self, cache)
        return (cache.state_elements(whole_kernel=True)[0], conv_type), recurrent

    monkeypatch.setattr(LlamaCpp, "state_parts", whole_kernel)
    path = _file("jamba", tmp_path)
    result = run_cli("probe", str(path), "--engine", "llama.cpp", "--tokens", "1000", "--batch", "2", "--json")
    assert result.exit_code == 1
    rows = _rows(json.loads(result.stdout))
    # llama.cpp: 28 x 2 x 3 x 8,192 x 4 B; the wrong rule 4 columns: 28 x 2 x 4 x 8,192 x 4 B
    assert rows[CONV]["bytes"] == {"measured": 5_505_024, "estimated": 7_340_032}
    assert not rows[CONV]["match"] and rows[STATE]["match"] and rows["full"]["match"]
    text = run_cli("probe", str(path), "--engine", "llama.cpp", "--tokens", "1000", "--batch", "2")
    assert text.exit_code == 1 and "DIFFERS from llama.cpp" in text.stdout


@needs_llama_cpp
def test_a_wrong_state_size_fails(tmp_path: Path, run_cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An estimate whose state is half llama.cpp's (f16 instead of f32) fails on S, through a preset."""
    from kvcalc.dtypes import FP16

    real = LlamaCpp.state_parts

    def half(self: LlamaCpp, cache: Any) -> Any:
        conv, (recurrent, _) = real(self, cache)
        return conv, (recurrent, FP16)

    monkeypatch.setattr(LlamaCpp, "state_parts", half)
    result = run_cli("probe", "mamba-2.8b", "--engine", "llama.cpp", "--tokens", "1000", "--batch", "2", "--json")
    assert result.exit_code == 1
    rows = _rows(json.loads(result.stdout))
    # 64 x 2 x 5,120 x 16 elements: 4 B each in llama.cpp, 2 B in the wrong estimate
    assert rows[STATE]["bytes"] == {"measured": 41_943_040, "estimated": 20_971_520} and not rows[STATE]["match"]


@needs_llama_cpp
def test_a_ple_buffer_is_not_estimated(tmp_path: Path) -> None:
    """llama.cpp's P (the PLE conv history, src/llama-memory-recurrent.cpp: only qwen4exp's PLE layer
    has one) is not in kvcalc's estimate: a run that logs P > 0 fails on a row of its own."""
    path = _file("mamba2", tmp_path)
    est = api.estimate(str(path), tokens=1000, batch=2, engine="llama.cpp")
    result = measure_file(path, [context_request(LlamaCpp(), 1000, 2, "fp16", "fp16")], no_alloc=True)["results"][0]
    (memory,) = result["recurrent"]
    assert memory["p_mib"] == "0.00" and memory["p_type"] == "f32"  # what llama.cpp logged for mamba2
    assert all(c.match for c in compare(est, result))
    with_ple = {**result, "recurrent": [{**memory, "p_mib": "0.50"}]}
    checks = {c.side: c for c in compare(est, with_ple)}
    assert not checks[PLE].match and checks[CONV].match and checks[STATE].match
    assert "0.50 MiB" in checks[PLE].note


def test_recurrent_rows_rules() -> None:
    # Mamba-2 sizes as print_info prints them: (4 - 1) x (512 + 2 x 2 x 32) = 1,920; 32 x 512 = 16,384
    info = {"n_embd": "256", "ssm_d_conv": "4", "ssm_d_inner": "512", "ssm_d_state": "32", "ssm_n_group": "2"}
    meta = {"general.architecture": "granitehybrid"}
    assert _recurrent_rows(info, meta.get) == [1_920, 16_384]
    # lfm2: n_embd x (l_cache - 1) = 256 x 2, no state
    meta = {"general.architecture": "lfm2", "lfm2.shortconv.l_cache": "3"}
    assert _recurrent_rows(info, meta.get) == [512, 0]
    # Kimi's KDA: 3 (Q, K, V) x (4 - 1) x 4 heads x 32 = 1,152 conv values; 32 x 32 x 4 heads = 4,096
    info = {"n_embd": "256", "n_head": "4"}
    meta = {"general.architecture": "kimi-linear", "kimi-linear.kda.head_dim": "32", "kimi-linear.ssm.conv_kernel": "4"}
    assert _recurrent_rows(info, meta.get) == [1_152, 4_096]
    # RWKV's token shift and wkv state follow other rules: not rebuilt, so the rows cannot pass
    assert _recurrent_rows(info, {"general.architecture": "rwkv6"}.get) is None


@needs_llama_cpp
def test_cli_probe_of_a_kimi_linear_gguf(tmp_path: Path, run_cli: Any) -> None:
    """Kimi-Linear: MLA on its full-attention layers, KDA (a gated delta net over Q, K and V convs) on
    the others, written with KimiLinearModel's keys (tests.helpers.gguf_models kimi_keys)."""
    path = gguf_file(tmp_path / "kimi-linear.gguf", "kimi-linear", kimi_keys(SMALL_KIMI))
    result = run_cli("probe", str(path), "--engine", "llama.cpp", "--tokens", "1000", "--batch", "2", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    rows = _rows(json.loads(result.stdout))
    # 4 KDA layers x 2 sequences x 4 B: R 1,152 conv values, S 4,096 state values (see above);
    # 2 MLA layers x 2 streams x 1,024 cells x (64 latent + 16 rope) x 2 B, no V
    assert rows[CONV]["bytes"]["measured"] == 4 * 2 * 1_152 * 4 == 36_864
    assert rows[STATE]["bytes"]["measured"] == 4 * 2 * 4_096 * 4 == 131_072
    assert rows["full"]["bytes"]["measured"] == 2 * 2 * 1_024 * 80 * 2 == 655_360
    assert all(g["match"] for g in rows.values())


def test_a_family_the_probe_cannot_write_is_refused(run_cli: Any) -> None:
    result = run_cli("probe", "kimi-linear-48b-a3b", "--engine", "llama.cpp")
    assert result.exit_code != 0
    assert "the llama.cpp probe cannot build a kimi_linear model" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# ``kvcalc probe MODEL --engine llama.cpp`` on the sparse-attention architectures whose llama.cpp
# memory holds a second llama_kv_cache for the indexer's keys: deepseek32 and glm-dsa
# (llama_kv_cache_dsa, src/llama-kv-cache-dsa.cpp) and minimax-m3 (llama_kv_cache_msa,
# src/llama-kv-cache-msa.cpp), llama.cpp 0c1e570. The probe reads the indexer cache's log lines apart
# from the main cache's, rebuilds its bytes (cells x streams x layers x one key row of
# indexer.key_length in type_k, plus for MiniMax-M3 one V head row of the attention's value dim in
# type_v) and sets them in an ``indexer`` row beside kvcalc's IndexerCache groups, the layers llama.cpp
# placed it in against kvcalc's.
#
# The tiny GGUFs are tests.helpers.gguf_models' (dsa_keys, minimax_keys and their geometries); every
# figure below is derived by hand in its comment, and the real llama.cpp (llama-cpp-python 0.3.36 =
# llama.cpp 0c1e570) must allocate it.
GLM = {**SMALL_DSA, "indexer_types": ["full", "shared", "full", "shared"]}
INDEXER_FILES = {"deepseek32": SMALL_DSA, "glm-dsa": GLM, "minimax-m3": SMALL_M3}


def tiny(tmp: Path, arch: str) -> Path:
    keys = minimax_keys if arch.startswith("minimax") else dsa_keys
    return gguf_file(tmp / f"{arch}.gguf", arch, keys(INDEXER_FILES[arch], arch))


def rows(report: Any) -> dict[str, Any]:
    return {c.side: c for c in report.checks}


# --- the parser, on llama.cpp's own log format ------------------------------------------------------------

# What llama.cpp 0c1e570 logs creating MiniMax-M3's memory (src/llama-kv-cache-msa.cpp and
# src/llama-kv-cache.cpp's LLAMA_LOG_INFO formats): the main cache of 4 layers, then the indexer's of 3.
MSA_LOG = "".join(
    [
        "llama_kv_cache_msa: creating main KV cache, size = 1024 cells\n",
        *(f"llama_kv_cache: layer   {i}: dev = CPU\n" for i in range(4)),
        "llama_kv_cache: size =    8.00 MiB (  1024 cells,   4 layers,  1/1 seqs), K (f16):    4.00 MiB, V (f16):    "
        "4.00 MiB\n",
        "llama_kv_cache_msa: creating indexer KV cache, size = 1024 cells\n",
        *(f"llama_kv_cache: layer   {i}: dev = CPU\n" for i in (1, 2, 3)),
        "llama_kv_cache: size =    1.12 MiB (  1024 cells,   3 layers,  1/1 seqs), K (f16):    0.75 MiB, V (f16):    "
        "0.38 MiB\n",
    ]
)
# ggml_row_size of n elements: f16 2 B each (ggml/src/ggml.c type traits).
F16_ROW = {1: lambda n: 2 * n}
INFO = {"n_embd_k_gqa": [128] * 4, "n_embd_v_gqa": [128] * 4, "n_embd_head_v": "64", "indexer_rows": [128, 64]}


def test_the_indexer_cache_is_read_apart() -> None:
    result = _context_result(MSA_LOG, INFO, {"f16": 1}, lambda t, n: F16_ROW[t](n))
    main, idx = result["caches"]
    # main: 1024 cells x 4 layers x 128 (2 KV heads x 64) x 2 B = 1,048,576 each for K and V (4.00 MiB)
    assert (main["side"], main["k_bytes"], main["v_bytes"]) == ("full", 1_048_576, 1_048_576)
    # indexer: 1024 x 3 x 128 x 2 B = 786,432 (0.75 MiB) of keys; 1024 x 3 x 64 x 2 B = 393,216 of V
    # (0.375 MiB, printed 0.38)
    assert (idx["side"], idx["family"], idx["held"], idx["layers"]) == ("indexer", "msa", [1, 2, 3], 3)
    assert (idx["k_bytes"], idx["v_bytes"], idx["prints_as_logged"]) == (786_432, 393_216, True)
    # were the V row the main cache's (128), the bytes would not print as logged
    wrong = {**INFO, "indexer_rows": [128, 128]}
    _, idx = _context_result(MSA_LOG, wrong, {"f16": 1}, lambda t, n: F16_ROW[t](n))["caches"]
    assert idx["v_bytes"] == 786_432 and not idx["prints_as_logged"]
    # no indexer key length known: not rebuilt, and said so
    unknown = {**INFO, "indexer_rows": None}
    _, idx = _context_result(MSA_LOG, unknown, {"f16": 1}, lambda t, n: F16_ROW[t](n))["caches"]
    assert not idx["rows_known"] and not idx["prints_as_logged"]


def test_layer_runs() -> None:
    assert _layer_list((0, 1, 2, 6, 10, 11)) == "0-2, 6, 10-11"
    assert _layer_list(()) == "none" and _layer_list(None) == "?"


def test_preset_plans_write_the_indexer_keys() -> None:
    # GLM-5.3: 78 MLA layers, indexer keys of 128 on its 21 "full" layers
    plan = dict((k, v) for k, _, v in gguf_plan(api.load_model("glm-5.3"), 4096).keys)
    assert plan["glm-dsa.block_count"] == 78 and plan["glm-dsa.attention.indexer.key_length"] == 128
    assert sum(plan["glm-dsa.attention.indexer.types"]) == 21
    assert (plan["glm-dsa.attention.kv_lora_rank"], plan["glm-dsa.attention.key_length"]) == (512, 576)
    # MiniMax-M3: 60 GQA layers of 4 KV heads of 128; the indexer past 3 dense layers, one head per group
    plan = dict((k, v) for k, _, v in gguf_plan(api.load_model("minimax-m3"), 4096).keys)
    assert plan["minimax-m3.leading_dense_block_count"] == 3
    assert plan["minimax-m3.attention.indexer.head_count"] == plan["minimax-m3.attention.head_count_kv"] == 4


# --- the real llama.cpp ---------------------------------------------------------------------------------------


@needs_llama_cpp
def test_tiny_files_match(tmp_path: Path, run_cli: Any) -> None:
    # 1000 tokens, one sequence: 1024 cells (n_ctx padded to 256), f16.
    # deepseek32: main 4 layers x 1024 x (128 + 64 latent) x 2 B = 1,572,864; indexer 4 x 1024 x 128 x 2 B
    # = 1,048,576 on layers 0-3 (every layer, src/llama-model.cpp create_memory filter_lid).
    # glm-dsa: main the same; indexer on its "full" layers 0 and 2: 2 x 1024 x 128 x 2 B = 524,288.
    # minimax-m3: main 4 x 1024 x 2 (K, V) x 2 KV heads x 64 x 2 B = 2,097,152; indexer on the layers past
    # the one dense layer, 1-3: 3 x 1024 x (128 key + 64 V) x 2 B = 1,179,648.
    want = {
        "deepseek32": (4 * 1024 * 192 * 2, 4 * 1024 * 128 * 2, [0, 1, 2, 3]),
        "glm-dsa": (4 * 1024 * 192 * 2, 2 * 1024 * 128 * 2, [0, 2]),
        "minimax-m3": (4 * 1024 * 2 * 2 * 64 * 2, 3 * 1024 * (128 + 64) * 2, [1, 2, 3]),
    }
    assert [w[:2] for w in want.values()] == [(1_572_864, 1_048_576), (1_572_864, 524_288), (2_097_152, 1_179_648)]
    for arch, (main, indexer, layers) in want.items():
        path = tiny(tmp_path, arch)
        result = run_cli("probe", str(path), "--engine", "llama.cpp", "--tokens", "1000", "--json")
        assert result.exit_code == 0, (arch, result.stdout, result.stderr)
        groups = {g["group"]: g for g in result.json()["groups"]}
        assert set(groups) == {"full", "indexer"}
        assert groups["full"]["bytes"] == {"measured": main, "estimated": main}
        idx = groups["indexer"]
        assert idx["bytes"] == {"measured": indexer, "estimated": indexer}
        assert idx["layers"] == {"measured": len(layers), "estimated": len(layers), "measured_at": layers,
                                 "estimated_at": layers}  # fmt: skip
        assert idx["prints_as_logged"] and idx["match"]
        text = run_cli("probe", str(path), "--engine", "llama.cpp", "--tokens", "1000")
        assert text.exit_code == 0 and "matches byte for byte" in text.stdout
        rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in text.stdout.splitlines()]
        assert any(row[:1] == ["indexer"] and row[-1] == "yes" for row in rows)


@needs_llama_cpp
def test_streams_and_q8_0(tmp_path: Path) -> None:
    # MiniMax-M3, 2 sequences of 700, 2 streams, q8_0 (34 B per 32 elements, ggml's block_q8_0): n_ctx
    # 1400 padded to 1536, 768 cells a stream. Main: 4 x 1536 x 2 x (128 / 32 x 34 = 136) = 1,671,168.
    # Indexer: 3 x 1536 x (128 / 32 x 34 = 136 key + 64 / 32 x 34 = 68 V) = 940,032.
    report = api.probe_llamacpp(str(tiny(tmp_path, "minimax-m3")), tokens=700, batch=2, kv_dtype="q8_0")
    full, idx = rows(report)["full"], rows(report)["indexer"]
    assert (full.measured_bytes, full.measured_cells, full.streams) == (4 * 1536 * 2 * 136, 1536, 2) == (
        1_671_168, 1536, 2)  # fmt: skip
    assert (idx.measured_bytes, idx.measured_cells, idx.streams) == (3 * 1536 * (136 + 68), 1536, 2) == (
        940_032, 1536, 2)  # fmt: skip
    assert report.match
    # glm-dsa, one unified stream of 2 x 3000: n_ctx 6000 padded to 6144 cells; indexer 2 x 6144 x 128 x 2 B
    report = api.probe_llamacpp(str(tiny(tmp_path, "glm-dsa")), tokens=3000, batch=2, options={"kv_unified": True})
    idx = rows(report)["indexer"]
    assert (idx.measured_bytes, idx.measured_cells, idx.streams) == (2 * 6144 * 128 * 2, 6144, 1) and report.match


@needs_llama_cpp
def test_a_wrong_indexer_estimate_exits_1(tmp_path: Path, run_cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Were kvcalc to keep the indexer's keys in f32, the indexer row (only) differs and the probe exits 1."""
    path = tiny(tmp_path, "deepseek32")
    monkeypatch.setattr(LlamaCpp, "indexer_dtype", lambda self, kv, compute, family="dsa": FP32)
    result = run_cli("probe", str(path), "--engine", "llama.cpp", "--tokens", "1000", "--json")
    assert result.exit_code == 1, result.stdout
    groups = {g["group"]: g for g in result.json()["groups"]}
    # llama.cpp 4 x 1024 x 128 x 2 B = 1,048,576; kvcalc (f32) twice that
    assert groups["indexer"]["bytes"] == {"measured": 1_048_576, "estimated": 2_097_152}
    assert not groups["indexer"]["match"] and groups["full"]["match"]
    text = run_cli("probe", str(path), "--engine", "llama.cpp", "--tokens", "1000")
    assert text.exit_code == 1 and "DIFFERS from llama.cpp" in text.stdout


@needs_llama_cpp
def test_the_indexer_layers_must_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same count, same bytes, other layers: were kvcalc to read GLM's indexer on layers 0 and 1
    (llama.cpp: 0 and 2, its indexer.types), the indexer row differs."""
    real = kvcalc_gguf.gguf_config

    def misread(header: Any, label: str) -> tuple[dict[str, Any], list[str]]:
        config, notes = real(header, label)
        return {**config, "indexer_types": ["full", "full", "shared", "shared"], "index_topk_pattern": "FFSS"}, notes

    path = tiny(tmp_path, "glm-dsa")
    monkeypatch.setattr(kvcalc_gguf, "gguf_config", misread)
    report = api.probe_llamacpp(str(path), tokens=1000)
    idx = rows(report)["indexer"]
    # both 2 x 1024 x 128 x 2 B = 524,288
    assert idx.measured_bytes == idx.estimated_bytes == 524_288 and idx.measured_layers == idx.estimated_layers == 2
    assert (idx.measured_at, idx.estimated_at) == ((0, 2), (0, 1))
    assert not idx.match and not report.match
    assert "llama.cpp put the indexer keys in layers [0, 2], kvcalc in [0, 1]" in idx.note
    assert any("indexer: the sparse-attention indexer's key cache, in layers 0, 2 / 0-1" in line
               for line in probe_lines(report) if isinstance(line, str))  # fmt: skip


@needs_llama_cpp
@pytest.mark.parametrize(
    ("preset", "main", "indexer", "layers"),
    [
        # 1000 tokens, 1024 cells, f16. DeepSeek-V3.2: 61 MLA layers x (512 + 64) x 2 B x 1024 = 71,958,528;
        # indexer keys of 128 on every layer: 61 x 1024 x 128 x 2 B = 15,990,784.
        ("deepseek-v3.2", 61 * 1024 * 576 * 2, 61 * 1024 * 128 * 2, "0-60"),
        # GLM-5.3: 78 x 1024 x 576 x 2 B = 92,012,544; its 21 full layers 0-2 and every 4th from 6:
        # 21 x 1024 x 128 x 2 B = 5,505,024.
        ("glm-5.3", 78 * 1024 * 576 * 2, 21 * 1024 * 128 * 2, "0-2, " + ", ".join(map(str, range(6, 78, 4)))),
        # MiniMax-M3: 60 x 1024 x 2 x 4 KV heads x 128 x 2 B = 125,829,120; indexer past 3 dense layers,
        # 57 x 1024 x (128 + 128 V) x 2 B = 29,884,416.
        ("minimax-m3", 60 * 1024 * 2 * 4 * 128 * 2, 57 * 1024 * 256 * 2, "3-59"),
    ],
)
def test_presets(preset: str, main: int, indexer: int, layers: str) -> None:
    report = api.probe_llamacpp(preset, tokens=1000)
    full, idx = rows(report)["full"], rows(report)["indexer"]
    assert (full.measured_bytes, idx.measured_bytes) == (main, indexer)
    assert _layer_list(idx.measured_at) == layers and report.match
    assert [main, indexer] == {"deepseek-v3.2": [71_958_528, 15_990_784], "glm-5.3": [92_012_544, 5_505_024],
                               "minimax-m3": [125_829_120, 29_884_416]}[preset]  # fmt: skip


def test_unknown_sparse_preset_is_still_refused() -> None:
    """DeepSeek-V4's compressed indexer is none of these: the one-line refusal stays."""
    with pytest.raises(UsageError, match=r"the llama\.cpp probe cannot build a deepseek_v4 model"):
        gguf_plan(api.load_model("deepseek-v4-flash"), 4096)


def test_an_older_builds_rules_are_not_probed_against_the_installed_llama_cpp() -> None:
    # The probe runs llama-cpp-python 0.3.36's llama.cpp (b11312): b4905's rules (cells padded to 32,
    # one stream) would be set beside another build's cache and read as a difference.
    engine, _ = LlamaCpp.at_build(4905)
    with pytest.raises(UsageError, match=r"runs llama-cpp-python 0\.3\.36's llama\.cpp \(b11312\), not b4905"):
        context_request(engine, 1000, 2, "fp16", "fp16")
    assert context_request(LlamaCpp(), 1000, 2, "fp16", "fp16")["n_ctx"] == 2000
