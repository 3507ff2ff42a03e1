"""MiMo-V2-Flash / MiMo-V2.5 (kvcalc.inputs.hf.families.mimo_v2_flash): sliding and full layers with their
own KV heads, K 192 / V 128, read from real configs.

Sources: the docstring of tests/helpers/mimo_qwen_families.py (shared with the module's sibling)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from kvcalc.calc.estimate import Workload
from kvcalc.dtypes import BF16
from kvcalc.engines import make_engine
from kvcalc.engines.vllm.capacity import vllm_plan
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.spec import AttentionCache, Kind
from tests.conftest import fixture_config
from tests.helpers.mimo_qwen_families import PRESETS, _probe
from tests.helpers.theoretical import estimate

PRO = "MiMo-V2.5-Pro.json"


FLASH_FULL_LAYERS = [0, 5, 11, 17, 23, 29, 35, 41, 47]


def flash(**change: Any) -> dict[str, Any]:
    """MiMo-V2-Flash's cache fields (the mimo-v2-flash preset), with ``change`` applied (None drops)."""
    config = copy.deepcopy(PRESETS["mimo-v2-flash"].config) | change
    return {k: v for k, v in config.items() if v is not None}


# MiMo-V2-Flash by hand (bf16, 2 B):
#   full layer: 4 KV heads x (K 192 + V 128) x 2 B = 2,560 B per token; 9 layers: 23,040.
#   sliding layer: 8 KV heads x (192 + 128) x 2 B = 5,120 B per token; 39 layers: 199,680.
#   Every layer, every token: 23,040 + 199,680 = 222,720 B per token (before any window).
#   Window: sliding_window_size 128 previous tokens + the query = 129 (MiMoV2FlashConfig).
FULL_ROW, SLIDING_ROW = 2_560, 5_120


def test_flash_by_hand() -> None:
    spec = read_config(flash(), name="mimo-v2-flash")
    assert spec.layers == 48 and spec.query_heads == 64 and spec.dtype == BF16
    assert [i for i, c in enumerate(spec.caches) if c.kind is Kind.FULL] == FLASH_FULL_LAYERS
    assert sum(c.kind is Kind.SLIDING for c in spec.caches) == 39
    assert spec.caches[0] == AttentionCache(4, 192, 128)
    assert spec.caches[1] == AttentionCache(8, 192, 128, window=129)
    # No chunked layer: attention_chunk_size (128 in the real files) is not Llama 4's chunking.
    assert not any(c.kind is Kind.CHUNKED for c in spec.caches)
    assert spec.warnings == ()
    est = estimate(spec, Workload(tokens=4096))
    assert est.per_token_bytes == 9 * FULL_ROW + 39 * SLIDING_ROW == 222_720
    # 9 x 4,096 x 2,560 = 94,371,840 + 39 x 129 x 5,120 = 25,758,720.
    assert est.total_bytes == 94_371_840 + 25_758_720 == 120_130_560
    assert est.fixed_bytes_per_sequence == 0


@pytest.mark.parametrize(
    ("engine_name", "tokens", "total"),
    [
        # transformers: DynamicSlidingWindowLayer keeps W - 1 = 128 tokens: 39 x 128 x 5,120 = 25,559,040.
        ("transformers", 4096, 94_371_840 + 25_559_040),
        # SGLang, page 1: as theoretical.
        ("sglang", 4096, 120_130_560),
        # vLLM, 16-token blocks, max_num_batched_tokens 8192: a sliding layer reserves
        # cdiv(min(128 + 8192, T), 16) + 1 blocks, never more than cdiv(T, 16).
        #   vLLM's groups (kv_cache_utils.py): pages of 16 x 2,560 (full) and 16 x 5,120 (sliding) unify
        #   at 81,920 B, so full layers take 32-token blocks; 39 >= 1.5 x 9 sliding layers: groups of 9,
        #   the sliding kind in cdiv(39, 9) = 5 groups, 45 slots of which 6 empty, each holding blocks
        #   as a sliding layer.
        #   T = 4,096: the window reserve (257 blocks) exceeds the 256 of the whole sequence: full
        #   9 x 4,096 x 2,560 = 94,371,840 (128 blocks of 32), sliding 45 x 4,096 x 5,120 = 943,718,400.
        ("vllm", 4096, 94_371_840 + 943_718_400),
        #   T = 32,768: full 9 x 32,768 x 2,560 = 754,974,720; sliding cdiv(8,320, 16) + 1 = 521
        #   blocks = 8,336 tokens: 45 x 8,336 x 5,120 = 1,920,614,400 (one batch in flight: up to 0.25).
        ("vllm@0.25", 32768, 754_974_720 + 1_920_614_400),
        # llama.cpp: 4,096 cells in full layers; sliding pad(min(4,096, 129 + 512), 256) = 768
        # cells: 39 x 768 x 5,120 = 153,354,240.
        ("llamacpp", 4096, 94_371_840 + 153_354_240),
    ],
)
def test_flash_engines_by_hand(engine_name: str, tokens: int, total: int) -> None:
    engine, _ = make_engine(engine_name)
    est = estimate(read_config(flash(), name="m"), Workload(tokens=tokens), engine=engine)
    assert est.total_bytes == total


def test_flash_vllm_groups_pages_of_two_sizes() -> None:
    # Pages of 16 tokens: full 16 x 2,560 = 40,960 B, sliding 16 x 5,120 = 81,920 B.
    # unify_kv_cache_spec_page_size: full blocks grow to 32 tokens (81,920 B). Groups of
    # min(9, 39) = 9 layers (39 >= 1.5 x 9): 1 full + cdiv(39, 9) = 5 sliding groups, 6 empty slots.
    engine, _ = make_engine("vllm")
    plan = vllm_plan(read_config(flash(), name="m"), Workload(tokens=4096), engine, 81_920 * 9 * 1000)
    assert (plan.page_bytes, plan.group_size, plan.num_blocks) == (81_920, 9, 1000)
    assert [(g.layers, g.groups, g.block_size) for g in plan.kinds] == [(9, 1, 32), (39, 5, 16)]
    # Per request of 4,096 tokens: full cdiv(4,096, 32) = 128 blocks x 1 group; sliding
    # cdiv(min(8,320, 4,096), 16) + 1 = 257 x 5 groups = 1,285; 1,413 in all.
    assert plan.blocks_per_request(4096) == 128 + 1_285 == 1_413
    # "GPU KV cache size": 1,000 // 6 groups x 16 tokens = 2,656.
    assert plan.cache_tokens == 2_656


def test_mimo_v25_pro_real_config() -> None:
    spec = read_config(fixture_config(PRO), name="mimo-v2.5-pro")
    # hybrid_layer_pattern: full attention at 0, 7, 15, 23, 31, 39, 47, 55, 62, 69 (10 of 70).
    full = [i for i, c in enumerate(spec.caches) if c.kind is Kind.FULL]
    assert full == [0, 7, 15, 23, 31, 39, 47, 55, 62, 69]
    assert spec.layers == 70 and spec.query_heads == 128
    assert set(spec.caches) == {AttentionCache(8, 192, 128), AttentionCache(8, 192, 128, window=129)}
    # quantization_config.ignored_layers names weights; attention_chunk_size, the sink biases,
    # attention_value_scale and attention_projection_layout size nothing: no warning.
    assert spec.warnings == ()
    # Every layer 8 x (192 + 128) x 2 B = 5,120 B per token: 70 x 5,120 = 358,400.
    # T = 4,096: 10 x 4,096 x 5,120 = 209,715,200 + 60 x 129 x 5,120 = 39,628,800.
    est = estimate(spec, Workload(tokens=4096))
    assert est.per_token_bytes == 358_400
    assert est.total_bytes == 209_715_200 + 39_628_800 == 249_344_000


def test_attention_chunk_size_changes_nothing() -> None:
    # Before this family was modelled, a non-null attention_chunk_size sent MiMo configs down
    # Llama 4's chunked rule and stopped with an error about no_rope_layers.
    base = read_config(flash(attention_chunk_size=None), name="m")
    assert read_config(flash(attention_chunk_size=8192), name="m").caches == base.caches


def test_window_without_sliding_window_size_is_sliding_window() -> None:
    # MiMoV2FlashConfig: sliding_window as given when there is no sliding_window_size.
    spec = read_config(flash(sliding_window_size=None, sliding_window=200), name="m")
    assert spec.caches[1] == AttentionCache(8, 192, 128, window=200)
    # Neither: the class default, 129, noted.
    spec = read_config(flash(sliding_window_size=None, sliding_window=None), name="m")
    sliding = spec.caches[1]
    assert isinstance(sliding, AttentionCache) and sliding.window == 129
    assert any("'sliding_window' not in config; used the mimo_v2_flash default 129" in n for n in spec.notes)


def test_transformers_style_config() -> None:
    # A config as transformers 5.24 writes it: layer_types, no swa_* fields, no hybrid_layer_pattern.
    # Sliding layers: twice num_key_value_heads (2 x 4 = 8), the full layers' dims, noted.
    kinds = ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]
    config = {
        "model_type": "mimo_v2_flash", "torch_dtype": "bfloat16", "num_hidden_layers": 4,
        "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 192, "v_head_dim": 128,
        "sliding_window": 129, "layer_types": kinds,
    }  # fmt: skip
    spec = read_config(config, name="m")
    assert list(spec.caches) == [
        AttentionCache(4, 192, 128),
        AttentionCache(8, 192, 128, window=129),
        AttentionCache(8, 192, 128, window=129),
        AttentionCache(4, 192, 128),
    ]
    assert any("twice num_key_value_heads, 8" in n for n in spec.notes)
    assert spec.warnings == ()


def test_defaults_are_noted() -> None:
    # Only the model type: MiMoV2FlashConfig's defaults (48 layers, 64 heads, 4 KV heads, K 192,
    # V 128, window 129, layer 0 and every sixth full), each noted.
    spec = read_config({"model_type": "mimo_v2_flash"}, name="m")
    assert [i for i, c in enumerate(spec.caches) if c.kind is Kind.FULL] == FLASH_FULL_LAYERS
    assert spec.caches[0] == AttentionCache(4, 192, 128)
    assert spec.caches[1] == AttentionCache(8, 192, 128, window=129)
    for field in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "v_head_dim"):
        assert any(f"'{field}' not in config" in n for n in spec.notes), field
    assert any("every sixth layer" in n for n in spec.notes)


def test_where_transformers_would_differ_it_is_noted() -> None:
    # swa_num_key_value_heads 16 (not 2 x 4) and a pattern with full attention at layer 1: kvcalc
    # follows the file (vLLM, SGLang, llama.cpp) and says transformers would not.
    pattern = [0] + [1] * 47
    spec = read_config(flash(swa_num_key_value_heads=16, hybrid_layer_pattern=pattern), name="m")
    assert spec.caches[1] == AttentionCache(16, 192, 128, window=129)
    assert [c.kind for c in spec.caches].count(Kind.FULL) == 1
    assert any("transformers 5.24 builds 8 heads of 192 / 128" in n for n in spec.notes)
    assert any("ignores the field" in n for n in spec.notes)
    # The MiMo-V2.5 file (model type mimo_v2, remote code only) says nothing about transformers.
    pro = read_config(fixture_config(PRO), name="pro")
    assert not any("transformers 5.24" in n for n in pro.notes)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hybrid_layer_pattern": [0, 1]}, "'hybrid_layer_pattern' lists 2 layers but the model has 48"),
        ({"hybrid_layer_pattern": [2] * 48}, r"'hybrid_layer_pattern' must hold only 0 \(full\) and 1"),
        ({"hybrid_layer_pattern": "0,1"}, "'hybrid_layer_pattern' must be a list of integers"),
        ({"layer_types": ["full_attention"] * 48}, "'layer_types' and 'hybrid_layer_pattern' disagree"),
        ({"layer_types": ["chunked_attention"] * 48}, "unknown layer type 'chunked_attention'"),
        ({"swa_num_key_value_heads": 5}, r"'swa_num_key_value_heads' \(5\) must divide the 64"),
        ({"num_key_value_heads": 3}, r"'num_key_value_heads' \(3\) must divide the 64"),
        ({"swa_head_dim": 0}, "'swa_head_dim' must be positive"),
        ({"sliding_window_size": -1}, "'sliding_window_size' must be positive"),
        ({"v_head_dim": "128"}, "'v_head_dim' must be an integer"),
    ],
)
def test_errors_name_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        read_config(flash(**change), name="m")


def test_mimo_presets_agree_with_real_config() -> None:
    from_preset = read_config(copy.deepcopy(PRESETS["mimo-v2.5-pro"].config), name="p")
    from_file = read_config(fixture_config(PRO), name="p")
    assert from_preset.caches == from_file.caches
    assert (from_preset.layers, from_preset.query_heads, from_preset.dtype) == (
        from_file.layers,
        from_file.query_heads,
        from_file.dtype,
    )
    assert from_preset.warnings == ()


def test_probe_mimo_v2_flash_matches_byte_for_byte(run_cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(flash() | {"architectures": ["MiMoV2FlashForCausalLM"]}))
    data = _probe(run_cli, path)
    assert data["match"] is True
    # transformers: full 9 x 300 x 2,560 = 6,912,000; sliding 39 x 128 x 5,120 = 25,559,040.
    assert data["measured_bytes"] == data["estimated_bytes"] == 6_912_000 + 25_559_040 == 32_471_040
    by_kind = {k["kind"]: (k["layers"], k["measured_bytes"]) for k in data["kinds"]}
    assert by_kind == {"full_attention": (9, 6_912_000), "sliding_attention": (39, 25_559_040)}
