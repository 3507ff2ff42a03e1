"""``kvcalc probe``: every probe's answer drawn one way. A report describes itself in neutral items
(kvcalc.engines.probing: lines, tables, a verdict, notes); this module draws them as view blocks,
naming no engine. Every text from a result file is ``clean``-ed when drawn (``views.console``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.engines.probing import Remark, Table, Verdict
from kvcalc.views.console import Block, Line, Note
from kvcalc.views.table import Column, Grid

if TYPE_CHECKING:
    from kvcalc.engines.probing import Item, ProbeOutcome


def probe_view(report: ProbeOutcome) -> list[Block]:
    """The report's items as blocks: a table as a grid, the verdict green or red, a remark as a note."""
    return [_block(item) for item in report.describe()]


def _block(item: Item) -> Block:
    if isinstance(item, Table):
        columns = tuple(Column(h, right=h not in item.left) for h in item.headers)
        return Grid(item.title, columns, item.rows)
    if isinstance(item, Verdict):
        return Line(item.text, "green" if item.agrees else "bold red")
    if isinstance(item, Remark):
        return Note(item.text)
    return item
