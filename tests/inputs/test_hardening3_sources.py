"""MODEL given as something it is not, and the one line that says what it is: a symlink loop where a
config.json should be, a preset's own YAML file, a folder that holds a GGUF but no config.json, a GGUF
whose metadata the config reader refuses (named by its GGUF key, not the config field it maps to),
and a GGUF whose tensor data is missing or implausibly large for every command that sizes weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kvcalc.inputs.gguf import read_header
from kvcalc.inputs.presets import presets_dir
from tests.conftest import assert_one_line_error, run_subprocess
from tests.helpers.fake_hub import REPO, serve_gguf
from tests.helpers.gguf_files import attention, gguf_file

gguf: Any = pytest.importorskip("gguf")


TINY_CONFIG = {
    "model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "hidden_size": 256, "vocab_size": 100, "intermediate_size": 512, "max_position_embeddings": 4096,
}  # fmt: skip
FIT = ("--gpu", "h100")
SPEED = ("--gpu", "h100", "--prompt", "10", "--output", "2")


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --- 1. a config.json that is a symlink loop ----------------------------------------------------------------


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


# --- 2. a YAML file as MODEL ----------------------------------------------------------------------------------


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


# --- 3. a folder holding a GGUF but no config.json ---------------------------------------------------------------


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


# --- 4. GGUF metadata the config reader refuses: named by its GGUF key -------------------------------------------


@pytest.mark.parametrize(
    ("keys", "named", "not_named"),
    [
        # 3 KV heads for 8 query heads: once "config field 'num_key_value_heads' (3) must divide the 8 query heads"
        (attention(8, 3, 64, 2), "GGUF key llama.attention.head_count_kv (3) must divide the 8 query heads",
         "num_key_value_heads"),
        (attention(8, 16, 64, 2), "GGUF key llama.attention.head_count_kv (16) must divide", "num_key_value_heads"),
        # once "config field 'num_hidden_layers' is implausibly large"
        (attention(8, 2, 64, 2**31), "GGUF key llama.block_count is implausibly large: 2147483648",
         "num_hidden_layers"),
        (attention(8, 2, 2**28, 2), "GGUF key llama.attention.key_length is implausibly large", "head_dim"),
        ({**attention(8, 2, 64, 2), "attention.head_count": 2**32 - 1}, "GGUF key llama.attention.head_count is",
         "num_attention_heads"),
        # a per-layer KV-head count: the layer it is wrong on
        ({**attention(8, 2, 64, 3), "attention.head_count_kv": [2, 3, 2]},
         "GGUF key llama.attention.head_count_kv[1] (3) must divide the 8 query heads", "num_key_value_heads"),
    ],
)  # fmt: skip
def test_gguf_errors_name_the_gguf_key(run_cli, here: Path, keys: dict[str, Any], named: str, not_named: str) -> None:
    gguf_file(here / "bad.gguf", "llama", keys)
    for command in (("estimate",), ("fit", *FIT)):
        result = run_cli(command[0], "bad.gguf", *command[1:])
        line = assert_one_line_error(result, f"bad.gguf: {named}")
        assert not_named not in line and "config field" not in line and result.exit_code == 1


def test_a_gguf_window_is_named_by_its_key(run_cli, here: Path) -> None:
    keys = attention(8, 4, 32, 2, **{"attention.sliding_window": 2**32 - 1})
    gguf_file(here / "gemma2.gguf", "gemma2", keys)
    line = assert_one_line_error(
        run_cli("estimate", "gemma2.gguf"), "GGUF key gemma2.attention.sliding_window is implausibly"
    )
    assert "'sliding_window'" not in line


def test_the_python_api_says_the_same(tmp_path: Path) -> None:
    from kvcalc.api import load_model
    from kvcalc.errors import KvcalcError

    path = gguf_file(tmp_path / "bad.gguf", "llama", attention(8, 3, 64, 2))
    with pytest.raises(KvcalcError, match=r"GGUF key llama\.attention\.head_count_kv \(3\)"):
        load_model(str(path))


# --- 5. tensor data that is not there, or not plausible -------------------------------------------------------------


def _truncated(tmp_path: Path) -> tuple[Path, int, int]:
    """A GGUF whose header lists two tensors and whose file ends where their data should begin."""
    tensors = (("token_embd.weight", (64, 10), "F32"), ("blk.0.attn_q.weight", (64, 4), "F32"))
    full = gguf_file(tmp_path / "full.gguf", "llama", attention(8, 2, 64, 2), tensors)
    header = read_header(full)
    assert header.data_offset is not None and header.data_end == full.stat().st_size  # the reader places them
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(full.read_bytes()[: header.data_offset])
    return cut, header.data_end, header.data_offset


@pytest.mark.parametrize("command", [("fit", *FIT), ("speed", *SPEED), ("speed", *SPEED, "--weights", "1GB")])
def test_a_gguf_without_its_tensor_data_is_refused(run_cli, here: Path, command: tuple[str, ...]) -> None:
    """Once accepted by fit (the tensor infos sized weights that are not in the file)."""
    _, end, size = _truncated(here)
    assert size < 1024  # a few hundred bytes: the header alone
    result = run_cli(command[0], "cut.gguf", *command[1:])
    assert_one_line_error(
        result, f"cut.gguf is truncated: its tensor data ends at byte {end:,}, but the file has {size:,} bytes"
    )
    assert result.exit_code == 1


def test_a_gguf_without_its_tensor_data_still_estimates(run_cli, here: Path) -> None:
    """The cache is sized from the header alone, which is whole."""
    _truncated(here)
    assert run_cli("estimate", "cut.gguf", "--tokens", "100").exit_code == 0


def test_a_shard_without_its_tensor_data_is_named(run_cli, here: Path) -> None:
    tensors = (("blk.0.attn_q.weight", (64, 4), "F32"),)
    gguf_file(here / "m-00001-of-00002.gguf", "llama", attention(8, 2, 64, 2), tensors)
    second = gguf_file(here / "m-00002-of-00002.gguf", "llama", attention(8, 2, 64, 2), tensors)
    second.write_bytes(second.read_bytes()[:-16])
    assert_one_line_error(
        # the shard's path may be long enough for the error line to shorten it: the words after it
        run_cli("fit", "m-00001-of-00002.gguf", *FIT),
        "(shard 2 of 2) is truncated: its tensor data ends at byte",
    )


def _huge(tmp_path: Path) -> Path:
    """A GGUF whose one tensor is 2^62 x 2^62 F32 elements (tensor infos only: the gguf package's
    writer, told the shape without data)."""
    np: Any = pytest.importorskip("numpy")
    path = tmp_path / "huge.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, value in attention(8, 2, 64, 2).items():
        writer.add_uint32(f"llama.{key}", value)
    writer.add_uint32("llama.vocab_size", 100)
    writer.add_tensor_info("token_embd.weight", (2**62, 2**62), np.dtype(np.float32), 4)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("command", [("fit", *FIT), ("speed", *SPEED), ("speed", *SPEED, "--weights", "1GB")])
def test_an_implausible_tensor_is_refused_by_fit_and_speed_alike(run_cli, here: Path, command: tuple[str, ...]) -> None:
    """fit refused it; speed (weights from loaded_tensor_bytes, parameters from loaded_parameters)
    once went on with 2^124 parameters."""
    _huge(here)
    result = run_cli(command[0], "huge.gguf", *command[1:])
    assert_one_line_error(result, f"huge.gguf: tensor infos add up to {4 * 2**124:,} bytes, implausibly large")
    assert result.exit_code == 1


def test_a_hub_gguf_without_its_tensor_data_is_refused(ranged, tmp_path: Path) -> None:
    """The Hub's Content-Range gives the file's size: the same check, from the ranged header read."""
    cut, end, size = _truncated(tmp_path)
    serve_gguf(ranged, cut.read_bytes(), filename="cut.gguf")
    result = run_subprocess("fit", f"{REPO}:cut.gguf", *FIT)
    assert_one_line_error(
        result, f"{REPO}:cut.gguf is truncated: its tensor data ends at byte {end:,}", f"{size:,} bytes"
    )
    assert result.exit_code == 1
