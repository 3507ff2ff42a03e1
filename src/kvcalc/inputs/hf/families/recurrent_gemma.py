"""RecurrentGemma (Griffin; ``recurrent_gemma``): RG-LRU recurrent blocks and local attention,
chosen per layer by repeating ``block_types``.

Read from transformers 5.24 (models/recurrent_gemma/configuration_recurrent_gemma.py,
modeling_recurrent_gemma.py). ``layers_block_type`` repeats ``block_types`` over the layers
("recurrent" or "attention"); every attention block is local, a sliding window of
``attention_window_size`` (aliased ``sliding_window``), with ``num_key_value_heads`` heads of
hidden_size / num_attention_heads. A recurrent block (RecurrentGemmaRecurrentBlock) runs a causal
conv of ``conv1d_width`` over ``lru_width`` channels (lru_width defaults to hidden_size) and keeps
``conv1d_width - 1`` past inputs, then the RG-LRU, whose recurrent state is one lru_width vector
per sequence (RecurrentGemmaRglru.recurrent_states, kept in float32).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import HEAD_KEYS, HIDDEN_KEYS, LAYER_KEYS, checked_layers, kv_heads, layer_entries
from kvcalc.spec import AttentionCache, StateCache

if TYPE_CHECKING:
    from kvcalc.inputs.hf.configs import Reader
    from kvcalc.inputs.hf.families import Layout

# RecurrentGemmaConfig's defaults (configuration_recurrent_gemma.py, transformers 5.24); its
# attribute_map reads sliding_window as attention_window_size.
_DEFAULTS = {
    "num_hidden_layers": 26, "num_attention_heads": 10, "hidden_size": 2560, "attention_window_size": 2048,
    "sliding_window": 2048, "conv1d_width": 4,
}  # fmt: skip
_PATTERN = ["recurrent", "recurrent", "attention"]
_BLOCKS = {"recurrent": "rg_lru", "attention": "sliding_attention"}


def read(r: Reader) -> Layout:
    """One entry per layer: an RG-LRU state or a local-attention K/V window."""
    r.defaults = _DEFAULTS
    layers = checked_layers(r, r.positive_int(LAYER_KEYS))
    kinds = _layer_kinds(r, layers)
    heads = r.positive_int(HEAD_KEYS)
    hidden_key = r.first_key(HIDDEN_KEYS) or HIDDEN_KEYS[0]
    hidden = r.positive_int(HIDDEN_KEYS)
    if hidden % heads:
        raise ConfigError(f"config field '{r.where}{hidden_key}' ({hidden}) is not divisible by the {heads} heads")
    # RecurrentGemmaConfig.__post_init__ sets head_dim = hidden_size // num_attention_heads,
    # whatever the file says.
    r.considered("head_dim")
    attention = AttentionCache(kv_heads(r, heads), hidden // heads, hidden // heads)
    return layer_entries(r, layers, kinds, attention, own=lambda kind: _recurrent(r, kind)), layers, heads


def _layer_kinds(r: Reader, layers: int) -> list[str]:
    # Checkpoints saved by transformers 4.40-4.4x (google/recurrentgemma-*) store the pattern as
    # "_block_types", the attribute behind that release's block_types property.
    key = "block_types" if r.raw.get("block_types") is not None else "_block_types"
    pattern = r.raw.get(key)
    if pattern is None:
        pattern = _PATTERN
        r.notes.append(f"'{r.where}block_types' not in config; used the recurrent_gemma default {_PATTERN}")
    if not isinstance(pattern, list) or not pattern or any(not isinstance(b, str) or b not in _BLOCKS for b in pattern):
        raise ConfigError(f"config field '{r.where}{key}' must list 'recurrent' and 'attention' blocks")
    r.considered("block_types", "_block_types")
    r.considered("layer_types", "layers_block_type")  # derived from block_types by the config class
    return [_BLOCKS[pattern[i % len(pattern)]] for i in range(layers)]


def _recurrent(r: Reader, kind: str) -> StateCache | None:
    """A recurrent block's state; None for attention (the generic windowed entry)."""
    if kind != "rg_lru":
        return None
    width = r.positive_int("lru_width") if r.has("lru_width") else r.positive_int(HIDDEN_KEYS)
    r.considered("lru_width")
    kernel = r.positive_int("conv1d_width")
    return StateCache(family="rg_lru", conv_channels=width, conv_kernel=kernel, recurrent_elements=width)
