"""Kimi-Linear (KDA + MLA), Granite-4.0-H (Mamba-2 + attention) and Nemotron-3-Nano (Nemotron-H with
MoE blocks): each number derived by hand next to it.

Sources (see the family modules for the full citations):
- transformers 5.24 models/kimi_linear (KimiLinearConfig.__post_init__: layer_types, else the 1-based
  linear_attn_config lists; KimiLinearDeltaAttention: conv over 3 x heads x head_dim channels, a
  float32 head_dim x head_dim state per head), models/granitemoehybrid (no layer_types -> every
  layer Mamba-2; Mamba-2 width mamba_expand x hidden_size), cache_utils.py (LinearAttentionLayer keeps
  the whole conv kernel, the recurrent state float32).
- vLLM mamba_utils.py @ 2afe1e85 (kda_state_shape / kda_state_dtype: convs of kernel - 1 in the model
  dtype, recurrent float32; mamba2_state_shape), kimi_linear.py @ 8744bb09,
  transformers_utils/configs/kimi_linear.py @ 6b065994 (is_kda_layer: 1-based kda_layers),
  granitemoehybrid.py @ fc41bfe8.
- Real configs: tests/fixtures (see fixtures/SOURCES.md).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvcalc.calc.estimate import Workload
from kvcalc.dtypes import BF16, FP32
from kvcalc.engines import make_engine
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.inputs.presets import load_presets
from kvcalc.spec import AttentionCache, Kind, LatentCache, NoCache, StateCache
from tests.conftest import FIXTURES, fixture_config
from tests.helpers.theoretical import estimate

KIMI = "Kimi-Linear-48B-A3B-Instruct.json"
GRANITE = "granite-4.0-h-micro.json"
NANO = "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json"

# Kimi-Linear: full_attn_layers [4, 8, 12, 16, 20, 24, 27] are 1-based -> indices 3, 7, ..., 23, 26.
KIMI_MLA = [3, 7, 11, 15, 19, 23, 26]
# KDA state per layer (32 heads x 128, kernel 4):
#   conv 3 x 32 x 128 = 12,288 channels x (4 - 1) = 36,864 elements x 2 B (bf16) = 73,728 B
#   recurrent 32 x 128 x 128 = 524,288 elements x 4 B (float32 in every engine) = 2,097,152 B
#   -> 2,170,880 B per layer; x 20 KDA layers = 43,417,600 B per sequence.
KIMI_FIXED = 43_417_600
# MLA: 7 layers x (512 + 64) x 2 B = 8,064 B per token.
KIMI_PER_TOKEN = 8_064


def test_kimi_linear_by_hand() -> None:
    spec = read_config(fixture_config(KIMI), name="kimi")
    assert spec.layers == 27 and len(spec.caches) == 27 and spec.query_heads == 32
    assert [i for i, c in enumerate(spec.caches) if c.kind is Kind.MLA] == KIMI_MLA
    assert sum(c.kind is Kind.LINEAR for c in spec.caches) == 20
    kda = spec.caches[0]
    assert isinstance(kda, StateCache) and kda.family == "linear_attention"
    assert (kda.conv_channels, kda.conv_kernel, kda.recurrent_elements) == (12_288, 4, 524_288)
    assert kda.recurrent_dtype == FP32
    mla = spec.caches[3]
    assert isinstance(mla, LatentCache)
    assert (mla.latent_dim, mla.rope_dim, mla.k_head_dim, mla.v_head_dim) == (512, 64, 128 + 64, 128)
    assert spec.dtype == BF16
    est = estimate(spec, Workload(tokens=4096))
    assert est.per_token_bytes == KIMI_PER_TOKEN
    assert est.fixed_bytes_per_sequence == KIMI_FIXED
    # 4,096 x 8,064 = 33,030,144 + 43,417,600 = 76,447,744.
    assert est.total_bytes == 76_447_744
    # linear_attn_config, head_dim 72, mla_use_nope, use_grouped_topk: all read, nothing to warn about.
    assert spec.warnings == () and spec.notes == ()


def test_kimi_linear_saves_most_of_the_mla_cache() -> None:
    # Kimi-Linear's report: "reducing KV cache usage by up to 75%". All 27 layers MLA would cache
    # 27 x 576 x 2 = 31,104 B per token; 7 of them cache 8,064: 1 - 8,064 / 31,104 = 74.1 %.
    spec = read_config(fixture_config(KIMI), name="kimi")
    assert estimate(spec, Workload(tokens=1)).per_token_bytes * 27 == 7 * 31_104


def test_kimi_linear_engines_by_hand() -> None:
    spec = read_config(fixture_config(KIMI), name="kimi")
    # transformers keeps the whole conv kernel: 12,288 x 4 x 2 B = 98,304 + 2,097,152 = 2,195,456 B
    # per KDA layer, x 20 = 43,909,120; MLA 300 x 8,064 = 2,419,200.
    engine, _ = make_engine("transformers")
    est = estimate(spec, Workload(tokens=300), engine=engine)
    assert (est.fixed_bytes_per_sequence, est.total_bytes) == (43_909_120, 43_909_120 + 2_419_200)
    # vLLM: convs kernel - 1 in bf16, recurrent float32 (kda_state_dtype) = the theoretical state;
    # MLA in 64-token blocks of 576 x 2 = 1,152 B a token. Its hybrid layout grows them in steps of 64
    # until a page holds a 2,170,880 B state: 64 x cdiv(2,170,880, 73,728) = 1,920 tokens, 2,211,840 B,
    # a page each state takes; 20 KDA layers in groups of 7: 3 groups, 21 slots (1 empty):
    # 21 x 2,211,840 = 46,448,640; MLA 300 -> 1 block of 1,920: 7 x 1,920 x 1,152 = 15,482,880.
    engine, _ = make_engine("vllm", uses_mla=True)
    est = estimate(spec, Workload(tokens=300), engine=engine)
    assert (est.fixed_bytes_per_sequence, est.total_bytes) == (21 * 2_211_840, 21 * 2_211_840 + 15_482_880)
    # SGLang: conv bf16, SSM float32 (KimiLinearStateShape with mamba2_state_dtype): the same state.
    engine, _ = make_engine("sglang")
    est = estimate(spec, Workload(tokens=300), engine=engine)
    assert (est.fixed_bytes_per_sequence, est.total_bytes) == (KIMI_FIXED, KIMI_FIXED + 2_419_200)
    # llama.cpp: r_l and s_l in f32: 36,864 x 4 = 147,456 + 2,097,152 = 2,244,608 x 20 = 44,892,160;
    # MLA cells pad(300, 256) = 512 x 8,064 = 4,128,768.
    engine, _ = make_engine("llama.cpp")
    est = estimate(spec, Workload(tokens=300), engine=engine)
    assert (est.fixed_bytes_per_sequence, est.total_bytes) == (44_892_160, 44_892_160 + 4_128_768)
    # Batch 4 (theoretical): state per sequence, 4 x (43,417,600 + 300 x 8,064) = 183,347,200.
    assert estimate(spec, Workload(tokens=300, batch=4)).total_bytes == 183_347_200


def _kimi(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model_type": "kimi_linear", "dtype": "bfloat16", "num_hidden_layers": 4, "num_attention_heads": 4,
        "kv_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16, "mla_use_nope": True,
        "linear_attn_config": {"full_attn_layers": [4], "kda_layers": [1, 2, 3], "num_heads": 2, "head_dim": 8,
                               "short_conv_kernel_size": 4},
    }  # fmt: skip
    return {**base, **fields}


def test_kimi_toy_by_hand() -> None:
    spec = read_config(_kimi(), name="toy")
    assert [c.kind for c in spec.caches] == [Kind.LINEAR, Kind.LINEAR, Kind.LINEAR, Kind.MLA]
    # KDA: conv 3 x 2 x 8 = 48 channels x 3 = 144 x 2 B = 288 B; state 2 x 8 x 8 = 128 x 4 B = 512 B;
    # 800 B x 3 layers = 2,400. MLA: (32 + 8) x 2 B = 80 B per token.
    est = estimate(spec, Workload(tokens=10))
    assert (est.fixed_bytes_per_sequence, est.per_token_bytes) == (2_400, 80)
    assert spec.warnings == () and spec.notes == ()


def test_kimi_layer_types_win_and_must_agree_with_the_lists() -> None:
    kinds = ["linear_attention", "linear_attention", "linear_attention", "full_attention"]
    assert read_config(_kimi(layer_types=kinds), name="toy").caches == read_config(_kimi(), name="toy").caches
    # layer_types alone (the lists gone): transformers follows it.
    no_lists = _kimi(layer_types=["full_attention", *kinds[:3]])
    no_lists["linear_attn_config"] = {"num_heads": 2, "head_dim": 8, "short_conv_kernel_size": 4}
    assert [c.kind for c in read_config(no_lists, name="toy").caches][:2] == [Kind.MLA, Kind.LINEAR]
    with pytest.raises(ConfigError, match="'layer_types' disagrees with 'linear_attn_config'"):
        read_config(_kimi(layer_types=["full_attention", *kinds[:3]]), name="toy")


def test_kimi_geometry_from_the_top_level_fields_and_defaults() -> None:
    # A re-saved config carries linear_num_heads & co. at the top level; linear_attn_config wins.
    cfg = _kimi(linear_num_heads=99, linear_head_dim=99, linear_conv_kernel_dim=99)
    assert read_config(cfg, name="toy").caches == read_config(_kimi(), name="toy").caches
    # Without linear_attn_config's geometry the top-level fields apply ...
    cfg = _kimi(linear_num_heads=2, linear_head_dim=8, linear_conv_kernel_dim=4)
    cfg["linear_attn_config"] = {"full_attn_layers": [4], "kda_layers": [1, 2, 3]}
    assert read_config(cfg, name="toy").caches == read_config(_kimi(), name="toy").caches
    # ... and without those the class defaults (32 heads x 128, kernel 4), each noted:
    # conv 3 x 32 x 128 x 3 = 36,864 elements; state 32 x 128 x 128 = 524,288.
    cfg = _kimi()
    cfg["linear_attn_config"] = {"full_attn_layers": [4], "kda_layers": [1, 2, 3]}
    spec = read_config(cfg, name="toy")
    kda = spec.caches[0]
    assert isinstance(kda, StateCache) and (kda.conv_elements, kda.recurrent_elements) == (36_864, 524_288)
    for key, value in (("linear_num_heads", 32), ("linear_head_dim", 128), ("linear_conv_kernel_dim", 4)):
        assert f"'{key}' not in config; used the kimi_linear default {value}" in spec.notes


def test_kimi_notes_for_what_vllm_refuses() -> None:
    spec = read_config(_kimi(mla_use_nope=False, q_lora_rank=16), name="toy")
    assert any("'mla_use_nope' is not true: vLLM" in n for n in spec.notes)
    assert any("'q_lora_rank' is set: vLLM" in n for n in spec.notes)


def test_kimi_unknown_linear_attn_config_key_is_named() -> None:
    cfg = _kimi()
    cfg["linear_attn_config"] = {**cfg["linear_attn_config"], "kda_layer_index_base": 1}
    (warning,) = read_config(cfg, name="toy").warnings
    assert "'linear_attn_config.kda_layer_index_base' = 1 is not modelled" in warning


@pytest.mark.parametrize(
    ("lists", "message"),
    [
        (None, "has no 'kda_layers' and 'full_attn_layers': transformers then makes the layers of 0-based index 4, 8"),
        ({"kda_layers": [1, 2, 3]}, r"'linear_attn_config.full_attn_layers' is missing"),
        ({"full_attn_layers": [4], "kda_layers": [0, 1, 2]}, "holds layer 0; layers are numbered 1 to 4"),
        ({"full_attn_layers": [4], "kda_layers": [1, 2, 5]}, "holds layer 5; layers are numbered 1 to 4"),
        ({"full_attn_layers": [3, 4], "kda_layers": [1, 2, 3]}, "names layer 3 twice or in both lists"),
        ({"full_attn_layers": [4], "kda_layers": [1, 2]}, "names layer 3 in neither list"),
        ({"full_attn_layers": "4", "kda_layers": [1, 2, 3]}, "must be a list of layer numbers"),
        ({"full_attn_layers": [4], "kda_layers": [1, 2, 3], "num_heads": 0}, r"'linear_attn_config.num_heads' must"),
    ],
)
def test_kimi_errors_name_the_field(lists: dict[str, Any] | None, message: str) -> None:
    cfg = _kimi()
    cfg["linear_attn_config"] = lists
    with pytest.raises(ConfigError, match=message):
        read_config(cfg, name="toy")


def test_kimi_linear_attn_config_must_be_an_object() -> None:
    with pytest.raises(ConfigError, match="'linear_attn_config' must be an object"):
        read_config(_kimi(linear_attn_config=[1, 2]), name="toy")


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


# Nemotron-3-Nano: 23 Mamba-2 'M', 23 MoE 'E', 6 attention '*'.
# Mamba-2 per layer: width 64 x 64 = 4,096; conv (4,096 + 2 x 8 x 128) = 6,144 channels x 3 =
# 18,432 elements x 2 B = 36,864 B; SSM 64 x 64 x 128 = 524,288 x 4 B (mamba_ssm_cache_dtype float32)
# = 2,097,152 B; 2,134,016 B x 23 = 49,082,368 B per sequence.
NANO_FIXED = 49_082_368
# Attention: 6 layers x 2 x 2 KV heads x 128 x 2 B = 6,144 B per token.
NANO_PER_TOKEN = 6_144


def test_nemotron_3_nano_by_hand() -> None:
    spec = read_config(fixture_config(NANO), name="nano")
    assert spec.layers == 52
    counts = {kind: sum(c.kind is kind for c in spec.caches) for kind in (Kind.MAMBA, Kind.NONE, Kind.FULL)}
    assert counts == {Kind.MAMBA: 23, Kind.NONE: 23, Kind.FULL: 6}
    assert isinstance(spec.caches[1], NoCache)  # 'E'
    state = spec.caches[0]
    assert isinstance(state, StateCache) and state.recurrent_dtype == FP32
    est = estimate(spec, Workload(tokens=4096))
    assert (est.per_token_bytes, est.fixed_bytes_per_sequence) == (NANO_PER_TOKEN, NANO_FIXED)
    # vLLM keeps the SSM state in mamba_ssm_cache_dtype (NemotronHForCausalLMConfig): the same state,
    # in a page its hybrid layout grows to hold it: 1,024 B/token attention pages in steps of 16
    # tokens, 16 x cdiv(2,134,016, 16,384) = 2,096 tokens = 2,146,304 B; 23 mamba layers in groups of
    # 6: 4 groups, 24 slots (1 empty): 24 x 2,146,304 = 51,511,296.
    engine, _ = make_engine("vllm")
    est = estimate(spec, Workload(tokens=4096), engine=engine)
    assert sum(g.layers * sum(n * d.bytes_per_element for n, d in g.state_parts) for g in est.groups
               if not g.padding) == NANO_FIXED  # fmt: skip
    assert est.fixed_bytes_per_sequence == 24 * 2_096 * 1_024 == 51_511_296
    # 'E' letters, mamba_ssm_cache_dtype, the MoE fields, sliding_window null: all read, no warning.
    assert spec.warnings == () and spec.notes == ()


@pytest.mark.parametrize(
    ("preset", "fixture"),
    [("kimi-linear-48b-a3b", KIMI), ("granite-4.0-h-micro", GRANITE), ("nemotron-3-nano-30b-a3b", NANO)],
)
def test_preset_agrees_with_real_config(preset: str, fixture: str) -> None:
    from_preset = read_config(copy.deepcopy(load_presets()[preset].config), name=preset)
    from_file = read_config(fixture_config(fixture), name=preset)
    assert from_preset.caches == from_file.caches
    assert (from_preset.layers, from_preset.query_heads) == (from_file.layers, from_file.query_heads)
    assert from_preset.warnings == () and from_preset.notes == ()
    # The trimmed Granite fixture names no dtype; the preset says bfloat16 (IBM's BF16 checkpoints).
    assert from_preset.dtype == BF16 and from_file.dtype in (BF16, None)


@pytest.mark.parametrize(("fixture", "model_type"), [(KIMI, "kimi_linear"), (GRANITE, "granitemoehybrid")])
def test_config_resaved_by_transformers_reads_the_same(fixture: str, model_type: str) -> None:
    # transformers 5.24 writes an explicit layer_types ("linear_attention" / "full_attention") and
    # its derived fields (linear_head_dim, qk_head_dim, mlp_layer_types, ...).
    pytest.importorskip("transformers", reason="transformers is not installed")
    import json

    from transformers import AutoConfig

    raw = fixture_config(fixture)
    fields = {k: v for k, v in raw.items() if k not in ("model_type", "auto_map", "architectures")}
    saved = json.loads(AutoConfig.for_model(model_type, **fields).to_json_string())
    assert any(t in ("linear_attention", "full_attention") for t in saved["layer_types"])
    from_saved, from_file = read_config(saved, name="saved"), read_config(raw, name="file")
    assert from_saved.caches == from_file.caches
    assert from_saved.warnings == ()


def _probe(run_cli: Any, fixture: str, *options: str) -> dict[str, Any]:
    pytest.importorskip("torch", reason="the probe extra (torch) is not installed")
    pytest.importorskip("transformers", reason="the probe extra (transformers) is not installed")
    result = run_cli("probe", str(FIXTURES / fixture), "--tokens", "300", "--device", "cpu", "--json", *options)
    assert result.exit_code == 0, result.stderr + result.stdout
    data: dict[str, Any] = result.json()
    assert data["match"] is True
    return data


def _by_kind(data: dict[str, Any]) -> dict[str, tuple[int, int, int]]:
    return {k["kind"]: (k["layers"], k["measured_bytes"], k["estimated_bytes"]) for k in data["kinds"]}


def test_probe_kimi_linear_matches_byte_for_byte(run_cli: Any) -> None:
    # transformers runs KDA with its torch fallbacks (no fla kernels needed on CPU).
    data = _probe(run_cli, KIMI)
    # KDA: 20 x 2,195,456 (whole conv kernel, float32 state) = 43,909,120;
    # MLA: 7 x 300 x (512 + 64) x 2 B = 2,419,200.
    assert data["measured_bytes"] == data["estimated_bytes"] == 43_909_120 + 2_419_200
    assert _by_kind(data) == {
        "linear_attention": (20, 43_909_120, 43_909_120),
        "mla": (7, 2_419_200, 2_419_200),
    }


def test_probe_granite_matches_byte_for_byte(run_cli: Any) -> None:
    # The trimmed fixture names no dtype: run it in bf16, the dtype of IBM's checkpoints.
    data = _probe(run_cli, GRANITE, "--kv-dtype", "bf16")
    # Mamba-2: 36 x 2,131,968 = 76,750,848; attention 4 x 300 x 2 x 8 x 64 x 2 B = 2,457,600.
    assert data["measured_bytes"] == data["estimated_bytes"] == 76_750_848 + 2_457_600
    assert _by_kind(data) == {"mamba": (36, 76_750_848, 76_750_848), "full_attention": (4, 2_457_600, 2_457_600)}


def test_probe_nemotron_3_nano_matches_byte_for_byte(run_cli: Any) -> None:
    data = _probe(run_cli, NANO)
    # Mamba-2 (transformers): conv 6,144 x 4 x 2 B = 49,152 + 2,097,152 = 2,146,304 x 23 = 49,364,992;
    # attention 6 x 300 x 2 x 2 x 128 x 2 B = 1,843,200; MoE blocks nothing.
    assert data["measured_bytes"] == data["estimated_bytes"] == 49_364_992 + 1_843_200
    assert _by_kind(data) == {
        "mamba": (23, 49_364_992, 49_364_992),
        "no_cache": (23, 0, 0),
        "full_attention": (6, 1_843_200, 1_843_200),
    }
