"""``StateCache``: a fixed-size state per sequence (linear attention, Mamba, LFM2's short
convolution), nothing per token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from kvcalc.dtypes import DType
from kvcalc.kinds.base import Kind, LayerKind


@dataclass(frozen=True)
class StateCache(LayerKind):
    """A recurrent state per sequence: causal-conv history plus the recurrent (SSM/delta) state.

    ``family`` is ``linear_attention`` (Gated DeltaNet and similar), ``mamba``, ``short_conv``
    (LFM2's gated short convolution: a conv history and no recurrent state),
    ``lightning_attention`` (MiniMax's lightning attention: one head_dim x head_dim K^T V matrix per
    head and no conv) or ``rg_lru`` (Griffin's recurrent block: a conv history over lru_width
    channels and one lru_width-wide recurrent state). The causal conv
    runs over ``conv_channels`` with a kernel of ``conv_kernel``: it must remember kernel - 1
    past inputs (engines may keep the whole kernel); ``whole_kernel`` says the model's own code
    keeps all ``conv_kernel`` columns whatever the engine (mamba_ssm's ``allocate_inference_cache``
    in modules/mamba_simple.py, mamba2.py and mha.py: a conv state of d_conv columns). ``dtype`` is
    the state's own storage format when it differs from the model's (None: decided by the engine and
    workload).
    ``recurrent_dtype`` is the format the config names for the recurrent (SSM / delta-rule) state
    alone (``mamba_ssm_dtype``, ``mamba_ssm_cache_dtype``); None: as ``dtype``. Each engine decides
    whether it honours it (``state_parts``).
    """

    family: Literal["linear_attention", "mamba", "short_conv", "lightning_attention", "rg_lru"]
    conv_channels: int
    conv_kernel: int
    recurrent_elements: int
    dtype: DType | None = None
    recurrent_dtype: DType | None = None
    whole_kernel: bool = False

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
        return self._conv(whole_kernel=whole_kernel), self.recurrent_elements

    def _conv(self, *, whole_kernel: bool) -> int:
        """Conv history elements: ``conv_kernel`` columns where the engine or the model keeps the
        whole kernel, else kernel - 1."""
        whole = whole_kernel or self.whole_kernel
        return self.conv_channels * (self.conv_kernel if whole else self.conv_kernel - 1)

    def describe(self) -> tuple[str, str]:
        return "state", "-"

    def explain(self) -> str:
        if not self.conv_channels:  # MiniMax's lightning attention: K^T V per head only
            return "fixed state per sequence, whatever T: a recurrent state, no conv history"
        if not self.recurrent_elements:  # LFM2's short convolution
            return "fixed state per sequence, whatever T: a conv history, no recurrent state"
        return "fixed state per sequence, whatever T: a conv history and a recurrent state"

    def fields(self) -> dict[str, Any]:
        return {"conv_elements": self.conv_elements, "recurrent_elements": self.recurrent_elements}

    @property
    def conv_elements(self) -> int:
        return self._conv(whole_kernel=False)

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
