"""kvcalc.inputs.weights: where a local config's weights are looked for, and an error that names
that folder whatever way MODEL named it (``.``, a relative folder, the config.json itself)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvcalc.errors import SourceError
from kvcalc.inputs.weights import weights_bytes
from tests.conftest import FIXTURES, assert_one_line_error


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder holding a real config.json and no weights."""
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(FIXTURES / "Llama-3.1-8B.json", model / "config.json")
    return model


@pytest.mark.parametrize("given", [".", "config.json", "./"])
def test_missing_weights_name_the_current_folder(folder: Path, monkeypatch: pytest.MonkeyPatch, given: str) -> None:
    monkeypatch.chdir(folder)
    with pytest.raises(SourceError) as raised:
        weights_bytes(given, spec_dtype=None)
    message = str(raised.value)
    assert f"in the folder {folder.resolve()} (the current folder):" in message, message
    assert "beside ." not in message


def test_missing_weights_name_another_folder_absolutely(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(folder.parent)
    with pytest.raises(SourceError, match=r"in the folder (.+): give --weights SIZE$") as raised:
        weights_bytes("model", spec_dtype=None)
    assert f"in the folder {folder.resolve()}: give" in str(raised.value)


def test_fit_of_the_current_folder_says_which_folder(run_cli, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(folder)
    line = assert_one_line_error(run_cli("fit", ".", "--gpu", "h100-sxm"), "no model.safetensors")
    assert f"in the folder {folder.resolve()} (the current folder)" in line and "beside ." not in line
