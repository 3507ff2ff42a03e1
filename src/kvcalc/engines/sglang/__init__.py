"""SGLang's token pools: its plugin (options.py: the name, releases and knobs the registry and the CLI
read) and its rules (rules.py), loaded on first use (``from kvcalc.engines.sglang import SGLang``)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from kvcalc.engines.sglang.options import PLUGIN, SGLangOptions

if TYPE_CHECKING:
    from kvcalc.engines.sglang.rules import SGLang

# The rules' names this package hands out; its submodules (probe.py, ...) import as modules.
_RULES = ("SGLang",)

__all__ = ["PLUGIN", "SGLang", "SGLangOptions"]


def __getattr__(name: str) -> Any:
    if name in _RULES:
        return getattr(import_module(f"{__name__}.rules"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
