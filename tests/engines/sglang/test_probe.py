"""``kvcalc probe --engine sglang``'s refusals, which need no SGLang: flags that do not apply, an
SGLang Python that is not there, and the child's own check of its request."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvcalc.engines.sglang.probe import PROBE_FILE, run_probe
from kvcalc.errors import UsageError


def test_flags_of_other_probes_are_refused(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("probe", "llama-3.1-8b", "--engine", "sglang", "--max-batched-tokens", "64")
    assert result.exit_code == 2
    assert "--max-batched-tokens does not apply to the SGLang probe" in result.stderr


@pytest.mark.parametrize(
    ("flags", "refused"),
    [
        # Read by no part of SGLang's probe, these ran it as if they were not given.
        (("--batch", "2"), "--batch does not apply"),
        (("--images", "1", "--device", "cpu"), "--images, --device do not apply"),
        (("--kv-bits", "4"), "--kv-bits does not apply"),
    ],
)
def test_flags_the_sglang_probe_never_read_are_refused(run_cli, flags: tuple[str, ...], refused: str) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("probe", "llama-3.1-8b", "--engine", "sglang", *flags)
    assert result.exit_code == 2
    assert result.stderr == f"kvcalc: error: {refused} to the SGLang probe (it builds SGLang's pools)\n"


def test_a_missing_sglang_python_is_one_line(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("KVCALC_SGLANG_PYTHON", "/nonexistent/python")
    result = run_cli("probe", "llama-3.1-8b", "--engine", "sglang")
    assert result.exit_code == 2
    assert "KVCALC_SGLANG_PYTHON '/nonexistent/python' is not a file" in result.stderr


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        ({"cases": []}, "non-empty 'cases' list"),
        ({"cases": [{"config": {}, "budget": 0}]}, "'budget' must be a whole number of bytes from 1 to"),
        ({"cases": [{"config": {}, "budget": 2**35}]}, "with its pools allocated"),
        ({"cases": [{"config": {}, "budget": 1024, "page_size": 0}]}, "'page_size' must be"),
        ({"cases": [{"config": {}, "budget": 1024, "kv_cache_dtype": "q4_0"}]}, "'kv_cache_dtype' must be one of"),
    ],
)
def test_the_child_checks_its_request_before_importing_sglang(request_: dict[str, object], message: str) -> None:
    # This Python has no SGLang: every refusal here comes before the import.
    done = subprocess.run([sys.executable, str(PROBE_FILE), "-"], input=json.dumps(request_), capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("sglang_probe: error:") and message in done.stderr


def test_a_timeout_stops_the_child(tmp_path: Path) -> None:
    slow = tmp_path / "slow.sh"
    slow.write_text("#!/bin/sh\nsleep 60\n")
    slow.chmod(0o755)
    with pytest.raises(UsageError, match="SGLang did not build its pools within 1 s"):
        run_probe(str(slow), {"cases": []}, timeout=1)
