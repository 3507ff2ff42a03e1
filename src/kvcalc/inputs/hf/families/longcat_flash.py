"""LongCat-Flash (Meituan; ``longcat_flash``): two MLA attention sublayers in every decoder layer.

Read from transformers 5.24 (models/longcat_flash/configuration_longcat_flash.py,
modeling_longcat_flash.py): ``num_layers`` counts the decoder layers, and each
LongcatFlashDecoderLayer holds ``self_attn[0]`` and ``self_attn[1]``, two LongcatFlashMLA modules
that cache under layer indices 2i and 2i + 1 (the config derives num_hidden_layers = 2 x num_layers,
the cache's layer count). Each sublayer caches one MLA latent per token (kv_lora_rank +
qk_rope_head_dim), read by the generic MLA rule. Zero experts (zero_expert_num) and the MLPs size
weights only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import attention_entry, checked_layers

if TYPE_CHECKING:
    from kvcalc.inputs.hf.configs import Reader
    from kvcalc.inputs.hf.families import Layout

_SUBLAYERS = 2


def read(r: Reader) -> Layout:
    """Two latent entries per decoder layer; the layer count is the decoder layers'."""
    r.defaults = {"num_layers": 28}  # LongcatFlashConfig's default
    layers = checked_layers(r, r.positive_int("num_layers"))
    derived = r.raw.get("num_hidden_layers")
    if derived is not None and derived != _SUBLAYERS * layers:
        raise ConfigError(
            f"config field '{r.where}num_hidden_layers' ({derived}) is not 2 x num_layers ({layers}): "
            "LongCat-Flash derives it from num_layers"
        )
    entry, heads = attention_entry(r)
    r.entry_layers = [i // _SUBLAYERS for i in range(_SUBLAYERS * layers)]
    return [entry] * (_SUBLAYERS * layers), layers, heads
