"""The commands, registered explicitly in one table: each name with the module and function behind
it and its one-line help. The app's group (``CommandGroup``) lists the commands from the table and
imports a command's module only when that command runs, so ``kvcalc estimate`` loads no other
command's code (tests/test_startup.py) and ``kvcalc --help`` loads none.

A new command is a module here defining a plain function (its flags and docstring, nothing of the
app) and one row in ``COMMANDS``; tests/cli/test_commands.py checks that the row's help is the
function's own, so the two cannot drift.
"""

import re
from difflib import get_close_matches
from gettext import gettext
from importlib import import_module
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

# name -> (module in kvcalc.cli, its command function or its typer.Typer of sub-commands, short
# help: the first paragraph of the command's help on one line), in the order --help lists them.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "compare": ("compare", "compare",
                "Compare MHA / GQA / MQA / MLA variants of one model, or several models, side by side."),
    "estimate": ("estimate", "estimate",
                 "Estimate the KV cache of MODEL for a workload of B sequences of T tokens."),
    "fit": ("fit", "fit", "How many tokens, concurrent requests and how long a context fit on these GPUs, and "
            "whether the asked workload fits."),
    "probe": ("probe", "probe",
              "Measure a real KV cache with PyTorch (or llama.cpp) and cross-check the estimate byte for byte."),
    "speed": ("speed", "speed",
              "How fast: prefill (TTFT) and decode (TPOT) bounds from bytes and FLOPs, and estimates beside them."),
    "simulate": ("simulate", "simulate",
                 "A server under load: each engine's scheduler over the exact KV pool, step by step, and the "
                 "latency percentiles and throughput it gives."),
    "check": ("check", "check",
              "Hold a running server, or its start-up log, against kvcalc's estimate, and explain the gap."),
    "presets": ("presets", "presets_app", "List the bundled model presets, or show one."),
    "gpus": ("gpus", "gpus", "List the GPU presets --gpu takes, or show one with its sources."),
    "engines": ("engines", "engines", "List the engines kvcalc models, or show one engine's knobs."),
}  # fmt: skip


# The help panels every command shares, in the order --help shows them: the first three, then a
# command's own (each engine's knobs), then the last (output), then options no panel names (--help).
PANELS = ("Model and workload", "Hardware and layout", "Engine and formats", "Output")
# A range click adds to an option's help ("[default: 1; x>=1]"): the flag refuses a value out of
# it in one line, so --help leaves it out.
_RANGE = re.compile(r"(?:; )?x?[<>]=?-?\d+(?:\.\d+)?(?:<=?x)?(?=[;\]])|(?:; )?-?\d+(?:\.\d+)?<=?x<=?-?\d+(?:\.\d+)?")


def _without_range(help_text: str) -> str:
    text = _RANGE.sub("", help_text)
    return text.replace("[; ", "[").replace("  []", "").rstrip()


class PanelCommand(TyperCommand):
    """A command whose --help groups its options under their ``rich_help_panel`` titles in plain
    text (typer draws panels only with rich, which the CLI's help does without), aligned in one
    column: ``PANELS``' first three, the command's others in declaration order, then Output."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        args: list[tuple[str, str]] = []
        panels: dict[str, list[tuple[str, str]]] = {title: [] for title in PANELS[:-1]}
        loose: list[tuple[str, str]] = []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            record = (record[0], _without_range(record[1]))
            if param.param_type_name == "argument":
                args.append(record)
                continue
            title = getattr(param, "rich_help_panel", None)
            (loose if title is None else panels.setdefault(title, [])).append(record)
        output = panels.pop(PANELS[-1], [])
        shared = [(title, rows) for title, rows in panels.items() if title in PANELS]
        engines = [(title, rows) for title, rows in panels.items() if title not in PANELS]
        shown, overview = _engine_panels(engines, ctx.meta.get(ASKED_ENGINE))
        sections = [(gettext("Arguments"), args), *shared, *shown, (PANELS[-1], output), ("Options", loose)]
        width = min(_TERM_MAX, max(len(term) for _, rows in sections for term, _ in rows))
        for title, rows in sections:
            if rows:
                with formatter.section(title):
                    formatter.write_dl([(term.ljust(width), text) for term, text in rows], col_max=_TERM_MAX)
            if title == PANELS[-2] and overview:
                with formatter.section(_OVERVIEW):
                    formatter.write_dl(overview, col_max=_TERM_MAX)


# Where the root group leaves the engine a command line names (--engine NAME), for --help.
ASKED_ENGINE = "kvcalc.asked_engine"
_OVERVIEW = "Engine knobs (each engine's help: --engine NAME --help)"
_OVERVIEW_WIDTH = 54  # the flags' column at 80 columns, each flag kept whole


def _engine_panels(
    engines: list[tuple[str, list[tuple[str, str]]]], asked: str | None
) -> tuple[list[tuple[str, list[tuple[str, str]]]], list[tuple[str, str]]]:
    """Each engine's own panel of knobs is shown in full only when the command line names that
    engine (``--engine vllm --help``): a help page listing every engine's knobs in full would be
    too long to read. Otherwise one line per engine names its flags (the overview)."""
    if not engines:
        return [], []
    if asked is not None:
        from kvcalc.engines import engine_entry
        from kvcalc.errors import UsageError

        try:
            panel = engine_entry(asked).panel
        except UsageError:  # an unknown engine: its refusal comes when the command runs
            panel = None
        return [(title, rows) for title, rows in engines if panel and panel in title], []
    flags: dict[str, list[str]] = {}
    for title, records in engines:
        for part in title.split(" and "):
            name = part.partition(" (")[0]
            flags.setdefault(name, []).extend(term.split()[0].rstrip(",") for term, _ in records)
    rows: list[tuple[str, str]] = []
    for name, found in flags.items():
        lines = [""]
        for flag in dict.fromkeys(found):
            if lines[-1] and len(lines[-1]) + len(flag) + 2 > _OVERVIEW_WIDTH:
                lines[-1] += ","
                lines.append(flag)
            else:
                lines[-1] = f"{lines[-1]}, {flag}" if lines[-1] else flag
        rows += [(name if i == 0 else "", text) for i, text in enumerate(lines)]
    return [], rows


_TERM_MAX = 22  # a longer flag with its metavar stands on its own line, its help under it


def build_command(name: str, *, rich_markup_mode: Any = None) -> Any:
    """The click command ``kvcalc NAME`` runs, built from its function (or group) as typer builds
    any command: its module is imported here, and only here."""
    module, attribute, _ = COMMANDS[name]
    target = getattr(import_module(f"kvcalc.cli.{module}"), attribute)
    if isinstance(target, typer.Typer):
        return typer.main.get_command(target)
    # A typer app of this one command, whose click command is the command itself (typer's way to
    # build one without registering it on the root app).
    single = typer.Typer(add_completion=False, rich_markup_mode=rich_markup_mode)
    single.command(name, cls=PanelCommand)(target)
    return typer.main.get_command(single)


def _asked_engine(args: list[str]) -> str | None:
    """The engine a command line names (``--engine NAME`` or ``--engine=NAME``), read before the
    command parses it so that --help can show that engine's knobs wherever --help stands."""
    for i, arg in enumerate(args):
        if arg == "--engine" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--engine="):
            return arg.partition("=")[2]
    return None


def summary_command(name: str) -> TyperCommand:
    """A stand-in for command ``name`` holding only its short help, which click shortens to fit
    as it shortens the real command's (both keep the first paragraph's words)."""
    return TyperCommand(name, help=COMMANDS[name][2])


class CommandGroup(TyperGroup):
    """The root group: lists ``COMMANDS`` and builds a command (importing its module) when it is
    looked up, that is when it runs, shows its own --help or completes its arguments."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        # Built commands, kept apart from ``self.commands``, which stays empty: typer would build
        # its "Did you mean" from the few built so far (``resolve_command`` names them all).
        self._built: dict[str, Any] = {}

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return None
        if cmd_name not in self._built:
            self._built[cmd_name] = build_command(cmd_name, rich_markup_mode=self.rich_markup_mode)
        return self._built[cmd_name]

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The Commands section of --help, as typer writes it, from the table's short help (typer
        would build every command to ask it)."""
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [(name, summary_command(name).get_short_help_str(limit)) for name in COMMANDS]
        with formatter.section(gettext("Commands")):
            formatter.write_dl(rows)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        ctx.meta[ASKED_ENGINE] = _asked_engine(args)
        try:
            return super().resolve_command(ctx, args)
        except Exception as exc:
            # typer's suggestion, from every registered name. Its usage error is recognised by
            # shape rather than by class: typer may vendor its own click.
            message = getattr(exc, "message", None)
            if self.suggest_commands and args and isinstance(message, str):
                matches = get_close_matches(args[0], list(COMMANDS))
                if matches:
                    suggestions = ", ".join(f"{m!r}" for m in matches)
                    setattr(exc, "message", f"{message.rstrip('.')}. Did you mean {suggestions}?")  # noqa: B010 (typed Exception)
            raise
