"""Writing to the terminal: the one place that knows about encodings, closed streams and escapes.

Tables use box-drawing characters and the text uses a few typographic ones (×, ≈, …). A stream
whose encoding cannot hold them (``PYTHONIOENCODING=ascii``, cp1252 or cp437 on a redirected
Windows stream, ``LC_ALL=C``) gets ASCII stand-ins instead of a UnicodeEncodeError. Text that came
from outside (configs, probe results) is stripped of control characters, so a config cannot move
the cursor or recolour the terminal. Drawing tables and colour is ``kvcalc.views.console``'s job;
this module stays free of rich, so ``--json`` never loads it.
"""

from __future__ import annotations

import codecs
import contextlib
import re
import sys
from typing import TextIO

# Box drawing (rich's heavy-head style) and typography -> ASCII that keeps the table's shape.
_ASCII = str.maketrans(
    {
        "┏": "+", "┳": "+", "┓": "+", "┡": "+", "╇": "+", "┩": "+", "└": "+", "┴": "+", "┘": "+",
        "┌": "+", "┬": "+", "┐": "+", "├": "+", "┼": "+", "┤": "+", "╭": "+", "╮": "+", "╰": "+",
        "╯": "+", "━": "=", "─": "-", "┃": "|", "│": "|", "█": "#", "▏": "|", "▎": "|", "▍": "|",
        "▌": "|", "▋": "|", "▊": "|", "▉": "#", "·": ".", "×": "x", "≈": "~", "≤": "<=", "≥": ">=",
        "…": "...", "—": "-", "–": "-", "−": "-", "²": "^2", "’": "'", "‘": "'", "“": '"', "”": '"',
        "→": "->", "←": "<-",
    }
)  # fmt: skip

# C0 and C1 controls except tab and newline, and DEL: what an escape sequence is made of.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class _Switches:
    """What the root command's flags set for this run (``kvcalc --no-color``)."""

    no_color = False


_SWITCHES = _Switches()


def set_no_color(value: bool) -> None:
    """``kvcalc --no-color``: no colour codes even on a terminal (as ``NO_COLOR`` does)."""
    _SWITCHES.no_color = value


def colour_disabled() -> bool:
    """Whether ``--no-color`` was given (``NO_COLOR`` is read by the views)."""
    return _SWITCHES.no_color


class OutputError(Exception):
    """Standard output cannot take what kvcalc writes (closed, full, or a broken pipe)."""

    def __init__(self, reason: str, *, broken_pipe: bool = False) -> None:
        super().__init__(reason)
        self.broken_pipe = broken_pipe


def clean(text: str) -> str:
    """Text from a config or a result file with every control character shown as ``?``."""
    return _CONTROLS.sub("?", text)


def encodable(text: str, encoding: str | None) -> str:
    """``text`` in a form ``encoding`` can hold: unchanged when it can, else ASCII stand-ins for
    box and typographic characters and ``?`` for anything left."""
    name = encoding or "utf-8"
    try:
        codecs.lookup(name)
    except LookupError:
        name = "ascii"
    try:
        text.encode(name)
        return text
    except UnicodeEncodeError:
        pass
    translated = text.translate(_ASCII)
    return translated.encode(name, errors="replace").decode(name)


def _write(stream: TextIO | None, text: str, what: str) -> None:
    if stream is None:  # the descriptor was closed before Python started (`>&-`)
        raise OutputError(f"{what} is closed")
    try:
        stream.write(encodable(text, getattr(stream, "encoding", None)))
        stream.flush()
    except BrokenPipeError:
        raise OutputError(f"{what} was closed by the reader", broken_pipe=True) from None
    except (OSError, ValueError) as exc:  # ENOSPC on /dev/full, EBADF, a closed file object
        reason = getattr(exc, "strerror", None) or str(exc)
        raise OutputError(f"cannot write to {what}: {reason}") from None


def out(text: str = "") -> None:
    """One line of results on stdout."""
    _write(sys.stdout, text + "\n", "standard output")


def err(text: str) -> None:
    """One line of diagnostics on stderr; a stderr that cannot be written is given up silently."""
    with contextlib.suppress(OutputError):
        _write(sys.stderr, text + "\n", "standard error")
