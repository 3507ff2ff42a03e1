"""The real configs of Kimi-Linear, Granite-4.0-H-Micro and Nemotron-3-Nano (tests/fixtures) and the
probe of one on CPU, shared by tests/inputs/hf/families/test_{kimi_linear,granitemoehybrid,nemotron_h}.py
and tests/inputs/hf/test_families.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import FIXTURES

KIMI = "Kimi-Linear-48B-A3B-Instruct.json"
GRANITE = "granite-4.0-h-micro.json"
NANO = "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json"


def probe_fixture(run_cli: Any, fixture: str, *options: str) -> dict[str, Any]:
    pytest.importorskip("torch", reason="the probe extra (torch) is not installed")
    pytest.importorskip("transformers", reason="the probe extra (transformers) is not installed")
    result = run_cli("probe", str(FIXTURES / fixture), "--tokens", "300", "--device", "cpu", "--json", *options)
    assert result.exit_code == 0, result.stderr + result.stdout
    data: dict[str, Any] = result.json()
    assert data["match"] is True
    return data


def measured_by_kind(data: dict[str, Any]) -> dict[str, tuple[int, int, int]]:
    return {k["kind"]: (k["layers"], k["measured_bytes"], k["estimated_bytes"]) for k in data["kinds"]}
