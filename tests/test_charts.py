"""kvcalc.charts: --plot's refusals and their exit statuses."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error


def test_missing_matplotlib_is_an_environment_problem(run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without matplotlib, --plot exited 2 (a usage error); the flag is right and the environment
    lacks a package: exit 1, as the README's "Exit status" table says."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    result = run_cli("compare", "llama-3.1-8b", "--plot", str(tmp_path / "chart.png"))
    assert result.exit_code == 1
    assert_one_line_error(result, "--plot needs matplotlib: pip install matplotlib")
    assert not (tmp_path / "chart.png").exists()
