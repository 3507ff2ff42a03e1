"""Weights of a Hub repo, read by huggingface_hub's real get_safetensors_metadata from a fake Hub.

kvcalc.inputs.weights.weights_bytes sizes a Hub repo's weights from its safetensors headers (parameter
count per dtype x bytes per element). huggingface_hub 2.x asks for them like this:

* ``HEAD /<repo>/resolve/main/model.safetensors`` (file_exists). If the file is there, one
  ``GET`` of it with ``Range: bytes=0-100000`` (the 8-byte little-endian header length, then the
  JSON header), and a second ``GET`` with ``Range: bytes=8-<length + 7>`` when the header is longer
  than that first slice.
* Otherwise ``HEAD .../model.safetensors.index.json`` (file_exists), then ``HEAD`` + ``GET`` of it
  (hf_hub_download, into the cache), then the same ranged ``GET`` for every shard in its weight_map.

The fake Hub and its environment (loopback only, empty cache, no token) come from
tests/helpers/fake_hub.py: the ``ranged`` fixture, whose handler also honours ``Range`` as the
Hub's CDN does.
kvcalc runs in a fresh interpreter because huggingface_hub reads HF_ENDPOINT and the cache paths
when it is imported.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import CliResult, assert_one_line_error, run_subprocess
from tests.helpers.fake_hub import COMMIT, REPO, FakeHub, Reply, serve_config, serve_error

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


# --- one model.safetensors --------------------------------------------------------------------------

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


# --- model.safetensors.index.json and two shards --------------------------------------------------

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


# --- a repo that does not exist ------------------------------------------------------------------------


def test_missing_repo_is_one_line_through_fit(hub: FakeHub) -> None:
    missing = "org/missing"
    config_path = f"/{missing}/resolve/main/config.json"
    serve_error(hub, 404, "RepoNotFound", "Repository not found", path=config_path)

    line = assert_one_line_error(fit(missing), f"Hub repo {missing} not found", "HF_TOKEN")
    assert "safetensors" not in line
    assert hub.seen() == [("HEAD", config_path)]  # the config fetch fails first; weights are never asked for


# --- known src problems (strict xfail: each turns into a failure once kvcalc is fixed) -----------------


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
