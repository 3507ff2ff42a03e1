"""The transformers release the rules were read from: pinned for the tests, named when another runs."""

from __future__ import annotations

import tomllib
from pathlib import Path

from kvcalc.engines.transformers import RULES_VERSION, version_warning

ROOT = Path(__file__).resolve().parents[2]


def test_the_test_extra_pins_the_release_the_rules_were_read_from() -> None:
    # A range let pip bring 5.25, which caches Falcon-40B's 8 KV heads unbroadcast: a fresh install
    # failed its own tests. The pin and the rules' release are one fact.
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert f"transformers=={RULES_VERSION}" in extras["test"]


def test_another_release_is_named_in_one_line() -> None:
    line = version_warning("5.25.0")
    assert line is not None and "\n" not in line
    assert "5.25.0" in line and "5.24.0" in line and line.startswith("warning:")


def test_the_same_release_says_nothing() -> None:
    assert version_warning(RULES_VERSION) is None
