"""kvcalc.charts: --plot's refusals and their exit statuses."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

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


def test_an_unwritable_plot_exits_1(run_cli, tmp_path: Path) -> None:
    result = run_cli("compare", "llama-3.1-8b", "--plot", str(tmp_path / "no" / "x.png"))
    assert result.exit_code == 1
    assert_one_line_error(result, "cannot write")


def test_ctrl_c_while_a_plot_is_written_leaves_no_file(run_cli, monkeypatch, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    def interrupted(self: Figure, out: Any, **kwargs: Any) -> None:
        out.write(b"\x89PNG half a chart")
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "savefig", interrupted)
    target = tmp_path / "x.png"
    result = run_cli("compare", "llama-3.1-8b", "--plot", str(target))
    assert result.exit_code == 130
    assert list(tmp_path.iterdir()) == []
