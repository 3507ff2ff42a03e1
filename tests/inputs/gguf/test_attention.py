"""GGUF files of attention-only llama.cpp architectures whose geometry differs by layer: ``gemma4``
(sliding and full layers with their own head dims and KV heads; the last layers reuse earlier K/V),
``mimo2`` (MiMo-V2-Flash: sliding layers with their own KV heads, K and V of different widths) and
``deci`` (Llama-3.x Nemotron NAS: KV heads per layer, 0 on no-op and linear-attention layers), read
by ``kvcalc.inputs.gguf.gguf_config``.

Each file holds the keys convert_hf_to_gguf.py writes for the architecture (ggml-org/llama.cpp
0c1e570, the copy llama-cpp-python 0.3.36 vendors: conversion/gemma.py Gemma4Model,
conversion/mimo.py MimoV2Model, conversion/deci.py DeciModel). Three checks:

- kvcalc's bytes against a hand derivation (the arithmetic in the comments: 2 for K and V, layers
  x KV heads x head dim x 2 B of f16 x tokens, or llama.cpp's cells);
- the round trip from a preset (gemma-4-31b, mimo-v2-flash, llama-3.3-nemotron-super-49b): the keys
  the converter writes for the preset's config read back to its per-layer caches and llama.cpp
  estimates;
- the real llama.cpp (llama-cpp-python 0.3.36 = llama.cpp 0c1e570): ``api.probe_llamacpp`` hands it
  the file's own metadata, and each KV cache it allocates (cells, layers, bytes rebuilt from its
  per-layer K/V widths) must equal kvcalc's ``--engine llama.cpp`` estimate (skipped without
  llama_cpp).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvcalc import api
from kvcalc.api import load_model
from kvcalc.engines.llamacpp.probe import LlamaCppProbeError, file_plan, measure
from kvcalc.errors import SourceError, UsageError
from kvcalc.inputs.gguf import read_header
from kvcalc.inputs.presets import get_preset
from kvcalc.spec import AttentionCache, NoCache
from tests.helpers.gguf_files import F32, U32, Keys, general, tokenizer, total, typed_gguf_file
from tests.helpers.llama_cpp import PROBE_WORKLOADS, needs_llama_cpp

gguf: Any = pytest.importorskip("gguf")


I32 = "int32"


# --- what the converters write ------------------------------------------------------------------------------


def _gemma4_keys(text: dict[str, Any]) -> Keys:
    """Gemma4Model.set_gguf_parameters (on Gemma3Model's) for an HF Gemma4TextConfig: key/value_length
    global_head_dim, key/value_length_swa head_dim, head_count_kv per layer (num_key_value_heads on
    sliding layers, num_global_key_value_heads on full ones), the sliding pattern, shared_kv_layers."""
    swa = [t == "sliding_attention" for t in text["layer_types"]]
    return {
        **general("Gemma 4"), "context_length": (U32, text["max_position_embeddings"]),
        "embedding_length": (U32, text["hidden_size"]), "block_count": (U32, text["num_hidden_layers"]),
        "feed_forward_length": (U32, 512), "attention.head_count": (U32, text["num_attention_heads"]),
        "attention.layer_norm_rms_epsilon": (F32, 1e-6), "rope.freq_base": (F32, 1e6),
        "attention.sliding_window": (U32, text["sliding_window"]),
        "attention.head_count_kv": (f"array[{I32}]", [
            text["num_key_value_heads"] if s else text["num_global_key_value_heads"] for s in swa
        ]),
        "attention.shared_kv_layers": (U32, text["num_kv_shared_layers"]),
        "embedding_length_per_layer_input": (U32, 0), "attention.sliding_window_pattern": ("array[bool]", swa),
        "attention.key_length": (U32, text["global_head_dim"]),
        "attention.value_length": (U32, text["global_head_dim"]),
        "attention.key_length_swa": (U32, text["head_dim"]), "attention.value_length_swa": (U32, text["head_dim"]),
        "rope.dimension_count": (U32, text["global_head_dim"]), "rope.dimension_count_swa": (U32, text["head_dim"]),
        "rope.freq_base_swa": (F32, 1e4), "final_logit_softcapping": (F32, 30.0), **tokenizer("llama"),
    }  # fmt: skip


def _small_gemma4(kinds: str, shared: int = 0) -> dict[str, Any]:
    """A small Gemma 4 (S sliding, F full): 4 heads; sliding layers 2 KV heads of 64, window 128;
    full layers 1 KV head of 256."""
    return {
        "num_hidden_layers": len(kinds), "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 64, "num_global_key_value_heads": 1, "global_head_dim": 256, "sliding_window": 128,
        "num_kv_shared_layers": shared, "max_position_embeddings": 131072,
        "layer_types": ["sliding_attention" if k == "S" else "full_attention" for k in kinds],
    }  # fmt: skip


def _mimo2_keys(hf: dict[str, Any], nextn: int = 0) -> Keys:
    """MimoV2Model.set_gguf_parameters for an HF MiMo-V2-Flash config: TextModel's keys (key_length
    head_dim), value_length v_head_dim, head_count_kv per layer, sliding_window and the hybrid
    pattern as int32 arrays (the writer's type for Python ints), the MTP layers as NextN ones."""
    pattern = list(hf["hybrid_layer_pattern"]) + [1] * nextn
    keys: Keys = {
        **general("MiMo V2"), "block_count": (U32, len(pattern)),
        "context_length": (U32, hf["max_position_embeddings"]),
        "embedding_length": (U32, hf["hidden_size"]), "feed_forward_length": (U32, 512),
        "attention.head_count": (U32, hf["num_attention_heads"]), "attention.key_length": (U32, hf["head_dim"]),
        "attention.value_length": (U32, hf["v_head_dim"]), "rope.freq_base": (F32, 5e6),
        "expert_count": (U32, 4), "expert_used_count": (U32, 2), "expert_feed_forward_length": (U32, 64),
        "attention.head_count_kv": (f"array[{I32}]", [
            hf["swa_num_key_value_heads"] if p else hf["num_key_value_heads"] for p in pattern
        ]),
        "attention.sliding_window": (U32, hf["sliding_window"]),
        "attention.sliding_window_pattern": (f"array[{I32}]", pattern),
        "rope.dimension_count": (U32, hf["head_dim"] // 3), "attention.layer_norm_rms_epsilon": (F32, 1e-5),
        **tokenizer(),
    }  # fmt: skip
    if nextn:
        keys["nextn_predict_layers"] = (U32, nextn)
    return keys


# A small MiMo: full layers 0 and 5 with 1 KV head, sliding layers 2 KV heads; K 64, V 32; window 128.
SMALL_MIMO = {
    "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 1, "swa_num_key_value_heads": 2,
    "head_dim": 64, "v_head_dim": 32, "sliding_window": 128, "max_position_embeddings": 262144,
    "hybrid_layer_pattern": [0, 1, 1, 1, 1, 0],
}  # fmt: skip


def _deci_keys(hf: dict[str, Any]) -> Keys:
    """DeciModel.set_gguf_parameters for an HF config with block_configs: head_count and
    head_count_kv per layer (attention: heads, heads // n_heads_in_group; linear attention: heads,
    0; no-op: 0, 0), key/value_length hidden_size // heads."""
    heads = hf["num_attention_heads"]
    kv, query = [], []
    for block in hf["block_configs"]:
        attention = block["attention"]
        group = attention.get("n_heads_in_group")
        kv.append(heads // group if group else 0)
        query.append(heads if group or attention.get("replace_with_linear") else 0)
    return {
        **general("Nemotron NAS"), "rope.freq_base": (F32, 5e5), "attention.head_count_kv": (f"array[{I32}]", kv),
        "attention.head_count": (f"array[{I32}]", query), "feed_forward_length": (f"array[{I32}]", [512] * len(kv)),
        "block_count": (U32, len(kv)), "context_length": (U32, hf["max_position_embeddings"]),
        "embedding_length": (U32, hf["hidden_size"]), "attention.layer_norm_rms_epsilon": (F32, 1e-5),
        "attention.key_length": (U32, hf["hidden_size"] // heads),
        "attention.value_length": (U32, hf["hidden_size"] // heads), "vocab_size": (U32, 6),
        "rope.dimension_count": (U32, hf["hidden_size"] // heads), **tokenizer(),
    }  # fmt: skip


def _block(group: int | None, *, linear: bool = False) -> dict[str, Any]:
    return {"attention": {"n_heads_in_group": group, "no_op": group is None and not linear,
                          "replace_with_linear": linear}}  # fmt: skip


# A small NAS model: 4 heads of 64; layers of 1, 2 and 4 KV heads, a linear-attention and a no-op layer.
SMALL_DECI = {
    "hidden_size": 256, "num_attention_heads": 4, "max_position_embeddings": 131072,
    "block_configs": [_block(4), _block(2), _block(None, linear=True), _block(None), _block(1)],
}  # fmt: skip

FILES: dict[str, tuple[str, Keys]] = {
    "gemma4": ("gemma4", _gemma4_keys(_small_gemma4("SSSSSF"))),
    "gemma4 shared": ("gemma4", _gemma4_keys(_small_gemma4("SSFSSFSF", shared=2))),
    "mimo2": ("mimo2", _mimo2_keys(SMALL_MIMO)),
    "deci": ("deci", _deci_keys(SMALL_DECI)),
}


def file_of(name: str, tmp_path: Path) -> Path:
    arch, keys = FILES[name]
    return typed_gguf_file(tmp_path / f"{name.replace(' ', '-')}.gguf", arch, keys)


def _geometry(path: Path) -> list[tuple[str, int | None, int | None, int | None, int | None]]:
    """(kind, KV heads, K dim, V dim, window) of each layer."""
    rows = []
    for c in load_model(str(path)).caches:
        if isinstance(c, AttentionCache):
            rows.append(("attention", c.kv_heads, c.k_head_dim, c.v_head_dim, c.window))
        else:
            rows.append((type(c).__name__, None, None, None, None))
    return rows


# --- by hand ---------------------------------------------------------------------------------------------


def test_gemma4_hand_derived(tmp_path: Path) -> None:
    path = file_of("gemma4", tmp_path)
    spec = load_model(str(path))
    assert spec.model_type == "gemma4_text" and not spec.warnings, spec.warnings
    assert _geometry(path) == [("attention", 2, 64, 64, 128)] * 5 + [("attention", 1, 256, 256, None)]
    # 1000 tokens: full layer 2 x 1 KV head x 256 x 2 B x 1000 + 5 sliding x 2 x 2 x 64 x 2 B x 128
    assert total(path, 1000) == 2 * 1 * 256 * 2 * 1000 + 5 * 2 * 2 * 64 * 2 * 128 == 1_351_680
    # llama.cpp: 1024 cells on the full layer; sliding layers pad(128 + 512, 256) = 768 cells
    assert total(path, 1000, engine="llama.cpp") == 2 * 256 * 2 * 1024 + 5 * 2 * 2 * 64 * 2 * 768 == 3_014_656


def test_gemma4_shared_hand_derived(tmp_path: Path) -> None:
    path = file_of("gemma4 shared", tmp_path)
    sliding, full = ("attention", 2, 64, 64, 128), ("attention", 1, 256, 256, None)
    shared = ("SharedCache", None, None, None, None)
    # layers 6 (sliding) and 7 (full) reuse the K/V of layers 4 and 5: nothing of their own
    assert _geometry(path) == [sliding, sliding, full, sliding, sliding, full, shared, shared]
    # 2 full x 2 x 256 x 2 B x 1000 + 4 sliding x 2 x 2 x 64 x 2 B x 128
    assert total(path, 1000) == 2 * 2 * 256 * 2 * 1000 + 4 * 2 * 2 * 64 * 2 * 128 == 2_310_144


def test_mimo2_hand_derived(tmp_path: Path) -> None:
    path = file_of("mimo2", tmp_path)
    spec = load_model(str(path))
    assert spec.model_type == "mimo_v2_flash" and not spec.warnings, spec.warnings
    full, sliding = ("attention", 1, 64, 32, None), ("attention", 2, 64, 32, 128)
    assert _geometry(path) == [full, sliding, sliding, sliding, sliding, full]
    # 1000 tokens: 2 full x 1 KV head x (64 + 32) x 2 B x 1000 + 4 sliding x 2 x 96 x 2 B x 128 (the file's
    # window, which llama.cpp uses; not sliding_window_size + 1)
    assert total(path, 1000) == 2 * 1 * 96 * 2 * 1000 + 4 * 2 * 96 * 2 * 128 == 580_608


def test_mimo2_nextn_layers_are_not_counted(tmp_path: Path) -> None:
    # MimoV2Model counts its MTP layers in block_count and lists them (sliding) in the per-layer
    # arrays; a plain llama.cpp context filters them out (create_memory: il < n_layer()).
    path = typed_gguf_file(tmp_path / "mtp.gguf", "mimo2", _mimo2_keys(SMALL_MIMO, nextn=1))
    assert _geometry(path) == _geometry(file_of("mimo2", tmp_path))
    assert total(path, 1000) == 580_608


def test_deci_hand_derived(tmp_path: Path) -> None:
    path = file_of("deci", tmp_path)
    spec = load_model(str(path))
    assert spec.model_type == "nemotron-nas" and not spec.warnings, spec.warnings
    rows = _geometry(path)
    assert rows[:2] == [("attention", 1, 64, 64, None), ("attention", 2, 64, 64, None)]
    assert rows[2][0] == rows[3][0] == "NoCache" and rows[4] == ("attention", 4, 64, 64, None)
    assert all(isinstance(c, NoCache) for c in spec.caches[2:4])
    # 1000 tokens: 2 x (1 + 2 + 4) KV heads x 64 x 2 B x 1000
    assert total(path, 1000) == 2 * 7 * 64 * 2 * 1000 == 1_792_000


def test_decilm_7b_style(tmp_path: Path) -> None:
    # DeciLM-7B: TextModel's scalar head_count and head_count_kv from num_key_value_heads_per_layer
    keys = {**_deci_keys(SMALL_DECI), "attention.head_count": (U32, 4)}
    keys["attention.head_count_kv"] = (f"array[{I32}]", [4, 2, 1, 1, 2])
    path = typed_gguf_file(tmp_path / "decilm.gguf", "deci", keys)
    assert [row[1] for row in _geometry(path)] == [4, 2, 1, 1, 2]
    # 2 x (4 + 2 + 1 + 1 + 2) KV heads x 64 x 2 B x 1000
    assert total(path, 1000) == 2 * 10 * 64 * 2 * 1000 == 2_560_000


# --- round trip: preset -> the converter's keys -> read back -------------------------------------------------


def _estimates(model: str, tokens: int = 4096, batch: int = 2) -> tuple[int, int]:
    return tuple(  # type: ignore[return-value]
        api.estimate(model, tokens=tokens, batch=batch, kv_dtype="fp16", engine=e).total_bytes
        for e in ("theoretical", "llama.cpp")
    )


def test_gemma4_round_trip(tmp_path: Path) -> None:
    text = get_preset("gemma-4-31b").config["text_config"]
    path = typed_gguf_file(tmp_path / "g4.gguf", "gemma4", _gemma4_keys(text))
    back, preset = load_model(str(path)), load_model("gemma-4-31b")
    assert back.caches == preset.caches and not back.warnings
    assert _estimates(str(path)) == _estimates("gemma-4-31b")
    # llama.cpp, 4096 tokens: 10 full layers x 4096 cells x 2 x 4 KV heads x 512 x 2 B = 335,544,320;
    # 50 sliding layers x pad(1024 + 512, 256) = 1536 cells x 2 x 16 x 256 x 2 B = 1,258,291,200
    got = api.estimate(str(path), tokens=4096, engine="llama.cpp").total_bytes
    assert got == 335_544_320 + 1_258_291_200


def test_mimo2_round_trip(tmp_path: Path) -> None:
    hf = get_preset("mimo-v2-flash").config
    path = typed_gguf_file(tmp_path / "mimo.gguf", "mimo2", _mimo2_keys(hf, nextn=3))
    back, preset = load_model(str(path)), load_model("mimo-v2-flash")
    assert not back.warnings and back.layers == preset.layers == 48
    # The preset's sliding_window_size 128 is a window of 129 for transformers (kvcalc's config
    # rule); the converter writes sliding_window 128, which llama.cpp uses: otherwise the same layers.
    assert [c.window for c in preset.caches if isinstance(c, AttentionCache) and c.window] == [129] * 39
    assert back.caches == tuple(
        c if not isinstance(c, AttentionCache) or c.window is None else AttentionCache(c.kv_heads, 192, 128, window=128)
        for c in preset.caches
    )
    # llama.cpp pads both windows to the same cells: pad(128 (or 129) + 512, 256) = 768
    assert _estimates(str(path))[1] == _estimates("mimo-v2-flash")[1]
    # llama.cpp, 4096 tokens: 9 full layers x 4096 cells x 4 KV heads x (192 + 128) x 2 B = 94,371,840;
    # 39 sliding x 768 cells x 8 x 320 x 2 B = 153,354,240
    assert api.estimate(str(path), tokens=4096, engine="llama.cpp").total_bytes == 94_371_840 + 153_354_240


def test_deci_round_trip(tmp_path: Path) -> None:
    hf = get_preset("llama-3.3-nemotron-super-49b").config
    path = typed_gguf_file(tmp_path / "nas.gguf", "deci", _deci_keys(hf))
    back, preset = load_model(str(path)), load_model("llama-3.3-nemotron-super-49b")
    assert back.caches == preset.caches and not back.warnings
    assert _estimates(str(path)) == _estimates("llama-3.3-nemotron-super-49b")
    # 49 attention layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 200,704 B a token; 31 no-op layers
    assert api.estimate(str(path), tokens=4096, engine="llama.cpp").total_bytes == 200_704 * 4096 == 822_083_584


# --- refused -------------------------------------------------------------------------------------------------


def _refused(tmp_path: Path, arch: str, keys: Keys, match: str) -> None:
    with pytest.raises(SourceError, match=match):
        load_model(str(typed_gguf_file(tmp_path / "bad.gguf", arch, keys)))


def test_gemma4_refusals(tmp_path: Path) -> None:
    # the last layer sliding: llama.cpp keeps it so, kvcalc's gemma4 rule (transformers) makes it full
    _refused(tmp_path, "gemma4", _gemma4_keys(_small_gemma4("SSSSFS")), "last layer is sliding")
    # sharing layers whose donors are not a sliding then a full layer: llama.cpp's reuse asserts
    _refused(tmp_path, "gemma4", _gemma4_keys(_small_gemma4("SSSSFFSF", shared=2)), "KV-sharing layers")
    # K and V head dims that differ: llama.cpp refuses the model
    keys = {**_gemma4_keys(_small_gemma4("SSSSSF")), "attention.value_length": (U32, 128)}
    _refused(tmp_path, "gemma4", keys, "K and V head dims")
    # no sliding layer: llama.cpp asserts is_swa_any() for an architecture with a window
    _refused(tmp_path, "gemma4", _gemma4_keys(_small_gemma4("FFFF")), "no sliding layer")


def test_mimo2_refusals(tmp_path: Path) -> None:
    keys = {**_mimo2_keys(SMALL_MIMO), "attention.head_count_kv": (f"array[{I32}]", [1, 2, 2, 4, 2, 1])}
    _refused(tmp_path, "mimo2", keys, "differs within full or sliding layers")


def test_deci_refusals(tmp_path: Path) -> None:
    keys = _deci_keys(SMALL_DECI)
    _refused(tmp_path, "deci", {**keys, "attention.head_count": (f"array[{I32}]", [4, 8, 4, 0, 4])}, "differs")
    first_no_op = {**SMALL_DECI, "block_configs": [_block(None), *SMALL_DECI["block_configs"][1:]]}
    _refused(tmp_path, "deci", _deci_keys(first_no_op), "first layer has no attention heads")
    _refused(tmp_path, "deci", {**keys, "attention.head_count_kv": (f"array[{I32}]", [3, 2, 0, 0, 1])}, "no divisor")


# --- the real llama.cpp ------------------------------------------------------------------------------------


@needs_llama_cpp
@pytest.mark.parametrize("name", ["gemma4", "gemma4 shared", "mimo2"])
def test_llama_cpp_agrees(name: str, tmp_path: Path) -> None:
    path = file_of(name, tmp_path)
    for tokens, batch in PROBE_WORKLOADS:
        report = api.probe_llamacpp(str(path), tokens=tokens, batch=batch)
        assert report.checks and all(c.match for c in report.checks), (name, tokens, batch, report.checks)
        assert report.match and report.measured_bytes == report.estimate.total_bytes


@needs_llama_cpp
def test_llama_cpp_hand_figures(tmp_path: Path) -> None:
    # gemma4, 1000 tokens: the full layer 1024 cells x 2 x 1 KV head x 256 x 2 B = 1,048,576; the five
    # sliding layers 768 cells x 2 x 2 x 64 x 2 B = 393,216 each
    report = api.probe_llamacpp(str(file_of("gemma4", tmp_path)), tokens=1000, batch=1)
    assert report.measured_bytes == 1_048_576 + 5 * 393_216 == 3_014_656 and report.match
    # mimo2: 2 full layers x 1024 cells x 1 x (64 + 32) x 2 B + 4 sliding x 768 x 2 x 96 x 2 B
    report = api.probe_llamacpp(str(file_of("mimo2", tmp_path)), tokens=1000, batch=1)
    assert report.measured_bytes == 2 * 1024 * 96 * 2 + 4 * 768 * 2 * 96 * 2 == 1_572_864 and report.match


@needs_llama_cpp
def test_llama_cpp_deci(tmp_path: Path) -> None:
    # llama.cpp gives every deci layer a K/V tensor, 0 wide on the no-op and linear layers
    # (n_head_kv 0) and lists all 5 in its cache; the probe counts the 3 that hold K/V, as kvcalc does.
    path = file_of("deci", tmp_path)
    for tokens, batch in PROBE_WORKLOADS:
        report = api.probe_llamacpp(str(path), tokens=tokens, batch=batch)
        (check,) = report.checks
        assert (check.measured_layers, check.estimated_layers) == (3, 3) and report.match
        assert check.measured_cells == check.estimated_cells and check.prints_as_logged
        assert check.measured_bytes == check.estimated_bytes == report.estimate.total_bytes
    # 1000 tokens: 1024 cells x 2 x (4 + 2 + 1) KV heads x 64 x 2 B
    report = api.probe_llamacpp(str(path), tokens=1000, batch=1)
    assert report.measured_bytes == 1024 * 2 * 7 * 64 * 2 == 1_835_008


# --- plain attention architectures, and exaone4's window ---------------------------------------------------


def _plain_keys(arch: str, extra: Keys, layers: int = 3) -> Keys:
    """TextModel's (or LlamaModel's) keys for a small model: 3 layers, 4 heads (2 KV) of 256 / 4 = 64
    unless key_length says otherwise, plus each converter's own keys in ``extra``."""
    return {
        **general(arch), "context_length": (U32, 4096), "embedding_length": (U32, 256),
        "block_count": (U32, layers), "feed_forward_length": (U32, 512), "attention.head_count": (U32, 4),
        "attention.head_count_kv": (U32, 2), "attention.layer_norm_rms_epsilon": (F32, 1e-5),
        "rope.freq_base": (F32, 1e4), "rope.dimension_count": (U32, 64), "vocab_size": (U32, 6), **tokenizer(),
        **extra,
    }  # fmt: skip


_MOE: Keys = {"expert_count": (U32, 4), "expert_used_count": (U32, 2), "expert_feed_forward_length": (U32, 64)}
_GRANITE: Keys = {
    "logit_scale": (F32, 8.0), "attention.scale": (F32, 0.0078125), "embedding_scale": (F32, 12.0),
    "residual_scale": (F32, 0.22),
}  # fmt: skip
_DIM_128: Keys = {
    "attention.key_length": (U32, 128),
    "attention.value_length": (U32, 128),
    "rope.dimension_count": (U32, 128),
}
# arch -> (HF model_type read, the converter's extra keys, KV heads, head dim)
PLAIN: dict[str, tuple[str, Keys, int, int]] = {
    "arcee": ("arcee", {}, 2, 64),  # ArceeModel (LlamaModel's keys; a ReLU^2 MLP, no cache effect)
    "granite": ("granite", _GRANITE, 2, 64),  # GraniteModel: LlamaModel's keys and the four scales
    "granitemoe": ("granitemoe", {**_GRANITE, **_MOE}, 2, 64),
    "olmo": ("olmo", {"attention.layer_norm_epsilon": (F32, 1e-5), "attention.clamp_kqv": (F32, 8.0)}, 2, 64),
    # OLMoE is multi-head (llama.cpp's olmoe graph norms K over n_embd): 4 KV heads
    "olmoe": ("olmoe", {**_MOE, "attention.head_count_kv": (U32, 4)}, 4, 64),
    "seed_oss": ("seed_oss", _DIM_128, 2, 128),  # head_dim 128 written as key/value_length
    "ernie4_5": ("ernie4_5", {}, 2, 64),
    "ernie4_5-moe": (
        "ernie4_5_moe",
        {**_MOE, "interleave_moe_layer_step": (U32, 1), "leading_dense_block_count": (U32, 1)},
        2,
        64,
    ),
    "smollm3": ("smollm3", {}, 2, 64),
    "internlm2": ("internlm2", {}, 2, 64),
    "minicpm": ("minicpm", {"embedding_scale": (F32, 12.0), "residual_scale": (F32, 0.22)}, 2, 64),
    "stablelm": ("stablelm", {"attention.layer_norm_epsilon": (F32, 1e-5), "rope.dimension_count": (U32, 16)}, 2, 64),
    "mistral3": ("ministral3", _DIM_128, 2, 128),  # Ministral3Model (LlamaModel): head_dim 128
    "exaone4": ("exaone4", {}, 2, 64),  # 3 layers: no window (see below)
}


@pytest.mark.parametrize("arch", list(PLAIN))
def test_plain_hand_derived(arch: str, tmp_path: Path) -> None:
    model_type, extra, kv, dim = PLAIN[arch]
    path = typed_gguf_file(tmp_path / "plain.gguf", arch, _plain_keys(arch, extra))
    spec = load_model(str(path))
    assert spec.model_type == model_type and not spec.warnings, spec.warnings
    assert _geometry(path) == [("attention", kv, dim, dim, None)] * 3
    # 1000 tokens: 2 (K, V) x 3 layers x KV heads x head dim x 2 B x 1000; llama.cpp 1024 cells
    assert total(path, 1000) == 2 * 3 * kv * dim * 2 * 1000
    assert total(path, 1000, engine="llama.cpp") == 2 * 3 * kv * dim * 2 * 1024


def test_plain_hand_figures() -> None:
    # 2 x 3 x 2 KV heads x 64 x 2 B x 1000 = 1,536,000 (granite ... exaone4); 4 x 64 or 2 x 128: 3,072,000
    figures = {a: 2 * 3 * kv * dim * 2 * 1000 for a, (_, _, kv, dim) in PLAIN.items()}
    assert {a for a, f in figures.items() if f == 1_536_000} == set(PLAIN) - {"olmoe", "seed_oss", "mistral3"}
    assert figures["olmoe"] == figures["seed_oss"] == figures["mistral3"] == 3_072_000


def test_plain_window_is_dropped(tmp_path: Path) -> None:
    # None of these converters writes a window, and llama.cpp runs none: a file that has one is
    # read without it, with a note.
    keys = _plain_keys("granite", {**_GRANITE, "attention.sliding_window": (U32, 128)})
    model = api.open_model(str(typed_gguf_file(tmp_path / "w.gguf", "granite", keys)))
    assert {c.window for c in model.spec.caches if isinstance(c, AttentionCache)} == {None}
    assert any("sliding_window ignored" in n for n in model.spec.notes)


def _exaone4_keys(layers: int, window: int | None, pattern: list[bool] | None) -> Keys:
    """Exaone4Model: TextModel's keys, vocab_size, and with a window in the config sliding_window and
    the per-layer pattern (from layer_types or sliding_window_pattern)."""
    extra: Keys = {}
    if window is not None:
        extra["attention.sliding_window"] = (U32, window)
    if pattern is not None:
        extra["attention.sliding_window_pattern"] = ("array[bool]", pattern)
    return _plain_keys("exaone4", extra, layers=layers)


def _lllg(layers: int) -> list[bool]:
    return [(i + 1) % 4 != 0 for i in range(layers)]


EXAONE4 = {
    # EXAONE-4.0-32B's shape: 64 layers, "LLLG", window 128 here
    "exaone4 64": (64, 128, _lllg(64)),
    # 64 layers, no window keys: llama.cpp's own n_swa 4096 and period 4
    "exaone4 64 default": (64, None, None),
    # 30 layers (EXAONE-4.0-1.2B's count) with window keys: llama.cpp applies no window
    "exaone4 30": (30, 128, _lllg(30)),
}


def test_exaone4_hand_derived(tmp_path: Path) -> None:
    one = 2 * 2 * 64 * 2  # bytes a token of one layer: 2 (K, V) x 2 KV heads x 64 x 2 B
    path = typed_gguf_file(tmp_path / "e64.gguf", "exaone4", _exaone4_keys(*EXAONE4["exaone4 64"]))
    assert [c.window for c in load_model(str(path)).caches] == [128, 128, 128, None] * 16
    # llama.cpp, 1000 tokens: 16 full layers x 1024 cells + 48 sliding x pad(128 + 512, 256) = 768 cells
    assert total(path, 1000, engine="llama.cpp") == one * (16 * 1024 + 48 * 768) == 27_262_976
    path = typed_gguf_file(tmp_path / "e64d.gguf", "exaone4", _exaone4_keys(*EXAONE4["exaone4 64 default"]))
    assert [c.window for c in load_model(str(path)).caches] == [4096, 4096, 4096, None] * 16
    # 64 x 1024 cells: a 4096-token window holds every one of them
    assert total(path, 1000, engine="llama.cpp") == one * 64 * 1024 == 33_554_432
    model = api.open_model(
        str(typed_gguf_file(tmp_path / "e30.gguf", "exaone4", _exaone4_keys(*EXAONE4["exaone4 30"])))
    )
    assert {c.window for c in model.spec.caches if isinstance(c, AttentionCache)} == {None}
    assert any("only with 64 layers" in n for n in model.spec.notes)


def test_exaone4_without_sliding_layer_is_refused(tmp_path: Path) -> None:
    _refused(tmp_path, "exaone4", _exaone4_keys(64, 128, [False] * 64), "flags no sliding layer")


@needs_llama_cpp
@pytest.mark.parametrize("name", [*PLAIN, *EXAONE4])
def test_llama_cpp_agrees_plain(name: str, tmp_path: Path) -> None:
    if name in EXAONE4:
        path = typed_gguf_file(tmp_path / "e.gguf", "exaone4", _exaone4_keys(*EXAONE4[name]))
    else:
        path = typed_gguf_file(tmp_path / "p.gguf", name, _plain_keys(name, PLAIN[name][1]))
    for tokens, batch in PROBE_WORKLOADS:
        report = api.probe_llamacpp(str(path), tokens=tokens, batch=batch)
        assert report.checks and all(c.match for c in report.checks), (name, tokens, batch, report.checks)
        assert report.match and report.measured_bytes == report.estimate.total_bytes


# GGUF files of llama.cpp's ``t5`` (encoder-decoder), and the architectures kvcalc refuses beside it:
# ``t5encoder`` (encoder only) and a ``deepseek4`` (DeepSeek-V4) of several KV heads, read by
# ``kvcalc.inputs.gguf.gguf_config``.
#
# Each t5 file holds the keys convert_hf_to_gguf.py writes (ggml-org/llama.cpp 0c1e570, the copy
# llama-cpp-python 0.3.36 vendors: conversion/t5.py T5Model.set_gguf_parameters). What llama.cpp
# allocates for it (src/llama-model.cpp create_memory, default branch: one llama_kv_cache over
# block_count layers; src/models/t5.cpp: cross-attention K/V projected from the encoder output at every
# decode, never cached):
#
# - kvcalc's bytes against a hand derivation (the arithmetic in the comments);
# - the round trip from the t5-small preset: the converter's keys for its config read back to its caches;
# - the real llama.cpp (llama-cpp-python 0.3.36 = llama.cpp 0c1e570): ``api.probe_llamacpp`` hands it
#   the file's own metadata (llama.cpp creates every tensor the architecture requires), and its KV cache
#   must equal kvcalc's ``--engine llama.cpp`` estimate byte for byte (skipped without llama_cpp).
def _t5_keys(hf: dict[str, Any]) -> Keys:
    """T5Model.set_gguf_parameters for an HF T5Config: context_length n_positions (512 when absent),
    embedding_length d_model, feed_forward_length d_ff, block_count num_layers, decoder_block_count
    only when the config has num_decoder_layers, head_count num_heads, key/value_length d_kv; no
    head_count_kv. Fields a preset leaves out take T5Config's defaults (d_ff 2048, epsilon 1e-6,
    32 buckets); decoder_start_token_id 0 as in t5-small's config.json."""
    keys: Keys = {
        **general("T5"), "context_length": (U32, hf.get("n_positions", 512)),
        "embedding_length": (U32, hf["d_model"]), "feed_forward_length": (U32, hf.get("d_ff", 2048)),
        "block_count": (U32, hf["num_layers"]), "attention.head_count": (U32, hf["num_heads"]),
        "attention.key_length": (U32, hf["d_kv"]), "attention.value_length": (U32, hf["d_kv"]),
        "attention.layer_norm_epsilon": (F32, hf.get("layer_norm_epsilon", 1e-6)),
        "attention.relative_buckets_count": (U32, hf.get("relative_attention_num_buckets", 32)),
        "attention.layer_norm_rms_epsilon": (F32, hf.get("layer_norm_epsilon", 1e-6)),
        "decoder_start_token_id": (U32, 0), **tokenizer("t5"),
    }  # fmt: skip
    if "num_decoder_layers" in hf:
        keys["decoder_block_count"] = (U32, hf["num_decoder_layers"])
    return keys


def _t5_encoder_keys(hf: dict[str, Any]) -> Keys:
    """T5EncoderModel.set_gguf_parameters: T5Model's keys but the decoder's."""
    keys = _t5_keys(hf)
    del keys["decoder_start_token_id"]
    return {**keys, **general("T5 encoder")}


# A small T5: 3 layers (encoder and decoder), 4 heads of d_kv 32 (not d_model / heads = 64).
SMALL_T5 = {"d_model": 256, "d_ff": 512, "num_layers": 3, "num_heads": 4, "d_kv": 32, "n_positions": 512}


def t5_file(tmp_path: Path, **changes: Any) -> Path:
    return typed_gguf_file(tmp_path / "t5.gguf", "t5", _t5_keys({**SMALL_T5, **changes}))


# --- by hand ---------------------------------------------------------------------------------------------


def test_t5_hand_derived(tmp_path: Path) -> None:
    path = t5_file(tmp_path)
    spec = load_model(str(path))
    assert spec.model_type == "t5" and spec.layers == 3 and not spec.warnings, spec.warnings
    assert spec.caches == (AttentionCache(4, 32, 32),) * 3 + (AttentionCache(4, 32, 32, tokens="encoder"),) * 3
    # theoretical, 1000 decoder tokens over 500 encoder tokens: self-attention 2 (K, V) x 3 layers x 4
    # heads x 32 x 2 B x 1000 = 1,536,000; cross-attention the same over 500 tokens = 768,000
    assert total(path, 1000, encoder_tokens=500) == 2 * 3 * 4 * 32 * 2 * (1000 + 500) == 2_304_000
    # llama.cpp: the self-attention's 1024 cells alone, whatever the encoder length
    for encoder in (500, 5000):
        got = total(path, 1000, engine="llama.cpp", encoder_tokens=encoder)
        assert got == 2 * 3 * 4 * 32 * 2 * 1024 == 1_572_864


def test_t5_llama_cpp_notes(tmp_path: Path) -> None:
    est = api.estimate(str(t5_file(tmp_path)), tokens=1000, batch=2, kv_dtype="fp16", engine="llama.cpp")
    assert any("no T5 cross-attention" in n for n in est.notes)
    assert any("aborts a T5 context" in n for n in est.notes)
    est = api.estimate(str(t5_file(tmp_path)), tokens=1000, batch=2, kv_dtype="fp16", engine="llama-server")
    assert not any("aborts a T5 context" in n for n in est.notes)


def test_t5_round_trip(tmp_path: Path) -> None:
    hf = get_preset("t5-small").config
    path = typed_gguf_file(tmp_path / "t5s.gguf", "t5", _t5_keys(hf))
    back, preset = load_model(str(path)), load_model("t5-small")
    assert back.caches == preset.caches and back.layers == preset.layers == 6 and not back.warnings
    for engine in ("theoretical", "llama.cpp"):
        assert (
            total(path, 4096, engine=engine)
            == api.estimate("t5-small", tokens=4096, kv_dtype="fp16", engine=engine).total_bytes
        )
    # llama.cpp, 4096 tokens: 6 decoder layers x 4096 cells x 2 x 8 heads x 64 x 2 B; no cross-attention
    assert total(path, 4096, engine="llama.cpp") == 6 * 4096 * 2 * 8 * 64 * 2 == 50_331_648
    # theoretical: cross-attention over 4096 encoder tokens (the default) doubles it
    assert total(path, 4096) == 2 * 50_331_648


# --- refused -------------------------------------------------------------------------------------------------


def test_t5_refusals(tmp_path: Path) -> None:
    # fewer or more decoder than encoder layers: llama.cpp's cache has block_count layers either way
    for decoder in (2, 4):
        with pytest.raises(SourceError, match="decoder_block_count"):
            load_model(str(t5_file(tmp_path, num_decoder_layers=decoder)))
    keys = {**_t5_keys(SMALL_T5), "attention.value_length": (U32, 64)}
    with pytest.raises(SourceError, match="K and V head dims 32 and 64"):
        load_model(str(typed_gguf_file(tmp_path / "kv.gguf", "t5", keys)))


def test_t5encoder_refused(tmp_path: Path) -> None:
    path = typed_gguf_file(tmp_path / "enc.gguf", "t5encoder", _t5_encoder_keys(SMALL_T5))
    with pytest.raises(SourceError, match="encoder-only T5"):
        load_model(str(path))


# --- the real llama.cpp ------------------------------------------------------------------------------------


@needs_llama_cpp
def test_llama_cpp_agrees_t5(tmp_path: Path) -> None:
    path = t5_file(tmp_path)
    for kw in ({"tokens": 1000}, {"tokens": 5000}, {"tokens": 5000, "batch": 3, "options": {"kv_unified": True}}):
        report = api.probe_llamacpp(str(path), **kw)
        assert report.checks and all(c.match for c in report.checks), (kw, report.checks)
        assert report.match and report.measured_bytes == report.estimate.total_bytes
    # 1000 tokens: 1024 cells x 3 layers x 2 (K, V) x 4 heads x 32 x 2 B, no cross-attention cache
    report = api.probe_llamacpp(str(path), tokens=1000, kv_dtype="fp16")
    assert report.measured_bytes == 1024 * 3 * 2 * 4 * 32 * 2 == 1_572_864 and report.match
    # q8_0: 34 B per block of 32, 128 per row = 4 blocks = 136 B a row
    report = api.probe_llamacpp(str(path), tokens=700, kv_dtype="q8_0")
    assert report.measured_bytes == 768 * 3 * 2 * 4 * 34 == 626_688 and report.match


@needs_llama_cpp
def test_llama_cpp_t5_streams_abort(tmp_path: Path) -> None:
    # Two sequences in their own streams (not unified): llama.cpp 0c1e570 aborts building the graph.
    with pytest.raises(UsageError, match="ggml_can_repeat"):
        api.probe_llamacpp(str(t5_file(tmp_path)), tokens=1000, batch=2)


def _measured(path: Path) -> list[dict[str, Any]]:
    request = {"n_ctx": 1000, "n_seq_max": 1, "n_batch": 2048, "n_ubatch": 512, "kv_unified": False,
               "swa_full": False, "type_k": "f16", "type_v": "f16"}  # fmt: skip
    caches: list[dict[str, Any]] = measure(file_plan(read_header(path), str(path), nextn=0), [request])["results"][0][
        "caches"
    ]
    return caches


@needs_llama_cpp
def test_llama_cpp_what_is_refused(tmp_path: Path) -> None:
    # The facts behind the refusals: 1024 cells x 3 layers (block_count) x 2 x 4 x 32 x 2 B = 1,572,864
    # for a t5encoder (which runs no decoder) and for a t5 whose decoder has 2 layers.
    encoder = typed_gguf_file(tmp_path / "enc.gguf", "t5encoder", _t5_encoder_keys(SMALL_T5))
    fewer = typed_gguf_file(tmp_path / "dec2.gguf", "t5", _t5_keys({**SMALL_T5, "num_decoder_layers": 2}))
    for path in (encoder, fewer):
        (cache,) = _measured(path)
        assert (cache["layers"], cache["cells"]) == (3, 1024)
        assert cache["k_bytes"] + cache["v_bytes"] == 1_572_864
    # a decoder deeper than the encoder does not load at all
    more = typed_gguf_file(tmp_path / "dec4.gguf", "t5", _t5_keys({**SMALL_T5, "num_decoder_layers": 4}))
    with pytest.raises(LlamaCppProbeError, match="range_check"):
        _measured(more)
