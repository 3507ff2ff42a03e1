"""GGUF files of llama.cpp's ``t5`` (encoder-decoder), and the architectures kvcalc refuses beside it:
``t5encoder`` (encoder only) and a ``deepseek4`` (DeepSeek-V4) of several KV heads, read by
``kvcalc.inputs.gguf.gguf_config``.

Each t5 file holds the keys convert_hf_to_gguf.py writes (ggml-org/llama.cpp 0c1e570, the copy
llama-cpp-python 0.3.36 vendors: conversion/t5.py T5Model.set_gguf_parameters). What llama.cpp
allocates for it (src/llama-model.cpp create_memory, default branch: one llama_kv_cache over
block_count layers; src/models/t5.cpp: cross-attention K/V projected from the encoder output at every
decode, never cached):

- kvcalc's bytes against a hand derivation (the arithmetic in the comments);
- the round trip from the t5-small preset: the converter's keys for its config read back to its caches;
- the real llama.cpp (llama-cpp-python 0.3.36 = llama.cpp 0c1e570): ``api.probe_llamacpp`` hands it
  the file's own metadata (llama.cpp creates every tensor the architecture requires), and its KV cache
  must equal kvcalc's ``--engine llama.cpp`` estimate byte for byte (skipped without llama_cpp).
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
from kvcalc.spec import AttentionCache
from tests.helpers.gguf_files import F32, U32, Keys, general, tokenizer, total, typed_gguf_file
from tests.helpers.llama_cpp import needs_llama_cpp

gguf: Any = pytest.importorskip("gguf")


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


def test_deepseek4_needs_one_kv_head(tmp_path: Path) -> None:
    # deepseek4 is read (tests/inputs/gguf/test_gguf_deepseek4.py); llama.cpp would cache n_head_kv K rows per token.
    keys: Keys = {**general("DeepSeek V4"), "block_count": (U32, 3), "attention.head_count": (U32, 4),
                  "attention.head_count_kv": (U32, 4)}  # fmt: skip
    with pytest.raises(SourceError, match="head_count_kv is 4, not 1"):
        load_model(str(typed_gguf_file(tmp_path / "ds4.gguf", "deepseek4", keys)))


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
