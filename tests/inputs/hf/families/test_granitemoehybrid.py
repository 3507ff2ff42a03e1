"""Granite-4.0-H (Mamba-2 + attention): each number derived by hand next to it.

Sources (see the family module for the full citations):
- transformers 5.24 models/granitemoehybrid (no layer_types -> every layer Mamba-2; Mamba-2 width
  mamba_expand x hidden_size), cache_utils.py.
- vLLM mamba_utils.py @ 2afe1e85 (mamba2_state_shape), granitemoehybrid.py @ fc41bfe8.
- Real configs: tests/fixtures (see fixtures/SOURCES.md).
"""

from __future__ import annotations

from typing import Any

import pytest

from kvcalc.calc.estimate import Workload
from kvcalc.engines import make_engine
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.inputs.presets import load_presets
from kvcalc.spec import AttentionCache, Kind, StateCache
from tests.conftest import fixture_config
from tests.helpers.kimi_granite_families import GRANITE, measured_by_kind, probe_fixture
from tests.helpers.theoretical import estimate

# Granite-4.0-H-Micro: 36 Mamba-2 layers, attention at 5, 15, 25, 35.
GRANITE_ATTENTION = [5, 15, 25, 35]


# Mamba-2 state per layer: width 2 x 2048 = 4,096 (= 64 heads x 64); conv over 4,096 + 2 x 1 x 128 =
# 4,352 channels x (4 - 1) = 13,056 elements; SSM 64 x 64 x 128 = 524,288 elements.
# At 2 B both: 26,112 + 1,048,576 = 1,074,688 B per layer; x 36 = 38,688,768 B per sequence (the
# figure the public test the fixture comes from computes too, "both at activation precision (2 B)").
GRANITE_FIXED = 38_688_768


# Attention: 4 layers x 2 x 8 KV heads x (2048 / 32 = 64) x 2 B = 8,192 B per token.
GRANITE_PER_TOKEN = 8_192


def test_granite_by_hand() -> None:
    spec = read_config(fixture_config(GRANITE), name="granite")
    assert spec.layers == 40 and len(spec.caches) == 40
    assert [i for i, c in enumerate(spec.caches) if c.kind is Kind.FULL] == GRANITE_ATTENTION
    state = spec.caches[0]
    assert isinstance(state, StateCache) and state.family == "mamba"
    assert (state.conv_channels, state.conv_kernel, state.recurrent_elements) == (4_352, 4, 524_288)
    attention = spec.caches[5]
    assert isinstance(attention, AttentionCache)
    assert (attention.kv_heads, attention.k_head_dim, attention.v_head_dim) == (8, 64, 64)
    est = estimate(spec, Workload(tokens=4096))
    assert (est.per_token_bytes, est.fixed_bytes_per_sequence) == (GRANITE_PER_TOKEN, GRANITE_FIXED)
    # mamba_expand, mamba_d_head, ... all read: no warning. (The trimmed fixture names no dtype.)
    assert spec.warnings == ()


def test_granite_engines_by_hand() -> None:
    spec = read_config(load_presets()["granite-4.0-h-micro"].config, name="granite")
    # transformers: conv whole kernel 4,352 x 4 x 2 B = 34,816 + SSM 524,288 x 4 B = 2,097,152
    # -> 2,131,968 x 36 = 76,750,848.
    engine, _ = make_engine("transformers")
    assert estimate(spec, Workload(tokens=300), engine=engine).fixed_bytes_per_sequence == 76_750_848
    # vLLM: kernel - 1, both in the model dtype (granitemoehybrid sets no mamba_ssm_cache_dtype): the
    # theoretical 1,074,688 B a layer, in a page its hybrid layout grows to hold it: attention pages of
    # 2,048 B a token in steps of 16 tokens, 16 x cdiv(1,074,688, 32,768) = 528 tokens = 1,081,344 B
    # (36 mamba layers in 9 groups of 4, none empty) - the 528-token blocks the vLLM probe measured.
    engine, _ = make_engine("vllm")
    est = estimate(spec, Workload(tokens=300), engine=engine)
    assert sum(g.layers * sum(n * d.bytes_per_element for n, d in g.state_parts) for g in est.groups) == GRANITE_FIXED
    assert est.fixed_bytes_per_sequence == 36 * 528 * 2_048 == 38_928_384
    # SGLang: conv bf16 26,112 + SSM float32 2,097,152 = 2,123,264 x 36 = 76,437,504.
    engine, _ = make_engine("sglang")
    assert estimate(spec, Workload(tokens=300), engine=engine).fixed_bytes_per_sequence == 76_437_504
    # llama.cpp: both f32: 13,056 x 4 = 52,224 + 2,097,152 = 2,149,376 x 36 = 77,377,536.
    engine, _ = make_engine("llama.cpp")
    assert estimate(spec, Workload(tokens=300), engine=engine).fixed_bytes_per_sequence == 77_377_536


def _granite(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model_type": "granitemoehybrid", "torch_dtype": "bfloat16", "num_hidden_layers": 4, "hidden_size": 64,
        "num_attention_heads": 4, "num_key_value_heads": 2, "mamba_n_heads": 8, "mamba_d_head": 16,
        "mamba_d_state": 16, "mamba_n_groups": 1, "mamba_d_conv": 4, "mamba_expand": 2,
        "layer_types": ["mamba", "attention", "mamba", "mamba"], "attention_multiplier": 0.125,
        "mamba_chunk_size": 256, "position_embedding_type": "nope",
    }  # fmt: skip
    return {**base, **fields}


def test_granite_toy_by_hand() -> None:
    spec = read_config(_granite(), name="toy")
    assert [c.kind for c in spec.caches] == [Kind.MAMBA, Kind.FULL, Kind.MAMBA, Kind.MAMBA]
    # Mamba-2: width 2 x 64 = 128 (= 8 x 16); conv (128 + 2 x 16) x 3 = 480 elements; SSM 8 x 16 x 16 =
    # 2,048; (480 + 2,048) x 2 B = 5,056 B x 3 layers = 15,168. Attention 2 x 2 x 16 x 2 B = 128 B/token.
    est = estimate(spec, Workload(tokens=10))
    assert (est.fixed_bytes_per_sequence, est.per_token_bytes) == (15_168, 128)
    assert spec.warnings == () and spec.notes == ()


def test_granite_layer_spellings() -> None:
    expected = read_config(_granite(), name="toy").caches
    # transformers 5.24 re-saves the legacy names as linear_attention / full_attention ...
    saved = _granite(layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"])
    assert read_config(saved, name="toy").caches == expected
    # ... and reads layers_block_type as an alias of layer_types.
    alias = _granite()
    alias["layers_block_type"] = alias.pop("layer_types")
    assert read_config(alias, name="toy").caches == expected


def test_granite_without_layer_types_is_all_mamba() -> None:
    # GraniteMoeHybridConfig.__post_init__: every layer "linear_attention" (Mamba-2), noted; the
    # generic reader used to read every layer as attention.
    cfg = _granite()
    del cfg["layer_types"]
    spec = read_config(cfg, name="toy")
    assert [c.kind for c in spec.caches] == [Kind.MAMBA] * 4
    assert any("makes every layer Mamba-2" in n for n in spec.notes)
    assert estimate(spec, Workload(tokens=10)).per_token_bytes == 0


def test_granite_mamba_head_dim_auto_and_defaults() -> None:
    # "auto": mamba_expand x hidden_size / mamba_n_heads = 128 / 8 = 16, noted.
    spec = read_config(_granite(mamba_d_head="auto"), name="toy")
    assert spec.caches == read_config(_granite(), name="toy").caches
    assert any('"auto" (or absent): 128 / 8 = 16' in n for n in spec.notes)
    # Class defaults: 128 heads, 1 group, d_state 256, kernel 4, expand 2 (each noted).
    cfg = {k: v for k, v in _granite().items() if not k.startswith("mamba_") or k == "mamba_chunk_size"}
    cfg["hidden_size"] = 128  # 2 x 128 = 256 = 128 heads x 2
    spec = read_config(cfg, name="toy")
    state = spec.caches[0]
    # conv (256 + 2 x 1 x 256) x 3 = 2,304; SSM 128 x 2 x 256 = 65,536.
    assert isinstance(state, StateCache) and (state.conv_elements, state.recurrent_elements) == (2_304, 65_536)
    assert "'mamba_d_state' not in config; used the granitemoehybrid default 256" in spec.notes


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"mamba_d_head": 8}, r"'mamba_d_head' \(8\) x mamba_n_heads \(8\) must equal mamba_expand x hidden_size"),
        ({"mamba_d_head": "auto", "mamba_n_heads": 3}, r"'mamba_n_heads' \(3\) must divide"),
        ({"head_dim": 32}, r"'head_dim' \(32\) is not hidden_size / num_attention_heads"),
        ({"layer_types": ["mamba", "hybrid", "mamba", "mamba"]}, "unknown layer type 'hybrid'"),
        ({"layer_types": ["mamba"]}, "'layer_types' lists 1 layers but the model has 4"),
        ({"mamba_d_conv": 0}, "'mamba_d_conv' must be positive"),
        ({"num_key_value_heads": 3}, r"'num_key_value_heads' \(3\) must divide"),
    ],
)
def test_granite_errors_name_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        read_config(_granite(**change), name="toy")


def test_granite_block_type_alias_is_checked() -> None:
    cfg = _granite()
    cfg.pop("layer_types")
    cfg["layers_block_type"] = ["mamba", "moe", "mamba", "mamba"]
    with pytest.raises(ConfigError, match="'layers_block_type' must list one of"):
        read_config(cfg, name="toy")


def test_probe_granite_matches_byte_for_byte(run_cli: Any) -> None:
    # The trimmed fixture names no dtype: run it in bf16, the dtype of IBM's checkpoints.
    data = probe_fixture(run_cli, GRANITE, "--kv-dtype", "bf16")
    # Mamba-2: 36 x 2,131,968 = 76,750,848; attention 4 x 300 x 2 x 8 x 64 x 2 B = 2,457,600.
    assert data["measured_bytes"] == data["estimated_bytes"] == 76_750_848 + 2_457_600
    assert measured_by_kind(data) == {
        "mamba": (36, 76_750_848, 76_750_848),
        "full_attention": (4, 2_457_600, 2_457_600),
    }
