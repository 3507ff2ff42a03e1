"""The ``kvcalc`` typer app and its entry point (``main``): every expected failure becomes one line
on stderr and the right exit status; ``KVCALC_DEBUG=1`` shows tracebacks. The commands are in
``kvcalc.cli.commands``, whose group imports a command's module only when it runs."""

# No `from __future__ import annotations` in the CLI: typer would have to eval() every string
# annotation at start-up (~5 ms, benchmarks/startup.py); real annotations are read directly.
import os
import re
import sys
from typing import Annotated, NoReturn

import typer

from kvcalc import __version__
from kvcalc.cli.commands import CommandGroup
from kvcalc.errors import KvcalcError, UsageError

app = typer.Typer(
    name="kvcalc",
    cls=CommandGroup,
    help="""How much memory the KV cache of a transformer LLM takes, why, and whether it fits.

\b
Examples:
  kvcalc estimate llama-3.1-8b --tokens 32k --batch 8
  kvcalc fit qwen3-32b --gpu h100 --tokens 32k --engine vllm
  kvcalc compare llama-3.1-8b mistral-7b-v0.1 --tokens 4k,32k
  kvcalc speed llama-3.1-8b --gpu h100-sxm
  kvcalc presets

'kvcalc COMMAND --help' shows a command's options and examples; 'kvcalc gpus' lists the GPUs.""",
    context_settings={"help_option_names": ["-h", "--help"]},
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        from kvcalc.console import out  # not kvcalc.cli.options: it loads the engines

        out(f"kvcalc {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
    no_color: Annotated[
        bool,
        typer.Option(
            "--no-color",
            help="No colour, even on a terminal (as NO_COLOR does). Output that is not a terminal never has any.",
        ),
    ] = False,
) -> None:
    """How much memory the KV cache of a transformer LLM takes, why, and whether it fits."""
    from kvcalc.console import set_no_color

    set_no_color(no_color)


# API parameters whose flag is not the parameter name with dashes (an engine knob's flag is its
# Knob's: kvcalc.engines.every_knob).
# The API's names of positional arguments (MODEL, a preset's, a GPU's or an engine's NAME) and of
# flags spelt otherwise.
_FLAG_OF = {"models": "MODEL", "model": "MODEL", "name": "NAME", "lengths": "--lengths",
            "context_cap": "--no-context-cap", "kv_dtypes": "--kv-dtype"}  # fmt: skip


def as_flag(param: str) -> str:
    """The command-line spelling of an API parameter: ``kv_dtype`` -> ``--kv-dtype``."""
    if param in _FLAG_OF:
        return _FLAG_OF[param]
    from kvcalc.engines import every_knob  # only on an error: --help and --version never load the engines

    knob = every_knob().get(param)
    return knob.flag if knob is not None else "--" + param.replace("_", "-")


def usage_message(exc: KvcalcError) -> str:
    """A core error as the CLI says it: the parameter it names, written as its flag."""
    message = str(exc)
    for param in exc.params:
        # The first whole-word mention of the parameter becomes the flag (the API says "tokens").
        pattern = re.compile(rf"(?<![\w-]){re.escape(param)}(?![\w-])")
        message = pattern.sub(as_flag(param), message, count=1)
    return message


_LONG_WORD = re.compile(r"\S{81,}")
_MAX_MESSAGE = 400


def shorten(message: str) -> str:
    """An error message fit for one line: a 401-digit number or a megabyte string echoed from the
    input is cut to its ends, and the whole line to a few hundred characters."""

    def cut(match: re.Match[str]) -> str:
        word = match.group(0)
        return f"{word[:32]}...({len(word):,} characters)...{word[-12:]}"

    short = " ".join(_LONG_WORD.sub(cut, message).split())
    if len(short) > _MAX_MESSAGE:
        short = f"{short[: _MAX_MESSAGE - 40]}... ({len(short):,} characters in all)"
    return short


def _fail(message: str, code: int) -> NoReturn:
    from kvcalc.console import clean, err

    err(f"kvcalc: error: {clean(shorten(message))}")
    raise SystemExit(code)


# Root options a user may also write after the command (kvcalc estimate MODEL --no-color): they
# take no value and no command has a flag of the same name.
_ROOT_FLAGS = ("--no-color",)


def _root_flags_first(argv: list[str]) -> list[str]:
    """The arguments with root flags moved before the command, where click reads them; nothing
    after a ``--`` is touched."""
    end = argv.index("--") if "--" in argv else len(argv)
    moved = [a for a in argv[:end] if a in _ROOT_FLAGS]
    return [*dict.fromkeys(moved), *(a for a in argv[:end] if a not in _ROOT_FLAGS), *argv[end:]]


def _release_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass


def _emit_help(text: str) -> None:
    from kvcalc.console import OutputError, out

    try:
        out(text.rstrip("\n"))
    except OutputError:
        _release_stdout()


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turning every expected failure into one line on stderr.

    Exit status: 0 success, 1 a failure or a failed check (a probe mismatch), 2 a usage error,
    130 interrupted (Ctrl-C).
    """
    from kvcalc.console import OutputError

    debug = os.environ.get("KVCALC_DEBUG") == "1"
    argv = _root_flags_first(sys.argv[1:] if argv is None else list(argv))
    line = sys.modules.get("kvcalc.cli.engine_line")
    if line is not None:  # an earlier call in this process read an engine command line
        line.LINE_WARNINGS.clear()
        line.CHECK_LINE.clear()
    try:
        if "--" in argv:
            from kvcalc.cli.engine_line import translate

            argv = translate(argv, app)
        # standalone_mode=False: typer *returns* the code of a typer.Exit (and turns Ctrl-C into
        # Exit(130)) instead of raising it, so the return value is the exit status.
        code = app(args=argv, prog_name="kvcalc", standalone_mode=False)
    except typer.Exit as exc:
        code = exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        code = 130
    except OutputError as exc:
        _release_stdout()
        if exc.broken_pipe:
            raise SystemExit(1) from None
        _fail(str(exc), 1)
    except UsageError as exc:
        if debug:
            raise
        _fail(usage_message(exc), exc.exit_code)
    except KvcalcError as exc:
        if debug:
            raise
        _fail(usage_message(exc), exc.exit_code)
    except RecursionError:
        if debug:
            raise
        _fail("input is nested too deeply to read", 1)
    except Exception as exc:
        # Click's usage errors (bad option, missing argument); typer may vendor its own click,
        # so they are recognised by shape rather than by class.
        format_message = getattr(exc, "format_message", None)
        if debug or format_message is None:
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":
            ctx = getattr(exc, "ctx", None)
            _emit_help(ctx.get_help() if ctx is not None else str(format_message()))
            raise SystemExit(0) from None
        _fail(" ".join(str(format_message()).split()), int(getattr(exc, "exit_code", 2)))
    if code == 130:
        from kvcalc.console import err

        err("kvcalc: aborted")
        raise SystemExit(130)
    if isinstance(code, int) and code:
        raise SystemExit(code)
