"""GLM-5's sparse-attention indexer key caches (kvcalc.inputs.hf.families.glm_moe_dsa, shared indexers
included), and llama.cpp's indexer cache for both GLM-5 and MiniMax-M3.

Sources: the docstring of tests/helpers/sparse_families.py (shared with the module's sibling)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvcalc.api import load_model
from kvcalc.calc.estimate import Workload
from kvcalc.dtypes import BF16, FP8
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.inputs.presets import load_presets
from kvcalc.spec import IndexerCache, Kind, LatentCache
from tests.conftest import fixture_config
from tests.helpers.sparse_families import GLM51, GLM53, _per_token, _probe
from tests.helpers.theoretical import estimate

LATENT = LatentCache(512, 64, 192 + 64, 256)


DSA_KEY = IndexerCache(128)


# GLM-5.3's indexer_types: full at 0, 1, 2, then one full after every three shared (6, 10, ..., 74).
GLM53_FULL = [0, 1, 2, *range(6, 78, 4)]


def _glm(**fields: Any) -> dict[str, Any]:
    """A small glm_moe_dsa config: 8 layers, GLM-5's MLA and indexer widths."""
    base = {
        "model_type": "glm_moe_dsa", "num_hidden_layers": 8, "num_attention_heads": 64, "kv_lora_rank": 512,
        "qk_rope_head_dim": 64, "qk_nope_head_dim": 192, "v_head_dim": 256, "index_head_dim": 128,
        "torch_dtype": "bfloat16",
    }  # fmt: skip
    return {**base, **fields}


def test_glm51_reads_a_latent_and_an_indexer_key_per_layer() -> None:
    spec = read_config(fixture_config(GLM51), name="GLM-5.1")
    assert (spec.layers, spec.query_heads, spec.dtype) == (78, 64, BF16)
    assert spec.caches == (LATENT,) * 78 + (DSA_KEY,) * 78
    assert spec.warnings == ()  # every field read or set aside with a reason
    assert any("every glm_moe_dsa layer runs its own indexer" in n for n in spec.notes)


def test_glm5_bytes_per_token_by_engine() -> None:
    spec = load_model("glm-5")
    # theoretical / transformers (bf16): 78 x (512 + 64) x 2 = 89,856 latent
    #                                  + 78 x 128 x 2       = 19,968 indexer keys  -> 109,824 B
    assert _per_token(spec, "theoretical") == _per_token(spec, "transformers") == 89_856 + 19_968 == 109_824
    # vLLM / SGLang: latent bf16 89,856 + indexer keys fp8 + one fp32 scale per 128 values:
    # 78 x (128 + 4) = 10,296 -> 100,152 B
    assert _per_token(spec, "vllm") == _per_token(spec, "sglang") == 89_856 + 10_296 == 100_152
    # --kv-dtype fp8 halves the latent (78 x 576 = 44,928) but not the indexer keys:
    # theoretical keeps them in the KV format, 78 x 128 = 9,984 -> 54,912; vLLM 44,928 + 10,296 = 55,224.
    assert _per_token(spec, "theoretical", kv_dtype=FP8, tokens=64) == 44_928 + 9_984
    assert _per_token(spec, "vllm", kv_dtype=FP8, tokens=64) == 44_928 + 10_296


def test_glm5_per_kind_groups() -> None:
    est = estimate(load_model("glm-5"), Workload(tokens=1000))
    by_kind = {g.kind: g for g in est.groups}
    # 78 layers x 1,000 tokens x 576 x 2 B = 89,856,000; 78 x 1,000 x 128 x 2 = 19,968,000.
    assert (by_kind[Kind.MLA].layers, by_kind[Kind.MLA].bytes) == (78, 89_856_000)
    assert (by_kind[Kind.INDEXER].layers, by_kind[Kind.INDEXER].bytes) == (78, 19_968_000)
    assert est.fixed_bytes_per_sequence == 0  # no state: nothing per sequence beyond per-token rows


def test_glm5_preset_agrees_with_real_config() -> None:
    preset = read_config(copy.deepcopy(load_presets()["glm-5"].config), name="glm-5")
    real = read_config(fixture_config(GLM51), name="GLM-5.1")
    assert (preset.caches, preset.layers, preset.query_heads) == (real.caches, real.layers, real.query_heads)
    assert preset.warnings == ()


def test_glm53_caches_indexer_keys_only_on_full_layers() -> None:
    spec = read_config(fixture_config(GLM53), name="GLM-5.3")
    assert spec.layers == 78 and len(GLM53_FULL) == 21
    assert spec.caches == (LATENT,) * 78 + (DSA_KEY,) * 21
    assert spec.warnings == ()  # the quantizer's weight quantization_config sizes no cache
    assert any("57 of 78 layers reuse another layer's top-k" in n for n in spec.notes)
    # SGLang sizes index keys for every layer: 57 shared layers x (128 fp8 + 128 / 128 x 4 scale) = 57 x 132.
    assert any("--engine sglang add 57 x 132 B per token" in n for n in spec.notes)
    # indexer_types agrees with index_topk_freq 4 / index_skip_topk_offset 3, so vLLM builds the same.
    assert not any("vLLM" in n for n in spec.notes)


def test_glm53_bytes_per_token_by_engine() -> None:
    spec = load_model("glm-5.3")
    # theoretical: 89,856 latent + 21 x 128 x 2 = 5,376 -> 95,232 B
    assert _per_token(spec, "theoretical") == 89_856 + 5_376 == 95_232
    # vLLM: 89,856 + 21 x 132 = 2,772 -> 92,628 B
    assert _per_token(spec, "vllm") == 89_856 + 2_772 == 92_628


def test_glm53_preset_agrees_with_real_config() -> None:
    preset = read_config(copy.deepcopy(load_presets()["glm-5.3"].config), name="glm-5.3")
    real = read_config(fixture_config(GLM53), name="GLM-5.3")
    assert (preset.caches, preset.layers, preset.query_heads) == (real.caches, real.layers, real.query_heads)
    assert preset.warnings == ()


def _indexer_layers(config: dict[str, Any]) -> int:
    return sum(1 for c in read_config(config, name="glm").caches if c.kind is Kind.INDEXER)


def test_schedule_freq_and_offset() -> None:
    # freq 4, offset 2: full where max(i - 1, 0) % 4 == 0 -> i = 0, 1, 5 of 8 layers.
    assert _indexer_layers(_glm(index_topk_freq=4, index_skip_topk_offset=2)) == 3
    # freq 4, offset 3: max(i - 2, 0) % 4 == 0 -> i = 0, 1, 2, 6.
    assert _indexer_layers(_glm(index_topk_freq=4, index_skip_topk_offset=3)) == 4
    # No offset: GlmMoeDsaConfig's default 2, noted.
    spec = read_config(_glm(index_topk_freq=4), name="glm")
    assert sum(1 for c in spec.caches if c.kind is Kind.INDEXER) == 3
    assert any("index_skip_topk_offset" in n and "default 2" in n for n in spec.notes)
    # freq 0 is max(0, 1) = 1: every layer full.
    assert _indexer_layers(_glm(index_topk_freq=0)) == 8


def test_pattern_and_list_precedence() -> None:
    # A string pattern: F full, S shared -> FSSF SSFS has 3 full layers.
    assert _indexer_layers(_glm(index_topk_pattern="FSSFSSFS")) == 3
    # indexer_types wins over the pattern and the schedule (transformers reads them only without it).
    types = ["full", "shared"] * 4
    assert _indexer_layers(_glm(indexer_types=types, index_topk_pattern="FFFFFFFF", index_topk_freq=8)) == 4


def test_vllm_disagreement_is_noted() -> None:
    # vLLM derives its indexers from index_topk_freq (here 1: all 8), never from indexer_types (4).
    spec = read_config(_glm(indexer_types=["full", "shared"] * 4), name="glm")
    assert any("vLLM (deepseek_v2.py) derives 8" in n for n in spec.notes)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"indexer_types": ["full", "sparse"] * 4}, "indexer_types"),
        ({"indexer_types": ["full"] * 7}, "indexer_types"),
        ({"indexer_types": ["shared"] + ["full"] * 7}, "indexer_types"),
        ({"index_topk_pattern": "FXFFFFFF"}, "index_topk_pattern"),
        ({"index_topk_freq": -1}, "index_topk_freq"),
        ({"index_topk_freq": 4, "index_skip_topk_offset": "2"}, "index_skip_topk_offset"),
        ({"layer_types": ["full_attention"] * 8}, "layer_types"),
    ],
)
def test_glm_fields_kvcalc_cannot_model_are_errors(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        read_config(_glm(**fields), name="glm")


# llama.cpp 0c1e570 (src/llama-kv-cache-dsa.cpp, llama-kv-cache-msa.cpp): the indexer keys live in a
# second llama_kv_cache of -ctk's type (f16). GLM-5: 78 MLA layers of 576 and 78 keys of 128, no V;
# MiniMax-M3: 60 GQA layers (4 KV heads x 128, K and V) and, not being MLA, each of its 57 sparse
# layers' keys of 128 carries a V row of the attention's value dim 128 that the graph never reads.
# Real llama.cpp runs: tests/inputs/gguf/test_mla.py.
@pytest.mark.parametrize(
    ("model", "per_token"),
    [("glm-5", 78 * (576 + 128) * 2), ("minimax-m3", 60 * 4 * 128 * 2 * 2 + 57 * (128 + 128) * 2)],
)
def test_llamacpp_indexer_cache(model: str, per_token: int) -> None:
    assert _per_token(load_model(model), "llama.cpp") == per_token


def test_probe_glm53_matches_byte_for_byte(run_cli: Any) -> None:
    data = _probe(run_cli, GLM53, 64)
    # The shrunk model keeps one full and one shared layer; scaled to 78 layers:
    # 78 x 64 tokens x 576 x 2 B = 5,750,784 latent; 21 x 64 x 128 x 2 = 344,064 indexer keys.
    assert data["measured_bytes"] == data["estimated_bytes"] == 5_750_784 + 344_064
    by_kind = {k["kind"]: (k["layers"], k["measured_bytes"]) for k in data["kinds"]}
    assert by_kind == {"mla": (78, 5_750_784), "indexer": (21, 344_064)}
