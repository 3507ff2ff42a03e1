"""GLM-5 (``glm_moe_dsa``): MLA with DeepSeek Sparse Attention, whose indexer some layers share.

Read from transformers 5.24 (models/glm_moe_dsa/configuration_glm_moe_dsa.py, modeling_glm_moe_dsa.py)
and checked against vLLM (vllm/model_executor/models/deepseek_v2.py @ 002d6073):

- Every layer is MLA (``GlmMoeDsaAttention``): the cache holds the compressed latent
  (``kv_lora_rank``) and the rope key (``qk_rope_head_dim``) per token, no factor 2, as DeepSeek-V3.
  ``GlmMoeDsaConfig.__post_init__`` overwrites ``head_dim`` with ``qk_rope_head_dim`` and derives
  ``qk_head_dim``, so neither sizes anything.
- ``indexer_types[i]`` says whether layer i runs its own indexer (``"full"``: a
  ``GlmMoeDsaIndexer`` whose keys ``DynamicIndexedLayer.indexer_keys`` caches, ``[batch, seq,
  index_head_dim]``) or reuses the previous full layer's top-k (``"shared"``: no indexer, no keys).
  Without the list, ``__post_init__`` derives it from ``index_topk_pattern`` ("F"/"S" per layer, or
  a list), else from ``index_topk_freq`` (default 1) and ``index_skip_topk_offset`` (default 2):
  layer i is full when ``max(i - offset + 1, 0) % freq == 0``.
- vLLM builds an ``Indexer`` (with its ``DeepseekV32IndexerCache``) only on layers that do not skip
  top-k, and decides that from ``index_topk_pattern`` / ``index_topk_freq`` /
  ``index_skip_topk_offset`` alone; it never reads ``indexer_types``. Where the two disagree the
  estimate follows transformers and says so in a note.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import HEAD_KEYS, KV_HEAD_KEYS, LAYER_KEYS, Reader, checked_layers, non_negative
from kvcalc.spec import IndexerCache, LatentCache

if TYPE_CHECKING:
    from kvcalc.inputs.hf.families import Layout
    from kvcalc.spec import LayerCache

# GlmMoeDsaConfig's class defaults (transformers 5.24), which a trimmed config relies on.
_DEFAULTS = {
    "num_hidden_layers": 78, "num_attention_heads": 64, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 192, "v_head_dim": 256, "index_head_dim": 128,
}  # fmt: skip
_FULL, _SHARED = "full", "shared"
# GlmMoeDsaConfig.__post_init__ maps the letters of a string index_topk_pattern.
_PATTERN_LETTERS = {"F": _FULL, "S": _SHARED}
# The only layer type GlmMoeDsaConfig gives (every layer is DSA): DynamicCache's DynamicIndexedLayer.
_LAYER_TYPE = "indexed_attention"


def read(r: Reader) -> Layout:
    """One MLA latent entry per layer, then one indexer-key entry per layer that runs its own indexer."""
    layers = checked_layers(r, r.positive_int(LAYER_KEYS, default=_DEFAULTS["num_hidden_layers"]))
    heads = r.positive_int(HEAD_KEYS, default=_DEFAULTS["num_attention_heads"])
    latent = _latent(r)
    _check_layer_types(r, layers)
    kinds = _indexer_types(r, layers)
    _note_vllm_disagreement(r, kinds, layers)
    full = kinds.count(_FULL)
    indexer = IndexerCache(head_dim=r.positive_int("index_head_dim", default=_DEFAULTS["index_head_dim"]))
    if full < layers:
        _note_shared(r, layers, full, indexer)
    _consider_compute_fields(r)
    caches: list[LayerCache] = [latent] * layers
    caches += [indexer] * full
    r.entry_layers = [*range(layers), *(i for i, kind in enumerate(kinds) if kind == _FULL)]
    return caches, layers, heads


def _note_shared(r: Reader, layers: int, full: int, indexer: IndexerCache) -> None:
    r.notes.append(
        f"{layers - full} of {layers} layers reuse another layer's top-k ('shared' indexer) and cache no "
        f"indexer keys; {full} run their own indexer"
    )
    # SGLang (python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py @ 001ccef0,
    # get_cell_size_per_token) sizes an NSA model's index-key pool as index bytes x num_layers:
    # head_dim fp8 values + one fp32 scale per 128 of them, a token and layer.
    row = indexer.head_dim + indexer.head_dim // 128 * 4
    r.notes.append(
        f"SGLang sizes its DSA index-key pool for all {layers} layers: under --engine sglang add "
        f"{layers - full} x {row} B per token for the shared layers"
    )


def _latent(r: Reader) -> LatentCache:
    """GlmMoeDsaAttention's cache: ``cache.update(k_pass, k_rot)`` with the normalised latent
    ``[B, 1, S, kv_lora_rank]`` and the rope key ``[B, 1, S, qk_rope_head_dim]``."""
    # The latent is shared by every head (num_key_value_heads only sizes the eager repeat_kv), and
    # __post_init__ replaces head_dim with qk_rope_head_dim and recomputes qk_head_dim.
    r.considered(*KV_HEAD_KEYS, "head_dim", "qk_head_dim")
    rope = r.positive_int("qk_rope_head_dim", default=_DEFAULTS["qk_rope_head_dim"])
    nope = r.positive_int("qk_nope_head_dim", default=_DEFAULTS["qk_nope_head_dim"])
    return LatentCache(
        latent_dim=r.positive_int("kv_lora_rank", default=_DEFAULTS["kv_lora_rank"]),
        rope_dim=rope,
        k_head_dim=nope + rope,
        v_head_dim=r.positive_int("v_head_dim", default=_DEFAULTS["v_head_dim"]),
    )


def _check_layer_types(r: Reader, layers: int) -> None:
    """``layer_types`` drives DynamicCache's layer classes; GlmMoeDsaAttention is always DSA, so only
    ``indexed_attention`` (the class default) is a layout kvcalc knows."""
    listed = r.raw.get("layer_types")
    if listed is None:
        return
    if not isinstance(listed, list) or len(listed) != layers or any(t != _LAYER_TYPE for t in listed):
        raise ConfigError(
            f"config field '{r.where}layer_types' must list {_LAYER_TYPE!r} for each of the {layers} layers "
            "(GlmMoeDsaConfig's only layer type)"
        )


def _indexer_types(r: Reader, layers: int) -> list[str]:
    """Each layer's indexer mode, as GlmMoeDsaConfig.__post_init__ derives it."""
    listed = r.raw.get("indexer_types")
    if listed is not None:
        # __post_init__ reads the pattern and the schedule only when the list is absent.
        r.considered("index_topk_pattern", "index_topk_freq", "index_skip_topk_offset")
        kinds = _checked_kinds(r, "indexer_types", listed, layers)
    elif r.raw.get("index_topk_pattern") is not None:
        r.considered("index_topk_freq", "index_skip_topk_offset")
        kinds = _pattern_kinds(r, r.raw["index_topk_pattern"], layers)
    else:
        kinds = _schedule_kinds(r, layers)
    if kinds and kinds[0] == _SHARED:
        # GlmMoeDsaAttention.forward: "Shared DSA layers require top-k indices from a previous full
        # indexer layer."
        raise ConfigError(
            f"config field '{r.where}indexer_types' makes layer 0 'shared': it has no earlier full layer "
            "whose top-k it could reuse"
        )
    return kinds


def _checked_kinds(r: Reader, key: str, listed: Any, layers: int) -> list[str]:
    if not isinstance(listed, list) or not all(isinstance(t, str) for t in listed):
        raise ConfigError(f"config field '{r.where}{key}' must be a list of 'full' / 'shared'")
    if len(listed) != layers:
        raise ConfigError(f"config field '{r.where}{key}' lists {len(listed)} layers but the model has {layers}")
    unknown = sorted({t for t in listed if t not in (_FULL, _SHARED)})
    if unknown:
        raise ConfigError(
            f"config field '{r.where}{key}' holds unknown indexer type {unknown[0]!r}; layers are 'full' or 'shared'"
        )
    return list(listed)


def _pattern_kinds(r: Reader, pattern: Any, layers: int) -> list[str]:
    """``index_topk_pattern``: a string of F (full) and S (shared), or a list of 'full' / 'shared'."""
    if isinstance(pattern, str):
        unknown = sorted(set(pattern) - set(_PATTERN_LETTERS))
        if unknown:
            raise ConfigError(
                f"config field '{r.where}index_topk_pattern' holds {unknown[0]!r}; its letters are F (full) and "
                "S (shared)"
            )
        return _checked_kinds(r, "index_topk_pattern", [_PATTERN_LETTERS[c] for c in pattern], layers)
    return _checked_kinds(r, "index_topk_pattern", pattern, layers)


def _schedule_kinds(r: Reader, layers: int) -> list[str]:
    """``index_topk_freq`` (at least 1) and ``index_skip_topk_offset``: full when
    ``max(i - offset + 1, 0) % freq == 0``."""
    freq = _freq(r)
    if freq == 1:
        r.considered("index_skip_topk_offset")  # every layer is full, whatever the offset
        if not r.has("index_topk_freq"):
            r.notes.append(
                f"no '{r.where}indexer_types', 'index_topk_pattern' or 'index_topk_freq': every glm_moe_dsa layer "
                "runs its own indexer (GlmMoeDsaConfig's default)"
            )
        return [_FULL] * layers
    offset = _offset(r)
    return [_FULL if max(i - offset + 1, 0) % freq == 0 else _SHARED for i in range(layers)]


def _freq(r: Reader) -> int:
    # __post_init__: max(index_topk_freq, 1), so 0 means 1 as well.
    if not r.has("index_topk_freq"):
        return 1
    value = non_negative(r, "index_topk_freq")
    return max(value, 1)


def _offset(r: Reader) -> int:
    if not r.has("index_skip_topk_offset"):
        r.notes.append(f"'{r.where}index_skip_topk_offset' not in config; used the glm_moe_dsa default 2")
        return 2
    return non_negative(r, "index_skip_topk_offset")


def _note_vllm_disagreement(r: Reader, kinds: list[str], layers: int) -> None:
    """vLLM's deepseek_v2.py derives the indexer layers from the pattern or schedule, never from
    ``indexer_types``, and reads only the letter "S" of a pattern."""
    pattern = r.raw.get("index_topk_pattern")
    if pattern is not None:
        skip = [isinstance(pattern, str | list) and i < len(pattern) and pattern[i] == "S" for i in range(layers)]
    else:
        freq = max(_int_or(r.raw.get("index_topk_freq"), 1), 1)
        offset = _int_or(r.raw.get("index_skip_topk_offset"), 2)
        skip = [max(i - offset + 1, 0) % freq != 0 for i in range(layers)]
    vllm_full = sum(not s for s in skip)
    if any(s == (k == _FULL) for s, k in zip(skip, kinds, strict=True)):
        r.notes.append(
            f"'{r.where}indexer_types' gives {kinds.count(_FULL)} indexer layers but vLLM (deepseek_v2.py) derives "
            f"{vllm_full} from index_topk_pattern / index_topk_freq / index_skip_topk_offset: this estimate follows "
            "transformers, so --engine vllm may differ"
        )


def _int_or(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _consider_compute_fields(r: Reader) -> None:
    """Fields that shape computation, not what a sequence keeps."""
    # index_n_heads sizes the indexer's queries and index_topk the tokens attention reads; the
    # rope flags only rotate; mlp_layer_types / first_k_dense_replace / moe_layer_freq place MLPs.
    r.considered("index_n_heads", "index_topk", "indexer_rope_interleave", "rope_interleave")
    r.considered("mlp_layer_types", "first_k_dense_replace", "moe_layer_freq", "q_lora_rank")
    # The MTP layers after the model (and their top-k reuse across draft steps) are cached only with
    # speculative decoding, which kvcalc does not model.
    r.considered("num_nextn_predict_layers", "index_share_for_mtp_iteration")
    # A checkpoint's weight quantization (compressed-tensors config_groups, ignore lists, packed
    # modules) sizes weights only; a KV-cache scheme in it is left to the guard.
    quantization = r.raw.get("quantization_config")
    if isinstance(quantization, dict) and not quantization.get("kv_cache_scheme"):
        r.considered("quantization_config")
