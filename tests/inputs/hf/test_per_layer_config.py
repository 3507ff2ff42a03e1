"""transformers' heterogeneous configs: ``per_layer_config``, a sparse mapping from layer index to the
attributes that differ on that layer (transformers 5.24 integrations/heterogeneity/
configuration_utils.py; cache_utils.py get_layer_types_and_kwargs reads each layer's sliding_window /
attention_chunk_size; Gemma4TextAttention reads each layer's head_dim and num_key_value_heads).
Every number is derived by hand next to it."""

from __future__ import annotations

from typing import Any

import pytest

from kvcalc.calc.estimate import Workload
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.spec import AttentionCache, Kind
from tests.conftest import FIXTURES, fixture_config
from tests.helpers.theoretical import estimate

# tests/fixtures/SOURCES.md: the real gemma-4-31B-it config, loaded and saved again by transformers
# 5.24, which writes the full layers' geometry as per_layer_config and drops global_head_dim and
# num_global_key_value_heads.
RESAVED = "gemma-4-31B-it.saved-by-transformers-5.24.json"


def test_gemma4_saved_by_transformers_reads_per_layer_config() -> None:
    raw = fixture_config(RESAVED)
    text = raw["text_config"]
    assert "global_head_dim" not in text
    assert text["per_layer_config"]["05"] == {"head_dim": 512, "num_key_value_heads": 4}
    spec = read_config(raw, name="gemma-4-31b")
    # Sliding (50 layers): 2 x 16 KV heads x 256 x 2 B (bf16) = 16,384 B a layer, 819,200 B a token.
    # Full (10 layers, the per_layer_config entries 05, 11, ..., 59): 2 x 4 x 512 x 2 B = 8,192 B a
    # layer, 81,920 B a token. Together 901,120 B per token: the same as the file before saving.
    full = [i for i, c in enumerate(spec.caches) if c.kind is Kind.FULL]
    assert full == [5, 11, 17, 23, 29, 35, 41, 47, 53, 59]
    assert spec.caches[5] == AttentionCache(4, 512, 512)
    assert spec.caches[0] == AttentionCache(16, 256, 256, window=1024)
    assert estimate(spec, Workload(tokens=4096)).per_token_bytes == 819_200 + 81_920 == 901_120
    original = read_config(fixture_config("gemma-4-31B-it.json"), name="gemma-4-31b")
    assert original.caches == spec.caches
    assert spec.warnings == () and spec.notes == ()


def _toy(per_layer: Any, **fields: Any) -> dict[str, Any]:
    return {
        "model_type": "mistral", "torch_dtype": "float16", "num_hidden_layers": 4, "hidden_size": 512,
        "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 64, "sliding_window": None,
        "per_layer_config": per_layer, **fields,
    }  # fmt: skip


def test_generic_overrides_by_hand() -> None:
    spec = read_config(
        _toy({"1": {"num_key_value_heads": 2}, 2: {"sliding_window": 128}, "03": {"head_dim": 128}}), name="toy"
    )
    # Layer 0: 2 x 8 x 64 x 2 B = 2,048 B a token. Layer 1: 2 x 2 x 64 x 2 = 512. Layer 2: 2,048 B a
    # token for at most 128 tokens. Layer 3: 2 x 8 x 128 x 2 = 4,096.
    assert [c.kind for c in spec.caches] == [Kind.FULL, Kind.FULL, Kind.SLIDING, Kind.FULL]
    est = estimate(spec, Workload(tokens=1000))
    assert est.total_bytes == 1000 * (2_048 + 512 + 4_096) + 128 * 2_048 == 6_918_144
    assert spec.warnings == ()


def test_an_override_can_remove_a_window() -> None:
    spec = read_config(_toy({"0": {"sliding_window": None}}, sliding_window=256), name="toy")
    assert [c.kind for c in spec.caches] == [Kind.FULL] + [Kind.SLIDING] * 3


def test_unmodelled_overrides_are_named() -> None:
    spec = read_config(
        _toy({"1": {"skip": ["self_attn"], "rope_theta": 10.0, "kv_lora_rank": 512, "intermediate_size": 64}}),
        name="toy",
    )
    # skip and kv_lora_rank may shape the cache; RoPE and MLP sizes do not.
    assert len(spec.warnings) == 2
    assert "per_layer_config.1.skip" in spec.warnings[0]
    assert "per_layer_config.1.kv_lora_rank" in spec.warnings[1]


@pytest.mark.parametrize(
    ("per_layer", "message"),
    [
        ({"4": {"head_dim": 64}}, "key '4': not a layer index below 4"),
        ({"-1": {"head_dim": 64}}, "key '-1'"),
        ({"x": {}}, "key 'x'"),
        ([], "must be an object mapping layer indices"),
        ({"1": 3}, "'per_layer_config.1' must be an object"),
        ({"1": {"num_key_value_heads": 3}}, "per_layer_config.1.num_key_value_heads' (3) must divide the 8"),
        ({"1": {"head_dim": "64"}}, "per_layer_config.1.head_dim' must be a positive integer"),
        ({"1": {"head_dim": 0}}, "per_layer_config.1.head_dim' must be a positive integer"),
        ({"1": {"sliding_window": 8, "attention_chunk_size": 8}}, "both a sliding window and an attention chunk"),
    ],
)
def test_bad_overrides_name_the_field(per_layer: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_config(_toy(per_layer), name="toy")


def test_override_on_a_state_layer_is_refused() -> None:
    config = {
        "model_type": "jamba", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 4, "attn_layer_period": 2, "attn_layer_offset": 1, "mamba_d_state": 4,
        "mamba_d_conv": 4, "mamba_expand": 2, "per_layer_config": {"0": {"head_dim": 32}},
    }  # fmt: skip
    with pytest.raises(ConfigError, match=r"per_layer_config\.0\.head_dim' overrides attention geometry on a mamba"):
        read_config(config, name="toy")


def test_probe_gemma4_saved_config_matches(run_cli) -> None:
    pytest.importorskip("torch", reason="the probe extra (torch) is not installed")
    pytest.importorskip("transformers", reason="the probe extra (transformers) is not installed")
    result = run_cli("probe", str(FIXTURES / RESAVED), "--tokens", "300", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.output
    import json

    report = json.loads(result.stdout)
    # 300 tokens x 901,120 B (all 300 fit in the 1,024-token window) = 270,336,000 B.
    assert report["measured_bytes"] == report["estimated_bytes"] == 270_336_000
