"""kvcalc.inputs.hf.configs: how the reader takes the fields every config shares (dtype, counts,
the context limit)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from kvcalc import api
from kvcalc.dtypes import lookup_dtype
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.inputs.hf.dims import read_dims
from tests.conftest import assert_one_line_error, fixture_config

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
