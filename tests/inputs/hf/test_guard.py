"""The guard: a config field kvcalc does not read that may shape the cache is named, never
silently ignored (kvcalc.inputs.hf.guard documents the rule)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.inputs.hf.configs import _text_config, read_config
from kvcalc.inputs.hf.guard import NOT_SHAPING, NOT_SHAPING_PARTS, SHAPING_WORDS, shaping_reason
from kvcalc.inputs.presets import load_presets
from tests.conftest import FIXTURES, assert_one_line_error

FIXTURE_NAMES = sorted(p.name for p in FIXTURES.glob("*.json"))
LLAMA = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
         "num_key_value_heads": 2, "torch_dtype": "bfloat16"}  # fmt: skip

# Fields of 2025-26 architectures that kvcalc does not model yet (issue: never silently wrong).
NEW_ARCHITECTURES = {
    # DeepSeek-V3.2's indexer is modelled now (tests/kinds/test_indexer.py); MiniCPM4's InfLLM-v2 sparse
    # attention is not.
    "MiniCPM4 sparse": {"sparse_config": {"kernel_size": 32, "topk": 64}},
    # per_layer_config's head_dim / KV heads / window / chunk are applied (tests/inputs/hf/test_per_layer_config.py);
    # any other cache-shaping override is named with its path.
    "per-layer overrides": {"per_layer_config.1.kv_lora_rank": 512},
    "Nemotron-H hybrid": {"hybrid_override_pattern": "M-M-M*-", "mamba_num_heads": 128, "mamba_head_dim": 64},
    "Kimi-Linear KDA": {"linear_attn_config": {"kda_layers": [1, 2], "head_dim": 128}},
    "mllama cross-attention": {"cross_attention_layers": [3, 8, 13]},
    "MiMo-V2 SWA geometry": {"hybrid_layer_pattern": [0, 1, 1], "swa_num_key_value_heads": 8, "swa_head_dim": 192},
    # Qwen3.5's mamba_ssm_dtype is read now (tests/engines/test_ssm_dtype.py); Falcon-H1's SSM width is not.
    "Falcon-H1 SSM width": {"mamba_d_ssm": 1536},
    "DeepSeek-V4 compression": {"compress_ratios": [4, 128]},
    "MiniMax sparse": {"sparse_attention_config": {"block": 64}},
    "Nemotron NAS": {"block_configs": [{"attention": {"no_op": True}}]},
    "GLM-5 indexer": {"index_topk_freq": 4, "indexer_types": ["full"]},
}


@pytest.mark.parametrize("name", sorted(NEW_ARCHITECTURES))
def test_unmodelled_fields_of_new_architectures_are_named(name: str) -> None:
    extra = NEW_ARCHITECTURES[name]
    config = {**LLAMA, **extra}
    if name == "per-layer overrides":  # a dotted path names a field inside per_layer_config
        config = {**LLAMA, "per_layer_config": {"1": {"kv_lora_rank": 512}}}
    spec = read_config(config, name=name)
    named = [w.split("'")[1] for w in spec.warnings]
    assert named == list(extra), spec.warnings
    assert all("this estimate may be wrong" in w for w in spec.warnings)


def test_nested_fields_are_named_with_their_path() -> None:
    config = {"model_type": "llava", "text_config": {**LLAMA, "extras": {"sliding_layers": [1, 2]}}}
    spec = read_config(config, name="nested")
    assert [w.split("'")[1] for w in spec.warnings] == ["text_config.extras.sliding_layers"]


@pytest.mark.parametrize("value", [None, False, 0, "", [], {}])
def test_fields_that_say_nothing_are_not_flagged(value: Any) -> None:
    assert read_config({**LLAMA, "index_topk": value}, name="x").warnings == ()


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
    config = json.loads((FIXTURES / fixture).read_text())
    key = f"{prefix}{word}{suffix}_unmodelled"
    text, where = _text_config(config)
    injected = copy.deepcopy(config)
    target = injected if text is config else injected[where.rstrip(".")]
    target[key] = value
    spec = read_config(injected, name=fixture)
    assert any(f"'{where}{key}'" in w for w in spec.warnings), (key, spec.warnings)


# --- the CLI: stderr, JSON, --strict --------------------------------------------------------------------


def _config(tmp_path: Path) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, "index_head_dim": 128, "index_topk": 2048}))
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
