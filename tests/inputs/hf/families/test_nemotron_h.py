"""Nemotron-H (kvcalc.inputs.hf.families.nemotron_h): the hybrid pattern of Mamba-2, attention and MLP/MoE
layers (8B, 56B), read from real configs.

Sources: the docstring of tests/helpers/nemotron_families.py (shared with the module's sibling)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from kvcalc.calc.estimate import Workload
from kvcalc.dtypes import FP32
from kvcalc.engines import make_engine
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.inputs.presets import load_presets
from kvcalc.spec import AttentionCache, Kind, NoCache, StateCache
from tests.conftest import FIXTURES, fixture_config
from tests.helpers.kimi_granite_families import NANO, measured_by_kind, probe_fixture
from tests.helpers.mimo_qwen_families import PRESETS, _probe
from tests.helpers.nemotron_families import SUPER_49B, _count
from tests.helpers.theoretical import estimate

# Nemotron-H-56B by hand (bf16; the nemotron-h-56b preset): hybrid_override_pattern of 118 letters,
# 54 'M' (Mamba-2), 10 '*' (attention), 54 '-' (MLP).
#   attention: 10 layers x 2 x 8 KV heads x 128 x 2 B = 40,960 B per token.
#   Mamba-2: d_inner 256 heads x 64 = 16,384; conv over 16,384 + 2 x 8 groups x 256 = 20,480
#     channels, kernel - 1 = 3 kept: 61,440 x 2 B = 122,880 B; SSM 16,384 x 256 = 4,194,304
#     elements x 4 B (mamba_ssm_cache_dtype's float32 default) = 16,777,216 B; 16,900,096 B a
#     layer, x 54 = 912,605,184 B per sequence.
NEMOTRON_56B_FIXED = 54 * (61_440 * 2 + 4_194_304 * 4)


def test_nemotron_h_56b_by_hand() -> None:
    spec = read_config(copy.deepcopy(PRESETS["nemotron-h-56b"].config), name="nemotron-h-56b")
    kinds = [c.kind for c in spec.caches]
    assert spec.layers == 118
    assert (kinds.count(Kind.MAMBA), kinds.count(Kind.FULL), kinds.count(Kind.NONE)) == (54, 10, 54)
    assert spec.warnings == () and spec.notes == ()
    est = estimate(spec, Workload(tokens=8192))
    assert est.per_token_bytes == 40_960
    assert est.fixed_bytes_per_sequence == NEMOTRON_56B_FIXED == 912_605_184
    assert est.total_bytes == 8192 * 40_960 + 912_605_184 == 1_248_149_504
    # llama.cpp keeps both states in f32: 54 x (61,440 + 4,194,304) x 4 = 919,240,704.
    cpp, _ = make_engine("llamacpp")
    assert estimate(spec, Workload(tokens=8192), engine=cpp).fixed_bytes_per_sequence == 919_240_704


def test_probe_nemotron_h_56b_matches_byte_for_byte(run_cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(PRESETS["nemotron-h-56b"].config | {"architectures": ["NemotronHForCausalLM"]}))
    data = _probe(run_cli, path)
    assert data["match"] is True
    # transformers: the conv state spans the whole kernel (20,480 x 4 x 2 B = 163,840) and the SSM
    # state is float32: 54 x (163,840 + 16,777,216) = 914,817,024; attention 10 x 300 x 4,096.
    assert data["measured_bytes"] == data["estimated_bytes"] == 914_817_024 + 12_288_000 == 927_105_024


NEMOTRON_H = "Nemotron-H-8B-Base-8K.json"


def test_no_cache_layer_is_zero_bytes_under_every_engine() -> None:
    spec = read_config(fixture_config(NEMOTRON_H), name="nemotron-h")
    for name in ("theoretical", "transformers", "vllm", "sglang", "llama.cpp"):
        engine, _ = make_engine(name)
        est = estimate(spec, Workload(tokens=4096, batch=3), engine=engine)
        none = [g for g in est.groups if g.kind == Kind.NONE]
        assert len(none) == 1 and none[0].layers == 24, name
        assert none[0].bytes == 0 and none[0].bytes_per_token == 0, name
    layer = NoCache()
    assert layer.kind.short == "none"
    assert layer.elements_per_token == 0 and not layer.is_state and not layer.caches_tokens
    assert "nothing cached, 0 bytes" in layer.explain()


def test_nemotron_h_8b_by_hand() -> None:
    # hybrid_override_pattern "M-M-M-M*-..." (52 letters): 24 'M' Mamba-2, 4 '*' attention, 24 '-' MLP.
    # Attention: 4 layers x 2 (K and V) x 8 KV heads x 128 (attention_head_dim) x 2 B (bf16)
    #   = 16,384 B per token.
    # Mamba-2 (NemotronHMamba2Mixer): intermediate = mamba_num_heads x mamba_head_dim = 128 x 64 = 8,192;
    #   conv_dim = 8,192 + 2 x n_groups 8 x ssm_state_size 128 = 10,240 channels, kernel - 1 = 3 kept:
    #   30,720 elements; SSM state 128 x 64 x 128 = 1,048,576 elements;
    #   the conv in bf16, the SSM state in mamba_ssm_cache_dtype, float32 when absent (NemotronHConfig):
    #   30,720 x 2 B + 1,048,576 x 4 B = 4,255,744 B per layer; x 24 = 102,137,856 B per sequence.
    spec = read_config(fixture_config(NEMOTRON_H), name="nemotron-h")
    assert spec.layers == 52 and len(spec.caches) == 52
    assert _count([c.kind for c in spec.caches]) == {"mamba": 24, "full_attention": 4, "no_cache": 24}
    assert spec.caches[0].kind is Kind.MAMBA and spec.caches[1].kind is Kind.NONE
    assert spec.caches[7].kind is Kind.FULL  # "M-M-M-M*": the first '*' is layer 7
    state = spec.caches[0]
    assert isinstance(state, StateCache)
    assert (state.conv_channels, state.conv_kernel) == (10_240, 4)
    assert (state.conv_elements, state.recurrent_elements) == (30_720, 1_048_576)
    attention = spec.caches[7]
    assert isinstance(attention, AttentionCache)
    assert (attention.kv_heads, attention.k_head_dim, attention.v_head_dim) == (8, 128, 128)
    est = estimate(spec, Workload(tokens=8192))
    assert est.per_token_bytes == 16_384
    assert est.fixed_bytes_per_sequence == 102_137_856
    assert est.total_bytes == 8192 * 16_384 + 102_137_856 == 236_355_584
    assert spec.warnings == ()
    assert state.recurrent_dtype is not None and state.recurrent_dtype.name == "fp32"
    assert spec.notes == ()  # vLLM's float32 SSM state is modelled now, not noted


def test_nemotron_h_transformers_engine_by_hand() -> None:
    # transformers' LinearAttentionLayer keeps the whole kernel (4) of conv state in the model dtype
    # and the SSM state in float32: 10,240 x 4 x 2 + 1,048,576 x 4 = 4,276,224 B per Mamba layer.
    spec = read_config(fixture_config(NEMOTRON_H), name="nemotron-h")
    engine, _ = make_engine("transformers")
    est = estimate(spec, Workload(tokens=300), engine=engine)
    assert est.fixed_bytes_per_sequence == 24 * 4_276_224 == 102_629_376
    assert est.total_bytes == 102_629_376 + 300 * 16_384


def test_nemotron_h_explicit_layer_list_and_defaults() -> None:
    # transformers 5.24 saves the layers as layers_block_type (alias layer_types), Mamba-2 named
    # "linear_attention" (legacy "mamba"); the list wins over num_hidden_layers.
    cfg: dict[str, Any] = {
        "model_type": "nemotron_h", "torch_dtype": "bfloat16", "hidden_size": 1024, "num_hidden_layers": 99,
        "layers_block_type": ["linear_attention", "moe", "full_attention", "mlp", "mamba", "attention"],
    }  # fmt: skip
    spec = read_config(cfg, name="nh")
    assert spec.layers == 6
    assert [c.kind for c in spec.caches] == [Kind.MAMBA, Kind.NONE, Kind.FULL, Kind.NONE, Kind.MAMBA, Kind.FULL]
    # Every NemotronHConfig default is applied and noted: 32 heads, 8 KV heads, head_dim 128,
    # 128 Mamba heads x 64, 8 groups, state 128, kernel 4.
    notes = " ".join(spec.notes)
    for key in ("num_attention_heads", "num_key_value_heads", "head_dim", "mamba_num_heads", "mamba_n_groups"):
        assert f"'{key}' not in config" in notes
    assert "num_hidden_layers' (99) differs from the 6 layers" in notes
    attention = spec.caches[2]
    assert isinstance(attention, AttentionCache) and (attention.kv_heads, attention.k_head_dim) == (8, 128)
    state = spec.caches[0]
    assert isinstance(state, StateCache) and state.recurrent_elements == 128 * 64 * 128


def test_nemotron_h_ssm_cache_dtype_is_read() -> None:
    cfg = {**fixture_config(NEMOTRON_H), "mamba_ssm_cache_dtype": "float16"}
    spec = read_config(cfg, name="nh")
    assert spec.warnings == ()  # read, so not flagged
    assert spec.notes == ()
    state = spec.caches[0]
    assert isinstance(state, StateCache) and state.recurrent_dtype is not None
    assert state.recurrent_dtype.name == "fp16"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hybrid_override_pattern": "M-X*"}, "'hybrid_override_pattern' holds 'X'"),
        ({"hybrid_override_pattern": None}, "'hybrid_override_pattern' is missing"),
        ({"layers_block_type": ["mamba2"]}, "'layers_block_type' holds unknown layer type 'mamba2'"),
        ({"mamba_head_dim": 0}, "'mamba_head_dim' must be positive"),
    ],
)
def test_nemotron_h_errors_name_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        read_config({**fixture_config(NEMOTRON_H), **change}, name="nh")


@pytest.mark.parametrize(
    ("preset", "fixture"), [("nemotron-h-8b", NEMOTRON_H), ("llama-3.3-nemotron-super-49b", SUPER_49B)]
)
def test_preset_agrees_with_real_config(preset: str, fixture: str) -> None:
    presets = load_presets()
    from_preset = read_config(copy.deepcopy(presets[preset].config), name=preset)
    from_file = read_config(fixture_config(fixture), name=preset)
    assert from_preset.caches == from_file.caches
    assert (from_preset.layers, from_preset.query_heads, from_preset.dtype) == (
        from_file.layers,
        from_file.query_heads,
        from_file.dtype,
    )
    assert from_preset.warnings == ()


def test_probe_nemotron_h_matches_byte_for_byte(run_cli) -> None:
    pytest.importorskip("torch", reason="the probe extra (torch) is not installed")
    pytest.importorskip("transformers", reason="the probe extra (transformers) is not installed")
    result = run_cli("probe", str(FIXTURES / NEMOTRON_H), "--tokens", "300", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.stderr + result.stdout
    data = result.json()
    assert data["match"] is True
    # 24 x 4,276,224 (Mamba-2 under transformers) + 4 x 300 x 4,096 (attention) = 107,544,576.
    assert data["measured_bytes"] == data["estimated_bytes"] == 102_629_376 + 4_915_200
    by_kind = {k["kind"]: k for k in data["kinds"]}
    assert by_kind["no_cache"]["measured_bytes"] == by_kind["no_cache"]["estimated_bytes"] == 0
    for kind in data["kinds"]:
        assert kind["measured_bytes"] == kind["estimated_bytes"], kind


def test_probe_nemotron_h_moe_blocks_cache_nothing(run_cli, tmp_path) -> None:
    pytest.importorskip("torch", reason="the probe extra (torch) is not installed")
    pytest.importorskip("transformers", reason="the probe extra (transformers) is not installed")
    # A Nemotron-3-Nano-shaped hybrid with MoE ('E') blocks: "MEMEM*". Mamba-2 under transformers:
    # conv (64 x 64 + 2 x 8 x 128 = 6,144 channels) x kernel 4 x 2 B = 49,152 + SSM 64 x 64 x 128 x 4 B
    # (float32) = 2,097,152 -> 2,146,304 B per layer; attention 2 x 2 heads x 128 x 2 B = 1,024 B per token.
    config = {
        "model_type": "nemotron_h", "torch_dtype": "bfloat16", "vocab_size": 1024, "hidden_size": 256,
        "hybrid_override_pattern": "MEMEM*", "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128,
        "ssm_state_size": 128, "mamba_num_heads": 64, "mamba_head_dim": 64, "n_groups": 8, "conv_kernel": 4,
        "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
        "moe_shared_expert_intermediate_size": 64, "intermediate_size": 64,
    }  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    data = run_cli("probe", str(path), "--tokens", "100", "--device", "cpu", "--json").json()
    assert data["match"] is True
    by_kind = {k["kind"]: (k["layers"], k["measured_bytes"], k["estimated_bytes"]) for k in data["kinds"]}
    assert by_kind == {
        "mamba": (3, 3 * 2_146_304, 3 * 2_146_304),
        "no_cache": (2, 0, 0),
        "full_attention": (1, 102_400, 102_400),
    }


# Nemotron-3-Nano (Nemotron-H with MoE blocks), from the Kimi-Linear / Granite-4.0-H file: each
# number derived by hand next to it.
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


def test_probe_nemotron_3_nano_matches_byte_for_byte(run_cli: Any) -> None:
    data = probe_fixture(run_cli, NANO)
    # Mamba-2 (transformers): conv 6,144 x 4 x 2 B = 49,152 + 2,097,152 = 2,146,304 x 23 = 49,364,992;
    # attention 6 x 300 x 2 x 2 x 128 x 2 B = 1,843,200; MoE blocks nothing.
    assert data["measured_bytes"] == data["estimated_bytes"] == 49_364_992 + 1_843_200
    assert measured_by_kind(data) == {
        "mamba": (23, 49_364_992, 49_364_992),
        "no_cache": (23, 0, 0),
        "full_attention": (6, 1_843_200, 1_843_200),
    }
