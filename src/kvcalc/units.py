"""Bytes to text and text to counts. Bytes stay integers; rounding happens only here, for display.

The patterns are strings that ``re`` compiles (and caches) on first use, so a command pays only
for the parsers it runs (each compile is ~0.1 ms of start-up).
"""

from __future__ import annotations

import re
from typing import Literal

# The bounds and the range checks live in kvcalc.checks: the parsers here and the API share them.
from kvcalc.checks import MAX_BYTES, MAX_COUNT, MAX_RATE, count, fail, shown
from kvcalc.errors import UsageError

Units = Literal["binary", "decimal", "both"]

BINARY_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))
DECIMAL_UNITS = (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3))

# A bare number where a size is asked is bytes; one below this (other than 0) is far more likely a
# size whose unit was left out (--gpu-memory 80) than that many bytes, so it is refused.
MIN_BARE_BYTES = 2**20

_TOKEN_SUFFIXES = {"": 1, "k": 2**10, "m": 2**20}
_COUNT_RE = r"^\s*(\d{1,20}(?:\.\d{1,20})?)\s*([kKmM]?)\s*$"
_SCIENTIFIC_RE = r"^\s*(\d{1,20})[eE]\+?(\d{1,6})\s*$"  # 1e6, 2E+5: whole numbers
_LONG_DIGITS_RE = r"^\s*\d{21,}\s*[kKmM]?\s*$"  # more digits than any count has


def _text(text: object, what: str) -> str:
    """The parsers read text as the command line gives it; a number or None is refused (an int goes
    to the API's parameter itself, not through a parser)."""
    if not isinstance(text, str):
        raise fail(what, f"{what} must be text such as '32k' or '16GiB' (a str), got {shown(text)}")
    return text


def parse_count(text: str, *, what: str) -> int:
    """Parse a positive token or sequence count: ``2048``, ``32k`` (= 32,768), ``1m`` (= 2**20).

    ``k`` and ``m`` are binary (1024 and 1024**2) because context lengths are quoted that way:
    "32k context" means 32,768 tokens. Thousands separators (``1,000`` or ``100_000``) are
    accepted between groups of three digits only: ``1,00`` and ``1__0`` are refused, not read.
    """
    cleaned = _ungrouped(_text(text, what), what)
    match = re.match(_COUNT_RE, cleaned)
    if match is None:
        scientific = re.match(_SCIENTIFIC_RE, cleaned)
        if scientific is not None and int(scientific.group(2)) <= 40:
            # 1e6 is a whole number written shortly: read it exactly, then check its size.
            value = int(scientific.group(1) + "0" * int(scientific.group(2)))
            if value > 0:
                return count(value, what, text=text)
        elif scientific is not None or re.match(_LONG_DIGITS_RE, cleaned):
            raise UsageError(f"{what} is implausibly large: {text[:24]!r}... (at most {MAX_COUNT:,})")
        raise UsageError(f"{what} must be a positive whole number such as 2048 or 32k, got {text!r}")
    number: str = match.group(1)
    suffix: str = match.group(2)
    scale: int = _TOKEN_SUFFIXES[suffix.lower()]
    if "." in number:
        whole, frac = number.split(".")
        numerator = int(whole + frac) * scale
        denominator: int = 10 ** len(frac)
        if numerator % denominator:
            raise UsageError(f"{what} must be a whole number of tokens, got {text!r}")
        value = numerator // denominator
    else:
        value = int(number) * scale
    return count(value, what, text=text)


# Digits grouped in threes by one separator, as a thousands separator groups them: 1,000,000 or
# 100_000 (the whole part of a number; its fraction, suffix or unit follow).
_GROUPED_RE = r"^(\s*)(\d{1,3}(?:,\d{3})+|\d{1,3}(?:_\d{3})+)(?![\d,_])(.*)$"


def _ungrouped(text: str, what: str) -> str:
    """``text`` with its thousands separators taken out; separators anywhere but between groups of
    three digits (``1,00``, ``1__0``, ``10_00``, ``1.000,5``) are refused: read as written they
    would give another number than the one meant."""
    if "," not in text and "_" not in text:
        return text
    grouped = re.match(_GROUPED_RE, text, re.DOTALL)
    if grouped is None or "," in grouped.group(3) or "_" in grouped.group(3):
        raise UsageError(
            f"{what}: thousands separators (, or _) must stand between groups of three digits, as in 1,000 "
            f"or 100_000; got {text!r}"
        )
    return grouped.group(1) + grouped.group(2).replace(",", "").replace("_", "") + grouped.group(3)


def _scaled(n: int, scale: int, unit: str) -> str:
    if n % scale == 0:
        return f"{n // scale:,} {unit}"
    return f"{n / scale:,.2f} {unit}"


def _pick(n: int, table: tuple[tuple[str, int], ...], base_unit: str) -> str:
    for unit, scale in table:
        if n >= scale:
            return _scaled(n, scale, unit)
    return f"{n:,} {base_unit}"


def format_binary(n: int) -> str:
    """``268435456`` -> ``256 MiB`` (2**20 bytes per MiB); exact values print without decimals."""
    return _pick(n, BINARY_UNITS, "B")


def format_decimal(n: int) -> str:
    """``268435456`` -> ``268.44 MB`` (10**6 bytes per MB)."""
    return _pick(n, DECIMAL_UNITS, "B")


def format_bytes(n: int, units: Units = "both", *, sep: str | None = None) -> str:
    """Human text for a byte count, units always labelled; ``both`` shows binary then decimal:
    ``256 MiB (268.44 MB)``, or ``256 MiB / 268.44 MB`` with ``sep=" / "``."""
    if units == "binary":
        return format_binary(n)
    if units == "decimal":
        return format_decimal(n)
    binary, decimal = format_binary(n), format_decimal(n)
    if binary == decimal:
        return binary
    return f"{binary} ({decimal})" if sep is None else f"{binary}{sep}{decimal}"


def format_exact(n: int, units: Units = "both") -> str:
    """The exact count, then the units asked for: ``268,435,456 bytes = 256 MiB = 268.44 MB``."""
    parts = [f"{n:,} bytes"]
    if units in ("binary", "both"):
        parts.append(format_binary(n))
    if units in ("decimal", "both"):
        parts.append(format_decimal(n))
    return " = ".join(dict.fromkeys(parts))


_SIZE_RE = r"^\s*(\d{1,20}(?:\.\d{1,12})?)\s*([a-zA-Z]*)\s*$"
_SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}  # fmt: skip


def parse_size(text: str, *, what: str) -> int:
    """Parse a memory size to whole bytes: ``80GB`` is 80 x 10^9, ``80GiB`` is 80 x 2^30,
    ``5.38GiB`` is floor(5.38 x 2^30). ``B`` or no unit is bytes, a whole number of them (``1.5B``
    is refused); a bare number other than 0 must be at least MIN_BARE_BYTES (1 MiB), as a smaller
    one is a size whose unit was left out (``80`` meant 80GB, not 80 bytes): write ``80B``."""
    cleaned = _ungrouped(_text(text, what), what)
    match = re.match(_SIZE_RE, cleaned)
    if match is None or match.group(2).lower() not in _SIZE_UNITS:
        raise UsageError(f"{what} must be a size such as 80GB (10^9 bytes) or 80GiB (2^30 bytes), got {text!r}")
    number, unit = match.group(1), match.group(2).lower()
    scale = _SIZE_UNITS[unit]
    whole, _, frac = number.partition(".")
    if scale == 1 and frac.strip("0"):
        raise UsageError(f"{what} must be a whole number of bytes, got {text!r}")
    value: int = (int(whole + frac) * scale) // 10 ** len(frac)
    if not unit and 0 < value < MIN_BARE_BYTES:
        raise UsageError(
            f"{what} {text.strip()!r} has no unit, so it would be {value:,} bytes: give a unit, as in {whole}GB "
            f"(10^9 bytes) or {whole}GiB (2^30 bytes), or {whole}B for bytes"
        )
    if value > MAX_BYTES:
        raise UsageError(f"{what} is implausibly large: {text!r} (at most {MAX_BYTES:,} bytes)")
    return value


_SI = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15, "e": 10**18}
_RATE = r"^\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([kmgtpe]?)\s*(?:b/s|bps|flop/s|flops)?\s*$"


def parse_rate(text: str, *, what: str) -> int:
    """A per-second peak as a whole number: ``3.35TB/s``, ``3350GB/s`` or ``3.35e12`` bytes/s;
    ``989.4T``, ``989.4TFLOPS`` or ``989.4e12`` FLOP/s. Prefixes are decimal (T = 10^12), as vendors
    state peaks."""
    from decimal import Decimal  # here: only rates need it (~1 ms of start-up)

    m = re.match(_RATE, _text(text, what), re.IGNORECASE)
    if m is None:
        raise UsageError(f"{what} must be a rate like 3.35TB/s or 989.4e12, got {text!r}")
    value = Decimal(m[1]) * _SI[m[2].lower()]
    if value <= 0 or value != value.to_integral_value() or value > MAX_RATE:
        raise UsageError(f"{what} must come to a positive whole number per second, got {text!r}")
    return int(value)


_DURATION = r"^\s*(\d+(?:\.\d+)?(?:e-?\d+)?)\s*(s|ms|us|µs)?\s*$"
_SECONDS = {None: 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}


def parse_duration(text: str, *, what: str) -> float:
    """A duration in seconds: ``1s``, ``50ms``, ``250us`` or a bare number of seconds (``0.5``)."""
    m = re.match(_DURATION, _text(text, what), re.IGNORECASE)
    if m is None:
        raise UsageError(f"{what} must be a duration like 1s, 50ms or 0.5, got {text!r}")
    seconds = float(m[1]) * _SECONDS[m[2].lower() if m[2] else None]
    if not 0 < seconds <= 86_400:
        raise UsageError(f"{what} must be over 0 and at most a day, got {text!r}")
    return seconds
