"""The guard: a config field kvcalc does not read that may shape the cache is named, never
silently ignored (kvcalc.inputs.hf.guard documents the rule)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc import api
from kvcalc.inputs.hf import configs
from kvcalc.inputs.hf.configs import _text_config, read_config
from kvcalc.inputs.hf.guard import ALIASES, NOT_SHAPING, NOT_SHAPING_PARTS, SHAPING_WORDS, model_reads, shaping_reason
from kvcalc.inputs.presets import load_presets
from kvcalc.spec import ModelSpec, StateCache
from tests.conftest import FIXTURES, assert_one_line_error, fixture_config

FIXTURE_NAMES = sorted(p.name for p in FIXTURES.glob("*.json"))
LLAMA = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
         "num_key_value_heads": 2, "torch_dtype": "bfloat16"}  # fmt: skip
# The same layout under a model type transformers 5.24 does not ship (remote code): no code to
# consult, so the guard judges every field by its name and says so.
NEW_ARCH = {**LLAMA, "model_type": "new_arch"}
BY_NAME = "judged by its name alone: transformers 5.24.0 has no code for model type 'new_arch'"

# Fields of 2025-26 architectures that kvcalc does not model yet (issue: never silently wrong).
NEW_ARCHITECTURES = {
    # DeepSeek-V3.2's indexer is modelled now (tests/kinds/test_indexer.py); MiniCPM4's InfLLM-v2 sparse
    # attention is not.
    "MiniCPM4 sparse": {"sparse_config": {"kernel_size": 32, "topk": 64}},
    # per_layer_config's head_dim / KV heads / window / chunk are applied (tests/inputs/hf/test_configs.py);
    # any other cache-shaping override is named with its path.
    "per-layer overrides": {"per_layer_config.1.kv_lora_rank": 512},
    "Nemotron-H hybrid": {"hybrid_override_pattern": "M-M-M*-", "mamba_num_heads": 128, "mamba_head_dim": 64},
    "Kimi-Linear KDA": {"linear_attn_config": {"kda_layers": [1, 2], "head_dim": 128}},
    "mllama cross-attention": {"cross_attention_layers": [3, 8, 13]},
    "MiMo-V2 SWA geometry": {"hybrid_layer_pattern": [0, 1, 1], "swa_num_key_value_heads": 8, "swa_head_dim": 192},
    # Qwen3.5's mamba_ssm_dtype is read now (tests/engines/test_base.py); Falcon-H1's SSM width is not.
    "Falcon-H1 SSM width": {"mamba_d_ssm": 1536},
    "DeepSeek-V4 compression": {"compress_ratios": [4, 128]},
    "MiniMax sparse": {"sparse_attention_config": {"block": 64}},
    "Nemotron NAS": {"block_configs": [{"attention": {"no_op": True}}]},
    "GLM-5 indexer": {"index_topk_freq": 4, "indexer_types": ["full"]},
}


@pytest.mark.parametrize("name", sorted(NEW_ARCHITECTURES))
def test_unmodelled_fields_of_new_architectures_are_named(name: str) -> None:
    extra = NEW_ARCHITECTURES[name]
    config = {**NEW_ARCH, **extra}
    if name == "per-layer overrides":  # a dotted path names a field inside per_layer_config
        config = {**NEW_ARCH, "per_layer_config": {"1": {"kv_lora_rank": 512}}}
    spec = read_config(config, name=name)
    named = [w.split("'")[1] for w in spec.warnings]
    assert named == list(extra), spec.warnings
    assert all("this estimate may be wrong" in w for w in spec.warnings)
    if name != "per-layer overrides":  # per_layer_config is read by every model's cache code
        assert all(BY_NAME in w for w in spec.warnings), spec.warnings


@pytest.mark.parametrize("name", sorted(NEW_ARCHITECTURES))
def test_fields_no_code_of_the_model_type_reads_are_silent(name: str) -> None:
    # The same fields on Llama: transformers 5.24's Llama code (models/llama/modeling_llama.py,
    # configuration_llama.py, cache_utils.py) reads none of them, so they cannot shape its cache.
    extra = NEW_ARCHITECTURES[name]
    if name == "per-layer overrides":
        return  # cache_utils.py reads per_layer_config for every model (tested above)
    assert read_config({**LLAMA, **extra}, name=name).warnings == ()


def test_nested_fields_are_named_with_their_path() -> None:
    config = {"model_type": "llava", "text_config": {**NEW_ARCH, "extras": {"sliding_layers": [1, 2]}}}
    spec = read_config(config, name="nested")
    assert [w.split("'")[1] for w in spec.warnings] == ["text_config.extras.sliding_layers"]
    # Under Llama, whose code never reads an "extras" object, nothing in it can shape the cache.
    config["text_config"]["model_type"] = "llama"
    assert read_config(config, name="nested").warnings == ()


@pytest.mark.parametrize("value", [None, False, 0, "", [], {}])
def test_fields_that_say_nothing_are_not_flagged(value: Any) -> None:
    assert read_config({**NEW_ARCH, "index_topk": value}, name="x").warnings == ()


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_real_fixture_configs_raise_no_false_alarm(name: str) -> None:
    config = json.loads((FIXTURES / name).read_text())
    assert read_config(config, name=name).warnings == ()


def test_presets_raise_no_false_alarm() -> None:
    for preset in load_presets().values():
        assert read_config(preset.config, name=preset.name).warnings == (), preset.name


def test_the_rule_is_documented_word_by_word() -> None:
    # Every exception names why; every shaping word says what it would change.
    assert all(NOT_SHAPING.values()) and all(NOT_SHAPING_PARTS.values()) and all(SHAPING_WORDS.values())
    assert shaping_reason("index_head_dim") == "head geometry"
    assert shaping_reason("attention_dropout") is None
    assert shaping_reason("rope_scaling") is None
    assert shaping_reason("num_local_experts") is None


_SAFE_WORDS = [w for w in SHAPING_WORDS if not any(part in w for part in NOT_SHAPING_PARTS)]
_values = st.one_of(
    st.integers(1, 2**20),
    st.text(min_size=1, max_size=8),
    st.lists(st.integers(1, 9), min_size=1, max_size=4),
    st.dictionaries(st.sampled_from(["a", "b"]), st.integers(1, 9), min_size=1),
)


@settings(max_examples=200, deadline=None)
@given(
    fixture=st.sampled_from(FIXTURE_NAMES),
    word=st.sampled_from(_SAFE_WORDS),
    prefix=st.sampled_from(["", "zz_", "new_", "num_"]),
    suffix=st.sampled_from(["", "_x", "_size", "_dim2"]),
    value=_values,
)
def test_injected_cache_shaping_fields_are_named(fixture: str, word: str, prefix: str, suffix: str, value: Any) -> None:
    # A made-up field no code reads: named (by its name, said so) under a model type transformers
    # does not ship; silent under one it ships, whose code never reads it.
    config = json.loads((FIXTURES / fixture).read_text())
    key = f"{prefix}{word}{suffix}_unmodelled"
    text, where = _text_config(config)
    injected = copy.deepcopy(config)
    target = injected if text is config else injected[where.rstrip(".")]
    target[key] = value
    spec = read_config(injected, name=fixture)
    named = [w for w in spec.warnings if f"'{where}{key}'" in w]
    if model_reads(spec.model_type) is None:
        assert len(named) == 1 and "judged by its name alone" in named[0], (key, spec.warnings)
    else:
        assert named == [], (key, spec.warnings)


# --- the CLI: stderr, JSON, --strict --------------------------------------------------------------------


def _config(tmp_path: Path) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**NEW_ARCH, "index_head_dim": 128, "index_topk": 2048}))
    return str(path)


def test_cli_warns_on_stderr_and_in_json(run_cli, tmp_path: Path) -> None:
    path = _config(tmp_path)
    text = run_cli("estimate", path, "--tokens", "100")
    assert text.exit_code == 0
    warnings = text.stderr.strip().splitlines()
    assert len(warnings) == 2 and all(w.startswith("kvcalc: warning: config field 'index_") for w in warnings)
    data = run_cli("estimate", path, "--tokens", "100", "--json")
    assert [w.split("'")[1] for w in data.json()["warnings"]] == ["index_head_dim", "index_topk"]
    # 4 layers x 2 x 2 KV heads x 64 x 2 B x 100 tokens: the modelled part, printed with the warning.
    assert data.json()["total_bytes"] == 4 * 2 * 2 * 64 * 2 * 100


@pytest.mark.parametrize("command", [["estimate"], ["compare"], ["fit", "--kv-budget", "1GB"]])
def test_strict_refuses_with_its_own_exit_status(run_cli, tmp_path: Path, command: list[str]) -> None:
    result = run_cli(command[0], _config(tmp_path), *command[1:], "--strict")
    assert_one_line_error(result, "strict", "index_head_dim", "1 more field")
    assert result.exit_code == 3


def test_strict_passes_a_model_it_fully_models(run_cli) -> None:
    assert run_cli("estimate", "llama-3.1-8b", "--strict").exit_code == 0


# --- what the model type's own code reads (kvcalc.inputs.hf.reads) ----------------------------------


def test_a_quantizers_weight_module_class_is_silent() -> None:
    # BitNet b1.58 2B4T's quantization_config.linear_class "autobitlinear" picks the module that
    # replaces nn.Linear (transformers 5.24 quantizers/quantizer_bitnet.py): weights, not the cache.
    spec = read_config(json.loads((FIXTURES / "bitnet-b1.58-2B-4T-bf16.json").read_text()), name="bitnet")
    assert spec.warnings == ()
    assert shaping_reason("linear_class") is None  # listed in NOT_SHAPING, with why


# Tencent Hy3-preview as transformers 5.24's HYV3Config documents it (configuration_hy_v3.py
# defaults; its model card: 80 layers, 64 heads, GQA with 8 KV heads, head dim 128), with the three
# flags its config.json adds that no transformers code reads.
HY3 = {"model_type": "hy_v3", "num_hidden_layers": 80, "hidden_size": 4096, "num_attention_heads": 64,
       "num_key_value_heads": 8, "head_dim": 128, "torch_dtype": "bfloat16", "enable_lm_head_fp32": True,
       "enable_attention_fp32_softmax": True, "enable_moe_fp32_combine": True}  # fmt: skip


def test_a_field_no_code_of_the_model_type_reads_is_silent() -> None:
    # enable_lm_head_fp32 holds "head", enable_attention_fp32_softmax "attention": the name rule
    # alone would name both; transformers' hy_v3 code reads neither.
    assert shaping_reason("enable_lm_head_fp32") is not None
    assert not {"enable_lm_head_fp32", "enable_attention_fp32_softmax"} & (model_reads("hy_v3") or set())
    assert read_config(HY3, name="hy3").warnings == ()
    # The same fields under a model type transformers does not ship: judged by name, said so.
    (lm_head, softmax) = read_config({**HY3, "model_type": "new_arch"}, name="x").warnings
    assert lm_head.startswith("config field 'enable_lm_head_fp32' = True ") and BY_NAME in lm_head
    assert softmax.startswith("config field 'enable_attention_fp32_softmax' = True ") and BY_NAME in softmax


def test_a_field_the_models_code_reads_and_kvcalc_does_not_model_is_named() -> None:
    # GPT-Neo's window_size and attention_types (its local-attention layers) are read by
    # transformers 5.24's gpt_neo code (configuration_gpt_neo.py, modeling_gpt_neo.py); kvcalc
    # does not model GPT-Neo's windows, so both are named, with no "judged by its name".
    assert {"window_size", "attention_types"} <= (model_reads("gpt_neo") or set())
    config = {"model_type": "gpt_neo", "num_layers": 4, "hidden_size": 256, "num_heads": 4,
              "attention_types": [[["global", "local"], 2]], "window_size": 256}  # fmt: skip
    warnings = read_config(config, name="gpt-neo").warnings
    assert [w.split("'")[1] for w in warnings] == ["attention_types", "window_size"]
    assert not any("judged by its name" in w for w in warnings)


@pytest.mark.parametrize(
    ("method", "named"),
    [
        ("compressed-tensors", ["quantization_config.kv_cache_scheme"]),  # its config class takes it
        ("bitsandbytes", []),  # no bitsandbytes code reads a kv_cache_scheme
        ("new_quant", ["quantization_config.kv_cache_scheme"]),  # no quantizer to consult: by name
    ],
)
def test_quantization_fields_are_judged_by_what_the_quantizer_reads(method: str, named: list[str]) -> None:
    config = {**LLAMA, "quantization_config": {"quant_method": method, "kv_cache_scheme": {"num_bits": 8}}}
    warnings = read_config(config, name="q").warnings
    assert [w.split("'")[1] for w in warnings] == named
    if method == "new_quant":
        assert "transformers 5.24.0 has no quantizer for 'new_quant'" in warnings[0]


def test_the_reads_table_loads_only_when_a_config_holds_a_candidate_field() -> None:
    # Start-up: a preset whose every field kvcalc reads never loads the table.
    code = (
        "import sys; from kvcalc.inputs.hf.configs import read_config; "
        "from kvcalc.inputs.presets import load_presets; p = load_presets()['llama-3.1-8b']; "
        "read_config(p.config, name=p.name); print('kvcalc.inputs.hf.reads' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_gguf_metadata_key_is_judged_by_its_name() -> None:
    # kvcalc.inputs.gguf.config copies llama.cpp keys it does not map under their dotted GGUF names:
    # llama.cpp's code reads them, not transformers', so the Llama table does not silence them.
    config = {**LLAMA, "llama.attention.sliding_window_pattern": 4}
    (warning,) = read_config(config, name="gguf").warnings
    assert warning.startswith("config field 'llama.attention.sliding_window_pattern' = 4 ")
    assert "judged by its name" not in warning


def _load(tmp_path: Path, config: dict[str, Any]) -> ModelSpec:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return api.load_model(str(path))


def _named(spec: ModelSpec) -> list[str]:
    return [w.split("'")[1] for w in spec.warnings]


def _states(spec: ModelSpec) -> set[StateCache]:
    return {c for c in spec.caches if isinstance(c, StateCache)}


def test_modules_to_not_convert_is_not_a_convolution_state(tmp_path: Path) -> None:
    # bitsandbytes / fp8 checkpoints list the modules whose weights stay unquantized: "convert" is
    # not "conv". A KV-cache scheme beside it, in a compressed-tensors config (whose config class
    # takes kv_cache_scheme: transformers 5.24 utils/quantization_config.py), is still named.
    config = fixture_config("Llama-3.1-8B.json")
    config["quantization_config"] = {"quant_method": "compressed-tensors", "modules_to_not_convert": ["lm_head"]}
    assert _load(tmp_path, config).warnings == ()
    config["quantization_config"]["kv_cache_scheme"] = {"num_bits": 8, "type": "float"}
    assert _named(_load(tmp_path, config)) == ["quantization_config.kv_cache_scheme"]


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("modules_to_not_convert", None),  # convert: no word "conv"
        ("convert_to_fp8", None),
        ("conversation_template", None),
        ("swap_space", None),  # swap: no word "swa"
        ("deepstack_visual_indexes", None),  # listed: vision features, not cached
        ("layernorm_epsilon", None),  # layer + norm glued: a norm
        ("short_conv_kernel_size", "a convolution state"),
        ("conv1d_width", "a convolution state"),  # a digit splits words
        ("mamba_headdim", "head geometry"),  # head + dim glued
        ("headDim", "head geometry"),  # a case change splits words
        ("compression_ratio", "a compressed cache"),  # an inflected form
        ("indexer_types", "a sparse-attention index cache"),
        ("chunked_attention_size", "attention chunks"),
    ],
)
def test_names_are_matched_by_their_words(key: str, why: str | None) -> None:
    assert shaping_reason(key) == why


# Nemotron-H-8B-Base-8K: mamba_num_heads 128 x mamba_head_dim 64 = 8,192 channels, n_groups 8,
# ssm_state_size 128, conv_kernel 4. Its Mamba-2 conv runs over 8,192 + 2 x 8 x 128 = 10,240
# channels; its SSM state holds 8,192 x 128 elements.
NEMOTRON_STATE = (10_240, 4, 8_192 * 128)


def _state_shape(spec: ModelSpec) -> tuple[int, int, int]:
    (state,) = _states(spec)
    return state.conv_channels, state.conv_kernel, state.recurrent_elements


def test_aliases_that_agree_with_the_field_read_are_silent(tmp_path: Path) -> None:
    config = fixture_config("Nemotron-H-8B-Base-8K.json")
    config.update(mamba_num_groups=8, mamba_state_dim=128, mamba_nheads=128, mamba_headdim=64, mamba_d_conv=4)
    spec = _load(tmp_path, config)
    assert spec.warnings == ()
    assert _state_shape(spec) == NEMOTRON_STATE


@pytest.mark.parametrize(
    ("alias", "value", "read", "read_value"),
    [
        # transformers 5.24's Nemotron-H code reads both spellings: the mamba_ one, when given,
        # replaces the other (configuration_nemotron_h.py __post_init__), and kvcalc reads it first
        # too; the config's own spelling, now unread and different, is named with both values.
        ("mamba_n_groups", 4, "n_groups", 8),
        ("mamba_d_conv", 2, "conv_kernel", 4),
    ],
)
def test_an_alias_that_disagrees_is_named_with_both_values(
    tmp_path: Path, alias: str, value: int, read: str, read_value: int
) -> None:
    config = {**fixture_config("Nemotron-H-8B-Base-8K.json"), alias: value}
    spec = _load(tmp_path, config)
    (warning,) = spec.warnings
    assert warning.startswith(f"config field '{read}' = {read_value} ")
    assert f"disagrees with '{alias}' = {value}" in warning


@pytest.mark.parametrize(("alias", "value"), [("mamba_num_groups", 4), ("mamba_state_dim", 64), ("mamba_nheads", 64)])
def test_an_alias_no_code_of_the_model_type_reads_is_silent(tmp_path: Path, alias: str, value: int) -> None:
    # Other engines' spellings that transformers 5.24's Nemotron-H code never reads
    # (kvcalc.inputs.hf.reads): whatever their value, they cannot change its cache.
    spec = _load(tmp_path, {**fixture_config("Nemotron-H-8B-Base-8K.json"), alias: value})
    assert spec.warnings == ()
    assert _state_shape(spec) == NEMOTRON_STATE


def test_falcon_h1_spellings_of_other_families_are_silent(tmp_path: Path) -> None:
    # Falcon-H1-7B reads mamba_n_groups 1 and mamba_d_state 256; Nemotron-H spells them n_groups and
    # ssm_state_size, which transformers 5.24's Falcon-H1 code never reads.
    config = {**fixture_config("Falcon-H1-7B.json"), "n_groups": 2, "ssm_state_size": 128}
    assert _load(tmp_path, config).warnings == ()


def test_an_attention_alias_the_models_code_does_not_read_is_silent(tmp_path: Path) -> None:
    # gemma-2-9b gives head_dim 256; attention_head_dim is Nemotron-H's and Zamba2's spelling, which
    # transformers 5.24's Gemma-2 code never reads.
    config = {**fixture_config("gemma-2-9b.json"), "attention_head_dim": 128}
    assert _load(tmp_path, config).warnings == ()


def test_every_spelling_the_reader_takes_is_in_one_alias_group() -> None:
    groups = list(ALIASES.values())
    for spellings in (configs._LAYER_KEYS, configs._HEAD_KEYS, configs._KV_HEAD_KEYS, configs._HIDDEN_KEYS,
                      ("head_dim", "d_kv", "kv_channels", "attention_head_size"),
                      ("sliding_window", "sliding_window_size", "attention_window_size"),
                      ("mamba_d_state", "ssm_state_size", "state_size"), ("mamba_d_conv", "conv_kernel"),
                      ("mamba_n_groups", "n_groups"), ("mamba_expand", "expand")):  # fmt: skip
        assert sum(set(spellings) <= set(g) for g in groups) == 1, spellings
    assert len({n for g in groups for n in g}) == sum(len(g) for g in groups)  # no name in two groups


# Each real Hugging Face config under tests/fixtures (fixtures/SOURCES.md) and the fields the guard
# must name in it: none, since every field of these files that could shape the cache is read (each
# was inspected by hand). A new fixture must be listed here, so its warnings are judged too.
EXPECTED_WARNINGS: dict[str, list[str]] = {
    name: []
    for name in (
        "DeepSeek-V2-Lite.json", "DeepSeek-V3.2.json", "DeepSeek-V4-Flash.json", "Falcon-H1-7B.json",
        "GLM-5.1.json", "GLM-5.3-w4a16.json", "Kimi-Linear-48B-A3B-Instruct.json",
        "LFM2.5-1.2B-Distilled-Claude-4.6.json", "Llama-2-7b-hf.json", "Llama-3.1-8B.json",
        "Llama-3.2-11B-Vision-Instruct.json", "Llama-3_3-Nemotron-Super-49B-v1.json",
        "Llama-4-Scout-17B-16E-Instruct-FP8-dynamic.json", "MiMo-V2.5-Pro.json", "MiniMax-M3.json",
        "Mistral-7B-Instruct-v0.1.json", "Mistral-Nemo-Instruct-2407.json", "Mixtral-8x7B-v0.1.json",
        "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json", "Nemotron-H-8B-Base-8K.json",
        "Ornith-1.0-35B-Qwen3.5-MoE.json", "Qwen2.5-7B.json", "Qwen3-8B.json", "Qwen3-Next-80B-A3B.json",
        "Qwen3.5-0.8B.json", "falcon-7b-instruct.json", "gemma-2-9b.json", "gemma-4-31B-it.json",
        "gemma-4-31B-it.saved-by-transformers-5.24.json", "gpt-oss-20b.json", "gpt2.json",
        "granite-4.0-h-micro.json", "llava-1.5-7b-hf.json", "t5-small.json", "GLM-4.5-Air.json",
        "Hunyuan-A13B-Instruct.json", "MiniMax-M1-80k.json", "falcon-mamba-7b.json", "recurrentgemma-2b.json",
        "bitnet-b1.58-2B-4T-bf16.json",
    )
}  # fmt: skip


REAL_CONFIGS = sorted(p.name for p in FIXTURES.glob("*.json"))


def test_every_real_config_is_listed() -> None:
    assert sorted(EXPECTED_WARNINGS) == REAL_CONFIGS


@pytest.mark.parametrize("name", REAL_CONFIGS)
def test_real_configs_raise_exactly_the_expected_warnings(name: str) -> None:
    spec = api.load_model(str(FIXTURES / name))
    assert _named(spec) == EXPECTED_WARNINGS[name], spec.warnings


@pytest.mark.parametrize("name", REAL_CONFIGS)
def test_every_spelling_of_a_value_a_real_config_gives_is_silent(name: str) -> None:
    # Spell every quantity the config gives in all its other names, with the same value: nothing new
    # is said, so nothing is warned and the layout is unchanged.
    config = fixture_config(name)
    base = read_config(config, name=name)
    text, where = _text_config(config)
    injected = copy.deepcopy(config)
    target = injected if text is config else injected[where.rstrip(".")]
    for names in ALIASES.values():
        given = next((n for n in names if text.get(n) is not None), None)
        if given is not None:
            target.update({n: text[given] for n in names if n not in text})
    spec = read_config(injected, name=name)
    assert spec.warnings == ()
    assert spec.caches == base.caches


# Hunyuan's cross-layer attention fields (the reader: tests/inputs/hf/test_configs.py).
def test_cla_fields_nobody_reads_are_named() -> None:
    # A family module that does not go through the generic entries: the guard names use_cla.
    from kvcalc.inputs.hf.guard import shaping_reason

    assert shaping_reason("use_cla") == "cross-layer KV sharing"
    assert shaping_reason("cla_share_factor") in ("cross-layer KV sharing", "KV sharing")
