"""DeepSeek-V4 (model_type ``deepseek_v4``): a K=V sliding window in every layer, plus compressed
attention in most.

Every rule is transformers 5.24's (models/deepseek_v4/configuration_deepseek_v4.py and
modeling_deepseek_v4.py):

- Each layer is ``sliding_attention``, ``compressed_sparse_attention`` (CSA) or
  ``heavily_compressed_attention`` (HCA): ``layer_types`` if given, else the checkpoints' per-layer
  ``compress_ratios`` (0 / 4 / 128 name the type; entries past ``num_hidden_layers`` are the MTP
  layers, which transformers does not build), else 2 HCA layers then CSA / HCA alternating.
- Every layer caches one ``head_dim`` row per token that serves as key and value (shared-KV
  MQA: ``num_key_value_groups = num_attention_heads``, one ``kv_proj``), in a window of
  ``sliding_window`` tokens.
- A CSA / HCA layer also pools every ``compress_rates[type]`` tokens (default 4 / 128; the legacy
  ``compress_rate_csa`` / ``compress_rate_hca`` override it) into one ``head_dim`` entry kept for the
  whole sequence, and carries the tokens not yet pooled (``buffer_kv`` / ``buffer_gate``: the
  projection and the gate logits, ``2 x head_dim`` wide in CSA, ``head_dim`` in HCA).
- A CSA layer's indexer compresses the same windows into ``index_head_dim`` keys with its own
  buffer (``2 x index_head_dim``), and CSA's overlapping windows carry the last closed window's
  first half (``overlap_kv`` / ``overlap_gate``: ratio x head_dim, and ratio x index_head_dim).
"""

from __future__ import annotations

from collections.abc import Mapping

from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import HEAD_KEYS, LAYER_KEYS, Reader, checked_layers, family_layer_types
from kvcalc.spec import (
    CompressedCache,
    CompressorBufferCache,
    CompressorOverlapCache,
    IndexerCache,
    KVWindowCache,
    LayerCache,
)

SLIDING, CSA, HCA = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"
_LAYER_TYPES = (SLIDING, CSA, HCA)
# configuration_deepseek_v4.py _COMPRESS_RATIO_TO_LAYER_TYPE: the only values a checkpoint's
# compress_ratios may hold (any other is a KeyError in DeepseekV4Config.__post_init__).
_RATIO_TO_TYPE = {0: SLIDING, 4: CSA, 128: HCA}
# DeepseekV4Config defaults (transformers 5.24).
_DEFAULT_RATES = {CSA: 4, HCA: 128}
_DEFAULT_HEAD_DIM, _DEFAULT_WINDOW, _DEFAULT_INDEX_HEAD_DIM = 512, 128, 128


def read(r: Reader) -> tuple[list[LayerCache], int, int | None]:
    layers = checked_layers(r, r.positive_int(LAYER_KEYS, default=43))
    heads = r.positive_int(HEAD_KEYS, default=64)
    head_dim = r.positive_int("head_dim", default=_DEFAULT_HEAD_DIM)
    window = r.positive_int("sliding_window", default=_DEFAULT_WINDOW)
    _single_kv_head(r)
    kinds = _layer_types(r, layers)
    rates = _compress_rates(r)
    index_head_dim = r.positive_int("index_head_dim", default=_DEFAULT_INDEX_HEAD_DIM) if CSA in kinds else 0
    if CSA not in kinds:
        r.considered("index_head_dim")  # no CSA layer, so no indexer
    # What sizes compute or weights, not the cache: the indexer's query heads and top-k, the query
    # and grouped output low ranks, partial RoPE and its compressed-branch base, the MTP layers
    # (not built by transformers), the hash-routed MoE layers.
    r.considered(
        "index_n_heads", "index_topk", "o_lora_rank", "o_groups", "qk_rope_head_dim", "partial_rotary_factor",
        "compress_rope_theta", "num_nextn_predict_layers", "num_hash_layers", "mlp_layer_types",
    )  # fmt: skip

    windows: list[LayerCache] = []
    extras: list[LayerCache] = []
    extra_layers: list[int] = []  # the decoder layer of each extra entry (pipeline stages)
    for layer, kind in enumerate(kinds):
        # transformers caches uncompressed layers through the generic DynamicSlidingWindowLayer
        # (separate K and V tensors); CSA / HCA layers through DeepseekV4HCACache (one tensor).
        windows.append(KVWindowCache(head_dim=head_dim, window=window, v_copy=kind == SLIDING))
        if kind == SLIDING:
            continue
        ratio = rates[kind]
        before = len(extras)
        extras.append(CompressedCache(head_dim=head_dim, ratio=ratio))
        if kind == HCA:
            extras.append(CompressorBufferCache(ratio=ratio, kv_width=head_dim, gate_width=head_dim))
        else:
            width = 2 * (head_dim + index_head_dim)  # Ca and Cb halves, compressor and indexer
            extras += [
                IndexerCache(head_dim=index_head_dim, ratio=ratio),
                CompressorBufferCache(ratio=ratio, kv_width=width, gate_width=width),
                CompressorOverlapCache(ratio=ratio, width=head_dim + index_head_dim),
            ]
        extra_layers += [layer] * (len(extras) - before)
    r.entry_layers = [*range(layers), *extra_layers]
    # Extra entries follow the per-layer ones, as DeepSeek-V3.2's indexer keys do, so that entry i
    # is transformers' layer i.
    return [*windows, *extras], layers, heads


def _single_kv_head(r: Reader) -> None:
    """DeepseekV4Attention caches one head whatever num_key_value_heads says (kv_proj projects to
    one head_dim row; num_key_value_groups = num_attention_heads)."""
    value = r.raw.get("num_key_value_heads")
    r.considered("num_key_value_heads")
    if value is not None and value != 1:
        r.notes.append(
            f"'{r.where}num_key_value_heads' is {value!r}; DeepSeek-V4 caches one shared K=V head whatever it says"
        )


def _layer_types(r: Reader, layers: int) -> list[str]:
    if r.has("layer_types"):
        r.considered("compress_ratios")  # layer_types wins in DeepseekV4Config.__post_init__
        return family_layer_types(r, layers, _LAYER_TYPES, "DeepSeek-V4")
    if r.has("compress_ratios"):
        ratios = r.int_list("compress_ratios")
        if len(ratios) < layers:
            raise ConfigError(f"config field '{r.where}compress_ratios' has {len(ratios)} entries for {layers} layers")
        bad = sorted({v for v in ratios[:layers] if v not in _RATIO_TO_TYPE})
        if bad:
            raise ConfigError(
                f"config field '{r.where}compress_ratios' holds {bad}; DeepSeek-V4 layers are 0 (sliding), "
                "4 (CSA) or 128 (HCA)"
            )
        return [_RATIO_TO_TYPE[v] for v in ratios[:layers]]
    r.notes.append(
        f"no '{r.where}layer_types' or '{r.where}compress_ratios': used DeepseekV4Config's default "
        "(2 HCA layers, then CSA and HCA alternating)"
    )
    return [HCA] * min(layers, 2) + [CSA if i % 2 else HCA for i in range(max(layers - 2, 0))]


def _compress_rates(r: Reader) -> dict[str, int]:
    """Tokens per compressed entry for CSA and HCA layers: ``compress_rates``, then the legacy
    scalar overrides, as DeepseekV4Config.__post_init__ folds them."""
    rates = dict(_DEFAULT_RATES)
    given = r.raw.get("compress_rates")
    if given is not None:
        if not isinstance(given, Mapping):
            raise ConfigError(f"config field '{r.where}compress_rates' must be an object of rates per layer type")
        r.considered("compress_rates")
        unknown = sorted(str(k) for k in given if k not in rates)
        if unknown:
            raise ConfigError(f"config field '{r.where}compress_rates' names unknown layer types {unknown}")
        for kind, value in given.items():
            rates[kind] = r.check_positive(f"compress_rates.{kind}", value)
    else:
        r.notes.append(f"no '{r.where}compress_rates': CSA pools 4 tokens per entry, HCA 128 (DeepseekV4Config)")
    for kind, key in ((CSA, "compress_rate_csa"), (HCA, "compress_rate_hca")):
        value = r.optional_positive_int(key)
        if value is not None:
            rates[kind] = value
    return rates
