"""``kvcalc presets``: the bundled presets as a table; ``presets show``: one preset's fields and
the config it came from."""

from __future__ import annotations

from typing import Any

from kvcalc.views.console import Block
from kvcalc.views.table import Column, Grid

SHOWN_FIELDS = ("name", "aliases", "family", "hf_repo", "source", "parameters", "weights_bytes",
                "weights_format", "weights_source", "layers", "query_heads", "kv_heads", "head_dim", "latent_dim",
                "attention")  # fmt: skip


def presets_view(rows: list[dict[str, Any]]) -> list[Block]:
    """One row per preset (``views.json.preset_row`` dicts, as ``--json`` prints them)."""
    body = []
    for r in rows:
        heads = r["kv_heads"] if r["kv_heads"] is not None else ("latent" if r["latent_dim"] else "-")
        dim = r["head_dim"] if r["head_dim"] is not None else (r["latent_dim"] or "-")
        body.append(
            (r["name"], r["family"], str(r["layers"]), str(heads), str(dim), r["attention"],
             f"{r['bytes_per_token_bf16']:,}")
        )  # fmt: skip
    title = "Bundled presets (bytes/token: every layer's K and V at bf16, before any window)"
    columns = (
        Column("name", right=False, whole=True), Column("family", right=False), Column("layers"), Column("KV heads"),
        Column("head dim"), Column("attention", right=False), Column("bytes/token (bf16)"),
    )  # fmt: skip
    return [Grid(title, columns, tuple(body))]


def preset_show_view(data: dict[str, Any], config: dict[str, Any]) -> list[Block]:
    """``key  value`` lines for the preset's fields, then its config as YAML."""
    import yaml

    lines: list[Block] = []
    for key in SHOWN_FIELDS:
        value = data[key]
        if value is None or value == []:
            continue
        shown = f"{value:,}" if isinstance(value, int) and key != "layers" else value
        lines.append(f"{key:<20}{', '.join(value) if isinstance(value, list) else shown}")
    lines.append(f"{'bytes/token (bf16)':<20}{data['bytes_per_token_bf16']:,}")
    lines.append("config:")
    lines += yaml.safe_dump(config, sort_keys=False).rstrip().split("\n")
    return lines
