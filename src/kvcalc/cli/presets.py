"""``kvcalc presets`` and ``kvcalc presets show``: the bundled models."""

from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from kvcalc.cli.options import complete_model, print_json, print_view

# ``kvcalc presets`` is a group of its own: the list, and ``show``. kvcalc.cli.commands builds its
# click group on its own (typer.main.get_command), hence the root app's name, plain help and no
# completion flags here.
presets_app = typer.Typer(
    name="presets",
    help="List the bundled model presets, or show one.\n\n\b\nExamples:\n  kvcalc presets\n"
    "  kvcalc presets show llama-3.1-8b\n  kvcalc presets --json",
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,
    add_completion=False,
)

PresetsJsonOpt = Annotated[bool, typer.Option("--json", help="Print plain JSON.")]


@presets_app.callback()
def presets(ctx: typer.Context, as_json: PresetsJsonOpt = False) -> None:
    """List the bundled presets: name, family, layers, KV heads, head dim, attention kind, and
    KV bytes per token at bf16."""
    if ctx.invoked_subcommand is not None:
        return
    from kvcalc import api
    from kvcalc.views.json import preset_row

    rows = [preset_row(s.preset, s.spec, s.bf16_bytes_per_token) for s in api.list_presets()]
    if as_json:
        print_json(rows)
        return
    from kvcalc.views.presets import presets_view

    print_view(presets_view(rows))


class PlainUsage(TyperCommand):
    """A command whose usage line writes a required argument as its help does, ``NAME``: typer
    (0.24-0.28, core.py TyperArgument.make_metavar) writes it ``{NAME}`` in the usage line only."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:  # typer's own (vendored) click Context
        pieces = super().collect_usage_pieces(ctx)
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in pieces]


@presets_app.command("show", cls=PlainUsage)
def presets_show(
    name: Annotated[
        str,
        typer.Argument(metavar="NAME", autocompletion=complete_model, help="Preset name or alias (case-insensitive)."),
    ],
    as_json: PresetsJsonOpt = False,
) -> None:
    """Show one preset: where it came from, its derived geometry and its config fields."""
    from kvcalc import api
    from kvcalc.views.json import preset_row

    found = api.show_preset(name)
    row = preset_row(found.preset, found.spec, found.bf16_bytes_per_token)
    data = {**row, "config": found.preset.config, "notes": list(found.spec.notes)}
    if as_json:
        print_json(data)
        return
    from kvcalc.views.presets import preset_show_view

    print_view(preset_show_view(data, found.preset.config))
