"""Zamba2 (Zyphra): a Mamba-2 mixer in every layer, plus a shared transformer block at the hybrid layers.

transformers 5.24 (models/zamba2/configuration_zamba2.py, modeling_zamba2.py): ``layers_block_type``
lists every layer as "mamba" (remapped to "linear_attention") or "hybrid". Each layer has its own
``Zamba2MambaMixer``; a hybrid layer first runs one of ``num_mem_blocks`` shared attention blocks,
whose K/V ``cache.update`` stores under that hybrid layer's own index (``DynamicCache(config)``
gives it a ``LinearAttentionAndFullAttentionLayer``). Sharing the block's weights shares no cache:
every hybrid layer keeps its own K/V. vLLM does the same (zamba2.py @ 0527cbc7: one ``Attention``
per hybrid layer, "KV cache is unique for every attention layer", and a ``MambaMixer2`` in every
layer). So the entries are one Mamba-2 state per layer, in order (the probe pairs them with
transformers' layers), then one attention entry per hybrid layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import HEAD_KEYS, HIDDEN_KEYS, checked_layers, recurrent_dtype
from kvcalc.spec import AttentionCache, LayerCache, StateCache

if TYPE_CHECKING:
    from kvcalc.inputs.hf.configs import Reader

# Zamba2Config's class defaults (transformers 5.24).
_DEFAULTS = {
    "hidden_size": 2560, "num_attention_heads": 32, "mamba_d_state": 64, "mamba_d_conv": 4, "mamba_expand": 2,
    "mamba_ngroups": 1, "n_mamba_heads": 8,
}  # fmt: skip

# Zamba2Config.__post_init__ without a layers_block_type: 54 layers, 9 of them hybrid.
_DEFAULT_BLOCKS = (
    ["mamba"]
    + (["mamba"] * 5 + ["hybrid"]) * 7
    + ["mamba"] * 4
    + ["hybrid"]
    + ["mamba"] * 3
    + ["hybrid"]
    + ["mamba"] * 2
)
# Its layer names, the legacy "mamba" remapped to "linear_attention" (remap_legacy_layer_types).
_BLOCK_NAMES = ("mamba", "linear_attention", "hybrid")

# Fields that size weights or tune numerics, not what a layer keeps: the shared blocks' count and
# adapters (weights only: every hybrid layer caches its own K/V), RoPE, the scan's chunking and time
# steps, biases; kv_channels and num_query_groups, which Zamba2Config sets and nothing reads.
_NOT_CACHE = (
    "num_mem_blocks", "use_shared_attention_adapter", "use_shared_mlp_adapter", "adapter_rank", "use_mem_rope",
    "use_long_context", "chunk_size", "use_mem_eff_path", "use_mamba_kernels", "use_conv_bias", "add_bias_linear",
    "time_step_min", "time_step_max", "time_step_floor", "num_logits_to_keep", "kv_channels", "num_query_groups",
)  # fmt: skip


def read(r: Reader) -> tuple[list[LayerCache], int, int | None]:
    """A Mamba-2 state entry for every layer, then an attention entry for every hybrid layer."""
    blocks = _blocks(r)
    layers = checked_layers(r, len(blocks))
    r.considered(*_NOT_CACHE)
    hidden = _int(r, HIDDEN_KEYS)
    _check_derived(r, hidden, blocks)
    attention, heads = _attention(r, hidden)
    state = _mamba2_state(r, hidden)
    hybrids = [i for i, b in enumerate(blocks) if b == "hybrid"]
    r.entry_layers = [*range(layers), *hybrids]
    r.notes.append(
        f"every one of the {layers} zamba2 layers keeps a Mamba-2 state, and its {len(hybrids)} hybrid layers "
        "also K/V of their own (the shared blocks share weights, not caches)"
    )
    return [*([state] * layers), *([attention] * len(hybrids))], layers, heads


def _int(r: Reader, keys: tuple[str, ...] | str) -> int:
    names = (keys,) if isinstance(keys, str) else keys
    return r.positive_int(names, default=next((_DEFAULTS[k] for k in names if k in _DEFAULTS), None))


def _blocks(r: Reader) -> list[str]:
    """``layers_block_type`` (alias ``layer_types``), else Zamba2Config's 54-layer default. The model
    has as many layers as the list (Zamba2Model builds one per entry)."""
    key = r.first_key(("layers_block_type", "layer_types"))
    if key is None:
        r.notes.append(f"no '{r.where}layers_block_type': Zamba2Config's default of 54 layers, 9 of them hybrid")
        blocks = list(_DEFAULT_BLOCKS)
    else:
        listed = r.raw[key]
        if not isinstance(listed, list) or not listed or not all(isinstance(b, str) for b in listed):
            raise ConfigError(f"config field '{r.where}{key}' must be a non-empty list of strings")
        unknown = sorted({b for b in listed if b not in _BLOCK_NAMES})
        if unknown:
            raise ConfigError(
                f"config field '{r.where}{key}' holds unknown layer type {unknown[0]!r}; "
                "zamba2 layers are 'mamba' (or 'linear_attention') and 'hybrid'"
            )
        blocks = list(listed)
    stated = r.raw.get("num_hidden_layers")
    if stated is not None and stated != len(blocks):
        r.notes.append(
            f"'{r.where}num_hidden_layers' ({stated!r}) differs from the {len(blocks)} layers of layers_block_type; "
            "transformers' Zamba2Model builds one layer per entry"
        )
    return blocks


def _attention(r: Reader, hidden: int) -> tuple[AttentionCache, int]:
    """Zamba2Attention: K and V of ``attention_head_dim`` per head. Zamba2Config.__post_init__
    derives it as attention_hidden_size // heads = 2 x hidden_size // heads (the shared block attends
    over the layer's input concatenated with the embeddings), but a value in the file (or its alias
    ``head_dim``) is kept over the derived one, and vLLM's zamba2.py reads the same attribute. K/V
    heads: num_key_value_heads, all the query heads when null."""
    heads = _int(r, HEAD_KEYS)
    key = r.first_key(("attention_head_dim", "head_dim"))
    if key is not None:
        head_dim = r.check_positive(key, r.raw[key])
    elif 2 * hidden % heads:
        raise ConfigError(
            f"config field '{r.where}num_attention_heads' ({heads}) must divide attention_hidden_size "
            f"2 x hidden_size = {2 * hidden}"
        )
    else:
        head_dim = 2 * hidden // heads
    kv = r.optional_positive_int("num_key_value_heads")
    if kv is None:
        r.notes.append(f"no '{r.where}num_key_value_heads': Zamba2Config caches K/V for all {heads} heads")
        kv = heads
    if kv > heads or heads % kv:
        raise ConfigError(f"config field '{r.where}num_key_value_heads' ({kv}) must divide the {heads} query heads")
    if kv != heads:
        r.notes.append(
            f"vLLM's zamba2.py caches K/V for all {heads} attention heads (it reads no num_key_value_heads); "
            f"transformers caches {kv}: --engine vllm may differ"
        )
    return AttentionCache(kv_heads=kv, k_head_dim=head_dim, v_head_dim=head_dim), heads


def _check_derived(r: Reader, hidden: int, blocks: list[str]) -> None:
    """Fields Zamba2Config derives but keeps from the file when given: a value that disagrees
    breaks the model in transformers and vLLM alike, so it is refused rather than guessed around."""
    hybrid_ids = [i for i, b in enumerate(blocks) if b == "hybrid"]
    if r.has("hybrid_layer_ids") and r.raw["hybrid_layer_ids"] != hybrid_ids:
        # Both look each hybrid layer up in it (transformers' layer_dic, vLLM's layer2block_map).
        raise ConfigError(
            f"config field '{r.where}hybrid_layer_ids' must list the hybrid layers of layers_block_type, {hybrid_ids}"
        )
    if r.has("attention_hidden_size") and r.raw["attention_hidden_size"] != 2 * hidden:
        # The shared block's input is the layer input concatenated with the embeddings: 2 x hidden_size.
        raise ConfigError(f"config field '{r.where}attention_hidden_size' must be 2 x hidden_size = {2 * hidden}")


def _mamba2_state(r: Reader, hidden: int) -> StateCache:
    """Zamba2MambaMixer: intermediate = mamba_expand x hidden_size, conv over intermediate +
    2 x mamba_ngroups x mamba_d_state channels, SSM state (n_mamba_heads, intermediate //
    n_mamba_heads, mamba_d_state). vLLM's Zamba2ForCausalLM.get_mamba_state_shape_from_config
    sizes the same (mamba2_state_shape)."""
    inner = _int(r, "mamba_expand") * hidden
    n_heads = _int(r, "n_mamba_heads")
    if inner % n_heads:
        raise ConfigError(
            f"config field '{r.where}n_mamba_heads' ({n_heads}) must divide mamba_expand x hidden_size ({inner})"
        )
    # transformers keeps a mamba_headdim from the file (and views the heads by it); vLLM derives it.
    if r.has("mamba_headdim") and r.raw["mamba_headdim"] != inner // n_heads:
        raise ConfigError(
            f"config field '{r.where}mamba_headdim' must be mamba_expand x hidden_size / n_mamba_heads "
            f"= {inner // n_heads}"
        )
    d_state = _int(r, "mamba_d_state")
    return StateCache(
        family="mamba",
        conv_channels=inner + 2 * _int(r, "mamba_ngroups") * d_state,
        conv_kernel=_int(r, "mamba_d_conv"),
        recurrent_elements=n_heads * (inner // n_heads) * d_state,
        recurrent_dtype=recurrent_dtype(r),
    )
