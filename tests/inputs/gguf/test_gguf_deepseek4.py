"""GGUF files of llama.cpp's ``deepseek4`` (DeepSeek-V4), read by ``kvcalc.inputs.gguf.gguf_config``, and the
llama.cpp engine's rules for the caches llama.cpp 0c1e570 gives it (src/llama-kv-cache-dsv4.cpp
``llama_kv_cache_dsv4``, built by src/llama-model.cpp create_memory's deepseek4 branch):

- a K-only window over every layer: one head_dim row per cell, pad(min(n_ctx_seq, window + n_ubatch), 256)
  cells per sequence (n_ctx_seq with swa_full), one stream per sequence even with kv_unified;
- CSA (ratio 4) and HCA (ratio 128) K-only head_dim rows in pad(ceil(n_ctx_seq / ratio), 256) cells, and
  the lightning indexer's indexer.key_length rows on the CSA layers, CSA's cells;
- f32 compressor states, kv and score, each n_embd_state x state_size per sequence: CSA 2 x head_dim x 8,
  HCA head_dim x 128, indexer 2 x indexer.key_length x 8.

The file holds DeepSeek-V4-Flash's geometry (the deepseek-v4-flash preset) as conversion/deepseek.py
DeepseekV4Model writes it, with no tensors: llama.cpp creates them with no_alloc (sizes computed,
nothing allocated) and builds a real context, whose logged cache sizes must equal kvcalc's
``--engine llama.cpp`` estimate byte for byte (skipped without llama_cpp).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kvcalc.api import estimate, load_model
from kvcalc.engines.llamacpp.probe import measure_file
from kvcalc.errors import SourceError
from kvcalc.spec import CompressedCache, IndexerCache, KVWindowCache
from tests.helpers.gguf_files import F32, U32, Keys, general, typed_gguf_file
from tests.helpers.llama_cpp import needs_llama_cpp

gguf: Any = pytest.importorskip("gguf")


MIB = 2**20

# deepseek-v4-flash's compress_ratios (44 entries: the last is the MTP layer): layers 0, 1 sliding,
# then CSA (4) and HCA (128) alternating: 21 CSA layers, 20 HCA layers, 43 in all.
RATIOS = [0, 0] + [4, 128] * 20 + [4, 0]


def flash_keys(**change: tuple[str, Any]) -> Keys:
    """What DeepseekV4Model.set_gguf_parameters writes for DeepSeek-V4-Flash's config (TextModel's keys,
    then its own). hash_layer_count is 0, not Flash's 3: hash-routed layers read an i32 tid2eid table that a
    file without tensors cannot type (llama.cpp aborts building the graph); they route experts, no cache."""
    keys: Keys = {
        **general("DeepSeek V4 Flash"),
        "tokenizer.ggml.model": ("string", "none"),
        "block_count": (U32, 43),
        "context_length": (U32, 1048576),
        "embedding_length": (U32, 4096),
        "attention.head_count": (U32, 64),
        "attention.head_count_kv": (U32, 1),
        "rope.freq_base": (F32, 10000.0),
        "attention.layer_norm_rms_epsilon": (F32, 1e-6),
        "expert_count": (U32, 256),
        "expert_used_count": (U32, 6),
        "expert_gating_func": (U32, 4),  # sqrtsoftplus, which src/models/deepseek4.cpp requires
        "attention.key_length": (U32, 512),
        "attention.value_length": (U32, 512),
        "vocab_size": (U32, 129280),
        "rope.dimension_count": (U32, 64),
        "attention.q_lora_rank": (U32, 1024),
        "attention.sliding_window": (U32, 128),
        "expert_feed_forward_length": (U32, 2048),
        "expert_shared_count": (U32, 1),
        "expert_weights_scale": (F32, 1.5),
        "expert_weights_norm": ("bool", True),
        "swiglu_clamp_exp": ("array[float32]", [10.0] * 43),
        "swiglu_clamp_shexp": ("array[float32]", [10.0] * 43),
        "attention.indexer.head_count": (U32, 64),
        "attention.indexer.key_length": (U32, 128),
        "attention.indexer.top_k": (U32, 512),
        "attention.output_group_count": (U32, 8),
        "attention.output_lora_rank": (U32, 1024),
        "attention.compress_ratios": ("array[uint32]", RATIOS),
        "attention.compress_rope_freq_base": (F32, 160000.0),
        "hyper_connection.count": (U32, 4),
        "hyper_connection.sinkhorn_iterations": (U32, 20),
        "hyper_connection.epsilon": (F32, 1e-6),
        "hash_layer_count": (U32, 0),
        "embedding_length_out": (U32, 4096 * 4),
    }
    keys.update(change)
    return keys


@pytest.fixture(scope="module")
def flash(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return typed_gguf_file(tmp_path_factory.mktemp("ds4") / "flash.gguf", "deepseek4", flash_keys())


# --- reading the file -----------------------------------------------------------------------------------


def test_reads_as_the_preset(flash: Path) -> None:
    spec = load_model(str(flash))
    assert spec.model_type == "deepseek_v4" and spec.layers == 43
    assert not spec.warnings  # every key the converter writes is read or known to size no cache
    windows = [c for c in spec.caches if isinstance(c, KVWindowCache)]
    assert len(windows) == 43 and {(c.head_dim, c.window) for c in windows} == {(512, 128)}
    ratios = [c.ratio for c in spec.caches if isinstance(c, CompressedCache)]
    assert ratios.count(4) == 21 and ratios.count(128) == 20
    assert {c.head_dim for c in spec.caches if isinstance(c, IndexerCache)} == {128}
    for engine in ("theoretical", "transformers", "llama.cpp"):
        got = estimate(str(flash), tokens=5000, batch=2, kv_dtype="fp16", engine=engine).total_bytes
        assert got == estimate("deepseek-v4-flash", tokens=5000, batch=2, kv_dtype="fp16", engine=engine).total_bytes


def test_refuses_other_geometries(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="compress_ratios must list a ratio for every block"):
        load_model(str(typed_gguf_file(tmp_path / "a.gguf", "deepseek4", flash_keys(**{
            "attention.compress_ratios": ("array[uint32]", RATIOS[:40])}))))  # fmt: skip
    with pytest.raises(SourceError, match="value_length unlike key_length 512"):
        load_model(str(typed_gguf_file(tmp_path / "b.gguf", "deepseek4", flash_keys(**{
            "attention.value_length": (U32, 256)}))))  # fmt: skip


# --- by hand --------------------------------------------------------------------------------------------


def test_llama_cpp_bytes_by_hand(flash: Path) -> None:
    # One sequence of 4096 tokens, f16 (2 B), n_ubatch 512: n_ctx = n_ctx_seq = 4096.
    window = 43 * 768 * 512 * 2  # 43 layers x pad(min(4096, 128 + 512), 256) = 768 cells x 512 x 2 B
    csa = 21 * 1024 * 512 * 2  # 21 layers x pad(ceil(4096 / 4), 256) = 1024 cells x 512
    hca = 20 * 256 * 512 * 2  # 20 layers x pad(ceil(4096 / 128) = 32, 256) = 256 cells x 512
    lid = 21 * 1024 * 128 * 2  # the indexer: CSA's cells x 128
    # f32 states, kv and score (2 x 4 B): CSA 21 layers x (2 x 512) x 8 rows, HCA 20 x 512 x 128,
    # indexer 21 x (2 x 128) x 8.
    states = 2 * 4 * (21 * 1024 * 8 + 20 * 512 * 128 + 21 * 256 * 8)
    assert window + csa + hca + lid + states == 78_790_656
    assert estimate(str(flash), tokens=4096, kv_dtype="fp16", engine="llama.cpp").total_bytes == 78_790_656
    # --kv-unified, 4 x 2048 tokens: n_ctx = n_ctx_seq = 8192, and every one of the 4 sequences keeps its own
    # 768-cell window, pad(8192 / 4) = 2048 CSA cells and 256 HCA cells (not one shared stream).
    unified = 4 * (43 * 768 * 512 * 2 + 21 * 2048 * (512 + 128) * 2 + 20 * 256 * 512 * 2)
    unified += 4 * 2 * 4 * (21 * 1024 * 8 + 20 * 512 * 128 + 21 * 256 * 8)
    assert unified == 425_263_104
    got = estimate(str(flash), tokens=2048, batch=4, options={"kv_unified": True}, kv_dtype="fp16", engine="llama.cpp")
    assert got.total_bytes == unified


# --- the real llama.cpp ---------------------------------------------------------------------------------

# Workloads: (kvcalc estimate keywords, llama_context_params). n_ctx = pad(B x T, 256); n_batch 2048 and
# n_ubatch 512 are llama.cpp's command-line defaults, kvcalc's.
WORKLOADS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"tokens": 4096, "kv_dtype": "fp16"}, {"n_ctx": 4096, "n_seq_max": 1}),
    ({"tokens": 2048, "batch": 4, "options": {"kv_unified": True}, "kv_dtype": "fp16"},
     {"n_ctx": 8192, "n_seq_max": 4, "kv_unified": True}),
    ({"tokens": 1024, "batch": 3, "kv_dtype": "q8_0"},
     {"n_ctx": 3072, "n_seq_max": 3, "type_k": "q8_0", "type_v": "q8_0", "flash_attn": True}),
    ({"tokens": 1000, "batch": 2, "options": {"swa_full": True}, "kv_dtype": "fp16"},
     {"n_ctx": 2000, "n_seq_max": 2, "swa_full": True}),
]  # fmt: skip

_KV_LINE = re.compile(
    r"llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+)/\d+ seqs\), K \((\w+)\): +([\d.]+) "
    r"MiB, V \(\w+\): +([\d.]+) MiB\nllama_kv_cache: attn_rot_k = \d+, n_embd_head_k_all = (\d+)"
)
_STATE_LINE = re.compile(
    r"llama_dsv4_comp_state: (\w+) ratio = (\d+), state = (\d+) x (\d+), streams = (\d+), rs_seq = (\d+), "
    r"layers = (\d+), size = +([\d.]+) MiB"
)


def _logged(log: str) -> dict[str, tuple[int, int, str]]:
    """Each DSV4 cache llama.cpp logged: name -> (exact bytes from its logged shape, layers, MiB as logged).
    The K-only caches (src/llama-kv-cache.cpp size line, then attn_rot's line naming the head dim) come in
    the constructor's order: the raw iswa's full half (0 layers) and window, CSA, HCA, indexer; ggml's row
    size from the gguf package's GGML_QUANT_SIZES. States are f32 (GGML_TYPE_F32): 2 tensors x width x
    rows x streams x (1 + rs_seq) planes."""
    caches = _KV_LINE.findall(log)
    assert len(caches) == 5, log
    out: dict[str, tuple[int, int, str]] = {}
    for name, (mib, cells, layers, seqs, ktype, k_mib, v_mib, head) in zip(
        ("full", "window", "CSA", "HCA", "indexer"), caches, strict=True
    ):
        block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[ktype.upper()]]
        assert v_mib == "0.00" and mib == k_mib  # K only
        out[name] = (int(cells) * int(layers) * int(seqs) * int(head) // block * size, int(layers), mib)
    states = _STATE_LINE.findall(log)
    assert len(states) == 3, log
    for name, _ratio, rows, width, streams, rs_seq, layers, mib in states:
        size = 2 * int(width) * int(rows) * int(streams) * (1 + int(rs_seq)) * int(layers) * 4
        out[f"{name} state"] = (size, int(layers), mib)
    return out


def _kvcalc(path: Path, kw: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """kvcalc's groups by the llama.cpp cache they stand for: name -> (bytes, layers)."""
    out: dict[str, tuple[int, int]] = {}
    states = {"CSA": "csa state", "HCA": "hca state", "lightning-indexer": "lid state"}
    for g in estimate(str(path), engine="llama.cpp", **kw).groups:
        c = g.cache
        if isinstance(c, KVWindowCache):
            name = "window"
        elif isinstance(c, CompressedCache):
            name = {4: "CSA", 128: "HCA"}[c.ratio]
        elif isinstance(c, IndexerCache):
            name = "indexer"
        else:
            name = states[c.fields()["part"]]
        assert name not in out
        out[name] = (g.bytes, g.layers)
    return out


@needs_llama_cpp
def test_llama_cpp_agrees(flash: Path) -> None:
    contexts = [
        {"n_batch": 2048, "n_ubatch": 512, "kv_unified": False, "swa_full": False, "type_k": "f16", "type_v": "f16",
         **ctx}
        for _, ctx in WORKLOADS
    ]  # fmt: skip
    measured = measure_file(flash, contexts, no_alloc=True)
    for (kw, _), result in zip(WORKLOADS, measured["results"], strict=True):
        assert "error" not in result, result
        logged = _logged(result["log"])
        assert logged.pop("full")[:2] == (0, 0)  # every layer is SWA (set_swa_pattern(0))
        ours = _kvcalc(flash, kw)
        assert {k: v[:2] for k, v in logged.items()} == ours, kw
        for name, (size, _, mib) in logged.items():
            assert f"{size / MIB:.2f}" == mib, name  # the shape read back is what llama.cpp sized
        total = estimate(str(flash), engine="llama.cpp", **kw).total_bytes
        assert total == sum(size for size, _, _ in logged.values())
