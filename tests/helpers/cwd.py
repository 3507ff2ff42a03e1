"""Fixtures that run a test in its tmp_path, named ``here`` in the test modules that import one."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(name="here")
def here_relative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in tmp_path and name files relative to it: the CLI shortens any word of an error line
    over 80 characters, which a long absolute temporary path can be."""
    monkeypatch.chdir(tmp_path)
    return Path("m")


@pytest.fixture(name="here")
def here_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path
