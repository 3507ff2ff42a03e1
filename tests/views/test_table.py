"""Tables (kvcalc.views.table): splitting a wide table."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("lengths", [20, 60, 120])
def test_splitting_a_wide_table_lays_out_linearly_in_its_columns(monkeypatch, lengths: int) -> None:
    # compare with 30-60 lengths took 13 s to minutes: every way to cut the columns was laid out.
    # Now one layout per column (greedy), one per table (the even share-out) and one per table drawn.
    from kvcalc.views import table

    calls = 0
    real = table.layout

    def counted(grid: table.Grid, width: int) -> table.Layout | None:
        nonlocal calls
        calls += 1
        return real(grid, width)

    monkeypatch.setattr(table, "layout", counted)
    columns = (table.Column("variant", right=False), *(table.Column(f"T={t:,}") for t in range(lengths)))
    rows = tuple(("GQA-8", *(f"{t:,} MiB / {t * 1.05:,.2f} MB (0.25x)" for t in range(lengths))) for _ in range(4))
    parts = table.split(table.Grid("title", columns, rows), 80)
    assert len(parts) > 1 and all(fitted is not None for _, fitted in parts)
    for g, fitted in parts:
        assert fitted is not None
        assert sum(fitted.widths) + 3 * len(g.columns) + 1 - (0 if fitted.pad_edge else 2) <= 80
    assert calls <= 1 + lengths + 3 * len(parts)
