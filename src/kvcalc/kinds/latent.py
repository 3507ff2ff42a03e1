"""``LatentCache``: multi-head latent attention (MLA) caches one compressed latent per token, no
separate K and V."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvcalc.kinds.attention import AttentionCache
from kvcalc.kinds.base import Kind, LayerKind, causal_window_sum

if TYPE_CHECKING:
    from kvcalc.kinds import LayerCache


@dataclass(frozen=True)
class LatentCache(LayerKind):
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
