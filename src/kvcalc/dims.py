"""The model's compute dimensions: the widths a forward pass materialises (hidden size, MLP widths,
experts, vocabulary), which size activations, not the cache. A leaf: read from a config by
``kvcalc.inputs.hf.dims.read_dims``, used by calc (runtime, params, speed) and the engines' runtime
models, which import no input format."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelDims:
    """Widths of one forward pass. ``mlp_width`` is the widest MLP a token goes through: the dense
    intermediate, or for MoE layers top-k experts' intermediates side by side (the fused-MoE
    caches hold one row per routed expert). ``notes`` say what was assumed."""

    hidden: int
    layers: int
    vocab: int
    intermediate: int  # dense MLP width (0 when every layer is MoE and the config gives none)
    experts: int = 0
    top_k: int = 0
    expert_intermediate: int = 0
    shared_intermediate: int = 0
    heads: int = 0  # query heads (0: the config does not say)
    kv_heads: int = 0
    head_dim: int = 0
    notes: tuple[str, ...] = ()

    @property
    def is_moe(self) -> bool:
        return self.experts > 0 and self.top_k > 0
