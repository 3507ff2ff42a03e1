"""estimate's and compare's service (kvcalc.api._estimate): values capped, flags that would change
nothing refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["estimate", "--layers", "99999999", "--head-dim", "128", "--kv-heads", "8"], "layers"),
        (["estimate", "--layers", "32", "--head-dim", "99999999", "--kv-heads", "8"], "--head-dim"),
        (["estimate", "--layers", "32", "--head-dim", "128", "--kv-heads", "99999999"], "--kv-heads"),
        (["estimate", "llama-3.1-8b", "--dp", "1000000", "--batch", "1000000"], "dp"),
        (["estimate", "llama-3.1-8b", "--tp", "1000000"], "tp"),
        (["compare", "llama-3.1-8b", "--latent-dim", "-5"], "latent dim"),
        (["compare", "llama-3.1-8b", "--latent-dim", "512", "--rope-dim", "-600"], "rope dim"),
        (["compare", "llama-3.1-8b", "--latent-dim", "0", "--baseline", "MLA"], "latent dim"),
        (["compare", "--layers", "32", "--heads", "32", "--head-dim", "99999999"], "--head-dim"),
    ],
)
def test_hand_values_are_capped(run_cli, argv: list[str], needle: str) -> None:
    assert_one_line_error(run_cli(*argv), needle)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["estimate", "llama-3.1-8b", "--encoder-tokens", "1500"], "--encoder-tokens"),
        (["estimate", "llama-3.1-8b", "--explain", "--json"], "--explain"),
        (["compare", "llama-3.1-8b", "--chart", "--json"], "--chart"),
        (["compare", "llama-3.1-8b", "mistral-7b-v0.1", "llama-3.1-8b"], "more than once"),
        (["compare", "llama-3.1-8b", "Llama-3.1-8B"], "more than once"),
        (["compare", "llama-3.1-8b", "llama-3.1-8b-instruct"], "more than once"),
    ],
)
def test_ignored_flags_are_refused(run_cli, argv: list[str], needle: str) -> None:
    assert_one_line_error(run_cli(*argv), needle)


@pytest.mark.parametrize("flag", [["--tokens", "4k"], ["--prompt", "10"], ["--batch", "4"], ["--explain"]])
def test_lengths_refuses_flags_it_would_ignore(run_cli, tmp_path: Path, flag: list[str]) -> None:
    path = tmp_path / "mix.csv"
    path.write_text("prompt,output\n10,2\n")
    assert_one_line_error(run_cli("estimate", "llama-3.1-8b", "--lengths", str(path), *flag), flag[0])
