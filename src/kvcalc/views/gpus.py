"""``kvcalc gpus``: the GPU presets as a table (``views.json.gpu_row`` dicts, as ``--json``
prints them)."""

from __future__ import annotations

from typing import Any

from kvcalc.units import format_binary
from kvcalc.views.console import Block
from kvcalc.views.table import Column, Grid


def _tera(value: int | None) -> str:
    return "-" if value is None else f"{value / 10**12:,.1f}"


def gpus_view(rows: list[dict[str, Any]]) -> list[Block]:
    """One row per preset: memory as the runtime reports it, peak bandwidth, dense peaks, link."""
    body = []
    for r in rows:
        link = "-" if r["link"] is None else f"{r['link']['kind']} {r['link']['bandwidth'] // 10**9:,}"
        body.append((r["name"], format_binary(r["runtime_bytes"]), f"{r['bandwidth'] / 10**12:,.2f}",
                     _tera(r["bf16_flops"]), _tera(r["fp8_flops"]), _tera(r["fp4_flops"]), link))  # fmt: skip
    title = "GPU presets (--gpu NAME or an alias; dense peaks, TB/s and TFLOP/s decimal)"
    columns = (
        Column("name", right=False, whole=True), Column("memory"), Column("TB/s"), Column("BF16"),
        Column("FP8"), Column("FP4"), Column("link GB/s", right=False),
    )  # fmt: skip
    notes = ["memory: what the CUDA/ROCm runtime reports (a Mac: what macOS lets the GPU wire); link: to "
             "each peer, one way; 'kvcalc gpus NAME' shows a preset's aliases and sources"]  # fmt: skip
    return [Grid(title, columns, tuple(body)), *notes]


def gpu_show_view(row: dict[str, Any]) -> list[Block]:
    """``key  value`` lines: every figure of one preset with its source."""
    lines: list[Block] = []
    for key, value in row.items():
        if key == "link" and value is not None:
            lines.append(f"{'link':<16}{value['label']}, {value['bandwidth']:,} B/s each way ({value['kind']})")
            lines.append(f"{'link source':<16}{value['source']}")
        elif value is not None and value != []:
            shown = ", ".join(value) if isinstance(value, list) else f"{value:,}" if isinstance(value, int) else value
            lines.append(f"{key:<16}{shown}")
    return lines
