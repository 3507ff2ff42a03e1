"""A decoder's parameter count from its config's widths: what its matmuls multiply, whatever the
checkpoint's bytes.

``kvcalc speed`` needs the parameters a token goes through (2 FLOPs each) even when ``--weights``
gives a quantized checkpoint's size, where bytes / 2 would halve the FLOPs of an FP8 model; and
attention-DP layouts hold the attention weights on fewer GPUs than the rest. Counted here for the
layouts whose matrices the config fully names: multi-head / grouped-query attention (q, k, v, o:
hidden x heads x head_dim each side) and MLA (DeepSeek-V2's low-rank q and kv projections), gated
MLPs (gate, up, down) or two-matrix ones, routed and shared experts and the router. Norms are
counted (one vector of ``hidden`` per sublayer); biases are not (under 0.01% of any model here).
A state layer (Mamba, linear attention) or a layout the config does not spell out gives None with
the reason: the caller then says what it assumed instead.

Pure: a mapping and the layer kinds in, integers out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvcalc.dims import ModelDims
from kvcalc.kinds.base import Kind

# Model types whose MLP is two matrices (up, down) with no gate: GPT-2's and Falcon's GELU MLPs
# (modeling_gpt2.py GPT2MLP, modeling_falcon.py FalconMLP) and the others built the same way;
# Nemotron-H's relu2 experts too (read from the activation).
_UNGATED = frozenset(
    {
        "gpt2",
        "gpt_neox",
        "gptj",
        "falcon",
        "opt",
        "bloom",
        "phi",
        "mpt",
        "starcoder2",
        "gpt_bigcode",
        "RefinedWeb",
        "RefinedWebModel",
    }
)
_ATTENTION_KINDS = frozenset({Kind.FULL, Kind.SLIDING, Kind.CHUNKED, Kind.MLA})


@dataclass(frozen=True)
class ParameterCount:
    """``total``: every parameter (a tied head counted once); ``attention``: the attention
    projections of all layers (what attention-DP keeps per attention group)."""

    total: int
    attention: int


def _int(text: Mapping[str, Any], key: str) -> int:
    value = text.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def attention_params(dims: ModelDims, text: Mapping[str, Any]) -> int | None:
    """One layer's attention projections; None when the config does not name their widths."""
    h = dims.hidden
    if _int(text, "kv_lora_rank"):  # MLA: modeling_deepseek_v3.py DeepseekV3Attention
        heads, rank = dims.heads, _int(text, "kv_lora_rank")
        nope, rope, v = _int(text, "qk_nope_head_dim"), _int(text, "qk_rope_head_dim"), _int(text, "v_head_dim")
        if not (heads and nope and rope and v):
            return None
        q_rank = _int(text, "q_lora_rank")
        q = h * q_rank + q_rank + q_rank * heads * (nope + rope) if q_rank else h * heads * (nope + rope)
        return q + h * (rank + rope) + rank + rank * heads * (nope + v) + heads * v * h
    if not (dims.heads and dims.kv_heads and dims.head_dim):
        return None
    return 2 * h * dims.heads * dims.head_dim + 2 * h * dims.kv_heads * dims.head_dim


def count_parameters(
    dims: ModelDims, text: Mapping[str, Any], kinds: frozenset[Kind], *, model_type: str, tied: bool
) -> tuple[ParameterCount | None, str]:
    """The decoder's parameters from its widths, or None and the reason it cannot be counted."""
    other = sorted(str(k) for k in kinds - _ATTENTION_KINDS - {Kind.NONE})
    if other:
        return None, f"its {', '.join(other)} layers' weights are not counted from the config"
    if "block_configs" in text:  # NAS layouts (Nemotron-Super): each layer's widths of its own
        return None, "its per-layer block_configs are not counted from the config"
    attention = attention_params(dims, text)
    if attention is None:
        return None, "the config does not name every attention width"
    h, layers = dims.hidden, dims.layers
    gated = model_type not in _UNGATED
    matrices = 3 if gated else 2
    expert_matrices = 2 if "relu2" in (text.get("mlp_hidden_act"), text.get("hidden_act")) else 3
    mlp = 0
    if dims.is_moe:
        from kvcalc.calc.speed import moe_layer_count

        moe_layers, _ = moe_layer_count(text, layers)
        per_moe = dims.experts * expert_matrices * h * dims.expert_intermediate + dims.experts * h
        per_moe += 3 * h * dims.shared_intermediate
        mlp = moe_layers * per_moe + (layers - moe_layers) * matrices * h * dims.intermediate
    else:
        mlp = layers * matrices * h * dims.intermediate
    norms = layers * 2 * h + h
    embedding = dims.vocab * h
    total = embedding * (1 if tied else 2) + layers * attention + mlp + norms
    return ParameterCount(total, layers * attention), ""
