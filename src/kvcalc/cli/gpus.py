"""``kvcalc gpus``: the GPU presets --gpu takes, or one with its sources."""

from typing import Annotated

import typer

from kvcalc.cli.options import JsonOpt, complete_gpu, print_json, print_view


def gpus(
    name: Annotated[
        str | None,
        typer.Argument(
            metavar="NAME", autocompletion=complete_gpu, help="One preset (a name or an alias).", show_default=False
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List the GPU presets --gpu takes, or show one with its sources.

    \b
    Examples:
      kvcalc gpus
      kvcalc gpus h100
      kvcalc gpus m4-max-64gb --json

    Memory is what the CUDA/ROCm runtime reports (a Mac: what macOS lets the GPU wire); peaks are
    dense (no 2:4 sparsity), from the vendors' datasheets. The figures live in kvcalc's gpus.yaml.
    """  # fmt: skip
    from kvcalc import api
    from kvcalc.views.json import gpu_row

    if name is not None:
        row = gpu_row(api.show_gpu(name))
        if as_json:
            print_json(row)
            return
        from kvcalc.views.gpus import gpu_show_view

        print_view(gpu_show_view(row))
        return
    rows = [gpu_row(gpu) for gpu in api.list_gpus()]
    if as_json:
        print_json(rows)
        return
    from kvcalc.views.gpus import gpus_view

    print_view(gpus_view(rows))
