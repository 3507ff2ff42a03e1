"""``kvcalc presets`` and ``kvcalc presets show``: the bundled models."""

from typing import Annotated

import typer

from .app import presets_app
from .options import complete_model, echo, print_json

PresetsJsonOpt = Annotated[bool, typer.Option("--json", help="Print plain JSON.")]


@presets_app.callback()
def presets(ctx: typer.Context, as_json: PresetsJsonOpt = False) -> None:
    """List the bundled presets: name, family, layers, KV heads, head dim, attention kind, and
    KV bytes per token at bf16."""
    if ctx.invoked_subcommand is not None:
        return
    from kvcalc import api
    from kvcalc.render import preset_row, presets_table

    rows = [preset_row(s.preset, s.spec, s.bf16_bytes_per_token) for s in api.list_presets()]
    if as_json:
        print_json(rows)
        return
    echo(presets_table(rows))


@presets_app.command("show")
def presets_show(
    name: Annotated[
        str,
        typer.Argument(metavar="NAME", autocompletion=complete_model, help="Preset name or alias (case-insensitive)."),
    ],
    as_json: PresetsJsonOpt = False,
) -> None:
    """Show one preset: where it came from, its derived geometry and its config fields."""
    from kvcalc import api
    from kvcalc.render import preset_row

    found = api.show_preset(name)
    row = preset_row(found.preset, found.spec, found.bf16_bytes_per_token)
    data = {**row, "config": found.preset.config, "notes": list(found.spec.notes)}
    if as_json:
        print_json(data)
        return
    import yaml

    for key in ("name", "aliases", "family", "hf_repo", "source", "parameters", "layers",
                "query_heads", "kv_heads", "head_dim", "latent_dim", "attention"):  # fmt: skip
        value = data[key]
        if value is None or value == []:
            continue
        echo(f"{key:<20}{', '.join(value) if isinstance(value, list) else value}")
    echo(f"{'bytes/token (bf16)':<20}{row['bytes_per_token_bf16']:,}")
    echo("config:")
    echo(yaml.safe_dump(found.preset.config, sort_keys=False).rstrip())
