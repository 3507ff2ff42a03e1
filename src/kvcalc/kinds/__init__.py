"""What each layer of a model keeps in its cache, independent of any workload.

A model is a tuple of per-layer cache entries. Every architecture kvcalc knows is one of ten
entry kinds, so the estimator has a single mechanism instead of a branch per model family:

- ``AttentionCache``: K and V per token (full, sliding-window, chunked, or cross-attention over an
  encoder's output or over images);
- ``LatentCache``: one compressed latent per token (MLA), no separate K and V;
- ``IndexerCache``: a sparse-attention indexer's one key per token (DeepSeek-V3.2's DSA,
  MiniMax-M3's MSA), beside the layer it picks tokens for;
- ``StateCache``: a fixed-size state per sequence (linear attention, Mamba, LFM2's short
  convolution), nothing per token;
- ``SharedCache``: a layer that reuses another layer's K and V and stores nothing itself;
- ``NoCache``: a layer with no attention and no state (an MLP or MoE block, a no-op attention);
- ``KVWindowCache``: a sliding window whose one row per token is both key and value
  (DeepSeek-V4's shared-KV MQA);
- ``CompressedCache``: one pooled key-and-value entry per ``ratio`` tokens (DeepSeek-V4's
  compressed attention);
- ``CompressorBufferCache``: the tokens a DeepSeek-V4 compressor has projected but not yet pooled;
- ``CompressorOverlapCache``: a DeepSeek-V4 CSA compressor's carried overlapping window.

Each kind answers for itself (``LayerKind``'s methods, in kvcalc.kinds.base): what it stores, how
an engine lays it out, and what kvcalc speed charges for attending over it. A new kind is one
``LayerKind`` subclass in the module of its family, and one more member of ``LayerCache``;
tests/test_kinds.py then checks it under every engine.

Modules: ``base`` (``LayerKind``, ``Kind`` and the arithmetic the kinds share), ``attention``
(``AttentionCache``, ``KVWindowCache``), ``latent``, ``indexer``, ``state``, ``shared``
(``SharedCache``, ``NoCache``) and ``compressed`` (DeepSeek-V4's compressed entries and compressor
state). kvcalc.spec builds models out of these kinds (and re-exports them); nothing here imports it.
"""

from __future__ import annotations

from kvcalc.kinds.attention import AttentionCache, KVWindowCache
from kvcalc.kinds.base import Kind, LayerKind, TokenSource, causal_window_sum, heads_per_gpu
from kvcalc.kinds.compressed import CompressedCache, CompressorBufferCache, CompressorOverlapCache
from kvcalc.kinds.indexer import IndexerCache
from kvcalc.kinds.latent import LatentCache
from kvcalc.kinds.shared import NoCache, SharedCache
from kvcalc.kinds.state import StateCache

LayerCache = (
    AttentionCache
    | LatentCache
    | StateCache
    | SharedCache
    | NoCache
    | IndexerCache
    | KVWindowCache
    | CompressedCache
    | CompressorBufferCache
    | CompressorOverlapCache
)

__all__ = [
    "AttentionCache", "CompressedCache", "CompressorBufferCache", "CompressorOverlapCache", "IndexerCache",
    "KVWindowCache", "Kind", "LatentCache", "LayerCache", "LayerKind", "NoCache", "SharedCache", "StateCache",
    "TokenSource", "causal_window_sum", "heads_per_gpu",
]  # fmt: skip
