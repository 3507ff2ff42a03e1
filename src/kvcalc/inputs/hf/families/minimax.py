"""MiniMax-Text-01 / MiniMax-M1 (``minimax`` in transformers; ``minimax_text_01`` and ``minimax_m1``
in MiniMax's own remote code): lightning (linear) attention in most layers, softmax attention in
the rest, chosen per layer.

Read from transformers 5.24 (models/minimax/configuration_minimax.py, modeling_minimax.py): each
layer is ``layer_types[i]``, "full_attention" or "linear_attention" (with no list,
MiniMaxConfig.__post_init__ alternates them, layer 0 full). A lightning layer
(MiniMaxLightningAttention) keeps no K/V: MiniMaxCache.linear_cache holds one K^T V matrix of
head_dim x head_dim per attention head per sequence, in the dtype of the values. The softmax layers
are the generic reader's GQA K/V. MiniMax's remote-code configs name the layers in
``attn_type_list`` instead: 1 is softmax attention, 0 lightning (as vLLM's ModelConfig.get_num_layers
counts the attention layers of "Hybrid model Minimax", ``t == 1``). head_dim defaults to
hidden_size / num_attention_heads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import (
    LAYER_KEYS,
    checked_layers,
    family_layer_types,
    heads_and_head_dim,
    kinds_attention,
    layer_entries,
)
from kvcalc.spec import StateCache

if TYPE_CHECKING:
    from kvcalc.inputs.hf.configs import Reader
    from kvcalc.inputs.hf.families import Layout


def read(r: Reader) -> Layout:
    """One entry per layer: a lightning state or softmax-attention K/V."""
    layers = checked_layers(r, r.positive_int(LAYER_KEYS))
    kinds = _layer_kinds(r, layers)
    # block_size tiles the lightning prefill; the alpha/beta factors scale the residual stream
    # around each attention and MLP (MiniMaxDecoderLayer): neither sizes a cache.
    r.considered(
        "block_size", "full_attn_alpha_factor", "full_attn_beta_factor", "linear_attn_alpha_factor",
        "linear_attn_beta_factor",
    )  # fmt: skip
    attention, heads = kinds_attention(r, kinds)
    return layer_entries(r, layers, kinds, attention, own=lambda kind: _lightning(r, kind)), layers, heads


def _layer_kinds(r: Reader, layers: int) -> list[str]:
    if r.raw.get("layer_types") is not None:
        r.considered("attn_type_list")
        listed = family_layer_types(r, layers, ("full_attention", "linear_attention"), r.model_type)
        return ["full_attention" if t == "full_attention" else "lightning_attention" for t in listed]
    if r.raw.get("attn_type_list") is not None:
        flags = r.int_list("attn_type_list")
        if len(flags) != layers or any(f not in (0, 1) for f in flags):
            raise ConfigError(
                f"config field '{r.where}attn_type_list' must hold one 0 (lightning) or 1 (softmax) per layer "
                f"({layers})"
            )
        return ["full_attention" if f == 1 else "lightning_attention" for f in flags]
    r.notes.append(
        f"no '{r.where}layer_types': {r.model_type} alternates softmax and lightning layers, layer 0 softmax"
    )
    return ["full_attention" if i % 2 == 0 else "lightning_attention" for i in range(layers)]


def _lightning(r: Reader, kind: str) -> StateCache | None:
    """A lightning layer's K^T V state; None for softmax attention (the generic entry)."""
    if kind != "lightning_attention":
        return None
    heads, head_dim = heads_and_head_dim(r)
    return StateCache(
        family="lightning_attention", conv_channels=0, conv_kernel=1, recurrent_elements=heads * head_dim * head_dim
    )
