"""Encoder-decoder models (T5, BART, Whisper and their kin, and any config that says
``is_encoder_decoder``): decoder self-attention per generated token plus cross-attention over the
encoder output. The model types are listed in the registry (``families._ENCODER_DECODER_TYPES``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import HEAD_KEYS, HIDDEN_KEYS, KV_HEAD_KEYS, LAYER_KEYS, checked_layers
from kvcalc.spec import AttentionCache

if TYPE_CHECKING:
    from kvcalc.inputs.hf.configs import Reader
    from kvcalc.inputs.hf.families import Layout
    from kvcalc.spec import LayerCache


def read(r: Reader) -> Layout:
    """Decoder self-attention per generated token plus cross-attention over the encoder output; the
    encoder's length, where the config gives one, goes to ``r.encoder_tokens``."""
    # The encoder caches nothing: its layer count (num_hidden_layers in BART/Whisper) sizes nothing.
    r.considered("num_hidden_layers", "encoder_layers", "num_layers")
    layer_key = r.first_key(("decoder_layers", "num_decoder_layers"))
    if layer_key is not None:
        layers = r.check_positive(layer_key, r.raw[layer_key])
    else:
        layers = r.positive_int(LAYER_KEYS)
        if r.has("num_layers"):
            r.notes.append(f"no '{r.where}num_decoder_layers': the decoder has as many layers as the encoder")
    layers = checked_layers(r, layers)
    head_key = r.first_key(("decoder_attention_heads", *HEAD_KEYS))
    if head_key is None:
        raise ConfigError(f"config field '{r.where}decoder_attention_heads' is missing")
    heads = r.check_positive(head_key, r.raw[head_key])
    if r.has("d_kv"):
        head_dim = r.check_positive("d_kv", r.raw["d_kv"])
    else:
        hidden = r.positive_int(HIDDEN_KEYS)
        if hidden % heads:
            raise ConfigError(f"config field '{r.where}d_model' ({hidden}) is not divisible by {heads} heads")
        head_dim = hidden // heads
    kv_key = r.first_key(("decoder_key_value_heads", *KV_HEAD_KEYS))
    kv = r.check_positive(kv_key, r.raw[kv_key]) if kv_key else heads
    if heads % kv:
        raise ConfigError(f"config field '{r.where}{kv_key}' ({kv}) must divide {heads} heads")
    self_attn = AttentionCache(kv, head_dim, head_dim)
    cross_attn = AttentionCache(kv, head_dim, head_dim, tokens="encoder")
    caches: list[LayerCache] = [*([self_attn] * layers), *([cross_attn] * layers)]
    r.entry_layers = [*range(layers), *range(layers)]  # decoder layer i holds entries i and layers + i
    r.encoder_tokens = r.optional_positive_int("max_source_positions")  # Whisper: 1500 frames
    return caches, layers, heads
