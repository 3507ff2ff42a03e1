"""What each layer of a model keeps in its cache, independent of any workload.

A model is a tuple of per-layer cache entries. Every architecture kvcalc knows is one of four
entry kinds, so the estimator has a single mechanism instead of a branch per model family:

- ``AttentionCache``: K and V per token (full, sliding-window, chunked, or encoder cross-attention);
- ``LatentCache``: one compressed latent per token (MLA), no separate K and V;
- ``StateCache``: a fixed-size state per sequence (linear attention, Mamba), nothing per token;
- ``SharedCache``: a layer that reuses another layer's K and V and stores nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .dtypes import DType

TokenSource = Literal["decoder", "encoder"]

# Bounds every way into a model (config, preset, hand geometry, API) shares. The largest real
# models have a few hundred layers and dimensions of a few tens of thousands; past these a number
# is a typo or an attack, and loops over layers must stay short.
MAX_LAYERS = 2**16
MAX_DIMENSION = 2**24


@dataclass(frozen=True)
class AttentionCache:
    """Keys and values: ``kv_heads * (k_head_dim + v_head_dim)`` elements per token.

    ``window`` bounds the tokens kept (sliding-window attention keeps the last W tokens);
    ``chunk`` bounds them by the attention chunk (tokens attend only inside their chunk).
    ``tokens`` says whose tokens are cached: the decoder's own (self-attention) or the
    encoder's (cross-attention, fixed by the encoder length).
    """

    kv_heads: int
    k_head_dim: int
    v_head_dim: int
    window: int | None = None
    chunk: int | None = None
    tokens: TokenSource = "decoder"
    # Heads transformers' own implementation caches when it expands grouped K/V before caching
    # (Falcon's new_decoder_architecture broadcasts them to every query head); None: kv_heads.
    expanded_heads: int | None = None

    @property
    def kind(self) -> str:
        if self.tokens == "encoder":
            return "cross_attention"
        if self.window is not None:
            return "sliding_attention"
        if self.chunk is not None:
            return "chunked_attention"
        return "full_attention"

    @property
    def elements_per_token(self) -> int:
        return self.kv_heads * (self.k_head_dim + self.v_head_dim)

    @property
    def token_bound(self) -> int | None:
        return self.window if self.window is not None else self.chunk


@dataclass(frozen=True)
class LatentCache:
    """Multi-head latent attention: ``latent_dim + rope_dim`` elements per token, no factor 2.

    ``k_head_dim`` / ``v_head_dim`` are the per-head dims the latent decompresses to (DeepSeek:
    qk_nope + qk_rope and v_head_dim); they size the equivalent uncompressed cache, not this one.
    """

    latent_dim: int
    rope_dim: int
    k_head_dim: int | None = None
    v_head_dim: int | None = None

    kind = "mla"
    tokens: TokenSource = "decoder"
    token_bound: int | None = None

    @property
    def elements_per_token(self) -> int:
        return self.latent_dim + self.rope_dim


@dataclass(frozen=True)
class StateCache:
    """A recurrent state per sequence: causal-conv history plus the recurrent (SSM/delta) state.

    ``family`` is ``linear_attention`` (Gated DeltaNet and similar) or ``mamba``. The causal conv
    runs over ``conv_channels`` with a kernel of ``conv_kernel``: it must remember kernel - 1
    past inputs (engines may keep the whole kernel). ``dtype`` is the state's own storage format
    when it differs from the model's (None: decided by the engine and workload).
    """

    family: Literal["linear_attention", "mamba"]
    conv_channels: int
    conv_kernel: int
    recurrent_elements: int
    dtype: DType | None = None

    tokens: TokenSource = "decoder"
    token_bound: int | None = None
    elements_per_token = 0

    @property
    def kind(self) -> str:
        return self.family

    @property
    def conv_elements(self) -> int:
        return self.conv_channels * (self.conv_kernel - 1)

    @property
    def state_elements(self) -> int:
        return self.conv_elements + self.recurrent_elements


@dataclass(frozen=True)
class SharedCache:
    """A layer that reads K and V cached by an earlier layer (``num_kv_shared_layers``)."""

    kind = "kv_shared"
    tokens: TokenSource = "decoder"
    token_bound: int | None = None
    elements_per_token = 0


LayerCache = AttentionCache | LatentCache | StateCache | SharedCache


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

    @property
    def is_encoder_decoder(self) -> bool:
        return any(c.tokens == "encoder" for c in self.caches)
