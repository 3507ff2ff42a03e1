"""MiniMax-M3 (``minimax_m3_vl``'s text model): GQA on every layer, plus a lightning indexer's key
cache on the sparse (MiniMax Sparse Attention) layers.

Read from transformers 5.24 (models/minimax_m3_vl/configuration_minimax_m3_vl.py, modeling_minimax_m3_vl.py):

- ``MiniMaxM3VLTextConfig.__post_init__`` takes the checkpoint's ``sparse_attention_config``: its
  legacy keys override the flat ones (``sparse_index_dim`` -> ``index_head_dim``, default 128, and
  the compute-only head count, block size, top-k and local blocks), and, when ``layer_types`` is
  absent, ``sparse_attention_freq`` makes each layer ``"minimax_m3_sparse"`` (truthy) or
  ``"full_attention"``; with neither, every layer is full attention.
- Every layer (``MiniMaxM3VLAttention``) caches K and V of ``num_key_value_heads`` heads of
  ``head_dim``, as GQA. A sparse layer also has a ``MiniMaxM3VLIndexer`` whose key
  (``k_proj`` to ``index_head_dim``, one head) ``MiniMaxM3VLSparseCacheLayer.idx_keys`` keeps for
  every token, ``[batch, 1, seq, index_head_dim]``: the indexer scores all of them to pick key blocks.
- The indexer has no value path: "the upstream checkpoint disables the index-value path on every
  sparse layer" (``sparse_disable_index_value``). SGLang's MiniMaxSparseKVPool would keep index
  values for a sparse layer where it is 0, which transformers cannot run, so kvcalc refuses it.
- vLLM (vllm/models/minimax_m3/common/indexer.py @ 0484480b): ``MiniMaxM3IndexerCache`` is a
  key-only ``MLAAttentionSpec`` of one head of ``index_head_dim`` per token, in
  ``indexer_kv_dtype`` (bf16 by default, vllm/config/attention.py), one per sparse layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import LAYER_KEYS, Reader, checked_layers, heads_and_head_dim, kv_heads
from kvcalc.inputs.hf.guard import unmodelled
from kvcalc.spec import AttentionCache, IndexerCache

if TYPE_CHECKING:
    from kvcalc.inputs.hf.families import Layout
    from kvcalc.spec import LayerCache

_FULL, _SPARSE = "full_attention", "minimax_m3_sparse"
# MiniMaxM3VLTextConfig's default index_head_dim (transformers 5.24).
_INDEX_HEAD_DIM = 128
# sparse_attention_config keys __post_init__ maps onto compute-only flat fields (indexer query heads,
# block size, top-k blocks, local blocks): they choose which cached keys attention reads, not how
# many are cached. sparse_init_block and sparse_score_type are read by the serving engines' kernels
# only (transformers' indexer always max-pools and forces no initial blocks): selection as well.
_SELECTION_KEYS = (
    "sparse_num_index_heads", "sparse_block_size", "sparse_topk_blocks", "sparse_local_block",
    "sparse_init_block", "sparse_score_type",
)  # fmt: skip
_SPARSE_READ = frozenset(
    {
        *_SELECTION_KEYS,
        "sparse_index_dim",
        "sparse_attention_freq",
        "sparse_disable_index_value",
        "use_sparse_attention",
    }
)


def read(r: Reader) -> Layout:
    """One K/V entry per layer, then one index-key entry per sparse layer."""
    layers = checked_layers(r, r.positive_int(LAYER_KEYS))
    heads, head_dim = heads_and_head_dim(r)
    attention = AttentionCache(kv_heads(r, heads), head_dim, head_dim)
    sparse_config = _sparse_config(r)
    kinds = _layer_kinds(r, sparse_config, layers)
    sparse = [i for i, kind in enumerate(kinds) if kind == _SPARSE]
    _check_index_values(r, sparse_config, sparse, layers)
    caches: list[LayerCache] = [attention] * layers
    r.entry_layers = [*range(layers), *sparse]
    if sparse:
        caches += [IndexerCache(head_dim=_index_head_dim(r, sparse_config), family="msa")] * len(sparse)
        # MiniMaxM3IndexerBackend.get_supported_kernel_block_sizes (vllm/models/minimax_m3/common/
        # indexer.py @ 0484480b) is [128]: vLLM's paged blocks for this model are 128 tokens.
        r.notes.append(
            "vLLM runs MiniMax-M3's sparse layers on 128-token blocks: with --engine vllm pass --block-size 128"
        )
    else:
        r.considered("index_head_dim")  # no sparse layer: no indexer
    # The flat compute-only fields of the indexer (see _SELECTION_KEYS), the MLP layout, and the
    # partial RoPE and QK norms: none changes what a layer keeps.
    r.considered("index_n_heads", "index_block_size", "index_topk_blocks", "index_local_blocks")
    r.considered("mlp_layer_types", "moe_layer_freq", "rotary_dim", "qk_norm_type", "use_qk_norm")
    # The MTP modules after the model are cached only with speculative decoding, not modelled.
    r.considered("num_mtp_modules", "num_nextn_predict_layers")
    return caches, layers, heads


def _sparse_config(r: Reader) -> Mapping[str, Any]:
    """``sparse_attention_config`` (empty when absent); its keys kvcalc does not read go to the guard."""
    value = r.raw.get("sparse_attention_config")
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"config field '{r.where}sparse_attention_config' must be an object")
    r.unmodelled += unmodelled(value, set(_SPARSE_READ), f"{r.where}sparse_attention_config.")
    return value


def _layer_kinds(r: Reader, sparse_config: Mapping[str, Any], layers: int) -> list[str]:
    listed = r.raw.get("layer_types")
    if listed is not None:
        if not isinstance(listed, list) or any(t not in (_FULL, _SPARSE) for t in listed):
            raise ConfigError(
                f"config field '{r.where}layer_types' must list {_FULL!r} or {_SPARSE!r} per layer (MiniMax-M3)"
            )
        kinds = list(listed)
        where = "layer_types"
    elif "sparse_attention_freq" in sparse_config:
        freq = sparse_config["sparse_attention_freq"]
        if not isinstance(freq, list) or not all(isinstance(f, int) and f in (0, 1) for f in freq):
            raise ConfigError(f"config field '{r.where}sparse_attention_config.sparse_attention_freq' must list 0 or 1")
        kinds = [_SPARSE if f else _FULL for f in freq]
        where = "sparse_attention_config.sparse_attention_freq"
    else:
        r.notes.append(f"no '{r.where}layer_types' or sparse_attention_freq: every MiniMax-M3 layer is full attention")
        return [_FULL] * layers
    if len(kinds) != layers:
        raise ConfigError(f"config field '{r.where}{where}' lists {len(kinds)} layers but the model has {layers}")
    _check_switch(r, sparse_config, kinds)
    return kinds


def _check_switch(r: Reader, sparse_config: Mapping[str, Any], kinds: list[str]) -> None:
    """``use_sparse_attention``: transformers 5.24 ignores it and builds the listed sparse layers; a
    checkpoint that lists sparse layers and switches them off cannot be read one way."""
    switch = sparse_config.get("use_sparse_attention")
    if switch is False and _SPARSE in kinds:
        raise ConfigError(
            f"config field '{r.where}sparse_attention_config.use_sparse_attention' is false but sparse layers are "
            "listed: transformers builds them anyway, other engines may not; kvcalc cannot tell which is meant"
        )
    if switch is not None and not isinstance(switch, bool):
        raise ConfigError(f"config field '{r.where}sparse_attention_config.use_sparse_attention' must be true or false")


def _check_index_values(r: Reader, sparse_config: Mapping[str, Any], sparse: list[int], layers: int) -> None:
    """A sparse layer with ``sparse_disable_index_value`` 0 would keep index values too (SGLang's
    index_kv_pool); transformers has no such path, so that layout is refused."""
    disable = sparse_config.get("sparse_disable_index_value")
    if disable is None:
        return
    key = f"{r.where}sparse_attention_config.sparse_disable_index_value"
    if not isinstance(disable, list) or len(disable) != layers:
        raise ConfigError(f"config field '{key}' must list 0 or 1 for each of the {layers} layers")
    with_values = [i for i in sparse if not disable[i]]
    if with_values:
        raise ConfigError(
            f"config field '{key}' keeps index values on sparse layer {with_values[0]}: transformers 5.24 has no "
            "index-value path (only keys are modelled)"
        )


def _index_head_dim(r: Reader, sparse_config: Mapping[str, Any]) -> int:
    """``sparse_attention_config.sparse_index_dim`` overrides ``index_head_dim`` (__post_init__)."""
    if "sparse_index_dim" in sparse_config:
        r.considered("index_head_dim")
        return r.check_positive("sparse_attention_config.sparse_index_dim", sparse_config["sparse_index_dim"])
    return r.positive_int("index_head_dim", default=_INDEX_HEAD_DIM)
