"""NAS models with per-layer ``block_configs`` (model type ``nemotron-nas``): Llama-3.3-Nemotron-Super-49B,
Llama-3.1-Nemotron-Ultra-253B; architecture DeciLMForCausalLM, which vLLM maps to nemotron_nas.py.

Every layer is one block of ``block_configs``; its attention is a no-op, a linear layer, or
grouped-query attention with ``n_heads_in_group`` query heads per KV head (vLLM's nemotron_nas.py,
vllm-project/vllm @ 00bd1493; DeciLM's modeling_decilm.py). Another model type's block_configs is
left to the guard.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import KV_HEAD_KEYS, LAYER_KEYS, checked_layers, heads_and_head_dim
from kvcalc.inputs.hf.guard import unmodelled
from kvcalc.spec import AttentionCache, NoCache

if TYPE_CHECKING:
    from kvcalc.inputs.hf.configs import Reader
    from kvcalc.inputs.hf.families import Layout
    from kvcalc.spec import LayerCache

_NO_CACHE = "a NAS block whose attention is a no-op or a linear layer (block_configs)"
# Keys of a NAS block's attention that kvcalc reads; the guard checks the others (a window_length or
# sink tokens that are set would change what the layer keeps).
_ATTENTION_READ = frozenset({"no_op", "replace_with_linear", "n_heads_in_group"})


def read(r: Reader) -> Layout:
    """One entry per block: grouped-query K/V, or nothing for a no-op or linear attention."""
    layers = checked_layers(r, r.positive_int(LAYER_KEYS))
    _kinds(r, layers)
    # NAS: the top-level num_key_value_heads is null; every attention block says its own.
    r.considered(*KV_HEAD_KEYS)
    heads, head_dim = heads_and_head_dim(r)
    return _attention(r, AttentionCache(heads, head_dim, head_dim), heads), layers, heads


def _kinds(r: Reader, layers: int) -> list[str]:
    """NAS (DeciLM, Llama-Nemotron) ``block_configs``: one block per layer; its attention is a
    no-op, a linear layer, or grouped-query attention with ``n_heads_in_group`` query heads per KV
    head. vLLM's nemotron_nas.py (vllm-project/vllm @ 00bd1493) builds no attention for a no-op;
    DeciLM's modeling_decilm.py replaces it with a linear layer for replace_with_linear. Neither
    caches anything. The per-layer KV heads are read in ``_attention``."""
    if not r.has("block_configs"):
        raise ConfigError(
            f"config field '{r.where}block_configs' is missing: a {r.model_type} config lists one block per layer"
        )
    blocks = r.raw["block_configs"]
    if not isinstance(blocks, list) or not all(isinstance(b, Mapping) for b in blocks):
        raise ConfigError(f"config field '{r.where}block_configs' must be a list of objects")
    if len(blocks) != layers:
        raise ConfigError(
            f"config field '{r.where}block_configs' lists {len(blocks)} layers but the model has {layers}"
        )
    kinds = []
    linear = False
    for i, block in enumerate(blocks):
        attention = _block_attention(r, block, i)
        replaced = _flag(r, attention, i, "replace_with_linear")
        linear = linear or replaced
        kinds.append("no_cache" if _flag(r, attention, i, "no_op") or replaced else "full_attention")
    if linear:
        r.notes.append(
            "block_configs: attention replaced with a linear layer (DeciLM's modeling_decilm.py) caches nothing; "
            "vLLM's nemotron_nas.py implements only no_op attention"
        )
    return kinds


def _block_attention(r: Reader, block: Mapping[str, Any], i: int) -> Mapping[str, Any]:
    attention = block.get("attention")
    if not isinstance(attention, Mapping):
        raise ConfigError(f"config field '{r.where}block_configs[{i}].attention' must be an object")
    return attention


def _flag(r: Reader, attention: Mapping[str, Any], i: int, key: str) -> bool:
    value = attention.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ConfigError(
            f"config field '{r.where}block_configs[{i}].attention.{key}' must be true or false, got {value!r}"
        )
    return value


def _attention(r: Reader, base: AttentionCache, heads: int) -> list[LayerCache]:
    """One entry per NAS layer: K/V heads = num_attention_heads // n_heads_in_group (vLLM
    nemotron_nas.py DeciLMDecoderLayer), nothing for a no-op or linear attention."""
    caches: list[LayerCache] = []
    for i, block in enumerate(r.raw["block_configs"]):
        attention = _block_attention(r, block, i)
        where = f"{r.where}block_configs[{i}]."
        # The ffn sub-block sizes only the MLP; anything else in the block is checked by the guard.
        r.unmodelled += unmodelled({k: v for k, v in block.items() if k not in ("attention", "ffn")}, set(), where)
        if _flag(r, attention, i, "no_op") or _flag(r, attention, i, "replace_with_linear"):
            caches.append(NoCache(block=_NO_CACHE))
            continue
        r.unmodelled += unmodelled(attention, set(_ATTENTION_READ), f"{where}attention.")
        group = attention.get("n_heads_in_group")
        if isinstance(group, bool) or not isinstance(group, int) or group <= 0:
            raise ConfigError(
                f"config field '{where}attention.n_heads_in_group' must be a positive integer, got {group!r}"
            )
        if heads % group:
            raise ConfigError(
                f"config field '{where}attention.n_heads_in_group' ({group}) must divide the {heads} attention heads"
            )
        caches.append(replace(base, kv_heads=heads // group, expanded_heads=None))
    return caches
