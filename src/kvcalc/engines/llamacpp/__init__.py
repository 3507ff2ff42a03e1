"""llama.cpp's KV cache: its plugin (options.py: the name, releases and knobs the registry and the CLI
read) and its rules (rules.py), loaded on first use (``from kvcalc.engines.llamacpp import LlamaServer``)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from kvcalc.engines.llamacpp.options import PLUGIN, RULES_VERSION, SERVER_PLUGIN, LlamaCppOptions, LlamaServerOptions

if TYPE_CHECKING:
    from kvcalc.engines.llamacpp.rules import LlamaCpp, LlamaServer

# The rules' names this package hands out; its submodules (probe.py, ...) import as modules.
_RULES = (
    "LlamaCpp",
    "LlamaServer",
)

__all__ = [
    "PLUGIN",
    "RULES_VERSION",
    "SERVER_PLUGIN",
    "LlamaCpp",
    "LlamaCppOptions",
    "LlamaServer",
    "LlamaServerOptions",
]


def __getattr__(name: str) -> Any:
    if name in _RULES:
        return getattr(import_module(f"{__name__}.rules"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
