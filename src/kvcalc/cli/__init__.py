"""The ``kvcalc`` command line: one module per command, each a thin layer of flag checks over one
call into ``kvcalc.api``; shared flags live in ``options``, the app and its error handling in
``app``."""

from kvcalc.cli.app import app
from kvcalc.cli.commands import main  # registers every command on the app
from kvcalc.cli.options import complete_dtype as _complete_dtype
from kvcalc.cli.options import complete_engine as _complete_engine
from kvcalc.cli.options import complete_gpu as _complete_gpu

__all__ = ["_complete_dtype", "_complete_engine", "_complete_gpu", "app", "main"]
