"""LFM2 (Liquid AI): gated short-convolution layers between attention layers, each number derived by
hand next to it.

Sources: transformers 5.24 models/lfm2/configuration_lfm2.py (Lfm2Config.__post_init__: layer_types,
else full_attn_idxs, else every layer attention; conv_L_cache default 3) and modeling_lfm2.py
(Lfm2ShortConv: a depthwise conv of kernel conv_L_cache over hidden_size channels, no recurrent
state; Lfm2Attention: head_dim = hidden_size // num_attention_heads unless given), cache_utils.py
(a "conv" layer is a LinearAttentionLayer whose conv state keeps the whole kernel, in the dtype of
the hidden states); vLLM's vllm/model_executor/layers/mamba/mamba_utils.py @ 02d71083
(short_conv_state_shape: (conv_dim / tp, conv_kernel - 1)). Real config: tests/fixtures (see
fixtures/SOURCES.md)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvcalc.calc.estimate import Workload
from kvcalc.dtypes import BF16, FP16
from kvcalc.engines import make_engine
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.inputs.presets import load_presets
from kvcalc.spec import AttentionCache, Kind, StateCache
from tests.conftest import FIXTURES, fixture_config
from tests.helpers.theoretical import estimate

LFM2 = "LFM2.5-1.2B-Distilled-Claude-4.6.json"
ATTENTION_LAYERS = (2, 5, 8, 10, 12, 14)


def test_lfm2_by_hand() -> None:
    # layer_types: 16 layers, attention at 2, 5, 8, 10, 12, 14 (6), short conv elsewhere (10).
    # Attention: head_dim = 2048 / 32 = 64; 6 layers x 2 (K and V) x 8 KV heads x 64 x 2 B (fp16)
    #   = 12,288 B per token.
    # Short conv: 2048 channels x (conv_L_cache 3 - 1) = 4,096 elements x 2 B = 8,192 B per layer;
    #   x 10 = 81,920 B per sequence, no recurrent state.
    spec = read_config(fixture_config(LFM2), name="lfm2")
    assert spec.layers == 16 and len(spec.caches) == 16
    assert [i for i, c in enumerate(spec.caches) if c.kind is Kind.FULL] == list(ATTENTION_LAYERS)
    assert sum(c.kind is Kind.CONV for c in spec.caches) == 10
    conv = spec.caches[0]
    assert isinstance(conv, StateCache) and conv.family == "short_conv"
    assert (conv.conv_channels, conv.conv_kernel, conv.recurrent_elements) == (2048, 3, 0)
    assert conv.conv_elements == 4_096 and conv.is_state and not conv.caches_tokens
    attention = spec.caches[2]
    assert isinstance(attention, AttentionCache)
    assert (attention.kv_heads, attention.k_head_dim, attention.v_head_dim) == (8, 64, 64)
    assert spec.dtype == FP16
    est = estimate(spec, Workload(tokens=4096))
    assert est.per_token_bytes == 12_288
    assert est.fixed_bytes_per_sequence == 81_920
    assert est.total_bytes == 4096 * 12_288 + 81_920 == 50_413_568
    # Every field that could shape the cache is read (conv_L_cache, conv_dim, full_attn_idxs, ...).
    assert spec.warnings == () and spec.notes == ()


def test_lfm2_engines_by_hand() -> None:
    spec = read_config(fixture_config(LFM2), name="lfm2")
    # transformers keeps the whole kernel: 2048 x 3 x 2 B = 12,288 B per conv layer; x 10 = 122,880.
    engine, _ = make_engine("transformers")
    est = estimate(spec, Workload(tokens=300), engine=engine)
    assert est.fixed_bytes_per_sequence == 122_880
    assert est.total_bytes == 122_880 + 300 * 12_288 == 3_809_280
    # vLLM keeps kernel - 1 (like the theoretical figure), in the model dtype: 2048 x 2 x 2 B = 8,192 B a
    # conv layer; attention in 16-token blocks, a page 16 x 2,048 B = 32,768 B, which already holds a
    # state: the blocks stay 16 and each state takes a whole page (_align_hybrid_block_size). Groups
    # of 6 (10 < 1.5 x 6 is false): the 10 conv layers in 2 groups, 12 slots of which 2 empty:
    # 12 x 32,768 = 393,216 a sequence; attention 300 -> 19 blocks = 6 x 19 x 32,768 = 3,735,552.
    engine, _ = make_engine("vllm")
    est = estimate(spec, Workload(tokens=300), engine=engine)
    assert est.fixed_bytes_per_sequence == 12 * 32_768 == 393_216
    assert est.total_bytes == 393_216 + 6 * 19 * 32_768
    # Batch 4 (theoretical): the state is per sequence, 4 x (81,920 + 300 x 12,288) = 15,073,280.
    assert estimate(spec, Workload(tokens=300, batch=4)).total_bytes == 15_073_280


def _toy(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model_type": "lfm2", "torch_dtype": "bfloat16", "hidden_size": 256, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2,
    }  # fmt: skip
    return {**base, **fields}


def test_full_attn_idxs_without_layer_types() -> None:
    # Lfm2Config: full_attn_idxs lists the attention layers, every other is "conv".
    spec = read_config(_toy(full_attn_idxs=[1, 3], conv_L_cache=4), name="toy")
    assert [c.kind for c in spec.caches] == [Kind.CONV, Kind.FULL, Kind.CONV, Kind.FULL]
    # conv 256 x (4 - 1) x 2 B = 1,536 B x 2 layers = 3,072; attention 2 x 2 x 2 x 64 x 2 B = 1,024 B/token.
    est = estimate(spec, Workload(tokens=10))
    assert (est.fixed_bytes_per_sequence, est.per_token_bytes) == (3_072, 1_024)
    assert spec.warnings == () and spec.notes == ()


def test_defaults_are_noted() -> None:
    # No layer_types and no full_attn_idxs: every layer attention (Lfm2Config's default).
    spec = read_config(_toy(), name="toy")
    assert [c.kind for c in spec.caches] == [Kind.FULL] * 4
    assert any("every lfm2 layer is attention" in n for n in spec.notes)
    # No conv_L_cache: the class default 3, noted.
    spec = read_config(_toy(layer_types=["conv", "full_attention", "conv", "conv"]), name="toy")
    conv = spec.caches[0]
    assert isinstance(conv, StateCache) and conv.conv_kernel == 3
    assert any("'conv_L_cache' not in config; used the lfm2 default 3" in n for n in spec.notes)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"layer_types": ["conv", "mamba", "conv", "conv"]}, "'layer_types' holds unknown layer type 'mamba'"),
        ({"layer_types": ["conv"]}, "'layer_types' lists 1 layers but the model has 4"),
        ({"full_attn_idxs": [0, 4]}, "'full_attn_idxs' holds layer 4, outside the 4 layers"),
        ({"full_attn_idxs": [0], "conv_L_cache": 0}, "'conv_L_cache' must be positive"),
        ({"full_attn_idxs": [0], "conv_dim": 512}, r"'conv_dim' \(512\) differs from hidden_size \(256\)"),
    ],
)
def test_errors_name_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        read_config(_toy(**change), name="toy")


def test_conv_layer_type_of_another_family_is_still_unknown() -> None:
    cfg = {**_toy(layer_types=["conv", "full_attention", "conv", "conv"]), "model_type": "llama"}
    with pytest.raises(ConfigError, match="unknown layer type 'conv'"):
        read_config(cfg, name="toy")


def test_preset_agrees_with_real_config() -> None:
    preset = load_presets()["lfm2-1.2b"]
    from_preset = read_config(copy.deepcopy(preset.config), name="lfm2-1.2b")
    from_file = read_config(fixture_config(LFM2), name="lfm2")
    # full_attn_idxs (preset) and layer_types (fixture) give the same layers.
    assert from_preset.caches == from_file.caches
    assert (from_preset.layers, from_preset.query_heads) == (from_file.layers, from_file.query_heads)
    # LiquidAI's own file is bfloat16; the fine-tune in the fixture says float16 (same 2 bytes).
    assert (from_preset.dtype, from_file.dtype) == (BF16, FP16)
    assert from_preset.warnings == ()


def test_probe_lfm2_matches_byte_for_byte(run_cli) -> None:
    pytest.importorskip("torch", reason="the probe extra (torch) is not installed")
    pytest.importorskip("transformers", reason="the probe extra (transformers) is not installed")
    result = run_cli("probe", str(FIXTURES / LFM2), "--tokens", "300", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.stderr + result.stdout
    data = result.json()
    assert data["match"] is True
    # 10 x 12,288 (conv state, whole kernel) + 6 x 300 x 2,048 (attention) = 3,809,280.
    assert data["measured_bytes"] == data["estimated_bytes"] == 122_880 + 3_686_400
    by_kind = {k["kind"]: (k["layers"], k["measured_bytes"], k["estimated_bytes"]) for k in data["kinds"]}
    assert by_kind == {
        "short_conv": (10, 122_880, 122_880),
        "full_attention": (6, 3_686_400, 3_686_400),
    }


def test_lfm3_default_pattern_and_widths_by_hand() -> None:
    # Lfm3Config (transformers 5.24 models/lfm3/configuration_lfm3.py): 24 layers; full at i % 4 == 2,
    # sliding (256 tokens) at i % 4 == 0 and i > 0, conv (kernel 7 over hidden 2048) elsewhere;
    # head_dim 128 explicit (2048 / 16 heads would give the same, so 4 KV heads are the check below).
    spec = read_config({"model_type": "lfm3", "torch_dtype": "bfloat16", "num_key_value_heads": 4}, name="lfm3")
    full = [i for i, c in enumerate(spec.caches) if c.kind is Kind.FULL]
    sliding = [i for i, c in enumerate(spec.caches) if c.kind is Kind.SLIDING]
    assert full == [2, 6, 10, 14, 18, 22] and sliding == [4, 8, 12, 16, 20]
    conv = spec.caches[0]
    assert isinstance(conv, StateCache) and (conv.conv_channels, conv.conv_kernel) == (2048, 7)
    # 1,000 tokens, bf16, theoretical: full 6 x 1000 x 2 x 4 x 128 x 2 B = 12,288,000; sliding keeps
    # 256: 5 x 256 x 2,048 B = 2,621,440; conv keeps kernel - 1 = 6 inputs: 13 x 2048 x 6 x 2 B = 319,488.
    est = estimate(spec, Workload(tokens=1000), engine=make_engine("theoretical")[0])
    assert est.total_bytes == 12_288_000 + 2_621_440 + 319_488
    assert not spec.warnings


def test_lfm3_layer_types_listed() -> None:
    config = {"model_type": "lfm3", "num_hidden_layers": 3, "layer_types": ["conv", "sliding_attention",
              "full_attention"], "hidden_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 2}  # fmt: skip
    assert [c.kind for c in read_config(config, name="lfm3").caches] == [Kind.CONV, Kind.SLIDING, Kind.FULL]
