"""DeepSeek-V3.2 (``deepseek_v32``): DeepSeek-V3's MLA layers, each with a sparse-attention indexer.

transformers 5.24 (models/deepseek_v32/configuration_deepseek_v32.py, cache_utils.py): the MLA
latent is the generic reader's; every MLA layer also caches one indexer key per token (DSA).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.inputs.hf.configs import (
    LAYER_KEYS,
    LAYER_TYPE_ALIASES,
    checked_layers,
    kinds_attention,
    layer_entries,
    layer_kinds,
)
from kvcalc.spec import IndexerCache

if TYPE_CHECKING:
    from kvcalc.inputs.hf.configs import Reader
    from kvcalc.inputs.hf.families import Layout

# DeepseekV32Config.__post_init__ (transformers 5.24) names every layer
# "indexed_attention": MLA with the indexer's key cache (DynamicIndexedLayer).
_ALIASES = {**LAYER_TYPE_ALIASES, "indexed_attention": "full_attention"}


def read(r: Reader) -> Layout:
    """One entry per layer, then one indexer entry per MLA layer."""
    layers = checked_layers(r, r.positive_int(LAYER_KEYS))
    kinds = layer_kinds(r, layers, aliases=_ALIASES)
    attention, heads = kinds_attention(r, kinds)
    caches = layer_entries(r, layers, kinds, attention)
    if attention is not None and attention.is_latent:
        # DeepSeek-V3.2's sparse attention (DSA): every MLA layer also caches one indexer key per
        # token (transformers' DynamicIndexedLayer.indexer_keys, [batch, seq, index_head_dim]), an
        # extra entry per layer as cross-attention is for encoder-decoder models. index_n_heads
        # sizes the indexer's queries and index_topk the tokens attention reads: compute, not cache.
        r.considered("index_n_heads", "index_topk")
        indexer = IndexerCache(head_dim=r.positive_int("index_head_dim"))
        latent_layers = [i for i, c in enumerate(caches) if c.is_latent]
        caches += [indexer] * len(latent_layers)
        r.entry_layers = [*range(layers), *latent_layers]
    return caches, layers, heads
