"""Layers that store nothing of their own: ``SharedCache`` reuses another layer's K and V;
``NoCache`` has no attention and no state (an MLP or MoE block, a no-op attention)."""

from __future__ import annotations

from dataclasses import dataclass

from kvcalc.kinds.base import Kind, LayerKind


@dataclass(frozen=True)
class SharedCache(LayerKind):
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
class NoCache(LayerKind):
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
