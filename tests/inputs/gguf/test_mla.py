"""GGUF files of llama.cpp's sparse-attention architectures with an indexer key cache: ``deepseek32``
(DeepSeek-V3.2: MLA + the DSA lightning indexer), ``glm-dsa`` (GLM-5, GLM-5.3: the same, the indexer on
the "full" layers only) and ``minimax-m3`` (MiniMax-M3: GQA + MiniMax Sparse Attention), and MiniMax-M2's
plain GQA (``minimax-m2``), read by ``kvcalc.inputs.gguf.gguf_config``.

Each file holds the keys convert_hf_to_gguf.py of llama.cpp 0c1e570 writes (conversion/deepseek.py
DeepseekV32Model and conversion/glm.py GlmMoeDsaModel over DeepseekV2Model's MLA keys; conversion/minimax.py
MiniMaxM3Model over MiniMaxM2Model over TextModel), with a tiny vocabulary and MLP (they size no cache)
and no NextN layers. Three checks:

- kvcalc's ``--engine llama.cpp`` bytes against a hand derivation (the arithmetic is in the comments);
- the round trip: the keys converted from a preset's config read back to the preset's caches;
- the real llama.cpp (llama-cpp-python 0.3.36 = llama.cpp 0c1e570) through the probe's child process
  (tests.helpers.llama_cpp ``run_llama_cpp``): its two caches (llama_kv_cache_dsa / _msa: the main
  cache, then the indexer's, each logged as a llama_kv_cache) rebuilt from the cells, streams, layers
  and types it printed must print as it printed them and equal kvcalc's estimate; the indexer cache
  must hold kvcalc's indexer layers.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from kvcalc import api
from kvcalc.api import estimate, load_model
from kvcalc.engines.llamacpp import LlamaCpp
from kvcalc.engines.llamacpp.probe import measure_file
from kvcalc.errors import SourceError
from kvcalc.inputs.gguf import gguf_config, read_header
from kvcalc.inputs.presets import get_preset
from kvcalc.spec import AttentionCache, CompressedCache, IndexerCache, KVWindowCache, LatentCache
from tests.helpers.gguf_files import F32, U32, Keys, general, gguf_file, typed_gguf_file
from tests.helpers.gguf_models import SMALL_DSA, SMALL_M3, dsa_keys, minimax_keys
from tests.helpers.llama_cpp import needs_llama_cpp, run_llama_cpp

gguf: Any = pytest.importorskip("gguf")


def write(tmp: Path, arch: str, keys: dict[str, Any]) -> Path:
    return gguf_file(tmp / f"{arch}.gguf", arch, keys)


# --- what the converters write: tests.helpers.gguf_models dsa_keys and minimax_keys ------------------------

# MiniMaxM2Config's defaults (transformers 5.24 configuration_minimax_m2.py: MiniMax-M2's 62 layers of
# 48 query and 8 KV heads of 128, hidden 3072), rotary_dim 64 (its partial rotary).
M2 = {
    "num_hidden_layers": 62, "hidden_size": 3072, "num_attention_heads": 48, "num_key_value_heads": 8,
    "head_dim": 128, "rotary_dim": 64, "max_position_embeddings": 196608,
}  # fmt: skip


def llama_cpp_total(path: Path, tokens: int = 1000, **kw: Any) -> int:
    return api.estimate(str(path), tokens=tokens, engine="llama.cpp", **kw).total_bytes


# --- hand derivations ---------------------------------------------------------------------------------------


def test_deepseek32_hand_derived(tmp_path: Path) -> None:
    path = write(tmp_path, "deepseek32", dsa_keys(SMALL_DSA, "deepseek32"))
    spec = api.load_model(str(path))
    assert not spec.warnings, spec.warnings
    assert spec.model_type == "deepseek_v32"
    assert spec.caches == (LatentCache(128, 64, 96, 32),) * 4 + (IndexerCache(128),) * 4
    # 1000 tokens: 1024 cells x 4 layers x (128 + 64 latent + 128 indexer key) x 2 B (f16) = 2,621,440.
    assert llama_cpp_total(path) == 1024 * 4 * 320 * 2 == 2_621_440
    # q8_0 for both: 34 B per 32 elements: 1024 x 4 x (192 / 32 + 128 / 32) x 34 = 1,392,640.
    assert llama_cpp_total(path, kv_dtype="q8_0") == 1024 * 4 * 10 * 34 == 1_392_640
    # A NextN block counted in block_count (DeepseekV32Model without --no-mtp): not loaded, not cached
    # (src/models/deepseek32.cpp TENSOR_SKIP; create_memory's filters keep il < n_layer()).
    nextn = {**dsa_keys(SMALL_DSA, "deepseek32"), "block_count": 5, "nextn_predict_layers": 1}
    assert llama_cpp_total(write(tmp_path, "deepseek32", nextn)) == 2_621_440


def test_glm_dsa_hand_derived(tmp_path: Path) -> None:
    hf = {**SMALL_DSA, "indexer_types": ["full", "shared", "full", "shared"]}
    path = write(tmp_path, "glm-dsa", dsa_keys(hf, "glm-dsa"))
    config, _ = gguf_config(read_header(path), "g")
    assert config["model_type"] == "glm_moe_dsa" and config["indexer_types"] == hf["indexer_types"]
    spec = api.load_model(str(path))
    assert not spec.warnings, spec.warnings
    assert spec.entry_layers == (0, 1, 2, 3, 0, 2)  # indexer keys on the full layers 0 and 2
    assert not any("vLLM" in n for n in spec.notes)  # index_topk_pattern written beside indexer_types
    # 1024 cells x (4 x 192 latent + 2 x 128 keys) x 2 B = 2,097,152.
    assert llama_cpp_total(path) == 1024 * (4 * 192 + 2 * 128) * 2 == 2_097_152
    # No indexer.types: llama.cpp makes every layer full below a 1048576-token context (GLM-5, 5.1) ...
    path = write(tmp_path, "glm-dsa", dsa_keys(SMALL_DSA, "glm-dsa"))
    assert llama_cpp_total(path) == 1024 * 4 * (192 + 128) * 2 == 2_621_440
    # ... and takes GLM-5.2's table from there: layers 0, 1, 2 full, 3 shared.
    path = write(tmp_path, "glm-dsa", dsa_keys({**SMALL_DSA, "max_position_embeddings": 1048576}, "glm-dsa"))
    spec = api.load_model(str(path))
    assert spec.entry_layers == (0, 1, 2, 3, 0, 1, 2)
    assert any("GLM-5.2's indexer layout" in n for n in spec.notes)
    assert llama_cpp_total(path) == 1024 * (4 * 192 + 3 * 128) * 2 == 2_359_296


def test_minimax_m3_hand_derived(tmp_path: Path) -> None:
    path = write(tmp_path, "minimax-m3", minimax_keys(SMALL_M3, "minimax-m3"))
    spec = api.load_model(str(path))
    assert not spec.warnings, spec.warnings
    assert spec.caches == (AttentionCache(2, 64, 64),) * 4 + (IndexerCache(128, family="msa"),) * 3
    assert spec.entry_layers == (0, 1, 2, 3, 1, 2, 3)  # past the one leading dense layer
    # llama.cpp, 1000 tokens: 1024 cells x (4 layers x 2 (K, V) x 2 KV heads x 64 + 3 indexer layers x
    # (128 key + 64 V, one head of the attention's value dim)) x 2 B = 1024 x 1,600 x 2 = 3,276,800.
    assert llama_cpp_total(path) == 1024 * (4 * 2 * 2 * 64 + 3 * (128 + 64)) * 2 == 3_276_800
    # theoretical: no V beside the indexer key: 1000 x (1,024 + 3 x 128) x 2 B = 2,816,000.
    assert api.estimate(str(path), tokens=1000, kv_dtype="fp16").total_bytes == 1000 * (1024 + 384) * 2


def test_minimax_m2_hand_derived(tmp_path: Path) -> None:
    path = write(tmp_path, "minimax-m2", minimax_keys(M2, "minimax-m2"))
    spec = api.load_model(str(path))
    assert not spec.warnings, spec.warnings
    assert spec.caches == (AttentionCache(8, 128, 128),) * 62
    # 1024 cells x 62 layers x 2 (K, V) x 8 KV heads x 128 x 2 B = 260,046,848.
    assert llama_cpp_total(path) == 1024 * 62 * 2 * 8 * 128 * 2 == 260_046_848


def test_preset_figures_under_llama_cpp() -> None:
    """Bytes per token of the presets under llama.cpp's rules (f16 K and indexer keys)."""

    def per_token(name: str) -> int:
        return api.estimate(name, tokens=1, engine="llama.cpp").per_token_bytes

    # DeepSeek-V3.2: 61 x (512 + 64) x 2 + 61 x 128 x 2 = 70,272 + 15,616 = 85,888.
    assert per_token("deepseek-v3.2") == 85_888
    # GLM-5: 78 x 576 x 2 + 78 x 128 x 2 = 89,856 + 19,968 = 109,824; GLM-5.3: 21 full layers: + 5,376.
    assert per_token("glm-5") == 109_824
    assert per_token("glm-5.3") == 89_856 + 21 * 128 * 2 == 95_232
    # MiniMax-M3: 60 x 2 x 4 x 128 x 2 = 122,880 + 57 sparse layers x (128 + 128) x 2 = 29,184 -> 152,064.
    assert per_token("minimax-m3") == 152_064


# --- round trips --------------------------------------------------------------------------------------------

ROUND_TRIPS = {
    "deepseek32": ("deepseek-v3.2", dsa_keys),
    "glm-dsa": ("glm-5.3", dsa_keys),
    "minimax-m3": ("minimax-m3", minimax_keys),
}


@pytest.mark.parametrize("arch", [*ROUND_TRIPS, "glm-5"])
def test_round_trip_gives_the_presets_caches(arch: str, tmp_path: Path) -> None:
    preset, keys = ROUND_TRIPS.get(arch, ("glm-5", dsa_keys))
    arch = "glm-dsa" if arch == "glm-5" else arch
    path = write(tmp_path, arch, keys(get_preset(preset).config, arch))
    spec, want = api.load_model(str(path)), api.load_model(preset)
    assert not spec.warnings, spec.warnings
    assert (spec.caches, spec.entry_layers) == (want.caches, want.entry_layers)


def test_refusals(tmp_path: Path) -> None:
    keys = dsa_keys(SMALL_DSA, "deepseek32")
    with pytest.raises(SourceError, match="head_count_kv is 4, not 1"):
        api.load_model(str(write(tmp_path, "deepseek32", {**keys, "attention.head_count_kv": 4})))
    with pytest.raises(SourceError, match="not kv_lora_rank"):
        api.load_model(str(write(tmp_path, "deepseek32", {**keys, "attention.key_length": 128})))
    with pytest.raises(SourceError, match=r"no deepseek32\.attention\.indexer\.key_length"):
        api.load_model(str(write(tmp_path, "deepseek32", {k: v for k, v in keys.items() if "indexer.key" not in k})))
    short = {**dsa_keys(SMALL_DSA, "glm-dsa"), "attention.indexer.types": [True, False]}
    with pytest.raises(SourceError, match=r"indexer\.types must list the 4 layers"):
        api.load_model(str(write(tmp_path, "glm-dsa", short)))
    m3 = minimax_keys(SMALL_M3, "minimax-m3")
    with pytest.raises(SourceError, match="one K/V geometry"):
        api.load_model(str(write(tmp_path, "minimax-m3", {**m3, "attention.value_length": 32})))
    # MiniMax-M3's loader builds no NextN block (src/models/minimax-m3.cpp loads n_layer blocks only).
    nextn = {**m3, "nextn_predict_layers": 1}
    with pytest.raises(SourceError, match="not known to kvcalc"):
        api.load_model(str(write(tmp_path, "minimax-m3", nextn)))


# --- the real llama.cpp --------------------------------------------------------------------------------------

# name -> (architecture, HF config): the presets' real geometries (every MiB figure llama.cpp prints has
# three or more significant digits), plus tiny files where the real ones cannot tell two rules apart:
# MiniMax-M3's indexer V row (its head dim 64 here, not the key's 128) and glm-dsa's layers without
# indexer.types (all full below a 1048576-token context, GLM-5.2's table from there).
LLAMA_CPP_FILES = {
    "deepseek-v3.2": ("deepseek32", get_preset("deepseek-v3.2").config),
    "glm-5.3": ("glm-dsa", get_preset("glm-5.3").config),
    "glm-5": ("glm-dsa", get_preset("glm-5").config),
    "glm-1m": ("glm-dsa", {**SMALL_DSA, "num_hidden_layers": 8, "max_position_embeddings": 1048576}),
    "minimax-m3": ("minimax-m3", get_preset("minimax-m3").config),
    "minimax-m3-small": ("minimax-m3", SMALL_M3),
    "minimax-m2": ("minimax-m2", M2),
}


def llama_cpp_keys(name: str) -> tuple[str, dict[str, Any]]:
    arch, hf = LLAMA_CPP_FILES[name]
    return arch, (minimax_keys if arch.startswith("minimax") else dsa_keys)(hf, arch)


# (tokens per sequence, sequences, one unified stream, cache type: q8_0 K and V with flash attention)
WORKLOADS = [(1000, 1, False, "f16"), (4096, 3, False, "f16"), (3000, 2, True, "f16"), (700, 2, False, "q8_0")]
# ggml_row_size of a row of n elements (ggml/src/ggml.c: f16 2 B each; q8_0 blocks of 32 in 34 B).
ROW = {"f16": lambda n: 2 * n, "q8_0": lambda n: n // 32 * 34}
_INDEXER_START = re.compile(r"llama_kv_cache_(dsa|msa): creating indexer KV cache")
_PLACED = re.compile(r"llama_kv_cache: layer +(\d+): dev = ")


@cache
def _llama_cpp_run(name: str, tmp: str) -> tuple[Path, dict[str, Any]]:
    arch, keys = llama_cpp_keys(name)
    path = write(Path(tmp), arch, keys)
    engine = LlamaCpp()
    contexts = [
        {"n_ctx": t * b, "n_seq_max": b, "n_batch": engine.n_batch, "n_ubatch": engine.n_ubatch, "kv_unified": u,
         "swa_full": False, "type_k": kind, "type_v": kind, "flash_attn": kind != "f16"}
        for t, b, u, kind in WORKLOADS
    ]  # fmt: skip
    return path, run_llama_cpp(path, contexts)


def indexer_layers(log: str) -> list[int]:
    """The layers llama.cpp placed in the indexer cache: those it logged after 'creating indexer KV cache'."""
    start = _INDEXER_START.search(log)
    assert start is not None
    return [int(m[1]) for m in _PLACED.finditer(log[start.end() : log.index("llama_kv_cache: size", start.end())])]


@pytest.mark.parametrize("name", list(LLAMA_CPP_FILES))
def test_llama_cpp_allocates_what_kvcalc_estimates(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    pytest.importorskip("llama_cpp")
    path, answer = _llama_cpp_run(name, str(tmp_path_factory.mktemp(name)))
    spec = api.load_model(str(path))
    arch, keys = llama_cpp_keys(name)
    for (tokens, batch, unified, kind), result in zip(WORKLOADS, answer["results"], strict=True):
        assert result["ok"], result["log"][-1000:]
        caches = result["caches"]
        assert [(c["k_type"], c["v_type"]) for c in caches] == [(kind, kind)] * len(caches)
        main, *rest = caches
        assert main["prints_as_logged"], main  # the probe rebuilds the main cache from the printed widths
        got = main["k_bytes"] + main["v_bytes"]
        if arch == "minimax-m2":
            assert rest == [] and "indexer" not in result["log"]
        else:
            # The indexer cache: the probe rebuilds it with the main cache's widths, so rebuild it here
            # from what llama.cpp printed: cells x streams x layers x one row of the key (and, for MSA,
            # of one head of the value dim), which must print as llama.cpp printed its MiB.
            (idx,) = rest
            assert (idx["cells"], idx["streams"]) == (main["cells"], main["streams"])  # same cells, streams
            slots = idx["cells"] * idx["streams"] * idx["layers"]
            k = slots * ROW[kind](keys["attention.indexer.key_length"])
            v = slots * ROW[kind](keys["attention.value_length"]) if arch == "minimax-m3" else 0
            assert (f"{k / 2**20:.2f}", f"{v / 2**20:.2f}") == (idx["k_mib"], idx["v_mib"]), idx
            got += k + v
            assert indexer_layers(result["log"]) == [
                spec.entry_layers[i] for i, c in enumerate(spec.caches) if isinstance(c, IndexerCache)
            ]
        want = api.estimate(
            str(path), tokens=tokens, batch=batch, engine="llama.cpp", options={"kv_unified": unified},
            kv_dtype="fp16" if kind == "f16" else kind,
        ).total_bytes  # fmt: skip
        assert got == want, (tokens, batch, unified, kind)


# GGUF files of llama.cpp's ``deepseek4`` (DeepSeek-V4), read by ``kvcalc.inputs.gguf.gguf_config``, and the
# llama.cpp engine's rules for the caches llama.cpp 0c1e570 gives it (src/llama-kv-cache-dsv4.cpp
# ``llama_kv_cache_dsv4``, built by src/llama-model.cpp create_memory's deepseek4 branch):
#
# - a K-only window over every layer: one head_dim row per cell, pad(min(n_ctx_seq, window + n_ubatch), 256)
#   cells per sequence (n_ctx_seq with swa_full), one stream per sequence even with kv_unified;
# - CSA (ratio 4) and HCA (ratio 128) K-only head_dim rows in pad(ceil(n_ctx_seq / ratio), 256) cells, and
#   the lightning indexer's indexer.key_length rows on the CSA layers, CSA's cells;
# - f32 compressor states, kv and score, each n_embd_state x state_size per sequence: CSA 2 x head_dim x 8,
#   HCA head_dim x 128, indexer 2 x indexer.key_length x 8.
#
# The file holds DeepSeek-V4-Flash's geometry (the deepseek-v4-flash preset) as conversion/deepseek.py
# DeepseekV4Model writes it, with no tensors: llama.cpp creates them with no_alloc (sizes computed,
# nothing allocated) and builds a real context, whose logged cache sizes must equal kvcalc's
# ``--engine llama.cpp`` estimate byte for byte (skipped without llama_cpp).
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
DEEPSEEK4_WORKLOADS: list[tuple[dict[str, Any], dict[str, Any]]] = [
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
        for _, ctx in DEEPSEEK4_WORKLOADS
    ]  # fmt: skip
    measured = measure_file(flash, contexts, no_alloc=True)
    for (kw, _), result in zip(DEEPSEEK4_WORKLOADS, measured["results"], strict=True):
        assert "error" not in result, result
        logged = _logged(result["log"])
        assert logged.pop("full")[:2] == (0, 0)  # every layer is SWA (set_swa_pattern(0))
        ours = _kvcalc(flash, kw)
        assert {k: v[:2] for k, v in logged.items()} == ours, kw
        for name, (size, _, mib) in logged.items():
            assert f"{size / MIB:.2f}" == mib, name  # the shape read back is what llama.cpp sized
        total = estimate(str(flash), engine="llama.cpp", **kw).total_bytes
        assert total == sum(size for size, _, _ in logged.values())


# A deepseek4 file of several KV heads is refused (split from test_gguf_t5_ds4.py, whose t5 tests are in
# test_attention.py).
def test_deepseek4_needs_one_kv_head(tmp_path: Path) -> None:
    # deepseek4 is read (above); llama.cpp would cache n_head_kv K rows per token.
    keys: Keys = {**general("DeepSeek V4"), "block_count": (U32, 3), "attention.head_count": (U32, 4),
                  "attention.head_count_kv": (U32, 4)}  # fmt: skip
    with pytest.raises(SourceError, match="head_count_kv is 4, not 1"):
        load_model(str(typed_gguf_file(tmp_path / "ds4.gguf", "deepseek4", keys)))
