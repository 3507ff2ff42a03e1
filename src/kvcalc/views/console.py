"""Drawing the views: width, colour and box characters chosen for where the output goes.

Width: ``COLUMNS`` when set (as terminal programs honour it), else the terminal's own width:
standard output's, or when that is a pipe (``kvcalc presets | head``) the terminal standard
error or input is on, so piped output still fits the screen it lands on. With no terminal at all
(a file, a CI log) the width is ``PIPE_WIDTH`` = 80, the width of a default terminal. Every line
fits it: tables narrow (``views/table.py``), ``note:`` lines wrap with a hanging indent, and
titles and ``label  value`` lines wrap under their value.

Colour: only when standard output is a terminal, and not with ``NO_COLOR`` set (to anything
but the empty string), ``TERM=dumb`` or ``kvcalc --no-color``. ``FORCE_COLOR`` is not
honoured: output that is not a terminal never holds an escape sequence.

Box: rich's heavy-head box; where the output encoding cannot hold its characters (ascii,
cp1252, cp437), the same shape in ``+ = - |``. ``kvcalc.console.encodable`` stays the last
safety net for any other character, and every text is ``clean``-ed of control characters
(configs and result files are quoted in titles, cells and notes).

Plain lines are written as they are; rich is imported only for a table or for colour.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

from kvcalc.console import clean, colour_disabled, out
from kvcalc.views.table import Grid, draw, split

if TYPE_CHECKING:
    from rich.box import Box
    from rich.console import Console

PIPE_WIDTH = 80  # no terminal anywhere and COLUMNS unset: a default terminal's width
MIN_WIDTH = 40  # narrower than this, tables are drawn as if it were this wide
NOTE = "note: "

# rich.box.HEAVY_HEAD with each character as kvcalc.console.encodable writes it in ASCII.
_ASCII_HEAVY_HEAD = "+=++\n| ||\n+=++\n| ||\n+-++\n+-++\n| ||\n+-++\n"
_HEAVY_HEAD_CHARACTERS = "┏━┳┓┃┡╇┩│├─┼┤└┴┘"


class Screen(NamedTuple):
    """Where output goes: its width, whether prose wraps at it, colour, and box characters."""

    width: int = PIPE_WIDTH
    wrap: bool = False  # notes wrap at ``width`` (a terminal, or COLUMNS given)
    colour: bool = False
    ascii: bool = False


class Line(NamedTuple):
    """One line printed as it is (never wrapped), in a style when colour is on."""

    text: str
    style: str = ""


class Note(NamedTuple):
    """A ``note:`` line: text that may quote a config, wrapped at the screen's width."""

    text: str


class Fitted(Protocol):
    """A block that lays itself out for a width (the compare chart)."""

    def lines(self, width: int) -> list[str]: ...


Block = str | Line | Note | Grid | Fitted


def screen() -> Screen:
    """The screen standard output is now: see the module's docstring."""
    stream = sys.stdout
    terminal = _isatty(stream)
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdecimal() and int(columns) > 0:
        width = int(columns)
    elif terminal:
        width = _terminal_width(stream)
    else:
        # A pipe: the terminal the user looks at is usually still on stderr or stdin.
        width = next((_terminal_width(s) for s in (sys.stderr, sys.stdin) if _isatty(s)), PIPE_WIDTH)
    wrap = True
    colour = (
        terminal
        and not colour_disabled()
        and os.environ.get("NO_COLOR", "") == ""
        and os.environ.get("TERM", "").lower() != "dumb"
    )
    encoding = getattr(stream, "encoding", None) or "utf-8"
    return Screen(max(width, MIN_WIDTH), wrap, colour, not _can_encode(_HEAVY_HEAD_CHARACTERS, encoding))


def _isatty(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]  # any file-like object
    except (AttributeError, OSError, ValueError):  # None (closed), or a closed file
        return False


def _terminal_width(stream: object) -> int:
    try:
        width = os.get_terminal_size(stream.fileno()).columns  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return 80
    return width or 80  # a pseudo-terminal nobody sized says 0


def _can_encode(text: str, encoding: str) -> bool:
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def box(ascii_only: bool) -> Box:
    from rich.box import HEAVY_HEAD, Box

    return Box(_ASCII_HEAVY_HEAD, ascii=True) if ascii_only else HEAVY_HEAD


class _Writer:
    """Text into a buffer: plain lines written as they are, tables and styled text through one
    rich console, made on first need (output with neither never imports rich)."""

    def __init__(self, where: Screen) -> None:
        import io

        self.where = where
        self.buffer = io.StringIO()
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(
                file=self.buffer,
                width=self.where.width,
                force_terminal=self.where.colour,
                color_system="standard" if self.where.colour else None,
                no_color=not self.where.colour,
                markup=False,
                emoji=False,
                highlight=False,
                legacy_windows=False,
                force_jupyter=False,
                force_interactive=False,
            )
        return self._console

    def wrapped(self, text: str, style: str = "") -> None:
        """A title or ``label  value`` line, wrapped at the width under its value (the text after
        the label's run of spaces), or two spaces in; a number or name is never broken."""
        text = clean(text)
        if not self.where.wrap or len(text) <= self.where.width:
            self.line(text, style)
            return
        import re
        import textwrap

        lead = len(text) - len(text.lstrip(" "))
        label = re.match(r"^(\S.{0,24}?\s{2,})\S", text[lead:])
        indent = lead + (len(label.group(1)) if label is not None else 2)
        lines = textwrap.wrap(text, width=self.where.width, subsequent_indent=" " * indent,
                              break_long_words=False, break_on_hyphens=False)  # fmt: skip
        for line in lines or [""]:
            self.line(line, style)

    def line(self, text: str, style: str = "", prefix: tuple[str, str] | None = None) -> None:
        """One line, cleaned; ``prefix`` (text, style) goes before it."""
        text = clean(text)
        if not self.where.colour or not (style or prefix):
            self.buffer.write((prefix[0] if prefix else "") + text + "\n")
            return
        from rich.text import Text

        styled = Text.assemble(prefix or "", (text, style))
        self.console.print(styled, soft_wrap=True)


def render(blocks: Iterable[Block], where: Screen) -> str:
    """The blocks as text for ``where``: tables fitted to its width, notes wrapped when it is
    a terminal, colour codes only when it has colour. Every line ends with a newline."""
    writer = _Writer(where)
    for block in blocks:
        if isinstance(block, Grid):
            _grid(writer, block)
        elif isinstance(block, Note):
            _note(writer, block.text)
        elif isinstance(block, Line):
            writer.wrapped(block.text, block.style)
        elif isinstance(block, str):
            writer.wrapped(block)
        else:
            for text in block.lines(where.width):
                writer.wrapped(text)
    return writer.buffer.getvalue()


def show(blocks: Sequence[Block]) -> None:
    """Draw the blocks on standard output, in one write."""
    out(render(blocks, screen()).removesuffix("\n"))


def _note(writer: _Writer, text: str) -> None:
    body = clean(text)
    lines = [body]
    if writer.where.wrap:
        import textwrap

        width = writer.where.width - len(NOTE)
        lines = textwrap.wrap(body, width=width, break_long_words=False, break_on_hyphens=False) or [""]
    writer.line(lines[0], prefix=(NOTE, "yellow"))
    for line in lines[1:]:
        writer.line(" " * len(NOTE) + line)


def _grid(writer: _Writer, grid: Grid) -> None:
    clean_grid = Grid(
        clean(grid.title),
        tuple(c._replace(header=clean(c.header)) for c in grid.columns),
        tuple(tuple(clean(cell) for cell in row) for row in grid.rows),
        grid.keys,
    )
    drawn_box = box(writer.where.ascii)
    for part, fitted in split(clean_grid, writer.where.width):
        if part.title:
            writer.wrapped(part.title, "bold")
        writer.console.print(draw(part, fitted, drawn_box))
