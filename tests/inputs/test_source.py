"""Where MODEL is read from (kvcalc.inputs.source)."""

from __future__ import annotations

import json
from pathlib import Path

from kvcalc import api
from tests.conftest import fixture_config


def test_a_local_folder_that_shadows_a_preset_says_which_was_read(monkeypatch, tmp_path: Path) -> None:
    folder = tmp_path / "llama-3.1-8b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(fixture_config("Mistral-7B-Instruct-v0.1.json")))
    monkeypatch.chdir(tmp_path)
    est = api.estimate("llama-3.1-8b", tokens=100)
    assert est.model.model_type == "mistral"  # the folder, not the preset
    assert any("is the local folder ./llama-3.1-8b, read instead of the bundled preset" in n for n in est.notes)
    monkeypatch.chdir(folder)
    assert not any("instead of the bundled preset" in n for n in api.estimate("llama-3.1-8b").notes)
