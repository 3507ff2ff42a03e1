"""transformers' DynamicCache: its plugin (here: the name, releases and knobs the registry and the
CLI read, light) and its rules (rules.py), loaded on first use
(``from kvcalc.engines.transformers import Transformers``)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from kvcalc.engines.knobs import EnginePlugin

PLUGIN = EnginePlugin(
    name="transformers",
    summary="DynamicCache: sliding layers keep W-1",
    rules="kvcalc.engines.transformers.rules:Transformers",
)


if TYPE_CHECKING:
    from kvcalc.engines.transformers.rules import RULES_VERSION, Transformers, version_warning

# The rules' names this package hands out; its submodules (probe.py, ...) import as modules.
_RULES = (
    "RULES_VERSION",
    "Transformers",
    "version_warning",
)

__all__ = ["PLUGIN", "RULES_VERSION", "Transformers", "version_warning"]


def __getattr__(name: str) -> Any:
    if name in _RULES:
        return getattr(import_module(f"{__name__}.rules"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
