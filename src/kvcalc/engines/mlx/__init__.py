"""mlx-lm's prompt cache: its plugin (options.py: the name, releases and knobs the registry and the CLI
read) and its rules (rules.py), loaded on first use (``from kvcalc.engines.mlx import mlx_quantized``)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from kvcalc.engines.mlx.options import PLUGIN, MLXOptions

if TYPE_CHECKING:
    from kvcalc.engines.mlx.rules import MLX, mlx_quantized

# The rules' names this package hands out; its submodules (probe.py, ...) import as modules.
_RULES = (
    "MLX",
    "mlx_quantized",
)

__all__ = ["MLX", "PLUGIN", "MLXOptions", "mlx_quantized"]


def __getattr__(name: str) -> Any:
    if name in _RULES:
        return getattr(import_module(f"{__name__}.rules"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
