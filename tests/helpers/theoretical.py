"""calc's entry points with the theoretical engine as the default, for the tests that ask what
attention must keep: calc itself imports no engine, so its callers (the API) always pass one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kvcalc.calc import compare as _compare
from kvcalc.calc import estimate as _estimate
from kvcalc.calc.contracts import StorageRules
from kvcalc.engines import THEORETICAL
from kvcalc.spec import ModelSpec


def estimate(
    spec: ModelSpec, workload: _estimate.Workload, *, engine: StorageRules = THEORETICAL
) -> _estimate.Estimate:
    return _estimate.estimate(spec, workload, engine=engine)


def compile_plan(spec: ModelSpec, workload: _estimate.Workload, engine: StorageRules = THEORETICAL) -> _estimate.Plan:
    return _estimate.compile_plan(spec, workload, engine)


def compare(
    candidates: Sequence[_compare.Candidate],
    *,
    engine: StorageRules | Callable[[ModelSpec], StorageRules] = THEORETICAL,
    **kwargs: Any,
) -> _compare.Comparison:
    return _compare.compare(candidates, engine=engine, **kwargs)
