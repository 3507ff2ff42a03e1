"""A pre-populated Hugging Face cache, offline: Hub repo ids resolved by the real huggingface_hub
without a network.

The ``hub_env`` fixture (made available to every test by tests/conftest.py) lays out REPO as
huggingface_hub does (blobs, snapshot symlinks, refs) and points an offline environment at it, with
``HF_ENDPOINT`` on a closed local port as a second guard. kvcalc must run in a fresh interpreter
(tests.conftest ``run_subprocess``): huggingface_hub reads ``HF_HUB_OFFLINE``, ``HF_HUB_CACHE`` and
``HF_HOME`` when it is imported.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.paths import FIXTURES

REPO = "someorg/somemodel"  # the repo in the cache
MAIN_HASH = "0123456789abcdef0123456789abcdef01234567"  # main: Llama-3.1-8B
V2_HASH = "fedcba9876543210fedcba9876543210fedcba98"  # v2: Qwen3-8B
LLAMA_31_8B_TOTAL = 2 * 32 * 2048 * 8 * 128 * 2  # 268,435,456: the seed's worked example
QWEN3_8B_TOTAL = 2 * 36 * 2048 * 8 * 128 * 2  # 36 layers, 8 KV heads, head_dim 128, bf16


@dataclass
class HubCache:
    """A Hugging Face cache folder (HF_HUB_CACHE) and REPO's folder in it."""

    root: Path
    repo_dir: Path


def add_snapshot(repo_dir: Path, commit: str, config_text: str, *, ref: str | None = None) -> Path:
    """Lay out one snapshot as huggingface_hub does: a blob, a symlink to it, and maybe a ref."""
    blob_name = f"{commit[:8]}{len(config_text):08x}"  # stands in for the file's etag
    blobs = repo_dir / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    (blobs / blob_name).write_text(config_text, encoding="utf-8")
    snapshot = repo_dir / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (snapshot / "config.json").symlink_to(Path("..", "..", "blobs", blob_name))
    if ref is not None:
        refs = repo_dir / "refs"
        refs.mkdir(exist_ok=True)
        (refs / ref).write_text(commit, encoding="utf-8")  # no newline, as huggingface_hub writes it
    return snapshot / "config.json"


def build_cache(root: Path) -> HubCache:
    """A cache under ``root`` holding REPO: main (Llama-3.1-8B) and v2 (Qwen3-8B), each with its ref."""
    repo_dir = root / f"models--{REPO.replace('/', '--')}"
    add_snapshot(repo_dir, MAIN_HASH, (FIXTURES / "Llama-3.1-8B.json").read_text(), ref="main")
    add_snapshot(repo_dir, V2_HASH, (FIXTURES / "Qwen3-8B.json").read_text(), ref="v2")
    return HubCache(root, repo_dir)


@pytest.fixture
def hub_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> HubCache:
    """An offline environment whose Hugging Face cache holds REPO (main: Llama-3.1-8B, v2: Qwen3-8B)."""
    for name in list(os.environ):
        if name.startswith(("HF_", "HUGGINGFACE_")) or name == "TRANSFORMERS_OFFLINE":
            monkeypatch.delenv(name)
    cache = build_cache(tmp_path / "hub-cache")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache.root))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # token and other state: not ~/.cache
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    return cache
