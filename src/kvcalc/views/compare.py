"""``kvcalc compare``: variants or models side by side, a sweep over context lengths, and the
``--chart`` text bars."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from kvcalc.units import Units, format_bytes
from kvcalc.views.console import Block, Note
from kvcalc.views.json import comparison_notes
from kvcalc.views.labels import attention_kind
from kvcalc.views.table import Column, Grid

if TYPE_CHECKING:
    from fractions import Fraction

    from kvcalc.calc.compare import CompareRow, Comparison

CHART_WIDTH = 40  # the longest bar, where the screen allows it
MIN_CHART_WIDTH = 10


def comparison_view(comp: Comparison, units: Units, *, chart: bool = False, plot: str | None = None) -> list[Block]:
    """The table, the chart when asked for, the notes, and where a plot was saved."""
    blocks: list[Block] = [comparison_grid(comp, units)]
    if comp.mode == "variants" and any(r.candidate.own for r in comp.rows):
        blocks.append("* the model's own attention")
    if chart:
        blocks += ["", Chart(comp, units)]
    blocks += [Note(note) for note in comparison_notes(comp)]
    if plot is not None:
        blocks.append(f"plot saved to {plot}")
    return blocks


def ratio_text(ratio: Fraction) -> str:
    """``1/4`` -> ``0.25x (1/4)``; small exact fractions are shown, since they are the point."""
    if ratio.denominator == 1:
        return f"{ratio.numerator:,}x"
    text = f"{float(ratio):.3g}x"
    if ratio.numerator <= 99 and ratio.denominator <= 99:
        text += f" ({ratio.numerator}/{ratio.denominator})"
    return text


def _size(n: int, units: Units) -> str:
    return format_bytes(n, units, sep=" / ")


def _candidate_heads(row: CompareRow) -> str:
    c = row.candidate
    if c.latent_dim is not None:
        return f"latent {c.latent_dim}"
    return str(c.kv_heads) if c.kv_heads is not None else "-"


def comparison_grid(comp: Comparison, units: Units) -> Grid:
    """Variants or models side by side: one row per candidate x dtype; a sweep puts one column
    per context length, each cell the total and its ratio to the baseline."""
    many_dtypes = len(comp.dtypes) > 1
    sweep = len(comp.tokens) > 1
    columns = [Column("variant" if comp.mode == "variants" else "model", right=False, whole=comp.mode != "variants")]
    if many_dtypes:
        columns.append(Column("dtype", right=False))
    if comp.mode == "models":
        columns.append(Column("attention", right=False))
    columns.append(Column("KV heads"))
    if comp.mode == "variants":
        columns.append(Column("elements/token/layer"))
    columns.append(Column("bytes/token"))
    if sweep:
        columns += [Column(f"T={t:,}") for t in comp.tokens]
    else:
        columns += [Column("bytes"), Column("total"), Column("ratio")]

    body: list[tuple[str, ...]] = []
    by_key: dict[tuple[int, str], list[CompareRow]] = {}
    for r in comp.rows:
        by_key.setdefault((id(r.candidate), r.kv_dtype.name), []).append(r)
    for group in by_key.values():
        r0 = group[0]
        label = r0.candidate.label + (" *" if comp.mode == "variants" and r0.candidate.own else "")
        cells = [label]
        if many_dtypes:
            cells.append(r0.kv_dtype.name)
        if comp.mode == "models":
            cells.append(attention_kind(r0.candidate.spec))
        cells.append(_candidate_heads(r0))
        if comp.mode == "variants":
            cells.append(f"{r0.candidate.elements_per_token:,}")
        cells.append(f"{r0.per_token_bytes:,}")
        if sweep:
            cells += [f"{_size(r.total_bytes, units)} ({float(r.ratio):.3g}x)" for r in group]
        else:
            cells += [f"{r0.total_bytes:,}", _size(r0.total_bytes, units), ratio_text(r0.ratio)]
        body.append(tuple(cells))
    dtype_text = "each model's own dtype" if comp.own_dtypes and many_dtypes else ", ".join(d.name for d in comp.dtypes)
    title = (
        f"{'Attention variants' if comp.mode == 'variants' else 'Models'}: batch {comp.batch:,}"
        + ("" if sweep else f" x {comp.tokens[0]:,} tokens")
        + f", {dtype_text}, ratio to {comp.baseline}"
        + (f" at {comp.dtypes[0].name}" if many_dtypes and not comp.own_dtypes else "")
    )
    return Grid(title, tuple(columns), tuple(body), keys=2 if many_dtypes else 1)


class Chart(NamedTuple):
    """Bytes against context length as text bars, one block per row, scaled to the largest; the
    bars are as long as the screen allows, up to ``CHART_WIDTH``."""

    comp: Comparison
    units: Units

    def lines(self, width: int) -> list[str]:
        rows = self.comp.rows
        largest = max((r.total_bytes for r in rows), default=0) or 1
        label_width = max(len(f"{r.candidate.label} {r.kv_dtype.name}") for r in rows)
        token_width = max(len(f"{t:,}") for t in self.comp.tokens)
        sizes = [_size(r.total_bytes, self.units) for r in rows]
        room = width - (label_width + 2 + 2 + token_width + 2) - 1 - max(map(len, sizes))
        bar_width = max(MIN_CHART_WIDTH, min(CHART_WIDTH, room))
        lines = [f"KV cache vs context length (bar = bytes, scaled to {_size(largest, self.units)})"]
        previous = None
        for r, size in zip(rows, sizes, strict=True):
            name = f"{r.candidate.label} {r.kv_dtype.name}"
            shown = name if name != previous else ""
            previous = name
            cells = round(bar_width * r.total_bytes / largest)
            bar = "█" * cells if cells or not r.total_bytes else "▏"
            lines.append(f"{shown:<{label_width}}  T={r.tokens:>{token_width},}  {bar} {size}")
        return lines
