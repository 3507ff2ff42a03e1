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
NOT_COMMANDS = {"__init__", "__main__", "app", "commands", "knobs", "options"}


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
    assert result.stderr.strip() == "kvcalc: error: No such command 'estimat'. Did you mean 'estimate'?"
    assert "Did you mean 'presets', 'probe'?" in run_cli("prset").stderr


@pytest.mark.parametrize(
    ("words", "expected"),
    [("kvcalc ", ["compare", "estimate", "fit", "probe", "speed", "presets", "engines"]),
     ("kvcalc pr", ["probe", "presets"]), ("kvcalc engines v", ["vllm"]),
     ("kvcalc presets s", ["show"]), ("kvcalc estimate --eng", ["--engine"]),
     ("kvcalc estimate x --engine vl", ["vllm"])],
)  # fmt: skip
def test_shell_completion_reaches_every_command(words: str, expected: list[str], run_cli, monkeypatch) -> None:
    monkeypatch.setenv("_KVCALC_COMPLETE", "complete_bash")
    monkeypatch.setenv("COMP_WORDS", words)
    monkeypatch.setenv("COMP_CWORD", str(len(words.split()) - (0 if words.endswith(" ") else 1)))
    result = run_cli()
    assert result.exit_code == 0, result.stderr
    assert result.stdout.split() == expected
