"""docs/cli-reference.md is the real ``--help`` of every command, and no flag goes undocumented."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "cli-reference.md"
REGENERATE = "run python scripts/cli_reference.py"


cli_reference = load_script("cli_reference")
COMMANDS: list[tuple[tuple[str, ...], Any]] = list(cli_reference.walk())
IDS = [cli_reference.title(path) for path, _ in COMMANDS]


def _committed_sections() -> dict[str, str]:
    """Heading -> the text of its section in the committed file."""
    text = REFERENCE.read_text(encoding="utf-8")
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {heading.strip(): body for heading, body in zip(parts[1::2], parts[2::2], strict=True)}


def test_the_reference_is_up_to_date() -> None:
    assert REFERENCE.is_file(), f"docs/cli-reference.md is missing: {REGENERATE}"
    committed = REFERENCE.read_text(encoding="utf-8")
    assert committed == cli_reference.render(), f"docs/cli-reference.md is stale: {REGENERATE}"


def test_the_walk_finds_every_command() -> None:
    expected = {"kvcalc", "kvcalc estimate", "kvcalc compare", "kvcalc fit", "kvcalc probe", "kvcalc presets"}
    assert expected | {"kvcalc presets show"} <= set(IDS)
    assert len(IDS) == len(set(IDS))


def test_the_header_says_it_is_generated() -> None:
    head = REFERENCE.read_text(encoding="utf-8").split("\n## ", 1)[0]
    assert "python scripts/cli_reference.py" in head
    assert "must not be edited by hand" in head


def test_every_command_has_a_section() -> None:
    # Each command's --help, then each engine's knobs (kvcalc engines NAME).
    from kvcalc.engines import REGISTRY

    engines = [cli_reference.title(("engines", name)) for name in REGISTRY]
    assert list(_committed_sections()) == [*IDS, *engines], REGENERATE


def _documented(flag: str, section: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", section) is not None


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_no_undocumented_flag(path: tuple[str, ...], command: Any) -> None:
    section = _committed_sections().get(cli_reference.title(path), "")
    ctx = cli_reference.context(command, path)
    missing = []
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False):
            continue
        if param.param_type_name == "option":
            names = [*param.opts, *param.secondary_opts]
        else:  # an argument: documented by its metavar (MODEL, NAME)
            names = [param.human_readable_name]
        missing += [name for name in names if not _documented(name, section)]
    assert not missing, f"{cli_reference.title(path)}: {missing} not in docs/cli-reference.md ({REGENERATE})"


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_every_command_has_a_help_line(path: tuple[str, ...], command: Any) -> None:
    assert (command.help or "").strip(), f"{cli_reference.title(path)} has no help text"
    assert command.get_short_help_str(limit=100).strip()
    # In the rendered help: a non-blank description line between "Usage:" and the first heading.
    lines = cli_reference.help_text(path).splitlines()
    assert lines[0].startswith(f"Usage: {cli_reference.title(path)}")
    description = []
    for line in lines[1:]:
        if re.match(r"^\S.*:$", line):  # "Arguments:", "Options:", "Commands:"
            break
        description.append(line.strip())
    assert any(description), f"{cli_reference.title(path)} --help shows no description"


def test_check_mode_reports_a_stale_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stale = tmp_path / "cli-reference.md"
    stale.write_text("# out of date\n", encoding="utf-8")
    assert cli_reference.main(["--check", "--output", str(stale)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and REGENERATE in err
    stale.write_text(cli_reference.render(), encoding="utf-8")
    assert cli_reference.main(["--check", "--output", str(stale)]) == 0


def test_no_machine_paths_in_the_repository() -> None:
    # A path on one machine (/tmp/..., /root/..., /home/...) means nothing to a reader elsewhere.
    root = Path(__file__).resolve().parents[1]
    pattern = re.compile(r"(?<![\w.])/(?:tmp|root|home|work|Users)/[\w.-]+")
    found = []
    for folder in ("model_presets", "src", "README.md", "docs"):
        paths = [root / folder] if (root / folder).is_file() else sorted((root / folder).rglob("*"))
        for path in paths:
            if path.is_file() and path.suffix in (".yaml", ".py", ".md", ".json"):
                found += [f"{path.name}: {m}" for m in pattern.findall(path.read_text(errors="replace"))]
    assert found == []
