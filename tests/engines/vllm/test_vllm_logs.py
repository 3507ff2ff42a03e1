"""The real vLLM start-up logs kept as test data (benchmarks/data/vllm_logs_*.yaml) and the
benchmark that compares kvcalc's KV budget with them (benchmarks/vllm_budget.py). The accuracy goal
itself is a benchmark, not a test; here the data's shape and one record's derivation by hand."""

from __future__ import annotations

import importlib.util
import sys
from fractions import Fraction
from types import ModuleType

import pytest

from tests.helpers.paths import ROOT


def _benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vllm_budget", ROOT / "benchmarks" / "vllm_budget.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["vllm_budget"] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


BENCH = _benchmark()
RECORDS = BENCH.load_records()


def test_records_are_cited_and_complete() -> None:
    assert len(RECORDS) >= 30
    ids = [r["id"] for r in RECORDS]
    assert len(ids) == len(set(ids))
    for r in RECORDS:
        assert str(r.get("source", "")).strip(), r["id"]
        assert r.get("engine_mode") in ("v0", "v1"), r["id"]
        # A record kept for its breakdown alone says why it is not compared.
        assert (r.get("model") and r.get("gpu")) or str(r.get("exclude", "")).strip(), r["id"]
        logged = r["logged"]
        assert logged.get("weights_gib") is not None or logged.get("available_kv_gib") is not None, r["id"]


def test_one_record_by_hand() -> None:
    # llm-d's H100 run of Llama-3.1-8B-Instruct (vLLM image of the 0.11 era): total 79.18 GiB =
    # 85,018,877,624 B; x 0.9 = 76,516,989,861; weights 14.99 GiB = 16,095,389,941; kvcalc's runtime
    # for 0.11 on an H100 (8,192 batched tokens, 1,024 rows): activation 5,230,743,885 (the sort-based
    # sampler, tests/calc/test_runtime.py) + non-torch 146,800,640. Logged: 51.38 GiB = 55,168,854,917.
    record = next(r for r in RECORDS if r["id"] == "llmd-h100-llama31-8b-16k")
    row = BENCH.evaluate(record, BENCH._models())
    assert row.logged == int(Fraction("51.38") * 2**30) == 55_168_854_917
    assert row.derived == 76_516_989_861 - 16_095_389_941 - 5_230_743_885 - 146_800_640 == 55_044_055_395
    assert row.error == pytest.approx(-0.00226, abs=1e-5)


def test_left_out_records_say_why() -> None:
    rows = [BENCH.evaluate(r, BENCH._models()) for r in RECORDS]
    for row in rows:
        assert (row.error is None) == bool(row.reason), row.id
    v0 = [row for row in rows if row.id == "vllm-12330-llama3-8b-a100-40gb"]
    assert v0 and "V0 engine" in v0[0].reason


def test_benchmark_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert BENCH.main([]) == 0
    out = capsys.readouterr().out
    assert "p90" in out and "left out" in out
