"""The guard: config fields kvcalc did not read that could shape the cache.

kvcalc is exact on the layouts it models; on a new architecture the danger is a confident number
that ignores a field it never read. The config reader records every key it consumes; whatever
is left is checked here by one documented rule over key names and values, so a field kvcalc
does not model is named in a warning instead of being silently ignored.

The rule. A key the reader did not consume is **cache-shaping** when

1. its value says something: not null, false, 0, "" or an empty list/object; and
2. its name (lower case) contains one of ``SHAPING_WORDS`` (heads, KV, windows, chunks, layers,
   attention, latent ranks, compression, indexers, sparsity, state-space and convolution
   state, per-kind geometry, layer patterns, cross-attention, KV sharing, per-layer blocks); and
3. it is not one of ``NOT_SHAPING`` (exact names) nor matches ``NOT_SHAPING_PARTS`` (fields
   that contain such a word but only size weights, MLPs or experts, or tune numerics: norms,
   dropouts, biases, RoPE, routing), each listed with why.

Objects are followed: an unread object whose own name is cache-shaping is named whole; an
unread object that is not is searched for cache-shaping keys inside (``a.b``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Words in a field name that can change what a layer caches, with what they would change.
SHAPING_WORDS: dict[str, str] = {
    "head": "head geometry",
    "kv": "K/V geometry",
    "key_value": "K/V geometry",
    "window": "an attention window",
    "sliding": "an attention window",
    "swa": "an attention window",
    "chunk": "attention chunks",
    "layer": "the per-layer layout",
    "pattern": "the per-layer layout",
    "hybrid": "the per-layer layout",
    "block_config": "per-layer blocks",
    "attention": "attention",
    "attn": "attention",
    "lora": "a latent (MLA) cache",
    "rank": "a latent (MLA) cache",
    "latent": "a latent (MLA) cache",
    "compress": "a compressed cache",
    "index": "a sparse-attention index cache",
    "sparse": "sparse attention",
    "topk": "sparse attention",
    "ssm": "a recurrent state",
    "mamba": "a recurrent state",
    "conv": "a convolution state",
    "state": "a recurrent state",
    "linear": "linear attention",
    "global": "per-kind geometry",
    "local": "per-kind geometry",
    "cross": "cross-attention",
    "shared": "KV sharing",
    "nope": "per-kind geometry",
}

# Exact names that contain a shaping word but do not shape the cache, and why.
NOT_SHAPING: dict[str, str] = {
    "attention_bias": "a bias on projections",
    "attention_dropout": "training only",
    "attn_pdrop": "training only",
    "attn_logit_softcapping": "numerics of scores",
    "query_pre_attn_scalar": "numerics of scores",
    "parallel_attn": "block wiring (Falcon), not what is cached",
    "use_qk_norm": "numerics",
    "q_lora_rank": "the query projection; MLA caches only the KV latent",
    "mamba_dt_rank": "the dt projection of Mamba, not its state",
    "time_step_rank": "the dt projection of Mamba, not its state",
    "topk_group": "MoE routing",
    "topk_method": "MoE routing",
    "norm_topk_prob": "MoE routing",
    "decoder_sparse_step": "MoE placement (Qwen-MoE), not attention",
    "mlp_only_layers": "MoE placement",
    "interleave_moe_layer_step": "MoE placement",
    "moe_layer_freq": "MoE placement",
    "first_k_dense_replace": "MoE placement",
    "cache_implementation": "a generate() default of transformers, not the model's layout",
    "use_cache": "a runtime switch",
    "relative_attention_num_buckets": "T5's position bias",
    "relative_attention_max_distance": "T5's position bias",
    # DeepSeek's multi-token-prediction layer caches only under speculative decoding, which
    # kvcalc does not model; published per-token figures leave it out (61 layers for V3).
    "num_nextn_predict_layers": "multi-token prediction, cached only with speculative decoding",
    "apply_residual_connection_post_layernorm": "block wiring",
    "for_llm_compressor": "a flag of the llm-compressor tool (quantized checkpoints)",
    # quantization_config.ignored_layers (fp8 checkpoints: MiMo-V2.5): modules whose weights stay
    # unquantized; it names weights, not what attention caches.
    "ignored_layers": "weights a quantization recipe leaves unquantized",
    # DeepSeek-V3.2, MiniMax-M3, ... as transformers 5.24 saves them: "dense" or "sparse" (MoE) MLP per layer.
    "mlp_layer_types": "the MLP of each layer (dense or MoE): weights",
    # Gemma 3n / Gemma 4 E models: per-layer input embeddings added to the residual stream.
    "hidden_size_per_layer_input": "per-layer input embeddings: weights",
    # Scalings of queries or scores (Granite's muP attention_multiplier, GPT-2's scale_attn_weights,
    # GPT-BigCode's softmax precision, Llama 4's attention temperature): numerics, not what is kept.
    "attention_multiplier": "numerics of scores",
    "scale_attn_weights": "numerics of scores",
    "attention_softmax_in_fp32": "numerics of scores",
    "scale_attention_softmax_in_fp32": "numerics of scores",
    "attn_scale": "numerics of queries",
    "attn_temperature_tuning": "numerics of queries",
    # Mamba hybrids (Jamba, Zamba, ...): the kernels used, not the state they keep.
    "use_mamba_kernels": "which kernels run the scan",
}

# Name parts that mark a field as sizing weights or numerics only.
NOT_SHAPING_PARTS: dict[str, str] = {
    "dropout": "training only",
    "pdrop": "training only",
    "norm": "normalisation numerics",
    "eps": "normalisation numerics",
    "rope": "position encoding",
    "rotary": "position encoding",
    "expert": "MoE weights",
    "moe": "MoE weights",
    "router": "MoE routing",
    "initializer": "initialisation",
    "encoder_": "the encoder, which caches nothing (cross-attention uses the decoder's heads)",
    "vision": "the vision tower",
    "_bias": "a bias",
    "intermediate": "MLP width",
    "mlp": "MLP weights",
    "vocab": "embeddings",
    "token_id": "special tokens",
    "token_index": "special tokens",
}


@dataclass(frozen=True)
class Unmodelled:
    """A config field kvcalc did not read that may shape the cache."""

    path: str
    value: Any
    why: str

    def message(self) -> str:
        shown = repr(self.value)
        if len(shown) > 40:
            shown = shown[:37] + "..."
        return (
            f"config field '{self.path}' = {shown} is not modelled by kvcalc and may shape the cache "
            f"({self.why}): this estimate may be wrong"
        )


def _says_something(value: Any) -> bool:
    return value not in (None, False, 0, "", [], {})


def shaping_reason(key: str) -> str | None:
    """Why a field named ``key`` may shape the cache, or None when the rule says it cannot."""
    name = key.lower()
    if name.startswith("_") or name in NOT_SHAPING:
        return None
    if any(part in name for part in NOT_SHAPING_PARTS):
        return None
    return next((why for word, why in SHAPING_WORDS.items() if word in name), None)


def unmodelled(data: Mapping[str, Any], seen: set[str], where: str = "") -> list[Unmodelled]:
    """Every unread, cache-shaping field of ``data`` (``seen``: the keys the reader consumed)."""
    found: list[Unmodelled] = []
    for key, value in data.items():
        if key in seen or not isinstance(key, str) or not _says_something(value):
            continue
        why = shaping_reason(key)
        if why is not None:
            found.append(Unmodelled(f"{where}{key}", value, why))
        elif isinstance(value, Mapping) and not any(part in key.lower() for part in NOT_SHAPING_PARTS):
            found += unmodelled(value, set(), f"{where}{key}.")
    return found
