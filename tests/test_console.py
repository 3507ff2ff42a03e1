"""Output on narrow encodings (kvcalc.console): no box characters where the stream cannot show them."""

from __future__ import annotations

import pytest

from tests.conftest import run_subprocess


@pytest.mark.parametrize("encoding", ["ascii", "cp1252", "cp437", "latin-1"])
@pytest.mark.parametrize(
    "argv",
    [
        ["estimate", "gpt-oss-20b", "--tokens", "32k", "--explain"],
        ["compare", "llama-3.1-8b", "--tokens", "4k,32k", "--chart"],
        ["presets"],
        ["fit", "llama-3.1-8b", "--gpu", "h100-sxm"],
    ],
)
def test_output_encodings_without_box_characters(encoding: str, argv: list[str]) -> None:
    result = run_subprocess(*argv, env={"PYTHONIOENCODING": encoding})
    assert result.exit_code == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout.strip()
    if argv[0] == "estimate":
        # gpt-oss-20b's full layers at 32k: 12 x 2 x 32,768 x 8 x 64 x 2 B = 805,306,368 bytes.
        assert "805,306,368" in result.stdout
        assert "+====" in result.stdout or "┏" in result.stdout  # cp437 has heavy-less box chars only


def test_ascii_output_keeps_the_table_shape() -> None:
    result = run_subprocess("estimate", "llama-3.1-8b", "--tokens", "2048", env={"PYTHONIOENCODING": "ascii"})
    lines = result.stdout.splitlines()
    assert lines[1].startswith("+=") and lines[2].startswith("| layers")
    assert len({len(line) for line in lines[1:6]}) == 1  # every table line the same width
    assert "268,435,456" in result.stdout  # the seed's worked example
