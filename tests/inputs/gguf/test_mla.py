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
from kvcalc.engines.llamacpp import LlamaCpp
from kvcalc.errors import SourceError
from kvcalc.inputs.gguf import gguf_config, read_header
from kvcalc.inputs.presets import get_preset
from kvcalc.spec import AttentionCache, IndexerCache, LatentCache
from tests.helpers.gguf_files import gguf_file
from tests.helpers.gguf_models import SMALL_DSA, SMALL_M3, dsa_keys, minimax_keys
from tests.helpers.llama_cpp import run_llama_cpp

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
