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
from kvcalc.spec import AttentionCache, StateCache
from tests.helpers.gguf_files import gguf_file
from tests.helpers.gguf_models import GRANITE_MICRO, SMALL_MAMBA2, convert
from tests.helpers.llama_cpp import CONTEXT_WORKLOADS, estimated_bytes, measured_bytes, run_llama_cpp

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
