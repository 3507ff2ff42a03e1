"""Sparse-attention indexer key caches of GLM-5 (``glm_moe_dsa``, shared indexers included) and
MiniMax-M3 (``minimax_m3_vl``): kvcalc.inputs.hf.families.glm_moe_dsa and kvcalc.inputs.hf.families.minimax_m3.

Every number below is derived by hand in the comment beside it from the configs' fields.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvcalc.api import load_model
from kvcalc.calc.estimate import Workload
from kvcalc.dtypes import BF16, FP8
from kvcalc.engines import make_engine
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.inputs.presets import load_presets
from kvcalc.spec import AttentionCache, IndexerCache, Kind, LatentCache, ModelSpec
from tests.conftest import FIXTURES, fixture_config
from tests.helpers.theoretical import estimate

GLM51, GLM53, MINIMAX = "GLM-5.1.json", "GLM-5.3-w4a16.json", "MiniMax-M3.json"
LATENT = LatentCache(512, 64, 192 + 64, 256)
DSA_KEY = IndexerCache(128)
MSA_KEY = IndexerCache(128, family="msa")
GQA = AttentionCache(4, 128, 128)
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


def _minimax(layers: int = 4, **sparse: Any) -> dict[str, Any]:
    """A small MiniMax-M3 text config: layer 0 full, the rest sparse, unless ``sparse`` says otherwise."""
    freq = [0] + [1] * (layers - 1)
    config = {
        "sparse_index_dim": 128, "sparse_attention_freq": freq, "sparse_disable_index_value": freq,
        "use_sparse_attention": True, **sparse,
    }  # fmt: skip
    return {
        "model_type": "minimax_m3_vl_text", "num_hidden_layers": layers, "num_attention_heads": 64,
        "num_key_value_heads": 4, "head_dim": 128, "torch_dtype": "bfloat16", "sparse_attention_config": config,
    }  # fmt: skip


def _per_token(spec: ModelSpec, engine: str, **workload: Any) -> int:
    chosen, _ = make_engine(engine, uses_mla=any(c.is_latent for c in spec.caches))
    return estimate(spec, Workload(tokens=workload.pop("tokens", 1), **workload), engine=chosen).per_token_bytes


# --- GLM-5: every layer full (GLM-5 / GLM-5.1) -----------------------------------------------------


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


# --- GLM-5.3: IndexShare, 57 of 78 layers share an indexer --------------------------------------------


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


# --- GLM-5: how the indexer layers are derived (GlmMoeDsaConfig.__post_init__) -----------------------


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


# --- MiniMax-M3 -------------------------------------------------------------------------------------


def test_minimax_m3_reads_gqa_and_an_index_key_per_sparse_layer() -> None:
    spec = read_config(fixture_config(MINIMAX), name="MiniMax-M3")
    assert (spec.model_type, spec.layers, spec.query_heads, spec.dtype) == ("minimax_m3_vl_text", 60, 64, BF16)
    # 60 GQA layers (3 full + 57 sparse: the same K/V), then one index key per sparse layer.
    assert spec.caches == (GQA,) * 60 + (MSA_KEY,) * 57
    assert spec.warnings == ()
    assert any("--block-size 128" in n for n in spec.notes)


def test_minimax_m3_bytes_per_token_by_engine() -> None:
    spec = load_model("minimax-m3")
    # K + V: 60 layers x 2 x 4 heads x 128 x 2 B = 122,880; index keys: 57 x 128 x 2 = 14,592 -> 137,472 B.
    for engine in ("theoretical", "transformers", "vllm", "sglang"):
        assert _per_token(spec, engine) == 122_880 + 14_592 == 137_472, engine
    # fp8 KV: K + V 61,440. theoretical and SGLang (MiniMaxSparseKVPool's index_dtype follows the KV
    # dtype) store the keys in fp8 too: 57 x 128 = 7,296 -> 68,736; vLLM keeps them bf16
    # (indexer_kv_dtype "bf16"): 61,440 + 14,592 = 76,032.
    assert _per_token(spec, "theoretical", kv_dtype=FP8, tokens=64) == 61_440 + 7_296
    assert _per_token(spec, "sglang", kv_dtype=FP8, tokens=64) == 61_440 + 7_296
    assert _per_token(spec, "vllm", kv_dtype=FP8, tokens=64) == 61_440 + 14_592


def test_minimax_m3_preset_agrees_with_real_config() -> None:
    preset = read_config(copy.deepcopy(load_presets()["minimax-m3"].config), name="minimax-m3")
    real = read_config(fixture_config(MINIMAX), name="MiniMax-M3")
    assert (preset.caches, preset.layers, preset.query_heads) == (real.caches, real.layers, real.query_heads)
    assert preset.warnings == ()


def test_minimax_index_dim_and_layout_rules() -> None:
    # sparse_index_dim overrides the flat index_head_dim (MiniMaxM3VLTextConfig.__post_init__).
    spec = read_config({**_minimax(sparse_index_dim=64), "index_head_dim": 256}, name="m3")
    assert spec.caches == (GQA,) * 4 + (IndexerCache(64, family="msa"),) * 3
    # Without the legacy key, index_head_dim; without either, 128 (noted).
    config = _minimax()
    del config["sparse_attention_config"]["sparse_index_dim"]
    assert read_config({**config, "index_head_dim": 96}, name="m3").caches[4:] == (IndexerCache(96, family="msa"),) * 3
    # An explicit layer_types wins over sparse_attention_freq.
    explicit = {**_minimax(), "layer_types": ["full_attention"] * 3 + ["minimax_m3_sparse"]}
    assert read_config(explicit, name="m3").caches == (GQA,) * 4 + (MSA_KEY,)
    # No sparse layers at all: plain GQA, no indexer.
    plain = {k: v for k, v in _minimax().items() if k != "sparse_attention_config"}
    assert read_config(plain, name="m3").caches == (GQA,) * 4


@pytest.mark.parametrize(
    ("config", "named"),
    [
        (_minimax(sparse_disable_index_value=[0, 0, 1, 1]), "sparse_disable_index_value"),
        (_minimax(use_sparse_attention=False), "use_sparse_attention"),
        (_minimax(sparse_attention_freq=[0, 1, 1]), "sparse_attention_freq"),
        (_minimax(sparse_attention_freq=[0, 2, 1, 1]), "sparse_attention_freq"),
        ({**_minimax(), "layer_types": ["full_attention", "linear_attention"] * 2}, "layer_types"),
    ],
)
def test_minimax_fields_kvcalc_cannot_model_are_errors(config: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        read_config(config, name="m3")


def test_minimax_unknown_sparse_field_is_named_by_the_guard() -> None:
    spec = read_config(_minimax(sparse_kv_compress=4), name="m3")
    assert [w.split("'")[1] for w in spec.warnings] == ["sparse_attention_config.sparse_kv_compress"]


# --- llama.cpp: the indexer keys in a second cache --------------------------------------------------


# llama.cpp 0c1e570 (src/llama-kv-cache-dsa.cpp, llama-kv-cache-msa.cpp): the indexer keys live in a
# second llama_kv_cache of -ctk's type (f16). GLM-5: 78 MLA layers of 576 and 78 keys of 128, no V;
# MiniMax-M3: 60 GQA layers (4 KV heads x 128, K and V) and, not being MLA, each of its 57 sparse
# layers' keys of 128 carries a V row of the attention's value dim 128 that the graph never reads.
# Real llama.cpp runs: tests/inputs/gguf/test_gguf_sparse.py.
@pytest.mark.parametrize(
    ("model", "per_token"),
    [("glm-5", 78 * (576 + 128) * 2), ("minimax-m3", 60 * 4 * 128 * 2 * 2 + 57 * (128 + 128) * 2)],
)
def test_llamacpp_indexer_cache(model: str, per_token: int) -> None:
    assert _per_token(load_model(model), "llama.cpp") == per_token


# --- the probe: transformers' real cache, byte for byte ----------------------------------------------


def _probe(run_cli: Any, fixture: str, tokens: int) -> dict[str, Any]:
    pytest.importorskip("torch", reason="the probe extra (torch) is not installed")
    pytest.importorskip("transformers", reason="the probe extra (transformers) is not installed")
    result = run_cli("probe", str(FIXTURES / fixture), "--tokens", str(tokens), "--device", "cpu", "--json")
    assert result.exit_code == 0, result.stderr + result.stdout
    data: dict[str, Any] = result.json()
    assert data["match"] is True
    return data


def test_probe_glm53_matches_byte_for_byte(run_cli: Any) -> None:
    data = _probe(run_cli, GLM53, 64)
    # The shrunk model keeps one full and one shared layer; scaled to 78 layers:
    # 78 x 64 tokens x 576 x 2 B = 5,750,784 latent; 21 x 64 x 128 x 2 = 344,064 indexer keys.
    assert data["measured_bytes"] == data["estimated_bytes"] == 5_750_784 + 344_064
    by_kind = {k["kind"]: (k["layers"], k["measured_bytes"]) for k in data["kinds"]}
    assert by_kind == {"mla": (78, 5_750_784), "indexer": (21, 344_064)}


def test_probe_minimax_m3_matches_byte_for_byte(run_cli: Any) -> None:
    data = _probe(run_cli, MINIMAX, 300)
    # 60 x 300 x 2 x 4 x 128 x 2 B = 36,864,000 K/V; 57 x 300 x 128 x 2 = 4,377,600 index keys.
    assert data["measured_bytes"] == data["estimated_bytes"] == 36_864_000 + 4_377_600
    by_kind = {k["kind"]: (k["layers"], k["measured_bytes"]) for k in data["kinds"]}
    assert by_kind == {"full_attention": (60, 36_864_000), "indexer": (57, 4_377_600)}
