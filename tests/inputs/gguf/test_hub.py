"""A GGUF file in a Hub repo as MODEL (kvcalc.inputs.gguf.hub), read from the fake Hub of
tests/helpers/fake_hub.py with byte ranges (its ``ranged`` fixture).

Each GGUF is a real file written by the gguf package, with a large tensor after its header: the
fake Hub records every request, so the tests see that only ranges at the start of the file were
asked for, never the whole file, and that the estimate and weights equal those of the same file
read locally. kvcalc runs in a fresh interpreter (huggingface_hub reads HF_ENDPOINT and
HF_HUB_OFFLINE when it is imported), except where the reader itself is tested.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvcalc.errors import SourceError
from kvcalc.inputs.weights import weights_bytes
from tests.conftest import CliResult, assert_one_line_error, run_subprocess
from tests.helpers.fake_hub import GGUF_FILE, REPO, FakeHub, serve_error, serve_gguf
from tests.helpers.gguf_files import attention, gguf_file

FILE = GGUF_FILE  # the file serve_gguf serves unless told another
MIB = 2**20
FIRST_RANGE = f"bytes=0-{MIB - 1}"  # kvcalc.inputs.gguf.hub's first request: 1 MiB
# One F32 tensor of 4096 x 1024 elements after the header: 4,194,304 x 4 B = 16,777,216 bytes.
BIG = (("blk.0.ffn_up.weight", (4096, 1024), "F32"),)
BIG_BYTES = 4096 * 1024 * 4
assert BIG_BYTES == 16 * MIB


def llama(tmp_path: Path, name: str = FILE, **more: Any) -> Path:
    """A 4-layer Llama GGUF (8 query heads, 2 KV heads of 64 dims) with a 16 MiB tensor."""
    return gguf_file(tmp_path / name, "llama", attention(8, 2, 64, 4, **more), BIG)


def gets(fake: FakeHub) -> list[tuple[str, str | None]]:
    return [(r.path, r.headers.get("range")) for r in fake.requests]


def estimate(model: str, *extra: str, env: dict[str, str] | None = None) -> CliResult:
    return run_subprocess("estimate", model, "--tokens", "2048", "--kv-dtype", "fp16", "--json", *extra, env=env)


def test_estimate_and_weights_equal_the_local_file_from_one_ranged_request(ranged: FakeHub, tmp_path: Path) -> None:
    local = llama(tmp_path)
    body = local.read_bytes()
    assert len(body) > BIG_BYTES > 16 * len(body[: body.index(b"blk.0.ffn_up.weight") + 64])
    path = serve_gguf(ranged, body)

    remote = estimate(f"{REPO}:{FILE}")
    assert remote.exit_code == 0, remote.stderr
    mine = estimate(str(local))
    assert mine.exit_code == 0, mine.stderr
    # 2 (K, V) x 4 layers x 2 KV heads x 64 dims x 2 B x 2048 tokens
    assert remote.json()["total_bytes"] == mine.json()["total_bytes"] == 2 * 4 * 2 * 64 * 2 * 2048 == 4_194_304
    assert remote.json()["model"] == f"{REPO}:{FILE}"
    notes = " ".join(remote.json()["notes"])
    assert f"1 ranged request(s): {MIB:,} bytes fetched of its {len(body):,}" in notes, notes
    # The header is a few hundred bytes: one 1 MiB range at the start, of a 16 MiB file.
    assert gets(ranged) == [(path, FIRST_RANGE)]
    assert all(r.method == "GET" and "authorization" not in r.headers for r in ranged.requests)

    weights = run_subprocess(
        "fit", f"{REPO}:{FILE}", "--gpu", "h100-sxm", "--engine", "llama.cpp", "--overhead", "0", "--json"
    )
    assert weights.exit_code == 0, weights.stderr
    lines = [line for line in weights.json()["budget"] if line["label"].startswith("- weights")]
    assert [line["bytes"] for line in lines] == [BIG_BYTES]
    assert weights_bytes(str(local), spec_dtype=None)[0] == BIG_BYTES
    assert "Hub header ranges" in lines[0]["detail"]
    # resolve() and the weights share one header read in the process: one request again.
    assert gets(ranged)[1:] == [(path, FIRST_RANGE)]


def tokenizer_llama(tmp_path: Path) -> Path:
    """A header of about 1.7 MB: 100,000 tokenizer strings of 9 bytes (8-byte length + 9 bytes each)."""
    tokens = [f"tok{i:06d}" for i in range(100_000)]
    return gguf_file(tmp_path / FILE, "llama", {**attention(8, 2, 64, 4), "tokenizer.ggml.tokens": tokens}, BIG)


def test_a_long_header_is_read_in_growing_ranges(ranged: FakeHub, tmp_path: Path) -> None:
    local = tokenizer_llama(tmp_path)
    body = local.read_bytes()
    path = serve_gguf(ranged, body)

    remote = estimate(f"{REPO}:{FILE}", "--revision", "main")
    assert remote.exit_code == 0, remote.stderr
    assert remote.json()["total_bytes"] == estimate(str(local)).json()["total_bytes"] == 4_194_304
    # 100,000 x 17 bytes of strings: past the first 1 MiB, within the next 2 MiB; never the 16 MiB tensor.
    assert gets(ranged) == [(path, FIRST_RANGE), (path, f"bytes={MIB}-{3 * MIB - 1}")]
    assert f"2 ranged request(s): {3 * MIB:,} bytes fetched" in " ".join(remote.json()["notes"])


def test_revision_passes_through(ranged: FakeHub, tmp_path: Path) -> None:
    body = llama(tmp_path).read_bytes()
    path = serve_gguf(ranged, body, revision="v2")

    by_option = estimate(f"{REPO}:{FILE}", "--revision", "v2")
    assert by_option.exit_code == 0, by_option.stderr
    assert by_option.json()["total_bytes"] == 4_194_304
    url = f"{ranged.endpoint}/{REPO}/blob/v2/{FILE}"
    by_url = estimate(url)
    assert by_url.exit_code == 0, by_url.stderr
    assert by_url.json()["total_bytes"] == 4_194_304
    resolve_url = estimate(f"{ranged.endpoint}/{REPO}/resolve/v2/{FILE}")
    assert resolve_url.exit_code == 0, resolve_url.stderr
    assert gets(ranged) == [(path, FIRST_RANGE)] * 3
    # Two revisions at once: one line, nothing fetched.
    assert_one_line_error(estimate(url, "--revision", "v3"), "'v2'", "'v3'")
    assert len(ranged.requests) == 3


RUN_RESOLVE = """
import json, sys
from kvcalc.inputs.source import resolve
from kvcalc.inputs.weights import weights_bytes
said = []
source = resolve(sys.argv[1], revision=sys.argv[2], on_fetch=said.append)
size = weights_bytes(sys.argv[1], spec_dtype=None, revision=sys.argv[2], on_fetch=said.append)
print(json.dumps({"kind": source.kind, "label": source.label, "said": said, "weights": size}))
"""


def test_on_fetch_is_told_before_the_header_is_fetched(ranged: FakeHub, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    path = serve_gguf(ranged, llama(tmp_path).read_bytes(), revision="v2")
    proc = subprocess.run(
        [sys.executable, "-c", RUN_RESOLVE, f"{REPO}:{FILE}", "v2"],
        capture_output=True, text=True, env=dict(os.environ), timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["kind"] == "hub" and data["label"] == f"{REPO}:{FILE}"
    # Told once: the weights reuse the header resolve() read, so nothing more is fetched or said.
    assert data["said"] == [f"fetching the GGUF header of {REPO}:{FILE} at revision v2 from the Hub (byte ranges)..."]
    assert data["weights"][0] == BIG_BYTES
    assert gets(ranged) == [(path, FIRST_RANGE)]


def test_a_server_that_ignores_the_range_is_read_no_further_than_asked(hub: FakeHub, tmp_path: Path) -> None:
    """The plain fake Hub answers 200 with the whole file: kvcalc keeps the first 1 MiB and closes."""
    local = llama(tmp_path)
    path = serve_gguf(hub, local.read_bytes())
    remote = estimate(f"{REPO}:{FILE}")
    assert remote.exit_code == 0, remote.stderr
    assert remote.json()["total_bytes"] == 4_194_304
    assert f"1 ranged request(s): {MIB:,} bytes fetched" in " ".join(remote.json()["notes"])
    assert gets(hub) == [(path, FIRST_RANGE)]


def test_a_truncated_header_is_one_line(ranged: FakeHub, tmp_path: Path) -> None:
    body = tokenizer_llama(tmp_path).read_bytes()[: MIB + 1000]  # the file ends inside its tokenizer
    path = serve_gguf(ranged, body)
    assert_one_line_error(estimate(f"{REPO}:{FILE}"), f"{REPO}:{FILE}", "truncated GGUF header")
    # The second range runs past the end: the server sends what there is, and nothing more is asked.
    assert gets(ranged) == [(path, FIRST_RANGE), (path, f"bytes={MIB}-{3 * MIB - 1}")]


def test_hf_token_is_sent_with_each_range(ranged: FakeHub, tmp_path: Path) -> None:
    path = serve_gguf(ranged, tokenizer_llama(tmp_path).read_bytes())
    remote = estimate(f"{REPO}:{FILE}", env={"HF_TOKEN": "hf_test123"})
    assert remote.exit_code == 0, remote.stderr
    assert gets(ranged) == [(path, FIRST_RANGE), (path, f"bytes={MIB}-{3 * MIB - 1}")]
    assert [r.headers.get("authorization") for r in ranged.requests] == ["Bearer hf_test123"] * 2


def test_offline_is_one_line_and_fetches_nothing(ranged: FakeHub, tmp_path: Path) -> None:
    serve_gguf(ranged, llama(tmp_path).read_bytes())
    line = assert_one_line_error(
        estimate(f"{REPO}:{FILE}", env={"HF_HUB_OFFLINE": "1"}), f"{REPO}:{FILE}", "HF_HUB_OFFLINE=1"
    )
    assert "local path" in line
    assert ranged.requests == []


def test_a_missing_file_is_one_line_naming_it(ranged: FakeHub) -> None:
    path = f"/{REPO}/resolve/main/missing.gguf"
    serve_error(ranged, 404, "EntryNotFound", "Entry not found", path=path)
    assert_one_line_error(estimate(f"{REPO}:missing.gguf"), f"Hub repo {REPO} has no file missing.gguf")
    assert gets(ranged) == [(path, FIRST_RANGE)]


def test_a_missing_repo_is_one_line(ranged: FakeHub) -> None:
    serve_error(ranged, 404, "RepoNotFound", "Repository not found", path=f"/{REPO}/resolve/main/{FILE}")
    assert_one_line_error(estimate(f"{REPO}:{FILE}"), f"Hub repo {REPO} not found", "HF_TOKEN")


def test_split_gguf_weights_add_up_every_shards_header(ranged: FakeHub, tmp_path: Path) -> None:
    first, second = "q/model-00001-of-00002.gguf", "q/model-00002-of-00002.gguf"
    (tmp_path / "q").mkdir()
    one = llama(tmp_path, name=first, **{"split.no": 0, "split.count": 2})
    # The second shard: its own 8 MiB tensor (2048 x 1024 F32 = 8,388,608 bytes).
    two = gguf_file(
        tmp_path / second, "llama", {"split.no": 1, "split.count": 2}, (("output.weight", (2048, 1024), "F32"),)
    )
    paths = [serve_gguf(ranged, one.read_bytes(), first), serve_gguf(ranged, two.read_bytes(), second)]

    local = weights_bytes(str(one), spec_dtype=None)[0]
    assert local == BIG_BYTES + 2048 * 1024 * 4 == 25_165_824
    result = run_subprocess(
        "fit", f"{REPO}:{first}", "--gpu", "h100-sxm", "--engine", "llama.cpp", "--overhead", "0", "--json"
    )
    assert result.exit_code == 0, result.stderr
    lines = [line for line in result.json()["budget"] if line["label"].startswith("- weights")]
    assert [line["bytes"] for line in lines] == [local]
    assert "2 shards" in lines[0]["detail"]
    assert sorted(gets(ranged)) == sorted([(paths[0], FIRST_RANGE), (paths[1], FIRST_RANGE)])

    assert_one_line_error(estimate(f"{REPO}:{second}"), "shard 2 of 2", "model-00001-of-00002.gguf")
    assert len(ranged.requests) == 2


def test_the_header_limit_stops_the_reader(ranged: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In process: a header longer than the limit fails in one line after fetching exactly the limit."""
    from huggingface_hub import constants

    from kvcalc.inputs.gguf import hub as gguf_hub

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(gguf_hub, "HEADER_LIMIT", MIB + MIB // 2)
    path = serve_gguf(ranged, tokenizer_llama(tmp_path).read_bytes())
    reader = gguf_hub.RangedReader(f"{ranged.endpoint}{path}", {}, "org/name:model.gguf", 10.0)
    from kvcalc.inputs.gguf import parse_header

    with pytest.raises(SourceError, match=r"^org/name:model\.gguf: the GGUF header runs past 1 MiB"):
        parse_header(reader, "org/name:model.gguf")  # type: ignore[arg-type]
    assert reader.fetched == MIB + MIB // 2
    assert gets(ranged) == [(path, FIRST_RANGE), (path, f"bytes={MIB}-{MIB + MIB // 2 - 1}")]


@pytest.mark.parametrize(
    ("model", "parsed"),
    [
        ("org/name:model.gguf", ("org/name", "model.gguf", None)),
        ("org/name:dir/sub/Model-Q4_K_M.GGUF", ("org/name", "dir/sub/Model-Q4_K_M.GGUF", None)),
        ("https://huggingface.co/org/name/blob/main/a/b.gguf", ("org/name", "a/b.gguf", "main")),
        ("hf.co/org/name/resolve/refs/pr/3/b.gguf?download=true", ("org/name", "b.gguf", "refs/pr/3")),
        ("org/name", None),
        ("llama-3.1-8b", None),
        ("https://huggingface.co/org/name/blob/main/config.json", None),
        ("https://example.com/org/name/blob/main/b.gguf", None),
    ],
)
def test_model_forms(model: str, parsed: tuple[str, str, str | None] | None) -> None:
    from kvcalc.inputs.gguf.hub import parse_hub_gguf

    got = parse_hub_gguf(model)
    assert (None if got is None else (got.repo_id, got.filename, got.revision)) == parsed


def test_a_path_outside_the_repo_is_refused() -> None:
    from kvcalc.inputs.gguf.hub import parse_hub_gguf

    with pytest.raises(SourceError, match="not a file path inside a Hub repo"):
        parse_hub_gguf("org/name:../x.gguf")


def test_offload_of_a_hub_gguf_is_exact_per_layer(ranged: FakeHub, tmp_path: Path) -> None:
    """fit --gpu-layers on a Hub GGUF places the tensor bytes its header gives per layer: the 16 MiB
    blk.0.ffn_up tensor is layer 0's, the only weights in this 4-layer file. -ngl 4 of 4 layers + the
    output layer leaves layer 0 on the CPU (i_gpu_start = 4 + 1 - 4 = 1)."""
    serve_gguf(ranged, llama(tmp_path).read_bytes())
    result = run_subprocess(
        "fit", f"{REPO}:{FILE}", "--engine", "llama.cpp", "--gpu", "h100-sxm", "--gpu-layers", "4", "--json"
    )
    assert result.exit_code == 0, result.stderr
    gpu, cpu = result.json()["devices"]
    assert (gpu["weights_bytes"], cpu["weights_bytes"]) == (0, BIG_BYTES)
    notes = " ".join(result.json()["notes"])
    assert "split evenly" not in notes and "a GGUF file gives them exactly" not in notes
