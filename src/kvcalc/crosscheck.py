"""Set a probe's measurement beside the estimate: requests for ``kvcalc.probe`` and the comparison
of what it returns. Pure: the probe itself (torch, transformers) lives in probe.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .dtypes import BF16, FP16, FP32, DType
from .errors import UsageError
from .estimator import Estimate
from .spec import ModelSpec, StateCache

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
    if est.model.is_encoder_decoder:
        raise UsageError("the model probe measures decoder-only language models")
    # The shrunk model keeps one layer of each kind: its cache is about one layer per group.
    expected = sum(g.bytes // max(1, g.layers) for g in est.groups)
    return {
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
        if isinstance(g.cache, StateCache):
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


def check_model(spec: ModelSpec, est: Estimate, result: dict[str, Any]) -> CrossCheck:
    """Scale the shrunk model's measurement to the real layer counts and compare by layer kind.

    The probe measured one representative layer per transformers layer kind; every real layer
    of that kind holds the same bytes. Layers are then grouped by kvcalc's own kinds, so a layer
    that kvcalc and transformers classify differently shows up as a mismatch.
    """
    by_kind = {layer["kind"]: layer for layer in result["layers"]}
    hf_kinds: list[str] = result["layer_kinds"]
    notes = []
    if len(hf_kinds) != len(spec.caches):
        notes.append(f"transformers builds {len(hf_kinds)} layers, kvcalc reads {len(spec.caches)}")
    measured: dict[str, int] = {}
    storage = 0
    layers: dict[str, int] = {}
    for index, hf_kind in enumerate(hf_kinds):
        kind = spec.caches[index].kind if index < len(spec.caches) else f"extra {hf_kind}"
        rep = by_kind[hf_kind]
        measured[kind] = measured.get(kind, 0) + rep["tensor_bytes"]
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


def parse_tolerance(text: str, estimated: int) -> int:
    """``0`` (exact, the default), ``4096`` bytes, or ``0.5%`` of the estimate."""
    cleaned = text.strip()
    try:
        if cleaned.endswith("%"):
            share = float(cleaned[:-1])
            if share < 0:
                raise ValueError
            return int(estimated * share / 100)
        value = int(cleaned)
        if value < 0:
            raise ValueError
        return value
    except ValueError:
        raise UsageError(f"--tolerance must be bytes (4096) or a percentage (0.5%), got {text!r}") from None
