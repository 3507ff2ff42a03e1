"""A model's cache geometry (``ModelSpec``): one entry per layer, each one of the layer kinds of
kvcalc.kinds, which answer for themselves what they store, how an engine lays them out, and what
kvcalc speed charges for attending over them. The kinds are re-exported here, where callers have
always imported them from.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from kvcalc.dtypes import DType
from kvcalc.kinds import (
    AttentionCache,
    CompressedCache,
    CompressorBufferCache,
    CompressorOverlapCache,
    IndexerCache,
    Kind,
    KVWindowCache,
    LatentCache,
    LayerCache,
    LayerKind,
    NoCache,
    SharedCache,
    StateCache,
    TokenSource,
    causal_window_sum,
    heads_per_gpu,
)

__all__ = [
    "MAX_DIMENSION", "MAX_LAYERS", "AttentionCache", "CompressedCache", "CompressorBufferCache",
    "CompressorOverlapCache", "IndexerCache", "KVWindowCache", "Kind", "LatentCache", "LayerCache", "LayerKind",
    "ModelSpec", "NoCache", "SharedCache", "StateCache", "TokenSource", "_Layer", "causal_window_sum",
    "heads_per_gpu",
]  # fmt: skip

# The kinds' base as it was named while it lived here.
_Layer = LayerKind

# Bounds every way into a model (config, preset, hand geometry, API) shares. The largest real
# models have a few hundred layers and dimensions of a few tens of thousands; past these a number
# is a typo or an attack, and loops over layers must stay short.
MAX_LAYERS = 2**16
MAX_DIMENSION = 2**24


@dataclass(frozen=True)
class ModelSpec:
    """A model's cache geometry: one entry per cached attention (or state) block, in order.

    ``layers`` counts the decoder's layers; encoder-decoder models add one cross-attention entry
    per decoder layer, so ``len(caches)`` may exceed it. ``notes`` record every default that was
    applied while reading the model, so no assumption is silent.
    """

    name: str
    caches: tuple[LayerCache, ...]
    layers: int
    query_heads: int | None
    model_type: str
    dtype: DType | None
    notes: tuple[str, ...] = ()
    encoder_tokens: int | None = None
    # Tokens one image puts in each image cross-attention layer (Llama 3.2 Vision: tiles x patches
    # per tile, from the vision config); None when the config does not say.
    image_tokens: int | None = None
    # Config fields that may shape the cache but that kvcalc does not model (kvcalc.inputs.hf.guard): each
    # a sentence saying the estimate may be wrong.
    warnings: tuple[str, ...] = ()
    # The decoder layer of each entry of ``caches`` where some layer holds more than one (Falcon-H1:
    # attention and a Mamba-2 state in every layer; Zamba2: K/V too in its hybrid layers; an
    # indexer's keys; encoder-decoder cross-attention); empty: entry i is layer i. Pipeline
    # parallel gives a stage every entry of its layers.
    entry_layers: tuple[int, ...] = ()
    # The longest sequence the config allows (max_position_embeddings or its kin, times a RoPE
    # factor that extends it) and the words saying where it came from; None when it does not say.
    max_context: int | None = None
    max_context_key: str | None = None
    # The config's own top-level model_type where the cached model is a nested text model (gemma3
    # around gemma3_text, mllama around mllama_text_model); engines that decide by the whole
    # checkpoint's architecture read it (SGLang's multimodal and hybrid-SWA lists).
    top_model_type: str | None = None

    @property
    def checkpoint_type(self) -> str:
        """The model_type of the whole checkpoint: the top-level one, else the cached model's."""
        return self.top_model_type or self.model_type

    def __post_init__(self) -> None:
        # A layout with more entries than layers must say whose they are, or pipeline stages would
        # be cut through the wrong layers.
        if self.entry_layers:
            if len(self.entry_layers) != len(self.caches) or not all(0 <= i < self.layers for i in self.entry_layers):
                raise ValueError(f"{self.name}: entry_layers must name a decoder layer for each of the cache entries")
        elif len(self.caches) != self.layers:
            raise ValueError(
                f"{self.name}: {len(self.caches)} cache entries for {self.layers} layers need entry_layers"
            )

    @cached_property
    def groups(self) -> tuple[tuple[LayerCache, int], ...]:
        """Each distinct entry of ``caches`` in first-seen order, with how many entries it has:
        what the estimate and speed sum over, so a deep model costs its kinds, not its layers.
        (Worked out once per spec: a frozen dataclass keeps a cached_property in its __dict__.)"""
        counts: dict[LayerCache, int] = {}
        for cache in self.caches:
            counts[cache] = counts.get(cache, 0) + 1
        return tuple(counts.items())

    @property
    def is_encoder_decoder(self) -> bool:
        return any(c.tokens == "encoder" for c, _ in self.groups)

    @property
    def has_image_cross_attention(self) -> bool:
        """Whether some layers cache image tokens (Llama 3.2 Vision's cross-attention layers)."""
        return any(c.tokens == "image" for c, _ in self.groups)
