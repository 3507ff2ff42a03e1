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


# Fields that shape no decoder cache, by model type (transformers 5.24 modeling files): LED's
# attention_window (LEDEncoderSelfAttention), LongT5's local/transient-global encoder attention,
# PEGASUS-X's global-local encoder attention, BigBirdPegasus's block-sparse encoder attention, the
# convolutional front ends, feature extractors and adapters of the speech encoders (Speech2Text,
# SpeechT5, SeamlessM4T), SpeechT5's speech pre/post nets and training-only guided-attention loss,
# and SwitchTransformers' choice of which MLPs are sparse.
_SPEECH_ENCODER = (
    "conv_dim", "conv_kernel", "conv_stride", "conv_bias", "num_conv_pos_embedding_groups", "num_conv_pos_embeddings",
)  # fmt: skip
_SEAMLESS = ("conv_depthwise_kernel_size", "num_adapter_layers", "adapter_kernel_size", "adapter_stride", "add_adapter")
_NOT_THE_DECODER_CACHE: dict[str, tuple[str, ...]] = {
    "led": ("attention_window",),
    "longt5": ("local_radius", "global_block_size", "encoder_attention_type"),
    "pegasus_x": ("num_global_tokens", "stagger_local_blocks", "block_size"),
    "bigbird_pegasus": ("attention_type", "num_random_blocks", "block_size"),
    "speech_to_text": ("conv_channels", "conv_kernel_sizes", "num_conv_layers"),
    "speecht5": (
        *_SPEECH_ENCODER, "num_feat_extract_layers", "speech_decoder_postnet_layers", "speech_decoder_prenet_layers",
        "use_guided_attention_loss", "guided_attention_loss_num_heads", "guided_attention_loss_scale",
        "guided_attention_loss_sigma",
    ),
    "seamless_m4t": (*_SPEECH_ENCODER, *_SEAMLESS),
    "seamless_m4t_v2": (*_SPEECH_ENCODER, *_SEAMLESS),
    "switch_transformers": ("num_sparse_decoder_layers", "num_sparse_encoder_layers"),
}  # fmt: skip


# The decoder's own layer, head and KV-head counts, per-side names first (BART's and Whisper's
# decoder_*, T5's and ProphetNet's num_decoder_*, Moonshine's decoder_num_*); kvcalc.inputs.hf.dims
# reads the decoder's widths by the same names.
DECODER_LAYER_KEYS = ("decoder_layers", "num_decoder_layers", "decoder_num_hidden_layers")
DECODER_HEAD_KEYS = ("decoder_attention_heads", "num_decoder_attention_heads", "decoder_num_attention_heads")
DECODER_KV_HEAD_KEYS = ("decoder_key_value_heads", "decoder_num_key_value_heads")


def read(r: Reader) -> Layout:
    """Decoder self-attention per generated token plus cross-attention over the encoder output; the
    encoder's length, where the config gives one, goes to ``r.encoder_tokens``."""
    # The encoder caches nothing: its layer and head counts (num_hidden_layers in BART/Whisper) size
    # nothing. Configs name them per side: BART's encoder_/decoder_layers, T5's num_layers and
    # num_decoder_layers, ProphetNet's num_encoder_/num_decoder_..., Moonshine's encoder_num_/decoder_num_...
    r.considered("num_hidden_layers", "encoder_layers", "num_layers", "num_encoder_layers", "encoder_num_hidden_layers",
                 "encoder_attention_heads", "num_encoder_attention_heads", "encoder_num_attention_heads",
                 "encoder_num_key_value_heads")  # fmt: skip
    # Moonshine pads head_dim after the cache update (modeling_moonshine.py MoonshineAttention.forward,
    # transformers 5.24): the cache keeps the unpadded heads.
    r.considered("pad_head_dim_to_multiple_of")
    # Every decoder layer of an encoder-decoder attends to the encoder (ProphetNet states it).
    r.considered("add_cross_attention")
    r.considered(*_NOT_THE_DECODER_CACHE.get(r.model_type, ()))
    layer_key = r.first_key(DECODER_LAYER_KEYS)
    if layer_key is not None:
        layers = r.check_positive(layer_key, r.raw[layer_key])
    else:
        layers = r.positive_int(LAYER_KEYS)
        if r.has("num_layers"):
            r.notes.append(f"no '{r.where}num_decoder_layers': the decoder has as many layers as the encoder")
    layers = checked_layers(r, layers)
    head_key = r.first_key((*DECODER_HEAD_KEYS, *HEAD_KEYS))
    if head_key is None:
        raise ConfigError(f"config field '{r.where}decoder_attention_heads' is missing")
    heads = r.check_positive(head_key, r.raw[head_key])
    dim_key = r.first_key(("d_kv", "head_dim"))  # T5's d_kv; Cohere ASR's and Moonshine Streaming's head_dim
    if dim_key is not None:
        head_dim = r.check_positive(dim_key, r.raw[dim_key])
    else:
        hidden = r.positive_int(HIDDEN_KEYS)
        if hidden % heads:
            raise ConfigError(f"config field '{r.where}d_model' ({hidden}) is not divisible by {heads} heads")
        head_dim = hidden // heads
    kv_key = r.first_key((*DECODER_KV_HEAD_KEYS, *KV_HEAD_KEYS))
    kv = r.check_positive(kv_key, r.raw[kv_key]) if kv_key else heads
    if heads % kv:
        raise ConfigError(f"config field '{r.where}{kv_key}' ({kv}) must divide {heads} heads")
    self_attn = AttentionCache(kv, head_dim, head_dim)
    cross_attn = AttentionCache(kv, head_dim, head_dim, tokens="encoder")
    caches: list[LayerCache] = [*([self_attn] * layers), *([cross_attn] * layers)]
    r.entry_layers = [*range(layers), *range(layers)]  # decoder layer i holds entries i and layers + i
    r.encoder_tokens = r.optional_positive_int("max_source_positions")  # Whisper: 1500 frames
    return caches, layers, heads
