"""Gemma 4: sliding and full layers with their own KV geometry, each number derived by hand.

Source: transformers 5.24 models/gemma4/configuration_gemma4.py (Gemma4TextConfig.__post_init__:
layer_types default of five sliding then one full, last layer forced full, full layers get
head_dim = global_head_dim (512 when absent) and, only with attention_k_eq_v,
num_key_value_heads = num_global_key_value_heads; kv_sharing_modes: the last num_kv_shared_layers
layers "reuse") and modeling_gemma4.py (Gemma4TextAttention: with attention_k_eq_v there is no
v_proj and V starts as the K projection, but K gets k_norm + RoPE and V gets v_norm, and
cache.update(key_states, value_states) stores both tensors; cache_utils.get_layer_types_and_kwargs
gives reusing layers a dummy cache layer). Real config: tests/fixtures/gemma-4-31B-it.json (see
fixtures/SOURCES.md)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvcalc.calc.estimate import Workload
from kvcalc.engines import make_engine
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.inputs.presets import load_presets
from kvcalc.spec import AttentionCache, Kind, SharedCache
from tests.conftest import FIXTURES, fixture_config
from tests.helpers.theoretical import estimate

GEMMA4_31B = "gemma-4-31B-it.json"


def _text(**changes: Any) -> dict[str, Any]:
    config = copy.deepcopy(fixture_config(GEMMA4_31B))
    config["text_config"].update(changes)
    for key, value in changes.items():
        if value is None:
            del config["text_config"][key]
    return config


def test_gemma4_31b_by_hand() -> None:
    # layer_types: (5 sliding + 1 full) x 10 = 50 sliding + 10 full layers.
    # Sliding: num_key_value_heads 16 x head_dim 256 x 2 (K and V) x 2 B (bf16) = 16,384 B per token.
    # Full: attention_k_eq_v, so num_global_key_value_heads 4 x global_head_dim 512 x 2 (K and V are
    #   both cached) x 2 B = 8,192 B per token.
    # Per token: 50 x 16,384 + 10 x 8,192 = 819,200 + 81,920 = 901,120 B.
    # T = 300 (< window 1024): 901,120 x 300 = 270,336,000 B.
    spec = read_config(fixture_config(GEMMA4_31B), name="gemma-4-31b")
    assert spec.model_type == "gemma4_text" and spec.layers == 60 and spec.query_heads == 32
    assert spec.warnings == ()
    sliding, full = spec.caches[0], spec.caches[5]
    assert sliding == AttentionCache(16, 256, 256, window=1024)
    assert full == AttentionCache(4, 512, 512)
    assert [c.kind for c in spec.caches].count(Kind.FULL) == 10
    assert spec.caches[-1].kind is Kind.FULL
    est = estimate(spec, Workload(tokens=300))
    assert est.per_token_bytes == 901_120
    assert est.total_bytes == 270_336_000
    # T = 131,072: sliding layers keep 1,024 tokens: 50 x 16,384 x 1,024 = 838,860,800;
    # full layers 10 x 8,192 x 131,072 = 10,737,418,240; total 11,576,279,040 B.
    assert estimate(spec, Workload(tokens=131_072)).total_bytes == 11_576_279_040


def test_gemma4_31b_transformers_engine_matches_the_probe() -> None:
    # transformers' DynamicSlidingWindowLayer keeps W - 1 = 1,023 tokens: at T = 1,500
    # 50 x 16,384 x 1,023 + 10 x 8,192 x 1,500 = 838,041,600 + 122,880,000 = 960,921,600 B,
    # what `kvcalc probe tests/fixtures/gemma-4-31B-it.json --tokens 1500 --device cpu` measured.
    spec = read_config(fixture_config(GEMMA4_31B), name="gemma-4-31b")
    engine, _ = make_engine("transformers")
    assert estimate(spec, Workload(tokens=1500), engine=engine).total_bytes == 960_921_600


def test_gemma4_preset_matches_the_fixture() -> None:
    preset = load_presets()["gemma-4-31b"]
    from_preset = read_config(preset.config, name="preset")
    from_file = read_config(fixture_config(GEMMA4_31B), name="file")
    assert from_preset.caches == from_file.caches and from_preset.warnings == ()


def test_num_global_kv_heads_apply_only_with_k_eq_v() -> None:
    # Without attention_k_eq_v, Gemma4TextConfig leaves num_key_value_heads alone on full layers:
    # 16 KV heads x global_head_dim 512 x 2 x 2 B = 32,768 B per token per full layer.
    spec = read_config(_text(attention_k_eq_v=False), name="no-k-eq-v")
    assert spec.caches[5] == AttentionCache(16, 512, 512)
    assert any("applies only with attention_k_eq_v" in n for n in spec.notes)
    assert spec.warnings == ()
    assert estimate(spec, Workload(tokens=1)).per_token_bytes == 50 * 16_384 + 10 * 32_768


def test_global_head_dim_defaults_to_512_and_layer_types_to_five_to_one() -> None:
    spec = read_config(_text(global_head_dim=None, layer_types=None), name="defaults")
    assert spec.caches[5] == AttentionCache(4, 512, 512)
    assert [c.kind for c in spec.caches[:6]] == [Kind.SLIDING] * 5 + [Kind.FULL]
    assert any("global_head_dim" in n and "512" in n for n in spec.notes)


def test_last_layer_is_forced_full() -> None:
    layer_types = ["sliding_attention"] * 59 + ["sliding_attention"]
    spec = read_config(_text(layer_types=layer_types), name="last")
    assert spec.caches[-1] == AttentionCache(4, 512, 512)
    assert any("last layer" in n for n in spec.notes)


def test_bidirectional_all_halves_the_window() -> None:
    # use_bidirectional_attention "all": sliding_window = 1024 // 2 + 1 = 513.
    spec = read_config(_text(use_bidirectional_attention="all"), name="bidi")
    assert spec.caches[0] == AttentionCache(16, 256, 256, window=513)


def test_kv_shared_layers_store_nothing() -> None:
    # An E2B-shaped text model: 35 layers (4 sliding + 1 full) x 7, 1 KV head, head_dim 256,
    # global_head_dim 512, no attention_k_eq_v, the last 20 layers reuse earlier K/V.
    # Layers 0-14 cache: 12 sliding x 1 x 256 x 2 x 2 B = 12,288; 3 full x 1 x 512 x 2 x 2 B = 6,144.
    # Per token: 18,432 B.
    layer_types = (["sliding_attention"] * 4 + ["full_attention"]) * 7
    config = _text(
        num_hidden_layers=35, num_attention_heads=8, num_key_value_heads=1, attention_k_eq_v=False,
        num_global_key_value_heads=None, num_kv_shared_layers=20, layer_types=layer_types, sliding_window=512,
    )  # fmt: skip
    spec = read_config(config, name="e2b-like")
    assert spec.caches[14] == AttentionCache(1, 512, 512)
    assert spec.caches[0] == AttentionCache(1, 256, 256, window=512)
    assert all(isinstance(c, SharedCache) for c in spec.caches[15:])
    assert estimate(spec, Workload(tokens=100)).per_token_bytes == 18_432


def test_global_kv_heads_must_divide_the_query_heads() -> None:
    with pytest.raises(ConfigError, match="num_global_key_value_heads"):
        read_config(_text(num_global_key_value_heads=5), name="bad")


def test_unknown_gemma4_layer_type_is_an_error() -> None:
    with pytest.raises(ConfigError, match="layer_types"):
        read_config(_text(layer_types=["chunked_attention"] * 60), name="bad")


def test_probe_measures_the_estimate(run_cli) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    result = run_cli("probe", str(FIXTURES / GEMMA4_31B), "--tokens", "300", "--device", "cpu")
    assert result.exit_code == 0, result.stderr
    assert "270,336,000" in result.stdout and "match" in result.stdout


def test_guard_names_what_gemma4_still_does_not_read() -> None:
    # The fields read above raise no warning; an explicit per_layer_config (which transformers
    # uses instead of global_head_dim / num_global_key_value_heads) is applied
    # (tests/inputs/hf/test_configs.py), and an override kvcalc does not apply is named.
    spec = read_config(_text(per_layer_config={"05": {"head_dim": 256, "index_head_dim": 64}}), name="plc")
    assert [w.split("'")[1] for w in spec.warnings] == ["text_config.per_layer_config.05.index_head_dim"]
