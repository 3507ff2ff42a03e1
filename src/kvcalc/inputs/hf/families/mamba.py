"""Mamba (``mamba``, ``falcon_mamba``) and Mamba-2 (``mamba2``): every layer a Mamba block, no attention.

Without a ``layer_types`` list every layer is Mamba. The block's conv and SSM state are the generic
reader's (``configs.state_entry``) over these families' own channel count, ``intermediate_size``
when the config gives it; Mamba-2's heads must split those channels exactly (``_mamba2_heads``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import (
    LAYER_KEYS,
    checked_layers,
    kinds_attention,
    layer_entries,
    layer_kinds,
    mamba_inner,
    state_entry,
)

if TYPE_CHECKING:
    from kvcalc.inputs.hf.configs import Reader
    from kvcalc.inputs.hf.families import Layout
    from kvcalc.spec import StateCache


def read(r: Reader) -> Layout:
    """One Mamba state per layer (or the kinds a ``layer_types`` list names)."""
    layers = checked_layers(r, r.positive_int(LAYER_KEYS))
    kinds = layer_kinds(r, layers) if r.raw.get("layer_types") is not None else ["mamba"] * layers
    attention, heads = kinds_attention(r, kinds)
    return layer_entries(r, layers, kinds, attention, own=lambda kind: _mamba(r, kind)), layers, heads


def _mamba(r: Reader, kind: str) -> StateCache | None:
    """A Mamba layer's state over this family's channels; None for any other kind (the generic entry)."""
    return state_entry(r, kind, inner=_inner) if kind == "mamba" else None


def _inner(r: Reader) -> int:
    """The Mamba channels d_inner: intermediate_size when given (but for the Granite-4 / Bamba
    spelling, which the generic reading takes first), else the generic expand x hidden_size."""
    granite = r.has("mamba_n_heads") and r.has("mamba_d_head")
    d_inner = r.positive_int("intermediate_size") if not granite and r.has("intermediate_size") else mamba_inner(r)
    if not granite and r.has("intermediate_size"):
        # The file's intermediate_size overrides the expand x hidden_size the config class derives
        # (FalconMambaConfig with tiiuae/falcon-mamba-7b's expand 16 and intermediate_size 8192:
        # 8192, transformers 5.24), so expand, in any spelling, sizes nothing.
        r.considered("expand", "mamba_expand")
    if r.model_type == "mamba2":
        _mamba2_heads(r, d_inner)
    return d_inner


def _mamba2_heads(r: Reader, d_inner: int) -> None:
    """Mamba2Mixer (transformers 5.24 models/mamba2/modeling_mamba2.py) keeps the SSM state as
    (num_heads, head_dim, state_size) and reshapes its expand x hidden_size channels into those heads,
    so the heads must cover them exactly; chunk_size only tiles the scan over the prompt."""
    r.considered("chunk_size")
    heads = r.optional_positive_int("num_heads")
    head_dim = r.optional_positive_int("head_dim")
    if heads is not None and head_dim is not None and heads * head_dim != d_inner:
        raise ConfigError(
            f"config field '{r.where}num_heads' ({heads}) x head_dim ({head_dim}) must equal expand x hidden_size "
            f"({d_inner}), the Mamba-2 channels the heads split"
        )
