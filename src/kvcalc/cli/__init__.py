"""The ``kvcalc`` command line: one module per command, each a thin layer of flag checks over one
call into ``kvcalc.api``; shared flags live in ``options``, the app and its error handling in
``app``, the table of commands (each imported only when it runs) in ``commands``."""

from typing import TYPE_CHECKING, Any

from kvcalc.cli.app import app, main

if TYPE_CHECKING:
    from kvcalc.cli.options import complete_dtype as _complete_dtype
    from kvcalc.cli.options import complete_engine as _complete_engine
    from kvcalc.cli.options import complete_gpu as _complete_gpu

__all__ = ["_complete_dtype", "_complete_engine", "_complete_gpu", "app", "main"]

# The completion helpers, imported on first use: kvcalc.cli.options loads the engine registry.
_OPTIONS = {"_complete_dtype": "complete_dtype", "_complete_engine": "complete_engine", "_complete_gpu": "complete_gpu"}


def __getattr__(name: str) -> Any:
    if name not in _OPTIONS:
        raise AttributeError(f"module 'kvcalc.cli' has no attribute {name!r}")
    from kvcalc.cli import options

    return getattr(options, _OPTIONS[name])
