"""Falcon-H1 (kvcalc.inputs.hf.families.falcon_h1): attention and a Mamba-2 mixer side by side in every
layer, each number derived by hand next to it.

Sources: the docstring of tests/helpers/hybrid_families.py (shared with the module's sibling)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvcalc.calc.estimate import Workload
from kvcalc.dtypes import BF16
from kvcalc.engines import make_engine
from kvcalc.engines.transformers.crosscheck import check_model
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.inputs.presets import load_presets
from kvcalc.spec import AttentionCache, Kind, ModelSpec, StateCache
from tests.conftest import FIXTURES, fixture_config
from tests.helpers.hybrid_families import _bytes, _probe
from tests.helpers.theoretical import estimate

FALCON = "Falcon-H1-7B.json"


def _falcon() -> ModelSpec:
    return read_config(fixture_config(FALCON), name="falcon-h1-7b")


def test_falcon_h1_by_hand() -> None:
    # 44 layers, each with attention (12 heads, 2 KV heads x head_dim 128) and a Mamba-2 mixer:
    # 44 attention entries (one per layer, in order), then 44 state entries.
    spec = _falcon()
    assert spec.layers == 44 and len(spec.caches) == 88 and spec.query_heads == 12
    assert spec.entry_layers == (*range(44), *range(44))
    attention, state = spec.caches[0], spec.caches[44]
    assert isinstance(attention, AttentionCache) and isinstance(state, StateCache)
    assert all(c == attention for c in spec.caches[:44]) and all(c == state for c in spec.caches[44:])
    assert (attention.kv_heads, attention.k_head_dim, attention.v_head_dim) == (2, 128, 128)
    # Mamba-2: conv over d_ssm 3072 + 2 x n_groups 1 x d_state 256 = 3,584 channels, kernel 4;
    # SSM state n_heads 24 x d_head 128 x d_state 256 = 786,432 elements.
    assert (state.family, state.conv_channels, state.conv_kernel) == ("mamba", 3_584, 4)
    assert state.recurrent_elements == 24 * 128 * 256 == 786_432
    assert state.conv_elements == 3_584 * 3 == 10_752
    # The fixture names no dtype: 2-byte elements are assumed (noted).
    est = estimate(spec, Workload(tokens=4096))
    # Attention: 44 layers x 2 (K and V) x 2 KV heads x 128 x 2 B = 45,056 B per token.
    assert est.per_token_bytes == 44 * 2 * 2 * 128 * 2 == 45_056
    # State: (10,752 + 786,432) x 2 B = 1,594,368 B per layer; x 44 = 70,152,192 B per sequence.
    assert est.fixed_bytes_per_sequence == 44 * (10_752 + 786_432) * 2 == 70_152_192
    assert est.total_bytes == 4096 * 45_056 + 70_152_192 == 254_701_568
    assert any("assumed fp16" in n for n in est.notes)
    # Every field that could shape the cache is read or set aside (multipliers, chunk size, ...).
    assert spec.warnings == ()
    assert spec.notes == ("every one of the 44 falcon_h1 layers keeps K/V and a Mamba-2 state: it counts in both rows",)


def test_falcon_h1_engines_by_hand() -> None:
    spec = read_config(copy.deepcopy(load_presets()["falcon-h1-7b"].config), name="falcon-h1-7b")
    assert spec.dtype == BF16
    # Attention, every engine: 45,056 B per token (4,096 tokens fill 256 vLLM blocks of 16 and
    # llama.cpp's pad(4096, 256) cells exactly; llama.cpp caches K/V as f16, the same 2 bytes).
    # transformers: the conv state keeps the whole kernel in bf16, 3,584 x 4 x 2 = 28,672 B, and the
    #   SSM state float32, 786,432 x 4 = 3,145,728 B: 3,174,400 B per layer x 44 = 139,673,600.
    assert _bytes(spec, "transformers") == (45_056, 44 * (3_584 * 4 * 2 + 786_432 * 4)) == (45_056, 139_673_600)
    # vLLM: kernel - 1 conv columns, both states in the model dtype (mamba_cache_dtype and
    #   mamba_ssm_cache_dtype "auto"): (10,752 + 786,432) x 2 = 1,594,368 B a layer; its hybrid layout
    #   (_align_hybrid_block_size) grows the 1,024 B/token attention pages in steps of 16 tokens until
    #   one holds it: 16 x cdiv(1,594,368, 16,384) = 1,568 tokens, 1,605,632 B, a page each state
    #   takes: x 44 = 70,647,808 (44 attention and 44 mamba entries: groups of 44, none empty).
    assert _bytes(spec, "vllm") == (45_056, 44 * 1_568 * 1_024) == (45_056, 70_647_808)
    # SGLang: conv bf16 10,752 x 2 = 21,504, SSM float32 3,145,728: 3,167,232 x 44 = 139,358,208.
    assert _bytes(spec, "sglang") == (45_056, 44 * (10_752 * 2 + 786_432 * 4)) == (45_056, 139_358_208)
    # llama.cpp: recurrent memory in f32, (10,752 + 786,432) x 4 = 3,188,736 x 44 = 140,304,384.
    assert _bytes(spec, "llama.cpp") == (45_056, 44 * (10_752 + 786_432) * 4) == (45_056, 140_304_384)


def test_falcon_h1_defaults_and_derivations() -> None:
    base = fixture_config(FALCON)
    # mamba_d_head "auto" (the class default) is d_ssm // n_heads = 3072 / 24 = 128.
    auto = read_config({**base, "mamba_d_head": "auto"}, name="auto")
    assert auto.caches == _falcon().caches
    # An explicit null d_ssm is mamba_expand x hidden_size = 2 x 3072 = 6,144: conv 6,144 + 512 = 6,656
    # channels, SSM state 24 x 256 (auto head) x 256 = 1,572,864.
    doubled = read_config({**base, "mamba_d_ssm": None, "mamba_d_head": "auto"}, name="null-ssm")
    state = doubled.caches[-1]
    assert isinstance(state, StateCache)
    assert (state.conv_channels, state.recurrent_elements) == (6_656, 24 * 256 * 256)
    # No num_key_value_heads: FalconH1Config's default is 8 (noted), which must divide the query
    # heads (16 here; the fixture's 12 are refused); null: the query heads.
    without_kv = {k: v for k, v in base.items() if k != "num_key_value_heads"}
    no_kv = read_config({**without_kv, "num_attention_heads": 16}, name="no-kv")
    assert isinstance(no_kv.caches[0], AttentionCache) and no_kv.caches[0].kv_heads == 8
    assert any("num_key_value_heads" in n and "default 8" in n for n in no_kv.notes)
    with pytest.raises(ConfigError, match="num_key_value_heads"):
        read_config(without_kv, name="no-kv-12-heads")
    null_kv = read_config({**base, "num_key_value_heads": None}, name="null-kv")
    assert isinstance(null_kv.caches[0], AttentionCache) and null_kv.caches[0].kv_heads == 12
    # No head_dim: hidden_size / heads = 3072 / 12 = 256.
    no_head_dim = read_config({k: v for k, v in base.items() if k != "head_dim"}, name="no-head-dim")
    assert isinstance(no_head_dim.caches[0], AttentionCache) and no_head_dim.caches[0].k_head_dim == 256
    # A layer list or attn_layer_indices changes nothing (neither transformers nor vLLM reads them).
    listed = read_config({**base, "attn_layer_indices": [0, 1]}, name="listed")
    assert listed.caches == _falcon().caches and any("attn_layer_indices" in n for n in listed.notes)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        # 24 heads x 100 = 2,400, not d_ssm 3,072: FalconH1Config.validate_architecture refuses it.
        ({"mamba_d_head": 100}, "mamba_d_head"),
        ({"mamba_d_head": "auto", "mamba_n_heads": 25}, "mamba_n_heads"),
        ({"mamba_d_head": "wide"}, "mamba_d_head"),
        ({"num_key_value_heads": 5}, "num_key_value_heads"),
        ({"mamba_d_state": 0}, "mamba_d_state"),
    ],
)
def test_falcon_h1_errors_name_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        read_config({**fixture_config(FALCON), **change}, name="bad")


def test_falcon_h1_preset_agrees_with_real_config() -> None:
    preset = load_presets()["falcon-h1-7b"]
    from_preset = read_config(copy.deepcopy(preset.config), name="falcon-h1-7b")
    from_file = _falcon()
    assert from_preset.caches == from_file.caches
    assert from_preset.entry_layers == from_file.entry_layers
    assert (from_preset.layers, from_preset.query_heads) == (from_file.layers, from_file.query_heads) == (44, 12)
    # The trimmed fixture has no torch_dtype; the preset says bfloat16 (the checkpoints' own).
    assert (from_preset.dtype, from_file.dtype) == (BF16, None)
    assert from_preset.warnings == ()


def _hybrid_layer(kv: int, state: int) -> dict[str, Any]:
    """A probe report of one transformers "hybrid" layer: K/V of ``kv`` bytes, states of ``state``."""
    half = kv // 2
    return {
        "tensor_bytes": kv + state,
        "storage_bytes": kv + state,
        "tensors": [
            {"name": "keys", "shape": [half], "dtype": "uint8"},
            {"name": "values", "shape": [half], "dtype": "uint8"},
            {"name": "conv_states.0", "shape": [state // 2], "dtype": "uint8"},
            {"name": "recurrent_states.0", "shape": [state // 2], "dtype": "uint8"},
        ],
    }


def test_crosscheck_splits_a_hybrid_layer_into_its_two_entries() -> None:
    # Transformers keeps K/V and the states of a Falcon-H1 layer in one cache layer; the comparison
    # gives the state tensors to kvcalc's appended mamba entries. bf16 at 300 tokens, 1 sequence:
    # K/V 300 x 1,024 = 307,200 B a layer; state 28,672 + 3,145,728 = 3,174,400 B a layer.
    spec = read_config(copy.deepcopy(load_presets()["falcon-h1-7b"].config), name="falcon-h1-7b")
    est = estimate(spec, Workload(tokens=300), engine=make_engine("transformers")[0])
    layer = {"kind": "hybrid", **_hybrid_layer(307_200, 3_174_400)}
    check = check_model(spec, est, {"layers": [layer], "layer_kinds": ["hybrid"] * 44})
    by_kind = {k.kind: (k.layers, k.measured_bytes, k.estimated_bytes) for k in check.kinds}
    assert by_kind == {
        Kind.FULL: (44, 44 * 307_200, 44 * 307_200),
        Kind.MAMBA: (44, 44 * 3_174_400, 44 * 3_174_400),
    }
    assert check.notes == () and check.difference == 0


def test_probe_falcon_h1_matches_byte_for_byte(run_cli) -> None:
    # The fixture names no dtype, so transformers builds it in float32 (4-byte elements):
    # K/V 44 x 300 x 2 x 2 x 128 x 4 = 27,033,600; states 44 x (3,584 x 4 x 4 + 786,432 x 4)
    # = 44 x 3,203,072 = 140,935,168.
    data = _probe(run_cli, str(FIXTURES / FALCON))
    assert data["match"] is True
    assert data["measured_bytes"] == data["estimated_bytes"] == 27_033_600 + 140_935_168
    by_kind = {k["kind"]: (k["layers"], k["measured_bytes"], k["estimated_bytes"]) for k in data["kinds"]}
    assert by_kind == {
        "full_attention": (44, 27_033_600, 27_033_600),
        "mamba": (44, 140_935_168, 140_935_168),
    }


# Every key of the Falcon-H1-0.5B config as NVIDIA Megatron-Bridge's unit test of its FalconH1 bridge
# quotes it (FALCON_H1_500M_CONFIG; the copy has no mamba_d_ssm).
FALCON_H1_05B_KEYS: dict[str, Any] = {
    "architectures": ["FalconH1ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attention_in_multiplier": 1.0, "attention_out_multiplier": 0.9375, "attn_layer_indices": None,
    "embedding_multiplier": 5.656854249492381, "head_dim": 64, "hidden_act": "silu", "hidden_size": 1024,
    "initializer_range": 0.02, "intermediate_size": 2048, "key_multiplier": 0.39062499999999994,
    "lm_head_multiplier": 0.0390625, "mamba_chunk_size": 128, "mamba_conv_bias": True, "mamba_d_conv": 4,
    "mamba_d_head": 64, "mamba_d_state": 128, "mamba_expand": 2, "mamba_n_groups": 1, "mamba_n_heads": 24,
    "mamba_norm_before_gate": False, "mamba_proj_bias": False, "mamba_rms_norm": False, "mamba_use_mlp": True,
    "max_position_embeddings": 16384, "mlp_bias": False, "mlp_multipliers": [0.8838834764831844, 0.5859375],
    "model_type": "falcon_h1", "num_attention_heads": 8, "num_hidden_layers": 36, "num_key_value_heads": 2,
    "projectors_bias": False, "rms_norm_eps": 1e-5, "rope_scaling": None, "rope_theta": 100000000000.0,
    "ssm_in_multiplier": 1.25,
    "ssm_multipliers": [0.3535533905932738, 0.25, 0.3535533905932738, 0.5, 0.3535533905932738],
    "ssm_out_multiplier": 0.23570226039551587, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "vocab_size": 32784,
}  # fmt: skip


def test_falcon_h1_full_key_set_reads_without_warnings() -> None:
    # Without mamba_d_ssm FalconH1Config uses its default 1024, and 24 heads x 64 = 1,536 is not that:
    # transformers' validate_architecture refuses the copy, and so does kvcalc, naming the field.
    with pytest.raises(ConfigError, match="mamba_d_head"):
        read_config(FALCON_H1_05B_KEYS, name="falcon-h1-0.5b")
    # With d_ssm = 24 x 64 = 1,536 every key is read or set aside, and nothing is left to the guard.
    spec = read_config({**FALCON_H1_05B_KEYS, "mamba_d_ssm": 1536}, name="falcon-h1-0.5b")
    assert spec.warnings == ()
    est = estimate(spec, Workload(tokens=4096))
    # Attention: 36 layers x 2 x 2 KV heads x 64 x 2 B = 18,432 B per token.
    # State: conv (1,536 + 2 x 1 x 128) x 3 = 5,376, SSM 24 x 64 x 128 = 196,608; x 2 B = 403,968 a layer.
    assert (est.per_token_bytes, est.fixed_bytes_per_sequence) == (18_432, 36 * 403_968) == (18_432, 14_542_848)
