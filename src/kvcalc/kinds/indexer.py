"""``IndexerCache``: a sparse-attention indexer's one key per token (DeepSeek-V3.2's DSA, MiniMax-M3's
MSA, DeepSeek-V4's compressed CSA indexer), beside the layer it picks tokens for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from kvcalc.kinds.base import Kind, LayerKind


@dataclass(frozen=True)
class IndexerCache(LayerKind):
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

    @property
    def indexer_family(self) -> Literal["dsa", "msa"] | None:
        return self.family
