"""kvcalc.inputs.hf.configs: how the reader takes the fields every config shares (dtype, counts,
the context limit)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcalc import api
from kvcalc.api import model_from_geometry
from kvcalc.calc.estimate import Estimate, Workload
from kvcalc.dtypes import BF16, FP8, FP16, FP32, DType, lookup_dtype
from kvcalc.errors import ConfigError, KvcalcError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.inputs.hf.dims import read_dims
from kvcalc.spec import AttentionCache, Kind, ModelSpec, StateCache
from kvcalc.views.json import estimate_json
from tests.conftest import FIXTURES, assert_one_line_error, fixture_config
from tests.helpers.theoretical import estimate

LLAMA: dict[str, Any] = {
    "model_type": "llama",
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_size": 256,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
}


# transformers 5.24 configuration_utils.py PreTrainedConfig.__post_init__, lines 438-442: "If both
# are provided, keep `dtype`"; torch_dtype counts only when dtype is absent or null.
@pytest.mark.parametrize(
    ("fields", "want"),
    [
        ({"dtype": "bfloat16", "torch_dtype": "float32"}, "bf16"),
        ({"torch_dtype": "float32", "dtype": "float16"}, "fp16"),
        ({"dtype": None, "torch_dtype": "float32"}, "fp32"),
        ({"torch_dtype": "float16"}, "fp16"),
    ],
)
def test_dtype_wins_over_torch_dtype(fields: dict[str, Any], want: str) -> None:
    spec = read_config({**LLAMA, **fields}, name="x")
    assert spec.dtype == lookup_dtype(want)


def test_dtype_of_the_text_model_wins_in_a_wrapper() -> None:
    config = {"model_type": "llava", "torch_dtype": "float32", "text_config": {**LLAMA, "dtype": "float16"}}
    assert read_config(config, name="x").dtype == lookup_dtype("fp16")


def test_a_dtype_that_is_not_a_string_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="'dtype' must name a dtype, got 16"):
        read_config({**LLAMA, "dtype": 16}, name="x")


# A field given with the wrong type or sign is a broken config (exit 1, naming the field), never
# read as absent: absent, max_position_embeddings would leave the context uncapped, a null layer
# count would take LlamaConfig's default of 32 layers.
@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("max_position_embeddings", -1, "'max_position_embeddings' must be positive, got -1"),
        ("max_position_embeddings", "lots", "'max_position_embeddings' must be an integer, got 'lots'"),
        ("max_position_embeddings", 0, "'max_position_embeddings' must be positive, got 0"),
        ("n_positions", True, "'n_positions' must be an integer, got True"),
        ("vocab_size", -5, "'vocab_size' must be positive, got -5"),
        ("vocab_size", 1000.5, "'vocab_size' must be an integer, got 1000.5"),
        ("num_hidden_layers", None, "'num_hidden_layers' must be a positive integer, got null"),
        ("num_attention_heads", None, "'num_attention_heads' must be a positive integer, got null"),
        ("model_type", 7, "'model_type' must be a string, got 7"),
    ],
)
def test_wrong_type_or_sign_is_a_config_error(key: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        read_config({**LLAMA, key: value}, name="x")


def test_wrong_count_in_a_nested_text_config_names_its_path() -> None:
    config = {"model_type": "llava", "text_config": {**LLAMA, "max_position_embeddings": -1}}
    with pytest.raises(ConfigError, match=r"'text_config\.max_position_embeddings' must be positive"):
        read_config(config, name="x")


def test_read_dims_refuses_a_negative_vocabulary() -> None:
    with pytest.raises(ConfigError, match="'vocab_size' must be positive, got -5"):
        read_dims({**LLAMA, "vocab_size": -5})


def test_a_broken_field_exits_1_on_the_command_line(run_cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, "max_position_embeddings": "lots"}))
    result = run_cli("estimate", str(path), "--tokens", "100")
    assert result.exit_code == 1
    assert_one_line_error(result, "'max_position_embeddings' must be an integer")


@pytest.mark.parametrize("weight_dtype", ["int8", "q4_0", "int4", "float8_e4m3fn", "auto"])
def test_weight_dtype_is_not_the_kv_dtype(run_cli, tmp_path: Path, weight_dtype: str) -> None:
    config = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
              "num_key_value_heads": 2, "torch_dtype": weight_dtype}  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    data = run_cli("estimate", str(path), "--tokens", "10", "--json").json()
    # 2 layers x 2 x 2 KV heads x 64 dims x 2 B (fp16 assumed) x 10 tokens = 10,240 B, no metadata.
    assert data["total_bytes"] == 10_240
    assert data["kv_dtype"] == "fp16"
    assert any(weight_dtype in note and "compute dtype" in note for note in data["notes"])


def test_weight_dtype_on_a_hybrid(run_cli, tmp_path: Path) -> None:
    # Jamba-like: a Mamba state used to be sized in the weight dtype and failed ("no whole bytes").
    from tests.conftest import FIXTURES

    config = json.loads((FIXTURES / "Qwen3-Next-80B-A3B.json").read_text())
    config["torch_dtype"] = "int8"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = run_cli("estimate", str(path), "--json")
    assert result.exit_code == 0, result.stderr
    assert result.json()["kv_dtype"] == "fp16"


def test_a_model_type_without_rules_is_read_generically_with_a_note(tmp_path: Path) -> None:
    config = fixture_config("Llama-3.1-8B.json") | {"model_type": "totally_new_arch"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    est = api.estimate(str(path), tokens=1000)
    assert est.total_bytes == 1000 * 131_072  # Llama geometry, read generically
    assert any("model type 'totally_new_arch' has no rules of its own" in n for n in est.notes)


def test_no_preset_and_no_gguf_architecture_says_it_was_read_generically() -> None:
    from kvcalc.inputs.gguf import ARCH_TYPES
    from kvcalc.inputs.hf.configs import is_checked_type
    from kvcalc.inputs.presets import load_presets

    assert all(is_checked_type(t) for t in ARCH_TYPES.values())
    for name in load_presets():
        assert not any("has no rules of its own" in n for n in api.estimate(name).notes), name


# transformers' heterogeneous configs: ``per_layer_config``, a sparse mapping from layer index to the
# attributes that differ on that layer (transformers 5.24 integrations/heterogeneity/
# configuration_utils.py; cache_utils.py get_layer_types_and_kwargs reads each layer's sliding_window /
# attention_chunk_size; Gemma4TextAttention reads each layer's head_dim and num_key_value_heads).
# Every number is derived by hand next to it.
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


# Configs as transformers 5.24 saves them: ``SomeConfig(**fields).to_json_string()`` writes every
# derived attribute (``layer_types`` lists, DeepSeek's ``head_dim`` / ``qk_head_dim``, MLP layouts),
# which is what a user's ``save_pretrained`` checkpoint holds. Each must read exactly, with no false
# warning. Numbers are derived by hand next to them.
def _saved(class_name: str, **fields: Any) -> dict[str, Any]:
    transformers = pytest.importorskip("transformers", reason="the probe extra (transformers) is not installed")
    config = getattr(transformers, class_name)(**fields)
    saved: dict[str, Any] = json.loads(config.to_json_string())
    return saved


def test_deepseek_v32_indexed_attention_layers() -> None:
    saved = _saved("DeepseekV32Config")
    # DeepseekV32Config.__post_init__ writes layer_types = ["indexed_attention"] x 61, plus head_dim
    # (= qk_rope_head_dim 64) and qk_head_dim (128 + 64 = 192), which size queries, not the latent.
    assert set(saved["layer_types"]) == {"indexed_attention"} and saved["qk_head_dim"] == 192
    spec = read_config(saved, name="v32")
    # 61 MLA layers of 512 + 64 and 61 indexer keys of 128; no dtype in the file: fp16 (noted).
    # 61 x (576 + 128) x 2 B = 85,888 B per token.
    assert sum(c.kind is Kind.MLA for c in spec.caches) == 61
    assert sum(c.kind is Kind.INDEXER for c in spec.caches) == 61
    assert estimate(spec, Workload(tokens=1000)).per_token_bytes == 61 * 704 * 2 == 85_888
    assert spec.warnings == ()


def test_granite_hybrid_default_is_all_mamba2() -> None:
    spec = read_config(_saved("GraniteMoeHybridConfig"), name="granite")
    # 32 Mamba-2 layers, no attention: d_inner = mamba_expand 2 x hidden 4096 = 8,192; conv over
    # 8,192 + 2 x 1 group x 256 = 8,704 channels x (4 - 1) = 26,112; SSM 128 heads x (8,192 / 128 =
    # 64) x 256 = 2,097,152. (26,112 + 2,097,152) x 2 B = 4,246,528 B a layer; x 32 = 135,888,896.
    est = estimate(spec, Workload(tokens=1000))
    assert est.per_token_bytes == 0
    assert est.fixed_bytes_per_sequence == 32 * 4_246_528 == 135_888_896
    assert spec.warnings == ()  # the attention fields size nothing without attention layers


def test_lfm2_with_attention_everywhere_reads_no_conv_fields() -> None:
    spec = read_config(_saved("Lfm2Config"), name="lfm2")
    # Lfm2Config(): full_attn_idxs = every layer. 32 layers x 2 x 8 KV heads x (2,560 / 32 = 80)
    # x 2 B = 81,920 B per token; conv_L_cache sizes nothing.
    assert estimate(spec, Workload(tokens=1000)).per_token_bytes == 32 * 2 * 8 * 80 * 2 == 81_920
    assert spec.warnings == ()


def test_lfm2_moe_short_convolutions() -> None:
    kinds = ["conv", "conv", "full_attention", "conv", "conv", "full_attention"]
    spec = read_config(_saved("Lfm2MoeConfig", num_hidden_layers=6, layer_types=kinds), name="lfm2-moe")
    # Attention: 2 layers x 2 x 8 KV heads x (2,048 / 32 = 64) x 2 B = 4,096 B per token.
    # Short conv: 4 layers x 2,048 channels x (3 - 1) x 2 B = 32,768 B per sequence.
    est = estimate(spec, Workload(tokens=1000))
    assert (est.per_token_bytes, est.fixed_bytes_per_sequence) == (4_096, 32_768)
    assert spec.warnings == ()  # num_dense_layers sizes MLPs


def test_lfm2_moe_needs_its_layer_list() -> None:
    with pytest.raises(ConfigError, match="'layer_types' is missing: an lfm2_moe config"):
        read_config(_saved("Lfm2MoeConfig"), name="lfm2-moe")


@pytest.mark.parametrize(
    "class_name",
    ["FalconH1Config", "Zamba2Config", "KimiLinearConfig", "MllamaConfig", "DeepseekV4Config", "GlmMoeDsaConfig",
     "MiniMaxM3VLConfig", "MiMoV2FlashConfig", "Qwen3_5Config", "Qwen3_5MoeConfig", "NemotronHConfig", "Gemma4Config"],
)  # fmt: skip
def test_class_defaults_raise_no_false_alarm(class_name: str) -> None:
    assert read_config(_saved(class_name), name=class_name).warnings == ()


def test_qwen2_saved_with_layer_types_and_the_fields_that_derived_it() -> None:
    saved = _saved("Qwen2Config")
    # Saved with layer_types (32 x full_attention) and max_window_layers 28, which only derives the
    # list when it is absent. 32 layers x 2 x 32 KV heads x (4,096 / 32 = 128) x 2 B = 524,288 B.
    assert saved["layer_types"] == ["full_attention"] * 32 and saved["max_window_layers"] == 28
    spec = read_config(saved, name="qwen2")
    assert estimate(spec, Workload(tokens=1000)).per_token_bytes == 32 * 2 * 32 * 128 * 2 == 524_288
    assert spec.warnings == ()


@pytest.mark.parametrize(
    "class_name",
    ["Qwen3Config", "Qwen2MoeConfig", "Exaone4Config", "FalconConfig", "GPT2Config", "GPTBigCodeConfig",
     "GraniteConfig", "Llama4TextConfig", "JambaConfig"],
)  # fmt: skip
def test_numerics_and_derivation_fields_raise_no_false_alarm(class_name: str) -> None:
    # Query/score scalings (attention_multiplier, scale_attn_weights, attn_scale), kernel choices
    # (use_mamba_kernels), a KV-head count an MQA flag overrides, and pattern fields beside an
    # explicit layer_types list: none changes what is cached.
    assert read_config(_saved(class_name), name=class_name).warnings == ()


def _bamba() -> dict[str, Any]:
    # Bamba (IBM) names its attention layers by index: ibm-ai-platform/Bamba-9B has 32 layers with
    # attention at 9, 18 and 27 (as quoted in public test code); a shorter stack keeps the probe fast.
    saved = _saved("BambaConfig", num_hidden_layers=8, attn_layer_indices=[3, 7])
    saved.pop("time_step_limit")  # saved as [0.0, inf], which JSON cannot hold and transformers then refuses
    return saved


def test_bamba_attention_by_index_and_mamba2_elsewhere() -> None:
    spec = read_config(_bamba(), name="bamba")
    assert [c.kind for c in spec.caches] == [Kind.MAMBA] * 3 + [Kind.FULL] + [Kind.MAMBA] * 3 + [Kind.FULL]
    # No dtype in the file: fp16 (noted). Attention: 2 layers x 2 x 8 KV heads x (4,096 / 32 = 128)
    # x 2 B = 8,192 B per token. Mamba-2: d_inner 2 x 4,096 = 8,192; conv (8,192 + 2 x 1 x 256) x
    # (4 - 1) = 26,112; SSM 128 heads x 64 x 256 = 2,097,152; (26,112 + 2,097,152) x 2 B x 6 layers
    # = 25,479,168 B per sequence.
    est = estimate(spec, Workload(tokens=1000))
    assert (est.per_token_bytes, est.fixed_bytes_per_sequence) == (8_192, 6 * 4_246_528)
    assert spec.warnings == ()
    # Without the list every layer is Mamba-2 (BambaConfig.layers_block_type), noted.
    no_list = {k: v for k, v in _bamba().items() if k != "attn_layer_indices"}
    spec = read_config(no_list, name="bamba")
    assert {c.kind for c in spec.caches} == {Kind.MAMBA} and any("attn_layer_indices" in n for n in spec.notes)
    with pytest.raises(ConfigError, match="'attn_layer_indices' must list layer indices below 8"):
        read_config({**_bamba(), "attn_layer_indices": [8]}, name="bamba")


def test_probe_bamba_matches(run_cli, tmp_path) -> None:
    pytest.importorskip("torch", reason="the probe extra (torch) is not installed")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_bamba()))
    result = run_cli("probe", str(path), "--tokens", "100", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    # The probe runs the dtype-less model in fp32 and keeps transformers' semantics (the whole conv
    # kernel, 4 x 8,704): 6 x (34,816 + 2,097,152) x 4 B + 100 tokens x 2 x 2 x 8 x 128 x 4 B
    # = 51,167,232 + 1,638,400 = 52,805,632 B.
    assert report["measured_bytes"] == report["estimated_bytes"] == 52_805_632


def test_mamba2_heads_cover_its_channels() -> None:
    saved = _saved("Mamba2Config")
    spec = read_config(saved, name="mamba2")
    # 64 layers; d_inner = 2 x 4,096 = 8,192 = 128 heads x 64; conv (8,192 + 2 x 8 groups x 128)
    # x (4 - 1) = 30,720; SSM 128 x 64 x 128 = 1,048,576; (30,720 + 1,048,576) x 2 B (fp16, noted)
    # x 64 = 138,149,888 B per sequence.
    assert estimate(spec, Workload(tokens=10)).fixed_bytes_per_sequence == 64 * 1_079_296 * 2 == 138_149_888
    assert spec.warnings == ()
    with pytest.raises(ConfigError, match=r"'num_heads' \(100\) x head_dim \(64\) must equal expand x hidden_size"):
        read_config({**saved, "num_heads": 100}, name="mamba2")


def test_a_window_with_no_sliding_layer_sizes_nothing() -> None:
    # dots.llm1 as saved: layer_types all full_attention beside a sliding_window value; the window
    # applies only to sliding layers (cache_utils.get_layer_types_and_kwargs), so it is not flagged.
    saved = _saved("Dots1Config")
    assert set(saved["layer_types"]) == {"full_attention"} and saved["sliding_window"]
    assert read_config(saved, name="dots1").warnings == ()
    # The same value beside a sliding layer is read: the first layer keeps that many tokens.
    layers = len(saved["layer_types"])
    spec = read_config({**saved, "layer_types": ["sliding_attention"] + ["full_attention"] * (layers - 1)}, name="d")
    assert spec.caches[0].token_bound == saved["sliding_window"]


# Property tests: mutated real configs fail only with a KvcalcError, and valid configs obey the
# laws of the cache formula (linear in batch, linear in tokens below every window, bytes per
# element, GQA grouping).
FIXTURE_NAMES = sorted(p.name for p in FIXTURES.glob("*.json"))

# Keys configs.py reads: injecting them (with garbage) reaches branches the fixtures do not.
KNOWN_KEYS = (
    "num_hidden_layers", "n_layer", "num_layers", "n_layers", "num_attention_heads", "n_head",
    "num_heads", "n_heads", "hidden_size", "n_embd", "d_model", "dim", "num_key_value_heads",
    "num_kv_heads", "n_kv_heads", "n_head_kv", "head_dim", "d_kv", "kv_channels",
    "attention_head_size", "v_head_dim", "sliding_window", "sliding_window_size",
    "attention_window_size", "sliding_window_pattern", "use_sliding_window", "max_window_layers",
    "layer_types", "full_attention_interval", "attention_chunk_size", "no_rope_layers",
    "no_rope_layer_interval", "attn_layer_period", "attn_layer_offset", "kv_lora_rank",
    "qk_rope_head_dim", "num_kv_shared_layers", "multi_query", "multi_query_attention",
    "multi_query_group_num", "new_decoder_architecture", "is_encoder_decoder", "decoder_layers",
    "num_decoder_layers", "decoder_attention_heads", "decoder_key_value_heads",
    "max_source_positions", "model_type", "text_config", "llm_config", "language_config",
    "text_model_config", "thinker_config", "torch_dtype", "dtype", "linear_num_key_heads",
    "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
    "linear_conv_kernel_dim", "mamba_expand", "mamba_d_state", "mamba_d_conv", "expand",
    "state_size", "conv_kernel", "intermediate_size",
)  # fmt: skip
MEANINGFUL_STRINGS = (
    "llama", "mistral", "gemma2", "gemma3", "gemma3_text", "cohere2", "qwen3_next", "mamba",
    "falcon_mamba", "jamba", "t5", "whisper", "llama4_text", "falcon", "gpt_bigcode", "gpt_oss",
    "deepseek_v3", "clip_vision_model", "full_attention", "sliding_attention", "chunked_attention",
    "linear_attention", "attention", "local_attention", "bfloat16", "float8_e4m3fn", "torch.float32",
)  # fmt: skip

leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([0, -1, 1, 2, 3, 7, 4096, 2**16, 2**16 + 1, 2**24, 2**24 + 1, 2**31, 2**63, -(2**63)])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(MEANINGFUL_STRINGS)
)
json_values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(KNOWN_KEYS) | st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=8,
)

Path_ = tuple[Any, ...]


def _paths(node: Any, prefix: Path_ = ()) -> list[Path_]:
    """Every path to a value inside dicts and lists (dict keys and list indices)."""
    found: list[Path_] = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        found.append((*prefix, key))
        found.extend(_paths(value, (*prefix, key)))
    return found


def _container(root: Any, path: Path_) -> Any:
    node = root
    for key in path[:-1]:
        node = node[key]
    return node


def _get(root: Any, path: Path_) -> Any:
    return _container(root, path)[path[-1]]


# Weighted: replacing the whole document is rare, so most examples reach the field checks.
MUTATIONS = ("drop",) * 4 + ("replace",) * 4 + ("negate",) * 2 + ("nest",) * 2 + ("inject",) * 4 + ("root",)


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> Any:
    """``base`` after one to four random mutations."""
    config: Any = copy.deepcopy(base)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        op = draw(st.sampled_from(MUTATIONS))
        if op == "root" or not isinstance(config, dict | list):
            config = draw(json_values)  # now and then the whole document is garbage
            continue
        paths = _paths(config)
        # Favour shallow paths: the fields kvcalc reads live at depth one or two.
        shallow = [p for p in paths if len(p) <= 2] or paths
        if op == "inject" or not paths:
            dicts = [(), *(p for p in paths if isinstance(_get(config, p), dict))]
            target = draw(st.sampled_from(dicts))
            holder = config if target == () else _get(config, target)
            if isinstance(holder, dict):
                holder[draw(st.sampled_from(KNOWN_KEYS))] = draw(json_values)
            continue
        path = draw(st.sampled_from(shallow if draw(st.booleans()) else paths))
        holder, key = _container(config, path), path[-1]
        if op == "drop":
            del holder[key]
        elif op == "replace":
            holder[key] = draw(json_values)
        elif op == "negate":
            numbers = [p for p in paths if type(_get(config, p)) in (int, float)]
            if numbers:
                target = draw(st.sampled_from(numbers))
                _container(config, target)[target[-1]] = -_get(config, target)
        else:  # nest the value, or garbage, one level down
            inner = draw(st.sampled_from([holder[key], draw(json_values)]))
            holder[key] = draw(st.sampled_from([[inner], {"value": inner}, {"a": {"b": [inner]}}]))
    return config


dtypes = st.sampled_from([None, FP8, FP16, BF16, FP32])


@pytest.mark.parametrize("name", FIXTURE_NAMES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_config_estimates_or_raises_kvcalc_error(name: str, data: st.DataObject) -> None:
    config = data.draw(mutated(fixture_config(name)), label="config")
    tokens = data.draw(st.integers(min_value=1, max_value=2**20), label="tokens")
    batch = data.draw(st.integers(min_value=1, max_value=256), label="batch")
    kv_dtype = data.draw(dtypes, label="kv_dtype")
    encoder_tokens = data.draw(st.none() | st.integers(min_value=1, max_value=8192), label="encoder")
    try:
        spec = read_config(config, name="x")
        result = estimate(spec, Workload(tokens=tokens, batch=batch, kv_dtype=kv_dtype, encoder_tokens=encoder_tokens))
    except KvcalcError:
        return
    assert isinstance(result, Estimate)
    total = result.total_bytes
    assert isinstance(total, int)
    assert not isinstance(total, bool)
    assert total >= 0
    assert all(g.bytes >= 0 for g in result.groups)
    json.dumps(estimate_json(result))  # what --json prints can always be printed


def test_every_fixture_reads_unmutated() -> None:
    assert FIXTURE_NAMES
    for name in FIXTURE_NAMES:
        read_config(fixture_config(name), name=name)


# --- laws on valid configs ---------------------------------------------------------------------

SPECS = {name: read_config(fixture_config(name), name=name) for name in FIXTURE_NAMES}


def total(spec: ModelSpec, tokens: int, batch: int = 1, dtype: DType | None = None, enc: int | None = None) -> int:
    return estimate(spec, Workload(tokens=tokens, batch=batch, kv_dtype=dtype, encoder_tokens=enc)).total_bytes


def smallest_bound(spec: ModelSpec) -> int:
    bounds = [c.token_bound for c in spec.caches if c.token_bound is not None]
    return min([*bounds, 2**20])


def has_state(spec: ModelSpec) -> bool:
    return any(isinstance(c, StateCache) or c.is_state for c in spec.caches)


def compresses(spec: ModelSpec) -> bool:
    """DeepSeek-V4's compressed attention keeps the tokens of an unfinished window until it closes,
    then one entry for them all: its cache steps down at every window boundary (the probe measures
    that too, tests/inputs/hf/families/test_deepseek_v4.py), so the laws of growth below do not hold for it."""
    return any(c.compress_ratio > 1 for c in spec.caches)


GROWING = [n for n in FIXTURE_NAMES if not compresses(SPECS[n])]


def test_compressed_attention_steps_down_when_a_window_closes() -> None:
    # DeepSeek-V4-Flash, theoretical, bf16: the 4th token closes the first CSA window. Its 21 CSA
    # layers then drop 3 pending tokens of 5,120 B each (projection and gate, 2 x 512 elements x 2 B
    # each, plus the indexer's two of 2 x 128 x 2 B) for one entry of 512 x 2 + 128 x 2 = 1,280 B:
    # 21 x (15,360 - 1,280) = 295,680 B less, while every layer's window gains a row
    # (43 x 512 x 2 = 44,032) and each HCA layer a pending token (20 x 2 x 512 x 2 = 40,960).
    spec = SPECS["DeepSeek-V4-Flash.json"]
    assert compresses(spec) and "DeepSeek-V4-Flash.json" not in GROWING
    assert total(spec, 3, 1) - total(spec, 4, 1) == 295_680 - 44_032 - 40_960 == 210_688


@pytest.mark.parametrize("name", FIXTURE_NAMES)
@settings(max_examples=15, deadline=None)
@given(
    tokens=st.integers(min_value=1, max_value=2**20),
    batch=st.integers(min_value=1, max_value=64),
    factor=st.integers(min_value=2, max_value=16),
    dtype=dtypes,
)
def test_total_is_linear_in_batch(name: str, tokens: int, batch: int, factor: int, dtype: DType | None) -> None:
    spec = SPECS[name]
    assert total(spec, tokens, batch * factor, dtype) == factor * total(spec, tokens, batch, dtype)


@pytest.mark.parametrize("name", GROWING)
@settings(max_examples=15, deadline=None)
@given(data=st.data(), batch=st.integers(min_value=1, max_value=8))
def test_total_is_linear_in_tokens_below_every_window(name: str, data: st.DataObject, batch: int) -> None:
    spec = SPECS[name]
    bound = smallest_bound(spec)
    tokens = data.draw(st.integers(min_value=1, max_value=bound), label="tokens")
    # Encoder tokens fixed: cross-attention then adds a constant, like recurrent state.
    enc = 512 if spec.is_encoder_decoder else None
    one = total(spec, 1, batch, enc=enc)
    if bound >= 2:
        slope = total(spec, 2, batch, enc=enc) - one
        assert total(spec, tokens, batch, enc=enc) == one + (tokens - 1) * slope
    if not has_state(spec) and spec.encoder_tokens is None:
        # Nothing fixed per sequence: strictly proportional (cross-attention follows the tokens).
        assert total(spec, tokens, batch) == tokens * total(spec, 1, batch)
    if not has_state(spec) and not spec.is_encoder_decoder:
        per_token = estimate(spec, Workload(tokens=1)).per_token_bytes
        assert total(spec, tokens, batch) == batch * tokens * per_token


@pytest.mark.parametrize("name", GROWING)
@settings(max_examples=10, deadline=None)
@given(tokens=st.integers(min_value=1, max_value=2**20), batch=st.integers(min_value=1, max_value=64))
def test_total_never_shrinks_with_more_tokens(name: str, tokens: int, batch: int) -> None:
    spec = SPECS[name]
    assert total(spec, tokens + 1, batch) >= total(spec, tokens, batch)


@pytest.mark.parametrize("name", [n for n in FIXTURE_NAMES if not has_state(SPECS[n])])
@settings(max_examples=10, deadline=None)
@given(tokens=st.integers(min_value=1, max_value=2**20), batch=st.integers(min_value=1, max_value=64))
def test_bytes_per_element_scale_the_total(name: str, tokens: int, batch: int) -> None:
    spec = SPECS[name]
    fp16 = total(spec, tokens, batch, FP16)
    assert 2 * total(spec, tokens, batch, FP8) == fp16
    assert total(spec, tokens, batch, BF16) == fp16
    assert total(spec, tokens, batch, FP32) == 2 * fp16


def test_the_state_model_is_excluded_from_the_dtype_law() -> None:
    # Qwen3-Next keeps Gated-DeltaNet state whose dtype does not follow --kv-dtype.
    assert has_state(SPECS["Qwen3-Next-80B-A3B.json"])


@st.composite
def geometries(draw: st.DrawFn) -> tuple[int, int, int, int]:
    heads = draw(st.integers(min_value=1, max_value=128))
    kv_heads = draw(st.sampled_from([d for d in range(1, heads + 1) if heads % d == 0]))
    layers = draw(st.integers(min_value=1, max_value=160))
    head_dim = draw(st.integers(min_value=1, max_value=512))
    return layers, heads, kv_heads, head_dim


@settings(max_examples=150, deadline=None)
@given(
    geometry=geometries(),
    tokens=st.integers(min_value=1, max_value=2**20),
    batch=st.integers(min_value=1, max_value=256),
    dtype=st.sampled_from([FP8, FP16, BF16, FP32]),
)
def test_gqa_total_is_mha_total_scaled_by_kv_heads(
    geometry: tuple[int, int, int, int], tokens: int, batch: int, dtype: DType
) -> None:
    layers, heads, kv_heads, head_dim = geometry
    gqa = model_from_geometry(layers=layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim)
    mha = model_from_geometry(layers=layers, heads=heads, kv_heads=heads, head_dim=head_dim)
    gqa_total = total(gqa, tokens, batch, dtype)
    assert gqa_total * heads == total(mha, tokens, batch, dtype) * kv_heads
    # The seed formula, M = 2 x L x B x T x H_kv x d_h x s.
    assert gqa_total == 2 * layers * batch * tokens * kv_heads * head_dim * dtype.bytes_per_element


# Cross-layer attention (Hunyuan-Large's remote code, modeling_hunyuan.py: with use_cla, layer i
# computes K/V when i % cla_share_factor == 0 and the next layers reuse them).
HUNYUAN_CLA: dict[str, Any] = {
    "model_type": "hunyuan", "torch_dtype": "bfloat16", "num_hidden_layers": 64, "hidden_size": 6400,
    "num_attention_heads": 80, "num_key_value_heads": 8, "head_dim": 128, "use_cla": True, "cla_share_factor": 2,
}  # fmt: skip


def test_cross_layer_attention_caches_one_layer_in_each_group() -> None:
    spec = read_config(HUNYUAN_CLA, name="cla")
    # 32 of the 64 layers cache K and V: 32 x 2 x 8 x 128 x 2 B = 131,072 B per token.
    assert sum(c.kind is Kind.SHARED for c in spec.caches) == 32
    assert estimate(spec, Workload(tokens=1)).per_token_bytes == 131_072
    # Without use_cla every layer caches its own: twice that, and the factor decides nothing.
    plain = read_config({**HUNYUAN_CLA, "use_cla": False}, name="plain")
    assert estimate(plain, Workload(tokens=1)).per_token_bytes == 262_144 and plain.warnings == ()
