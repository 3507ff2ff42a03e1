"""The package's face (kvcalc/__init__.py): the lazy public API."""

from __future__ import annotations


def test_dir_shows_the_lazy_public_api() -> None:
    import kvcalc

    names = dir(kvcalc)
    assert {"estimate", "fit", "speed", "compare", "ModelSpec", "UsageError"} <= set(names)
    assert set(kvcalc.__all__) <= set(names)
