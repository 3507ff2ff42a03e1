"""MiniMax-M3's sparse-attention index keys (kvcalc.inputs.hf.families.minimax_m3).

Sources: the docstring of tests/helpers/sparse_families.py (shared with the module's sibling)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvcalc.api import load_model
from kvcalc.dtypes import BF16, FP8
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.inputs.presets import load_presets
from kvcalc.spec import AttentionCache, IndexerCache
from tests.conftest import fixture_config
from tests.helpers.sparse_families import MINIMAX, _per_token, _probe

MSA_KEY = IndexerCache(128, family="msa")


GQA = AttentionCache(4, 128, 128)


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


def test_probe_minimax_m3_matches_byte_for_byte(run_cli: Any) -> None:
    data = _probe(run_cli, MINIMAX, 300)
    # 60 x 300 x 2 x 4 x 128 x 2 B = 36,864,000 K/V; 57 x 300 x 128 x 2 = 4,377,600 index keys.
    assert data["measured_bytes"] == data["estimated_bytes"] == 36_864_000 + 4_377_600
    by_kind = {k["kind"]: (k["layers"], k["measured_bytes"]) for k in data["kinds"]}
    assert by_kind == {"full_attention": (60, 36_864_000), "indexer": (57, 4_377_600)}
