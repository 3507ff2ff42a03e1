"""The page's one way into kvcalc: the command line itself, run in the browser's Python (Pyodide).

The page builds the same argv a user would type and reads the same ``--json`` (or, for the
worked formula, the same text ``--explain`` prints at 80 columns), so the page and the CLI
cannot disagree: there is no second implementation to drift. Nothing here computes a figure.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import traceback

# Plain text at a terminal's width, as the CLI prints it into a pipe; never the network (the
# page fetches a Hub config itself, where it is allowed to, and hands kvcalc the file).
os.environ["NO_COLOR"] = "1"
os.environ["COLUMNS"] = "80"
os.environ["HF_HUB_OFFLINE"] = "1"


def run(argv_json: str) -> str:
    """Run ``kvcalc ARGV`` and return ``{"code", "stdout", "stderr"}`` as JSON text: the exit
    status the README's table gives, and both streams as a terminal would show them."""
    from kvcalc.cli.app import main

    argv = [str(arg) for arg in json.loads(argv_json)]
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except Exception:  # a kvcalc bug: the CLI prints its traceback, and so does this (the page shows its last line)
            traceback.print_exc(file=err)
            code = 1
    return json.dumps({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()})


def write_config(path: str, text: str) -> str:
    """Put a pasted or fetched config.json where kvcalc reads files, and return its path."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def format_exact(n: int) -> str:
    """A byte count as kvcalc prints it: exact, then binary and decimal units, each labelled."""
    from kvcalc.units import format_exact as exact

    return exact(int(n))


def format_bytes(n: int) -> str:
    """A byte count in binary units with the decimal beside it, as fit's budget table prints it."""
    from kvcalc.units import format_bytes as both

    return both(int(n))


def format_binary(n: int) -> str:
    """A byte count in binary units alone (the chart's axis)."""
    from kvcalc.units import format_binary as binary

    return binary(int(n))


def kv_dtypes() -> str:
    """The cache formats ``--kv-dtype`` takes, as JSON: kvcalc's own table (the page's choices)."""
    from kvcalc.dtypes import DTYPES, GROUP_QUANTIZED_BITS

    return json.dumps(["auto", *DTYPES, *GROUP_QUANTIZED_BITS])
