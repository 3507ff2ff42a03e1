"""Hub repo ids, resolved by the real huggingface_hub against a pre-populated cache, offline.

huggingface_hub reads ``HF_HUB_OFFLINE``, ``HF_HUB_CACHE`` and ``HF_HOME`` when it is imported,
so every test here runs kvcalc in a fresh interpreter. ``HF_ENDPOINT`` points at a closed local
port as a second guard: even a request that slipped past offline mode could not leave the machine.
The cache and the ``hub_env`` fixture: tests/helpers/hub_cache.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, CliResult, assert_one_line_error, run_subprocess
from tests.helpers.hub_cache import LLAMA_31_8B_TOTAL, MAIN_HASH, QWEN3_8B_TOTAL, REPO, V2_HASH, HubCache, add_snapshot

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
