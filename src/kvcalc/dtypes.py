"""Storage formats for cache elements."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import UsageError


@dataclass(frozen=True)
class DType:
    """A storage format: its canonical name and the whole bytes one element takes."""

    name: str
    bytes_per_element: int
    description: str


FP32 = DType("fp32", 4, "IEEE float32")
FP16 = DType("fp16", 2, "IEEE float16")
BF16 = DType("bf16", 2, "bfloat16")
FP8 = DType("fp8", 1, "8-bit float (e4m3 or e5m2); per-tensor scales are not counted")

DTYPES: dict[str, DType] = {d.name: d for d in (FP32, FP16, BF16, FP8)}

# Spellings seen on the command line and in config.json (`torch_dtype` / `dtype`).
_ALIASES = {
    "float32": FP32, "float": FP32, "f32": FP32,
    "float16": FP16, "half": FP16, "f16": FP16,
    "bfloat16": BF16,
    "fp8_e4m3": FP8, "fp8_e5m2": FP8, "e4m3": FP8, "e5m2": FP8, "float8": FP8,
    "float8_e4m3fn": FP8, "float8_e5m2": FP8,
}  # fmt: skip


def lookup_dtype(text: str) -> DType | None:
    """The format a name stands for, or None; case and a leading ``torch.`` are ignored."""
    key = text.strip().lower().removeprefix("torch.")
    return DTYPES.get(key) or _ALIASES.get(key)


def parse_dtype(text: str) -> DType:
    """The format a command-line name stands for; an unknown name is a usage error."""
    found = lookup_dtype(text)
    if found is None:
        known = ", ".join(DTYPES)
        raise UsageError(f"unknown KV dtype {text!r}; choose one of {known}")
    return found
