"""kvcalc.inputs.weights: where a local config's weights are looked for, and an error that names
that folder whatever way MODEL named it (``.``, a relative folder, the config.json itself)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcalc.errors import SourceError
from kvcalc.inputs.weights import weights_bytes
from tests.conftest import FIXTURES, assert_one_line_error, run_subprocess
from tests.helpers.cwd import here_relative  # noqa: F401  (the fixture "here")
from tests.helpers.local_files import llama_config, needs_fifo


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


GOOD_TENSOR = {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}


def write_safetensors(folder: Path, header: Any, *, data: int = 8, length: int | None = None) -> Path:
    """model.safetensors: u64 header length (``length`` to lie about it), the header, ``data`` bytes."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path = folder / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + bytes(data))
    return path


def fit_weights(run_cli, folder: Path) -> Any:
    return run_cli("fit", str(folder), "--gpu-memory", "80GB", "--overhead", "0", "--utilization", "1", "--json")


@pytest.mark.parametrize(
    ("index", "needle"),
    [
        ({"metadata": [1, 2]}, "metadata is a list, not an object"),
        ({"metadata": {"total_size": "16060522496"}}, "total_size is '16060522496', not a whole number of bytes"),
        ({"metadata": {"total_size": -16}}, "metadata.total_size must be positive, got -16"),
        ({"metadata": {"total_size": 0}}, "metadata.total_size must be positive, got 0"),
        ({"metadata": {"total_size": True}}, "metadata.total_size is True, not a whole number of bytes"),
        ({"metadata": {"total_size": 1.6e10}}, "metadata.total_size is 16000000000.0, not a whole number"),
        ({"metadata": {"total_size": 10**30}}, "is implausibly large"),
        ({"metadata": {"total_size": 10**1000}}, "a 3,322-bit integer is implausibly large"),
        ({"metadata": {"total_size": None}}, "has no metadata.total_size"),
        ({"metadata": {}}, "has no metadata.total_size"),
        ({"weight_map": {}}, "has no metadata.total_size"),
        ([1, 2], "is a list, not a JSON object"),
    ],
)
def test_a_malformed_safetensors_index(run_cli, here: Path, index: Any, needle: str) -> None:
    llama_config(here)
    (here / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    assert_one_line_error(fit_weights(run_cli, here), "m/model.safetensors.index.json", needle)


def test_an_index_that_is_not_a_regular_file(run_cli, here: Path) -> None:
    llama_config(here)
    (here / "model.safetensors.index.json").mkdir()
    assert_one_line_error(
        fit_weights(run_cli, here), "weights index m/model.safetensors.index.json is not a regular file (a directory)"
    )


@pytest.mark.parametrize(
    ("header", "needle"),
    [
        ([GOOD_TENSOR], "the safetensors header is a list, not a JSON object"),
        ("text", "the safetensors header is a string, not a JSON object"),
        ({"w": [0, 8]}, "tensor 'w' is a list, not an object"),
        ({"w": 8}, "tensor 'w' is an integer, not an object"),
        ({"w": {"dtype": "BF16", "shape": [2, 2]}}, "tensor 'w' has no data_offsets"),
        ({"w": {**GOOD_TENSOR, "data_offsets": "0,8"}}, "tensor 'w' has data_offsets '0,8'; expected [begin, end]"),
        ({"w": {**GOOD_TENSOR, "data_offsets": [8]}}, "has data_offsets [8]; expected [begin, end]"),
        ({"w": {**GOOD_TENSOR, "data_offsets": [0, 4, 8]}}, "expected [begin, end]"),
        ({"w": {**GOOD_TENSOR, "data_offsets": [0, 8.0]}}, "expected [begin, end], two whole numbers"),
        ({"w": {**GOOD_TENSOR, "data_offsets": ["0", "8"]}}, "expected [begin, end], two whole numbers"),
        ({"w": {**GOOD_TENSOR, "data_offsets": [False, True]}}, "expected [begin, end], two whole numbers"),
        ({"w": {**GOOD_TENSOR, "data_offsets": [-8, 0]}}, "has data_offsets [-8, 0]; expected 0 <= begin <= end"),
        ({"w": {**GOOD_TENSOR, "data_offsets": [0, -8]}}, "has data_offsets [0, -8]"),
        ({"w": {**GOOD_TENSOR, "data_offsets": [8, 0]}}, "has data_offsets [8, 0]; expected 0 <= begin <= end"),
        ({"w": {**GOOD_TENSOR, "data_offsets": [0, 2**70]}}, "ends at a 71-bit offset of the data"),
        ({"w": {**GOOD_TENSOR, "data_offsets": [0, 9]}}, "ends at byte 9 of the data, but the file holds 8 bytes"),
        ({"w": {**GOOD_TENSOR, "dtype": 2}}, "tensor 'w' has no dtype string"),
        ({"w": {**GOOD_TENSOR, "shape": [-1, 2]}}, "has shape [-1, 2]"),
        ({"w": {**GOOD_TENSOR, "shape": "2x2"}}, "has shape '2x2'"),
        ({"__metadata__": ["pt"], "w": GOOD_TENSOR}, "__metadata__ must be an object of strings"),
        ({"__metadata__": {"format": 1}, "w": GOOD_TENSOR}, "__metadata__ must be an object of strings"),
        ({"a\nb": [0]}, "tensor 'a\\nb' is a list"),  # a name cannot break the one line
        (b'{"w": ', "the safetensors header is not valid JSON"),
        (b"\xff\xfe{}", "the safetensors header is not UTF-8 text"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
)
def test_a_malformed_safetensors_header(run_cli, here: Path, header: Any, needle: str) -> None:
    llama_config(here)
    write_safetensors(here, header)
    assert_one_line_error(fit_weights(run_cli, here), "m/model.safetensors", needle)


@pytest.mark.parametrize(
    ("length", "needle"),
    [
        (10**6, "declares a 1,000,000-byte safetensors header but is only"),
        (2**64 - 1, "declares a 18,446,744,073,709,551,615-byte safetensors header; the format allows at most"),
    ],
)
def test_a_length_prefix_past_the_end(run_cli, here: Path, length: int, needle: str) -> None:
    llama_config(here)
    write_safetensors(here, {"w": GOOD_TENSOR}, length=length)
    assert_one_line_error(fit_weights(run_cli, here), "m/model.safetensors", needle)


@pytest.mark.parametrize("content", [b"", b"\x01\x02\x03"])
def test_a_file_too_short_for_a_length_prefix(run_cli, here: Path, content: bytes) -> None:
    llama_config(here)
    (here / "model.safetensors").write_bytes(content)
    assert_one_line_error(fit_weights(run_cli, here), "too short to be a safetensors file")


def test_a_negative_offset_no_longer_raises_the_budget(run_cli, here: Path) -> None:
    """The old reader took each entry's end as it came: [0, -10^12] made the weights negative and
    added a terabyte to the KV budget."""
    llama_config(here)
    write_safetensors(here, {"w": {**GOOD_TENSOR, "data_offsets": [0, -(10**12)]}})
    assert_one_line_error(fit_weights(run_cli, here), "tensor 'w'", "expected 0 <= begin <= end")


def test_a_valid_header_still_sizes_the_weights(run_cli, here: Path) -> None:
    llama_config(here)
    header = {
        "__metadata__": {"format": "pt"},
        "a": GOOD_TENSOR,
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]},
        "empty": {"dtype": "F32", "shape": [0], "data_offsets": [16, 16]},
    }
    write_safetensors(here, header, data=16)
    result = fit_weights(run_cli, here)
    assert result.exit_code == 0, result.stderr
    assert result.json()["kv_budget_bytes"] == 80 * 10**9 - 16
    assert weights_bytes("m", spec_dtype=None) == (16, "model.safetensors header")


@needs_fifo
def test_a_safetensors_fifo_does_not_block(tmp_path: Path) -> None:
    llama_config(tmp_path / "m")
    os.mkfifo(tmp_path / "m" / "model.safetensors")
    result = run_subprocess("fit", "m", "--gpu-memory", "80GB", cwd=tmp_path)
    assert_one_line_error(result, "m/model.safetensors is not a regular file (a FIFO)")


json_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
)


json_values = st.recursive(
    json_leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
)


offsets = st.lists(st.integers(min_value=-64, max_value=96) | json_leaves, max_size=3)


# Mostly tensor-shaped entries with a field or two wrong, so most examples get past the first check.
tensor_entries = st.fixed_dictionaries(
    {"dtype": st.sampled_from(["BF16", "F32", "I8"]) | json_leaves},
    optional={
        "shape": st.lists(st.integers(min_value=-2, max_value=8), max_size=3) | json_values,
        "data_offsets": offsets | json_values,
    },
)


headers = st.dictionaries(
    st.sampled_from(["__metadata__", "w", "b"]) | st.text(max_size=6),
    tensor_entries | st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2) | json_values,
    max_size=4,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=headers.map(lambda h: json.dumps(h).encode()) | json_values.map(lambda v: json.dumps(v).encode())
    | st.binary(max_size=48),
    length=st.none() | st.integers(min_value=0, max_value=2**64 - 1) | st.integers(min_value=0, max_value=128),
    data=st.integers(min_value=0, max_value=96),
)  # fmt: skip
def test_any_safetensors_header_gives_a_size_or_a_source_error(body: bytes, length: int | None, data: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "model.safetensors").write_bytes(
            struct.pack("<Q", len(body) if length is None else length) + body + bytes(data)
        )
        try:
            size, label = weights_bytes(folder, spec_dtype=None)
        except SourceError as exc:
            assert "\n" not in str(exc)
            return
    assert isinstance(size, int) and not isinstance(size, bool)
    assert 0 <= size <= data  # never more than the data the file holds, never negative
    assert label == "model.safetensors header"
