"""RWKV (``rwkv``): no attention and no K/V; every layer keeps a recurrent state, refused here by
name rather than read as a model without a geometry.

Read from transformers 5.24 (models/rwkv/modeling_rwkv.py RwkvModel.forward): the state is five
tensors of batch x hidden_size x num_hidden_layers, the two token-shift ones in the model dtype and
the three WKV ones (numerator, denominator, running max) in float32, whatever the model's dtype.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.errors import ConfigError

if TYPE_CHECKING:
    from kvcalc.inputs.hf.configs import Reader
    from kvcalc.inputs.hf.families import Layout


def read(r: Reader) -> Layout:
    raise ConfigError(
        f"config of model type {r.model_type!r} keeps RWKV's recurrent state (2 token-shift and 3 fp32 WKV vectors "
        f"of '{r.where}hidden_size' per layer), not K/V: kvcalc does not model RWKV's state"
    )
