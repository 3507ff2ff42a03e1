"""Granite-4.0-H (IBM, model type granitemoehybrid): Mamba-2 layers between attention layers.

transformers 5.24 (models/granitemoehybrid/configuration_granitemoehybrid.py, modeling_granitemoehybrid.py):

- Layers. ``layer_types`` (alias ``layers_block_type``) names each layer "mamba" or "attention",
  which ``remap_legacy_layer_types`` turns into "linear_attention" (a Mamba-2 mixer) and
  "full_attention"; a file re-saved by transformers spells them that way. Without a list
  ``GraniteMoeHybridConfig.__post_init__`` makes **every** layer Mamba-2 (the generic reader would
  have read every layer as attention).
- Mamba-2 (``GraniteMoeHybridMambaLayer``): ``intermediate_size = mamba_expand x hidden_size``, the
  conv over ``intermediate_size + 2 x mamba_n_groups x mamba_d_state`` channels with kernel
  ``mamba_d_conv``, the SSM state ``(mamba_n_heads, mamba_d_head, mamba_d_state)``;
  ``validate_architecture`` requires ``mamba_n_heads x mamba_d_head = mamba_expand x hidden_size``
  and ``mamba_d_head: "auto"`` is that width / mamba_n_heads. vLLM sizes the state the same way
  (granitemoehybrid.py @ fc41bfe8: ``MambaMixer2(intermediate_size=mamba_expand * hidden_size,
  n_groups=mamba_n_groups, num_heads=mamba_n_heads, head_dim=mamba_d_head, ...)``;
  mamba_utils.py @ 2afe1e85 ``mamba2_state_shape``: conv ``(kernel - 1, intermediate + 2 x groups x
  state)``, SSM ``(heads, head_dim, state)``).
- Attention (``GraniteMoeHybridAttention``): K/V of ``num_key_value_heads`` (the query heads when
  null), head_dim ``hidden_size // num_attention_heads`` (vLLM always; transformers unless the
  file has a head_dim). The muP multipliers and NoPE (``position_embedding_type``) change no cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import (
    HEAD_KEYS,
    HIDDEN_KEYS,
    KV_HEAD_KEYS,
    LAYER_KEYS,
    attention_entry,
    checked_layers,
    family_layer_types,
    recurrent_dtype,
)
from kvcalc.spec import AttentionCache, LayerCache, StateCache

if TYPE_CHECKING:
    from kvcalc.inputs.hf.configs import Reader

# GraniteMoeHybridConfig's class defaults (transformers 5.24) for the Mamba-2 geometry.
_DEFAULTS = {"mamba_n_heads": 128, "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4, "mamba_expand": 2}
# The Mamba-2 geometry's fields (the SSM dtype fields are the generic reader's).
_MAMBA_KEYS = (*_DEFAULTS, "mamba_d_head", "mamba_ssm_dtype", "mamba_ssm_cache_dtype")
# Layer names, legacy and current (configuration_utils._LEGACY_LAYER_TYPE_REMAP).
_KINDS = {
    "mamba": "mamba",
    "linear_attention": "mamba",
    "attention": "full_attention",
    "full_attention": "full_attention",
}
# Fields that tune numerics or size weights: muP multipliers, biases, the scan's chunking and
# time-step clamp, the position encoding (NoPE or RoPE caches the same K).
_NOT_CACHE = (
    "attention_multiplier", "embedding_multiplier", "residual_multiplier", "logits_scaling", "mamba_chunk_size",
    "mamba_conv_bias", "mamba_proj_bias", "time_step_limit", "position_embedding_type", "normalization_function",
)  # fmt: skip


def read(r: Reader) -> tuple[list[LayerCache], int, int | None]:
    """One entry per layer, in order: a Mamba-2 state or K/V."""
    layers = checked_layers(r, r.positive_int(LAYER_KEYS))
    kinds = _kinds(r, layers)
    r.considered(*_NOT_CACHE)
    attention: AttentionCache | None = None
    heads: int | None = None
    if "full_attention" in kinds:
        attention, heads = _attention(r)
    else:  # every layer Mamba-2 (the class default): the attention geometry sizes nothing
        r.considered(*HEAD_KEYS, *KV_HEAD_KEYS, "head_dim")
    state = _mamba2_state(r) if "mamba" in kinds else None
    if state is None:  # no Mamba-2 layer: its geometry sizes nothing
        r.considered(*_MAMBA_KEYS)
    caches: list[LayerCache] = []
    for kind in kinds:
        entry = state if kind == "mamba" else attention
        assert entry is not None
        caches.append(entry)
    return caches, layers, heads


def _kinds(r: Reader, layers: int) -> list[str]:
    if r.model_type == "bamba":
        return _bamba_kinds(r, layers)
    key = r.first_key(("layer_types", "layers_block_type"))
    if key is None:
        r.notes.append(f"no '{r.where}layer_types': GraniteMoeHybridConfig makes every layer Mamba-2")
        return ["mamba"] * layers
    listed = r.raw[key]
    if key == "layer_types":
        listed = family_layer_types(r, layers, tuple(_KINDS), "granitemoehybrid")
    elif not isinstance(listed, list) or len(listed) != layers or any(t not in _KINDS for t in listed):
        raise ConfigError(
            f"config field '{r.where}{key}' must list one of {', '.join(map(repr, _KINDS))} for each of the "
            f"{layers} layers"
        )
    return [_KINDS[t] for t in listed]


def _bamba_kinds(r: Reader, layers: int) -> list[str]:
    """Bamba (transformers 5.24 models/bamba/configuration_bamba.py), the same Mamba-2 and attention
    layers as Granite-4.0-H: its layer list is a property, attention exactly at
    ``attn_layer_indices`` and Mamba-2 elsewhere (every layer without the list)."""
    if not r.has("attn_layer_indices"):
        r.notes.append(f"no '{r.where}attn_layer_indices': BambaConfig makes every layer Mamba-2")
        return ["mamba"] * layers
    indices = r.raw["attn_layer_indices"]
    if not isinstance(indices, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in indices
    ):
        raise ConfigError(f"config field '{r.where}attn_layer_indices' must list layer indices below {layers}")
    return ["full_attention" if i in indices else "mamba" for i in range(layers)]


def _attention(r: Reader) -> tuple[AttentionCache, int]:
    found, heads = attention_entry(r)
    entry = found.as_attention()
    if entry is None:
        raise ConfigError(f"config field '{r.where}kv_lora_rank': granitemoehybrid attention has no MLA")
    hidden = r.positive_int(HIDDEN_KEYS)
    if entry.k_head_dim * heads != hidden:
        raise ConfigError(
            f"config field '{r.where}head_dim' ({entry.k_head_dim}) is not hidden_size / num_attention_heads "
            f"({hidden} / {heads}): transformers would use it, vLLM's granitemoehybrid.py ignores it"
        )
    return entry, heads


def _int(r: Reader, key: str) -> int:
    return r.positive_int(key, default=_DEFAULTS[key])


def _mamba2_state(r: Reader) -> StateCache:
    hidden = r.positive_int(HIDDEN_KEYS)
    inner = _int(r, "mamba_expand") * hidden
    heads, groups, state = _int(r, "mamba_n_heads"), _int(r, "mamba_n_groups"), _int(r, "mamba_d_state")
    head_dim = _head_dim(r, inner, heads)
    if heads * head_dim != inner:
        raise ConfigError(
            f"config field '{r.where}mamba_d_head' ({head_dim}) x mamba_n_heads ({heads}) must equal mamba_expand x "
            f"hidden_size ({inner}), as GraniteMoeHybridConfig.validate_architecture requires"
        )
    return StateCache(
        family="mamba",
        conv_channels=inner + 2 * groups * state,
        conv_kernel=_int(r, "mamba_d_conv"),
        recurrent_elements=heads * head_dim * state,
        recurrent_dtype=recurrent_dtype(r),
    )


def _head_dim(r: Reader, inner: int, heads: int) -> int:
    """``mamba_d_head``; "auto" (the class default) is mamba_expand x hidden_size / mamba_n_heads."""
    value = r.raw.get("mamba_d_head", "auto")
    if value != "auto":
        return r.check_positive("mamba_d_head", value)
    if inner % heads:
        raise ConfigError(
            f"config field '{r.where}mamba_n_heads' ({heads}) must divide mamba_expand x hidden_size ({inner})"
        )
    r.notes.append(f"'{r.where}mamba_d_head' is \"auto\" (or absent): {inner} / {heads} = {inner // heads}")
    return inner // heads
