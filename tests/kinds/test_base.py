"""The layer-kind interface (kvcalc.kinds.base.LayerKind): which hooks a kind must answer, and that
every other one says it is optional and what its default does."""

from __future__ import annotations

import inspect

import pytest

from kvcalc.kinds.base import REQUIRED_HOOKS, Kind, LayerKind


def test_a_layer_kind_names_its_required_hooks() -> None:
    # kind and explain are required: a kind lacking one is refused when it is defined.
    with pytest.raises(TypeError, match="explain"):

        class Half(LayerKind):
            @property
            def kind(self) -> Kind:
                return Kind.FULL

    assert LayerKind.kind.fget.__isabstractmethod__ and LayerKind.explain.__isabstractmethod__  # type: ignore[attr-defined]


def test_every_optional_layer_hook_says_so_and_names_its_default() -> None:
    hooks = {
        n for n in vars(LayerKind) if not n.startswith("_") and n not in ("tokens", "token_bound", *REQUIRED_HOOKS)
    }
    silent = [n for n in sorted(hooks) if "Optional: default" not in (inspect.getdoc(getattr(LayerKind, n)) or "")]
    assert silent == []
