"""vLLM's own KV sizing tests, ported to kvcalc's vllm engine.

Source: vllm-project/vllm, tests/v1/core/test_kv_cache_utils.py at commit eaba533a5e38 (the
formulas it checks: vllm/v1/kv_cache_interface.py and vllm/v1/core/kv_cache_utils.py at 001cabc1).
Each case keeps vLLM's inputs and expected values; the layer specs become kvcalc cache entries.
"""

from __future__ import annotations

import importlib.util
import sys
from fractions import Fraction
from types import ModuleType

import pytest

from kvcalc import load_model
from kvcalc.calc.estimate import Workload
from kvcalc.calc.fit import fit
from kvcalc.dtypes import FP16, FP32
from kvcalc.engines import VLLM
from kvcalc.engines.vllm.capacity import vllm_plan
from kvcalc.errors import UsageError
from kvcalc.spec import AttentionCache, LayerCache, ModelSpec
from tests.helpers.paths import ROOT

GiB = 2**30


def model(*caches: LayerCache, heads: int = 32) -> ModelSpec:
    return ModelSpec(name="t", caches=caches, layers=len(caches), query_heads=heads, model_type="test", dtype=None)


# new_kv_cache_spec() defaults: block 16, 2 KV heads x 64, float32 -> page 16 x 2 x 128 x 4 = 16,384 B.
FULL = AttentionCache(kv_heads=2, k_head_dim=64, v_head_dim=64)
SLIDING = AttentionCache(kv_heads=2, k_head_dim=64, v_head_dim=64, window=1)
M = 16 * 2 * 64 * 4 * 2  # mem_per_block_per_layer in the test: 16,384
FP32_LOAD = Workload(tokens=16, kv_dtype=FP32)


@pytest.mark.parametrize(("max_model_len", "want"), [(16385, 16384), (16383, 16383)])
def test_estimate_max_model_len(max_model_len: int, want: int) -> None:
    # 32 layers of FullAttentionSpec(16, 32 heads, 128, fp16), 8 GiB: "16384 model_len need 8GB"
    # (32 layers x cdiv(16384, 16) blocks x 16 x 32 x 256 x 2 B = 8 GiB).
    spec = model(*[AttentionCache(32, 128, 128)] * 32)
    plan = vllm_plan(spec, Workload(tokens=1, kv_dtype=FP16), VLLM(), 8 * GiB)
    assert plan.max_context(1, limit=max_model_len) == want


FULL_FP16 = AttentionCache(32, 128, 128)
SW_FP16 = AttentionCache(32, 128, 128, window=1024)
PAGE_FP16 = 16 * 32 * 256 * 2  # 262,144 B per layer per block


@pytest.mark.parametrize(
    ("caches", "num_blocks", "expected"),
    [
        # Full: cdiv(16384, 16) = 1,024 blocks per request; 1,536 blocks -> 1.5.
        ((FULL_FP16,) * 32, int(1024 * 1.5), Fraction(3, 2)),
        # Sliding 1,024 with 1,024 batched tokens: cdiv(min(1023 + 1024, 16384), 16) + 1 = 129.
        ((SW_FP16,) * 32, 129 * 3, Fraction(3)),
        # Hybrid, one group of each: 1,024 + 129 blocks per request.
        ((FULL_FP16,) * 32 + (SW_FP16,) * 32, (1024 + 129) * 3, Fraction(3)),
    ],
)
def test_get_max_concurrency_for_kv_cache_config(
    caches: tuple[LayerCache, ...], num_blocks: int, expected: Fraction
) -> None:
    spec = model(*caches)
    # vLLM's own test leaves async scheduling unset: one batch in flight, as every release before
    # 0.26 reserved (max_in_flight_tokens = 1 x max_num_batched_tokens).
    engine = VLLM(max_num_batched_tokens=1024, version=(0, 25, 0))
    group_size = 32  # every group in the test holds 32 layers
    plan = vllm_plan(spec, Workload(tokens=1, kv_dtype=FP16), engine, num_blocks * PAGE_FP16 * group_size)
    assert plan.num_blocks == num_blocks
    assert plan.max_concurrency(16384) == expected


@pytest.mark.parametrize(
    ("caches", "available", "num_blocks", "groups"),
    [
        ((FULL, FULL), M * 2 * 32, 32, 1),  # two full layers: one group
        ((SLIDING, SLIDING), M * 2 * 32, 32, 1),  # two sliding layers: one group
        ((FULL, SLIDING), M * 2 * 32, 64, 2),  # hybrid: groups [l1], [l2], one shared tensor
        ((FULL, FULL) + (SLIDING,) * 4, M * 2 * 32, 32, 3),  # groups [1,2], [3,5], [4,6]
        ((FULL,) * 3 + (SLIDING,) * 7, M * 3 * 32, 32, 4),  # [1,2,3], [4,7,10], [5,8], [6,9]
        ((FULL,) * 6 + (SLIDING,) * 5, M * 6 * 32, 32, 2),  # 5 < 6 * 1.5: group size 6, one padding slot
    ],
)
def test_get_kv_cache_config_one_worker(
    caches: tuple[LayerCache, ...], available: int, num_blocks: int, groups: int
) -> None:
    plan = vllm_plan(model(*caches, heads=2), FP32_LOAD, VLLM(), available)
    assert plan.num_blocks == num_blocks
    assert plan.num_groups == groups


def test_uniform_type_with_different_head_sizes() -> None:
    # Full head 128 + full head 64 (UniformTypeKVCacheSpecs): one block spans both layers,
    # 2M + M bytes; M x 3 x 32 available -> 32 blocks.
    big = AttentionCache(kv_heads=2, k_head_dim=128, v_head_dim=128)
    plan = vllm_plan(model(big, FULL, heads=2), FP32_LOAD, VLLM(), M * 3 * 32)
    assert plan.num_blocks == 32


def test_smaller_pages_take_more_tokens_per_block() -> None:
    # Full head 64 (page M) + sliding head 32 (page M / 2): the sliding spec's block grows to 32
    # tokens so both pages are M; M x 32 available, one layer per group -> 32 blocks.
    small = AttentionCache(kv_heads=2, k_head_dim=32, v_head_dim=32, window=1)
    plan = vllm_plan(model(FULL, small, heads=2), FP32_LOAD, VLLM(), M * 32)
    assert plan.num_blocks == 32
    assert {k.kind: k.block_size for k in plan.kinds} == {"full": 16, "sliding:1": 32}


def test_page_sizes_that_do_not_divide_are_refused() -> None:
    # Full head 64 (M) + sliding head 96 (1.5 M): vLLM raises NotImplementedError.
    odd = AttentionCache(kv_heads=2, k_head_dim=96, v_head_dim=96, window=1)
    with pytest.raises(UsageError, match="cannot unify page sizes"):
        vllm_plan(model(FULL, odd, heads=2), FP32_LOAD, VLLM(), M * 64)


def test_gpt_oss_120b_log_within_half_a_percent() -> None:
    # A vLLM report pairs "Available KV cache memory: 5.38 GiB" with "GPU KV cache size: 78,384
    # tokens" for gpt-oss-120b. Page = 16 x 8 x (64 + 64) x 2 = 32,768 B; 18 full + 18 sliding
    # layers -> group size 18, 2 groups. floor(5.38 x 2^30) = 5,776,731,013 B:
    # 5,776,731,013 // 32,768 // 18 = 9,793 blocks; 9,793 // 2 x 16 = 78,336 tokens (-0.06%).
    spec = load_model("gpt-oss-120b")
    # The log predates 0.20.1 (it follows num_blocks // groups x block): a 0.11 engine.
    result = fit(spec, Workload(tokens=131_072), VLLM(version=(0, 11, 0)), 5_776_731_013)
    assert result.plan is not None and result.plan.num_blocks == 9_793
    assert result.max_tokens == 78_336
    assert abs(result.max_tokens - 78_384) / 78_384 < 0.005
    # vLLM's count assumes every layer stores every token; the 18 sliding layers only reserve
    # cdiv(min(127 + 8192, T), 16) + 1 = 522 blocks, so one request can be far longer than 78k:
    assert result.max_context is not None and result.max_context > 78_384


# vLLM's capacity plan (kvcalc.engines.vllm.capacity).


def test_vllm_fit_uses_the_downcast_dtype(run_cli) -> None:
    # One vLLM page of gemma-2-9b in bf16: 16 tokens x 8 heads x (256 + 256) x 2 B = 131,072 B; 42
    # layers in two kinds of 21 share each block index, so a block is 21 x 131,072 B.
    data = run_cli("fit", "gemma-2-9b", "--engine", "vllm", "--kv-budget", "10GiB", "--json").json()
    assert data["vllm"]["page_bytes"] == 131_072
    assert data["vllm"]["num_blocks"] == 10 * 2**30 // 131_072 // 21


# The real vLLM start-up logs kept as test data (benchmarks/data/vllm_logs_*.yaml) and the
# benchmark that compares kvcalc's KV budget with them (benchmarks/vllm_budget.py). The accuracy goal
# itself is a benchmark, not a test; here the data's shape and one record's derivation by hand.
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
