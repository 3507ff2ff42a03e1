"""Hub repo ids, resolved by the real huggingface_hub against a pre-populated cache, offline.

huggingface_hub reads ``HF_HUB_OFFLINE``, ``HF_HUB_CACHE`` and ``HF_HOME`` when it is imported,
so every test here runs kvcalc in a fresh interpreter. ``HF_ENDPOINT`` points at a closed local
port as a second guard: even a request that slipped past offline mode could not leave the machine.
The cache and the ``hub_env`` fixture: tests/helpers/hub_cache.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kvcalc.inputs.hub import parse_hub_url
from tests.conftest import FIXTURES, CliResult, assert_one_line_error, run_subprocess
from tests.helpers.fake_hub import COMMIT, CONFIG_PATH, FakeHub, Reply, serve_config, serve_error
from tests.helpers.fake_hub import REPO as SERVED_REPO
from tests.helpers.hub_cache import LLAMA_31_8B_TOTAL, MAIN_HASH, QWEN3_8B_TOTAL, REPO, V2_HASH, HubCache, add_snapshot
from tests.helpers.hub_cache import REPO as CACHED_REPO
from tests.helpers.local_files import SUBPROCESS_TIMEOUT_S

# Runs the CLI with every way of opening a connection replaced by one that records the attempt,
# and with time.sleep a no-op so huggingface_hub's retry back-off (1+2+4+8+8 s) costs nothing.
NETWORK_GUARD = """
import json, os, socket, sys, time
time.sleep = lambda seconds: None
attempts = []
def refuse(*args, **kwargs):
    attempts.append(repr(args)[:200])
    raise OSError("network use refused by the test")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
from kvcalc.cli import main
try:
    main(sys.argv[1:])
finally:
    with open(os.environ["NETWORK_LOG"], "w") as log:
        json.dump(attempts, log)
"""


def estimate_json(*args: str) -> dict[str, object]:
    result = run_subprocess("estimate", *args, "--json")
    assert result.exit_code == 0, result.stderr
    data: dict[str, object] = result.json()
    return data


def test_cached_repo_resolves_offline(hub_env: HubCache) -> None:
    data = estimate_json(REPO, "--tokens", "2048")
    assert data["total_bytes"] == LLAMA_31_8B_TOTAL
    assert data["model"] == REPO
    assert data["model_type"] == "llama"


def test_revision_by_commit_hash_resolves_the_same_snapshot(hub_env: HubCache) -> None:
    data = estimate_json(REPO, "--tokens", "2048", "--revision", MAIN_HASH)
    assert data["total_bytes"] == LLAMA_31_8B_TOTAL


def test_revision_by_branch_name(hub_env: HubCache) -> None:
    assert estimate_json(REPO, "--tokens", "2048", "--revision", "main")["total_bytes"] == LLAMA_31_8B_TOTAL


def test_revision_selects_another_snapshot(hub_env: HubCache) -> None:
    """refs/v2 and its hash both lead to the Qwen3-8B snapshot, not to main's."""
    by_ref = estimate_json(REPO, "--tokens", "2048", "--revision", "v2")
    by_hash = estimate_json(REPO, "--tokens", "2048", "--revision", V2_HASH)
    assert by_ref["total_bytes"] == by_hash["total_bytes"] == QWEN3_8B_TOTAL
    assert by_ref["model_type"] == "qwen3"


def test_cache_found_through_hf_home(hub_env: HubCache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With only HF_HOME set, the cache is HF_HOME/hub."""
    home = tmp_path / "other-home"
    shutil.copytree(hub_env.root, home / "hub", symlinks=True)
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(home))
    assert estimate_json(REPO, "--tokens", "2048")["total_bytes"] == LLAMA_31_8B_TOTAL


def test_repo_not_in_cache(hub_env: HubCache) -> None:
    result = run_subprocess("estimate", "someorg/not-cached", "--tokens", "2048")
    assert_one_line_error(result, "someorg/not-cached", "not in the local Hugging Face cache")
    assert result.stdout == ""


def test_revision_not_in_cache(hub_env: HubCache) -> None:
    result = run_subprocess("estimate", REPO, "--revision", "1" * 40)
    assert_one_line_error(result, REPO, "at revision '" + "1" * 40 + "'", "not in the local Hugging Face cache")
    result = run_subprocess("estimate", REPO, "--revision", "no-such-branch")
    assert_one_line_error(result, "'no-such-branch'", "not in the local Hugging Face cache")


def test_snapshot_without_config_json(hub_env: HubCache) -> None:
    repo_dir = hub_env.root / "models--someorg--noconfig"
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "refs" / "main").write_text(MAIN_HASH, encoding="utf-8")
    (repo_dir / "snapshots" / MAIN_HASH).mkdir(parents=True)
    (repo_dir / "snapshots" / MAIN_HASH / "README.md").write_text("# no config\n", encoding="utf-8")
    result = run_subprocess("estimate", "someorg/noconfig")
    assert_one_line_error(result, "someorg/noconfig", "not in the local Hugging Face cache")


def test_cached_config_that_is_not_json(hub_env: HubCache) -> None:
    repo_dir = hub_env.root / "models--someorg--broken"
    add_snapshot(repo_dir, MAIN_HASH, '{"model_type": "llama", ', ref="main")
    result = run_subprocess("estimate", "someorg/broken")
    assert_one_line_error(result, "not valid JSON", "config.json")


def test_invalid_repo_id(hub_env: HubCache) -> None:
    result = run_subprocess("estimate", "someorg/a..b")
    assert_one_line_error(result, "'someorg/a..b'", "not a valid Hugging Face repo id")


def run_guarded(tmp_path: Path, *args: str) -> tuple[CliResult, list[str]]:
    log = tmp_path / "network.json"
    proc = subprocess.run(
        [sys.executable, "-c", NETWORK_GUARD, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", "NETWORK_LOG": str(log)},
        timeout=120,
        check=False,
    )
    attempts: list[str] = json.loads(log.read_text())
    return CliResult(proc.returncode, proc.stdout, proc.stderr), attempts


def test_offline_never_opens_a_connection(hub_env: HubCache, tmp_path: Path) -> None:
    result, attempts = run_guarded(tmp_path, "estimate", REPO, "--tokens", "2048", "--json")
    assert result.exit_code == 0, result.stderr
    assert result.json()["total_bytes"] == LLAMA_31_8B_TOTAL
    assert attempts == []
    # Not even when the file is missing and an online client would go and fetch it.
    result, attempts = run_guarded(tmp_path, "estimate", "someorg/not-cached")
    assert_one_line_error(result, "not in the local Hugging Face cache")
    assert attempts == []


def test_network_guard_sees_connections(hub_env: HubCache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Control for the test above: online, a missing repo does reach for the (closed) endpoint."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    result, attempts = run_guarded(tmp_path, "estimate", "someorg/not-cached")
    assert attempts != []
    assert result.exit_code != 0
    assert "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("kvcalc: error: Hub repo someorg/not-cached is not in the local"), last


def test_unreachable_hub_error_is_one_line(hub_env: HubCache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Online (HF_HUB_OFFLINE unset) with the Hub unreachable, huggingface_hub logs a warning per
    attempt ("... thrown while requesting HEAD ...", "Retrying in 1s [Retry 1/5]", ...); those
    once came before kvcalc's own line, 12 lines in all. (time.sleep is stubbed out here: the
    real back-off is 1+2+4+8+8 s.)"""
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    result, _ = run_guarded(tmp_path, "estimate", "someorg/not-cached")
    assert_one_line_error(result, "someorg/not-cached", "not in the local Hugging Face cache")


# --- huggingface_hub stays unimported unless a repo id needs it -----------------------------------


def assert_hub_not_imported(code: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", code + "\nassert 'huggingface_hub' not in sys.modules, 'imported'\n"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_preset_does_not_import_huggingface_hub() -> None:
    assert_hub_not_imported("import sys; from kvcalc.api import load_model; load_model('llama-3.1-8b')")


def test_local_file_does_not_import_huggingface_hub() -> None:
    path = FIXTURES / "Llama-3.1-8B.json"
    assert_hub_not_imported(f"import sys; from kvcalc.api import load_model; load_model({str(path)!r})")


def test_cli_with_preset_and_file_does_not_import_huggingface_hub() -> None:
    path = FIXTURES / "Qwen3-8B.json"
    assert_hub_not_imported(
        "import sys\n"
        "from kvcalc.cli import main\n"
        f"for model in ('llama-3.1-8b', {str(path)!r}, 'llama-3.1-8', './nope/config.json'):\n"
        "    try:\n"
        "        main(['estimate', model, '--json'])\n"
        "    except SystemExit:\n"
        "        pass\n"
    )


def test_hub_is_imported_for_a_repo_id(hub_env: HubCache) -> None:
    """The check above can fail: resolving a repo id does import huggingface_hub."""
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; from kvcalc.api import load_model; load_model({REPO!r}); "
            "assert 'huggingface_hub' in sys.modules",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


# A correctness bound, not a benchmark: kvcalc's default wait is 5 s, huggingface_hub's own 10 s
# plus a 23 s retry round (and 60 s per retry against a server that never answers).
FAIL_FAST_S = 15.0


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://huggingface.co/org/name", ("org/name", None)),
        ("https://huggingface.co/org/name/", ("org/name", None)),
        ("huggingface.co/org/name", ("org/name", None)),
        ("hf.co/org/name", ("org/name", None)),
        ("http://www.huggingface.co/org/name", ("org/name", None)),
        ("HTTPS://HuggingFace.co/Org/Name", ("Org/Name", None)),
        ("https://huggingface.co/org/name/tree/main", ("org/name", "main")),
        ("https://huggingface.co/org/name/tree/v2/", ("org/name", "v2")),
        ("https://huggingface.co/org/name/blob/main/config.json", ("org/name", "main")),
        ("https://huggingface.co/org/name/blob/main/config.json#L12", ("org/name", "main")),
        ("https://huggingface.co/org/name/resolve/v2/config.json?download=true", ("org/name", "v2")),
        ("hf.co/org/name/tree/refs%2Fpr%2F3", ("org/name", "refs/pr/3")),
        ("hf.co/org/name/tree/refs/pr/3", ("org/name", "refs/pr/3")),
        ("hf.co/org/name/blob/refs%2Fpr%2F3/config.json", ("org/name", "refs/pr/3")),
        ("hf.co/org/name/resolve/refs/pr/3/config.json", ("org/name", "refs/pr/3")),
        ("org/name", None),  # a repo id, not a URL
        ("llama-3.1-8b", None),
        ("./huggingface.co/org/name", None),  # a path
    ],
)
def test_hub_url_forms(url: str, expected: tuple[str, str | None] | None) -> None:
    assert parse_hub_url(url) == expected


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("https://github.com/org/name", "is not a Hugging Face URL"),
        ("ftp://huggingface.co/org/name", "is not a Hugging Face URL"),
        ("s3://bucket/model", "is not a Hugging Face URL"),
        ("https://huggingface.co/datasets/org/name", "is a dataset, not a model"),
        ("hf.co/spaces/org/name", "is a Space, not a model"),
        ("https://huggingface.co/gpt2", "is not a model repo URL"),
        ("https://huggingface.co/", "is not a model repo URL"),
        ("https://huggingface.co/docs/transformers", "is not a model repo URL"),
        ("https://huggingface.co/org/name/discussions/1", "is a page of Hub repo org/name"),
        ("https://huggingface.co/org/name/tree", "is a page of Hub repo org/name"),
        ("https://huggingface.co/org/name/tree/main/text_encoder", "is the folder text_encoder"),
        ("https://huggingface.co/org/name/blob/main/text_encoder/config.json", "is the file text_encoder/config.json"),
        ("https://huggingface.co/org/name/resolve/main/model.safetensors", "is the file model.safetensors"),
        ("https://huggingface.co:99999/org/name", "is not a valid URL"),
    ],
)
def test_other_urls_are_one_line(run_cli, url: str, needle: str) -> None:
    line = assert_one_line_error(run_cli("estimate", url), f"MODEL {url}", needle)
    assert "no such file" not in line


def test_hf_endpoint_host_is_a_hub_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """A private Hub or mirror in HF_ENDPOINT: its URLs name its repos."""
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example.com")
    assert parse_hub_url("https://hub.example.com/org/name/tree/v1") == ("org/name", "v1")


def test_url_revision_conflicting_with_revision_flag(run_cli) -> None:
    url = "https://huggingface.co/org/name/tree/v2"
    assert_one_line_error(run_cli("estimate", url, "--revision", "v3"), "names revision 'v2' but --revision is 'v3'")


@pytest.mark.parametrize(
    ("url", "total"),
    [
        (f"https://huggingface.co/{CACHED_REPO}", LLAMA_31_8B_TOTAL),
        (f"hf.co/{CACHED_REPO}/", LLAMA_31_8B_TOTAL),
        (f"https://huggingface.co/{CACHED_REPO}/tree/v2", QWEN3_8B_TOTAL),
        (f"huggingface.co/{CACHED_REPO}/tree/{V2_HASH}/", QWEN3_8B_TOTAL),
        (f"https://huggingface.co/{CACHED_REPO}/blob/v2/config.json", QWEN3_8B_TOTAL),
        (f"https://hf.co/{CACHED_REPO}/resolve/main/config.json?download=true", LLAMA_31_8B_TOTAL),
    ],
)
def test_a_url_reads_the_repo_and_revision_it_names(hub_env: HubCache, url: str, total: int) -> None:
    """Offline, from the cache: main holds Llama-3.1-8B, v2 (and its hash) Qwen3-8B."""
    result = run_subprocess("estimate", url, "--tokens", "2048", "--json")
    assert result.exit_code == 0, result.stderr
    data = result.json()
    assert (data["model"], data["total_bytes"]) == (CACHED_REPO, total)


def test_a_url_revision_equal_to_the_flag_is_fine(hub_env: HubCache) -> None:
    url = f"https://huggingface.co/{CACHED_REPO}/tree/v2"
    result = run_subprocess("estimate", url, "--revision", "v2", "--json")
    assert result.exit_code == 0, result.stderr
    assert result.json()["model_type"] == "qwen3"


def test_a_url_sizes_the_weights_of_its_repo(hub_env: HubCache) -> None:
    """fit --weights auto with a URL asks the Hub about the repo id (offline here: the way out)."""
    result = run_subprocess("fit", f"https://huggingface.co/{CACHED_REPO}/tree/v2", "--gpu", "h100-sxm")
    line = assert_one_line_error(result, f"Hub repo {CACHED_REPO}", "--weights SIZE")
    assert "https://" not in line


def test_offline_repo_with_a_preset_suggests_it(hub_env: HubCache) -> None:
    result = run_subprocess("estimate", "meta-llama/Llama-3.1-8B")
    assert_one_line_error(
        result,
        "not in the local Hugging Face cache",
        "; the bundled preset llama-3.1-8b describes meta-llama/Llama-3.1-8B: kvcalc estimate llama-3.1-8b",
    )


def test_the_preset_hint_ignores_case_and_needs_a_match(hub_env: HubCache) -> None:
    assert_one_line_error(run_subprocess("estimate", "Qwen/QWEN3-8B"), "the bundled preset qwen3-8b describes")
    line = assert_one_line_error(run_subprocess("estimate", "someorg/not-cached"), "not in the local")
    assert "preset" not in line


ON_FETCH = """
import json, sys
from kvcalc.api import load_model
from kvcalc.errors import KvcalcError
said = []
try:
    load_model(sys.argv[1], on_fetch=said.append)
except KvcalcError as exc:
    said.append(f"error: {exc}")
print(json.dumps(said))
"""


def fetch_messages(model: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", ON_FETCH, model],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    said: list[str] = json.loads(proc.stdout)
    return said


def test_on_fetch_is_called_before_a_download(hub: FakeHub) -> None:
    serve_config(hub)
    assert fetch_messages(f"https://huggingface.co/{SERVED_REPO}/tree/main") == [
        f"fetching config.json of {SERVED_REPO} at revision main from the Hub..."
    ]
    assert hub.seen()[0][0] == "HEAD"


def test_on_fetch_is_not_called_offline_or_for_local_models(hub_env: HubCache) -> None:
    assert fetch_messages(CACHED_REPO) == []
    assert fetch_messages("llama-3.1-8b") == []
    assert fetch_messages(str(FIXTURES / "Llama-3.1-8B.json")) == []


SILENT_LIFETIME_S = 60.0  # the server goes away by itself even if the fixture's finalizer never runs


@dataclass
class SilentHub:
    """Accepts TCP connections on 127.0.0.1 and never sends a byte back."""

    listener: socket.socket
    stop: threading.Event = field(default_factory=threading.Event)
    held: list[socket.socket] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def serve(self) -> None:
        deadline = time.monotonic() + SILENT_LIFETIME_S
        self.listener.settimeout(0.1)
        while not self.stop.is_set() and time.monotonic() < deadline:
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            self.held.append(connection)  # kept open, unanswered
        for connection in self.held:
            connection.close()
        self.listener.close()


def online_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, endpoint: str) -> None:
    """As the ``hub`` fixture (tests/helpers/fake_hub.py): online, an empty cache, loopback only, no token."""
    proxies = {"http_proxy", "https_proxy", "all_proxy"}  # loopback must not go through a proxy
    for name in list(os.environ):
        if name.startswith(("HF_", "HUGGINGFACE_", "HUGGING_FACE_", "TRANSFORMERS_OFFLINE")) or name.lower() in proxies:
            monkeypatch.delenv(name)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")


@pytest.fixture
def silent_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SilentHub]:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    silent = SilentHub(listener)
    thread = threading.Thread(target=silent.serve, daemon=True)
    thread.start()
    online_env(monkeypatch, tmp_path, silent.endpoint)
    try:
        yield silent
    finally:
        silent.stop.set()
        thread.join(timeout=5)
        assert not thread.is_alive()


def timed_estimate(model: str, env: dict[str, str] | None = None) -> tuple[float, str]:
    start = time.monotonic()
    result = run_subprocess("estimate", model, env=env)
    elapsed = time.monotonic() - start
    return elapsed, assert_one_line_error(result, model)


def test_a_hub_that_never_answers_fails_fast(silent_hub: SilentHub) -> None:
    elapsed, line = timed_estimate("meta-llama/Llama-3.1-8B")
    assert elapsed < FAIL_FAST_S, f"{elapsed:.1f} s: {line}"
    assert "did not answer within 5 s (HF_HUB_ETAG_TIMEOUT)" in line
    assert "kvcalc estimate llama-3.1-8b" in line  # the preset hint holds for a silent Hub too
    assert len(silent_hub.held) == 1  # one attempt: no second round of retries


def test_hf_hub_etag_timeout_is_honoured(silent_hub: SilentHub) -> None:
    elapsed, line = timed_estimate("org/name", env={"HF_HUB_ETAG_TIMEOUT": "1"})
    assert "did not answer within 1 s" in line
    assert elapsed < FAIL_FAST_S


def test_a_refused_connection_fails_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No server at all: huggingface_hub once retried 5 times over 23 s before giving up."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # the port is now closed: connections are refused
    online_env(monkeypatch, tmp_path, f"http://127.0.0.1:{port}")
    elapsed, line = timed_estimate("org/name")
    assert "cannot be reached" in line
    assert elapsed < FAIL_FAST_S


def test_the_retry_switches_are_restored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kvcalc empties huggingface_hub's retry switches only for the duration of its own call."""
    online_env(monkeypatch, tmp_path, "http://127.0.0.1:9")
    script = (
        "from huggingface_hub import file_download\n"
        "from kvcalc.errors import SourceError\n"
        "from kvcalc.inputs.hub import fetch_hub_config\n"
        "before = (file_download._DEFAULT_RETRY_ON_EXCEPTIONS, file_download._DEFAULT_RETRY_ON_STATUS_CODES)\n"
        "try:\n"
        "    fetch_hub_config('org/name')\n"
        "except SourceError:\n"
        "    pass\n"
        "after = (file_download._DEFAULT_RETRY_ON_EXCEPTIONS, file_download._DEFAULT_RETRY_ON_STATUS_CODES)\n"
        "assert before == after and all(after), after\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, check=False
    )
    assert proc.returncode == 0, proc.stderr


# kvcalc's real huggingface_hub calls against a tiny fake Hub on 127.0.0.1.
#
# tests/inputs/test_hub.py covers the offline paths with a pre-populated cache; here huggingface_hub
# really talks HTTP: HEAD then GET on ``/<repo>/resolve/<revision>/config.json``, and it turns the
# Hub's error replies (status plus ``X-Error-Code``) into GatedRepoError, RepositoryNotFoundError,
# RevisionNotFoundError and RemoteEntryNotFoundError, which kvcalc turns into one line each.
#
# The fake Hub (tests/helpers/fake_hub.py, the ``hub`` fixture) binds to 127.0.0.1 only, on a port the
# OS picks, and is shut down by the fixture's finalizer (or by a timer, whichever comes first). Every
# error reply uses a status that huggingface_hub does not retry (401, 403, 404: its retry list is 408,
# 429 and 5xx), so no test waits for its back-off. kvcalc runs in a fresh interpreter because
# huggingface_hub reads ``HF_ENDPOINT``, ``HF_HUB_OFFLINE`` and the cache paths when it is imported.
TOKEN = "hf_test123"


def estimate(*extra: str, env: dict[str, str] | None = None) -> CliResult:
    return run_subprocess("estimate", SERVED_REPO, "--tokens", "2048", "--json", *extra, env=env)


# --- success, then the cached copy -----------------------------------------------------------------


def test_downloads_config_then_reads_it_from_the_cache(hub: FakeHub, tmp_path: Path) -> None:
    etag = serve_config(hub)

    result = estimate()
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    data = result.json()
    assert data["total_bytes"] == LLAMA_31_8B_TOTAL
    assert data["model"] == SERVED_REPO
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
    serve_error(hub, status, "GatedRepo", f"Access to model {SERVED_REPO} is restricted.")
    result = estimate(env=env)
    line = assert_one_line_error(result, SERVED_REPO, "gated", "HF_TOKEN")
    assert "not found" not in line
    assert hub.seen() == [("HEAD", CONFIG_PATH)]


@pytest.mark.parametrize("status", [401, 404])  # the Hub answers 401 to anonymous callers, else 404
def test_repo_not_found(hub: FakeHub, status: int) -> None:
    serve_error(hub, status, "RepoNotFound", "Repository not found")
    result = estimate()
    line = assert_one_line_error(result, f"Hub repo {SERVED_REPO} not found", "HF_TOKEN")
    assert "gated" not in line
    assert hub.seen() == [("HEAD", CONFIG_PATH)]


def test_revision_not_found(hub: FakeHub) -> None:
    path = f"/{SERVED_REPO}/resolve/nope/config.json"
    serve_error(hub, 404, "RevisionNotFound", "Invalid rev id: nope", path=path)
    result = estimate("--revision", "nope")
    assert_one_line_error(result, SERVED_REPO, "has no revision 'nope'")
    assert hub.seen() == [("HEAD", path)]


def test_entry_not_found(hub: FakeHub, tmp_path: Path) -> None:
    serve_error(hub, 404, "EntryNotFound", "Entry not found")
    result = estimate()
    assert_one_line_error(result, f"Hub repo {SERVED_REPO} has no config.json")
    assert hub.seen() == [("HEAD", CONFIG_PATH)]
    # huggingface_hub remembers the missing file under the commit the Hub named.
    repo_dir = tmp_path / "hub-cache" / "models--org--name"
    assert (repo_dir / ".no_exist" / COMMIT / "config.json").is_file()


def test_entry_not_found_at_a_revision_names_it(hub: FakeHub) -> None:
    path = f"/{SERVED_REPO}/resolve/v2/config.json"
    serve_error(hub, 404, "EntryNotFound", "Entry not found", path=path)
    result = estimate("--revision", "v2")
    assert_one_line_error(result, f"Hub repo {SERVED_REPO} at revision 'v2' has no config.json")
    assert hub.seen() == [("HEAD", path)]


def test_missing_default_branch_does_not_print_none(hub: FakeHub) -> None:
    """An empty repo (no main branch) answers RevisionNotFound for the default revision."""
    serve_error(hub, 404, "RevisionNotFound", "Invalid rev id: main")
    result = estimate()
    line = assert_one_line_error(result, SERVED_REPO, "has no revision 'main'")
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
    assert_one_line_error(estimate(), f"config.json of Hub repo {SERVED_REPO}", "not valid JSON")
