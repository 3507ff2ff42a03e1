"""GGUF files of recurrent and hybrid architectures: llama.cpp's ``mamba``, ``mamba2``,
``granitehybrid`` (Granite-4.0-H: Mamba-2 + attention), ``jamba`` (Mamba-1 + attention) and ``lfm2``
(gated short convolutions + attention), read by ``kvcalc.inputs.gguf.gguf_config``.

Each file is written with the gguf package holding the keys convert_hf_to_gguf.py writes for the
architecture (ggml-org/llama.cpp conversion/mamba.py @ 32e9e044, conversion/granite.py @ 010f22d8,
conversion/jamba.py @ 7bca1fd9, conversion/lfm2.py @ 051139f5; tests.helpers.gguf_models ``convert``
mirrors them for a preset's config). Three checks:

- kvcalc's per-layer bytes against a hand derivation (the arithmetic is in the comments);
- the round trip: the GGUF converted from a preset's config reads back to the preset's per-layer caches;
- the real llama.cpp (llama-cpp-python 0.3.36 = llama.cpp 0c1e570): a context of the same file,
  sized with no_alloc, logs ``llama_kv_cache: size = ...`` for the attention layers and
  ``llama_memory_recurrent: size = ... R (f32): ... MiB, S (f32): ... MiB`` for the recurrent ones.
  The bytes are rebuilt by the probe's own parser (kvcalc.engines.llamacpp.probe, shared with ``kvcalc probe
  --engine llama.cpp``) from llama.cpp's figures (cells, layers it placed, the per-layer K/V
  widths and SSM sizes it printed) and must print as llama.cpp printed them, to the last digit, and
  equal kvcalc's ``--engine llama.cpp`` estimate.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from kvcalc import api
from kvcalc.engines.llamacpp import LlamaCpp
from kvcalc.engines.llamacpp import probe as llamacpp_probe
from kvcalc.errors import SourceError
from kvcalc.inputs.gguf import gguf_config, read_header
from kvcalc.inputs.presets import get_preset
from kvcalc.spec import AttentionCache, LatentCache, NoCache, StateCache
from tests.conftest import FIXTURES
from tests.helpers.gguf_files import gguf_file
from tests.helpers.gguf_models import GRANITE_MICRO, SMALL_KIMI, SMALL_MAMBA2, TINY, convert, kimi_keys
from tests.helpers.llama_cpp import (
    CONTEXT_WORKLOADS,
    KV_LAYER,
    RS_LAYER,
    estimated_bytes,
    measured_bytes,
    run_llama_cpp,
)

gguf: Any = pytest.importorskip("gguf")


# --- the files: tests.helpers.gguf_models ``convert`` -------------------------------------------------------


def read_gguf(path: Path) -> Any:
    return api.load_model(str(path))


# --- hand derivations ---------------------------------------------------------------------------------------


def test_granitehybrid_maps_to_the_granite_4_h_layers(tmp_path: Path) -> None:
    path = gguf_file(tmp_path / "g.gguf", "granitehybrid", convert("granitehybrid", GRANITE_MICRO))
    config, _ = gguf_config(read_header(path), "g")
    assert config["model_type"] == "granitemoehybrid"
    assert config["layer_types"] == GRANITE_MICRO["layer_types"]  # 0 KV heads -> "mamba"
    assert (config["mamba_n_heads"], config["mamba_d_head"], config["mamba_expand"]) == (64, 64, 2)
    assert not any(k.startswith("granitehybrid.") for k in config)  # every ssm.* key read
    spec = read_gguf(path)
    assert not spec.warnings
    states = [c for c in spec.caches if isinstance(c, StateCache)]
    attn = [c for c in spec.caches if isinstance(c, AttentionCache)]
    assert (len(states), len(attn)) == (36, 4)
    # conv: (4 - 1) x (4096 + 2 x 1 x 128) = 13,056 elements; SSM: 64 heads x 64 x 128 = 524,288.
    assert states[0].state_elements(whole_kernel=False) == (13_056, 524_288)
    # attention: 8 KV heads x 2048 / 32 = 64 dims.
    assert (attn[0].kv_heads, attn[0].k_head_dim, attn[0].v_head_dim) == (8, 64, 64)
    est = api.estimate(str(path), tokens=4096, engine="llama.cpp")
    # llama.cpp: f16 K and V, 4096 cells: 4 layers x 4096 x 2 x 8 x 64 x 2 B = 33,554,432;
    # f32 states of one sequence: 36 x (13,056 + 524,288) x 4 B = 77,377,536.
    assert est.total_bytes == 33_554_432 + 77_377_536


def test_mamba2_hand_derived(tmp_path: Path) -> None:
    # A made-up Mamba-2 of 4 layers, hidden 256, expand 2 (inner 512), 8 heads of 64, state 16,
    # 2 groups, conv 4: conversion writes time_step_rank 512 / 64 = 8.
    hf = {"num_hidden_layers": 4, "hidden_size": 256, "expand": 2, "head_dim": 64, "state_size": 16,
          "n_groups": 2, "conv_kernel": 4}  # fmt: skip
    path = gguf_file(tmp_path / "m2.gguf", "mamba2", convert("mamba2", hf))
    config, _ = gguf_config(read_header(path), "m2")
    assert (config["num_heads"], config["head_dim"], config["intermediate_size"], config["n_groups"]) == (8, 64, 512, 2)
    spec = read_gguf(path)
    assert not spec.warnings
    assert all(isinstance(c, StateCache) for c in spec.caches) and len(spec.caches) == 4
    # conv (4 - 1) x (512 + 2 x 2 x 16) = 1,728; SSM 16 x 512 = 8,192 elements.
    assert spec.caches[0].state_elements(whole_kernel=False) == (1_728, 8_192)
    # 3 sequences, f32: 4 x 3 x (1,728 + 8,192) x 4 B = 476,160, whatever the context.
    est = api.estimate(str(path), tokens=1000, batch=3, engine="llama.cpp")
    assert est.total_bytes == 476_160


def test_lfm2_hand_derived(tmp_path: Path) -> None:
    hf = get_preset("lfm2-1.2b").config
    path = gguf_file(tmp_path / "l.gguf", "lfm2", convert("lfm2", hf))
    spec = read_gguf(path)
    assert not spec.warnings
    kinds = ["state" if isinstance(c, StateCache) else "attn" for c in spec.caches]
    assert [i for i, k in enumerate(kinds) if k == "attn"] == [2, 5, 8, 10, 12, 14]
    # short conv: (3 - 1) x 2048 = 4,096 conv elements, no recurrent state.
    assert spec.caches[0].state_elements(whole_kernel=False) == (4_096, 0)
    est = api.estimate(str(path), tokens=2048, engine="llama.cpp")
    # 6 x 2048 cells x 2 x 8 x 64 x 2 B = 25,165,824; 10 x 4,096 x 4 B = 163,840.
    assert est.total_bytes == 25_165_824 + 163_840


def test_jamba_hand_derived(tmp_path: Path) -> None:
    hf = get_preset("jamba-v0.1").config
    path = gguf_file(tmp_path / "j.gguf", "jamba", convert("jamba", hf))
    config, _ = gguf_config(read_header(path), "j")
    assert config["layer_types"][:5] == ["mamba", "mamba", "mamba", "mamba", "full_attention"]
    spec = read_gguf(path)
    assert not spec.warnings
    # Mamba-1: conv (4 - 1) x 8192 = 24,576; SSM 8192 x 16 = 131,072 elements.
    assert spec.caches[0].state_elements(whole_kernel=False) == (24_576, 131_072)
    est = api.estimate(str(path), tokens=1024, engine="llama.cpp")
    # 4 attention layers x 1024 x 2 x 8 x 128 x 2 B = 16,777,216; 28 x (24,576 + 131,072) x 4 B = 17,432,576.
    assert est.total_bytes == 16_777_216 + 17_432_576


def test_mamba_hand_derived(tmp_path: Path) -> None:
    hf = get_preset("mamba-2.8b").config
    path = gguf_file(tmp_path / "m.gguf", "mamba", convert("mamba", hf))
    spec = read_gguf(path)
    assert not spec.warnings
    # conv (4 - 1) x 5120 = 15,360; SSM 5120 x 16 = 81,920; 64 layers x 97,280 x 4 B = 24,903,680.
    assert spec.caches[0].state_elements(whole_kernel=False) == (15_360, 81_920)
    assert api.estimate(str(path), tokens=1024, engine="llama.cpp").total_bytes == 24_903_680


# --- the round trip ------------------------------------------------------------------------------------------

ROUND_TRIP = {
    "granitehybrid": "granite-4.0-h-micro",
    "jamba": "jamba-v0.1",
    "lfm2": "lfm2-1.2b",
    "mamba": "mamba-2.8b",
}


@pytest.mark.parametrize("arch", list(ROUND_TRIP))
def test_round_trip_gives_the_presets_layers(tmp_path: Path, arch: str) -> None:
    preset = ROUND_TRIP[arch]
    path = gguf_file(tmp_path / f"{arch}.gguf", arch, convert(arch, get_preset(preset).config))
    from_gguf, from_preset = read_gguf(path), api.load_model(preset)
    assert from_gguf.caches == from_preset.caches
    # Under llama.cpp's rules (f16 K/V, f32 states) the totals agree too; other engines keep states in
    # the weights' dtype, which a metadata-only file does not carry.
    a = api.estimate(str(path), tokens=5000, batch=2, engine="llama.cpp")
    b = api.estimate(preset, tokens=5000, batch=2, engine="llama.cpp")
    assert a.total_bytes == b.total_bytes


# --- what is refused ---------------------------------------------------------------------------------------


def test_refusals(tmp_path: Path) -> None:
    keys = convert("granitehybrid", GRANITE_MICRO)
    uneven = dict(keys, **{"attention.head_count_kv": [0] * 5 + [8] + [0] * 9 + [4] + [0] * 24})
    with pytest.raises(SourceError, match="differs by attention layer"):
        read_gguf(gguf_file(tmp_path / "a.gguf", "granitehybrid", uneven))
    scalar = dict(keys, **{"attention.head_count_kv": 8})
    with pytest.raises(SourceError, match="must list the 40 layers"):
        read_gguf(gguf_file(tmp_path / "b.gguf", "granitehybrid", scalar))
    odd = dict(keys, **{"ssm.time_step_rank": 60})  # 4096 / 60 heads
    with pytest.raises(SourceError, match="no multiple of"):
        read_gguf(gguf_file(tmp_path / "c.gguf", "granitehybrid", odd))
    missing = {k: v for k, v in keys.items() if k != "ssm.state_size"}
    with pytest.raises(SourceError, match=r"no granitehybrid\.ssm\.state_size"):
        read_gguf(gguf_file(tmp_path / "d.gguf", "granitehybrid", missing))


# --- the real llama.cpp --------------------------------------------------------------------------------------


LLAMA_CPP_FILES = {
    "granitehybrid": lambda: convert("granitehybrid", GRANITE_MICRO),
    "jamba": lambda: convert("jamba", get_preset("jamba-v0.1").config),
    "lfm2": lambda: convert("lfm2", get_preset("lfm2-1.2b").config),
    "mamba": lambda: convert("mamba", get_preset("mamba-2.8b").config),
    "mamba2": lambda: convert("mamba2", SMALL_MAMBA2),  # kvcalc has no Mamba-2 preset or fixture
}


@cache
def _llama_cpp_run(arch: str, tmp: str) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    keys = LLAMA_CPP_FILES[arch]()
    path = gguf_file(Path(tmp) / f"{arch}.gguf", arch, keys)
    engine = LlamaCpp()
    contexts = [
        {"n_ctx": t * b, "n_seq_max": b, "n_batch": engine.n_batch, "n_ubatch": engine.n_ubatch,
         "kv_unified": u, "swa_full": False, "type_k": "f16", "type_v": "f16"}
        for t, b, u in CONTEXT_WORKLOADS
    ]  # fmt: skip
    return path, keys, run_llama_cpp(path, contexts)


@pytest.mark.parametrize("arch", list(LLAMA_CPP_FILES))
def test_llama_cpp_allocates_what_kvcalc_estimates(arch: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    pytest.importorskip("llama_cpp")
    path, _, answer = _llama_cpp_run(arch, str(tmp_path_factory.mktemp(arch)))
    for (tokens, batch, unified), result in zip(CONTEXT_WORKLOADS, answer["results"], strict=True):
        assert result["ok"], result["log"][-1000:]
        got = measured_bytes(result)
        want = estimated_bytes(path, tokens, batch, unified)
        assert got == want, (tokens, batch, unified)
        # The same layers: llama.cpp's placed K/V layers and recurrent layers are kvcalc's.
        spec = read_gguf(path)
        assert llamacpp_probe.kv_layers(result["log"]) == [
            i for i, c in enumerate(spec.caches) if isinstance(c, AttentionCache)
        ]
        assert llamacpp_probe.recurrent_layers(result["log"]) == [
            i for i, c in enumerate(spec.caches) if isinstance(c, StateCache)
        ]
        assert got["s"] + got["r"] > 0  # every file here has recurrent layers
        if arch not in ("mamba", "mamba2"):
            assert got["k"] > 0


# GGUF files of more hybrid llama.cpp architectures: ``qwen35`` and ``qwen35moe`` (Qwen3.5: gated
# delta net + full attention), ``kimi-linear`` (Kimi-Linear: MLA + Kimi Delta Attention), ``lfm2moe``
# (LFM2-MoE: short convolutions + attention) and ``nemotron_h_moe`` (Nemotron-3: Mamba-2, attention and
# MoE layers), read by ``kvcalc.inputs.gguf.gguf_config``.
#
# Each file holds the keys convert_hf_to_gguf.py of llama.cpp 0c1e570 writes for the architecture
# (conversion/qwen.py Qwen3_5TextModel and Qwen3_5MoeTextModel, subclasses of Qwen3NextModel;
# conversion/kimi_linear.py KimiLinearModel: tests.helpers.gguf_models kimi_keys; conversion/lfm2.py
# LFM2MoeModel; conversion/nemotron.py NemotronHModel with is_moe), with a tiny vocabulary and MLP
# (they size no cache). Three checks:
#
# - kvcalc's bytes against a hand derivation (the arithmetic is in the comments);
# - the round trip: the keys converted from a preset's (or a vendored) config read back to its caches;
# - the real llama.cpp (llama-cpp-python 0.3.36 = llama.cpp 0c1e570) through the probe's child
#   process (tests.helpers.llama_cpp): llama.cpp's K, V, R and S bytes rebuilt from what it printed
#   (cells, streams, the layers it placed, the per-layer widths and state sizes) must print as it
#   printed them, equal kvcalc's ``--engine llama.cpp`` estimate part by part, on the same layers.
def write(tmp: Path, arch: str, keys: dict[str, Any]) -> Path:
    return gguf_file(tmp / f"{arch}.gguf", arch, keys)


# --- what the converters write ---------------------------------------------------------------------------


def qwen35_keys(hf: dict[str, Any], *, moe: bool, listed: bool) -> dict[str, Any]:
    """Qwen3_5(Moe)TextModel.set_gguf_parameters: Qwen2MoeModel's keys, the gated delta net as ssm.*
    (Qwen3NextModel), full_attention_interval, attention.recurrent_layers when the config lists
    layer_types (``listed``), rope.dimension_sections (_Qwen35MRopeMixin's [11, 11, 10, 0] for the real
    64 rope dims; in proportion for tinier heads)."""
    head_dim, v_heads = hf["head_dim"], hf["linear_num_value_heads"]
    rope = head_dim // 4  # partial_rotary_factor 0.25
    keys = {
        "block_count": hf["num_hidden_layers"], "context_length": 4096, "embedding_length": hf["hidden_size"],
        "feed_forward_length": 64, "attention.head_count": hf["num_attention_heads"],
        "attention.head_count_kv": hf["num_key_value_heads"], "attention.key_length": head_dim,
        "attention.value_length": head_dim, "rope.dimension_count": rope,
        "rope.dimension_sections": [rope * 11 // 64, rope * 11 // 64, rope // 2 - 2 * (rope * 11 // 64), 0], **TINY,
        "ssm.conv_kernel": hf["linear_conv_kernel_dim"], "ssm.state_size": hf["linear_key_head_dim"],
        "ssm.group_count": hf["linear_num_key_heads"], "ssm.time_step_rank": v_heads,
        "ssm.inner_size": hf["linear_value_head_dim"] * v_heads,
        "full_attention_interval": hf.get("full_attention_interval", 4),
    }  # fmt: skip
    if moe:
        keys.update({"expert_count": 4, "expert_used_count": 2, "expert_feed_forward_length": 32,
                     "expert_shared_feed_forward_length": 32})  # fmt: skip
    if listed:
        keys["attention.recurrent_layers"] = [t == "linear_attention" for t in hf["layer_types"]]
    return keys


def lfm2moe_keys(hf: dict[str, Any]) -> dict[str, Any]:
    """LFM2MoeModel.set_gguf_parameters: KV heads only on "full_attention" layers, shortconv.l_cache,
    the expert widths and the sigmoid gating."""
    return {
        "block_count": hf["num_hidden_layers"], "context_length": 4096, "embedding_length": hf["hidden_size"],
        "feed_forward_length": 64, "attention.head_count": hf["num_attention_heads"],
        "attention.head_count_kv": [hf["num_key_value_heads"] if t == "full_attention" else 0
                                    for t in hf["layer_types"]],
        "shortconv.l_cache": hf["conv_L_cache"], **TINY, "expert_count": 4, "expert_used_count": 2,
        "expert_feed_forward_length": 32, "leading_dense_block_count": 1, "expert_gating_func": 2,
    }  # fmt: skip


def nemotron_moe_keys(hf: dict[str, Any]) -> dict[str, Any]:
    """NemotronHModel (is_moe).set_gguf_parameters: GraniteHybridModel's Mamba-2 keys, head_count_kv
    per layer (0 off '*'), feed_forward_length per layer (the MoE width on 'E', else 0), key and
    value_length the attention head dim, the expert keys."""
    pattern, heads = hf["hybrid_override_pattern"], hf["mamba_num_heads"]
    return {
        "block_count": len(pattern), "context_length": 4096, "embedding_length": hf["hidden_size"],
        "attention.head_count": hf["num_attention_heads"],
        "attention.head_count_kv": [hf["num_key_value_heads"] if c == "*" else 0 for c in pattern],
        "feed_forward_length": [32 if c == "E" else 0 for c in pattern],
        "attention.key_length": hf["head_dim"], "attention.value_length": hf["head_dim"],
        "attention.layer_norm_epsilon": 1e-5, **TINY,
        "ssm.conv_kernel": hf["conv_kernel"], "ssm.state_size": hf["ssm_state_size"],
        "ssm.group_count": hf["n_groups"], "ssm.time_step_rank": heads, "ssm.inner_size": heads * hf["mamba_head_dim"],
        "expert_count": 4, "expert_used_count": 2, "expert_feed_forward_length": 32,
        "expert_shared_feed_forward_length": 32, "expert_shared_count": 1,
    }  # fmt: skip


# Small geometries for llama.cpp and the hand derivations.
SMALL_QWEN35 = {
    "num_hidden_layers": 8, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 32, "linear_num_key_heads": 2,
    "linear_num_value_heads": 4, "linear_value_head_dim": 32,
    "layer_types": ["linear_attention", "full_attention", "linear_attention", "linear_attention",
                    "full_attention", "linear_attention", "linear_attention", "full_attention"],
}  # fmt: skip
SMALL_LFM2MOE = {
    "num_hidden_layers": 6, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "conv_L_cache": 3,
    "layer_types": ["conv", "conv", "full_attention", "conv", "full_attention", "conv"],
}  # fmt: skip
SMALL_NH_MOE = {
    "hybrid_override_pattern": "MEM*EMEM*E", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 64, "mamba_num_heads": 8, "mamba_head_dim": 32, "n_groups": 2, "ssm_state_size": 16, "conv_kernel": 4,
}  # fmt: skip

FILES = {
    "qwen35": lambda: qwen35_keys(SMALL_QWEN35, moe=False, listed=True),
    "qwen35moe": lambda: qwen35_keys(SMALL_QWEN35, moe=True, listed=False),
    "kimi-linear": lambda: kimi_keys(SMALL_KIMI),
    "lfm2moe": lambda: lfm2moe_keys(SMALL_LFM2MOE),
    "nemotron_h_moe": lambda: nemotron_moe_keys(SMALL_NH_MOE),
}


def kinds(path: Path) -> list[str]:
    spec = api.load_model(str(path))
    assert not spec.warnings, spec.warnings
    names = {StateCache: "state", LatentCache: "mla", AttentionCache: "kv", NoCache: "none"}
    return [names[type(c)] for c in spec.caches]


# --- hand derivations ---------------------------------------------------------------------------------------


def test_qwen35_hand_derived(tmp_path: Path) -> None:
    path = write(tmp_path, "qwen35", FILES["qwen35"]())
    config, _ = gguf_config(read_header(path), "q")
    assert config["model_type"] == "qwen3_5_text" and config["layer_types"] == SMALL_QWEN35["layer_types"]
    assert [i for i, k in enumerate(kinds(path)) if k == "kv"] == [1, 4, 7]  # recurrent_layers, not the interval
    state = api.load_model(str(path)).caches[0]
    # conv: (4 - 1) x (2 key heads x 32 x 2 (Q, K) + 4 value heads x 32) = 3 x 256 = 768 elements;
    # state: 4 value heads x 32 x 32 = 4,096 elements.
    assert state.state_elements(whole_kernel=False) == (768, 4_096)
    # llama.cpp, 1000 tokens: 1024 cells x 3 layers x 2 (K, V) x 2 KV heads x 64 x 2 B = 1,572,864;
    # f32 states of one sequence: 5 x (768 + 4,096) x 4 B = 97,280.
    assert api.estimate(str(path), tokens=1000, engine="llama.cpp").total_bytes == 1_572_864 + 97_280
    # qwen35moe without the list: full attention every 4th layer (3 and 7).
    path = write(tmp_path, "qwen35moe", FILES["qwen35moe"]())
    assert [i for i, k in enumerate(kinds(path)) if k == "kv"] == [3, 7]


def test_kimi_linear_hand_derived(tmp_path: Path) -> None:
    path = write(tmp_path, "kimi-linear", FILES["kimi-linear"]())
    assert kinds(path) == ["state", "state", "mla", "state", "state", "mla"]
    spec = api.load_model(str(path))
    assert not any("mla_use_nope" in note for note in spec.notes)  # llama.cpp runs Kimi's MLA without RoPE
    # KDA: conv over q, k, v of 4 heads (head_count) x 32: 3 x (4 - 1) x 128 = 1,152 elements;
    # state 32 x 32 x 4 heads = 4,096 elements.
    assert spec.caches[0].state_elements(whole_kernel=False) == (1_152, 4_096)
    # llama.cpp, 1000 tokens: 1024 cells x 2 MLA layers x (64 + 16) x 2 B (K only) = 327,680;
    # 4 KDA layers x (1,152 + 4,096) x 4 B = 83,968.
    assert api.estimate(str(path), tokens=1000, engine="llama.cpp").total_bytes == 327_680 + 83_968


def test_lfm2moe_hand_derived(tmp_path: Path) -> None:
    path = write(tmp_path, "lfm2moe", FILES["lfm2moe"]())
    assert [i for i, k in enumerate(kinds(path)) if k == "kv"] == [2, 4]
    # short conv: (3 - 1) x 256 = 512 elements; 1024 cells x 2 layers x 2 x 2 KV heads x 64 x 2 B =
    # 1,048,576; 4 conv layers x 512 x 4 B = 8,192.
    assert api.estimate(str(path), tokens=1000, engine="llama.cpp").total_bytes == 1_048_576 + 8_192


def test_nemotron_h_moe_hand_derived(tmp_path: Path) -> None:
    path = write(tmp_path, "nemotron_h_moe", FILES["nemotron_h_moe"]())
    config, _ = gguf_config(read_header(path), "n")
    assert config["model_type"] == "nemotron_h" and config["hybrid_override_pattern"] == "MEM*EMEM*E"
    assert kinds(path) == ["state", "none", "state", "kv", "none", "state", "none", "state", "kv", "none"]


def test_nemotron_h_moe_bytes(tmp_path: Path) -> None:
    path = write(tmp_path, "nemotron_h_moe", FILES["nemotron_h_moe"]())
    # Mamba-2: inner 8 x 32 = 256; conv (4 - 1) x (256 + 2 x 2 x 16) = 960, SSM 16 x 256 = 4,096.
    # 1024 cells x 2 layers x 2 x 2 KV heads x 64 x 2 B = 1,048,576; 4 x (960 + 4,096) x 4 B = 80,896.
    assert api.estimate(str(path), tokens=1000, engine="llama.cpp").total_bytes == 1_048_576 + 80_896


# --- the round trip ------------------------------------------------------------------------------------------


def _ornith() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / "Ornith-1.0-35B-Qwen3.5-MoE.json").read_text())
    return dict(data.get("text_config", data))


def _no_state_dtype(c: Any) -> Any:
    return replace(c, recurrent_dtype=None) if isinstance(c, StateCache) else c


HYBRID_ROUND_TRIP = {
    "qwen35": ("qwen3.5-0.8b", lambda hf: qwen35_keys(hf, moe=False, listed=False)),
    "kimi-linear": ("kimi-linear-48b-a3b", kimi_keys),
    "nemotron_h_moe": ("nemotron-3-nano-30b-a3b", nemotron_moe_keys),
}


@pytest.mark.parametrize("arch", list(HYBRID_ROUND_TRIP))
def test_hybrid_round_trip_gives_the_presets_layers(tmp_path: Path, arch: str) -> None:
    preset, convert = HYBRID_ROUND_TRIP[arch]
    path = write(tmp_path, arch, convert(get_preset(preset).config))
    back, original = api.load_model(str(path)), api.load_model(preset)
    assert not back.warnings, back.warnings
    # The preset's mamba_ssm_dtype / mamba_ssm_cache_dtype (float32, vLLM's field) is no GGUF key:
    # llama.cpp keeps every state f32 whatever (create_memory), so the file's states carry no dtype.
    assert [_no_state_dtype(c) for c in back.caches] == [_no_state_dtype(c) for c in original.caches]
    a = api.estimate(str(path), tokens=5000, batch=2, engine="llama.cpp")
    assert a.total_bytes == api.estimate(preset, tokens=5000, batch=2, engine="llama.cpp").total_bytes


def test_round_trip_qwen35moe_listed_layers(tmp_path: Path) -> None:
    hf = _ornith()
    path = write(tmp_path, "qwen35moe", qwen35_keys(hf, moe=True, listed=True))
    from kvcalc.inputs.hf.configs import read_config

    back, original = api.load_model(str(path)), read_config(hf, name="ornith")
    assert not back.warnings, back.warnings
    assert [_no_state_dtype(c) for c in back.caches] == [_no_state_dtype(c) for c in original.caches]
    # 10 full layers x 4096 cells x 2 x 2 KV heads x 256 x 2 B = 83,886,080; 30 delta-net layers x
    # ((4 - 1) x (16 x 128 x 2 + 32 x 128) + 32 x 128 x 128) x 4 B = 30 x (24,576 + 524,288) x 4 = 65,863,680
    assert api.estimate(str(path), tokens=4096, engine="llama.cpp").total_bytes == 83_886_080 + 65_863_680


def test_kimi_linear_preset_figure(tmp_path: Path) -> None:
    path = write(tmp_path, "kimi-linear", kimi_keys(get_preset("kimi-linear-48b-a3b").config))
    # 7 MLA layers x 4096 cells x (512 + 64) x 2 B = 33,030,144; 20 KDA layers x (3 x 3 x 32 x 128 +
    # 128 x 128 x 32) x 4 B = 20 x (36,864 + 524,288) x 4 = 44,892,160.
    assert api.estimate(str(path), tokens=4096, engine="llama.cpp").total_bytes == 33_030_144 + 44_892_160


# --- what is refused ---------------------------------------------------------------------------------------


def test_hybrid_refusals(tmp_path: Path) -> None:
    keys = FILES["kimi-linear"]()
    two = dict(keys, **{"attention.head_count_kv": [0, 0, 2, 0, 0, 2]})
    with pytest.raises(SourceError, match="not 1 on every MLA layer"):
        api.load_model(str(write(tmp_path, "kimi-linear", two)))
    odd = dict(keys, **{"attention.key_length": 96})
    with pytest.raises(SourceError, match="not kv_lora_rank"):
        api.load_model(str(write(tmp_path, "kimi-linear", odd)))
    scalar = dict(keys, **{"attention.head_count_kv": 1})
    with pytest.raises(SourceError, match="must list the 6 layers"):
        api.load_model(str(write(tmp_path, "kimi-linear", scalar)))
    short = dict(FILES["qwen35"](), **{"attention.recurrent_layers": [True, False]})
    with pytest.raises(SourceError, match="recurrent_layers must list the 8 layers"):
        api.load_model(str(write(tmp_path, "qwen35", short)))


# --- the real llama.cpp --------------------------------------------------------------------------------------

# The files llama.cpp runs: real geometries (the presets', the vendored Qwen3.5-MoE config's), so that
# every MiB figure llama.cpp prints has three or more significant digits to check.
_LFM2_8B_LIKE = {  # made up in the shape of LFM2-8B-A1B: 24 layers, 6 of them attention
    "num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 8,
    "conv_L_cache": 3,
    "layer_types": ["full_attention" if i in (2, 6, 10, 14, 18, 21) else "conv" for i in range(24)],
}  # fmt: skip
# Qwen3.5-0.8B with full attention on layers listed out of the interval's rhythm: the list must win.
_QWEN35_LISTED = {
    **get_preset("qwen3.5-0.8b").config,
    "layer_types": ["full_attention" if i in (1, 4, 7, 11, 15, 23) else "linear_attention" for i in range(24)],
}
HYBRID_LLAMA_CPP_FILES = {
    "qwen35": lambda: qwen35_keys(_QWEN35_LISTED, moe=False, listed=True),
    "qwen35moe": lambda: qwen35_keys(_ornith(), moe=True, listed=False),
    "kimi-linear": lambda: kimi_keys(get_preset("kimi-linear-48b-a3b").config),
    "lfm2moe": lambda: lfm2moe_keys(_LFM2_8B_LIKE),
    "nemotron_h_moe": lambda: nemotron_moe_keys(get_preset("nemotron-3-nano-30b-a3b").config),
}
# (tokens per sequence, sequences, one unified stream). kimi-linear aborts llama.cpp 0c1e570 while it
# reserves its graph when the 512-token ubatch does not split evenly over the streams (3 or 5
# sequences, not unified: GGML_ASSERT(ggml_can_repeat(b, a)) in ggml_add), after its caches are made;
# it gets workloads of 2 and 4 streams.
WORKLOADS = {arch: CONTEXT_WORKLOADS for arch in HYBRID_LLAMA_CPP_FILES} | {
    "kimi-linear": [(1000, 1, False), (4096, 4, False), (3000, 3, True), (700, 2, False)],
}
_N_HEAD = re.compile(r"print_info: n_head += (\d+)")


def measured(arch: str, keys: dict[str, Any], load: str, result: dict[str, Any]) -> dict[str, int]:
    """llama.cpp's K, V, R and S bytes as the probe's parser rebuilt them from what llama.cpp printed
    (tests.helpers.llama_cpp ``measured_bytes``), but for kimi-linear's KDA rows, which the probe does
    not rebuild: n_embd_r = 3 x (d_conv - 1) x n_head x kda_head_dim and n_embd_s = kda_head_dim^2 x
    n_head (src/llama-hparams.cpp @ 0c1e570), from the n_head llama.cpp printed and the file's keys,
    each printing as llama.cpp printed its MiB."""
    if arch != "kimi-linear":
        return measured_bytes(result)
    found = {"k": 0, "v": 0, "r": 0, "s": 0}
    for kv in result["caches"]:
        assert kv["prints_as_logged"] and kv["v_mib"] == "0.00", kv  # MLA: K only (has_v = !is_mla)
        found["k"] += kv["k_bytes"]
    (rs,) = result["recurrent"]
    assert rs["rs_seq"] == 0 and (rs["r_type"], rs["s_type"]) == ("f32", "f32"), rs
    match = _N_HEAD.search(load)
    assert match is not None
    heads, dim, d_conv = int(match[1]), keys["kda.head_dim"], keys["ssm.conv_kernel"]
    found["r"] = rs["rows"] * rs["layers"] * 3 * (d_conv - 1) * heads * dim * 4
    found["s"] = rs["rows"] * rs["layers"] * dim * dim * heads * 4
    assert (f"{found['r'] / 2**20:.2f}", f"{found['s'] / 2**20:.2f}") == (rs["r_mib"], rs["s_mib"])
    return found


@cache
def _hybrid_llama_cpp_run(arch: str, tmp: str) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    keys = HYBRID_LLAMA_CPP_FILES[arch]()
    path = write(Path(tmp), arch, keys)
    engine = LlamaCpp()
    contexts = [
        {"n_ctx": t * b, "n_seq_max": b, "n_batch": engine.n_batch, "n_ubatch": engine.n_ubatch,
         "kv_unified": u, "swa_full": False, "type_k": "f16", "type_v": "f16"}
        for t, b, u in WORKLOADS[arch]
    ]  # fmt: skip
    return path, keys, run_llama_cpp(path, contexts)


@pytest.mark.parametrize("arch", list(HYBRID_LLAMA_CPP_FILES))
def test_hybrid_llama_cpp_allocates_what_kvcalc_estimates(arch: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    pytest.importorskip("llama_cpp")
    path, keys, answer = _hybrid_llama_cpp_run(arch, str(tmp_path_factory.mktemp(arch)))
    spec = api.load_model(str(path))
    assert not spec.warnings, spec.warnings
    for (tokens, batch, unified), result in zip(WORKLOADS[arch], answer["results"], strict=True):
        assert result["ok"], result["log"][-1000:]
        got = measured(arch, keys, answer["load"], result)
        assert got == estimated_bytes(path, tokens, batch, unified), (tokens, batch, unified)
        assert got["k"] > 0 and got["r"] > 0
        # The same layers: those llama.cpp gave K/V and recurrent state are kvcalc's.
        assert [int(i) for i in KV_LAYER.findall(result["log"])] == [
            i for i, c in enumerate(spec.caches) if isinstance(c, AttentionCache | LatentCache)
        ]
        assert [int(i) for i in RS_LAYER.findall(result["log"])] == [
            i for i, c in enumerate(spec.caches) if isinstance(c, StateCache)
        ]
