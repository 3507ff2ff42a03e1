"""``kvcalc engines``: the engines kvcalc models as a table; ``kvcalc engines NAME``: one engine's
knobs, kvcalc's flag beside the engine's own."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.views.table import Column, Grid

if TYPE_CHECKING:
    from kvcalc.engines.knobs import EnginePlugin
    from kvcalc.views.console import Block


def _releases(plugin: EnginePlugin) -> str:
    if not plugin.versions:
        return "-"
    first, last = plugin.versions[0], plugin.versions[-1]
    span = first if first == last else f"{first} to {last}"
    return f"{span} (default {plugin.default_version})"


def engines_view(plugins: list[EnginePlugin]) -> list[Block]:
    """One row per engine: its name, aliases, the releases it models and its summary."""
    body = tuple((p.name, ", ".join(p.aliases) or "-", _releases(p), p.summary) for p in plugins)
    columns = (Column("engine", right=False, whole=True), Column("aliases", right=False),
               Column("releases", right=False), Column("what it keeps", right=False))  # fmt: skip
    return [Grid("Engines (--engine NAME[@VERSION]; 'kvcalc engines NAME' lists its knobs)", columns, body)]


def engine_view(plugin: EnginePlugin, lines: tuple[tuple[str, ...], str | None] = ((), None)) -> list[Block]:
    """One engine's knobs: kvcalc's flag, the engine's own, the default and what it does; the
    command lines kvcalc reads as it (after '--') and writes for fit's answer."""
    blocks: list[Block] = [f"{plugin.name}: {plugin.summary}"]
    if plugin.aliases:
        blocks.append(f"aliases: {', '.join(plugin.aliases)}")
    if plugin.versions:
        blocks.append(f"releases: {_releases(plugin)}")
    reads, writes = lines
    if reads:
        blocks.append(f"reads after '--': {', '.join(reads)}")
    if writes:
        blocks.append(f"fit writes: {writes} ...")
    knobs = plugin.options.knobs()
    if not knobs:
        blocks.append("no knobs: the engine has none kvcalc models")
        return blocks
    body = tuple((k.flag, k.engine_flag, k.default or "-", k.help) for k in knobs)
    columns = (Column("kvcalc flag", right=False, whole=True), Column("engine's flag", right=False),
               Column("default", right=False), Column("what it sets", right=False))  # fmt: skip
    return [*blocks, Grid(f"{plugin.name}'s knobs", columns, body)]
