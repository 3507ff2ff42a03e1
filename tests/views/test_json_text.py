"""--json text is json.dumps(data, indent=2) byte for byte, whatever the data."""

from __future__ import annotations

import json
from enum import IntEnum, StrEnum
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvcalc.views.json_text import dumps


class _Kind(StrEnum):
    FULL = "full"


class _Level(IntEnum):
    HIGH = 3


DOCUMENTS: tuple[Any, ...] = (
    {},
    [],
    {"a": {}, "b": [], "c": [{}], "d": [[]]},
    {"rows": [{"label": "MHA", "tokens": 1, "ratio": 1.0, "own": False, "dim": None}] * 3},
    {"rows": [{"x": 1}, {"x": [1, 2]}, {"y": 1}, {"x": 2}]},  # same keys, then other shapes
    [1, -0.0, 1e300, 2**70, -(2**70), float("nan"), float("inf"), float("-inf"), 0.1 + 0.2],
    {"naïve": 'héllo ☃ \u2028 \x00 \n \t " \\ /', "%s": "%d %%", 1: "int key", 2.5: "float key"},
    {True: 1, False: 0, None: "null key", "kind": _Kind.FULL, "level": _Level.HIGH},
    ("a", ("b", ["c"])),
    "just a string",
    12,
    None,
)


@pytest.mark.parametrize("document", DOCUMENTS)
def test_the_text_is_json_dumps_indented(document: Any) -> None:
    assert dumps(document) == json.dumps(document, indent=2)


_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
_KEYS = st.text() | st.integers() | st.booleans() | st.none()
_DOCUMENTS = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=30,
)


@given(_DOCUMENTS)
def test_any_document_is_json_dumps_indented(document: Any) -> None:
    assert dumps(document) == json.dumps(document, indent=2)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"a": {1, 2}}, "Object of type set is not JSON serializable"),
        ([b"bytes"], "Object of type bytes is not JSON serializable"),
        ({(1, 2): "tuple key"}, "keys must be str, int, float, bool or None, not tuple"),
    ],
)
def test_what_json_refuses_is_refused_alike(document: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        json.dumps(document, indent=2)
    with pytest.raises(TypeError, match=message):
        dumps(document)
