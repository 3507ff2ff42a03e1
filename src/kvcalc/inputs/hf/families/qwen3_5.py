"""Qwen3.5 (``qwen3_5_text``, and ``qwen3_5_moe_text`` for the MoE sizes): Gated DeltaNet linear
attention layers with a fixed state, and full attention every ``full_attention_interval`` layers.

Sources. transformers 5.24 ``models/qwen3_5/configuration_qwen3_5.py`` (``Qwen3_5TextConfig.
__post_init__``: ``layer_types``, else ``full_attention_interval`` (4 when absent) with full attention
at every interval-th layer; the interval is used only without a list) and ``modeling_qwen3_5.py``
(``Qwen3_5Attention``: ``q_proj`` yields the query and an output gate, ``head_dim * 2`` per head,
whatever ``attn_output_gate`` says; K and V are ``num_key_value_heads x head_dim``;
``Qwen3_5GatedDeltaNet``: the conv and recurrent state of ``configs.state_entry``; the ``mtp.*``
weights are not loaded). vLLM ``vllm/model_executor/models/config.py``
(``Qwen3_5ForConditionalGenerationConfig`` keeps the recurrent state in ``mamba_ssm_dtype``, read by
``configs.recurrent_dtype``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.inputs.hf.configs import LAYER_KEYS, attention_entry, checked_layers, family_layer_types, state_entry

if TYPE_CHECKING:
    from kvcalc.inputs.hf.configs import Reader
    from kvcalc.spec import LayerCache

_FULL, _LINEAR = "full_attention", "linear_attention"


def read(r: Reader) -> tuple[list[LayerCache], int, int | None]:
    layers = checked_layers(r, r.positive_int(LAYER_KEYS))
    kinds = _layer_kinds(r, layers)
    full, heads = attention_entry(r)
    linear = state_entry(r, _LINEAR) if _LINEAR in kinds else None
    if linear is None:  # the delta-rule state's dtype sizes nothing without a linear layer
        r.considered("mamba_ssm_dtype", "mamba_ssm_cache_dtype")
    # attn_output_gate: the gate comes out of q_proj beside the query and multiplies the output;
    # nothing of it is cached. mtp_*: the multi-token-prediction layer, cached only with
    # speculative decoding, which kvcalc does not model (like num_nextn_predict_layers).
    r.considered("attn_output_gate", "mtp_num_hidden_layers", "mtp_use_dedicated_embeddings")
    caches: list[LayerCache] = [full if kind == _FULL or linear is None else linear for kind in kinds]
    return caches, layers, heads


def _layer_kinds(r: Reader, layers: int) -> list[str]:
    if r.raw.get("layer_types") is not None:
        r.considered("full_attention_interval")  # Qwen3_5TextConfig uses it only without layer_types
        return family_layer_types(r, layers, (_LINEAR, _FULL), r.model_type)
    interval = r.positive_int("full_attention_interval", default=4)
    return [_FULL if (i + 1) % interval == 0 else _LINEAR for i in range(layers)]
