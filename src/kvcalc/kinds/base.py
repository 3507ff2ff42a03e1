"""What every layer kind answers (``LayerKind``), the one vocabulary of kinds (``Kind``), and the
arithmetic the kinds share. Each kind is a ``LayerKind`` subclass in the module of its family;
``kvcalc.kinds.LayerCache`` is their union."""

from __future__ import annotations

from abc import abstractmethod
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal, cast

from kvcalc.dtypes import DType
from kvcalc.errors import UsageError

if TYPE_CHECKING:
    from kvcalc.kinds import LayerCache
    from kvcalc.kinds.attention import AttentionCache

TokenSource = Literal["decoder", "encoder", "image"]


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
    LIGHTNING = "lightning_attention"
    RG_LRU = "rg_lru"
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
    Kind.LIGHTNING: "lightning", Kind.RG_LRU: "rg-lru",
    Kind.CONV: "conv", Kind.NONE: "none", Kind.INDEXER: "indexer",
    Kind.KV_WINDOW: "sliding k=v", Kind.COMPRESSED: "compressed", Kind.COMPRESSOR_BUFFER: "pending",
    Kind.COMPRESSOR_OVERLAP: "overlap",
}  # fmt: skip
_FEATURE = {
    Kind.SLIDING: "sliding", Kind.CHUNKED: "chunked", Kind.LINEAR: "linear", Kind.MAMBA: "mamba",
    Kind.LIGHTNING: "lightning", Kind.RG_LRU: "rg-lru",
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


# The hooks every layer kind overrides (LayerKind.__init_subclass__ checks).
REQUIRED_HOOKS = ("kind", "explain")


class LayerKind:
    """What every layer kind answers; each kind overrides what differs. The estimator, engines,
    fit, compare, views and speed (kvcalc.calc.speed) ask these instead of switching on the class.

    Required: ``kind`` and ``explain`` (abstract; a subclass lacking one is refused when it is
    defined). Every other hook is optional and its docstring names its default, which is a layer
    that stores nothing. Not an ``abc.ABC``: ``isinstance`` on an ABC costs several times as much,
    and the plan asks it of every layer kind."""

    tokens: TokenSource = "decoder"
    token_bound: int | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        missing = [hook for hook in REQUIRED_HOOKS if getattr(cls, hook) is getattr(LayerKind, hook)]
        if missing:
            raise TypeError(f"layer kind {cls.__name__} lacks the required hook(s) {', '.join(missing)}")

    @property
    @abstractmethod
    def kind(self) -> Kind:
        """Required: the kind's name in tables, JSON and the explain text."""
        raise NotImplementedError

    @property
    def elements_per_token(self) -> int:
        """K + V (or latent) elements one token adds to this layer, all heads.
        Optional: default 0 (no rows per token)."""
        return 0

    @property
    def caches_tokens(self) -> bool:
        """Whether the layer keeps rows per token (attention, latent) rather than a state or nothing.
        Optional: default whether ``elements_per_token`` is positive."""
        return self.elements_per_token > 0

    @property
    def is_state(self) -> bool:
        """Whether the layer keeps a fixed state per sequence (linear attention, Mamba).
        Optional: default False."""
        return False

    @property
    def is_latent(self) -> bool:
        """Whether the layer caches one MLA latent per token (engines size its blocks apart).
        Optional: default False."""
        return False

    @property
    def state_dtype(self) -> DType | None:
        """A state layer's own storage format when the config fixes it; None: the run dtype.
        Optional: default None."""
        return None

    @property
    def expanded_kv_heads(self) -> int | None:
        """KV heads transformers' own implementation caches when it expands them (else None).
        Optional: default None."""
        return None

    def state_elements(self, *, whole_kernel: bool) -> tuple[int, int]:
        """(conv elements, recurrent elements) one sequence keeps; the conv history is kernel - 1
        past inputs, or the whole kernel where an engine keeps it. Optional: default (0, 0)."""
        return 0, 0

    @property
    def head_dims(self) -> tuple[int | None, int | None]:
        """Per-head K and V dims (an MLA layer's decompressed ones); (None, None) without heads.
        Optional: default (None, None)."""
        return None, None

    @property
    def latent_shape(self) -> tuple[int, int] | None:
        """(latent dim, rope dim) of an MLA layer, else None. Optional: default None."""
        return None

    def as_attention(self) -> AttentionCache | None:
        """The layer as plain K/V attention heads, which a config may reshape (a window, a chunk,
        per-layer heads and dims): itself for an ``AttentionCache``, None for a kind without K/V
        heads (an MLA latent, a state, an indexer's keys, ...). Optional: default None."""
        return None

    @property
    def grows_without_bound(self) -> bool:
        """Whether a sequence's cache in this layer grows with every decoder token.
        Optional: default a decoder layer that caches tokens without a bound."""
        return self.tokens == "decoder" and self.token_bound is None and self.caches_tokens

    def rows(self, tp: int, heads: int | None = None) -> tuple[int, int, int | None]:
        """(K row elements, V row elements, KV heads) one token stores on one tensor-parallel rank;
        ``heads`` overrides the KV heads stored (an engine that expands them). No V row: 0.
        Optional: default (0, 0, None): no rows."""
        return 0, 0, None

    def tp_split_ok(self, tp: int) -> bool:
        """Whether ``tp`` ranks split this layer evenly (heads split or replicated).
        Optional: default True."""
        return True

    def describe(self) -> tuple[str, str]:
        """(heads, dims) cells of a table row.
        Optional: default ("-", "-"); override together with ``fields``."""
        return "-", "-"

    def fields(self) -> dict[str, Any]:
        """The kind's own geometry for JSON.
        Optional: default {}; override together with ``describe``."""
        return {}

    def vary_heads(self, kv_heads: int, k_dim: int, v_dim: int) -> LayerCache:
        """This layer with ``kv_heads`` plain K/V heads (compare's MHA/GQA/MQA variants); layers
        without attention heads stay as they are. Optional: default the layer unchanged."""
        return cast("LayerCache", self)

    @abstractmethod
    def explain(self) -> str:
        """Required: one line on what the layer keeps, for --explain ("" when the numbers say it all)."""
        raise NotImplementedError

    def seed_product(self, layers: int, batch: int, kept: int, s: int) -> str | None:
        """This group's term of M = 2 x L x B x T x H_kv x d_h x s with the numbers substituted
        (``s`` bytes per element); None for a layer that stores nothing. Optional: default None."""
        return None

    @property
    def state_part_names(self) -> tuple[str, str]:
        """What the two parts of a state layer's ``state_elements`` hold, for --explain and JSON.
        Optional: default ("conv", "recurrent")."""
        return "conv", "recurrent"

    @property
    def compress_ratio(self) -> int:
        """Tokens pooled into one cached entry (DeepSeek-V4's compressed attention); 1: a row per token.
        Optional: default 1."""
        return 1

    def entries(self, tokens: int) -> int:
        """Rows a sequence of ``tokens`` tokens has produced in this layer, before any window or
        engine rule: one per token, or one per ``compress_ratio`` tokens (whole windows only).
        Optional: default one per ``compress_ratio`` tokens."""
        return tokens // self.compress_ratio

    def token_share(self, row_bytes: int) -> int:
        """Bytes one more token adds on average, given the bytes of one row (a per-token figure):
        the row itself, or its share of a compressed entry (``row_bytes // compress_ratio``).
        Optional: default the row over ``compress_ratio``."""
        return row_bytes // self.compress_ratio

    @property
    def state_splits_across_ranks(self) -> bool:
        """Whether tensor parallel splits a state layer's state across ranks (heads, channels)
        rather than replicating it on each. Optional: default True."""
        return True

    @property
    def is_compressed_attention(self) -> bool:
        """Whether the entry belongs to DeepSeek-V4's compressed attention (its K=V window,
        compressed entries, compressed indexer keys, compressor state): engines that do not model
        that layout refuse it. Optional: default False."""
        return False

    # --- what kvcalc speed charges for attention (kvcalc.calc.speed) ---------------------------------------

    @property
    def speed_refusal(self) -> str | None:
        """Why kvcalc speed cannot price this layer's attention (one line; the caller prefixes the
        model's name), or None when it can. By default a kind is refused until it says what its
        attention costs (``attention_flops``).
        Optional: default refused; override together with ``attention_flops``."""
        if self.tokens != "decoder":
            return f"speed models decoder-only attention; {self.kind.value} is not modelled"
        return f"speed does not model the FLOPs of {self.kind.value} layers yet"

    def attended(self, context: int) -> int:
        """Tokens a decoder layer attends to at context length ``context``: windows and chunks cap it.
        Optional: default the whole context; override together with ``causal_attended``."""
        return context

    def causal_attended(self, n: int) -> int:
        """Sum over positions 1..n of the tokens each attends to (a causal prefill of n tokens).
        Optional: default every earlier token; override together with ``attended``."""
        return causal_window_sum(n, None)

    def attended_tokens(self, context: int, prefill: int) -> int:
        """``attended(context)`` for a decode step, ``causal_attended(prefill)`` for a prefill.
        Optional: default ``attended`` or ``causal_attended``."""
        return self.causal_attended(prefill) if prefill else self.attended(context)

    def attention_flops(
        self, query_heads: int, *, context: int, prefill: int = 0, index_heads: int = 0, index_topk: int | None = None
    ) -> int:
        """Attention FLOPs of one such layer for one sequence: the decode of one token after
        ``context`` tokens, or (``prefill`` n) a causal prefill of n tokens, with ``query_heads``
        query heads. ``index_heads`` are a sparse-attention indexer's heads; ``index_topk`` the
        tokens each query keeps when the model's indexer picks them (None: dense attention).
        Raises the one-line UsageError of ``speed_refusal`` for a kind speed does not model.
        Optional: default refused (``speed_refusal``'s line); override together with ``speed_refusal``."""
        raise UsageError(self.speed_refusal or f"speed does not model the FLOPs of {self.kind.value} layers yet")

    @property
    def reuses_kv(self) -> bool:
        """Whether the layer attends over K/V another layer cached, so its own ``attention_flops``
        (0) leave out its attention: speed charges it like the cheapest ``is_kv_source`` layer
        (a lower bound). Optional: default False."""
        return False

    @property
    def is_kv_source(self) -> bool:
        """Whether the layer attends over K/V (or a latent) it caches itself: a layer a
        ``reuses_kv`` layer may be reading, whose FLOPs therefore bound that layer's.
        Optional: default False."""
        return False

    @property
    def picks_attended_tokens(self) -> bool:
        """Whether the layer is a sparse-attention indexer: its model's MLA layers attend to the
        ``index_topk`` tokens it picks, not to all of them. Optional: default False."""
        return False

    @property
    def indexer_family(self) -> Literal["dsa", "msa"] | None:
        """The sparse-attention indexer whose keys the layer caches (``"dsa"``, ``"msa"``): their
        storage format is the engine's (``Engine.indexer_dtype``), not the K/V format asked for.
        None for every other kind. Optional: default None."""
        return None
