"""A GGUF's weights (kvcalc.inputs.gguf.weights): tensor data that is missing or implausibly large."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvcalc.inputs.gguf import read_header
from tests.conftest import assert_one_line_error, run_subprocess
from tests.helpers.commands import FIT
from tests.helpers.cwd import here_absolute  # noqa: F401  (the fixture "here")
from tests.helpers.fake_hub import REPO, serve_gguf
from tests.helpers.gguf_files import attention, gguf_file

gguf: Any = pytest.importorskip("gguf")


SPEED = ("--gpu", "h100", "--prompt", "10", "--output", "2")


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
