"""The guard's precision (kvcalc.inputs.hf.guard): a warning must be a true statement about a field that could
shape the cache and that kvcalc does not read. Names are matched by their words, not substrings, and
a second spelling of a quantity kvcalc reads is judged by its value."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from kvcalc import api
from kvcalc.inputs.hf import configs
from kvcalc.inputs.hf.configs import _text_config, read_config
from kvcalc.inputs.hf.guard import ALIASES, shaping_reason
from kvcalc.spec import ModelSpec, StateCache
from tests.conftest import FIXTURES, fixture_config


def _load(tmp_path: Path, config: dict[str, Any]) -> ModelSpec:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return api.load_model(str(path))


def _named(spec: ModelSpec) -> list[str]:
    return [w.split("'")[1] for w in spec.warnings]


def _states(spec: ModelSpec) -> set[StateCache]:
    return {c for c in spec.caches if isinstance(c, StateCache)}


# --- (a) words, not substrings ----------------------------------------------------------------------


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


# --- (b) aliases: judged by their value ----------------------------------------------------------------

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


# --- (c) precision on every real config -----------------------------------------------------------------

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
