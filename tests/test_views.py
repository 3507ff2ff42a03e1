"""The views: tables that fit the terminal without breaking a number, ASCII where the encoding has
no box characters, colour only on a terminal, and ``--json`` without rich.

The byte counts checked are derived by hand next to them, or read from the same command's
``--json`` (whose numbers the other test files derive).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.units import format_binary, format_bytes, format_decimal, format_exact
from kvcalc.views.console import Line, Note, Screen, render
from kvcalc.views.table import Column, Grid, layout
from tests.conftest import run_subprocess

# Llama 3.1 8B, MHA variant, 2,048 tokens, bf16: 32 layers x 2 (K, V) x 32 heads x 128 dims
# x 2 bytes x 2,048 tokens.
LLAMA_MHA_2K = 32 * 2 * 32 * 128 * 2 * 2048
SWEEP = ["compare", "llama-3.1-8b", "mistral-7b-v0.1", "gpt-oss-20b", "--tokens", "4k,32k,128k"]
BOX = "┏┳┓┃┡╇┩│└┴┘━─"


def _run_at(run_cli, monkeypatch: pytest.MonkeyPatch, columns: int, *args: str) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))
    result = run_cli(*args)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def _whole(token: str, text: str) -> bool:
    """``token`` appears with no digit, comma or point glued to either side."""
    return re.search(rf"(?<![\w.,]){re.escape(token)}(?![\w.,])", text) is not None


# --- width ------------------------------------------------------------------------------------------------


def test_compare_at_80_columns_fits_and_keeps_every_number(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _run_at(run_cli, monkeypatch, 80, "compare", "llama-3.1-8b")
    assert max(map(len, text.splitlines())) <= 80, text
    assert _whole("1,073,741,824", text) and LLAMA_MHA_2K == 1_073_741_824
    data = json.loads(_run_at(run_cli, monkeypatch, 80, "compare", "llama-3.1-8b", "--json"))
    for row in data["rows"]:
        for number in (row["total_bytes"], row["per_token_bytes"], row["elements_per_token_per_layer"]):
            assert _whole(f"{number:,}", text), number
        # Sizes may wrap between binary and decimal, never inside one.
        for size in (format_binary(row["total_bytes"]), format_decimal(row["total_bytes"])):
            assert any(size in line for line in text.splitlines()), size


def test_sweep_at_80_columns_fits_and_keeps_every_number(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _run_at(run_cli, monkeypatch, 80, *SWEEP)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80, text
    data = json.loads(_run_at(run_cli, monkeypatch, 80, *SWEEP, "--json"))
    for row in data["rows"]:
        assert _whole(row["label"], text.replace("-\n", "-"))
        assert _whole(f"{row['per_token_bytes']:,}", text)
        for size in (format_binary(row["total_bytes"]), format_decimal(row["total_bytes"])):
            assert any(_whole(size, line) for line in lines), size
        assert any(_whole(f"({row['ratio']:.3g}x)", line) for line in lines), row["ratio"]
    for tokens in ("T=4,096", "T=32,768", "T=131,072"):
        assert tokens in text
    # llama-3.1-8b at 128k, bf16: 32 layers x 2 x 8 KV heads x 128 x 2 B x 131,072 = 16 GiB.
    assert 32 * 2 * 8 * 128 * 2 * 131_072 == 16 * 2**30 and _whole("16 GiB /", text)


@pytest.mark.parametrize("columns", [60, 80, 100, 120, 200])
@pytest.mark.parametrize(
    "argv",
    [
        ["compare", "llama-3.1-8b", "--kv-heads", "4", "--latent-dim", "512", "--kv-dtype", "bf16,fp8"],
        SWEEP,
        ["estimate", "qwen3-next-80b-a3b", "--tokens", "256k"],
        ["estimate", "llama-3.1-70b", "--tokens", "32k", "--tp", "8", "--engine", "vllm"],
        ["presets"],
    ],
    ids=["variants", "sweep", "hybrid", "tp", "presets"],
)
def test_tables_fit_the_width(run_cli, monkeypatch: pytest.MonkeyPatch, columns: int, argv: list[str]) -> None:
    text = _run_at(run_cli, monkeypatch, columns, *argv)
    table_lines = [line for line in text.splitlines() if line[:1] in BOX]
    assert table_lines
    assert max(map(len, table_lines)) <= columns, text
    assert all(line[-1] in BOX for line in table_lines), text  # no line cut or run on


def test_wide_output_is_one_table_a_line_per_row(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _run_at(run_cli, monkeypatch, 200, "compare", "llama-3.1-8b", "--tokens", "2048")
    lines = text.splitlines()
    assert [line[0] for line in lines[1:9]] == list("┏┃┡│││└*")
    assert lines[2].split("┃")[1:-1] == [
        " variant ", " KV heads ", " elements/token/layer ", " bytes/token ", "         bytes ",
        "               total ", "          ratio ",
    ]  # fmt: skip


def test_notes_wrap_at_the_width_with_a_hanging_indent(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _run_at(run_cli, monkeypatch, 80, "fit", "llama-3.1-8b", "--gpu", "h100-sxm")
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("note: h100-sxm memory"))
    assert lines[start + 1].startswith("      ") and max(len(line) for line in lines[start:]) <= 80
    assert "85,017,755,648" in text


# --- the table layout itself ---------------------------------------------------------------------------

_NUMBER = st.integers(0, 10**15).map(lambda n: f"{n:,}")
_LABEL = st.from_regex(r"[a-z][a-z0-9.]{0,8}(-[a-z0-9.]{1,8}){0,2}( \+ [a-z]{3,8})?", fullmatch=True)


@settings(max_examples=150, deadline=None)
@given(
    labels=st.lists(_LABEL, min_size=1, max_size=6),
    numbers=st.lists(st.lists(_NUMBER, min_size=1, max_size=6), min_size=1, max_size=6),
    width=st.integers(40, 160),
)
def test_layout_never_breaks_a_number(labels: list[str], numbers: list[list[str]], width: int) -> None:
    count = min(len(numbers[0]), *(len(r) for r in numbers))
    rows = tuple((label, *numbers[i % len(numbers)][:count]) for i, label in enumerate(labels))
    columns = (Column("model name", right=False), *(Column(f"bytes/token {i}") for i in range(count)))
    grid = Grid("title", columns, rows)
    fitted = layout(grid, width)
    text = render([grid], Screen(width=width))
    if fitted is not None:
        table = [line for line in text.splitlines() if line[:1] in BOX]
        assert max(map(len, table)) <= width
    for row in rows:
        for number in row[1:]:
            assert _whole(number, text), (number, text)


def test_render_cleans_every_text_and_colours_only_when_asked() -> None:
    grid = Grid("\x1b]0;title\x07", (Column("name", right=False), Column("bytes")), (("a\x1b[2J", "1,024"),))
    blocks = [grid, Line("result         match", "green"), Note("\x1b[31mred config text")]
    plain = render(blocks, Screen(width=80))
    assert "\x1b" not in plain and "\x07" not in plain
    assert "?]0;title?" in plain and "a?[2J" in plain and "note: ?[31mred config text" in plain
    coloured = render(blocks, Screen(width=80, colour=True))
    assert "\x1b[" in coloured and "\x1b[2J" not in coloured and "\x1b[31mred" not in coloured
    assert render([Line("x", "green")], Screen(colour=True)).startswith("\x1b[")


def test_byte_formats_live_in_units() -> None:
    n = 268_435_456  # the seed's 256 MiB
    assert format_exact(n) == "268,435,456 bytes = 256 MiB = 268.44 MB"
    assert format_exact(n, "binary") == "268,435,456 bytes = 256 MiB"
    assert format_bytes(n, "both", sep=" / ") == "256 MiB / 268.44 MB"
    assert format_bytes(n) == "256 MiB (268.44 MB)"
    assert format_bytes(512, "both", sep=" / ") == "512 B"


# --- box characters -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["ascii", "cp1252", "cp437"])
def test_ascii_box_where_the_encoding_has_no_box_characters(encoding: str) -> None:
    result = run_subprocess("compare", "llama-3.1-8b", env={"PYTHONIOENCODING": encoding, "COLUMNS": "80"})
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    table = [line for line in lines if line[:1] in "+|"]
    assert table[0].startswith("+=") and table[0].endswith("+") and set(table[0]) <= set("+=")  # heavy top
    assert set(table[-1]) <= set("+-") and all(line[-1] in "+|" for line in table)
    assert all(set(line) <= set("+=-") for line in table if line[0] == "+")  # rules: + = - only
    assert result.stdout.isascii()
    assert max(map(len, lines)) <= 80
    assert _whole("1,073,741,824", result.stdout)


# --- colour ------------------------------------------------------------------------------------------------


def _on_a_terminal(argv: list[str], env: dict[str, str]) -> str:
    """Run kvcalc with stdout on a pseudo-terminal; what it wrote there."""
    import pty

    master, slave = pty.openpty()
    full_env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    full_env |= {"COLUMNS": "100", "TERM": "xterm", **env}
    proc = subprocess.Popen([sys.executable, "-m", "kvcalc", *argv], stdout=slave, stderr=subprocess.PIPE, env=full_env)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    return b"".join(chunks).decode()


@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")
@pytest.mark.parametrize(
    ("argv", "env", "coloured"),
    [
        (["estimate", "llama-3.1-8b"], {}, True),
        (["estimate", "llama-3.1-8b"], {"NO_COLOR": "1"}, False),
        (["--no-color", "estimate", "llama-3.1-8b"], {}, False),
        (["estimate", "llama-3.1-8b"], {"TERM": "dumb"}, False),
    ],
    ids=["terminal", "NO_COLOR", "--no-color", "TERM=dumb"],
)
def test_colour_only_on_a_terminal(argv: list[str], env: dict[str, str], coloured: bool) -> None:
    text = _on_a_terminal(argv, env)
    assert "268,435,456" in text or "4,096" in text
    assert ("\x1b[" in text) is coloured, text


@pytest.mark.parametrize("env", [{}, {"FORCE_COLOR": "1"}, {"NO_COLOR": "1"}])
def test_piped_output_never_has_colour(env: dict[str, str]) -> None:
    for argv in (["estimate", "llama-3.1-8b", "--explain"], ["compare", "llama-3.1-8b", "--chart"]):
        result = run_subprocess(*argv, env=env)
        assert result.exit_code == 0 and result.stdout and "\x1b[" not in result.stdout


def test_no_color_flag_is_documented(run_cli) -> None:
    assert "--no-color" in run_cli("--help").stdout


# --- --json without rich ------------------------------------------------------------------------------------

_IMPORTS = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from kvcalc.cli import main

    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            main(json.loads(sys.argv[1]))
        except SystemExit as exc:
            assert not exc.code, exc.code
    json.loads(out.getvalue())
    print(json.dumps(sorted(m for m in sys.modules if m == "rich" or m.startswith("rich."))))
    """
)


@pytest.mark.parametrize(
    "argv",
    [
        ["estimate", "llama-3.1-8b", "--tokens", "32k", "--json"],
        ["compare", "llama-3.1-8b", "mistral-7b-v0.1", "--tokens", "4k,32k", "--json"],
        ["fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--json"],
        ["presets", "--json"],
    ],
    ids=["estimate", "compare", "fit", "presets"],
)
def test_json_imports_no_rich(argv: list[str], tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORTS, json.dumps(argv)],
        capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_json_modules_import_no_rich_even_lazily() -> None:
    import kvcalc.console
    import kvcalc.views.json as json_view
    from kvcalc.views import labels

    for module in (json_view, labels, kvcalc.console):
        tree = ast.parse(Path(module.__file__ or "").read_text(encoding="utf-8"))
        imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
        imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        assert not [name for name in imported if name.split(".")[0] == "rich"], module.__name__
