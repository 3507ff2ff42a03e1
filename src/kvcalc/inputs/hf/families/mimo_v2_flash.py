"""MiMo-V2-Flash (Xiaomi, ``mimo_v2_flash``) and its successors' ``mimo_v2``: sliding-window and full
attention layers with their own head geometry, K and V of different widths.

Sources. transformers 5.24 ``models/mimo_v2_flash/configuration_mimo_v2_flash.py``
(``MiMoV2FlashConfig.__post_init__``: ``layer_types``, else full attention at layer 0 and every
sixth layer, sliding elsewhere; ``sliding_window = sliding_window_size + 1`` when the file gives
``sliding_window_size``, "the reference SGLang implementation attends to sliding_window_size previous
tokens plus the query"; class defaults head_dim 192, v_head_dim 128, sliding_window 129) and
``modeling_mimo_v2_flash.py`` (``MiMoV2FlashAttention``: K is ``head_dim`` wide, V ``v_head_dim``;
a sliding layer has twice ``num_key_value_heads`` and a learned per-head sink logit, ``sinks``, that
joins the softmax and caches nothing). vLLM ``vllm/model_executor/models/mimo_v2_flash.py`` @ 01ed47b4
(``MiMoV2FlashDecoderLayer``: ``hybrid_layer_pattern[i] == 1`` is a sliding layer sized by
``swa_num_key_value_heads``, ``swa_head_dim``, ``swa_v_head_dim`` with window ``sliding_window_size``,
the others by ``num_key_value_heads``, ``head_dim``, ``v_head_dim``; ``attention_chunk_size`` is never
read; vLLM registers ``MiMoV2ForCausalLM`` (model type ``mimo_v2``, MiMo-V2.5) to the same model).
llama.cpp (``src/models/mimo2-iswa.cpp`` @ 09e1b618, LLM_ARCH_MIMO2) reads per-layer KV heads and
``n_swa`` from the GGUF, which its converter (``MimoV2Model``) writes from the same fields and
``sliding_window``; the three MTP layers (``model.mtp.*``) cache only under speculative decoding,
which kvcalc does not model.

The real checkpoints carry both spellings, and they agree: MiMo-V2-Flash's full layers at 0, 5, 11,
..., 47 are transformers' default pattern, its ``swa_num_key_value_heads`` (8) is twice
``num_key_value_heads`` (4), and its swa head dims equal the full ones. Where a file makes them
disagree, kvcalc follows the checkpoint's own fields (what vLLM, SGLang and llama.cpp read) and
notes what transformers would build instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import HEAD_KEYS, KV_HEAD_KEYS, LAYER_KEYS, checked_layers, family_layer_types
from kvcalc.spec import AttentionCache

if TYPE_CHECKING:
    from kvcalc.inputs.hf.configs import Reader
    from kvcalc.spec import LayerCache

_FULL, _SLIDING = "full_attention", "sliding_attention"
# MiMoV2FlashConfig's class defaults (transformers 5.24).
_DEFAULTS = {"layers": 48, "heads": 64, "kv_heads": 4, "head_dim": 192, "v_head_dim": 128, "window": 129}


def read(r: Reader) -> tuple[list[LayerCache], int, int | None]:
    layers = checked_layers(r, r.positive_int(LAYER_KEYS, default=_DEFAULTS["layers"]))
    kinds = _layer_kinds(r, layers)
    full, heads = _full_attention(r)
    sliding = _sliding_attention(r, full)
    _set_aside(r)
    return [sliding if kind == _SLIDING else full for kind in kinds], layers, heads


def _transformers_kinds(layers: int) -> list[str]:
    """MiMoV2FlashConfig.__post_init__: full attention at layer 0 and every sixth layer."""
    return [_FULL if i == 0 or not (i + 1) % 6 else _SLIDING for i in range(layers)]


def _layer_kinds(r: Reader, layers: int) -> list[str]:
    """``layer_types`` (transformers), else ``hybrid_layer_pattern`` (1 = sliding; vLLM, SGLang,
    llama.cpp), else transformers' default pattern. When both are given they must agree, since
    each engine reads only one of them."""
    pattern = _hybrid_pattern(r, layers)
    if r.raw.get("layer_types") is not None:
        kinds = family_layer_types(r, layers, (_FULL, _SLIDING), r.model_type)
        if pattern is not None and pattern != kinds:
            raise ConfigError(
                f"config fields '{r.where}layer_types' and '{r.where}hybrid_layer_pattern' disagree: transformers "
                "reads the first, vLLM, SGLang and llama.cpp the second"
            )
        return kinds
    if pattern is not None:
        if r.model_type == "mimo_v2_flash" and pattern != _transformers_kinds(layers):
            r.notes.append(
                f"'{r.where}hybrid_layer_pattern' places full attention where transformers 5.24's MiMoV2FlashConfig "
                "does not (it ignores the field: layer 0 and every sixth layer); vLLM, SGLang and llama.cpp follow "
                "the field, as kvcalc does, so --engine transformers and the probe may differ"
            )
        return pattern
    r.notes.append(
        f"no '{r.where}layer_types' or '{r.where}hybrid_layer_pattern': full attention at layer 0 and every "
        "sixth layer, sliding elsewhere (MiMoV2FlashConfig's default)"
    )
    return _transformers_kinds(layers)


def _hybrid_pattern(r: Reader, layers: int) -> list[str] | None:
    """``hybrid_layer_pattern`` as layer kinds: 0 full attention, 1 sliding window."""
    if r.raw.get("hybrid_layer_pattern") is None:
        return None
    flags = r.int_list("hybrid_layer_pattern")
    if len(flags) != layers:
        raise ConfigError(
            f"config field '{r.where}hybrid_layer_pattern' lists {len(flags)} layers but the model has {layers}"
        )
    if any(flag not in (0, 1) for flag in flags):
        raise ConfigError(f"config field '{r.where}hybrid_layer_pattern' must hold only 0 (full) and 1 (sliding)")
    return [_SLIDING if flag else _FULL for flag in flags]


def _full_attention(r: Reader) -> tuple[AttentionCache, int]:
    """A full layer: ``num_key_value_heads`` heads, K of ``head_dim``, V of ``v_head_dim``."""
    heads = r.positive_int(HEAD_KEYS, default=_DEFAULTS["heads"])
    kv = r.positive_int(KV_HEAD_KEYS, default=_DEFAULTS["kv_heads"])
    _check_divides(r, kv, heads, "num_key_value_heads", "num_attention_heads")
    head_dim = r.positive_int("head_dim", default=_DEFAULTS["head_dim"])
    v_dim = r.positive_int("v_head_dim", default=_DEFAULTS["v_head_dim"])
    return AttentionCache(kv, head_dim, v_dim), heads


def _sliding_attention(r: Reader, full: AttentionCache) -> AttentionCache:
    """A sliding layer: the swa_* geometry the checkpoint's own code and vLLM read. transformers
    5.24 uses twice num_key_value_heads and the full layers' head dims instead."""
    doubled = 2 * full.kv_heads
    kv = r.optional_positive_int("swa_num_key_value_heads")
    if kv is None:
        kv = doubled
        r.notes.append(
            f"no '{r.where}swa_num_key_value_heads': sliding layers get twice num_key_value_heads, {kv} "
            "(transformers' MiMoV2FlashAttention)"
        )
    query_heads = r.optional_positive_int("swa_num_attention_heads")
    if query_heads is not None:  # the sliding layers' query heads: they size no cache, but group the KV heads
        _check_divides(r, kv, query_heads, "swa_num_key_value_heads", "swa_num_attention_heads")
    k_dim = r.optional_positive_int("swa_head_dim") or full.k_head_dim
    v_dim = r.optional_positive_int("swa_v_head_dim") or full.v_head_dim
    if r.model_type == "mimo_v2_flash" and (kv, k_dim, v_dim) != (doubled, full.k_head_dim, full.v_head_dim):
        r.notes.append(
            f"sliding layers: the config's swa_* fields give {kv} KV heads of K {k_dim} / V {v_dim}; transformers 5.24 "
            f"builds {doubled} heads of {full.k_head_dim} / {full.v_head_dim} (twice num_key_value_heads, the full "
            "layers' dims), so --engine transformers and the probe may differ"
        )
    return AttentionCache(kv, k_dim, v_dim, window=_window(r))


def _window(r: Reader) -> int:
    """Tokens a sliding layer attends to: ``sliding_window_size`` previous tokens plus the query
    (MiMoV2FlashConfig sets sliding_window to sliding_window_size + 1), else ``sliding_window``.
    vLLM passes sliding_window_size itself as the layer's window, and llama.cpp's converter
    sliding_window: one token fewer, the same blocks and cells unless T is within a block of it."""
    size = r.optional_positive_int("sliding_window_size")
    if size is not None:
        window = size + 1
        r.considered("sliding_window")  # overridden by sliding_window_size in MiMoV2FlashConfig
        r.notes.append(
            f"sliding layers attend to {size} previous tokens plus the query: window {window} "
            f"(the reference SGLang code, as transformers' MiMoV2FlashConfig reads it; vLLM and llama.cpp use {size})"
        )
        return window
    return r.positive_int("sliding_window", default=_DEFAULTS["window"])


def _set_aside(r: Reader) -> None:
    """Fields read by neither transformers' nor vLLM's attention, or that size no cache."""
    # attention_chunk_size: the real checkpoints set it to the window, but no MiMo attention reads
    # it (neither MiMoV2FlashAttention nor vLLM's MiMoV2Attention); it is not Llama 4's chunking.
    # The sink biases are one learned logit per query head joining the softmax: nothing cached.
    # attention_value_scale multiplies V before caching; attention_projection_layout is how q/k/v
    # weights are stored (fused or split); hybrid_block_size is unused (null in the real files).
    r.considered(
        "attention_chunk_size",
        "add_swa_attention_sink_bias",
        "add_full_attention_sink_bias",
        "attention_value_scale",
        "attention_projection_layout",
        "hybrid_block_size",
    )


def _check_divides(r: Reader, kv: int, heads: int, kv_key: str, heads_key: str) -> None:
    if kv > heads or heads % kv:
        raise ConfigError(f"config field '{r.where}{kv_key}' ({kv}) must divide the {heads} '{heads_key}'")
