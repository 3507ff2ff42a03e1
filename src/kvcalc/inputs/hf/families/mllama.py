"""Llama 3.2 Vision (``mllama``): Llama self-attention layers with cross-attention layers over images.

Read from transformers 5.24 (models/mllama/configuration_mllama.py, modeling_mllama.py):

- ``MllamaTextModel`` builds ``num_hidden_layers`` layers; those listed in
  ``cross_attention_layers`` are ``MllamaCrossAttentionDecoderLayer`` (no self-attention at all),
  the rest ``MllamaSelfAttentionDecoderLayer``. Both attentions have ``num_key_value_heads`` K/V
  heads of ``hidden_size // num_attention_heads`` (the config has no head_dim).
- ``MllamaTextCrossAttention`` projects K and V from ``cross_attention_states`` (the projected
  vision output) and stores them with ``cache.update`` once, at the prefill that carries the images;
  later steps read them back. It caches nothing per text token.
- The vision output is ``[batch, images, max_num_tiles, num_patches, dim]``: the processor pads
  every image to ``max_num_tiles`` tiles, and ``num_patches = (image_size // patch_size) ** 2 + 1``
  (one class token; the padding to a multiple of 8 is sliced off again). So one image puts
  ``max_num_tiles x num_patches`` tokens in every cross-attention layer, as
  ``_prepare_static_cache`` sizes those layers: 4 x ((560 // 14) ** 2 + 1) = 6,404 for the 11B.
- A text-only prompt skips the cross-attention layers entirely (``MllamaTextModel.forward``: no
  ``cross_attention_states`` and nothing cached): they hold nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import HEAD_KEYS, HIDDEN_KEYS, LAYER_KEYS, Reader, checked_layers
from kvcalc.spec import MAX_DIMENSION, AttentionCache

if TYPE_CHECKING:
    from kvcalc.inputs.hf.families import Layout
    from kvcalc.spec import LayerCache

# MllamaTextConfig's defaults (transformers 5.24), which a trimmed text_config relies on.
_TEXT_DEFAULTS = {"num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096}
_CROSS_DEFAULT = [3, 8, 13, 18, 23, 28, 33, 38]
# MllamaVisionConfig's defaults: image_size 448 (the released checkpoints say 560), patch 14, 4 tiles.
_VISION_DEFAULTS = {"image_size": 448, "patch_size": 14, "max_num_tiles": 4}


def read(r: Reader) -> Layout:
    """One self-attention entry per decoder layer, one image cross-attention entry per layer of
    ``cross_attention_layers``; the tokens one image adds to the latter go to ``r.image_tokens``."""
    layers = checked_layers(r, r.positive_int(LAYER_KEYS, default=_TEXT_DEFAULTS["num_hidden_layers"]))
    heads = r.positive_int(HEAD_KEYS, default=_TEXT_DEFAULTS["num_attention_heads"])
    hidden = r.positive_int(HIDDEN_KEYS, default=_TEXT_DEFAULTS["hidden_size"])
    kv = r.positive_int(("num_key_value_heads",), default=_TEXT_DEFAULTS["num_key_value_heads"])
    if hidden % heads:
        raise ConfigError(f"config field '{r.where}hidden_size' ({hidden}) is not divisible by the {heads} heads")
    if kv > heads or heads % kv:
        raise ConfigError(f"config field '{r.where}num_key_value_heads' ({kv}) must divide the {heads} query heads")
    head_dim = hidden // heads
    cross = _cross_layers(r, layers)
    self_attention = AttentionCache(kv, head_dim, head_dim)
    image_attention = AttentionCache(kv, head_dim, head_dim, tokens="image")
    r.image_tokens = _tokens_per_image(r)
    # cross_attention_hidden_size is PretrainedConfig's generic field for add_cross_attention
    # models; MllamaTextModel never reads it (its cross-attention K/V come from hidden_size).
    r.considered("cross_attention_hidden_size")
    caches: list[LayerCache] = [image_attention if i in cross else self_attention for i in range(layers)]
    return caches, layers, heads


def _cross_layers(r: Reader, layers: int) -> set[int]:
    """``cross_attention_layers``, or MllamaTextConfig's default list (noted)."""
    if r.raw.get("cross_attention_layers") is None:
        r.notes.append(f"no '{r.where}cross_attention_layers': used the mllama default {_CROSS_DEFAULT}")
        listed = _CROSS_DEFAULT
    else:
        listed = r.int_list("cross_attention_layers")
    outside = sorted(i for i in listed if not 0 <= i < layers)
    if outside:
        raise ConfigError(
            f"config field '{r.where}cross_attention_layers' holds layer {outside[0]}, outside the {layers} layers"
        )
    if len(set(listed)) != len(listed):
        raise ConfigError(f"config field '{r.where}cross_attention_layers' lists a layer twice")
    return set(listed)


def _tokens_per_image(r: Reader) -> int | None:
    """``max_num_tiles x ((image_size // patch_size) ** 2 + 1)`` from the vision_config beside the
    text config; MllamaVisionConfig's defaults when a mllama config has none; None for a bare text
    config, which says nothing about images."""
    outer = r.outer
    if outer is None:
        r.notes.append(
            "a bare mllama text config says nothing about images: give the tokens per image with --image-tokens "
            "when passing --images"
        )
        return None
    vision = outer.get("vision_config")
    if vision is None:
        vision = {}
        r.notes.append(f"no 'vision_config': used MllamaVisionConfig's defaults {_VISION_DEFAULTS}")
    if not isinstance(vision, Mapping):
        raise ConfigError(f"config field 'vision_config' must be an object, got {type(vision).__name__}")
    size, patch, tiles = (_vision_int(r, vision, key) for key in ("image_size", "patch_size", "max_num_tiles"))
    if patch > size:
        raise ConfigError(f"config field 'vision_config.patch_size' ({patch}) is larger than image_size ({size})")
    per_image = tiles * ((size // patch) ** 2 + 1)
    r.notes.append(
        f"one image = max_num_tiles {tiles} x ((image_size {size} // patch_size {patch})^2 + 1) = {per_image:,} "
        "tokens in each image cross-attention layer (the processor pads every image to max_num_tiles tiles)"
    )
    return per_image


def _vision_int(r: Reader, vision: Mapping[str, Any], key: str) -> int:
    value = vision.get(key)
    if value is None:
        default = _VISION_DEFAULTS[key]
        if vision:
            r.notes.append(f"'vision_config.{key}' not in config; used the mllama default {default}")
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        # MllamaVisionConfig types image_size and patch_size as int or a pair, but the model
        # computes image_size // patch_size, which only an int allows.
        raise ConfigError(f"config field 'vision_config.{key}' must be an integer, got {value!r}")
    if not 0 < value <= MAX_DIMENSION:
        raise ConfigError(f"config field 'vision_config.{key}' must be a positive integer, got {value}")
    return value
