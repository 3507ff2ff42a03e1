"""The arithmetic of pages that calc and the engines share at run time: ceiling division, padding to
a multiple, and the ``Arrangement`` an engine hands back for its pool's layout
(``StorageRules.arrange``, calc/contracts.py). Light: engines.base imports it at start-up."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcalc.calc.contracts import StorageRules
    from kvcalc.spec import LayerCache


def cdiv(a: int, b: int) -> int:
    """Ceiling division of integers (exact: no float)."""
    return -(-a // b)


def pad(n: int, multiple: int) -> int:
    """``n`` rounded up to a multiple of ``multiple``."""
    return cdiv(n, multiple) * multiple


@dataclass(frozen=True)
class Arrangement:
    """How an engine lays the layers' pages out in its pool, beyond each layer's own rows (vLLM's
    layer groups): the rules each layer kind is held by (larger blocks), the bytes a state takes
    (a page padded to the pool's page), and empty layer slots, each costing as one layer of the
    kind it pads. ``StorageRules.arrange`` gives it; estimate, compare, fit and speed all see it."""

    engines: Mapping[LayerCache, StorageRules] = field(default_factory=dict)
    state_bytes: Mapping[LayerCache, int] = field(default_factory=dict)
    padding: Mapping[LayerCache, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
