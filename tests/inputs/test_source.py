"""Where MODEL is read from (kvcalc.inputs.source)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvcalc import api
from kvcalc.api import load_model
from kvcalc.inputs.presets import presets_dir
from kvcalc.inputs.source import resolve
from tests.conftest import FIXTURES, assert_one_line_error, fixture_config
from tests.helpers.commands import FIT
from tests.helpers.cwd import here_absolute  # noqa: F401  (the fixture "here")
from tests.helpers.gguf_files import attention, gguf_file
from tests.helpers.local_files import llama_config


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


TINY_CONFIG = {
    "model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "hidden_size": 256, "vocab_size": 100, "intermediate_size": 512, "max_position_embeddings": 4096,
}  # fmt: skip


def test_a_folder_whose_config_links_to_itself(run_cli, here: Path) -> None:
    """Once "m/config.json is a broken symlink to config.json": the link is there, and leads to itself."""
    Path("m").mkdir()
    Path("m/config.json").symlink_to("config.json")
    line = assert_one_line_error(run_cli("estimate", "m"), "m/config.json is a symlink loop")
    assert "broken" not in line
    assert run_cli("estimate", "m").exit_code == 1


def test_a_folder_whose_config_is_a_loop_of_two_links(run_cli, here: Path) -> None:
    Path("m").mkdir()
    Path("m/config.json").symlink_to("other.json")
    Path("m/other.json").symlink_to("config.json")
    line = assert_one_line_error(run_cli("estimate", "m"), "m/config.json is a symlink loop")
    assert "broken" not in line


def test_the_self_linked_file_itself(run_cli, here: Path) -> None:
    Path("config.json").symlink_to("config.json")
    result = run_cli("estimate", "config.json")
    assert_one_line_error(result, "MODEL config.json is a symlink loop")
    assert result.exit_code == 1


def test_a_weights_index_that_is_a_symlink_loop(run_cli, here: Path) -> None:
    """Beside a good config, a looping model.safetensors.index.json: once "cannot read ...: Too many
    levels of symbolic links"."""
    Path("m").mkdir()
    Path("m/config.json").write_text(json.dumps(TINY_CONFIG))
    Path("m/model.safetensors.index.json").symlink_to("model.safetensors.index.json")
    result = run_cli("fit", "m", *FIT)
    line = assert_one_line_error(result, "weights index m/model.safetensors.index.json is a symlink loop")
    assert "Too many levels" not in line and result.exit_code == 1


def test_a_broken_config_link_is_still_broken(run_cli, here: Path) -> None:
    Path("m").mkdir()
    Path("m/config.json").symlink_to("gone.json")
    assert_one_line_error(run_cli("estimate", "m"), "m/config.json is a broken symlink to gone.json")


def test_a_bundled_preset_file_names_the_preset(run_cli) -> None:
    """Once "... is not valid JSON: Expecting value at line 1 column 1"."""
    path = presets_dir() / "llama-3.1-8b.yaml"
    assert path.is_file()
    result = run_cli("estimate", str(path))
    line = assert_one_line_error(
        result, "is a kvcalc preset file (YAML), not a config.json", "give its name, llama-3.1-8b"
    )
    assert "JSON:" not in line and result.exit_code == 1


def test_a_link_to_a_bundled_preset_file_names_the_preset(run_cli, here: Path) -> None:
    Path("p.yaml").symlink_to(presets_dir() / "qwen2.5-7b.yaml")
    assert_one_line_error(run_cli("estimate", "p.yaml"), "p.yaml is a kvcalc preset file (YAML)", "qwen2.5-7b")


@pytest.mark.parametrize("name", ["llama-3.1-8b.yaml", "model.yml", "config.YAML"])
def test_any_other_yaml_file_is_said_to_be_yaml(run_cli, here: Path, name: str) -> None:
    shutil.copy(presets_dir() / "llama-3.1-8b.yaml", name)  # a copy outside the presets: no preset of its own
    result = run_cli("estimate", name)
    line = assert_one_line_error(result, f"{name} is a YAML file: kvcalc reads a model's config.json (JSON), not YAML")
    assert "preset file" not in line and "Expecting value" not in line and result.exit_code == 1


def _llama(path: Path) -> Path:
    return gguf_file(path, "llama", attention(8, 2, 64, 2))


def test_a_folder_with_one_gguf_points_at_it(run_cli, here: Path) -> None:
    """Once "directory m has no config.json"."""
    Path("m").mkdir()
    _llama(here / "m" / "model-Q4_K_M.gguf")
    result = run_cli("estimate", "m")
    assert_one_line_error(result, "m holds no config.json but a GGUF file: give the file itself, m/model-Q4_K_M.gguf")
    assert result.exit_code == 1
    assert run_cli("estimate", "m/model-Q4_K_M.gguf").exit_code == 0  # what it points at works


def test_a_folder_with_a_split_gguf_points_at_its_first_shard(run_cli, here: Path) -> None:
    Path("m").mkdir()
    for i in (1, 2, 3):
        _llama(here / "m" / f"big-{i:05d}-of-00003.gguf")
    assert_one_line_error(
        run_cli("estimate", "m"),
        "m holds no config.json but a GGUF split into 3 shards: give its first shard, m/big-00001-of-00003.gguf",
    )


def test_a_folder_with_several_ggufs_names_them(run_cli, here: Path) -> None:
    Path("m").mkdir()
    for name in ("model-Q4_K_M.gguf", "model-Q8_0.gguf", "mmproj-F16.gguf"):
        _llama(here / "m" / name)
    assert_one_line_error(
        run_cli("estimate", "m"),
        "m holds no config.json but 3 GGUF files (mmproj-F16.gguf, model-Q4_K_M.gguf, model-Q8_0.gguf)",
        "give one of them",
        "first shard",
    )
    for i in range(3):
        _llama(here / "m" / f"more-{i}.gguf")
    assert_one_line_error(run_cli("estimate", "m"), "6 GGUF files (", "and 3 more)")


def test_a_folder_with_neither_says_so(run_cli, here: Path) -> None:
    Path("m").mkdir()
    Path("m/notes.txt").write_text("x")
    assert_one_line_error(run_cli("estimate", "m"), "directory m has no config.json")


def test_a_local_folder_shadowing_a_repo_id_is_noted(run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    llama_config(tmp_path / "meta-llama" / "Llama-3.1-8B")
    result = run_cli("estimate", "meta-llama/Llama-3.1-8B", "--json")
    assert result.exit_code == 0, result.stderr
    notes = result.json()["notes"]
    assert notes[0] == (
        "MODEL meta-llama/Llama-3.1-8B is the local folder ./meta-llama/Llama-3.1-8B, read instead of the Hub "
        "repo meta-llama/Llama-3.1-8B (write ./meta-llama/Llama-3.1-8B to mean the folder, or "
        "https://huggingface.co/meta-llama/Llama-3.1-8B for the Hub repo)"
    )
    text = run_cli("estimate", "meta-llama/Llama-3.1-8B")
    assert "note: MODEL meta-llama/Llama-3.1-8B is the local folder" in text.stdout
    # Said explicitly, the folder is no surprise: no note.
    explicit = run_cli("estimate", "./meta-llama/Llama-3.1-8B", "--json")
    assert not any("local folder" in note for note in explicit.json()["notes"])


def test_the_note_reaches_the_python_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    llama_config(tmp_path / "org" / "name")
    (tmp_path / "org" / "file.json").write_text((FIXTURES / "Llama-3.1-8B.json").read_text(), encoding="utf-8")
    assert resolve("org/name").notes[0].startswith("MODEL org/name is the local folder ./org/name")
    assert load_model("org/name").notes[0].startswith("MODEL org/name is the local folder ./org/name")
    (tmp_path / "org" / "file").write_text((FIXTURES / "Llama-3.1-8B.json").read_text(), encoding="utf-8")
    assert resolve("org/file").notes[0].startswith("MODEL org/file is the local file ./org/file, read instead")
    assert resolve("org/file.json").notes == ()  # a .json name is plainly a file
    assert resolve(str(tmp_path / "org" / "name")).notes == ()
