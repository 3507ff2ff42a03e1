"""kvcalc's real huggingface_hub calls against a tiny fake Hub on 127.0.0.1.

tests/inputs/test_hub.py covers the offline paths with a pre-populated cache; here huggingface_hub
really talks HTTP: HEAD then GET on ``/<repo>/resolve/<revision>/config.json``, and it turns the
Hub's error replies (status plus ``X-Error-Code``) into GatedRepoError, RepositoryNotFoundError,
RevisionNotFoundError and RemoteEntryNotFoundError, which kvcalc turns into one line each.

The fake Hub (tests/helpers/fake_hub.py, the ``hub`` fixture) binds to 127.0.0.1 only, on a port the
OS picks, and is shut down by the fixture's finalizer (or by a timer, whichever comes first). Every
error reply uses a status that huggingface_hub does not retry (401, 403, 404: its retry list is 408,
429 and 5xx), so no test waits for its back-off. kvcalc runs in a fresh interpreter because
huggingface_hub reads ``HF_ENDPOINT``, ``HF_HUB_OFFLINE`` and the cache paths when it is imported.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, CliResult, assert_one_line_error, run_subprocess
from tests.helpers.fake_hub import (
    COMMIT,
    CONFIG_PATH,
    REPO,
    FakeHub,
    Reply,
    serve_config,
    serve_error,
)

LLAMA_31_8B_TOTAL = 2 * 32 * 2048 * 8 * 128 * 2  # 268,435,456: the seed's worked example
TOKEN = "hf_test123"


def estimate(*extra: str, env: dict[str, str] | None = None) -> CliResult:
    return run_subprocess("estimate", REPO, "--tokens", "2048", "--json", *extra, env=env)


# --- success, then the cached copy -----------------------------------------------------------------


def test_downloads_config_then_reads_it_from_the_cache(hub: FakeHub, tmp_path: Path) -> None:
    etag = serve_config(hub)

    result = estimate()
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    data = result.json()
    assert data["total_bytes"] == LLAMA_31_8B_TOTAL
    assert data["model"] == REPO
    assert data["model_type"] == "llama"
    assert hub.seen() == [("HEAD", CONFIG_PATH), ("GET", CONFIG_PATH)]
    assert all("authorization" not in r.headers for r in hub.requests)  # no HF_TOKEN, no stored token

    # huggingface_hub's cache layout: the blob named by the etag, a snapshot link, refs/main.
    repo_dir = tmp_path / "hub-cache" / "models--org--name"
    assert (repo_dir / "refs" / "main").read_text() == COMMIT
    assert (repo_dir / "blobs" / etag).read_bytes() == (FIXTURES / "Llama-3.1-8B.json").read_bytes()
    snapshot = repo_dir / "snapshots" / COMMIT / "config.json"
    assert snapshot.resolve() == (repo_dir / "blobs" / etag).resolve()

    hub.stop()
    # Online with the Hub down (connection refused): huggingface_hub falls back to the cached copy.
    online = estimate()
    assert online.exit_code == 0, online.stderr
    assert online.json()["total_bytes"] == LLAMA_31_8B_TOTAL
    # Offline: straight from the cache.
    offline = estimate(env={"HF_HUB_OFFLINE": "1"})
    assert offline.exit_code == 0, offline.stderr
    assert offline.stderr == ""
    assert offline.json()["total_bytes"] == LLAMA_31_8B_TOTAL
    assert len(hub.requests) == 2  # nothing reached the (stopped) server after the first run


def test_hf_token_is_sent_as_a_bearer_token(hub: FakeHub) -> None:
    serve_config(hub)
    result = estimate(env={"HF_TOKEN": TOKEN})
    assert result.exit_code == 0, result.stderr
    assert result.json()["total_bytes"] == LLAMA_31_8B_TOTAL
    assert hub.seen() == [("HEAD", CONFIG_PATH), ("GET", CONFIG_PATH)]
    for request in hub.requests:
        assert request.headers.get("authorization") == f"Bearer {TOKEN}", request


# --- each way the Hub says no: one line, one request (no retries) -------------------------------------


@pytest.mark.parametrize(
    ("status", "env"),
    [
        (401, {}),  # anonymous request to a gated repo
        (403, {"HF_TOKEN": TOKEN}),  # a token whose user has not accepted the terms
    ],
)
def test_gated_repo(hub: FakeHub, status: int, env: dict[str, str]) -> None:
    serve_error(hub, status, "GatedRepo", f"Access to model {REPO} is restricted.")
    result = estimate(env=env)
    line = assert_one_line_error(result, REPO, "gated", "HF_TOKEN")
    assert "not found" not in line
    assert hub.seen() == [("HEAD", CONFIG_PATH)]


@pytest.mark.parametrize("status", [401, 404])  # the Hub answers 401 to anonymous callers, else 404
def test_repo_not_found(hub: FakeHub, status: int) -> None:
    serve_error(hub, status, "RepoNotFound", "Repository not found")
    result = estimate()
    line = assert_one_line_error(result, f"Hub repo {REPO} not found", "HF_TOKEN")
    assert "gated" not in line
    assert hub.seen() == [("HEAD", CONFIG_PATH)]


def test_revision_not_found(hub: FakeHub) -> None:
    path = f"/{REPO}/resolve/nope/config.json"
    serve_error(hub, 404, "RevisionNotFound", "Invalid rev id: nope", path=path)
    result = estimate("--revision", "nope")
    assert_one_line_error(result, REPO, "has no revision 'nope'")
    assert hub.seen() == [("HEAD", path)]


def test_entry_not_found(hub: FakeHub, tmp_path: Path) -> None:
    serve_error(hub, 404, "EntryNotFound", "Entry not found")
    result = estimate()
    assert_one_line_error(result, f"Hub repo {REPO} has no config.json")
    assert hub.seen() == [("HEAD", CONFIG_PATH)]
    # huggingface_hub remembers the missing file under the commit the Hub named.
    repo_dir = tmp_path / "hub-cache" / "models--org--name"
    assert (repo_dir / ".no_exist" / COMMIT / "config.json").is_file()


def test_entry_not_found_at_a_revision_names_it(hub: FakeHub) -> None:
    path = f"/{REPO}/resolve/v2/config.json"
    serve_error(hub, 404, "EntryNotFound", "Entry not found", path=path)
    result = estimate("--revision", "v2")
    assert_one_line_error(result, f"Hub repo {REPO} at revision 'v2' has no config.json")
    assert hub.seen() == [("HEAD", path)]


def test_missing_default_branch_does_not_print_none(hub: FakeHub) -> None:
    """An empty repo (no main branch) answers RevisionNotFound for the default revision."""
    serve_error(hub, 404, "RevisionNotFound", "Invalid rev id: main")
    result = estimate()
    line = assert_one_line_error(result, REPO, "has no revision 'main'")
    assert "None" not in line
    assert hub.seen() == [("HEAD", CONFIG_PATH)]


def test_rejected_token_names_hf_token(hub: FakeHub) -> None:
    hub.replies[CONFIG_PATH] = Reply(401, {"X-Error-Message": "Invalid credentials in Authorization header"})
    result = estimate(env={"HF_TOKEN": "hf_wrong"})
    assert_one_line_error(result, "refused the credentials", "HF_TOKEN")


@pytest.mark.parametrize(
    ("reply", "needle"),
    [
        (Reply(403, {"X-Error-Message": "Access to this resource is disabled."}), "HTTP 403"),
        (Reply(400, {}), "HTTP 400"),
        # A 200 without X-Repo-Commit is what a web server that is not a Hub answers.
        (Reply(200, {"Content-Length": "2"}, b"{}"), "HF_ENDPOINT"),
    ],
)
def test_an_answering_server_is_not_called_unreachable(hub: FakeHub, reply: Reply, needle: str) -> None:
    hub.replies[CONFIG_PATH] = reply
    line = assert_one_line_error(estimate(), "org/name", needle)
    assert "cannot be reached" not in line


def test_a_cached_config_that_is_not_json_names_the_repo(hub: FakeHub) -> None:
    body = b"not json"
    sha = hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()
    headers = {"ETag": f'"{sha}"', "X-Repo-Commit": COMMIT, "Content-Length": str(len(body))}
    hub.replies[CONFIG_PATH] = Reply(200, headers, body)
    assert_one_line_error(estimate(), f"config.json of Hub repo {REPO}", "not valid JSON")
