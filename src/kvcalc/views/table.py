"""Tables that fit the terminal: rich draws them, this module decides each column's width.

A table wider than the screen narrows in stages, each costing fewer lines than the next:

1. headers wrap (``bytes/token`` -> ``bytes/`` ``token``): one extra header line;
2. text cells wrap between their parts (``256 MiB /`` ``268.44 MB``, ``(0.25x)``);
3. cells wrap between words, labels after a hyphen (``mistral-`` ``7b-v0.1``);
4. the spaces between the outer bars and the first and last columns go;
5. still too wide: the value columns are split over several tables, each repeating the key
   columns that name the row (model, dtype), as pandas prints a wide frame; of the ways to
   split (as many columns as fit in each, or the same count shared out evenly), the one that
   takes fewer lines.

Numbers never break: a number is one word, and no stage narrows a column below its widest word.
Only a single key and value column wider than the screen is left to rich to fold.
"""

from __future__ import annotations

import re
from functools import cache, lru_cache
from itertools import pairwise, repeat
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from rich.box import Box
    from rich.table import Table


# NamedTuples rather than dataclasses here and in views.console: a tenth of the cost to define,
# and every kvcalc command that prints a table defines them at start-up.


class Column(NamedTuple):
    header: str
    right: bool = True  # numbers are right-aligned; labels (right=False) may also break after a hyphen
    whole: bool = False  # never wrapped: a name the user must type back (a preset, a GPU)


class Grid(NamedTuple):
    """A table to draw: a title line above it, its columns and rows of cell text. The first
    ``keys`` columns name a row; they repeat when the table is split to fit."""

    title: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[str, ...], ...]
    keys: int = 1


# Where cells may wrap, stage by stage: at spaces that do not part a number from its unit or
# come before a "/" (``256 MiB /`` ``268.44 MB``), then at every other space, and labels also
# after a hyphen between letters or digits. A number and its unit (bytes, seconds) never part.
# Headers wrap at spaces and after a "/".
# (Pattern strings: ``re`` compiles and caches them on first use, which a table that fits never
# reaches.)
_UNIT = r"(?:(?:[KMGT]i)?B|[kMGT]B|[mµun]?s|%)\b"  # never parted from the number before it
_PARTS = rf" (?!{_UNIT}|/)"
_WORDS = rf" +(?!/|{_UNIT})"  # a "/" stays at the end of the word before it; "14.73 ms" stays whole
_HYPHENS = r"(?<=[^\s-]-)(?=[^\s-])"
_HEADER_TOKENS = r" +|[^ /]+/?|/"


def _width(text: str) -> int:
    if text.isascii():  # one cell a character: most cells, and no call into rich
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


def _pieces(text: str, level: int, label: bool) -> list[str]:
    """The pieces a cell may wrap between: level 1 its parts, level 2 its words (and a label's
    hyphenated parts)."""
    if level == 1:
        return re.split(_PARTS, text)
    words = re.split(_WORDS, text)
    if label:
        words = [piece for word in words for piece in re.split(_HYPHENS, word)]
    return words


def _header_pieces(text: str) -> list[tuple[str, bool]]:
    """A header's pieces, each with whether a space came before it."""
    pieces: list[tuple[str, bool]] = []
    space = False
    for token in re.findall(_HEADER_TOKENS, text):
        if token.isspace():
            space = True
        else:
            pieces.append((token, space))
            space = False
    return pieces


class Layout(NamedTuple):
    """Each column's text width, and whether the outer columns keep their edge padding."""

    widths: tuple[int, ...]
    pad_edge: bool = True


def _overhead(columns: int, pad_edge: bool) -> int:
    # A bar left of each column and one at the end; a space either side of each text.
    return 3 * columns + 1 - (0 if pad_edge else 2)


@lru_cache(maxsize=8192)
def _lines(text: str, width: int, kind: int) -> int:
    """How many lines ``text`` takes at ``width``: kind 0 a header, 1 a label, 2 any other cell."""
    wrapped = _header(text, width) if kind == 0 else _cell(text, width, kind == 1)
    return wrapped.count("\n") + 1


def _shrink(grid: Grid, widths: list[int], floor: list[int], room: int) -> list[int]:
    """Narrow columns, never below ``floor``, until the table fits ``room``: each time the
    narrowing that adds the fewest lines per character saved (the header counts as a row; a row
    already two lines high takes a second line in another cell for free)."""
    widths = list(widths)
    texts = [tuple(c.header for c in grid.columns), *grid.rows]
    kinds = [[0] * len(widths), *([1 if not c.right else 2 for c in grid.columns] for _ in grid.rows)]
    heights = [list(map(_lines, row, widths, kind)) for row, kind in zip(texts, kinds, strict=True)]
    columns = [([row[c] for row in texts], [kind[c] for kind in kinds]) for c in range(len(widths))]

    def tops() -> list[tuple[int, int, int]]:
        """Per row: its tallest cell's height, that cell's column, and the tallest of the others
        (1 when there are none): a row's height without any one column, read off at once."""
        found = []
        for row in heights:
            tallest = max(row)
            first = row.index(tallest)
            found.append((tallest, first, max(row[:first] + row[first + 1 :], default=1)))
        return found

    while (excess := sum(widths) - room) > 0:
        best: tuple[float, int, int, int, int] | None = None
        rows = tops()
        for c in range(len(widths)):
            if widths[c] <= floor[c]:
                continue
            rest = [second if first == c else tallest for tallest, first, second in rows]
            column_texts, column_kinds = columns[c]
            now = sum(map(max, rest, (row[c] for row in heights)))
            for target in range(max(floor[c], widths[c] - excess), widths[c]):
                then = sum(map(max, rest, map(_lines, column_texts, repeat(target), column_kinds)))
                saved = widths[c] - target
                option = ((then - now) / saved, -saved, -widths[c], c, target)
                if best is None or option < best:
                    best = option
        if best is None:
            break
        *_, column, target = best
        widths[column] = target
        for r in range(len(texts)):
            heights[r][column] = _lines(texts[r][column], target, kinds[r][column])
    return widths


def layout(grid: Grid, width: int) -> Layout | None:
    """Column widths that make the table at most ``width`` wide, or None when even the
    narrowest that keep every word whole do not fit (split the table, then)."""
    natural = [
        max([_width(column.header), *(_width(row[i]) for row in grid.rows)]) for i, column in enumerate(grid.columns)
    ]
    if sum(natural) + _overhead(len(natural), True) <= width:
        return Layout(tuple(natural))
    headers, cells, parts, words = [], [], [], []
    for i, column in enumerate(grid.columns):
        texts = [row[i] for row in grid.rows]
        label = not column.right
        headers.append(max((_width(piece) for piece, _ in _header_pieces(column.header)), default=0))
        cells.append(max(map(_width, texts), default=0))
        if column.whole:  # its cells keep their full width at every stage
            parts.append(cells[-1])
            words.append(cells[-1])
            continue
        parts.append(max((_width(p) for t in texts for p in _pieces(t, 1, label)), default=0))
        words.append(max((_width(p) for t in texts for p in _pieces(t, 2, label)), default=0))
    least = [max(h, w) for h, w in zip(headers, words, strict=True)]
    if sum(least) + _overhead(len(grid.columns), False) > width:
        return None  # not even every column at its widest word fits: no narrowing can help
    for pad_edge in (True, False):
        room = width - _overhead(len(grid.columns), pad_edge)
        widths = natural
        for floor in (cells, parts, words):
            if sum(widths) <= room:
                break
            widths = _shrink(grid, widths, [max(h, f) for h, f in zip(headers, floor, strict=True)], room)
        if sum(widths) <= room:
            return Layout(tuple(widths), pad_edge)
    return None


def height(grid: Grid, fitted: Layout) -> int:
    """Lines the table takes, title and borders included."""
    header = max(_lines(c.header, w, 0) for c, w in zip(grid.columns, fitted.widths, strict=True))
    kinds = [1 if not c.right else 2 for c in grid.columns]
    rows = sum(max(map(_lines, row, fitted.widths, kinds)) for row in grid.rows)
    return (1 if grid.title else 0) + 3 + header + rows


def split(grid: Grid, width: int) -> list[tuple[Grid, Layout | None]]:
    """The grid as one table, or its value columns spread over as few tables as fit (each with
    the key columns first, the title on the first), split where that takes the fewest lines.
    A layout is None only where a single value column does not fit: rich folds that one."""
    whole = layout(grid, width)
    if whole is not None or len(grid.columns) <= grid.keys + 1:
        return [(grid, whole)]
    keys = list(range(grid.keys))
    values = list(range(grid.keys, len(grid.columns)))

    def part(indices: list[int], title: str = "") -> Grid:
        rows = tuple(tuple(row[i] for i in indices) for row in grid.rows)
        return Grid(title, tuple(grid.columns[i] for i in indices), rows, grid.keys)

    @cache
    def fitted(start: int, stop: int) -> tuple[Layout, int] | None:
        """The layout of value columns ``start:stop`` with the keys, and its height in lines."""
        g = part(keys + values[start:stop], "x")
        found = layout(g, width)
        return None if found is None else (found, height(g, found))

    # How many tables: as many value columns in each as fit, left to right (one layout per
    # column tried, so the work grows linearly with the columns).
    greedy: list[tuple[int, int]] = []
    start = 0
    for stop in range(1, len(values) + 1):
        if stop - start > 1 and fitted(start, stop) is None:
            greedy.append((start, stop - 1))
            start = stop - 1
    greedy.append((start, len(values)))
    # As many tables with the columns shared out evenly reads better where it fits; of the two,
    # the one that takes fewer lines.
    count = len(greedy)
    size, extra = divmod(len(values), count)
    bounds = [0]
    for n in range(count):
        bounds.append(bounds[-1] + size + (1 if n < extra else 0))
    best: tuple[int, list[tuple[int, int]]] | None = None
    for spans in (list(pairwise(bounds)), greedy):
        found = [fitted(a, b) for a, b in spans]
        if any(f is None for f in found):
            continue
        lines = sum(f[1] for f in found if f is not None)
        if best is None or lines < best[0]:
            best = (lines, spans)
    spans = best[1] if best is not None else [(n, n + 1) for n in range(len(values))]  # else some too wide even so
    tables = [part(keys + values[a:b], grid.title if n == 0 else "") for n, (a, b) in enumerate(spans)]
    return [(g, layout(g, width)) for g in tables]


def _fill(pieces: list[tuple[str, str]], width: int) -> list[str]:
    """Greedy lines of (joiner, piece) pairs at most ``width`` wide; a wider piece stands alone."""
    lines: list[str] = []
    for joiner, piece in pieces:
        if lines and _width(lines[-1] + joiner + piece) <= width:
            lines[-1] += joiner + piece
        else:
            lines.append(piece)
    return lines


def _cell(text: str, width: int, label: bool) -> str:
    if _width(text) <= width:
        return text
    lines: list[str] = []
    for part in _fill([(" ", p) for p in _pieces(text, 1, label)], width):
        if _width(part) <= width:
            lines.append(part)
            continue
        words = [(" ", w) for w in re.split(_WORDS, part)]
        if label:  # hyphenated pieces join without a space
            words = [(j if n == 0 else "", p) for j, w in words for n, p in enumerate(re.split(_HYPHENS, w))]
        lines += _fill(words, width)
    return "\n".join(lines)


def _header(text: str, width: int) -> str:
    if _width(text) <= width:
        return text
    return "\n".join(_fill([(" " if space else "", piece) for piece, space in _header_pieces(text)], width))


def draw(grid: Grid, fitted: Layout | None, box: Box) -> Table:
    """The rich table: cells and headers wrapped here to the layout's widths, so rich only draws
    (and folds a word only where no layout fits: ``fitted`` None)."""
    from rich.table import Table

    widths = fitted.widths if fitted is not None else (None,) * len(grid.columns)
    table = Table(
        box=box,
        show_edge=True,
        pad_edge=fitted is None or fitted.pad_edge,
        padding=(0, 1),
        highlight=False,
        header_style="bold",
    )
    for column, width in zip(grid.columns, widths, strict=True):
        table.add_column(
            column.header if width is None else _header(column.header, width),
            justify="right" if column.right else "left",
            width=width,
            overflow="fold",  # only a word wider than the screen: better folded than cut
        )
    for row in grid.rows:
        table.add_row(
            *(
                text if width is None else _cell(text, width, not c.right)
                for text, width, c in zip(row, widths, grid.columns, strict=True)
            )
        )
    return table
