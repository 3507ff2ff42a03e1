"""Shared test helpers: run the real CLI entry point in-process or as a subprocess, and the
fixtures every test may ask for by name.

The other shared helpers live in tests/helpers/ (GGUF writers, the fake Hub, llama.cpp runs); its
fixtures are imported here so that pytest offers them everywhere: ``hub`` and ``ranged`` (a fake
Hub on 127.0.0.1, tests/helpers/fake_hub.py) and ``hub_env`` (an offline, pre-populated Hugging
Face cache, tests/helpers/hub_cache.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kvcalc.cli import main
from tests.helpers.fake_hub import hub, ranged  # noqa: F401  (fixtures, offered to every test)
from tests.helpers.hub_cache import hub_env  # noqa: F401  (a fixture, offered to every test)
from tests.helpers.paths import FIXTURES


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """Call ``kvcalc.cli.main(argv)`` the way the console script does; capture both streams."""
    monkeypatch.setenv("COLUMNS", "200")

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return run


def run_subprocess(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> CliResult:
    """Run ``python -m kvcalc`` in a fresh interpreter (for env vars read at import time)."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "kvcalc", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd,
        timeout=120,
        check=False,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def assert_one_line_error(result: CliResult, *needles: str) -> str:
    """The contract of every failure: one ``kvcalc: error:`` line naming the problem, no traceback,
    nothing on stdout."""
    assert result.exit_code != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("kvcalc: error: "), line
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    assert result.stdout == "", result.stdout
    return line


def fixture_config(name: str) -> dict[str, Any]:
    """A real Hugging Face config.json from tests/fixtures (see fixtures/SOURCES.md)."""
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data
