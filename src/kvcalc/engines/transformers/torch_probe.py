"""Measure a real KV cache with PyTorch (and transformers), on CPU or CUDA.

This file stands alone: it imports nothing from kvcalc, only the standard library, torch and
(for the model probe) transformers, so it can be copied to a GPU machine and run there::

    python torch_probe.py request.json      # or: python -m kvcalc.engines.transformers.torch_probe < request.json

It reads a JSON request and prints a JSON result. ``kvcalc probe`` writes the request, runs the
same code in-process, and sets the result beside its estimate.

Request keys: ``mode`` ("model" or "raw"), ``device`` ("auto", "cpu", "cuda"), ``dtype``
("float32", "bfloat16", "float16"; raw mode also "uint8"), ``seed``, ``max_bytes`` (refuse to
allocate more). Model mode: ``config`` (a Hugging Face config.json object), ``prompt_tokens``,
``decode_tokens``, ``batch``, ``expected_bytes`` (the shrunk cache the caller expects), and for
testing ``attention`` ("auto", "noop", "sdpa", "eager") and ``prefill_chunk``. Raw mode:
``tensors``, a list of ``{"name", "shape", "count"}`` to allocate. Every key is checked before
anything is built or allocated; a bad request is one ``probe: error:`` line, never a traceback.
No code from a model repo is ever run: configs are built through transformers' own classes.

The cache's layout does not depend on how attention scores are computed (every family updates its
cache before it calls the attention function), so no scores are computed: models that take
transformers' attention interface run with a registered no-op attention ("noop"), others through
their sdpa code with torch's kernel returning zeros ("sdpa"), and prefill runs in passes of a fixed
2,048 tokens (shared by the batch), so their number grows linearly with T. Only models with neither
run real "eager" attention, in passes that shrink as T grows. The result names the attention that
ran ("attention") and the tokens per pass ("prefill_chunk").
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from importlib import import_module
from typing import Any


def _sibling() -> Any:
    """torch_cache.py beside this file: a module of the package, or a copied file run beside it."""
    package = "kvcalc.engines.transformers.torch_cache"
    names = [f"{__package__}.torch_cache"] if __package__ else ["torch_cache", package]
    for name in names[:-1]:
        try:
            return import_module(name)
        except ImportError:
            continue
    return import_module(names[-1])


_cache = _sibling()
ProbeError: type[Exception] = _cache.ProbeError
MissingPackage: type[Exception] = _cache.MissingPackage
(_cache_layers, _cache_tensors, _Held, _held_elsewhere, _layer_bytes, _module_tensors, _positions, _returned_cache,
 _storage_bytes) = (_cache._cache_layers, _cache._cache_tensors, _cache._Held, _cache._held_elsewhere,
    _cache._layer_bytes, _cache._module_tensors, _cache._positions, _cache._returned_cache,
    _cache._storage_bytes)  # fmt: skip

# Sizes the shrunk model keeps small; attention geometry (heads, KV heads, head dims, MLA and
# linear-attention dims, windows, chunks) is never touched.
_SMALL = {
    "vocab_size": 256,
    "intermediate_size": 64,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "intermediate_size_mlp": 64,
    "ffn_hidden_size": 64,
    "n_inner": 64,
}
_EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts")
_TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")
_DROP = ("quantization_config", "auto_map", "_name_or_path", "architectures")

# Request limits: far beyond any real cache, small enough that every size computed from them is an
# exact int and no loop over them runs for long.
_MAX_TOKENS = 2**24  # prompt + decoded tokens per sequence
_MAX_COUNT = 2**16  # sequences, decode steps, raw tensors
# Elements in one raw tensor: a petabyte, so a merely too-large cache meets the memory guard's message.
_MAX_ELEMENTS = 2**48
_MAX_DIMS = 8
_MAX_BYTES = 2**62
_MAX_LAYERS = 2**16
_MODEL_DTYPES = ("float32", "bfloat16", "float16")
_ATTENTIONS = ("auto", "noop", "sdpa", "eager")

# Without attention scores a prefill pass holds no chunk x T matrix, so a fixed number of tokens
# per pass keeps the number of passes linear in T. Eager attention builds a heads x chunk x T score
# matrix, so its chunk still shrinks as T grows (a budget of 32 MiB of scores).
_PREFILL_TOKENS = 2048
_EAGER_SCORE_BYTES = 32 * 2**20
_NOOP = "kvcalc_noop"  # the name the no-op attention is registered under in transformers

Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``: stage "prefill" after each prefill pass (tokens), "decode"
after each decoded token (steps)."""


def _plain(text: str, limit: int = 200) -> str:
    """One line of printable text: the first line (and the next when the first ends in a colon, as
    in "Validation error for field 'x':"), control characters such as terminal escapes replaced,
    cut to ``limit`` characters."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    line = " ".join(lines[:2]) if len(lines) > 1 and lines[0].endswith(":") else (lines[0] if lines else "")
    line = "".join(ch if ch.isprintable() else "?" for ch in line)
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _find(config: Any, value: str, path: str = "", depth: int = 0) -> str | None:
    """The config key whose value is ``value`` (a KeyError from transformers names only the value)."""
    if depth > 4:
        return None
    items = config.items() if isinstance(config, dict) else enumerate(config) if isinstance(config, list) else ()
    for key, item in items:
        where = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else str(key)
        if item == value and isinstance(item, str):
            return where
        found = _find(item, value, where, depth + 1)
        if found:
            return found
    return None


def _reason(exc: BaseException, config: dict[str, Any] | None = None) -> str:
    """An exception as ``Class: first line of its message``, one printable line; a KeyError names
    the config key that holds the unknown value when there is one."""
    message = _plain(str(exc), 200)
    detail = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    if isinstance(exc, KeyError) and exc.args and isinstance(exc.args[0], str) and config is not None:
        where = _find(config, exc.args[0])
        if where:
            detail += f" (unknown value of config key {_plain(where, 80)})"
    return detail


def _show(value: Any) -> str:
    """A request value, short and safe to print in an error."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**18:
        # From bits, not str(): Python refuses to print ints of more than 4,300 digits.
        return f"a number of about {int(abs(value).bit_length() * math.log10(2)) + 1} digits"
    return _plain(repr(value), 60)


def _debug() -> bool:
    return os.environ.get("KVCALC_DEBUG") == "1"


@contextmanager
def _stage(what: str, config: dict[str, Any] | None = None) -> Iterator[None]:
    """Turn whatever transformers raises while ``what`` into one ProbeError line: configs it cannot
    run fail with ValueError, KeyError, AssertionError, TypeError and more, depending on the family.
    KVCALC_DEBUG=1 lets the original exception through with its traceback."""
    try:
        yield
    except ProbeError:
        raise
    except Exception as exc:
        if _debug():
            raise
        raise ProbeError(f"transformers failed {what}: {_reason(exc, config)}") from None


_INSTALL = "pip install torch transformers (from a kvcalc checkout: pip install '.[probe]')"


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise MissingPackage(f"the probe needs PyTorch: {_INSTALL}") from None
    return torch


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise MissingPackage(f"the model probe needs transformers: {_INSTALL}") from None
    return transformers


# --- the request ---------------------------------------------------------------------------------


def _whole(value: Any, name: str, low: int, high: int) -> int:
    """``value`` as an int in [low, high], or a ProbeError naming ``name``."""
    # bool is an int subclass: true must not mean one token.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProbeError(f"request key {name!r} must be a whole number, got {_show(value)}")
    if not low <= value <= high:
        raise ProbeError(f"request key {name!r} must be from {low:,} to {_limit(high)}, got {_show(value)}")
    return value


def _limit(high: int) -> str:
    exponent = high.bit_length() - 1
    return f"2**{exponent}" if high == 2**exponent and exponent > 20 else f"{high:,}"


def _key(request: dict[str, Any], key: str, low: int, high: int, default: int | None = None, where: str = "") -> int:
    """``request[key]`` checked by ``_whole``; a missing key takes ``default``, or is an error."""
    value = request.get(key)
    if value is None and default is not None:
        return default
    if key not in request:
        raise ProbeError(f"the request has no {where + key!r}")
    return _whole(value, where + key, low, high)


def _choice(request: dict[str, Any], key: str, allowed: tuple[str, ...], default: str) -> str:
    value = request.get(key, default)
    if not isinstance(value, str) or value not in allowed:
        raise ProbeError(f"request key {key!r} must be one of {', '.join(allowed)}, got {_show(value)}")
    return value


def _object(request: Any) -> dict[str, Any]:
    if not isinstance(request, dict):
        raise ProbeError(f"the request must be a JSON object, got a JSON {_json_kind(request)}")
    return request


def _json_kind(value: Any) -> str:
    kinds = {list: "list", str: "string", bool: "boolean", int: "number", float: "number", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


@dataclass(frozen=True)
class Common:
    """The keys both modes share."""

    device: str
    dtype: str
    seed: int
    max_bytes: int | None


def _common(request: dict[str, Any], dtypes: tuple[str, ...], default_dtype: str) -> Common:
    return Common(
        device=_choice(request, "device", ("auto", "cpu", "cuda"), "auto"),
        dtype=_choice(request, "dtype", dtypes, default_dtype),
        seed=_key(request, "seed", 0, 2**63 - 1, default=0),
        max_bytes=None if request.get("max_bytes") is None else _key(request, "max_bytes", 1, _MAX_BYTES),
    )


@dataclass(frozen=True)
class ModelRequest:
    common: Common
    config: dict[str, Any]
    prompt: int
    decode: int
    batch: int
    expected_bytes: int
    attention: str
    chunk: int | None
    # Image tokens per sequence fed to image cross-attention layers (Llama 3.2 Vision), 0: none.
    image_tokens: int = 0
    # Encoder output tokens per sequence for an encoder-decoder's cross-attention, 0: none.
    encoder_tokens: int = 0


def check_model_request(request: Any) -> ModelRequest:
    """A model-mode request with every key checked; a ProbeError names the first bad one."""
    request = _object(request)
    config = request.get("config")
    if not isinstance(config, dict):
        raise ProbeError(f"request key 'config' must be a JSON object (a config.json), got {_show(config)}")
    prompt = _key(request, "prompt_tokens", 1, _MAX_TOKENS)
    decode = _key(request, "decode_tokens", 0, _MAX_COUNT, default=1)
    if prompt + decode > _MAX_TOKENS:
        raise ProbeError(f"request keys 'prompt_tokens' + 'decode_tokens' must be at most {_limit(_MAX_TOKENS)}")
    return ModelRequest(
        common=_common(request, _MODEL_DTYPES, "float32"),
        config=config,
        prompt=prompt,
        decode=decode,
        batch=_key(request, "batch", 1, _MAX_COUNT, default=1),
        expected_bytes=_key(request, "expected_bytes", 0, _MAX_BYTES, default=0),
        attention=_choice(request, "attention", _ATTENTIONS, "auto"),
        chunk=None if request.get("prefill_chunk") is None else _key(request, "prefill_chunk", 1, _MAX_TOKENS),
        image_tokens=_key(request, "image_tokens", 0, _MAX_TOKENS, default=0),
        encoder_tokens=_key(request, "encoder_tokens", 0, _MAX_TOKENS, default=0),
    )


@dataclass(frozen=True)
class RawTensor:
    name: str
    shape: tuple[int, ...]
    count: int


@dataclass(frozen=True)
class RawRequest:
    common: Common
    tensors: tuple[RawTensor, ...]


def check_raw_request(request: Any) -> RawRequest:
    """A raw-mode request with every key checked; a ProbeError names the first bad one."""
    request = _object(request)
    specs = request.get("tensors")
    if not isinstance(specs, list):
        raise ProbeError(f"request key 'tensors' must be a list of {{name, shape, count}}, got {_show(specs)}")
    if len(specs) > _MAX_COUNT:
        raise ProbeError(f"request key 'tensors' lists {len(specs):,} entries; at most {_MAX_COUNT:,}")
    tensors = []
    for i, spec in enumerate(specs):
        where = f"tensors[{i}]."
        if not isinstance(spec, dict):
            raise ProbeError(f"request key 'tensors[{i}]' must be an object {{name, shape, count}}, got {_show(spec)}")
        name = spec.get("name", f"tensors[{i}]")
        if not isinstance(name, str):
            raise ProbeError(f"request key '{where}name' must be text, got {_show(name)}")
        shape = spec.get("shape")
        if not isinstance(shape, list) or len(shape) > _MAX_DIMS:
            raise ProbeError(
                f"request key '{where}shape' must be a list of up to {_MAX_DIMS} sizes, got {_show(shape)}"
            )
        dims = tuple(_whole(d, f"{where}shape[{j}]", 0, _MAX_ELEMENTS) for j, d in enumerate(shape))
        if (numel := math.prod(dims)) > _MAX_ELEMENTS:
            limit = _limit(_MAX_ELEMENTS)
            raise ProbeError(f"request key '{where}shape' holds {numel:,} elements; at most {limit} per tensor")
        count = _key(spec, "count", 0, _MAX_COUNT, default=1, where=where)
        tensors.append(RawTensor(_plain(name, 60), dims, count))
    if (total := sum(t.count for t in tensors)) > _MAX_COUNT:
        raise ProbeError(f"the request asks for {total:,} tensors in all; at most {_MAX_COUNT:,}")
    return RawRequest(common=_common(request, ("uint8", *_MODEL_DTYPES), "uint8"), tensors=tuple(tensors))


# --- torch helpers -------------------------------------------------------------------------------


def _dtype(torch: Any, name: str) -> Any:
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "uint8": torch.uint8}
    return table[name]  # the name was checked against the request's allowed dtypes


def _device(torch: Any, name: str) -> Any:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ProbeError("--device cuda was asked for but torch sees no CUDA device")
    return torch.device(name)


def _free_bytes(torch: Any, device: Any) -> int:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        import psutil
    except ImportError:
        return 2**62  # cannot tell: do not refuse
    return int(psutil.virtual_memory().available)


def _guard(
    torch: Any, device: Any, needed: int, limit: int | None, hint: str = "try smaller --tokens or --batch"
) -> None:
    """Refuse before allocating ``needed`` bytes (a non-negative int) beyond 80% of what is free."""
    free = _free_bytes(torch, device)
    ceiling = min(free * 8 // 10, limit) if limit else free * 8 // 10
    if needed > ceiling:
        raise ProbeError(
            f"the probe would allocate about {needed:,} bytes but only {ceiling:,} are safe to use on "
            f"{device.type}: {hint}"
        )


# --- model probe ---------------------------------------------------------------------------------


# Text configs AutoModelForCausalLM reaches only through their wrapper's config: transformers 5.24
# maps MllamaConfig, not MllamaTextConfig, to MllamaForCausalLM (models/auto/modeling_auto.py).
_TEXT_ONLY_CAUSAL_LM = {"mllama_text_model": "MllamaForCausalLM"}
# Text configs whose special token ids must stay integers (MllamaTextConfig types bos_token_id as int).
_INT_TOKEN_IDS = frozenset({"mllama_text_model"})


def _parameters(model_class: Any) -> set[str]:
    import inspect

    return set(inspect.signature(model_class.forward).parameters)


def _causal_lm_class(transformers: Any, text: Any, model_type: str) -> Any:
    """The class AutoModelForCausalLM (AutoModelForSeq2SeqLM, AutoModelForSpeechSeq2Seq for an
    encoder-decoder) builds for this text config, or a ProbeError saying there is none."""
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING

    if getattr(text, "is_encoder_decoder", False):
        seq2seq = (transformers.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING, transformers.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING)
        for mapping in seq2seq:
            if type(text) in mapping:
                return mapping[type(text)]
        raise ProbeError(f"transformers {transformers.__version__} has no generating model for {model_type!r}")
    if text.model_type in _TEXT_ONLY_CAUSAL_LM:  # mapped by its wrapper's config class only
        return getattr(transformers, _TEXT_ONLY_CAUSAL_LM[text.model_type])
    try:
        return MODEL_FOR_CAUSAL_LM_MAPPING[type(text)]
    except KeyError:
        # The text decoder of a multimodal model with no causal LM of its own (Qwen2VLTextModel,
        # Glm4vTextModel): its base model, which takes and returns the cache (forward's ``cache``).
        try:
            base = transformers.MODEL_MAPPING[type(text)]
        except KeyError:
            base = None
        if base is not None and "cache" in _parameters(base):
            return base
        inner = f" (its text model is {text.model_type!r})" if text.model_type != model_type else ""
        raise ProbeError(
            f"transformers {transformers.__version__} has no causal language model for model_type {model_type!r}"
            f"{inner}: the probe builds causal and encoder-decoder language models"
        ) from None


def shrink_config(config: dict[str, Any], positions: int = 0) -> tuple[Any, list[int], list[str]]:
    """The text model's config, shrunk to one layer of each kind; the kept layer indices and every
    layer's kind in the full model."""
    transformers = _transformers()
    from transformers import CONFIG_MAPPING, AutoConfig

    raw = {k: v for k, v in config.items() if k not in _DROP}
    model_type = raw.pop("model_type", None)
    if not isinstance(model_type, str) or not model_type:
        raise ProbeError("the config has no model_type")
    if model_type not in CONFIG_MAPPING:
        raise ProbeError(f"transformers {transformers.__version__} knows no model_type {_show(model_type)}")
    try:
        full = AutoConfig.for_model(model_type, **raw)
    except Exception as exc:  # ValueError, KeyError, TypeError, huggingface_hub's strict-dataclass errors
        if _debug():
            raise
        reason = _plain(str(exc).split(". Should contain")[0]) or type(exc).__name__
        raise ProbeError(f"transformers cannot build a {model_type} config: {reason}") from None
    seq2seq = bool(getattr(full, "is_encoder_decoder", False))
    # An encoder-decoder whose config holds both sides is shrunk whole (its decoder view is a copy).
    text = full if seq2seq else full.get_text_config(decoder=True)
    _causal_lm_class(transformers, text, model_type)
    if seq2seq:
        # Each decoder layer's self-attention, then its cross-attention (an EncoderDecoderCache).
        layers = _cache._decoder_layers(text)
        kinds, keep, sublayers = ["full_attention"] * layers + ["cross_attention"] * layers, [0, layers], 1
    else:
        count = text.num_hidden_layers
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= _MAX_LAYERS:
            raise ProbeError(f"the config's num_hidden_layers must be from 1 to {_MAX_LAYERS:,}, got {_show(count)}")
        kinds, layers = _cache._layer_kinds(text), count
        keep = [kinds.index(kind) for kind in dict.fromkeys(kinds)]  # the first layer of each kind, in order
        if int(getattr(text, "num_kv_shared_layers", 0) or 0):
            raise ProbeError("the probe does not shrink KV-sharing models (num_kv_shared_layers)")
        sublayers = _cache._sublayers(text, layers)
    if sublayers > 1:
        # Decoder layers of several attention sublayers, each a cache layer of its own (LongCat-Flash:
        # num_hidden_layers is derived as 2 x num_layers): keep the first decoder layer whole.
        if len(set(kinds)) > 1:
            raise ProbeError("the probe cannot shrink a model whose attention sublayers differ in kind")
        keep = list(range(sublayers))

    data = text.to_dict()
    for key, value in list(data.items()):
        # Per-layer lists (layer_types, no_rope_layers, ...) follow the kept layers.
        if isinstance(value, list) and len(value) == layers and key not in ("eos_token_id",):
            data[key] = [value[i] for i in keep]
    if seq2seq:
        _cache._one_layer_a_side(data)
    elif sublayers > 1:
        data.pop("num_hidden_layers", None)
        data["num_layers"] = 1
    else:
        data["num_hidden_layers"] = len(keep)
    per_layer = data.get("per_layer_config")
    if isinstance(per_layer, dict) and all(str(k).isdigit() for k in per_layer):
        # Heterogeneous configs (transformers' per_layer_config: Gemma 4's full layers) key their
        # overrides by layer index ("05"): follow the kept layers, as the per-layer lists do.
        by_index = {int(k): v for k, v in per_layer.items()}
        data["per_layer_config"] = {new: by_index[old] for new, old in enumerate(keep) if old in by_index}
    pattern = data.get("block_types")
    if isinstance(pattern, list) and pattern and len(pattern) != layers:  # repeated over the layers: RecurrentGemma
        data["block_types"] = [pattern[i % len(pattern)] for i in keep]
    for key in ("hybrid_layer_ids", "attn_layer_indices"):
        # Layers listed by index follow the kept layers too: Zamba2's hybrid layers (Zamba2Config
        # keeps the file's list over the one it derives, and the shared blocks look their adapters
        # up by it), Bamba's attention layers.
        if isinstance(data.get(key), list):
            listed = set(data[key])
            data[key] = [new for new, old in enumerate(keep) if old in listed]
    if "attn_layer_period" in data and "attn_layer_offset" in data:
        # Jamba: rebuild the mamba/attention pattern for the kept layers (one of each kind).
        attention = [i for i, k in enumerate(kinds[j] for j in keep) if k in ("attention", "full_attention")]
        data["attn_layer_period"] = len(keep)
        data["attn_layer_offset"] = attention[0] if attention else len(keep)
        data["expert_layer_period"] = len(keep)
        data["expert_layer_offset"] = 0
    pure_mamba = "state_size" in data and "expand" in data  # MambaConfig: intermediate_size is the SSM width
    for key, value in _SMALL.items():
        if key == "intermediate_size" and pure_mamba:
            continue
        # None often means "derived from the width" (Falcon's ffn_hidden_size = 4 x hidden): pin it.
        if (isinstance(data.get(key), int) and data[key] > value) or (key in data and data[key] is None):
            data[key] = value
    for key in _EXPERT_COUNTS:
        if isinstance(data.get(key), int) and data[key] > 4:
            data[key] = 4
    for key in ("num_experts_per_tok", "experts_per_token", "num_experts_per_token"):  # the last: Kimi-Linear
        if isinstance(data.get(key), int):
            data[key] = min(data[key], 2)
    for key in ("n_group", "topk_group"):
        if isinstance(data.get(key), int):
            data[key] = 1
    if isinstance(data.get("first_k_dense_replace"), int):
        data["first_k_dense_replace"] = len(keep)  # dense MLPs: experts do not shape the cache
    if "num_experts_per_tok" in data and data["num_experts_per_tok"] is None:
        data["num_experts_per_tok"] = 1
    if isinstance(data.get("kv_lora_rank"), int) and isinstance(data.get("num_attention_heads"), int):
        # An MLA layer caches one latent whatever its head count, but transformers decompresses
        # the whole latent for every head at every step: fewer heads keep the probe fast.
        data["num_attention_heads"] = min(data["num_attention_heads"], 8)
        data["num_key_value_heads"] = data["num_attention_heads"]
    # A state over hidden_size channels (Mamba; LFM's short conv, conv_L_cache) keeps the width.
    mamba = any(k.startswith(("mamba", "conv_L")) or k in ("expand", "state_size") for k in data)
    explicit_heads = isinstance(data.get("head_dim"), int) or isinstance(data.get("kv_lora_rank"), int)
    heads = data.get("num_attention_heads")
    if not mamba and explicit_heads and isinstance(data.get("hidden_size"), int) and isinstance(heads, int):
        # Head dims are explicit, so the width is free; some configs still want it a multiple of heads.
        data["hidden_size"] = min(data["hidden_size"], heads * max(2, 256 // heads))
    vocab = data.get("vocab_size", _SMALL["vocab_size"])
    # What a token id outside the vocabulary becomes (an encoder-decoder's decoder_start_token_id stays an int).
    outside = vocab - 1 if text.model_type in _INT_TOKEN_IDS or seq2seq else None
    for key in _TOKEN_IDS:
        value = data.get(key)
        if isinstance(value, list):
            data[key] = [v for v in value if isinstance(v, int) and v < vocab] or outside
        elif isinstance(value, int) and value >= vocab:
            data[key] = outside
    cross = data.get("cross_attention_layers")
    if isinstance(cross, list) and cross:
        # Llama 3.2 Vision: its cross-attention layers by their index among the kept layers.
        data["cross_attention_layers"] = [new for new, old in enumerate(keep) if old in cross]
    for key in ("max_position_embeddings", "n_positions", "n_ctx"):
        # Learned position tables must reach the probe's length; positions do not shape the cache.
        if isinstance(data.get(key), int) and data[key] < positions:
            data[key] = positions
    for key in ("model_type", *_DROP):
        data.pop(key, None)
    try:
        small = AutoConfig.for_model(text.model_type, **data)
    except Exception as exc:
        if _debug():
            raise
        reason = _plain(str(exc)) or type(exc).__name__
        raise ProbeError(f"transformers refused the shrunk {text.model_type} config: {reason}") from None
    return small, keep, kinds


def _noop_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> Any:
    """An attention function for transformers' AttentionInterface that computes nothing: zeros of the
    output's shape (batch, query length, query heads, value head dim) and no weights. The cache was
    already updated when it is called, and the probe reads only the cache."""
    batch, heads, length, _dim = query.shape
    return query.new_zeros((batch, length, heads, value.shape[-1])), None


def _no_mask(*args: Any, **kwargs: Any) -> None:
    """The mask function paired with the no-op attention: no (chunk x T) mask is ever built."""
    return None


def _register_noop() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(_NOOP, _noop_attention)
    AttentionMaskInterface.register(_NOOP, _no_mask)


@contextmanager
def _no_sdpa(torch: Any) -> Iterator[None]:
    """While the model runs, torch's scaled_dot_product_attention returns zeros of its output shape
    (the query's, with the value's head dim). Models without the attention interface (Falcon)
    call it inline after updating their cache; on CPU, real sdpa with a mask or with fewer KV
    heads than query heads falls back to a kernel that holds the whole heads x chunk x T score
    matrix (20 GB for Falcon-7B at 16k tokens), and every pass costs time in T."""
    functional = torch.nn.functional
    real = functional.scaled_dot_product_attention

    def zeros(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        return query.new_zeros((*query.shape[:-1], value.shape[-1]))

    functional.scaled_dot_product_attention = zeros
    try:
        yield
    finally:
        functional.scaled_dot_product_attention = real


# Model classes whose indexer reads the attention mask (transformers 5.24).
_MASKED_INDEXERS = ("DeepseekV32", "GlmMoeDsa")  # GLM-5: modeling_glm_moe_dsa.py, the same slice


def _attention_for(model_class: Any, asked: str) -> str:
    """The attention implementation to run: "noop" where the model class dispatches through
    transformers' attention interface (``_supports_attention_backend``); else "sdpa", the model's
    own sdpa code with torch's kernel made a no-op (Falcon picks its attention class by name and
    calls sdpa inline); else "eager", real scores in chunks that shrink as T grows."""
    backend = bool(getattr(model_class, "_supports_attention_backend", False))
    sdpa = bool(getattr(model_class, "_supports_sdpa", False))
    if asked == "auto":
        # DeepSeek-V3.2's sparse-attention indexer slices the attention mask itself
        # (modeling_deepseek_v32.py ``attention_mask[:, 0, :, :]``): the no-op's absent mask fails.
        noop = backend and not model_class.__name__.startswith(_MASKED_INDEXERS)
        return "noop" if noop else "sdpa" if sdpa else "eager"
    if (asked == "noop" and not backend) or (asked == "sdpa" and not sdpa):
        raise ProbeError(f"transformers' {model_class.__name__} cannot run with {asked} attention")
    return asked


def _prefill_chunk(req: ModelRequest, attention: str, heads: Any) -> int:
    """Prompt tokens per prefill pass (``heads``: the config's num_attention_heads, used if an int)."""
    if req.chunk is not None:
        return min(req.chunk, req.prompt)
    if attention == "eager" and isinstance(heads, int) and heads:
        # Eager attention's score matrix (batch x heads x chunk x T floats) stays within its budget.
        scores = heads * (req.prompt + req.decode) * 4 * req.batch
        return max(1, min(req.prompt, _EAGER_SCORE_BYTES // max(1, scores)))
    # Tokens per pass, shared by the sequences: activations stay small at any batch. (Also for
    # models with no attention at all, Mamba and the like, which run "eager" for want of another.)
    return max(1, min(req.prompt, _PREFILL_TOKENS // req.batch))


def _image_states(torch: Any, req: ModelRequest, config: Any, dtype: Any, device: Any) -> dict[str, Any]:
    """The first prefill pass's image input: random projected vision states of ``image_tokens``
    per sequence for image cross-attention layers (MllamaTextCrossAttention projects K and V from
    ``cross_attention_states`` and caches them once); {} without images."""
    if not req.image_tokens:
        return {}
    if not getattr(config, "cross_attention_layers", None):
        raise ProbeError("request key 'image_tokens' needs a model with image cross-attention layers")
    states = torch.randn(req.batch, req.image_tokens, int(config.hidden_size), dtype=dtype, device=device)
    return {"cross_attention_states": states}


def probe_model(request: Any, progress: Progress | None = None) -> dict[str, Any]:
    """Build the shrunk model, prefill and decode, and measure its cache layer by layer."""
    req = check_model_request(request)
    torch = _torch()
    transformers = _transformers()
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning)
    device = _device(torch, req.common.device)
    dtype = _dtype(torch, req.common.dtype)
    notes: list[str] = []
    if device.type == "cpu" and dtype == torch.float16:
        # CPU float16 matmuls are slow reference kernels; bfloat16 stores the same 2 bytes per
        # element, so the cache it measures has the same size.
        dtype = torch.bfloat16
        notes.append("float16 ran as bfloat16 on CPU (same 2-byte elements, faster kernels)")
    prompt, decode, batch = req.prompt, req.decode, req.batch
    report = progress or (lambda stage, done, total: None)
    torch.manual_seed(req.common.seed)
    with _stage("reading the config", req.config):
        config, keep, kinds = shrink_config(req.config, positions=prompt + decode)
        model_class = _causal_lm_class(transformers, config, config.model_type)
    _guard(torch, device, req.expected_bytes * 2, req.common.max_bytes)

    attention = _attention_for(model_class, req.attention)
    if attention == "noop":
        _register_noop()
    implementation = _NOOP if attention == "noop" else attention
    try:
        # The same model without storage first: a config with absurd widths is refused, not allocated.
        with torch.device("meta"):
            shell = model_class._from_config(config, attn_implementation=implementation, dtype=dtype)
        weights = sum(t.numel() * t.element_size() for t in (*shell.parameters(), *shell.buffers()))
        del shell
    except Exception:
        weights = 0  # building it for real below says what is wrong
    hint = "the config's widths make even the one-layer model too large"
    _guard(torch, device, weights, req.common.max_bytes, hint)
    with _stage("building the model", req.config), torch.device(device):
        model = model_class._from_config(config, attn_implementation=implementation, dtype=dtype)
    model.eval()
    before = _module_tensors(model, torch)
    vocab = int(config.vocab_size)
    # Only eager attention computes real scores: the cache it leaves is the reference the others match.
    no_scores = (lambda: _no_sdpa(torch)) if attention == "sdpa" else nullcontext
    chunk = _prefill_chunk(req, attention, getattr(config, "num_attention_heads", None))
    is_cuda = device.type == "cuda"
    if is_cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    cache: Any = None
    positions = _positions(torch, model, batch, device)
    inputs = _cache._inputs(torch, transformers, config, (batch, req.encoder_tokens), dtype, device)
    start = time.perf_counter()
    with torch.no_grad():
        done = 0
        first: tuple[int, int] | None = None  # (tokens, cache bytes) after the first pass
        while done < prompt:
            step = min(chunk, prompt - done)
            ids = torch.randint(0, vocab, (batch, step), device=device)
            images = _image_states(torch, req, config, dtype, device) if done == 0 else {}
            with _stage("in the prefill", req.config), no_scores():
                where = positions(done, step)
                out = model(**inputs(ids), past_key_values=cache, use_cache=True, **images, **where)
                fields = set(getattr(out, "__dataclass_fields__", ("cache",)))  # 5.24 names it cache
                if cache is None and not fields & {"cache", "past_key_values"}:
                    # An output with no cache field: the model keeps the cache it made for itself
                    # (RecurrentGemma): pass one in, as generate() does (DynamicCache(config=...)).
                    cache = transformers.DynamicCache(config=model.config)
                    out = model(**inputs(ids), past_key_values=cache, use_cache=True, **images, **where)
                    layers_now = _cache._layers(cache) or []
                    if not any(True for _ in _cache_tensors(layers_now, torch)) and not _held_elsewhere(
                        cache, model, torch, before
                    ):
                        raise ProbeError(
                            f"transformers' {type(model).__name__} (model_type {model.config.model_type!r}) returned "
                            "no KV cache and fills none passed in: the probe measures language models "
                            "that cache keys and values"
                        )
                cache = _returned_cache(out) or cache
            if first is None:
                _cache_layers(cache, model, keep, _held_elsewhere(cache, model, torch, before))
                first = (step, _storage_bytes(_cache_tensors(_cache._layers(cache) or [], torch)))
            elif done == first[0]:
                # Two passes give the shrunk cache's growth per token (windows and states do not
                # grow): refuse now rather than run out of memory later. Growth by torch.cat holds
                # the old and the new tensor at once, hence x 2.
                grown = _storage_bytes(_cache_tensors(_cache._layers(cache) or [], torch))
                per_token = max(0, grown - first[1]) / step
                projected = int(grown + per_token * (prompt + decode - done - step)) * 2
                _guard(torch, device, projected, req.common.max_bytes)
            done += step
            report("prefill", done, prompt)
        if is_cuda:
            torch.cuda.synchronize(device)
            prefill_peak = torch.cuda.max_memory_allocated(device) - base
        prefill_seconds = time.perf_counter() - start
        start = time.perf_counter()
        for index in range(decode):
            ids = torch.randint(0, vocab, (batch, 1), device=device)
            with _stage("in a decode step", req.config), no_scores():
                where = positions(prompt + index, 1)
                cache = _returned_cache(model(**inputs(ids), past_key_values=cache, use_cache=True, **where)) or cache
            report("decode", index + 1, decode)
        if is_cuda:
            torch.cuda.synchronize(device)
        decode_seconds = time.perf_counter() - start

    held = _held_elsewhere(cache, model, torch, before)
    cache_layers = [
        _Held(layer, held[i]) if i in held else layer for i, layer in enumerate(_cache_layers(cache, model, keep, held))
    ]
    layers = []
    for index, layer in zip(keep, cache_layers, strict=True):
        measured = _layer_bytes(layer, torch)
        shown = layer.layer if isinstance(layer, _Held) else layer
        name = type(shown).__name__ if shown is not None else "(state kept outside the cache's layers)"
        layers.append({"index": index, "kind": kinds[index], "class": name, **measured})
    peak: dict[str, Any]
    if is_cuda:
        peak = {
            "kind": "cuda max_memory_allocated minus the model",
            "prefill_bytes": int(prefill_peak),
            "decode_bytes": int(torch.cuda.max_memory_allocated(device) - base),
        }
    else:
        # CPU has no allocator statistics: growing a layer by torch.cat holds the old and the new
        # tensor at once, so the largest transient is the biggest single cache tensor.
        biggest = max((t.numel() * t.element_size() for t in _cache_tensors(cache_layers, torch)), default=0)
        peak = {"kind": "cpu: largest single cache tensor (torch.cat transient)", "transient_bytes": biggest}
    result = {
        "mode": "model",
        "device": str(device),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "dtype": str(dtype).replace("torch.", ""),
        "model_type": config.model_type,
        "batch": batch,
        "prompt_tokens": prompt,
        "decode_tokens": decode,
        "image_tokens": req.image_tokens,
        "encoder_tokens": req.encoder_tokens,
        "attention": attention,
        "prefill_chunk": chunk,
        "prefill_passes": math.ceil(prompt / chunk),
        "layer_kinds": kinds,
        "layers": layers,
        "peak": peak,
        "prefill_seconds": prefill_seconds,
        "decode_seconds_per_token": decode_seconds / decode if decode else None,
        "timing_note": "timings of the shrunk model (one layer of each kind, tiny MLPs"
        + (", attention scores not computed" if attention != "eager" else "")
        + "), not of the real one",
        "notes": [_plain(note) for note in notes],
    }
    del model, cache
    if is_cuda:
        torch.cuda.empty_cache()
    return result


# --- raw probe -------------------------------------------------------------------------------------


def probe_raw(request: Any) -> dict[str, Any]:
    """Allocate the tensors the estimate describes and read what the allocator says."""
    req = check_raw_request(request)
    torch = _torch()
    device = _device(torch, req.common.device)
    dtype = _dtype(torch, req.common.dtype)
    itemsize = torch.tensor([], dtype=dtype).element_size()
    # Every factor is a checked non-negative int, so this is the exact byte count to allocate.
    needed = sum(math.prod(t.shape) * itemsize * t.count for t in req.tensors)
    _guard(torch, device, needed, req.common.max_bytes)
    is_cuda = device.type == "cuda"
    if is_cuda:
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        before_requested = torch.cuda.memory_stats(device).get("requested_bytes.all.current", 0)
        before_reserved = torch.cuda.memory_reserved(device)
    held = [torch.empty(spec.shape, dtype=dtype, device=device) for spec in req.tensors for _ in range(spec.count)]
    tensor_bytes = sum(t.numel() * t.element_size() for t in held)
    result: dict[str, Any] = {
        "mode": "raw",
        "device": str(device),
        "torch": torch.__version__,
        "dtype": str(dtype).replace("torch.", ""),
        "tensors": len(held),
        "tensor_bytes": tensor_bytes,
    }
    if is_cuda:
        torch.cuda.synchronize(device)
        stats = torch.cuda.memory_stats(device)
        result |= {
            "allocated_bytes": torch.cuda.memory_allocated(device) - before,
            "requested_bytes": stats.get("requested_bytes.all.current", 0) - before_requested,
            "reserved_bytes": torch.cuda.memory_reserved(device) - before_reserved,
        }
    del held
    if is_cuda:
        torch.cuda.empty_cache()
    return result


def run(request: Any, progress: Progress | None = None) -> dict[str, Any]:
    """Check the request and run it; a ProbeError (one line) for anything the probe cannot run."""
    request = _object(request)
    mode = request.get("mode", "model")
    if mode == "model":
        return probe_model(request, progress)
    if mode == "raw":
        return probe_raw(request)
    raise ProbeError(f"request key 'mode' must be model or raw, got {_show(mode)}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        if len(args) > 1:
            raise ProbeError("usage: python torch_probe.py [request.json] (or the request on stdin)")
        try:
            text = open(args[0], encoding="utf-8").read() if args else sys.stdin.read()  # noqa: SIM115
        except (OSError, ValueError) as exc:  # ValueError: not UTF-8
            raise ProbeError(f"cannot read the request: {getattr(exc, 'strerror', None) or exc}") from None
        try:
            request = json.loads(text)
        except ValueError as exc:  # also the digit limit on huge integers
            raise ProbeError(f"the request is not JSON: {exc}") from None
        except RecursionError:
            raise ProbeError("the request is not JSON the probe can read: nested too deeply") from None
        result = run(request)
    except ProbeError as exc:
        print(f"probe: error: {_plain(str(exc), 400)}", file=sys.stderr)
        return 1
    except Exception as exc:
        # A bug in the probe, or torch failing outside transformers: still one line, unless asked.
        if _debug():
            raise
        print(f"probe: error: {_reason(exc)} (KVCALC_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
