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

Each kind answers for itself (``_Layer``'s methods): what it stores, how an engine lays it out,
and what kvcalc speed charges for attending over it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from functools import cached_property
from typing import Any, Literal, cast

from .dtypes import DType
from .errors import UsageError

TokenSource = Literal["decoder", "encoder", "image"]

# Bounds every way into a model (config, preset, hand geometry, API) shares. The largest real
# models have a few hundred layers and dimensions of a few tens of thousands; past these a number
# is a typo or an attack, and loops over layers must stay short.
MAX_LAYERS = 2**16
MAX_DIMENSION = 2**24


class Kind(StrEnum):
    """Every layer kind kvcalc models: the one vocabulary for labels, JSON and grouping."""

    FULL = "full_attention"
    SLIDING = "sliding_attention"
    CHUNKED = "chunked_attention"
    CROSS = "cross_attention"
    VISION = "vision_cross_attention"
    MLA = "mla"
    LINEAR = "linear_attention"
    MAMBA = "mamba"
    CONV = "short_conv"
    SHARED = "kv_shared"
    NONE = "no_cache"
    INDEXER = "indexer"
    KV_WINDOW = "sliding_kv_shared"
    COMPRESSED = "compressed_attention"
    COMPRESSOR_BUFFER = "compressor_buffer"
    COMPRESSOR_OVERLAP = "compressor_overlap"

    @property
    def short(self) -> str:
        """The label of a table row."""
        return _SHORT[self]

    @property
    def feature(self) -> str | None:
        """How the kind shows in a model's attention summary (``GQA + sliding``), if at all."""
        return _FEATURE.get(self)


_SHORT = {
    Kind.FULL: "full", Kind.SLIDING: "sliding", Kind.CHUNKED: "chunked", Kind.CROSS: "cross", Kind.VISION: "image-x",
    Kind.MLA: "mla", Kind.LINEAR: "linear", Kind.MAMBA: "mamba", Kind.SHARED: "shared",
    Kind.CONV: "conv", Kind.NONE: "none", Kind.INDEXER: "indexer",
    Kind.KV_WINDOW: "sliding k=v", Kind.COMPRESSED: "compressed", Kind.COMPRESSOR_BUFFER: "pending",
    Kind.COMPRESSOR_OVERLAP: "overlap",
}  # fmt: skip
_FEATURE = {
    Kind.SLIDING: "sliding", Kind.CHUNKED: "chunked", Kind.LINEAR: "linear", Kind.MAMBA: "mamba",
    Kind.CONV: "short-conv", Kind.SHARED: "kv-shared", Kind.CROSS: "enc-dec", Kind.VISION: "image cross-attn",
    Kind.INDEXER: "sparse indexer", Kind.KV_WINDOW: "sliding", Kind.COMPRESSED: "compressed",
}  # fmt: skip


def causal_window_sum(n: int, window: int | None) -> int:
    """Sum over positions 1..n of min(position, ``window``): the tokens a causal pass of n tokens
    attends to when each sees at most ``window`` of them (None: all before it and itself)."""
    if window is None or n <= window:
        return n * (n + 1) // 2
    return window * (window + 1) // 2 + (n - window) * window


def heads_per_gpu(kv_heads: int, tp: int) -> int:
    """KV heads one tensor-parallel rank stores: vllm/config/model.py get_num_kv_heads splits them
    across ranks and replicates them when there are fewer heads than ranks."""
    return max(1, kv_heads // tp)


class _Layer:
    """What every layer kind answers; each kind overrides what differs. The estimator, engines,
    fit, compare, views and speed (kvcalc.roofline) ask these instead of switching on the class."""

    tokens: TokenSource = "decoder"
    token_bound: int | None = None

    @property
    def kind(self) -> Kind:
        raise NotImplementedError

    @property
    def elements_per_token(self) -> int:
        """K + V (or latent) elements one token adds to this layer, all heads."""
        return 0

    @property
    def caches_tokens(self) -> bool:
        """Whether the layer keeps rows per token (attention, latent) rather than a state or nothing."""
        return self.elements_per_token > 0

    @property
    def is_state(self) -> bool:
        """Whether the layer keeps a fixed state per sequence (linear attention, Mamba)."""
        return False

    @property
    def is_latent(self) -> bool:
        """Whether the layer caches one MLA latent per token (engines size its blocks apart)."""
        return False

    @property
    def state_dtype(self) -> DType | None:
        """A state layer's own storage format when the config fixes it; None: the run dtype."""
        return None

    @property
    def expanded_kv_heads(self) -> int | None:
        """KV heads transformers' own implementation caches when it expands them (else None)."""
        return None

    def state_elements(self, *, whole_kernel: bool) -> tuple[int, int]:
        """(conv elements, recurrent elements) one sequence keeps; the conv history is kernel - 1
        past inputs, or the whole kernel where an engine keeps it."""
        return 0, 0

    @property
    def head_dims(self) -> tuple[int | None, int | None]:
        """Per-head K and V dims (an MLA layer's decompressed ones); (None, None) without heads."""
        return None, None

    @property
    def latent_shape(self) -> tuple[int, int] | None:
        """(latent dim, rope dim) of an MLA layer, else None."""
        return None

    @property
    def grows_without_bound(self) -> bool:
        """Whether a sequence's cache in this layer grows with every decoder token."""
        return self.tokens == "decoder" and self.token_bound is None and self.caches_tokens

    def rows(self, tp: int, heads: int | None = None) -> tuple[int, int, int | None]:
        """(K row elements, V row elements, KV heads) one token stores on one tensor-parallel rank;
        ``heads`` overrides the KV heads stored (an engine that expands them). No V row: 0."""
        return 0, 0, None

    def tp_split_ok(self, tp: int) -> bool:
        """Whether ``tp`` ranks split this layer evenly (heads split or replicated)."""
        return True

    def describe(self) -> tuple[str, str]:
        """(heads, dims) cells of a table row."""
        return "-", "-"

    def fields(self) -> dict[str, Any]:
        """The kind's own geometry for JSON."""
        return {}

    def vary_heads(self, kv_heads: int, k_dim: int, v_dim: int) -> LayerCache:
        """This layer with ``kv_heads`` plain K/V heads (compare's MHA/GQA/MQA variants); layers
        without attention heads stay as they are."""
        return cast("LayerCache", self)

    def explain(self) -> str:
        """One line on what the layer keeps, for --explain ("" when the numbers say it all)."""
        return ""

    def seed_product(self, layers: int, batch: int, kept: int, s: int) -> str | None:
        """This group's term of M = 2 x L x B x T x H_kv x d_h x s with the numbers substituted
        (``s`` bytes per element); None for a layer that stores nothing."""
        return None

    @property
    def state_part_names(self) -> tuple[str, str]:
        """What the two parts of a state layer's ``state_elements`` hold, for --explain and JSON."""
        return "conv", "recurrent"

    @property
    def compress_ratio(self) -> int:
        """Tokens pooled into one cached entry (DeepSeek-V4's compressed attention); 1: a row per token."""
        return 1

    def entries(self, tokens: int) -> int:
        """Rows a sequence of ``tokens`` tokens has produced in this layer, before any window or
        engine rule: one per token, or one per ``compress_ratio`` tokens (whole windows only)."""
        return tokens // self.compress_ratio

    def token_share(self, row_bytes: int) -> int:
        """Bytes one more token adds on average, given the bytes of one row (a per-token figure):
        the row itself, or its share of a compressed entry (``row_bytes // compress_ratio``)."""
        return row_bytes // self.compress_ratio

    @property
    def state_splits_across_ranks(self) -> bool:
        """Whether tensor parallel splits a state layer's state across ranks (heads, channels)
        rather than replicating it on each."""
        return True

    @property
    def is_compressed_attention(self) -> bool:
        """Whether the entry belongs to DeepSeek-V4's compressed attention (its K=V window,
        compressed entries, compressed indexer keys, compressor state): engines that do not model
        that layout refuse it."""
        return False

    # --- what kvcalc speed charges for attention (kvcalc.roofline) ---------------------------------------

    @property
    def speed_refusal(self) -> str | None:
        """Why kvcalc speed cannot price this layer's attention (one line; the caller prefixes the
        model's name), or None when it can. By default a kind is refused until it says what its
        attention costs (``attention_flops``)."""
        if self.tokens != "decoder":
            return f"speed models decoder-only attention; {self.kind.value} is not modelled"
        return f"speed does not model the FLOPs of {self.kind.value} layers yet"

    def attended(self, context: int) -> int:
        """Tokens a decoder layer attends to at context length ``context``: windows and chunks cap it."""
        return context

    def causal_attended(self, n: int) -> int:
        """Sum over positions 1..n of the tokens each attends to (a causal prefill of n tokens)."""
        return causal_window_sum(n, None)

    def attended_tokens(self, context: int, prefill: int) -> int:
        """``attended(context)`` for a decode step, ``causal_attended(prefill)`` for a prefill."""
        return self.causal_attended(prefill) if prefill else self.attended(context)

    def attention_flops(
        self, query_heads: int, *, context: int, prefill: int = 0, index_heads: int = 0, index_topk: int | None = None
    ) -> int:
        """Attention FLOPs of one such layer for one sequence: the decode of one token after
        ``context`` tokens, or (``prefill`` n) a causal prefill of n tokens, with ``query_heads``
        query heads. ``index_heads`` are a sparse-attention indexer's heads; ``index_topk`` the
        tokens each query keeps when the model's indexer picks them (None: dense attention).
        Raises the one-line UsageError of ``speed_refusal`` for a kind speed does not model."""
        raise UsageError(self.speed_refusal or f"speed does not model the FLOPs of {self.kind.value} layers yet")

    @property
    def reuses_kv(self) -> bool:
        """Whether the layer attends over K/V another layer cached, so its own ``attention_flops``
        (0) leave out its attention: speed charges it like the cheapest ``is_kv_source`` layer
        (a lower bound)."""
        return False

    @property
    def is_kv_source(self) -> bool:
        """Whether the layer attends over K/V (or a latent) it caches itself: a layer a
        ``reuses_kv`` layer may be reading, whose FLOPs therefore bound that layer's."""
        return False

    @property
    def picks_attended_tokens(self) -> bool:
        """Whether the layer is a sparse-attention indexer: its model's MLA layers attend to the
        ``index_topk`` tokens it picks, not to all of them."""
        return False


@dataclass(frozen=True)
class AttentionCache(_Layer):
    """Keys and values: ``kv_heads * (k_head_dim + v_head_dim)`` elements per token.

    ``window`` bounds the tokens kept (sliding-window attention keeps the last W tokens);
    ``chunk`` bounds them by the attention chunk (tokens attend only inside their chunk).
    ``tokens`` says whose tokens are cached: the decoder's own (self-attention), the
    encoder's (cross-attention, fixed by the encoder length), or the images' (Llama 3.2 Vision's
    cross-attention layers: a fixed count per image, none for a text-only prompt).
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
    def kind(self) -> Kind:
        if self.tokens == "encoder":
            return Kind.CROSS
        if self.tokens == "image":
            return Kind.VISION
        if self.window is not None:
            return Kind.SLIDING
        if self.chunk is not None:
            return Kind.CHUNKED
        return Kind.FULL

    @property
    def elements_per_token(self) -> int:
        return self.kv_heads * (self.k_head_dim + self.v_head_dim)

    @property
    def token_bound(self) -> int | None:  # type: ignore[override]  # derived from window / chunk
        return self.window if self.window is not None else self.chunk

    def rows(self, tp: int, heads: int | None = None) -> tuple[int, int, int | None]:
        per_gpu = heads_per_gpu(heads or self.kv_heads, tp)
        return per_gpu * self.k_head_dim, per_gpu * self.v_head_dim, per_gpu

    def tp_split_ok(self, tp: int) -> bool:
        kv = self.kv_heads
        return not ((kv >= tp and kv % tp) or (kv < tp and tp % kv))

    def describe(self) -> tuple[str, str]:
        same = self.k_head_dim == self.v_head_dim
        return str(self.kv_heads), str(self.k_head_dim) if same else f"{self.k_head_dim}/{self.v_head_dim}"

    def fields(self) -> dict[str, Any]:
        return {
            "kv_heads": self.kv_heads,
            "k_head_dim": self.k_head_dim,
            "v_head_dim": self.v_head_dim,
            "window": self.window,
            "chunk": self.chunk,
        }

    def vary_heads(self, kv_heads: int, k_dim: int, v_dim: int) -> LayerCache:
        return replace(self, kv_heads=kv_heads)

    @property
    def head_dims(self) -> tuple[int | None, int | None]:
        return self.k_head_dim, self.v_head_dim

    def seed_product(self, layers: int, batch: int, kept: int, s: int) -> str | None:
        if self.k_head_dim == self.v_head_dim:
            return f"2 x {layers} x {batch:,} x {kept:,} x {self.kv_heads} x {self.k_head_dim} x {s}"
        dims = f"({self.k_head_dim} + {self.v_head_dim})"
        return f"{layers} x {batch:,} x {kept:,} x {self.kv_heads} x {dims} x {s}"

    @property
    def expanded_kv_heads(self) -> int | None:
        return self.expanded_heads

    def explain(self) -> str:
        if self.tokens == "image":
            return "cross-attention over image tokens: K and V of images x tokens per image, none per text token"
        return ""

    @property
    def speed_refusal(self) -> str | None:
        # Cross-attention (an encoder's or the images' tokens) is refused; decoder self-attention is priced.
        return super().speed_refusal if self.tokens != "decoder" else None

    def attended(self, context: int) -> int:
        if self.window is not None:
            return min(context, self.window)
        if self.chunk is not None:
            return (context - 1) % self.chunk + 1
        return context

    def causal_attended(self, n: int) -> int:
        if self.chunk is not None:  # each whole chunk attends causally within itself, then the rest
            c = self.chunk
            full, rest = divmod(n, c)
            return full * c * (c + 1) // 2 + rest * (rest + 1) // 2
        return causal_window_sum(n, self.window)

    def attention_flops(
        self, query_heads: int, *, context: int, prefill: int = 0, index_heads: int = 0, index_topk: int | None = None
    ) -> int:
        """Per query head, the scores take 2 x k_head_dim and the weighted values 2 x v_head_dim
        FLOPs per attended token."""
        refusal = self.speed_refusal
        if refusal is not None:
            raise UsageError(refusal)
        return 2 * query_heads * (self.k_head_dim + self.v_head_dim) * self.attended_tokens(context, prefill)

    @property
    def is_kv_source(self) -> bool:
        return True


@dataclass(frozen=True)
class LatentCache(_Layer):
    """Multi-head latent attention: ``latent_dim + rope_dim`` elements per token, no factor 2.

    ``k_head_dim`` / ``v_head_dim`` are the per-head dims the latent decompresses to (DeepSeek:
    qk_nope + qk_rope and v_head_dim); they size the equivalent uncompressed cache, not this one.
    """

    latent_dim: int
    rope_dim: int
    k_head_dim: int | None = None
    v_head_dim: int | None = None

    @property
    def kind(self) -> Kind:
        return Kind.MLA

    @property
    def elements_per_token(self) -> int:
        return self.latent_dim + self.rope_dim

    def rows(self, tp: int, heads: int | None = None) -> tuple[int, int, int | None]:
        return self.elements_per_token, 0, None  # one latent, replicated on every rank

    @property
    def is_latent(self) -> bool:
        return True

    @property
    def head_dims(self) -> tuple[int | None, int | None]:
        return self.k_head_dim, self.v_head_dim

    def seed_product(self, layers: int, batch: int, kept: int, s: int) -> str | None:
        return f"{layers} x {batch:,} x {kept:,} x ({self.latent_dim} + {self.rope_dim}) x {s}"

    @property
    def latent_shape(self) -> tuple[int, int] | None:
        return self.latent_dim, self.rope_dim

    def describe(self) -> tuple[str, str]:
        return "latent", f"{self.latent_dim}+{self.rope_dim}"

    def fields(self) -> dict[str, Any]:
        return {"latent_dim": self.latent_dim, "rope_dim": self.rope_dim}

    def vary_heads(self, kv_heads: int, k_dim: int, v_dim: int) -> LayerCache:
        return AttentionCache(kv_heads=kv_heads, k_head_dim=k_dim, v_head_dim=v_dim)

    def explain(self) -> str:
        return "MLA caches one latent per token: (d_c + d_rope) elements, no factor 2"

    @property
    def speed_refusal(self) -> str | None:
        return None

    def attention_flops(
        self, query_heads: int, *, context: int, prefill: int = 0, index_heads: int = 0, index_topk: int | None = None
    ) -> int:
        """MLA decodes in its absorbed form: per query head, the scores over the latent and RoPE dims
        (2 x (latent + rope)) and the values over the latent (2 x latent) per attended token. It
        prefills decompressed, as attention with the per-head K and V dims (latent + rope and
        latent when the config names none). Under a sparse indexer (``index_topk``) each query
        attends to at most index_topk tokens."""
        if prefill:
            k = self.k_head_dim or self.latent_dim + self.rope_dim
            v = self.v_head_dim or self.latent_dim
            tokens = self.causal_attended(prefill) if index_topk is None else causal_window_sum(prefill, index_topk)
            return 2 * query_heads * (k + v) * tokens
        tokens = self.attended(context) if index_topk is None else min(context, index_topk)
        return 2 * query_heads * (2 * self.latent_dim + self.rope_dim) * tokens

    @property
    def is_kv_source(self) -> bool:
        return True


@dataclass(frozen=True)
class IndexerCache(_Layer):
    """A sparse-attention indexer's key cache (DeepSeek-V3.2's DSA): one ``head_dim`` key per
    token per MLA layer, single-head, no V, beside that layer's latent. The indexer scores every
    cached key to pick the ``index_topk`` tokens attention reads, so it keeps every token. Its
    storage format is the engine's (``Engine.indexer_dtype``), not the KV format asked for.

    ``ratio`` > 1: DeepSeek-V4's CSA indexer, whose keys are compressed like the layer's entries
    (one key per ``ratio`` tokens, transformers 5.24 ``DeepseekV4Indexer``).

    ``family`` names the indexer, since engines store their keys differently: ``"dsa"``, DeepSeek
    Sparse Attention's (DeepSeek-V3.2, GLM-5); ``"msa"``, MiniMax Sparse Attention's (MiniMax-M3,
    beside a GQA layer's K and V)."""

    head_dim: int
    ratio: int = 1
    family: Literal["dsa", "msa"] = "dsa"

    @property
    def kind(self) -> Kind:
        return Kind.INDEXER

    @property
    def compress_ratio(self) -> int:
        return self.ratio

    @property
    def is_compressed_attention(self) -> bool:
        return self.ratio > 1

    @property
    def elements_per_token(self) -> int:
        return self.head_dim

    def rows(self, tp: int, heads: int | None = None) -> tuple[int, int, int | None]:
        return self.head_dim, 0, None  # one key, replicated on every rank

    def describe(self) -> tuple[str, str]:
        return "indexer", str(self.head_dim) if self.ratio == 1 else f"{self.head_dim} per {self.ratio} tok"

    def fields(self) -> dict[str, Any]:
        if self.ratio == 1:
            return {"index_head_dim": self.head_dim}
        return {"index_head_dim": self.head_dim, "compress_ratio": self.ratio}

    def seed_product(self, layers: int, batch: int, kept: int, s: int) -> str | None:
        return f"{layers} x {batch:,} x {kept:,} x {self.head_dim} x {s}"

    def explain(self) -> str:
        if self.ratio > 1:
            return (
                f"the sparse-attention indexer caches one compressed {self.head_dim}-element key per "
                f"{self.ratio} tokens, no V"
            )
        return f"the sparse-attention indexer caches one {self.head_dim}-element key per token, no V"

    @property
    def speed_refusal(self) -> str | None:
        return None

    def attention_flops(
        self, query_heads: int, *, context: int, prefill: int = 0, index_heads: int = 0, index_topk: int | None = None
    ) -> int:
        """The indexer scores every cached key with each of its ``index_heads`` heads: 2 x head_dim
        FLOPs per head per token. (A compressed indexer, ``ratio`` > 1, is charged as if it were
        not; its model's compressed layers are refused anyway.)"""
        return 2 * index_heads * self.head_dim * self.attended_tokens(context, prefill)

    @property
    def picks_attended_tokens(self) -> bool:
        return True


@dataclass(frozen=True)
class StateCache(_Layer):
    """A recurrent state per sequence: causal-conv history plus the recurrent (SSM/delta) state.

    ``family`` is ``linear_attention`` (Gated DeltaNet and similar), ``mamba``, or ``short_conv``
    (LFM2's gated short convolution: a conv history and no recurrent state). The causal conv
    runs over ``conv_channels`` with a kernel of ``conv_kernel``: it must remember kernel - 1
    past inputs (engines may keep the whole kernel). ``dtype`` is the state's own storage format
    when it differs from the model's (None: decided by the engine and workload).
    ``recurrent_dtype`` is the format the config names for the recurrent (SSM / delta-rule) state
    alone (``mamba_ssm_dtype``, ``mamba_ssm_cache_dtype``); None: as ``dtype``. Each engine decides
    whether it honours it (``state_parts``).
    """

    family: Literal["linear_attention", "mamba", "short_conv"]
    conv_channels: int
    conv_kernel: int
    recurrent_elements: int
    dtype: DType | None = None
    recurrent_dtype: DType | None = None

    @property
    def kind(self) -> Kind:
        return Kind(self.family)

    @property
    def is_state(self) -> bool:
        return True

    @property
    def state_dtype(self) -> DType | None:
        return self.dtype

    def state_elements(self, *, whole_kernel: bool) -> tuple[int, int]:
        conv = self.conv_channels * (self.conv_kernel if whole_kernel else self.conv_kernel - 1)
        return conv, self.recurrent_elements

    def describe(self) -> tuple[str, str]:
        return "state", "-"

    def explain(self) -> str:
        return "fixed state per sequence, whatever T: a conv history and a recurrent state"

    def fields(self) -> dict[str, Any]:
        return {"conv_elements": self.conv_elements, "recurrent_elements": self.recurrent_elements}

    @property
    def conv_elements(self) -> int:
        return self.conv_channels * (self.conv_kernel - 1)

    @property
    def total_state_elements(self) -> int:
        return self.conv_elements + self.recurrent_elements

    @property
    def speed_refusal(self) -> str | None:
        return None

    def attention_flops(
        self, query_heads: int, *, context: int, prefill: int = 0, index_heads: int = 0, index_topk: int | None = None
    ) -> int:
        """About 4 FLOPs per recurrent state element per token (decay and update, then the read) and
        2 per conv state element, whatever the context: per decoded token, or per prompt token."""
        conv, state = self.state_elements(whole_kernel=False)
        return (4 * state + 2 * conv) * (prefill or 1)


@dataclass(frozen=True)
class SharedCache(_Layer):
    """A layer that reads K and V cached by an earlier layer (``num_kv_shared_layers``)."""

    @property
    def kind(self) -> Kind:
        return Kind.SHARED

    def explain(self) -> str:
        return "reuses K and V cached by earlier layers: stores nothing, 0 bytes"

    @property
    def speed_refusal(self) -> str | None:
        return None

    def attention_flops(
        self, query_heads: int, *, context: int, prefill: int = 0, index_heads: int = 0, index_topk: int | None = None
    ) -> int:
        """None of its own: speed charges it like the cheapest layer it may be reading (``reuses_kv``)."""
        return 0

    @property
    def reuses_kv(self) -> bool:
        return True


@dataclass(frozen=True)
class NoCache(_Layer):
    """A layer that attends to nothing and keeps no state, so it caches nothing: Nemotron-H's MLP
    ('-') and MoE ('E') blocks, a NAS (DeciLM) block whose attention is a no-op or a linear layer.
    It still counts as a layer, so per-layer lists and the probe line up with the model's.

    ``block`` says what the layer is instead (shown by --explain)."""

    block: str = "a block with no attention and no state"

    @property
    def kind(self) -> Kind:
        return Kind.NONE

    def explain(self) -> str:
        return f"{self.block}: no attention, no state, so nothing cached, 0 bytes"

    @property
    def speed_refusal(self) -> str | None:
        return None

    def attention_flops(
        self, query_heads: int, *, context: int, prefill: int = 0, index_heads: int = 0, index_topk: int | None = None
    ) -> int:
        """No attention, no state: nothing to charge."""
        return 0


@dataclass(frozen=True)
class KVWindowCache(_Layer):
    """A sliding window whose one row per token is both the key and the value (DeepSeek-V4's
    shared-KV MQA: one ``head_dim`` head, ``kv_proj`` read as K and V). Attention keeps the last
    ``window`` tokens.

    ``v_copy``: transformers 5.24 caches this layer through the generic
    ``DynamicSlidingWindowLayer``, which concatenates the key and the value it is handed into two
    tensors even when they are one (DeepSeek-V4's uncompressed layers); its compressed layers
    (``DeepseekV4HCACache`` / ``DeepseekV4CSACache``) keep one. Only the transformers engine reads it.
    """

    head_dim: int
    window: int
    v_copy: bool = False

    @property
    def kind(self) -> Kind:
        return Kind.KV_WINDOW

    @property
    def token_bound(self) -> int | None:  # type: ignore[override]  # the window
        return self.window

    @property
    def elements_per_token(self) -> int:
        return self.head_dim

    @property
    def is_compressed_attention(self) -> bool:
        return True

    def rows(self, tp: int, heads: int | None = None) -> tuple[int, int, int | None]:
        return self.head_dim, 0, 1  # one head, replicated on every rank (base_model_tp_plan)

    def describe(self) -> tuple[str, str]:
        return "1 (k=v)", str(self.head_dim)

    def fields(self) -> dict[str, Any]:
        return {"kv_heads": 1, "head_dim": self.head_dim, "window": self.window, "k_equals_v": True}

    def seed_product(self, layers: int, batch: int, kept: int, s: int) -> str | None:
        return f"{layers} x {batch:,} x {kept:,} x 1 x {self.head_dim} x {s}"

    def explain(self) -> str:
        return f"one {self.head_dim}-element row per token serves as key and value (no factor 2), last {self.window}"

    @property
    def speed_refusal(self) -> str | None:
        return None

    def attended(self, context: int) -> int:
        return min(context, self.window)

    def causal_attended(self, n: int) -> int:
        return causal_window_sum(n, self.window)

    def attention_flops(
        self, query_heads: int, *, context: int, prefill: int = 0, index_heads: int = 0, index_topk: int | None = None
    ) -> int:
        """Per query head, the one ``head_dim`` row read as key and as value: 2 x head_dim FLOPs for
        the scores and 2 x head_dim for the weighted values per attended token."""
        return 2 * query_heads * 2 * self.head_dim * self.attended_tokens(context, prefill)

    @property
    def is_kv_source(self) -> bool:
        return True


@dataclass(frozen=True)
class CompressedCache(_Layer):
    """DeepSeek-V4's compressed attention (CSA ``ratio`` 4, HCA ``ratio`` 128): every ``ratio``
    tokens are pooled into one ``head_dim`` entry that serves as key and value, kept for the whole
    sequence: floor(T / ratio) entries (transformers 5.24 ``DeepseekV4HCACache.compressed_kv``)."""

    head_dim: int
    ratio: int

    @property
    def kind(self) -> Kind:
        return Kind.COMPRESSED

    @property
    def elements_per_token(self) -> int:
        return self.head_dim

    @property
    def compress_ratio(self) -> int:
        return self.ratio

    @property
    def is_compressed_attention(self) -> bool:
        return True

    def rows(self, tp: int, heads: int | None = None) -> tuple[int, int, int | None]:
        return self.head_dim, 0, None  # one entry, replicated on every rank

    def describe(self) -> tuple[str, str]:
        return "1 (k=v)", f"{self.head_dim} per {self.ratio} tok"

    def fields(self) -> dict[str, Any]:
        return {"head_dim": self.head_dim, "compress_ratio": self.ratio}

    def seed_product(self, layers: int, batch: int, kept: int, s: int) -> str | None:
        return f"{layers} x {batch:,} x {kept:,} entries x {self.head_dim} x {s}"

    def explain(self) -> str:
        ratio = self.ratio
        return f"one {self.head_dim}-element entry (key = value) per {ratio} tokens: floor(T / {ratio}) entries"


@dataclass(frozen=True)
class CompressorBufferCache(_Layer):
    """Tokens a DeepSeek-V4 compressor has projected but not yet pooled: the T mod ``ratio``
    newest tokens' ``kv_width`` projections and ``gate_width`` gate logits (transformers 5.24
    ``buffer_kv`` / ``buffer_gate``; CSA's include its indexer's). Fewer than ``ratio`` tokens:
    the entry never grows with the sequence."""

    ratio: int
    kv_width: int
    gate_width: int

    @property
    def kind(self) -> Kind:
        return Kind.COMPRESSOR_BUFFER

    @property
    def elements_per_token(self) -> int:
        return self.kv_width + self.gate_width

    @property
    def is_compressed_attention(self) -> bool:
        return True

    @property
    def grows_without_bound(self) -> bool:
        return False

    def entries(self, tokens: int) -> int:
        return tokens % self.ratio

    def token_share(self, row_bytes: int) -> int:
        return 0  # at most ratio - 1 tokens, emptied each time a window closes

    def rows(self, tp: int, heads: int | None = None) -> tuple[int, int, int | None]:
        return self.kv_width, self.gate_width, None  # replicated on every rank

    def describe(self) -> tuple[str, str]:
        return "pending", f"{self.kv_width}+{self.gate_width}"

    def fields(self) -> dict[str, Any]:
        return {"compress_ratio": self.ratio, "kv_width": self.kv_width, "gate_width": self.gate_width}

    def seed_product(self, layers: int, batch: int, kept: int, s: int) -> str | None:
        return f"{layers} x {batch:,} x {kept:,} x ({self.kv_width} + {self.gate_width}) x {s}"

    def explain(self) -> str:
        return (
            f"the T mod {self.ratio} tokens not yet pooled: {self.kv_width} projected + {self.gate_width} gate "
            "elements each"
        )


@dataclass(frozen=True)
class CompressorOverlapCache(_Layer):
    """DeepSeek-V4 CSA's overlapping windows: entry w pools window w with the first half (Ca) of
    window w - 1, so the compressor carries the last closed window's Ca projections and gate
    logits, ``ratio`` x ``width`` each (``width``: the compressor's head_dim plus its indexer's;
    transformers 5.24 ``DeepseekV4CSACache.overlap_kv`` / ``overlap_gate``). A fixed state per
    sequence once one window has closed."""

    ratio: int
    width: int

    @property
    def kind(self) -> Kind:
        return Kind.COMPRESSOR_OVERLAP

    @property
    def is_state(self) -> bool:
        return True

    @property
    def is_compressed_attention(self) -> bool:
        return True

    @property
    def state_splits_across_ranks(self) -> bool:
        return False  # one compressor per layer, replicated (DeepseekV4Config.base_model_tp_plan)

    def state_elements(self, *, whole_kernel: bool) -> tuple[int, int]:
        # (projections, gate logits); an engine gives each its format (state_parts).
        return self.ratio * self.width, self.ratio * self.width

    def describe(self) -> tuple[str, str]:
        return "state", f"2 x {self.ratio}x{self.width}"

    def fields(self) -> dict[str, Any]:
        return {"compress_ratio": self.ratio, "width": self.width}

    @property
    def state_part_names(self) -> tuple[str, str]:
        return "projections", "gate logits"

    def explain(self) -> str:
        return (
            f"fixed state per sequence: the last closed window's {self.ratio} x {self.width} projections and gate "
            "logits, carried into the next (overlapping) window"
        )


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
    # Config fields that may shape the cache but that kvcalc does not model (kvcalc.guard): each
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
        return any(c.tokens == "encoder" for c in self.caches)

    @property
    def has_image_cross_attention(self) -> bool:
        """Whether some layers cache image tokens (Llama 3.2 Vision's cross-attention layers)."""
        return any(c.tokens == "image" for c in self.caches)
