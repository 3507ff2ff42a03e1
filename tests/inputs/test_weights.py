"""kvcalc.inputs.weights: where a local config's weights are looked for, and an error that names
that folder whatever way MODEL named it (``.``, a relative folder, the config.json itself)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcalc.errors import SourceError
from kvcalc.inputs.weights import weights_bytes
from tests.conftest import FIXTURES, CliResult, assert_one_line_error, run_subprocess
from tests.helpers.cwd import here_relative  # noqa: F401  (the fixture "here")
from tests.helpers.fake_hub import COMMIT, REPO, FakeHub, Reply, serve_config, serve_error
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


# Weights of a Hub repo, read by huggingface_hub's real get_safetensors_metadata from a fake Hub.
#
# kvcalc.inputs.weights.weights_bytes sizes a Hub repo's weights from its safetensors headers (parameter
# count per dtype x bytes per element). huggingface_hub 2.x asks for them like this:
#
# * ``HEAD /<repo>/resolve/main/model.safetensors`` (file_exists). If the file is there, one
#   ``GET`` of it with ``Range: bytes=0-100000`` (the 8-byte little-endian header length, then the
#   JSON header), and a second ``GET`` with ``Range: bytes=8-<length + 7>`` when the header is longer
#   than that first slice.
# * Otherwise ``HEAD .../model.safetensors.index.json`` (file_exists), then ``HEAD`` + ``GET`` of it
#   (hf_hub_download, into the cache), then the same ranged ``GET`` for every shard in its weight_map.
#
# The fake Hub and its environment (loopback only, empty cache, no token) come from
# tests/helpers/fake_hub.py: the ``ranged`` fixture, whose handler also honours ``Range`` as the
# Hub's CDN does.
# kvcalc runs in a fresh interpreter because huggingface_hub reads HF_ENDPOINT and the cache paths
# when it is imported.


RESOLVE = f"/{REPO}/resolve/main"


SINGLE = f"{RESOLVE}/model.safetensors"


INDEX = f"{RESOLVE}/model.safetensors.index.json"


FIRST_RANGE = "bytes=0-100000"  # huggingface_hub's first slice of every safetensors file


H100_SXM = "h100-sxm"


# Bytes per element, written out here rather than taken from kvcalc.
ELEMENT = {"F32": 4, "BF16": 2, "F16": 2, "I8": 1, "F8_E4M3": 1}


RUN_WEIGHTS = """
import json, sys
from kvcalc.errors import SourceError
from kvcalc.inputs.weights import weights_bytes
try:
    print(json.dumps(weights_bytes(sys.argv[1], spec_dtype=None)))
except SourceError as exc:
    print(f"SourceError: {exc}", file=sys.stderr)
    sys.exit(1)
"""


def safetensors(tensors: dict[str, tuple[str, list[int]]]) -> bytes:
    """A whole safetensors file: u64 header length, JSON header (space-padded to 8), zeroed data."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * ELEMENT[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + bytes(offset)


def header_length(body: bytes) -> int:
    (length,) = struct.unpack("<Q", body[:8])
    return int(length)


def serve_lfs(fake: FakeHub, filename: str, body: bytes) -> None:
    """Serve a file as the Hub serves an LFS file: its sha256 as the etag, byte ranges accepted."""
    headers = {
        "Content-Type": "application/octet-stream",
        "ETag": f'"{hashlib.sha256(body).hexdigest()}"',
        "X-Repo-Commit": COMMIT,
        "Accept-Ranges": "bytes",
    }
    fake.replies[f"{RESOLVE}/{filename}"] = Reply(200, headers, body)


def serve_text(fake: FakeHub, filename: str, body: bytes) -> None:
    """Serve a small (non-LFS) file: git's blob id as the etag."""
    etag = hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()
    headers = {"Content-Type": "text/plain; charset=utf-8", "ETag": f'"{etag}"', "X-Repo-Commit": COMMIT}
    fake.replies[f"{RESOLVE}/{filename}"] = Reply(200, headers, body)


def run_weights(repo: str = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", RUN_WEIGHTS, repo],
        capture_output=True,
        text=True,
        env=dict(os.environ),  # the hub fixture's environment
        timeout=60,
        check=False,
    )


def fit(repo: str = REPO) -> CliResult:
    return run_subprocess("fit", repo, "--gpu", H100_SXM, "--json")


def weights_line(result: CliResult) -> dict[str, Any]:
    assert result.exit_code == 0, result.stderr
    lines = [line for line in result.json()["budget"] if line["label"].startswith("- weights")]
    assert len(lines) == 1, result.stdout
    return dict(lines[0])


def ranges(fake: FakeHub, path: str) -> list[str | None]:
    return [r.headers.get("range") for r in fake.requests if r.method == "GET" and r.path == path]


# Two tensors: BF16 [1024, 1024] is 1,048,576 parameters x 2 B = 2,097,152 bytes, and F32 [1024] is
# 1,024 x 4 B = 4,096 bytes: 2,097,152 + 4,096 = 2,101,248 bytes.
SINGLE_TENSORS = {
    "model.embed_tokens.weight": ("BF16", [1024, 1024]),
    "model.norm.weight": ("F32", [1024]),
}


SINGLE_BYTES = 1024 * 1024 * 2 + 1024 * 4


assert SINGLE_BYTES == 2_101_248


def test_single_file_repo(ranged: FakeHub) -> None:
    serve_lfs(ranged, "model.safetensors", safetensors(SINGLE_TENSORS))

    proc = run_weights()
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert json.loads(proc.stdout) == [SINGLE_BYTES, "Hub safetensors metadata"]
    # The header is found at once: no index lookup, one ranged GET, nothing downloaded in full.
    assert ranged.seen() == [("HEAD", SINGLE), ("GET", SINGLE)]
    assert ranges(ranged, SINGLE) == [FIRST_RANGE]
    assert all("authorization" not in r.headers for r in ranged.requests)


def test_single_file_repo_through_fit(ranged: FakeHub) -> None:
    serve_config(ranged)
    serve_lfs(ranged, "model.safetensors", safetensors(SINGLE_TENSORS))

    result = fit()
    assert result.stderr == ""
    line = weights_line(result)
    assert line["bytes"] == SINGLE_BYTES  # tp 1: all the weights on the one GPU
    assert "Hub safetensors metadata" in line["detail"]
    assert ranged.seen() == [
        ("HEAD", f"{RESOLVE}/config.json"),
        ("GET", f"{RESOLVE}/config.json"),
        ("HEAD", SINGLE),
        ("GET", SINGLE),
    ]


# Shard 1: BF16 [2048, 512] = 1,048,576 parameters x 2 B = 2,097,152 bytes,
#          F8_E4M3 [512, 512] = 262,144 x 1 B = 262,144 bytes,
#          F32 [512] = 512 x 4 B = 2,048 bytes.                        Shard 1: 2,361,344 bytes.
# Shard 2: BF16 [512, 1024] = 524,288 x 2 B = 1,048,576 bytes,
#          and 2,000 F32 [8] tensors = 16,000 x 4 B = 64,000 bytes.     Shard 2: 1,112,576 bytes.
# Per dtype: BF16 1,572,864 x 2 = 3,145,728; F8_E4M3 262,144 x 1 = 262,144; F32 16,512 x 4 = 66,048.
# Total: 3,145,728 + 262,144 + 66,048 = 3,473,920 bytes (= 2,361,344 + 1,112,576).
# Shard 2's 2,000 small tensors make its JSON header longer than huggingface_hub's first
# 100,000-byte slice, so it fetches the rest of that header with a second ranged GET.
SHARD_1 = "model-00001-of-00002.safetensors"


SHARD_2 = "model-00002-of-00002.safetensors"


SHARD_1_TENSORS = {
    "model.embed_tokens.weight": ("BF16", [2048, 512]),
    "model.layers.0.mlp.down_proj.weight": ("F8_E4M3", [512, 512]),
    "model.norm.weight": ("F32", [512]),
}


SHARD_2_TENSORS = {
    "lm_head.weight": ("BF16", [512, 1024]),
    **{f"model.layers.{i}.post_attention_layernorm.bias": ("F32", [8]) for i in range(2000)},
}


SHARDED_BYTES = 1_572_864 * 2 + 262_144 * 1 + 16_512 * 4


assert SHARDED_BYTES == 3_473_920 == 2_361_344 + 1_112_576


def serve_sharded(fake: FakeHub) -> tuple[bytes, bytes]:
    shard_1, shard_2 = safetensors(SHARD_1_TENSORS), safetensors(SHARD_2_TENSORS)
    assert header_length(shard_1) < 100_000 - 8 < header_length(shard_2)
    weight_map = {name: SHARD_1 for name in SHARD_1_TENSORS} | {name: SHARD_2 for name in SHARD_2_TENSORS}
    index = {"metadata": {"total_size": SHARDED_BYTES}, "weight_map": weight_map}
    # The Hub answers a missing file in an existing repo with EntryNotFound (and the commit).
    serve_error(fake, 404, "EntryNotFound", "Entry not found", path=SINGLE)
    serve_text(fake, "model.safetensors.index.json", json.dumps(index, indent=2).encode())
    serve_lfs(fake, SHARD_1, safetensors(SHARD_1_TENSORS))
    serve_lfs(fake, SHARD_2, safetensors(SHARD_2_TENSORS))
    return shard_1, shard_2


def assert_sharded_requests(fake: FakeHub, shard_2: bytes) -> None:
    seen = fake.seen()
    fixed = [("HEAD", SINGLE), ("HEAD", INDEX), ("HEAD", INDEX), ("GET", INDEX)]
    assert seen[: len(fixed)] == fixed, seen  # file_exists twice, then hf_hub_download of the index
    # The shards are parsed on threads, so in either order.
    assert sorted(seen[len(fixed) :]) == sorted(
        [("GET", f"{RESOLVE}/{SHARD_1}")] + [("GET", f"{RESOLVE}/{SHARD_2}")] * 2
    )
    assert ranges(fake, f"{RESOLVE}/{SHARD_1}") == [FIRST_RANGE]
    assert ranges(fake, f"{RESOLVE}/{SHARD_2}") == [FIRST_RANGE, f"bytes=8-{header_length(shard_2) + 7}"]


def test_sharded_repo(ranged: FakeHub) -> None:
    _, shard_2 = serve_sharded(ranged)

    proc = run_weights()
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert json.loads(proc.stdout) == [SHARDED_BYTES, "Hub safetensors metadata"]
    assert_sharded_requests(ranged, shard_2)


def test_sharded_repo_through_fit(ranged: FakeHub) -> None:
    serve_config(ranged)
    _, shard_2 = serve_sharded(ranged)

    result = fit()
    line = weights_line(result)
    assert line["bytes"] == SHARDED_BYTES
    assert "Hub safetensors metadata" in line["detail"]
    assert result.stderr == ""  # huggingface_hub's "Parse safetensors files" progress bar is off
    assert ranged.seen()[:2] == [("HEAD", f"{RESOLVE}/config.json"), ("GET", f"{RESOLVE}/config.json")]
    ranged.requests[:2] = []
    assert_sharded_requests(ranged, shard_2)


def test_missing_repo_is_one_line_through_fit(hub: FakeHub) -> None:
    missing = "org/missing"
    config_path = f"/{missing}/resolve/main/config.json"
    serve_error(hub, 404, "RepoNotFound", "Repository not found", path=config_path)

    line = assert_one_line_error(fit(missing), f"Hub repo {missing} not found", "HF_TOKEN")
    assert "safetensors" not in line
    assert hub.seen() == [("HEAD", config_path)]  # the config fetch fails first; weights are never asked for


def break_weights(fake: FakeHub, how: str) -> dict[str, str]:
    """Set the fake Hub up so that sizing the weights fails one way; return extra env for the run."""
    if how == "no safetensors":  # e.g. a repo with only pytorch_model.bin
        serve_error(fake, 404, "EntryNotFound", "Entry not found", path=SINGLE)
        serve_error(fake, 404, "EntryNotFound", "Entry not found", path=INDEX)
    elif how == "missing shard":
        serve_sharded(fake)
        serve_error(fake, 404, "EntryNotFound", "Entry not found", path=f"{RESOLVE}/{SHARD_2}")
    elif how == "bad header":
        serve_lfs(fake, "model.safetensors", struct.pack("<Q", 8) + b"not json")
    elif how == "offline":  # config.json cached by a first, online run; weights never are
        serve_lfs(fake, "model.safetensors", safetensors(SINGLE_TENSORS))
        assert fit().exit_code == 0
        return {"HF_HUB_OFFLINE": "1"}
    return {}


@pytest.mark.parametrize("how", ["no safetensors", "missing shard", "bad header", "offline"])
def test_a_weights_failure_names_the_weights_and_the_way_out(ranged: FakeHub, how: str) -> None:
    serve_config(ranged)
    env = break_weights(ranged, how)
    result = run_subprocess("fit", REPO, "--gpu", H100_SXM, "--json", env=env)
    line = assert_one_line_error(result, REPO, "--weights")
    assert "config.json" not in line


def test_url_revision_reaches_the_weights(ranged: FakeHub) -> None:
    """A Hub URL naming a revision (/tree/v2) reads the config and the weights at that revision: the
    weights are not silently taken from main."""
    at = f"/{REPO}/resolve/v2"
    serve_config(ranged, f"{at}/config.json")
    body = safetensors(SINGLE_TENSORS)
    serve_lfs(ranged, "model.safetensors", body)  # main: must not be asked
    headers = dict(ranged.replies[SINGLE].headers)
    ranged.replies[f"{at}/model.safetensors"] = Reply(200, headers, body)
    result = run_subprocess("fit", f"{ranged.endpoint}/{REPO}/tree/v2", "--gpu", H100_SXM, "--json")
    assert weights_line(result)["bytes"] == SINGLE_BYTES
    paths = {path for _, path in ranged.seen()}
    assert f"{at}/model.safetensors" in paths and SINGLE not in paths
