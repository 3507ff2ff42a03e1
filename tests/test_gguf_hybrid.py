"""GGUF files of recurrent and hybrid architectures: llama.cpp's ``mamba``, ``mamba2``,
``granitehybrid`` (Granite-4.0-H: Mamba-2 + attention), ``jamba`` (Mamba-1 + attention) and ``lfm2``
(gated short convolutions + attention), read by ``kvcalc.inputs.gguf.gguf_config``.

Each file is written with the gguf package holding the keys convert_hf_to_gguf.py writes for the
architecture (ggml-org/llama.cpp conversion/mamba.py @ 32e9e044, conversion/granite.py @ 010f22d8,
conversion/jamba.py @ 7bca1fd9, conversion/lfm2.py @ 051139f5; ``convert`` below mirrors them for
a preset's config). Three checks:

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

import re
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

gguf: Any = pytest.importorskip("gguf")

from .test_gguf import write  # noqa: E402  (gguf is installed)

# --- the files --------------------------------------------------------------------------------------------


# A vocabulary and MLP too small to matter: they shape no cache (the weights are never allocated).
TINY = {"vocab_size": 32, "tokenizer.ggml.model": "none", "attention.layer_norm_rms_epsilon": 1e-5}


def convert(arch: str, hf: dict[str, Any]) -> dict[str, Any]:
    """The cache-shaping keys convert_hf_to_gguf.py writes for ``hf`` (an HF config dict)."""
    layers, hidden = hf["num_hidden_layers"], hf["hidden_size"]
    keys: dict[str, Any] = {"block_count": layers, "embedding_length": hidden, "context_length": 4096, **TINY}
    if arch == "mamba":  # MambaModel.set_gguf_parameters
        keys.update({
            "feed_forward_length": 0, "attention.head_count": 0, "ssm.conv_kernel": hf["conv_kernel"],
            "ssm.inner_size": hf["intermediate_size"], "ssm.state_size": hf["state_size"],
            "ssm.time_step_rank": hf["time_step_rank"],
        })  # fmt: skip
    elif arch == "mamba2":  # Mamba2Model.set_gguf_parameters: time_step_rank = d_inner / head_dim
        inner = hf["expand"] * hidden
        keys.update({
            "feed_forward_length": 0, "attention.head_count": 0, "ssm.conv_kernel": hf["conv_kernel"],
            "ssm.inner_size": inner, "ssm.state_size": hf["state_size"],
            "ssm.time_step_rank": inner // hf["head_dim"], "ssm.group_count": hf["n_groups"],
        })  # fmt: skip
    elif arch == "granitehybrid":  # GraniteHybridModel.set_gguf_parameters (no head_dim: popped)
        attention = [i for i, t in enumerate(hf["layer_types"]) if t == "attention"]
        keys.update({
            "feed_forward_length": 64, "attention.head_count": hf["num_attention_heads"],
            "attention.head_count_kv": [hf["num_key_value_heads"] if i in attention else 0 for i in range(layers)],
            "ssm.conv_kernel": hf["mamba_d_conv"], "ssm.state_size": hf["mamba_d_state"],
            "ssm.group_count": hf["mamba_n_groups"], "ssm.inner_size": hf["mamba_expand"] * hidden,
            "ssm.time_step_rank": hf["mamba_n_heads"], "expert_count": 0, "expert_used_count": 0,
        })  # fmt: skip
    elif arch == "jamba":  # JambaModel.set_gguf_parameters
        offset, period = hf["attn_layer_offset"], hf["attn_layer_period"]
        kv = [0] * offset + [
            hf["num_key_value_heads"] if (i - offset) % period == 0 else 0 for i in range(offset, layers)
        ]
        keys.update({
            "feed_forward_length": 64, "attention.head_count": hf["num_attention_heads"],
            "attention.head_count_kv": kv, "ssm.conv_kernel": hf["mamba_d_conv"],
            "ssm.inner_size": hf["mamba_expand"] * hidden, "ssm.state_size": hf["mamba_d_state"],
            "ssm.time_step_rank": hf["mamba_dt_rank"], "expert_count": 0, "expert_used_count": 0,
        })  # fmt: skip
    elif arch == "lfm2":  # LFM2Model.set_gguf_parameters: KV heads only on attention layers
        types = hf.get("layer_types") or [
            "full_attention" if i in hf["full_attn_idxs"] else "conv" for i in range(layers)
        ]  # Lfm2Config.__post_init__ derives layer_types from full_attn_idxs
        keys.update({
            "feed_forward_length": 64, "attention.head_count": hf["num_attention_heads"],
            "attention.head_count_kv": [hf["num_key_value_heads"] if t != "conv" else 0 for t in types],
            "shortconv.l_cache": hf["conv_L_cache"],
        })  # fmt: skip
    return keys


def read_gguf(path: Path) -> Any:
    return api.load_model(str(path))


# --- hand derivations ---------------------------------------------------------------------------------------

GRANITE_MICRO = get_preset("granite-4.0-h-micro").config


def test_granitehybrid_maps_to_the_granite_4_h_layers(tmp_path: Path) -> None:
    path = write(tmp_path / "g.gguf", "granitehybrid", convert("granitehybrid", GRANITE_MICRO))
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
    path = write(tmp_path / "m2.gguf", "mamba2", convert("mamba2", hf))
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
    path = write(tmp_path / "l.gguf", "lfm2", convert("lfm2", hf))
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
    path = write(tmp_path / "j.gguf", "jamba", convert("jamba", hf))
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
    path = write(tmp_path / "m.gguf", "mamba", convert("mamba", hf))
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
    path = write(tmp_path / f"{arch}.gguf", arch, convert(arch, get_preset(preset).config))
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
        read_gguf(write(tmp_path / "a.gguf", "granitehybrid", uneven))
    scalar = dict(keys, **{"attention.head_count_kv": 8})
    with pytest.raises(SourceError, match="must list the 40 layers"):
        read_gguf(write(tmp_path / "b.gguf", "granitehybrid", scalar))
    odd = dict(keys, **{"ssm.time_step_rank": 60})  # 4096 / 60 heads
    with pytest.raises(SourceError, match="no multiple of"):
        read_gguf(write(tmp_path / "c.gguf", "granitehybrid", odd))
    missing = {k: v for k, v in keys.items() if k != "ssm.state_size"}
    with pytest.raises(SourceError, match=r"no granitehybrid\.ssm\.state_size"):
        read_gguf(write(tmp_path / "d.gguf", "granitehybrid", missing))


# --- the real llama.cpp --------------------------------------------------------------------------------------


def run_llama_cpp(path: Path, contexts: list[dict[str, Any]]) -> dict[str, Any]:
    """llama.cpp's log of loading the file (no_alloc: sized, not allocated) and of each context,
    through the probe's own child process (kvcalc.engines.llamacpp.probe.measure_file), with what the
    probe's parser read from each context's log (its KV caches and recurrent memory)."""
    from kvcalc.engines.llamacpp.probe import measure_file

    answer = measure_file(path, contexts, timeout=600, no_alloc=True)
    results = [{**r, "ok": "error" not in r} for r in answer["results"]]
    return {"load": answer["load"], "model": answer["model"], "results": results}


# The probe's own patterns for llama.cpp's log, shared with tests/test_gguf_more.py and
# tests/test_gguf_hybrid2.py through these names.
_KV = llamacpp_probe._SIZE_LINE
_KV_LAYER = llamacpp_probe._KV_LAYER_LINE
_RS_LAYER = llamacpp_probe._RS_LAYER_LINE
_per_layer = llamacpp_probe._per_layer
# Kept for tests/test_gguf_hybrid2.py, which rebuilds more architectures' rows itself: every
# print_info figure, and the recurrent size line without its P column (this file reads the probe's).
_INFO = re.compile(r"print_info: (\w+) += (.+)")
_RS = re.compile(
    r"llama_memory_recurrent: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+) seqs +(\d+) rs_seq\), "
    r"R \((\w+)\): +([\d.]+) MiB, S \((\w+)\): +([\d.]+) MiB"
)
_BYTES = {"f16": 2, "f32": 4}


def _mib(value: int) -> str:
    return f"{value / 2**20:.2f}"


def measured(result: dict[str, Any]) -> dict[str, int]:
    """llama.cpp's K, V, R and S bytes as the probe's parser rebuilt them from what llama.cpp printed
    (cells, streams, the layers it placed, the per-layer K/V widths, n_embd_r / n_embd_s from the
    SSM sizes or lfm2's shortconv.l_cache), each printing as llama.cpp printed its MiB."""
    found = {"k": 0, "v": 0, "r": 0, "s": 0}
    for kv in result["caches"]:
        assert kv["prints_as_logged"], kv
        found["k"] += kv["k_bytes"]
        found["v"] += kv["v_bytes"]
    for rs in result["recurrent"]:
        assert rs["rs_seq"] == 0 and rs["r_prints_as_logged"] and rs["s_prints_as_logged"], rs
        assert rs["p_mib"] == "0.00"  # llama.cpp's P (PLE conv history): qwen4exp only
        found["r"] += rs["r_bytes"]
        found["s"] += rs["s_bytes"]
    return found


def estimated(path: Path, tokens: int, batch: int, unified: bool) -> dict[str, int]:
    """kvcalc's K, V, R (conv) and S (recurrent) bytes under --engine llama.cpp (an MLA layer's
    latent + rope row is its K; a MoE or MLP layer holds nothing)."""
    est = api.estimate(str(path), tokens=tokens, batch=batch, engine="llama.cpp", options={"kv_unified": unified})
    engine = LlamaCpp()
    found = {"k": 0, "v": 0, "r": 0, "s": 0}
    for g in est.groups:
        if isinstance(g.cache, StateCache):
            (conv, conv_type), (rec, rec_type) = engine.state_parts(g.cache)
            assert conv_type is not None and rec_type is not None
            found["r"] += g.layers * batch * conv * conv_type.bytes_per_element
            found["s"] += g.layers * batch * rec * rec_type.bytes_per_element
        elif not isinstance(g.cache, NoCache):
            assert isinstance(g.cache, AttentionCache | LatentCache)
            k_row, v_row, _ = engine.rows(g.cache, 1)
            found["k"] += g.layers * g.slots * k_row * 2  # f16
            found["v"] += g.layers * g.slots * v_row * 2
    assert sum(found.values()) == est.total_bytes
    return found


LLAMA_CPP_FILES = {
    "granitehybrid": lambda: convert("granitehybrid", GRANITE_MICRO),
    "jamba": lambda: convert("jamba", get_preset("jamba-v0.1").config),
    "lfm2": lambda: convert("lfm2", get_preset("lfm2-1.2b").config),
    "mamba": lambda: convert("mamba", get_preset("mamba-2.8b").config),
    # kvcalc has no Mamba-2 preset or fixture: a made-up geometry of 8 layers (n_groups 8, state 128).
    "mamba2": lambda: convert("mamba2", {"num_hidden_layers": 8, "hidden_size": 1024, "expand": 2, "head_dim": 64,
                                         "state_size": 128, "n_groups": 8, "conv_kernel": 4}),
}  # fmt: skip
# (tokens per sequence, sequences, one unified stream)
WORKLOADS = [(1000, 1, False), (4096, 3, False), (3000, 2, True), (700, 5, False)]


@cache
def _llama_cpp_run(arch: str, tmp: str) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    keys = LLAMA_CPP_FILES[arch]()
    path = write(Path(tmp) / f"{arch}.gguf", arch, keys)
    engine = LlamaCpp()
    contexts = [
        {"n_ctx": t * b, "n_seq_max": b, "n_batch": engine.n_batch, "n_ubatch": engine.n_ubatch,
         "kv_unified": u, "swa_full": False, "type_k": "f16", "type_v": "f16"}
        for t, b, u in WORKLOADS
    ]  # fmt: skip
    return path, keys, run_llama_cpp(path, contexts)


@pytest.mark.parametrize("arch", list(LLAMA_CPP_FILES))
def test_llama_cpp_allocates_what_kvcalc_estimates(arch: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    pytest.importorskip("llama_cpp")
    path, _, answer = _llama_cpp_run(arch, str(tmp_path_factory.mktemp(arch)))
    for (tokens, batch, unified), result in zip(WORKLOADS, answer["results"], strict=True):
        assert result["ok"], result["log"][-1000:]
        got = measured(result)
        want = estimated(path, tokens, batch, unified)
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
