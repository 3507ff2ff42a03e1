"""The model's compute dimensions: what sizes activations, not the cache.

The runtime model (``kvcalc.runtime``) needs the widths a forward pass materialises: hidden size,
the MLP's intermediate width (dense and per expert), experts routed per token, and the vocabulary
the logits span. They are read here from the same config the cache geometry comes from, with a
note for every width that is missing or assumed. Pure: a mapping in, a dataclass out
(``ModelDims``: it lives in kvcalc.dims, so that calc and the engines read it without importing an
input format; re-exported here).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvcalc.dims import ModelDims
from kvcalc.inputs.hf.configs import family_default, text_config
from kvcalc.inputs.hf.context import count_field
from kvcalc.inputs.hf.families.encoder_decoder import DECODER_HEAD_KEYS, DECODER_KV_HEAD_KEYS, DECODER_LAYER_KEYS

# An encoder-decoder's widths are its decoder's (the side that generates and keeps a cache): its
# per-side names first, as the cache reader takes them (families/encoder_decoder.py).
_HIDDEN = ("hidden_size", "n_embd", "d_model", "dim")
_LAYERS = (*DECODER_LAYER_KEYS, "num_hidden_layers", "n_layer", "num_layers", "n_layers")
_HEADS = (*DECODER_HEAD_KEYS, "num_attention_heads", "n_head", "num_heads", "n_heads")
_KV_HEADS = (*DECODER_KV_HEAD_KEYS, "num_key_value_heads", "num_kv_heads", "n_head_kv")
_INTERMEDIATE = ("decoder_ffn_dim", "intermediate_size", "ffn_hidden_size", "n_inner", "ffn_dim", "d_ff")
_EXPERTS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts", "n_experts")
_TOP_K = ("num_experts_per_tok", "moe_topk", "num_experts_per_token", "top_k", "moe_k")
_MOE_INTERMEDIATE = ("moe_intermediate_size", "expert_intermediate_size")
_SHARED = ("shared_expert_intermediate_size",)

__all__ = ["ModelDims", "read_dims"]


def _first(config: Mapping[str, Any], keys: tuple[str, ...], where: str = "") -> tuple[int | None, str | None]:
    """The first of ``keys`` the config gives (configs.count_field: a value of the wrong type or
    sign is a ConfigError naming it); a 0 counts as absent (``num_experts: 0`` on a dense model)."""
    for key in keys:
        if config.get(key) == 0 and not isinstance(config.get(key), bool):
            continue
        given = config.get(key)
        if isinstance(given, list):
            continue  # per-layer values (Gemma 3n's intermediate_size, Hunyuan's moe_topk): no one width to read
        value = count_field(config, key, where)
        if value is not None:
            return value, key
    return None, None


def read_dims(raw: Mapping[str, Any]) -> ModelDims | None:
    """The widths of a config's language model; None when it lacks hidden size, layers or
    vocabulary (the runtime model then needs --overhead)."""
    text, where = text_config(raw)
    notes: list[str] = []
    hidden, _ = _first(text, _HIDDEN, where)
    layers, _ = _first(text, _LAYERS, where)
    vocab, _ = _first(text, ("vocab_size", "padded_vocab_size", "n_vocab"), where)
    if vocab is None:
        vocab, _ = _first(raw, ("vocab_size",))  # the top level of a wrapper
    if vocab is None and isinstance(text.get("model_type"), str):
        vocab = family_default(text["model_type"], "vocab_size")
        if vocab is not None:
            notes.append(f"'{where}vocab_size' not in config; used the {text['model_type']} default {vocab:,}")
    if hidden is None or layers is None or vocab is None:
        return None
    intermediate, _ = _first(text, _INTERMEDIATE)
    experts, _ = _first(text, _EXPERTS)
    top_k, _ = _first(text, _TOP_K)
    expert_width, _ = _first(text, _MOE_INTERMEDIATE)
    shared, _ = _first(text, _SHARED)
    n_shared, _ = _first(text, ("n_shared_experts", "num_shared_experts"))
    if experts and top_k:
        if expert_width is None:
            # Mixtral and gpt-oss give the expert width as intermediate_size (their MLPs are all MoE).
            expert_width, intermediate = intermediate or 0, 0
        if shared is None and n_shared and expert_width:
            shared = n_shared * expert_width  # DeepSeek: shared experts are n_shared x the expert width
        if not _has_dense_layers(text):
            intermediate = 0  # every layer routes: intermediate_size sizes no MLP that runs
    else:
        experts = top_k = 0
        expert_width = 0
    heads, _ = _first(text, _HEADS)
    kv_heads, _ = _first(text, _KV_HEADS)
    head_dim, _ = _first(text, ("head_dim", "qk_head_dim", "d_kv"))  # T5: d_kv
    if heads and not head_dim:
        head_dim = hidden // heads
    if intermediate is None:
        intermediate = 4 * hidden
        notes.append(f"no intermediate_size in the config: the MLP width is taken as 4 x hidden = {intermediate:,}")
    return ModelDims(
        hidden=hidden, layers=layers, vocab=vocab, intermediate=intermediate, experts=experts or 0,
        top_k=top_k or 0, expert_intermediate=expert_width or 0, shared_intermediate=shared or 0, heads=heads or 0,
        kv_heads=kv_heads or heads or 0, head_dim=head_dim or 0, notes=tuple(notes),
    )  # fmt: skip


def _has_dense_layers(text: Mapping[str, Any]) -> bool:
    """Whether an MoE model also has dense MLP layers: DeepSeek's first_k_dense_replace, Qwen-MoE's
    mlp_only_layers or a decoder_sparse_step above 1; other layouts are assumed to (the wider
    guess for a peak)."""
    if "first_k_dense_replace" in text:
        return bool(text.get("first_k_dense_replace"))
    if "mlp_only_layers" in text or "decoder_sparse_step" in text:
        return bool(text.get("mlp_only_layers")) or (text.get("decoder_sparse_step") or 1) > 1
    return True
