"""K and V per token: ``AttentionCache`` (full, sliding-window, chunked, or cross-attention over an
encoder's output or over images) and ``KVWindowCache``, a sliding window whose one row per token
is both key and value (DeepSeek-V4's shared-KV MQA)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kvcalc.errors import UsageError
from kvcalc.kinds.base import Kind, LayerKind, TokenSource, causal_window_sum, heads_per_gpu

if TYPE_CHECKING:
    from kvcalc.kinds import LayerCache


@dataclass(frozen=True)
class AttentionCache(LayerKind):
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

    def as_attention(self) -> AttentionCache | None:
        return self

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
class KVWindowCache(LayerKind):
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
