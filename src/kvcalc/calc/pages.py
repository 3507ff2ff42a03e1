"""The arithmetic of pages that calc and the engines share at run time: ceiling division and padding
to a multiple. Light: engines.base imports it at start-up (the ``Arrangement`` an engine hands back
for its pool's layout lives with the contracts, loaded by the engines that build one)."""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """Ceiling division of integers (exact: no float)."""
    return -(-a // b)


def pad(n: int, multiple: int) -> int:
    """``n`` rounded up to a multiple of ``multiple``."""
    return cdiv(n, multiple) * multiple
