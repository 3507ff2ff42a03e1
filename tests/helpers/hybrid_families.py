"""What the Falcon-H1 and Zamba2 test modules share: bytes under an engine, and a probe run."""

from __future__ import annotations

from typing import Any

import pytest

from kvcalc.calc.estimate import Workload, estimate
from kvcalc.engines import make_engine
from kvcalc.spec import ModelSpec


def _bytes(spec: ModelSpec, engine: str, tokens: int = 4096) -> tuple[int, int]:
    est = estimate(spec, Workload(tokens=tokens), engine=make_engine(engine)[0])
    return est.per_token_bytes, est.fixed_bytes_per_sequence


def _probe(run_cli: Any, model: str) -> dict[str, Any]:
    pytest.importorskip("torch", reason="the probe extra (torch) is not installed")
    pytest.importorskip("transformers", reason="the probe extra (transformers) is not installed")
    result = run_cli("probe", model, "--tokens", "300", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.stderr + result.stdout
    data: dict[str, Any] = result.json()
    return data
