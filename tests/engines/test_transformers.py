"""The transformers release the rules were read from: pinned for the tests, named when another runs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

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


# The sweep over every model type the installed transformers ships (scripts/transformers_sweep.py):
# each one's default config and every real config in the repository, as a tiny random model with a
# real prefill and decode, is exact against kvcalc's --engine transformers figure, refused or warned
# naming the field, or not runnable by transformers itself, as docs/transformers-coverage.json
# records; and the README states the recorded counts.
RECORD = ROOT / "docs" / "transformers-coverage.json"


def _record() -> dict:
    return json.loads(RECORD.read_text())


def test_every_model_type_is_exact_refused_or_recorded() -> None:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    recorded = _record()
    if transformers.__version__ != recorded["transformers"]:
        pytest.skip(f"the record is of transformers {recorded['transformers']}; rerun the sweep with --write")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "transformers_sweep.py"), "--check"],
        capture_output=True, text=True, timeout=1800, check=False, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_no_case_is_a_mismatch_and_every_refusal_names_its_cause() -> None:
    cases = _record()["cases"]
    assert not [k for k, c in cases.items() if c["outcome"] == "mismatch"]
    for key, case in cases.items():
        if case["outcome"] == "refused":
            # A refusal names the config field (quoted) or the mechanism it does not model.
            assert "'" in case["detail"] or "not modelled" in case["detail"], key
        if case["outcome"].startswith("warned"):
            assert case["detail"], key


def test_readme_states_the_recorded_coverage() -> None:
    counts = _record()["summary"]
    text = (ROOT / "README.md").read_text()
    match = re.search(r"Of the (\d+) model types .*?: (\d+) exact,", text, re.S)
    assert match, "README states the sweep's coverage"
    assert int(match.group(1)) == sum(counts.values())
    assert int(match.group(2)) == counts["exact"]
    table = (ROOT / "docs" / "transformers-coverage.md").read_text()
    assert all(f"| {key} |" in table for key in _record()["cases"])
