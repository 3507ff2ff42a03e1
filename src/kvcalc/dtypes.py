"""Storage formats for cache elements, with the metadata quantized formats carry.

A format stores a row of ``n`` elements (one token's K, or V, or MLA latent, in one layer) in
blocks of ``block`` elements; each block holds ``block * bits / 8`` data bytes plus
``meta_bytes`` of scale / zero-point. Plain floats are blocks of one element with no metadata.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcalc import checks
from kvcalc.errors import UsageError

# The widest block a format takes (as kvcalc.spec.MAX_DIMENSION bounds a dimension).
_MAX_BLOCK = 2**24


@dataclass(frozen=True)
class DType:
    """A storage format: bits per element, elements per block and metadata bytes per block.

    ``strict_blocks`` formats (llama.cpp's ggml types) need rows that are whole blocks; group
    quantization pads the last partial group instead.
    """

    name: str
    bits: int
    description: str
    block: int = 1
    meta_bytes: int = 0
    strict_blocks: bool = False

    def __post_init__(self) -> None:
        # A format built by hand (kvcalc.DType is public) is checked as a parameter is: a float block
        # or bit width would make every byte count a float.
        checks.text(self.name, "name", optional=False)
        checks.count(self.bits, "bits", maximum=64)
        checks.count(self.block, "block", maximum=_MAX_BLOCK)
        checks.count(self.meta_bytes, "meta_bytes", minimum=0, maximum=_MAX_BLOCK)
        checks.flag(self.strict_blocks, "strict_blocks")

    @property
    def is_group_quantized(self) -> bool:
        """Integers in groups with a scale and zero each (int8/int4/int2, ``--quant-group``); llama.cpp's
        fixed-block types are not."""
        return self.block > 1 and not self.strict_blocks

    @property
    def bytes_per_element(self) -> int:
        """Whole bytes per element of a plain format (fp32/fp16/bf16/fp8)."""
        if self.block != 1 or self.bits % 8:
            raise ValueError(f"{self.name} has no whole bytes per element")
        return self.bits // 8

    @property
    def is_plain(self) -> bool:
        return self.block == 1 and self.bits % 8 == 0 and not self.meta_bytes

    def row_bytes(self, elements: int) -> tuple[int, int]:
        """(data bytes, metadata bytes) to store one row of ``elements`` elements."""
        if self.block == 1:
            return elements * self.bits // 8, 0
        if self.strict_blocks and elements % self.block:
            raise UsageError(f"{self.name} stores rows in blocks of {self.block}; a row of {elements} does not fit")
        blocks = -(-elements // self.block)
        return blocks * self.block * self.bits // 8, blocks * self.meta_bytes


FP32 = DType("fp32", 32, "IEEE float32")
FP16 = DType("fp16", 16, "IEEE float16")
BF16 = DType("bf16", 16, "bfloat16")
FP8 = DType("fp8", 8, "8-bit float (e4m3 or e5m2); per-tensor scales are not counted")
FP8_E4M3 = DType("fp8_e4m3", 8, "8-bit float e4m3; per-tensor scales are not counted")
FP8_E5M2 = DType("fp8_e5m2", 8, "8-bit float e5m2; per-tensor scales are not counted")

# llama.cpp / ggml block types (ggml-common.h): 32 elements per block, an fp16 scale ``d`` and,
# for the _1 types, an fp16 minimum ``m``; q5 types keep the fifth bits in a 4-byte ``qh``.


def _ggml(name: str, bits: int, meta_bytes: int, layout: str) -> DType:
    return DType(name, bits, f"ggml {name}: {layout}", block=32, meta_bytes=meta_bytes, strict_blocks=True)


Q8_0 = _ggml("q8_0", 8, 2, "32 x int8 + fp16 scale = 34 B")
Q4_0 = _ggml("q4_0", 4, 2, "32 x 4 bit + fp16 scale = 18 B")
Q4_1 = _ggml("q4_1", 4, 4, "32 x 4 bit + fp16 scale and min = 20 B")
Q5_0 = _ggml("q5_0", 5, 2, "32 x 5 bit + fp16 scale = 22 B")
Q5_1 = _ggml("q5_1", 5, 4, "32 x 5 bit + fp16 scale and min = 24 B")
IQ4_NL = _ggml("iq4_nl", 4, 2, "32 x 4 bit (non-linear) + fp16 scale = 18 B")

DEFAULT_QUANT_GROUP = 64


def group_quantized(bits: int, group: int = DEFAULT_QUANT_GROUP) -> DType:
    """intN with one fp16 scale and one fp16 zero-point per ``group`` elements (4 bytes a group)."""
    checks.count(group, "quant_group", maximum=_MAX_BLOCK)
    return DType(
        f"int{bits}",
        bits,
        f"{bits}-bit integers, fp16 scale + fp16 zero-point per group of {group}",
        block=group,
        meta_bytes=4,
    )


DTYPES: dict[str, DType] = {
    d.name: d for d in (FP32, FP16, BF16, FP8, FP8_E4M3, FP8_E5M2, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL)
}
GROUP_QUANTIZED_BITS = {"int8": 8, "int4": 4, "int2": 2}

# Spellings seen on the command line and in config.json (`torch_dtype` / `dtype`).
_ALIASES = {
    "float32": FP32, "float": FP32, "f32": FP32,
    "float16": FP16, "half": FP16, "f16": FP16,
    "bfloat16": BF16,
    "e4m3": FP8_E4M3, "e5m2": FP8_E5M2, "float8": FP8,
    "float8_e4m3fn": FP8_E4M3, "float8_e5m2": FP8_E5M2,
}  # fmt: skip


def lookup_dtype(text: str, *, quant_group: int = DEFAULT_QUANT_GROUP) -> DType | None:
    """The format a name stands for, or None; case and a leading ``torch.`` are ignored."""
    key = text.strip().lower().removeprefix("torch.")
    if key in GROUP_QUANTIZED_BITS:
        return group_quantized(GROUP_QUANTIZED_BITS[key], quant_group)
    return DTYPES.get(key) or _ALIASES.get(key)


def parse_dtype(text: str, *, quant_group: int = DEFAULT_QUANT_GROUP) -> DType:
    """The format a command-line name stands for; an unknown name is a usage error."""
    checks.text(text, "text", optional=False)
    found = lookup_dtype(text, quant_group=quant_group)
    if found is None:
        known = ", ".join([*DTYPES, *GROUP_QUANTIZED_BITS, "auto"])
        raise UsageError(f"unknown KV dtype {text!r}; choose one of {known}")
    return found


def parse_kv_dtype(text: str, *, quant_group: int = DEFAULT_QUANT_GROUP) -> DType | None:
    """A command-line KV format, or None for ``auto``: the engine's own default for the model."""
    if text.strip().lower() == "auto":
        return None
    return parse_dtype(text, quant_group=quant_group)
