"""Every engine's knobs as a command's flags, built from the engines' plugins (their ``Knob``
records: flag, help, bounds): ``@engine_knobs()`` adds them to a command's signature, each in the help
panel of its engine, and hands them to the command as one mapping (``knobs``), ready for
``Serving(options=...)``. A new engine's knobs reach every command that takes them with no edit here."""

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any

import typer

from kvcalc.engines import REGISTRY, Knob

# Appended to the help of every flag that takes a SIZE (units.parse_size).
SIZE_HELP = " SIZE: 80GB (80 x 10^9 B), 80GiB (80 x 2^30 B), or bytes (80B)."


def command_knobs(*, runtime: bool, simulate: bool = False) -> dict[Knob, str]:
    """The knobs a command takes (``runtime``: also those that only size fit's runtime, vLLM's
    --max-num-seqs; ``simulate``: also those only simulate's schedulers read), each once, with its
    help panel: its engine's, or for a knob several engines share (vLLM's --block-size, SGLang's
    --page-size) one naming them all."""
    knobs: dict[str, Knob] = {}
    panels: dict[str, list[str]] = {}
    for plugin in REGISTRY.values():
        for knob in plugin.options.knobs():
            if knob.simulate_only and not simulate:
                continue
            if knob.sizes_cache or runtime:
                knobs.setdefault(knob.name, knob)
                title = plugin.panel or f"{plugin.name} (--engine {plugin.name})"
                if title not in panels.setdefault(knob.name, []):
                    panels[knob.name].append(title)
    return {knob: " and ".join(panels[name]) for name, knob in knobs.items()}


def knob_annotation(knob: Knob, panel: str | None = None) -> Any:
    """The typer annotation of one knob's flag: an int checked by click against its minimum, a
    count or a size as text (parsed when the command runs), or an on/off flag."""
    if knob.kind == "flag":
        return Annotated[bool, typer.Option(knob.flag, help=knob.help, rich_help_panel=panel)]
    if knob.kind == "int":
        option = typer.Option(knob.flag, metavar=knob.metavar, min=knob.minimum, help=knob.help, rich_help_panel=panel)
        return Annotated[int | None, option]
    help_text = knob.help + (SIZE_HELP if knob.kind == "size" else "")
    return Annotated[str | None, typer.Option(knob.flag, metavar=knob.metavar, help=help_text, rich_help_panel=panel)]


def knob_values(knobs: dict[str, Any]) -> dict[str, int | bool]:
    """The knobs given on the command line (neither None nor False), as the API takes them: counts
    and sizes written as text parsed (``--max-num-seqs 1k``, ``--prompt-cache-bytes 1GiB``)."""
    from kvcalc.engines import every_knob
    from kvcalc.units import parse_count, parse_size

    known = every_knob()
    given: dict[str, int | bool] = {}
    for name, value in knobs.items():
        if value is None or value is False:
            continue
        kind, flag = known[name].kind, known[name].flag
        if kind == "count":
            given[name] = parse_count(value, what=flag)
        elif kind == "size":
            given[name] = parse_size(value, what=flag)
        else:
            given[name] = value
    return given


def engine_knobs(
    *, runtime: bool = False, simulate: bool = False
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Add every engine's knobs to a command as flags (see ``command_knobs``); the command takes
    them as its ``knobs`` parameter: the ones given, parsed (``knob_values``). Typer reads the
    wrapper's ``__signature__`` and ``__annotations__``."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        signature = inspect.signature(command)
        own = [p for p in signature.parameters.values() if p.name != "knobs"]
        knobs = command_knobs(runtime=runtime, simulate=simulate)
        added = [
            inspect.Parameter(knob.name, inspect.Parameter.KEYWORD_ONLY, default=False if knob.is_flag else None,
                              annotation=knob_annotation(knob, panel))
            for knob, panel in knobs.items()
        ]  # fmt: skip
        names = [knob.name for knob in knobs]

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> None:
            given = knob_values({name: kwargs.pop(name) for name in names})
            command(**kwargs, knobs=given)

        wrapper.__signature__ = signature.replace(parameters=[*own, *added])  # type: ignore[attr-defined]
        wrapper.__annotations__ = {
            **{p.name: p.annotation for p in own},
            **{p.name: p.annotation for p in added},
            "return": None,
        }
        return wrapper

    return decorate
