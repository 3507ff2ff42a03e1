"""``kvcalc engines [NAME]``: the engines kvcalc models, or one engine's knobs."""

from typing import Annotated

import typer

from kvcalc.cli.options import JsonOpt, complete_engine, print_json, print_view


def engines(
    name: Annotated[
        str | None,
        typer.Argument(
            metavar="NAME",
            autocompletion=complete_engine,
            help="An engine's name or alias: list its knobs.",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List the engines kvcalc models, or show one engine's knobs.

    \b
    Examples:
      kvcalc engines
      kvcalc engines vllm
      kvcalc engines llama.cpp --json

    Without NAME: each engine's name, aliases, the releases it models and what it keeps. With
    NAME: the engine command lines kvcalc reads as it (after '--') and writes for fit, and its
    knobs: kvcalc's flag beside the engine's own spelling, the default and what each sets.
    """
    from kvcalc import api
    from kvcalc.views.json import engine_row, knob_row

    if name is None:
        plugins = api.list_engines()
        if as_json:
            print_json([engine_row(p) for p in plugins])
            return
        from kvcalc.views.engines import engines_view

        print_view(engines_view(plugins))
        return
    plugin = api.show_engine(name)
    reads, writes = api.engine_command_lines(name)
    if as_json:
        print_json({**engine_row(plugin), "knobs": [knob_row(k) for k in plugin.options.knobs()],
                    "command_lines": {"reads": list(reads), "writes": writes}})  # fmt: skip
        return
    from kvcalc.views.engines import engine_view

    print_view(engine_view(plugin, (reads, writes)))
