"""Local files as tests make them: a marker for systems with named pipes, the time a subprocess may
take before a regression that blocks fails, and a folder holding a real config.json."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.paths import FIXTURES

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this system")


# A regression that blocks again must fail the test, not hang the suite.
SUBPROCESS_TIMEOUT_S = 60


def llama_config(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text((FIXTURES / "Llama-3.1-8B.json").read_text(), encoding="utf-8")
    return path
