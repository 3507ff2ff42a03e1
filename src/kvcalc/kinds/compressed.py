"""DeepSeek-V4's compressed attention: ``CompressedCache``, one pooled key-and-value entry per
``ratio`` tokens; ``CompressorBufferCache``, the tokens a compressor has projected but not yet
pooled; ``CompressorOverlapCache``, a CSA compressor's carried overlapping window."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvcalc.kinds.base import Kind, LayerKind


@dataclass(frozen=True)
class CompressedCache(LayerKind):
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
class CompressorBufferCache(LayerKind):
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
class CompressorOverlapCache(LayerKind):
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
