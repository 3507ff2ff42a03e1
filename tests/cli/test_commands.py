"""The table of commands (kvcalc.cli.commands.COMMANDS): each row names a real command, its short
help is that command's own, and every command module is in it. The group lists and describes the
commands from the table without importing them, so the table must not drift from the code."""

from __future__ import annotations

import inspect
from importlib import import_module
from pathlib import Path

import pytest
import typer

from kvcalc.cli.commands import COMMANDS, build_command, summary_command

CLI = Path(__file__).resolve().parents[2] / "src" / "kvcalc" / "cli"
NOT_COMMANDS = {"__init__", "__main__", "app", "commands", "engine_line", "knobs", "options"}


def _first_paragraph(text: str) -> str:
    return " ".join(text.split("\n\n", maxsplit=1)[0].split())


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_short_help_is_the_commands_own(name: str) -> None:
    module, attribute, short_help = COMMANDS[name]
    target = getattr(import_module(f"kvcalc.cli.{module}"), attribute)
    # A group's help is the one its Typer is given; a command's, its docstring.
    own = target.info.help if isinstance(target, typer.Typer) else inspect.getdoc(target)
    assert isinstance(own, str) and own
    assert short_help == _first_paragraph(own), f"COMMANDS[{name!r}] help differs from the command's own"


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_stand_in_shortens_as_the_command_does(name: str) -> None:
    # --help shortens the stand-in's text to fit the terminal; the command's would read the same
    # at every width.
    command = build_command(name)
    assert command.name == name
    stand_in = summary_command(name)
    for limit in (20, 45, 58, 70, 120, 500):
        assert stand_in.get_short_help_str(limit) == command.get_short_help_str(limit)


def test_every_command_module_is_registered() -> None:
    modules = {path.stem for path in CLI.glob("*.py")} - NOT_COMMANDS
    assert modules == {module for module, _, _ in COMMANDS.values()}


def test_help_lists_the_table_in_order(run_cli) -> None:
    result = run_cli("--help")
    assert result.exit_code == 0, result.stderr
    listed = result.stdout.split("Commands:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in listed if line.strip()] == list(COMMANDS)


def test_a_typo_suggests_the_registered_names(run_cli) -> None:
    result = run_cli("estimat", "llama-3.1-8b")
    assert result.exit_code == 2
    assert result.stderr.strip() == "kvcalc: error: No such command 'estimat'. Did you mean 'estimate', 'simulate'?"
    assert "Did you mean 'presets', 'probe'?" in run_cli("prset").stderr


@pytest.mark.parametrize(
    ("words", "expected"),
    [("kvcalc ", ["compare", "estimate", "fit", "probe", "speed", "simulate", "check", "presets", "gpus", "engines"]),
     ("kvcalc pr", ["probe", "presets"]), ("kvcalc engines v", ["vllm"]),
     ("kvcalc presets s", ["show"]), ("kvcalc estimate --eng", ["--engine"]),
     ("kvcalc estimate x --engine vl", ["vllm"]), ("kvcalc gpus h2", ["h200", "h200-141gb"])],
)  # fmt: skip
def test_shell_completion_reaches_every_command(words: str, expected: list[str], run_cli, monkeypatch) -> None:
    monkeypatch.setenv("_KVCALC_COMPLETE", "complete_bash")
    monkeypatch.setenv("COMP_WORDS", words)
    monkeypatch.setenv("COMP_CWORD", str(len(words.split()) - (0 if words.endswith(" ") else 1)))
    result = run_cli()
    assert result.exit_code == 0, result.stderr
    assert result.stdout.split() == expected


# --- --help a learner can read: examples first, options in panels, 80 columns ------------------------

from kvcalc.cli.commands import PANELS, _without_range  # noqa: E402

HELPS = [[], *([name] for name in COMMANDS)]


def _help(run_cli, monkeypatch, argv: list[str]) -> list[str]:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("COLUMNS", "80")
    result = run_cli(*argv, "--help")
    assert result.exit_code == 0, result.stderr
    return result.stdout.splitlines()


def _examples(lines: list[str]) -> list[str]:
    start = lines.index("  Examples:") + 1
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("    kvcalc"))
    return [line.strip() for line in lines[start:end]]


def _own_panels(lines: list[str]) -> int:
    """Lines in panels other than the shared ones (each engine's knobs, which its Options writes)."""
    count, own = 0, False
    for line in lines:
        if line and not line.startswith(" ") and line.endswith(":"):
            own = line[:-1] not in (*PANELS, "Arguments", "Options", "Commands", "Usage")
        count += own
    return count


@pytest.mark.parametrize("argv", HELPS, ids=lambda a: " ".join(a) or "kvcalc")
def test_help_shows_examples_first_and_fits(run_cli, monkeypatch, argv: list[str]) -> None:
    lines = _help(run_cli, monkeypatch, argv)
    examples = _examples(lines)
    assert 3 <= len(examples) <= 5, examples
    assert all(e.startswith(f"kvcalc {' '.join(argv)}".rstrip()) for e in examples), examples
    sections = [i for i, line in enumerate(lines) if line.endswith(":") and not line.startswith(" ")]
    assert lines.index("  Examples:") < sections[0]
    assert max(len(line) for line in lines) <= 80
    # At most 100 lines whole (issue 37: fit's was 206): the engines' knobs are one line each,
    # an engine's own panel only when --engine names it (test_an_engine_named_shows_its_panel).
    assert len(lines) <= 100, len(lines)


@pytest.mark.parametrize("argv", [a for a in HELPS if a and a[0] in ("estimate", "compare", "fit", "speed", "probe")],
                         ids=" ".join)  # fmt: skip
def test_an_engine_named_shows_its_panel(run_cli, monkeypatch, argv: list[str]) -> None:
    from kvcalc.cli.knobs import command_knobs
    from kvcalc.engines import REGISTRY

    # The knobs this command takes: fit's also size its runtime; simulate's schedulers' own are simulate's alone.
    taken = {knob.name for knob in command_knobs(runtime=argv[0] == "fit")}
    for name, plugin in REGISTRY.items():
        lines = _help(run_cli, monkeypatch, [*argv, "--engine", name])
        titles = [line for line in lines if line.endswith(":") and not line.startswith(" ")]
        # the named engine's knobs in full (if it has any), no other engine's, no overview
        assert all(
            plugin.panel and plugin.panel in t for t in titles if t[:-1] not in (*PANELS, "Arguments", "Options")
        )
        # probe shows the knobs of the engines it runs (an engine with no probe of its own is refused)
        shown = any(k.name in taken for k in plugin.options.knobs()) and (argv[0] != "probe" or plugin.prober)
        assert not shown or any(plugin.panel in t for t in titles), name
        assert len(lines) <= 110, (name, len(lines))


@pytest.mark.parametrize("name", [n for n in COMMANDS if n != "presets"])
def test_every_option_has_a_panel_in_order(run_cli, monkeypatch, name: str) -> None:
    lines = _help(run_cli, monkeypatch, [name])
    titles = [line[:-1] for line in lines if line.endswith(":") and not line.startswith(" ")]
    assert titles[0] == "Arguments" and titles[-1] == "Options"
    shared = [t for t in titles if t in PANELS]
    assert shared == [p for p in PANELS if p in shared]  # the shared ones in their order
    assert shared[-1] == PANELS[-1] == titles[-2]  # Output last, before -h/--help alone
    assert lines[-1].strip().startswith("-h, --help") and lines[-2] == "Options:"


@pytest.mark.parametrize(
    "argv", [a for a in HELPS if a not in (["probe"], ["check"])], ids=lambda a: " ".join(a) or "kvcalc"
)
def test_every_example_runs(run_cli, monkeypatch, argv: list[str]) -> None:
    import shlex

    for example in _examples(_help(run_cli, monkeypatch, argv)):
        result = run_cli(*shlex.split(example)[1:])
        assert result.exit_code == 0, f"{example}: {result.stderr}"


def test_probe_examples_parse(run_cli, monkeypatch) -> None:
    """The probe's examples run real engines (the probe extras); --print-request builds the
    request without running one, so each example's flags are checked here."""
    import shlex

    for example in _examples(_help(run_cli, monkeypatch, ["probe"])):
        args = shlex.split(example.split(">")[0])[1:]
        if "--engine" in args:
            continue  # the real llama.cpp probe takes no --print-request
        result = run_cli(
            *[a for a in args if a != "--json"], *(() if "--print-request" in args else ("--print-request",))
        )
        assert result.exit_code == 0, f"{example}: {result.stderr}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("Tensor ranks.  [default: 1; x>=1]", "Tensor ranks.  [default: 1]"), ("By hand.  [x>=1]", "By hand."),
     ("Share.  [0<=x<=1]", "Share."), ("Plain.  [default: auto]", "Plain.  [default: auto]")],
)  # fmt: skip
def test_help_leaves_out_ranges(text: str, expected: str) -> None:
    # A value out of range is refused in one line; --help need not spell the range.
    assert _without_range(text) == expected
