"""One module per model family whose cache layout the generic reader cannot derive.

The generic reader (``kvcalc.inputs.hf.configs``) knows the common shapes: a ``layer_types`` list, sliding
and chunked patterns, MLA, the Mamba and Gated DeltaNet states. A family with a layout of its own
(cross-attention over image or encoder tokens, compressed attention, attention and a state in one
layer, ...) or rules keyed on its model type gets a module here with one function,
``read(r: Reader) -> Layout``: the per-layer cache entries, the decoder's layer count and its query
heads. Adding a family is one new module and one line in ``_MODULES``.

Modules are imported only when a config of their model type is read, so start-up stays fast.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvcalc.spec import LayerCache

    Layout = tuple[list[LayerCache], int, int | None]

# Encoder-decoder model types: read by the encoder_decoder module, as is any config that says
# is_encoder_decoder.
_ENCODER_DECODER_TYPES = (
    "t5", "mt5", "umt5", "longt5", "bart", "mbart", "whisper", "marian", "pegasus",
    "m2m_100", "nllb_moe", "blenderbot", "blenderbot-small", "plbart", "fsmt", "led",
    "prophetnet", "switch_transformers", "bigbird_pegasus", "moonshine",
)  # fmt: skip
_ENCODER_DECODER = "encoder_decoder"

# model_type -> module in this package. A model type listed here is read by that module alone.
_MODULES: dict[str, str] = {
    "deepseek_v4": "deepseek_v4",
    "mllama": "mllama",
    "mllama_text_model": "mllama",
    "mimo_v2_flash": "mimo_v2_flash",
    "mimo_v2": "mimo_v2_flash",
    "qwen3_5_text": "qwen3_5",
    "qwen3_5_moe_text": "qwen3_5",
    "falcon_h1": "falcon_h1",
    "zamba2": "zamba2",
    "kimi_linear": "kimi_linear",
    "granitemoehybrid": "granitemoehybrid",
    "bamba": "granitemoehybrid",
    "glm_moe_dsa": "glm_moe_dsa",
    "minimax_m3_vl_text": "minimax_m3",
    "minimax_m3": "minimax_m3",
    "nemotron_h": "nemotron_h",
    "nemotron-nas": "nemotron_nas",
    "gemma4_text": "gemma4",
    "lfm2": "lfm2",
    "lfm2_moe": "lfm2",
    "lfm3": "lfm2",
    "rwkv": "rwkv",
    "mamba": "mamba",
    "falcon_mamba": "mamba",
    "mamba2": "mamba",
    "deepseek_v32": "deepseek_v32",
    "recurrent_gemma": "recurrent_gemma",
    "minimax": "minimax",
    "minimax_text_01": "minimax",
    "minimax_m1": "minimax",
    "longcat_flash": "longcat_flash",
    "mamba_ssm": "mamba_ssm",  # mamba_ssm's own format (no model_type; configs._native_format)
    **dict.fromkeys(_ENCODER_DECODER_TYPES, _ENCODER_DECODER),
}


def has_family(model_type: str) -> bool:
    """Whether a module of its own reads this model type."""
    return model_type in _MODULES


def family_rule(model_type: str) -> Callable[[Any], Layout] | None:
    """The ``read`` function of the module that owns ``model_type``, or None."""
    module = _MODULES.get(model_type)
    if module is None:
        return None
    rule: Callable[[Any], Layout] = import_module(f"{__name__}.{module}").read
    return rule


def is_encoder_decoder(model_type: str, config: Mapping[str, Any]) -> bool:
    """Whether the encoder-decoder module reads this config: an encoder-decoder model type, or a
    config (the whole one) that says ``is_encoder_decoder``."""
    return _MODULES.get(model_type) == _ENCODER_DECODER or config.get("is_encoder_decoder") is True


def encoder_decoder_rule() -> Callable[[Any], Layout]:
    """The ``read`` function of the encoder-decoder module, whatever the model type."""
    rule: Callable[[Any], Layout] = import_module(f"{__name__}.{_ENCODER_DECODER}").read
    return rule
