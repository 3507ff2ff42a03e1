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
from kvcalc.engines.llamacpp import LlamaCpp
from kvcalc.engines.llamacpp.probe import (
    CONV,
    PLE,
    STATE,
    _recurrent_rows,
    compare,
    context_request,
    measure_file,
)
from kvcalc.inputs.presets import get_preset
from tests.helpers.gguf_files import gguf_file
from tests.helpers.gguf_models import (
    GRANITE_MICRO,
    SMALL_FH,
    SMALL_KIMI,
    SMALL_MAMBA2,
    SMALL_NEXT,
    SMALL_NH,
    convert,
    falcon_h1_keys,
    kimi_keys,
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
