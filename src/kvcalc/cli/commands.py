"""The commands, registered on the app explicitly (the command modules define plain functions and
import nothing of the app), and ``main``, the entry point that runs it."""

import os
import sys

import typer

from kvcalc.cli.app import _emit_help, _fail, _release_stdout, _root_flags_first, app, usage_message
from kvcalc.cli.compare import compare
from kvcalc.cli.estimate import estimate
from kvcalc.cli.fit import fit
from kvcalc.cli.presets import presets, presets_app, presets_show
from kvcalc.cli.probe import probe
from kvcalc.cli.speed import speed
from kvcalc.errors import KvcalcError, UsageError

for command in (compare, estimate, fit, probe, speed):  # the order --help lists them in
    app.command()(command)
app.add_typer(presets_app, name="presets")

__all__ = ["compare", "estimate", "fit", "main", "presets", "presets_show", "probe", "speed"]


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turning every expected failure into one line on stderr.

    Exit status: 0 success, 1 a failure or a failed check (a probe mismatch), 2 a usage error,
    130 interrupted (Ctrl-C).
    """
    from kvcalc.console import OutputError

    debug = os.environ.get("KVCALC_DEBUG") == "1"
    argv = _root_flags_first(sys.argv[1:] if argv is None else list(argv))
    try:
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
