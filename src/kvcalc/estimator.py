"""ModelSpec x Workload -> Estimate: the one place where cache bytes are computed.

Bytes are Python integers throughout. The generalised seed formula, per group of identical
layers, is::

    bytes = layers * batch * (tokens_kept * elements_per_token + state_elements) * bytes_per_element

which is ``2 * L * B * T * H_kv * d_h * s`` for plain attention (elements_per_token =
``H_kv * (d_k + d_v)``), ``L * B * T * (d_c + d_rope) * s`` for MLA, and ``L * B * state * s``
for linear-attention and Mamba layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .dtypes import DType
from .errors import UsageError
from .spec import AttentionCache, LayerCache, ModelSpec, StateCache


@dataclass(frozen=True)
class Workload:
    """What is cached: ``batch`` resident sequences of ``tokens`` tokens each.

    ``encoder_tokens`` is the encoder length seen by cross-attention (encoder-decoder models).
    ``state_dtype`` stores linear-attention / Mamba states (None: the model's own dtype).
    """

    tokens: int
    batch: int = 1
    kv_dtype: DType | None = None
    encoder_tokens: int | None = None
    state_dtype: DType | None = None

    def __post_init__(self) -> None:
        for name in ("tokens", "batch", "encoder_tokens"):
            value = getattr(self, name)
            if value is None and name == "encoder_tokens":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise UsageError(f"{name.replace('_', ' ')} must be a positive integer, got {value!r}")


class Theoretical:
    """What attention must keep: every token, or the last W for a window of W.

    A sliding layer keeps W tokens, not W-1: the query at position t reads positions t-W+1..t,
    so a cache that already holds token t holds W entries (Mistral's rolling buffer of size W).
    Chunked layers keep at most one chunk, the worst case within a chunk.
    """

    name = "theoretical"

    def tokens_kept(self, cache: LayerCache, tokens: int) -> int:
        bound = cache.token_bound
        return tokens if bound is None else min(tokens, bound)


THEORETICAL = Theoretical()


@dataclass(frozen=True)
class GroupEstimate:
    """Identical layers and what they hold for the whole workload.

    ``bytes_per_token`` and ``state_bytes`` are per layer and per sequence; ``bytes`` is the
    group's total: layers x batch x (tokens_kept x bytes_per_token + state_bytes).
    """

    cache: LayerCache
    layers: int
    tokens_kept: int
    bytes_per_token: int
    state_bytes: int
    bytes: int
    dtype: DType

    @property
    def kind(self) -> str:
        return self.cache.kind


@dataclass(frozen=True)
class Estimate:
    """The cache of one model under one workload, by group of identical layers."""

    model: ModelSpec
    workload: Workload
    kv_dtype: DType
    groups: tuple[GroupEstimate, ...]
    engine: str
    notes: tuple[str, ...] = field(default=())

    @property
    def total_bytes(self) -> int:
        return sum(g.bytes for g in self.groups)

    @property
    def per_sequence_bytes(self) -> int:
        return self.total_bytes // self.workload.batch

    @property
    def per_token_bytes(self) -> int:
        """Bytes one more decoder token adds to a sequence across all layers, before any window."""
        return sum(g.layers * g.bytes_per_token for g in self.groups if g.cache.tokens == "decoder")

    @property
    def fixed_bytes_per_sequence(self) -> int:
        """Bytes per sequence that do not grow with decoder tokens: states and cross-attention."""
        return sum(
            g.layers
            * (g.state_bytes + (g.tokens_kept * g.bytes_per_token if g.cache.tokens == "encoder" else 0))
            for g in self.groups
        )


def estimate(spec: ModelSpec, workload: Workload, *, engine: Theoretical = THEORETICAL) -> Estimate:
    """Compute the cache of ``spec`` for ``workload``; the KV dtype defaults to the model's."""
    kv_dtype = workload.kv_dtype or spec.dtype
    notes: list[str] = []
    if kv_dtype is None:
        from .dtypes import FP16

        kv_dtype = FP16
        notes.append("the model names no dtype: KV cache assumed fp16 (set --kv-dtype)")
    encoder_tokens = workload.encoder_tokens or spec.encoder_tokens
    if spec.is_encoder_decoder and encoder_tokens is None:
        encoder_tokens = workload.tokens
        notes.append(
            f"encoder length not given: cross-attention assumed to cache {encoder_tokens:,} "
            "encoder tokens (set --encoder-tokens)"
        )

    counts: dict[LayerCache, int] = {}
    for cache in spec.caches:
        counts[cache] = counts.get(cache, 0) + 1

    groups = []
    for cache, layers in counts.items():
        tokens = encoder_tokens if cache.tokens == "encoder" else workload.tokens
        assert tokens is not None
        if isinstance(cache, StateCache):
            dtype = cache.dtype or workload.state_dtype or spec.dtype or kv_dtype
            kept, per_token, state = 0, 0, cache.state_elements * dtype.bytes_per_element
        else:
            dtype = kv_dtype
            kept = engine.tokens_kept(cache, tokens)
            per_token = cache.elements_per_token * dtype.bytes_per_element
            state = 0
            if isinstance(cache, AttentionCache) and cache.token_bound is not None and tokens > kept:
                notes.append(f"{cache.kind} layers keep at most {kept:,} of the {tokens:,} tokens")
        total = layers * workload.batch * (kept * per_token + state)
        groups.append(GroupEstimate(cache, layers, kept, per_token, state, total, dtype))
    return Estimate(
        model=spec,
        workload=workload,
        kv_dtype=kv_dtype,
        groups=tuple(groups),
        engine=engine.name,
        notes=tuple(notes),
    )
