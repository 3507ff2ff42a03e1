"""Kimi-Linear (KDA + MLA): each number derived by hand next to it.

Sources (see the family module for the full citations):
- transformers 5.24 models/kimi_linear (KimiLinearConfig.__post_init__: layer_types, else the 1-based
  linear_attn_config lists; KimiLinearDeltaAttention: conv over 3 x heads x head_dim channels, a
  float32 head_dim x head_dim state per head), cache_utils.py (LinearAttentionLayer keeps the whole
  conv kernel, the recurrent state float32).
- vLLM mamba_utils.py @ 2afe1e85 (kda_state_shape / kda_state_dtype: convs of kernel - 1 in the model
  dtype, recurrent float32), kimi_linear.py @ 8744bb09, transformers_utils/configs/kimi_linear.py
  @ 6b065994 (is_kda_layer: 1-based kda_layers).
- Real configs: tests/fixtures (see fixtures/SOURCES.md).
"""

from __future__ import annotations

from typing import Any

import pytest

from kvcalc.calc.estimate import Workload
from kvcalc.dtypes import BF16, FP32
from kvcalc.engines import make_engine
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.spec import Kind, LatentCache, StateCache
from tests.conftest import fixture_config
from tests.helpers.kimi_granite_families import KIMI, measured_by_kind, probe_fixture
from tests.helpers.theoretical import estimate

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


def test_probe_kimi_linear_matches_byte_for_byte(run_cli: Any) -> None:
    # transformers runs KDA with its torch fallbacks (no fla kernels needed on CPU).
    data = probe_fixture(run_cli, KIMI)
    # KDA: 20 x 2,195,456 (whole conv kernel, float32 state) = 43,909,120;
    # MLA: 7 x 300 x (512 + 64) x 2 B = 2,419,200.
    assert data["measured_bytes"] == data["estimated_bytes"] == 43_909_120 + 2_419_200
    assert measured_by_kind(data) == {
        "linear_attention": (20, 43_909_120, 43_909_120),
        "mla": (7, 2_419_200, 2_419_200),
    }
