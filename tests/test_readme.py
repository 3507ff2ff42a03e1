"""Docs stay true by construction: every ``$ kvcalc ...`` example in the README is re-run."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
EXAMPLE_RE = re.compile(r"```console\n\$ kvcalc (?P<args>[^\n]*)\n(?P<output>.*?)```", re.S)
EXAMPLES = [(m["args"], m["output"]) for m in EXAMPLE_RE.finditer(README.read_text())]


def test_readme_has_examples() -> None:
    assert len(EXAMPLES) >= 6


# Run-to-run details of probe output: timings and library versions.
_VOLATILE = [
    (re.compile(r"^time \(shrunk\).*$"), "time (shrunk) ..."),
    (re.compile(r"transformers [0-9][\w.+]*, torch [0-9][\w.+]*"), "transformers X, torch Y"),
]


def _stable(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        stable = line
        for pattern, replacement in _VOLATILE:
            stable = pattern.sub(replacement, stable)
        out.append(stable)
    return out


@pytest.mark.parametrize(("args", "expected"), EXAMPLES, ids=[a for a, _ in EXAMPLES])
def test_readme_example_output(args: str, expected: str, run_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    if args.startswith("probe"):
        pytest.importorskip("transformers", reason="probe examples need the probe extra")
    monkeypatch.setenv("COLUMNS", "80")  # the width the README is rendered at (scripts/readme_examples.py)
    monkeypatch.chdir(README.parent)  # examples name files relative to the repository root
    result = run_cli(*shlex.split(args))
    assert result.exit_code == 0, result.stderr
    got = [line.rstrip() for line in result.stdout.rstrip().splitlines()]
    assert _stable(got) == _stable(expected.rstrip().splitlines())


def test_readme_starts_with_the_two_setup_commands() -> None:
    blocks = re.findall(r"```bash\n(.*?)\n```", README.read_text(), re.S)
    assert "pip install . && kvcalc estimate" in blocks[0]
    assert "pip install torch==2.13.0" in blocks[1] and "pytest" in blocks[1]


def test_readme_python_api_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert code is not None
    monkeypatch.chdir(README.parent)  # the example reads a fixture by relative path
    monkeypatch.setattr("builtins.print", lambda *args, **kwargs: None)
    exec(compile(code[1], "README.md", "exec"), {})
