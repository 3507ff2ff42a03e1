"""Qwen3.5 (kvcalc.inputs.hf.families.qwen3_5): Gated DeltaNet + full attention, read from real configs.

Sources: the docstring of tests/helpers/mimo_qwen_families.py (shared with the module's sibling)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvcalc.calc.estimate import Workload
from kvcalc.dtypes import BF16
from kvcalc.engines import make_engine
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.spec import Kind, StateCache
from tests.conftest import FIXTURES, fixture_config
from tests.helpers.mimo_qwen_families import PRESETS, _probe
from tests.helpers.theoretical import estimate

QWEN = "Qwen3.5-0.8B.json"


# Qwen3.5-0.8B by hand (bf16):
#   full attention: 6 layers (3, 7, ..., 23) x 2 KV heads x (256 + 256) x 2 B = 12,288 B per token.
#   Gated DeltaNet: conv over 2 x 16 x 128 + 16 x 128 = 6,144 channels, kernel - 1 = 3 kept:
#     18,432 elements x 2 B = 36,864 B; recurrent 16 x 128 x 128 = 262,144 elements x 4 B
#     (mamba_ssm_dtype float32) = 1,048,576 B; 1,085,440 B per layer, x 18 = 19,537,920 B.
QWEN_PER_TOKEN = 12_288


QWEN_FIXED = 18 * (36_864 + 1_048_576)


def test_qwen35_real_config_reads_cleanly() -> None:
    spec = read_config(fixture_config(QWEN), name="qwen3.5-0.8b")
    # attn_output_gate, full_attention_interval (set aside when layer_types is given) and
    # mtp_num_hidden_layers are read: no guard warning, no default applied.
    assert spec.warnings == () and spec.notes == ()
    assert spec.layers == 24 and spec.query_heads == 8 and spec.dtype == BF16
    assert [i for i, c in enumerate(spec.caches) if c.kind is Kind.FULL] == [3, 7, 11, 15, 19, 23]
    state = spec.caches[0]
    assert isinstance(state, StateCache) and state.family == "linear_attention"
    assert (state.conv_channels, state.conv_kernel, state.recurrent_elements) == (6_144, 4, 262_144)
    assert state.recurrent_dtype is not None and state.recurrent_dtype.name == "fp32"
    est = estimate(spec, Workload(tokens=4096))
    assert est.per_token_bytes == QWEN_PER_TOKEN
    assert est.fixed_bytes_per_sequence == QWEN_FIXED == 19_537_920
    assert est.total_bytes == 4096 * 12_288 + 19_537_920 == 69_869_568


def test_qwen35_engines_by_hand() -> None:
    spec = read_config(fixture_config(QWEN), name="q")
    # transformers: the conv state spans the whole kernel (6,144 x 4 x 2 B = 49,152) and the
    # recurrent state is float32: 18 x (49,152 + 1,048,576) = 19,759,104.
    hf, _ = make_engine("transformers")
    assert estimate(spec, Workload(tokens=300), engine=hf).fixed_bytes_per_sequence == 19_759_104
    # vLLM honours mamba_ssm_dtype for Qwen3.5: the theoretical state, in a page its hybrid layout grows
    # to hold it: 2,048 B/token attention pages in steps of 16 tokens, 16 x cdiv(1,085,440, 32,768) =
    # 544 tokens = 1,114,112 B (18 linear layers in 3 groups of 6, none empty): 18 x 1,114,112.
    vllm, _ = make_engine("vllm")
    est = estimate(spec, Workload(tokens=300), engine=vllm)
    assert sum(g.layers * sum(n * d.bytes_per_element for n, d in g.state_parts) for g in est.groups) == QWEN_FIXED
    assert est.fixed_bytes_per_sequence == 18 * 544 * 2_048 == 20_054_016
    # llama.cpp keeps both states in f32: 18 x (18,432 + 262,144) x 4 = 20,201,472.
    cpp, _ = make_engine("llamacpp")
    assert estimate(spec, Workload(tokens=300), engine=cpp).fixed_bytes_per_sequence == 20_201_472


def test_qwen35_interval_without_layer_types() -> None:
    text = dict(fixture_config(QWEN)["text_config"])
    del text["layer_types"]
    assert read_config(text, name="q").caches == read_config(fixture_config(QWEN), name="q").caches
    # full_attention_interval 2: layers 1, 3, 5, ... full.
    spec = read_config(text | {"full_attention_interval": 2}, name="q")
    assert [c.kind for c in spec.caches[:4]] == [Kind.LINEAR, Kind.FULL, Kind.LINEAR, Kind.FULL]
    # Neither: Qwen3_5TextConfig's 4, noted.
    del text["full_attention_interval"]
    spec = read_config(text, name="q")
    assert spec.caches == read_config(fixture_config(QWEN), name="q").caches
    assert any("'full_attention_interval' not in config; used the qwen3_5_text default 4" in n for n in spec.notes)


def test_qwen35_errors_name_the_field() -> None:
    text = dict(fixture_config(QWEN)["text_config"])
    with pytest.raises(ConfigError, match="unknown layer type 'sliding_attention'"):
        read_config(text | {"layer_types": ["sliding_attention"] * 24}, name="q")
    with pytest.raises(ConfigError, match=r"'text_config\.layer_types' lists 2 layers but the model has 24"):
        read_config({"model_type": "qwen3_5", "text_config": text | {"layer_types": ["full_attention"] * 2}}, name="q")
    with pytest.raises(ConfigError, match="'linear_num_value_heads' must be positive"):
        read_config(text | {"linear_num_value_heads": 0}, name="q")


def test_qwen35_preset_agrees_with_real_config() -> None:
    from_preset = read_config(copy.deepcopy(PRESETS["qwen3.5-0.8b"].config), name="p")
    from_file = read_config(fixture_config(QWEN), name="p")
    assert from_preset.caches == from_file.caches
    assert (from_preset.layers, from_preset.query_heads, from_preset.dtype) == (
        from_file.layers,
        from_file.query_heads,
        from_file.dtype,
    )
    assert from_preset.warnings == ()


def test_probe_qwen35_real_config_matches_byte_for_byte(run_cli: Any) -> None:
    data = _probe(run_cli, FIXTURES / QWEN)
    assert data["match"] is True
    # 18 x 1,097,728 (whole-kernel conv + fp32 recurrent) = 19,759,104 + 6 x 300 x 2,048 = 3,686,400.
    assert data["measured_bytes"] == data["estimated_bytes"] == 19_759_104 + 3_686_400 == 23_445_504


def test_qwen35_moe_real_config_reads_cleanly() -> None:
    # Qwen3.5-35B-A3B's layout (a fine-tune's file, re-saved by transformers 5.13): 40 layers, 10 full.
    #   full: 10 x 2 KV heads x (256 + 256) x 2 B = 20,480 B per token.
    #   Gated DeltaNet: conv over 2 x 16 x 128 + 32 x 128 = 8,192 channels x 3 x 2 B = 49,152 B;
    #   recurrent 32 x 128 x 128 = 524,288 x 4 B = 2,097,152 B; x 30 layers = 64,389,120 B.
    spec = read_config(fixture_config("Ornith-1.0-35B-Qwen3.5-MoE.json"), name="qwen3.5-moe")
    assert spec.warnings == () and spec.notes == ()
    assert spec.model_type == "qwen3_5_moe_text" and spec.layers == 40 and spec.query_heads == 16
    est = estimate(spec, Workload(tokens=4096))
    assert est.per_token_bytes == 20_480
    assert est.fixed_bytes_per_sequence == 30 * (49_152 + 2_097_152) == 64_389_120
