"""``--json`` text: ``json.dumps(data, indent=2)`` byte for byte, several times faster.

The standard library encodes indented JSON in pure Python, a generator per value (its C encoder
serves only unindented output), so a compare sweep of 10,000 lengths (30,000 rows) spent more
time indenting than computing. This encoder builds one list of strings, with the C string
escaper and a lookup by exact type for the scalars. It reads what kvcalc's JSON dicts hold
(dicts, lists, tuples, strings, integers, floats, booleans, None) and refuses anything else, as
``json.dumps`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from json.encoder import encode_basestring_ascii
from math import isinf, isnan
from typing import Any

_INDENT = "  "


def dumps(data: Any) -> str:
    """``json.dumps(data, indent=2)``: ASCII-escaped strings, ``": "`` and ``","`` between items,
    two spaces an indent, NaN and Infinity as the standard library writes them."""
    parts: list[str] = []
    _value(data, "\n", parts, {})
    return "".join(parts)


def _float(value: float) -> str:
    if isnan(value):
        return "NaN"
    if isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _null(value: None) -> str:
    return "null"


# By exact type: a subclass (an IntEnum, a StrEnum) takes the slower path below, as it does in json.
_SCALARS: dict[type, Callable[[Any], str]] = {
    str: encode_basestring_ascii,
    int: int.__repr__,
    float: _float,
    bool: _bool,
    type(None): _null,
}


def _scalar(value: Any) -> str | None:
    """The JSON of a scalar, or None for a container."""
    if isinstance(value, str):
        return encode_basestring_ascii(value)
    if value is None or value is True or value is False:
        return _SCALARS[type(value)](value)
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return _float(value)
    return None


def _key(key: Any) -> str:
    """A dict key as json writes it: strings as they are, numbers, booleans and None as text."""
    if isinstance(key, str):
        return encode_basestring_ascii(key)
    if isinstance(key, float):
        return encode_basestring_ascii(_float(key))
    if key is None or key is True or key is False or isinstance(key, int):
        text = _scalar(key)
        assert text is not None
        return '"' + text + '"'
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _value(value: Any, newline: str, parts: list[str], keys: dict[tuple[Any, ...], Any]) -> None:
    write = _SCALARS.get(type(value))
    if write is not None:
        parts.append(write(value))
    elif isinstance(value, dict):
        _dict(value, newline, parts, keys)
    elif isinstance(value, list | tuple):
        _list(value, newline, parts, keys)
    else:
        text = _scalar(value)
        if text is None:
            raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
        parts.append(text)


# A shape (indent, keys, value types) whose values are not all scalars: written item by item.
_ITEMWISE = ("", ())


def _dict(value: dict[Any, Any], newline: str, parts: list[str], keys: dict[tuple[Any, ...], Any]) -> None:
    """``keys`` holds, per indent, tuple of keys and tuple of value types, the dict's text with a
    slot for each value and the writers of the values that are not integers (an integer's text is
    its ``%s``): the rows of a table repeat their shape, so a row of scalars is one format
    operation and a writer call per string, float, boolean or None."""
    if not value:
        parts.append("{}")
        return
    inner = newline + _INDENT
    values = tuple(value.values())
    shape = (inner, tuple(value), tuple(map(type, values)))
    entry = keys.get(shape)
    if entry is None:
        entry = keys[shape] = _shape(value, shape[2], inner, newline)
    if entry is not _ITEMWISE:
        template, writers = entry
        if writers:
            texts = list(values)
            for i, write in writers:
                texts[i] = write(texts[i])
            parts.append(template % tuple(texts))
        else:
            parts.append(template % values)
        return
    lead = "{" + inner
    append = parts.append
    for key, item in value.items():
        append(lead + _key(key) + ": ")
        _value(item, inner, parts, keys)
        lead = "," + inner
    append(newline + "}")


def _shape(
    value: dict[Any, Any], types: tuple[type, ...], inner: str, newline: str
) -> tuple[str, tuple[tuple[int, Callable[[Any], str]], ...]] | tuple[str, tuple[()]]:
    """A dict shape's template and its non-integer writers, or _ITEMWISE."""
    if not all(t in _SCALARS for t in types):
        return _ITEMWISE
    lines = [inner + _key(key).replace("%", "%%") + ": %s" for key in value]
    writers = tuple((i, _SCALARS[t]) for i, t in enumerate(types) if t is not int)
    return "{" + ",".join(lines) + newline + "}", writers


def _list(value: list[Any] | tuple[Any, ...], newline: str, parts: list[str], keys: dict[tuple[Any, ...], Any]) -> None:
    if not value:
        parts.append("[]")
        return
    inner = newline + _INDENT
    lead = "[" + inner
    append = parts.append
    for item in value:
        write = _SCALARS.get(type(item))
        if write is not None:
            append(lead + write(item))
        else:
            append(lead)
            _value(item, inner, parts, keys)
        lead = "," + inner
    append(newline + "]")
