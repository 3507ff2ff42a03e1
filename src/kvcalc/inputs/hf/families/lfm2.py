"""LFM2 (Liquid AI; ``lfm2``, and ``lfm2_moe`` for the MoE sizes) and LFM3 (``lfm3``): gated
short-convolution layers ("conv") between attention layers, LFM3's both sliding and full.

Read from transformers 5.24 (models/lfm2/configuration_lfm2.py, modeling_lfm2.py;
models/lfm2_moe/configuration_lfm2_moe.py; models/lfm3/configuration_lfm3.py, modeling_lfm3.py)
and vLLM (vllm/model_executor/layers/mamba/mamba_utils.py @ 02d71083): the layer kinds
(``_layer_kinds``) and the convolution's state (``_short_conv_entry``).
The attention layers are the generic reader's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import (
    HIDDEN_KEYS,
    LAYER_KEYS,
    checked_layers,
    family_layer_types,
    kinds_attention,
    layer_entries,
)
from kvcalc.spec import StateCache

if TYPE_CHECKING:
    from kvcalc.inputs.hf.configs import Reader
    from kvcalc.inputs.hf.families import Layout


# Lfm3Config's defaults (transformers 5.24): explicit head_dim, a 256-token window, kernel 7.
_LFM3_DEFAULTS = {
    "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 4, "hidden_size": 2048,
    "head_dim": 128, "sliding_window": 256, "conv_L_cache": 7,
}  # fmt: skip


def read(r: Reader) -> Layout:
    """One entry per layer: a short-convolution state or K/V."""
    if r.model_type == "lfm3":
        r.defaults = _LFM3_DEFAULTS
    layers = checked_layers(r, r.positive_int(LAYER_KEYS))
    kinds = _layer_kinds(r, layers)
    attention, heads = kinds_attention(r, kinds)
    return layer_entries(r, layers, kinds, attention, own=lambda kind: _conv(r, kind)), layers, heads


def _conv(r: Reader, kind: str) -> StateCache | None:
    """A short-convolution layer's state; None for attention (the generic entry)."""
    return _short_conv_entry(r) if kind == "short_conv" else None


def _layer_kinds(r: Reader, layers: int) -> list[str]:
    """LFM2's layers as Lfm2Config.__post_init__ (transformers 5.24 models/lfm2/configuration_lfm2.py)
    derives them: an explicit ``layer_types`` wins ("conv" or "full_attention"; full_attn_idxs is
    then unused); else ``full_attn_idxs`` lists the attention layers and every other one is "conv";
    with neither, every layer is attention (the class default)."""
    if r.model_type == "lfm2_moe":
        # Lfm2MoeConfig: num_dense_layers picks a dense MLP over MoE in the first layers (weights).
        r.considered("num_dense_layers")
    if r.model_type == "lfm3":
        return _lfm3_kinds(r, layers)
    if r.raw.get("layer_types") is not None:
        r.considered("full_attn_idxs")
        listed = family_layer_types(r, layers, ("conv", "full_attention"), r.model_type)
        return ["short_conv" if t == "conv" else "full_attention" for t in listed]
    if r.model_type == "lfm2_moe":
        # Lfm2MoeConfig derives no list: its decoder layers index config.layer_types directly.
        raise ConfigError(f"config field '{r.where}layer_types' is missing: an lfm2_moe config lists each layer's type")
    if r.has("full_attn_idxs"):
        attention = set(r.int_list("full_attn_idxs"))
        outside = sorted(i for i in attention if not 0 <= i < layers)
        if outside:
            raise ConfigError(
                f"config field '{r.where}full_attn_idxs' holds layer {outside[0]}, outside the {layers} layers"
            )
    else:
        r.notes.append(f"no '{r.where}layer_types' or '{r.where}full_attn_idxs': every lfm2 layer is attention")
        attention = set(range(layers))
    return ["full_attention" if i in attention else "short_conv" for i in range(layers)]


def _lfm3_kinds(r: Reader, layers: int) -> list[str]:
    """LFM3's layers: ``layer_types`` ("conv", "sliding_attention", "full_attention"), else as
    Lfm3Config.__post_init__ derives them: layer i is full attention when i % 4 == 2, sliding when
    i % 4 == 0 and i > 0, a short convolution otherwise."""
    if r.raw.get("layer_types") is not None:
        listed = family_layer_types(r, layers, ("conv", "sliding_attention", "full_attention"), r.model_type)
    else:
        r.notes.append(f"no '{r.where}layer_types': lfm3's default pattern (full at i % 4 == 2, sliding at 4, 8, ...)")
        listed = [
            "full_attention" if i % 4 == 2 else "sliding_attention" if i % 4 == 0 and i > 0 else "conv"
            for i in range(layers)
        ]
    return ["short_conv" if t == "conv" else t for t in listed]


def _short_conv_entry(r: Reader) -> StateCache:
    """LFM2's gated short convolution (Lfm2ShortConv, transformers 5.24 models/lfm2/modeling_lfm2.py):
    a depthwise causal conv of kernel ``conv_L_cache`` over hidden_size channels (B * x), no
    recurrent state. The model must keep L_cache - 1 past inputs per channel; vLLM keeps exactly
    that (short_conv_state_shape: (conv_dim / tp, conv_kernel - 1), vllm/model_executor/layers/
    mamba/mamba_utils.py @ 02d71083); transformers' LinearAttentionLayer keeps the whole kernel."""
    hidden = r.positive_int(HIDDEN_KEYS)
    kernel = r.positive_int("conv_L_cache", default=3)  # Lfm2Config's default (Lfm3Config's: 7, r.defaults)
    # vLLM sizes the conv by conv_dim (Lfm2ShortConvDecoderLayer), transformers by hidden_size;
    # real checkpoints set them (and conv_dim_out) equal.
    for key in ("conv_dim", "conv_dim_out"):
        value = r.optional_positive_int(key)
        if value is not None and value != hidden:
            raise ConfigError(
                f"config field '{r.where}{key}' ({value}) differs from hidden_size ({hidden}): transformers' "
                "Lfm2ShortConv runs over hidden_size channels, vLLM's over conv_dim; kvcalc cannot tell which is meant"
            )
    # conv_use_xavier_init only initialises the weights.
    r.considered("conv_use_xavier_init")
    return StateCache(family="short_conv", conv_channels=hidden, conv_kernel=kernel, recurrent_elements=0)
