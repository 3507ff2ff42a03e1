"""The one place values are checked: counts, sizes, rates, shares, flags and names, as the API takes
them (and, through ``kvcalc.units``' parsers, as the CLI reads them from text).

Each check returns the value as kvcalc computes with it (an ``int`` for a count, a size or a rate)
or raises one ``UsageError`` naming it. ``name`` is the API parameter (``tokens``): the error's
``param``, which the CLI shows as its flag; a name that is a flag already (``--tokens``, from the
CLI's parsers) is the error's text alone. The bounds are far beyond any real workload, yet keep
every derived figure an exact int that a float can still show.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kvcalc.errors import UsageError

if TYPE_CHECKING:
    from fractions import Fraction

# Far beyond any real context or batch, yet keeps every derived figure within float range.
MAX_COUNT = 2**50
# More bytes than any machine holds (1 EiB), and more bytes or FLOPs per second than any chip moves.
MAX_BYTES = 2**60
MAX_RATE = 10**21
# More GPUs in one layout than any deployment has; keeps every loop over ranks or stages small.
MAX_PARALLEL = 2**16
# The most values one list parameter takes (compare's lengths, speed's batch sweep).
MAX_ITEMS = 10_000


def fail(name: str, message: str) -> UsageError:
    """The error of a bad ``name``: its ``param`` unless the name is a flag already."""
    return UsageError(message, param=None if name.startswith("-") else name)


def shown(value: object) -> str:
    """A bad value as a message shows it: an int with its thousands marked (a huge one by its
    digits' count), a long text cut."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > 128:
            return f"a number of {len(str(value)) if value.bit_length() < 10_000 else 'over 3,000'} digits"
        return f"{value:,}"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text):,} characters)"


def _integer(value: object, name: str, what: str, reader: str = "parse_count") -> int:
    """``value`` as an int: an int or an integer type (numpy's), never a bool, a float or a text."""
    if type(value) is int:
        return value
    if not isinstance(value, bool):
        try:
            return operator.index(value)  # type: ignore[arg-type]  # anything with __index__
        except TypeError:
            pass
    # Text as the CLI takes it ('32k', '16GiB') is read by kvcalc.units' parsers, not here.
    hint = f" (an int; kvcalc.units.{reader} reads text such as the CLI takes)" if isinstance(value, str) else ""
    raise fail(name, f"{name} must be {what}{hint}, got {shown(value)}")


def count(value: object, name: str, *, minimum: int = 1, maximum: int = MAX_COUNT, text: str | None = None) -> int:
    """A whole count in [minimum, maximum]: tokens, sequences, GPUs, images. ``text``: the value
    as the user wrote it, for the message."""
    if type(value) is int and minimum <= value <= maximum:
        return value  # the common case, at the cost of one comparison
    kind = {1: "a positive integer", 0: "a non-negative integer"}.get(minimum, f"an integer of at least {minimum:,}")
    number = _integer(value, name, kind)
    if number < minimum:
        if text is not None:  # as the user wrote it: "--tokens must be positive, got '0'"
            least = {1: "positive", 0: "zero or more"}.get(minimum, f"at least {minimum:,}")
            raise fail(name, f"{name} must be {least}, got {text!r}")
        raise fail(name, f"{name} must be {kind}, got {shown(number)}")
    said = repr(text) if text is not None else shown(number)
    if number > maximum:
        raise fail(name, f"{name} is implausibly large: {said} (at most {maximum:,})")
    return number


def optional_count(value: object, name: str, *, minimum: int = 1, maximum: int = MAX_COUNT) -> int | None:
    return None if value is None else count(value, name, minimum=minimum, maximum=maximum)


def _whole(value: object, name: str, what: str, reader: str) -> int:
    """An int, or a float of whole value (``16e9``, as sizes and rates are written); a fraction, NaN,
    an infinity, a bool or a text is refused."""
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():  # fractional bytes are refused, not truncated
            raise fail(name, f"{name} must be {what}, got {value!r}")
        return int(value)
    return _integer(value, name, what, reader)


def size(value: object, name: str, *, minimum: int = 1, maximum: int = MAX_BYTES) -> int:
    """Bytes: an int (or a float of whole value) in [minimum, maximum]."""
    if type(value) is int and minimum <= value <= maximum:
        return value
    number = _whole(value, name, "a whole number of bytes", "parse_size")
    if number < minimum:
        least = "a positive size in bytes" if minimum == 1 else "zero or more bytes"
        raise fail(name, f"{name} must be {least}, got {shown(value)}")
    if number > maximum:
        raise fail(name, f"{name} is implausibly large: {shown(value)} (at most {maximum:,} bytes)")
    return number


def rate(value: object, name: str) -> int:
    """A per-second peak (bytes or FLOPs): an int, or a float of whole value such as 3.35e12."""
    if type(value) is int and 0 < value <= MAX_RATE:
        return value
    number = _whole(value, name, "a positive whole number per second", "parse_rate")
    if not 0 < number <= MAX_RATE:
        raise fail(name, f"{name} must come to a positive whole number per second up to {MAX_RATE:.0e}, got "
                         f"{shown(value)}")  # fmt: skip
    return number


def share(value: object, name: str) -> Fraction:
    """A share in (0, 1] (a memory utilization, an efficiency): an int, a float, a Fraction or a
    Decimal, exactly as written (0.9 is 9/10, not the nearest binary float)."""
    from decimal import Decimal
    from fractions import Fraction

    if isinstance(value, bool) or not isinstance(value, int | float | Fraction | Decimal):
        raise fail(name, f"{name} must be in (0, 1] (a number), got {shown(value)}")
    if (isinstance(value, float) and not math.isfinite(value)) or (
        isinstance(value, Decimal) and not value.is_finite()
    ):
        raise fail(name, f"{name} must be in (0, 1], got {value}")
    exact = Fraction(str(value)) if isinstance(value, float) else Fraction(value)
    if not 0 < exact <= 1:
        raise fail(name, f"{name} must be in (0, 1], got {value}")
    return exact


def flag(value: object, name: str) -> bool:
    """True or False; 1, "yes" or None are not flags."""
    if not isinstance(value, bool):
        raise fail(name, f"{name} must be True or False, got {shown(value)}")
    return value


def text(value: object, name: str, *, optional: bool = True) -> str | None:
    """A name (an engine, a GPU, a revision): a str, or None where the parameter may be left out."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise fail(name, f"{name} must be a name (a str), got {shown(value)}")
    return value


def callback(value: object, name: str) -> Callable[..., Any] | None:
    if value is not None and not callable(value):
        raise fail(name, f"{name} must be a function or None, got {shown(value)}")
    return value


def counts(
    values: object, name: str, *, minimum: int = 1, maximum: int = MAX_COUNT, allow_empty: bool = False
) -> list[int]:
    """A list of counts (a list, tuple or range; not a bare number, a text or a set)."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise fail(name, f"{name} must be a list of whole numbers, got {shown(values)}")
    if not values and not allow_empty:
        raise fail(name, f"{name} needs at least one value")
    if len(values) > MAX_ITEMS:
        raise fail(name, f"{name} lists {len(values):,} values: at most {MAX_ITEMS:,}")
    return [count(v, name, minimum=minimum, maximum=maximum) for v in values]


def instance(value: object, name: str, kind: type | tuple[type, ...], what: str) -> None:
    """``value`` is a ``kind`` (or None): a Serving, a Layout, an options mapping."""
    if value is not None and not isinstance(value, kind):
        raise fail(name, f"{name} must be {what}, got {shown(value)}")
