"""Gemma 4 (``gemma4_text``): sliding and full attention layers, each kind with a geometry of its own.

Read from transformers 5.24 (models/gemma4/configuration_gemma4.py, modeling_gemma4.py): the layer
kinds of ``Gemma4TextConfig.__post_init__`` (``_layer_kinds``) and the K/V each kind keeps
(``_entries``). Shared K/V layers (``num_kv_shared_layers``) and ``per_layer_config`` are the
generic reader's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import LAYER_KEYS, checked_layers, family_layer_types, kinds_attention, layer_entries
from kvcalc.spec import AttentionCache

if TYPE_CHECKING:
    from kvcalc.inputs.hf.configs import Reader
    from kvcalc.inputs.hf.families import Layout
    from kvcalc.spec import LatentCache, LayerCache


def read(r: Reader) -> Layout:
    """One entry per layer, the entry of its kind."""
    layers = checked_layers(r, r.positive_int(LAYER_KEYS))
    kinds = _layer_kinds(r, layers)
    attention, heads = kinds_attention(r, kinds)
    # Each layer kind has its own geometry.
    entries = _entries(r, attention, heads) if attention is not None else None
    caches = layer_entries(r, layers, kinds, attention, own=entries.get if entries is not None else None)
    return caches, layers, heads


def _layer_kinds(r: Reader, layers: int) -> list[str]:
    """Gemma 4's layer kinds as Gemma4TextConfig.__post_init__ (transformers 5.24,
    models/gemma4/configuration_gemma4.py) derives them: ``layer_types``, else five sliding layers
    then one full (a fixed pattern of 6, whatever the file says), and the last layer forced full."""
    if r.raw.get("layer_types") is not None:
        kinds = family_layer_types(r, layers, ("sliding_attention", "full_attention"), "gemma4")
    else:
        r.notes.append(f"no '{r.where}layer_types': gemma4 keeps five sliding layers, then one full")
        kinds = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(layers)]
    if kinds[-1] != "full_attention":
        r.notes.append("gemma4's last layer is always full attention (Gemma4TextConfig forces it)")
        kinds[-1] = "full_attention"
    return kinds


def _entries(r: Reader, entry: AttentionCache | LatentCache, heads: int | None) -> dict[str, LayerCache]:
    """The cache entry of each Gemma 4 layer kind (transformers 5.24, models/gemma4/).

    Gemma4TextConfig.__post_init__ gives every full layer head_dim = ``global_head_dim`` (512 when
    absent) and, only when ``attention_k_eq_v`` is true, num_key_value_heads =
    ``num_global_key_value_heads``; sliding layers keep head_dim and num_key_value_heads.
    Gemma4TextAttention: with ``attention_k_eq_v`` a full layer has no v_proj and takes V from the
    K projection, but K then gets k_norm and RoPE and V gets v_norm, and ``cache.update(key_states,
    value_states, ...)`` stores both tensors: the cache holds K and V as usual (2 x heads x dim).
    A sliding layer keeps ``sliding_window`` tokens (halved plus one for
    use_bidirectional_attention "all"; "vision" changes no window)."""
    base = entry.as_attention()
    if base is None or heads is None:
        raise ConfigError("gemma4 configs with MLA (kv_lora_rank) are not supported")
    window = r.positive_int("sliding_window", default=512)
    if r.raw.get("use_bidirectional_attention") == "all":
        window = window // 2 + 1
        r.notes.append(f"use_bidirectional_attention 'all': gemma4 sets the sliding window to {window} (half plus one)")
    k_eq_v = r.flag("attention_k_eq_v")
    if r.raw.get("per_layer_config") is not None:
        # Gemma4TextConfig.__post_init__ derives full-layer geometry from global_head_dim and
        # num_global_key_value_heads only without per_layer_config (a config saved by transformers
        # 5.24 writes the result there instead); the overrides are applied by the generic reader
        # (configs._per_layer_overrides).
        ignored = [k for k in ("global_head_dim", "num_global_key_value_heads") if r.has(k)]
        if ignored:
            r.notes.append(
                f"'{r.where}per_layer_config' is given, so gemma4 ignores {' and '.join(ignored)} (Gemma4TextConfig)"
            )
        r.considered("global_head_dim", "num_global_key_value_heads")
        full = AttentionCache(base.kv_heads, base.k_head_dim, base.v_head_dim)
        sliding = AttentionCache(base.kv_heads, base.k_head_dim, base.v_head_dim, window=window)
        return {"sliding_attention": sliding, "full_attention": full}
    global_dim = r.positive_int("global_head_dim", default=512)
    global_kv = r.optional_positive_int("num_global_key_value_heads")
    if global_kv is not None and not k_eq_v:
        r.notes.append(
            f"'{r.where}num_global_key_value_heads' ({global_kv}) applies only with attention_k_eq_v "
            f"(Gemma4TextConfig); full layers keep {base.kv_heads} KV heads"
        )
    full_kv = global_kv if global_kv is not None and k_eq_v else base.kv_heads
    if full_kv > heads or heads % full_kv:
        raise ConfigError(
            f"config field '{r.where}num_global_key_value_heads' ({full_kv}) must divide the {heads} query heads"
        )
    return {
        "sliding_attention": AttentionCache(base.kv_heads, base.k_head_dim, base.v_head_dim, window=window),
        "full_attention": AttentionCache(full_kv, global_dim, global_dim),
    }
