"""``kvcalc check``: a server's pool beside kvcalc's, as ``--json`` prints it (``check_dict``, no
rich) and as a table (``check_view``, drawn from that dict, so the two cannot disagree)."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from kvcalc.units import format_binary
from kvcalc.views.console import Block, Line, Note
from kvcalc.views.table import Column, Grid

if TYPE_CHECKING:
    from kvcalc.api._check import CheckReport
    from kvcalc.engines.observing import Usage


def check_dict(report: CheckReport) -> dict[str, Any]:
    """Everything ``check`` found, in plain JSON types (bytes as integers)."""
    o = report.observation
    pools = []
    for p in report.pools:
        pools.append({**asdict(p), "difference": p.difference, "relative": p.relative, "pool_bytes": p.pool_bytes,
                      "agrees": p.within(report.tolerance or 0.0)})  # fmt: skip
    return {
        "target": o.origin,
        "asked": list(report.asked),
        "engine": o.engine,
        "modelled": o.modelled,
        "release": o.release,
        "gpu": o.gpu,
        "kvcalc_engine": report.engine,
        "model": report.model,
        "settings": dict(report.settings),
        "server_pools": [asdict(p) for p in o.pools],
        "pools": pools,
        "figures": [asdict(f) for f in report.figures],
        "memory": [asdict(t) for t in o.memory],
        "gap": [asdict(g) for g in report.gap],
        "what_ifs": [asdict(w) for w in report.what_ifs],
        "usage": usage_dict(o.usage),
        "usage_unit": o.pools[0].unit if o.pools else None,
        "read": [asdict(f) for f in o.figures],
        "tolerance": report.tolerance,
        "agrees": report.agrees,
        "assumed": list(report.assumed),
        "missing": list(o.missing),
        "unread": list(o.unread),
        "notes": list(report.notes),
        "warnings": list(report.warnings),
    }


def usage_dict(usage: Usage | None) -> dict[str, Any] | None:
    return None if usage is None else asdict(usage)


def _count(n: int | None, unit: str = "") -> str:
    if n is None:
        return "-"
    return f"{n:,} {unit}{'s' if unit and n != 1 else ''}".rstrip()


def _share(relative: float | None) -> str:
    if relative is None:
        return "-"
    return "exact" if relative == 0 else f"{relative:+.2%}"


def check_view(data: dict[str, Any]) -> list[Block]:
    """The server and what it runs, its pool beside kvcalc's, the gap, what-ifs, usage, notes."""
    blocks: list[Block] = [_title(data)]
    blocks.extend(_pools(data))
    blocks.extend(_gap(data))
    blocks.extend(_what_ifs(data))
    blocks.extend(_usage(data))
    for key, label in (("assumed", "assumed"), ("missing", "missing"), ("unread", "not read")):
        for text in data[key]:
            blocks.append(Note(f"{label}: {text}"))
    for text in data["notes"]:
        blocks.append(Note(text))
    for text in data["warnings"]:
        blocks.append(Note(f"warning: {text}"))
    return blocks


def _title(data: dict[str, Any]) -> str:
    said = data["release"]
    release = f" {said}" if said and said.split()[0].lstrip("v") not in data["engine"] else ""
    model = f", {data['model']}" if data["model"] else ""
    via = f" (kvcalc rules: {data['kvcalc_engine']})" if data["kvcalc_engine"] not in (None, data["engine"]) else ""
    return f"{data['target']}: {data['engine']}{release}{model}{via}"


def _pools(data: dict[str, Any]) -> list[Block]:
    if not data["pools"]:
        return [f"pool           {_server_pool(p)}" for p in data["server_pools"]]
    rows = []
    for p in data["pools"]:
        unit = p["unit"]
        per = f"{p['unit_tokens']}-token " if p["unit_tokens"] > 1 else ""
        shown = "-" if p["pool_bytes"] is None else format_binary(p["pool_bytes"])
        rows.append((f"{p['kind']} ({per}{unit}s)", _count(p["server"]), _count(p["kvcalc"]), _share(p["relative"]),
                     shown if p["server"] is not None else _size(p["kvcalc_bytes"])))  # fmt: skip
    columns = (Column("pool", right=False), Column("server"), Column("kvcalc"), Column("difference"),
               Column("pool size"))  # fmt: skip
    blocks: list[Block] = [Grid("The server's KV pool beside kvcalc's", columns, tuple(rows))]
    bases = dict.fromkeys(p["basis"] for p in data["pools"] if p["basis"])
    for basis in bases:
        kinds = [p["kind"] for p in data["pools"] if p["basis"] == basis]
        pools = f"{kinds[0]} pool" if len(kinds) == 1 else f"{', '.join(kinds)} pools"
        blocks.append(Note(f"kvcalc's {pools}: from {basis}"))
    if any(p["server"] is None for p in data["pools"]):
        blocks.append(Note("server -: the server does not reveal that pool; pool size: kvcalc's then"))
    for f in data["figures"]:
        blocks.append(f"{f['name']:<26} server {_figure(f['server'])}, kvcalc {_figure(f['kvcalc'])}")
    agrees = data["agrees"]
    tolerance = data["tolerance"]
    if agrees:
        blocks.append(Line("agrees exactly" if not tolerance else f"agrees within {tolerance:.2%}", "green"))
    elif agrees is False and tolerance is not None:
        blocks.append(Line(f"differs beyond {tolerance:.2%}", "red"))
    elif agrees is False:
        blocks.append(Line("differs: kvcalc's figure rests on what the server does not say (see below)", "yellow"))
    return blocks


def _size(n: int | None) -> str:
    return "-" if n is None else format_binary(n)


def _figure(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, float) else f"{value:,}" if isinstance(value, int) else str(value)


def _server_pool(p: dict[str, Any]) -> str:
    per = f" of {p['unit_tokens']} tokens" if p["unit_tokens"] > 1 else ""
    size = f", {format_binary(p['bytes'])}" if p["bytes"] is not None else ""
    return f"{p['kind']}: {p['count']:,} {p['unit']}s{per}{size}"


def _gap(data: dict[str, Any]) -> list[Block]:
    if not data["gap"]:
        return []
    rows = []
    for g in data["gap"]:
        ours = "-" if g["kvcalc"] is None else format_binary(g["kvcalc"])
        theirs = "-" if g["server"] is None else format_binary(g["server"])
        diff = "-" if g["kvcalc"] is None or g["server"] is None else _signed(g["kvcalc"] - g["server"])
        rows.append((g["term"], ours, theirs, diff))
    columns = (Column("term", right=False), Column("kvcalc"), Column("server"), Column("kvcalc - server"))
    return [Grid("The gap, term by term (one GPU)", columns, tuple(rows))]


def _signed(n: int) -> str:
    return ("-" if n < 0 else "+" if n > 0 else "") + format_binary(abs(n))


def _what_ifs(data: dict[str, Any]) -> list[Block]:
    if not data["what_ifs"]:
        return []
    rows = []
    for w in data["what_ifs"]:
        fits = "-" if w["concurrency"] is None else f"{w['concurrency']:.2f}"
        rows.append((w["change"], _count(w["count"]), f"{w['tokens']:,}", format_binary(w["bytes"]), fits))
    columns = (Column("what if", right=False), Column("units"), Column("tokens"), Column("pool"),
               Column("requests"))  # fmt: skip
    anchored = any(p["server"] is not None and p["unit_bytes"] is not None for p in data["pools"])
    title = "What-ifs, anchored on the server's own pool" if anchored else "What-ifs"
    blocks: list[Block] = [Grid(title, columns, tuple(rows))]
    if any(w["concurrency"] is not None for w in data["what_ifs"]):
        blocks.append(Note("requests: of the server's max_model_len at once"))
    return blocks


def _usage(data: dict[str, Any]) -> list[Block]:
    usage = data["usage"]
    return [] if usage is None else [f"usage          {usage_line(usage, data['usage_unit'])}"]


def usage_line(usage: dict[str, Any], unit: str | None) -> str:
    """One line of live usage; a derived figure is marked ``~`` (approximate)."""
    parts = []
    if usage["running"] is not None:
        parts.append(f"{usage['running']} running")
    if usage["waiting"] is not None:
        parts.append(f"{usage['waiting']} waiting")
    if usage["used_fraction"] is not None:
        parts.append(f"KV {usage['used_fraction']:.1%} used")
    for key, name in (("used_units", f"{unit or 'unit'}s"), ("used_tokens", "tokens")):
        if key == "used_tokens" and unit == "token" and usage["used_units"] is not None:
            continue  # the same figure
        if usage[key] is not None:
            mark = "~" if key in usage["derived"] else ""  # worked out from a rounded share
            parts.append(f"{mark}{usage[key]:,} {name}")
    if usage["preemptions"] is not None:
        parts.append(f"{usage['preemptions']} preemptions")
    return ", ".join(parts) or "not exported"
