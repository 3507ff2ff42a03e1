"""Read the cache a transformers model keeps, for torch_probe.py (beside it): the tensors of each
cache layer, the state transformers keeps for a layer outside the cache's layers, and the two
caches of an encoder-decoder model.

Like torch_probe.py it imports nothing from kvcalc, only the standard library (torch and the model
come in as arguments), so the two files can be copied to a GPU machine together.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

# Tensors kept for a cache layer outside it, by the layer's index: (name, tensor).
HeldState = dict[int, list[tuple[str, Any]]]


class ProbeError(Exception):
    """A request the probe cannot run; the message is one line for the user."""


class MissingPackage(ProbeError):
    """The probe's packages (torch, transformers) are not installed in this Python."""


def _returned_cache(output: Any) -> Any:
    """The cache a forward pass returned, or None (transformers 5.24 outputs name it
    ``past_key_values``; a model output without one raises AttributeError)."""
    try:
        return output.past_key_values
    except AttributeError:
        return None


def _positions(torch: Any, model: Any, batch: int, device: Any) -> Callable[[int, int], dict[str, Any]]:
    """``positions(start, count)``: the position_ids of a pass, as generate() passes them, for a model
    whose own forward cannot derive them from a cache whose first layer keeps no tokens
    (RecurrentGemma calls get_seq_length on its recurrent layer 0: modeling_recurrent_gemma.py);
    {} for every other model, which derives them itself."""
    kinds = getattr(model.config, "layer_types", None) or getattr(model.config, "layers_block_type", None) or []
    if not kinds or kinds[0] in ("full_attention", "sliding_attention", "chunked_attention", "attention"):
        return lambda start, count: {}
    if "position_ids" not in inspect.signature(model.forward).parameters:
        return lambda start, count: {}
    return lambda start, count: {"position_ids": torch.arange(start, start + count, device=device).expand(batch, -1)}


def _layer_kinds(text: Any) -> list[str]:
    """Each layer's kind as transformers derives it."""
    count = text.num_hidden_layers
    kinds = getattr(text, "layer_types", None)
    if kinds:
        return _with_indexer_types(text, [str(k) for k in kinds])
    blocks = getattr(text, "layers_block_type", None)  # Jamba-style hybrids
    if blocks:
        return [str(k) for k in blocks]
    cross = getattr(text, "cross_attention_layers", None)
    if isinstance(cross, list) and cross:  # Llama 3.2 Vision: cross-attention layers over images
        return ["cross_attention" if i in cross else "full_attention" for i in range(count)]
    return ["full_attention"] * count


def _with_indexer_types(text: Any, kinds: list[str]) -> list[str]:
    """GLM-5's ``indexer_types`` (transformers 5.24 GlmMoeDsaConfig): a "shared" layer has no
    indexer and caches no indexer keys, so it is a kind of its own and the shrunk model keeps one.
    Only GLM-5's DSA layers (``indexed_attention``) are split; other models' kinds stay as they are."""
    modes = getattr(text, "indexer_types", None)
    if not isinstance(modes, list) or len(modes) != len(kinds):
        return kinds
    return [
        f"{kind} (shared indexer)" if kind == "indexed_attention" and mode == "shared" else kind
        for kind, mode in zip(kinds, modes, strict=True)
    ]


def _sublayers(text: Any, layers: int) -> int:
    """Cache layers per decoder layer: more than one where the config counts decoder layers in
    ``num_layers`` and derives num_hidden_layers (the cache layers) from it."""
    blocks = getattr(text, "num_layers", None)
    if isinstance(blocks, int) and not isinstance(blocks, bool) and 0 < blocks < layers and layers % blocks == 0:
        return layers // blocks
    return 1


def _layers(cache: Any, cross: bool = True) -> list[Any] | None:
    """A cache's layers: an EncoderDecoderCache's self-attention layers, then (``cross``) its
    cross-attention layers (transformers' cache_utils.py keeps them in two caches); None when there
    are none. A BERT-style decoder (RemBERT, MegatronBERT) returns an EncoderDecoderCache whose
    cross-attention side stays empty without an encoder: ``cross=False`` leaves it out."""
    own, other = getattr(cache, "self_attention_cache", None), getattr(cache, "cross_attention_cache", None)
    if own is not None and other is not None:
        return [*(_layers(own) or []), *((_layers(other) or []) if cross else [])]
    layers = getattr(cache, "layers", None)
    return list(layers) if isinstance(layers, list | tuple) else None


# Layer counts by side of an encoder-decoder config (BART, Whisper, Marian: decoder_layers and
# encoder_layers; T5: num_decoder_layers and num_layers; ProphetNet: num_decoder_layers and
# num_encoder_layers; Moonshine: decoder_num_hidden_layers and encoder_num_hidden_layers), the
# decoder's first.
_DECODER_LAYERS = ("decoder_layers", "num_decoder_layers", "decoder_num_hidden_layers")
_ENCODER_LAYERS = (
    "encoder_layers",
    "num_layers",
    "num_encoder_layers",
    "encoder_num_hidden_layers",
    "num_hidden_layers",
)


def _decoder_layers(config: Any) -> int:
    """An encoder-decoder config's decoder layers (T5 without num_decoder_layers: the encoder's count)."""
    for key in (*_DECODER_LAYERS, *_ENCODER_LAYERS):
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    raise ProbeError("the encoder-decoder config gives no decoder layer count (decoder_layers, num_decoder_layers)")


def _one_layer_a_side(data: dict[str, Any]) -> None:
    """Shrink both sides of an encoder-decoder config to one layer each, in place."""
    for key in (*_DECODER_LAYERS, *_ENCODER_LAYERS):
        if isinstance(data.get(key), int) and not isinstance(data[key], bool):
            data[key] = 1


def _inputs(
    torch: Any, transformers: Any, config: Any, shape: tuple[int, int], dtype: Any, device: Any
) -> Callable[[Any], dict[str, Any]]:
    """``inputs(ids)``: a forward pass's token inputs. An encoder-decoder's decoder takes them as
    decoder_input_ids beside a random encoder output of ``shape`` (batch, encoder tokens): the
    encoder caches nothing, so the probe need not run it (nor make its inputs: Whisper's mel frames)."""
    if not config.is_encoder_decoder:
        if shape[1]:
            raise ProbeError("request key 'encoder_tokens' needs an encoder-decoder model")
        return lambda ids: {"input_ids": ids}
    if not shape[1]:
        raise ProbeError("request key 'encoder_tokens' is needed for an encoder-decoder model")
    # The encoder's own width where its config is nested (Cohere ASR projects it in the decoder).
    encoder = getattr(config, "encoder_config", None)
    width = getattr(encoder, "hidden_size", None) or getattr(config, "d_model", None) or config.hidden_size
    states = torch.randn(*shape, int(width), dtype=dtype, device=device)
    encoded = transformers.modeling_outputs.BaseModelOutput(last_hidden_state=states)
    encoded.attention_mask = None  # read by Moonshine and Cohere ASR: their encoders return one (None: no padding)
    encoded.router_logits = None  # read by SwitchTransformers and NLLB-MoE (their encoders' router outputs)
    return lambda ids: {"decoder_input_ids": ids, "encoder_outputs": encoded}


def _cache_layers(
    cache: Any, model: Any, keep: list[int], held: dict[int, list[tuple[str, Any]]] | None = None
) -> list[Any]:
    """The cache's layers, or a ProbeError when the model keeps no per-layer KV cache. A layer the
    cache never built is None where tensors held elsewhere (``held``) stand for it (MiniMax's
    lightning layers keep their state only in MiniMaxCache.linear_cache)."""
    layers = _layers(cache, cross=bool(getattr(model.config, "is_encoder_decoder", False)))
    if layers is None:
        raise ProbeError(
            f"transformers' {type(model).__name__} (model_type {model.config.model_type!r}) returned no KV cache: "
            "the probe measures language models that cache keys and values"
        )
    found = list(layers)
    if held and len(found) < len(keep) and all(i in held for i in range(len(found), len(keep))):
        found += [None] * (len(keep) - len(found))
    if len(found) != len(keep):
        raise ProbeError(f"transformers' cache has {len(layers)} layers, the shrunk model {len(keep)}")
    return found


_LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)(?:\.|$)")


def _module_tensors(model: Any, torch: Any) -> dict[tuple[str, str], int]:
    """Every plain tensor attribute of the model's modules (not a parameter or buffer), by module and
    attribute name, with the tensor's id: what was there before the model ran."""
    return {
        (name, attr): id(value)
        for name, module in model.named_modules()
        for attr, value in vars(module).items()
        if torch.is_tensor(value) and not attr.startswith("_")
    }


def _held_elsewhere(
    cache: Any, model: Any, torch: Any, before: dict[tuple[str, str], int]
) -> dict[int, list[tuple[str, Any]]]:
    """Per-layer state kept outside the cache's layers, by cache layer index: lists on the cache
    object indexed by layer (MiniMaxCache.linear_cache, modeling_minimax.py) and tensors a decoder
    layer's modules set on themselves while running (RecurrentGemma's conv1d_state and
    rg_lru.recurrent_states, modeling_recurrent_gemma.py): transformers keeps both across steps."""
    held: HeldState = {}
    for attr, value in getattr(cache, "__dict__", {}).items():
        if attr == "layers" or attr.startswith("_") or not isinstance(value, list):
            continue
        for index, item in enumerate(value):
            for name, tensor in _tensors(item, torch, f"{type(cache).__name__}.{attr}[{index}]"):
                held.setdefault(index, []).append((name, tensor))
    for name, module in model.named_modules():
        match = _LAYER_INDEX.search(name)
        if match is None:
            continue
        for attr, value in vars(module).items():
            if torch.is_tensor(value) and not attr.startswith("_") and before.get((name, attr)) != id(value):
                where = name[match.end() :] if match.end() < len(name) else ""
                held.setdefault(int(match.group(1)), []).append((f"module {where}.{attr}".replace(" .", " "), value))
    return held


@dataclass
class _Held:
    """A cache layer (None: never built) with the state transformers keeps for it elsewhere."""

    layer: Any
    extra: list[tuple[str, Any]]


def _storage_bytes(tensors: Iterable[Any]) -> int:
    """Bytes of the storages under ``tensors``, each storage once."""
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


def _cache_tensors(layers: Iterable[Any], torch: Any) -> Iterator[Any]:
    """Every tensor of every cache layer (``_layer_tensors``)."""
    return (tensor for layer in layers for _name, tensor in _layer_tensors(layer, torch))


def _layer_tensors(layer: Any, torch: Any) -> Iterator[tuple[str, Any]]:
    """Every tensor a cache layer holds, named by its attribute path, but for the attributes named
    ``_...``: bookkeeping scalars (window lengths as tensors and the like)."""
    if isinstance(layer, _Held):
        yield from layer.extra
        if layer.layer is None:
            return
        layer = layer.layer
    for name, value in vars(layer).items():
        if not name.startswith("_"):
            yield from _tensors(value, torch, name)


def _tensors(obj: Any, torch: Any, prefix: str, depth: int = 0) -> Iterator[tuple[str, Any]]:
    if depth > 4:
        return
    if torch.is_tensor(obj):
        yield prefix, obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from _tensors(value, torch, f"{prefix}.{key}", depth + 1)
    elif isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            yield from _tensors(value, torch, f"{prefix}[{i}]", depth + 1)


def _layer_bytes(layer: Any, torch: Any) -> dict[str, Any]:
    """Bytes of every tensor a cache layer holds but 0-dim ones (each tensor once: by address, shape
    and strides), and of their storages."""
    unique: dict[tuple[int, tuple[int, ...], tuple[int, ...]], tuple[str, Any]] = {}
    for name, tensor in _layer_tensors(layer, torch):
        if tensor.dim():
            unique.setdefault((tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride())), (name, tensor))
    kept = list(unique.values())
    return {
        "tensor_bytes": sum(t.numel() * t.element_size() for _name, t in kept),
        "storage_bytes": _storage_bytes(t for _name, t in kept),
        "tensors": [{"name": n, "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")} for n, t in kept],
    }
