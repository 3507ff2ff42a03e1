"""Set a probe's measurement beside the estimate: requests for the transformers probe
(``torch_probe.py`` beside this module) and the comparison of what it returns. Pure: the probe
itself (torch, transformers) lives in torch_probe.py."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from kvcalc.calc.estimate import Estimate
from kvcalc.console import clean
from kvcalc.dtypes import BF16, FP16, FP32, DType
from kvcalc.errors import UsageError
from kvcalc.spec import Kind, ModelSpec

_TORCH_NAMES = {FP32.name: "float32", BF16.name: "bfloat16", FP16.name: "float16"}


def torch_dtype_name(dtype: DType) -> str:
    if dtype.name not in _TORCH_NAMES:
        raise UsageError(f"the model probe runs in fp32, bf16 or fp16, not {dtype.name}")
    return _TORCH_NAMES[dtype.name]


def model_request(
    config: dict[str, Any], est: Estimate, *, decode: int, device: str, max_bytes: int | None = None
) -> dict[str, Any]:
    """What the model probe needs: the config, the workload split into prefill and decode."""
    w = est.workload
    if decode >= w.tokens:
        raise UsageError(f"--decode {decode} leaves no prompt in {w.tokens} tokens")
    # The shrunk model keeps one layer of each kind: its cache is about one layer per group.
    expected = sum(g.bytes // max(1, g.layers) for g in est.groups)
    request: dict[str, Any] = {
        "mode": "model",
        "config": config,
        "prompt_tokens": w.tokens - decode,
        "decode_tokens": decode,
        "batch": w.batch,
        "device": device,
        "dtype": torch_dtype_name(est.kv_dtype),
        "expected_bytes": expected,
        "max_bytes": max_bytes,
    }
    if est.model.is_encoder_decoder:  # random encoder output of the length the estimate took
        request["encoder_tokens"] = w.encoder_tokens or est.model.encoder_tokens or w.tokens
    if w.images:  # Llama 3.2 Vision: images x tokens per image, fed once as cross-attention states
        request["image_tokens"] = w.images * (w.image_tokens or est.model.image_tokens or 0)
    return request


def raw_request(est: Estimate, *, device: str, block_size: int | None = None) -> dict[str, Any]:
    """Byte buffers laid out as the estimate describes: per layer, one row per token slot (in
    blocks when the engine pages), or one state per sequence."""
    w = est.workload
    if w.tp * w.pp * w.dp != 1:
        raise UsageError("the raw probe allocates one GPU's cache: drop --tp/--pp/--dp")
    tensors = []
    for g in est.groups:
        per_layer = g.bytes // g.layers if g.layers else 0
        if not per_layer:
            continue
        if g.cache.is_state:
            shape = [w.batch, g.state_bytes]
        elif g.slots * g.bytes_per_token != per_layer:  # a full-precision residual: rows differ
            shape = [per_layer]
        elif block_size and g.slots % block_size == 0:
            shape = [g.slots // block_size, block_size, g.bytes_per_token]
        else:
            shape = [g.slots, g.bytes_per_token]
        tensors.append({"name": g.kind, "shape": shape, "count": g.layers})
    return {"mode": "raw", "tensors": tensors, "dtype": "uint8", "device": device}


@dataclass(frozen=True)
class KindCheck:
    kind: str
    layers: int
    estimated_bytes: int
    measured_bytes: int

    @property
    def difference(self) -> int:
        return self.measured_bytes - self.estimated_bytes


@dataclass(frozen=True)
class CrossCheck:
    kinds: tuple[KindCheck, ...]
    estimated_bytes: int
    measured_bytes: int
    storage_bytes: int
    notes: tuple[str, ...]

    @property
    def difference(self) -> int:
        return self.measured_bytes - self.estimated_bytes

    def within(self, tolerance_bytes: int) -> bool:
        return abs(self.difference) <= tolerance_bytes and all(abs(k.difference) <= tolerance_bytes for k in self.kinds)


# Bytes per element of the dtypes transformers caches indexer keys in (torch's names).
_ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "uint8": 1, "int8": 1}


def _indexer_bytes(rep: dict[str, Any]) -> int:
    """Bytes of the indexer keys among a measured layer's tensors (0 when it has none): transformers
    5.24's DynamicIndexedLayer.indexer_keys (DeepSeek-V3.2, GLM-5) or MiniMaxM3VLSparseCacheLayer.idx_keys."""
    return _tensor_bytes(rep, ("indexer_keys", "idx_keys"))


def _tensor_bytes(rep: dict[str, Any], names: tuple[str, ...]) -> int:
    """Bytes of a measured layer's tensors whose attribute is one of ``names`` (a dict of states,
    ``conv_states.0``, counts under its attribute)."""
    total = 0
    for tensor in rep["tensors"]:
        shape = tensor.get("shape")
        if str(tensor.get("name")).split(".")[0] not in names or not isinstance(shape, list):
            continue
        if all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
            total += math.prod(shape) * _ITEMSIZE.get(str(tensor.get("dtype")), 0)
    measured: int = rep["tensor_bytes"]
    return min(total, measured)


# transformers' layer types whose one cache layer holds K/V and a linear-attention (Mamba) state
# (cache_utils.py LinearAttentionAndFullAttentionLayer and its sliding twin, transformers 5.24):
# Falcon-H1's layers, Zamba2's hybrid layers. kvcalc reads them as two entries, the second one
# appended after the per-layer entries.
_HYBRID_LAYERS = ("hybrid", "hybrid_sliding")
_STATE_TENSORS = ("conv_states", "recurrent_states")


def _hybrid_split(spec: ModelSpec, layers: int, index: int, rep: dict[str, Any]) -> tuple[int, str, int] | None:
    """For a transformers layer holding K/V and a state: (bytes of the layer's own kvcalc entry,
    the kind of its appended partner entry, the partner's bytes); None when kvcalc has no partner."""
    own = spec.caches[index]
    partner = next((c for c in spec.caches[layers:] if c.is_state != own.is_state and c.kind is not Kind.INDEXER), None)
    if partner is None:
        return None
    state = _tensor_bytes(rep, _STATE_TENSORS)
    rest = rep["tensor_bytes"] - state
    return (state, partner.kind, rest) if own.is_state else (rest, partner.kind, state)


# DeepSeek-V4 (modeling_deepseek_v4.py, transformers 5.24): DeepseekV4HCACache / DeepseekV4CSACache
# keep the compressed entries and the compressor state beside the K=V window, in dicts keyed
# "compressor" and "indexer"; kvcalc sizes each as an entry of its own.
_COMPRESSED_TENSORS: dict[str, Kind] = {
    "compressed_kv.compressor": Kind.COMPRESSED,
    "compressed_kv.indexer": Kind.INDEXER,
    "buffer_kv": Kind.COMPRESSOR_BUFFER,
    "buffer_gate": Kind.COMPRESSOR_BUFFER,
    "overlap_kv": Kind.COMPRESSOR_OVERLAP,
    "overlap_gate": Kind.COMPRESSOR_OVERLAP,
}
_COMPRESSED_KINDS = frozenset({Kind.COMPRESSED, Kind.COMPRESSOR_BUFFER, Kind.COMPRESSOR_OVERLAP})


def _compressed_split(rep: dict[str, Any]) -> dict[Kind, int]:
    """Bytes of a measured DeepSeek-V4 layer's compressed entries and compressor state, by kvcalc
    kind (present but empty: 0 bytes); {} for any other layer."""
    split: dict[Kind, int] = {}
    for tensor in rep["tensors"]:
        name, shape = str(tensor.get("name")), tensor.get("shape")
        kind = _COMPRESSED_TENSORS.get(name, _COMPRESSED_TENSORS.get(name.split(".", 1)[0]))
        if kind is None or not isinstance(shape, list):
            continue
        if all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
            split[kind] = split.get(kind, 0) + math.prod(shape) * _ITEMSIZE.get(str(tensor.get("dtype")), 0)
    measured: int = rep["tensor_bytes"]
    return split if sum(split.values()) <= measured else {}


def check_model(spec: ModelSpec, est: Estimate, result: dict[str, Any]) -> CrossCheck:
    """Scale the shrunk model's measurement to the real layer counts and compare by layer kind.

    The probe measured one representative layer per transformers layer kind; every real layer
    of that kind holds the same bytes. Layers are then grouped by kvcalc's own kinds, so a layer
    that kvcalc and transformers classify differently shows up as a mismatch.
    """
    by_kind = {layer["kind"]: layer for layer in result["layers"]}
    hf_kinds: list[str] = result["layer_kinds"]
    notes = []
    # Indexer keys (DeepSeek-V3.2) are extra kvcalc entries that transformers keeps inside the
    # attention layer's own cache layer (DynamicIndexedLayer.indexer_keys): split them out there.
    indexers = sum(1 for c in spec.caches if c.kind is Kind.INDEXER)
    # A layer holding K/V and a state counts twice in kvcalc only where kvcalc appended its partner entries.
    appended = len(spec.caches) > len(hf_kinds) + indexers
    hybrids = sum(1 for k in hf_kinds if k in _HYBRID_LAYERS) if appended else 0
    compressed = sum(1 for c in spec.caches if c.kind in _COMPRESSED_KINDS)
    if len(hf_kinds) != len(spec.caches) - indexers - hybrids - compressed:
        notes.append(f"transformers builds {len(hf_kinds)} layers, kvcalc reads {len(spec.caches)}")
    measured: dict[str, int] = {}
    storage = 0
    layers: dict[str, int] = {}
    for index, hf_kind in enumerate(hf_kinds):
        kind = spec.caches[index].kind if index < len(spec.caches) else f"extra {hf_kind}"
        rep = by_kind[hf_kind]
        split = _indexer_bytes(rep) if indexers else 0
        own = rep["tensor_bytes"] - split
        for part, size in (_compressed_split(rep) if compressed else {}).items():
            own -= size
            measured[part] = measured.get(part, 0) + size
            layers[part] = layers.get(part, 0) + 1
        pair = _hybrid_split(spec, len(hf_kinds), index, rep) if hf_kind in _HYBRID_LAYERS else None
        if pair is not None:
            own, partner, partner_bytes = pair
            measured[partner] = measured.get(partner, 0) + partner_bytes
            layers[partner] = layers.get(partner, 0) + 1
        measured[kind] = measured.get(kind, 0) + own
        if split:
            measured[Kind.INDEXER] = measured.get(Kind.INDEXER, 0) + split
            layers[Kind.INDEXER] = layers.get(Kind.INDEXER, 0) + 1
        storage += rep["storage_bytes"]
        layers[kind] = layers.get(kind, 0) + 1
    estimated: dict[str, int] = {}
    for g in est.groups:
        estimated[g.kind] = estimated.get(g.kind, 0) + g.bytes
        layers.setdefault(g.kind, g.layers)
    kinds = tuple(
        KindCheck(kind, layers.get(kind, 0), estimated.get(kind, 0), measured.get(kind, 0))
        for kind in dict.fromkeys([*estimated, *measured])
    )
    return CrossCheck(kinds, est.total_bytes, sum(measured.values()), storage, tuple(notes))


_TOLERANCE_RE = re.compile(r"^(\d{1,18})$|^(\d{1,6}(?:\.\d{1,6})?)\s*%$")


def parse_tolerance(text: str, estimated: int) -> int:
    """``0`` (exact, the default), ``4096`` bytes, or ``0.5%`` of the estimate (at most 100%),
    rounded down to whole bytes; exact decimal arithmetic, so ``inf%`` or ``1e400%`` never parse."""
    match = _TOLERANCE_RE.match(text.strip())
    if match is None or (match.group(2) is not None and Fraction(match.group(2)) > 100):
        raise UsageError(f"--tolerance must be bytes (4096) or a percentage from 0% to 100% (0.5%), got {text!r}")
    if match.group(1) is not None:
        return int(match.group(1))
    return int(estimated * Fraction(match.group(2)) / 100)


# --- results read back from a file (--from-result) --------------------------------------------------

# A measured byte count beyond this is no real cache (an exabyte); it also keeps arithmetic small.
_MAX_RESULT_BYTES = 2**60
_MAX_RESULT_ITEMS = 2**16
_MAX_TEXT = 200


class _ResultReader:
    """Checks one field at a time of a probe result that came from a file, naming the field that
    is wrong: a result may be partial, edited, or from another request."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, field_name: str, why: str) -> UsageError:
        return UsageError(f"{self.where}: field '{field_name}' {why}")

    def get(self, data: dict[str, Any], key: str, path: str) -> Any:
        if key not in data:
            raise self.fail(path + key, "is missing")
        return data[key]

    def count(self, data: dict[str, Any], key: str, path: str = "", *, minimum: int = 0) -> int:
        value = self.get(data, key, path)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path + key, f"must be a whole number, got {type(value).__name__}")
        if not minimum <= value <= _MAX_RESULT_BYTES:
            raise self.fail(
                path + key, f"must be between {minimum} and 2**60, got {value if value < 10**20 else '...'}"
            )
        return value

    def seconds(self, data: dict[str, Any], key: str, *, optional: bool = False) -> float | None:
        value = data.get(key) if optional else self.get(data, key, "")
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 10**9:
            raise self.fail(key, "must be a non-negative number of seconds")
        return float(value)

    def text(self, data: dict[str, Any], key: str, path: str = "") -> str:
        value = self.get(data, key, path)
        if not isinstance(value, str):
            raise self.fail(path + key, f"must be text, got {type(value).__name__}")
        return clean(value[:_MAX_TEXT])

    def items(self, data: dict[str, Any], key: str, path: str = "") -> list[Any]:
        value = self.get(data, key, path)
        if not isinstance(value, list):
            raise self.fail(path + key, f"must be a list, got {type(value).__name__}")
        if len(value) > _MAX_RESULT_ITEMS:
            raise self.fail(path + key, f"lists {len(value):,} items; at most {_MAX_RESULT_ITEMS:,}")
        return value

    def obj(self, value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"must be an object, got {type(value).__name__}")
        return value


def validate_result(
    result: Any, request: dict[str, Any], *, where: str, model_types: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A probe result read from a file, checked field by field and against the request it must
    answer (same mode, model type, tokens, batch and dtype), with every text field made safe to
    print. Raises a UsageError naming the first field that is missing, mistyped or different."""
    r = _ResultReader(where)
    data = r.obj(result, "(top level)")
    mode = r.text(data, "mode")
    if mode != request["mode"]:
        raise UsageError(f"{where} is a {mode!r} probe result, not a {request['mode']} one")
    if mode == "raw":
        return _validate_raw(r, data, sum(int(t["count"]) for t in request["tensors"]))
    out: dict[str, Any] = {"mode": mode}
    for key in ("device", "dtype", "torch", "transformers", "model_type", "timing_note"):
        out[key] = r.text(data, key)
    for key in ("batch", "prompt_tokens", "decode_tokens"):
        out[key] = r.count(data, key)
    out["prefill_chunk"] = data.get("prefill_chunk")
    out["prefill_seconds"] = r.seconds(data, "prefill_seconds")
    out["decode_seconds_per_token"] = r.seconds(data, "decode_seconds_per_token", optional=True)
    _same(r, "batch", out["batch"], request["batch"])
    _same(r, "prompt_tokens", out["prompt_tokens"], request["prompt_tokens"])
    _same(r, "decode_tokens", out["decode_tokens"], request["decode_tokens"])
    if request.get("encoder_tokens"):  # an encoder-decoder's cross-attention length
        out["encoder_tokens"] = r.count(data, "encoder_tokens")
        _same(r, "encoder_tokens", out["encoder_tokens"], request["encoder_tokens"])
    # On CPU the probe runs float16 as bfloat16 (same element size) and says so in its notes.
    allowed_dtypes = {request["dtype"], *(("bfloat16",) if request["dtype"] == "float16" else ())}
    if out["dtype"] not in allowed_dtypes:
        raise UsageError(f"{where}: field 'dtype' is {out['dtype']!r}, but the request asks for {request['dtype']!r}")
    expected_types = {t for t in (*model_types, request["config"].get("model_type")) if isinstance(t, str)}
    if expected_types and out["model_type"] not in expected_types:
        wanted = " or ".join(sorted(repr(t) for t in expected_types))
        raise UsageError(f"{where}: field 'model_type' is {out['model_type']!r}, but the model is {wanted}")
    kinds = [r.text({"kind": k}, "kind", f"layer_kinds[{i}].") for i, k in enumerate(r.items(data, "layer_kinds"))]
    if not kinds:
        raise r.fail("layer_kinds", "is empty")
    out["layer_kinds"] = kinds
    layers = []
    for i, item in enumerate(r.items(data, "layers")):
        path = f"layers[{i}]."
        layer = r.obj(item, f"layers[{i}]")
        layers.append(
            {
                "index": r.count(layer, "index", path),
                "kind": r.text(layer, "kind", path),
                "class": r.text(layer, "class", path),
                "tensor_bytes": r.count(layer, "tensor_bytes", path),
                "storage_bytes": r.count(layer, "storage_bytes", path),
                "tensors": [r.obj(t, f"{path}tensors[{j}]") for j, t in enumerate(r.items(layer, "tensors", path))],
            }
        )
    measured_kinds = {layer["kind"] for layer in layers}
    missing = [k for k in dict.fromkeys(kinds) if k not in measured_kinds]
    if missing:
        raise r.fail("layers", f"has no measured layer of kind {missing[0]!r}, which layer_kinds lists")
    out["layers"] = layers
    peak = r.obj(r.get(data, "peak", ""), "peak")
    if "transient_bytes" in peak:
        out["peak"] = {
            "kind": r.text(peak, "kind", "peak."),
            "transient_bytes": r.count(peak, "transient_bytes", "peak."),
        }
    else:
        out["peak"] = {
            "kind": r.text(peak, "kind", "peak."),
            "prefill_bytes": r.count(peak, "prefill_bytes", "peak."),
            "decode_bytes": r.count(peak, "decode_bytes", "peak."),
        }
    notes = data.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise r.fail("notes", "must be a list of text")
    out["notes"] = [clean(n[:_MAX_TEXT]) for n in notes[:100]]
    for key in ("attention",):
        if isinstance(data.get(key), str):
            out[key] = clean(data[key][:_MAX_TEXT])
    return out


def _same(r: _ResultReader, key: str, found: int, wanted: int) -> None:
    if found != wanted:
        raise UsageError(f"{r.where}: field '{key}' is {found:,}, but this request has {wanted:,}")


def _validate_raw(r: _ResultReader, data: dict[str, Any], tensors: int) -> dict[str, Any]:
    out: dict[str, Any] = {"mode": "raw", "device": r.text(data, "device"), "dtype": r.text(data, "dtype")}
    out["tensors"] = r.count(data, "tensors")
    _same(r, "tensors", out["tensors"], tensors)
    out["tensor_bytes"] = r.count(data, "tensor_bytes")
    for key in ("allocated_bytes", "requested_bytes", "reserved_bytes"):
        if key in data:
            out[key] = r.count(data, key)
    if "allocated_bytes" in out and not {"requested_bytes", "reserved_bytes"} <= out.keys():
        raise r.fail("requested_bytes", "must come with allocated_bytes and reserved_bytes")
    return out
