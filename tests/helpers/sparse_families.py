"""What the GLM-5 and MiniMax-M3 test modules share: bytes a token under an engine, and a probe run.

The sources, as the module these tests were split from gave them:

Sparse-attention indexer key caches of GLM-5 (``glm_moe_dsa``, shared indexers included) and
MiniMax-M3 (``minimax_m3_vl``): kvcalc.inputs.hf.families.glm_moe_dsa and kvcalc.inputs.hf.families.minimax_m3.

Every number below is derived by hand in the comment beside it from the configs' fields."""

from __future__ import annotations

from typing import Any

import pytest

from kvcalc.calc.estimate import Workload, estimate
from kvcalc.engines import make_engine
from kvcalc.spec import ModelSpec
from tests.helpers.paths import FIXTURES

GLM51, GLM53, MINIMAX = "GLM-5.1.json", "GLM-5.3-w4a16.json", "MiniMax-M3.json"


def _per_token(spec: ModelSpec, engine: str, **workload: Any) -> int:
    chosen, _ = make_engine(engine, uses_mla=any(c.is_latent for c in spec.caches))
    return estimate(spec, Workload(tokens=workload.pop("tokens", 1), **workload), engine=chosen).per_token_bytes


def _probe(run_cli: Any, fixture: str, tokens: int) -> dict[str, Any]:
    pytest.importorskip("torch", reason="the probe extra (torch) is not installed")
    pytest.importorskip("transformers", reason="the probe extra (transformers) is not installed")
    result = run_cli("probe", str(FIXTURES / fixture), "--tokens", str(tokens), "--device", "cpu", "--json")
    assert result.exit_code == 0, result.stderr + result.stdout
    data: dict[str, Any] = result.json()
    assert data["match"] is True
    return data
