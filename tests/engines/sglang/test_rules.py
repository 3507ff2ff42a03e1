"""SGLang's rules by release and platform (engines/sglang/rules.py, releases.py): the page a DSA model
gets on CUDA and on ROCm at the releases on either side of the change, and the fp8 latent row on
each platform. Figures derived by hand from DeepSeek-V3.2's config (tests/fixtures/DeepSeek-V3.2.json:
61 layers, kv_lora_rank 512, qk_rope_head_dim 64, index_head_dim 128) and from the SGLang wheels
the rules cite (releases.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

import kvcalc
from kvcalc.engines import make_engine
from kvcalc.engines.sglang.capacity import SGLangPlan
from kvcalc.errors import UsageError

MIB = 2**20
LAYERS = 61
# One token of the indexer's keys: 128 fp8 values + 128 / 128 x 4 scale bytes, in every layer.
INDEXER = LAYERS * (128 + 4)  # 8,052
# bf16 latent: (512 + 64) x 2 bytes a layer.
BF16_CELL = LAYERS * (512 + 64) * 2 + INDEXER  # 78,324
# fp8 on CUDA (flashmla_kv): 512 fp8 + 512 / 128 x 4 scale bytes + 64 rope values in bf16.
CUDA_FP8_CELL = LAYERS * (512 + 16 + 64 * 2) + INDEXER  # 48,068
# fp8 on ROCm: the plain fp8 row, 512 + 64 bytes (calculate_mla_kv_cache_dim: the scaled layout
# only for torch.float8_e4m3fn; CDNA 3's fp8 is e4m3fnuz, and the HIP DSA backends read raw rows).
ROCM_FP8_CELL = LAYERS * (512 + 64) + INDEXER  # 43,188
BUDGET = 256 * MIB


def _plan(engine: str, kv_dtype: str | None = None, page: int | None = None) -> tuple[SGLangPlan, tuple[str, ...]]:
    report = kvcalc.fit(
        "deepseek-v3.2",
        tokens=4096,
        serving=kvcalc.Serving(engine=engine, kv_dtype=kv_dtype, options={"block_size": page} if page else {}),
        capacity=kvcalc.Capacity(kv_budget=BUDGET, max_model_len=4096),
    )
    plan = report.result.plan
    assert isinstance(plan, SGLangPlan)
    return plan, report.notes


@pytest.mark.parametrize(
    ("engine", "page", "tokens"),
    [
        # CUDA forces 64 in every release read (0.5.8 server_args.py; 0.5.23 model_overrides/deepseek_v2.py).
        ("sglang", 64, BUDGET // BF16_CELL // 64 * 64),  # 3,392
        ("sglang@0.5.8", 64, 3392),
        # ROCm: 1 up to 0.5.11 ("Setting page size to 1 for DeepSeek DSA on ROCm"): 268,435,456 // 78,324.
        ("sglang-rocm@0.5.8", 1, BUDGET // BF16_CELL),  # 3,427
        ("sglang-rocm@0.5.11", 1, 3427),
        # From 0.5.12, 64 on the aiter preshuffle path.
        ("sglang-rocm@0.5.12", 64, 3392),
        ("sglang-rocm", 64, 3392),
    ],
)
def test_dsa_pages_by_release_and_platform(engine: str, page: int, tokens: int) -> None:
    plan, _ = _plan(engine)
    assert plan.full_cell == BF16_CELL == 78_324
    assert (plan.page_size, plan.max_total_tokens) == (page, tokens)


def test_rocm_dsa_legacy_path_and_a_page_size_sglang_overrides() -> None:
    plan, notes = _plan("sglang-rocm", page=1)
    assert plan.page_size == 1 and plan.max_total_tokens == 3427
    assert any("legacy path" in n for n in notes)
    plan, notes = _plan("sglang-rocm", page=16)
    assert plan.page_size == 64 and any("not --page-size 16" in n for n in notes)
    plan, notes = _plan("sglang-rocm@0.5.8", page=16)
    assert plan.page_size == 1 and any("1-token pages on ROCm" in n and "not --page-size 16" in n for n in notes)


def test_dsa_fp8_latent_rows_by_platform() -> None:
    plan, _ = _plan("sglang", kv_dtype="fp8")
    assert plan.full_cell == CUDA_FP8_CELL == 48_068
    assert plan.max_total_tokens == BUDGET // CUDA_FP8_CELL // 64 * 64 == 5568
    plan, _ = _plan("sglang-rocm", kv_dtype="fp8")
    assert plan.full_cell == ROCM_FP8_CELL == 43_188
    assert plan.max_total_tokens == BUDGET // ROCM_FP8_CELL // 64 * 64 == 6208
    # estimate: 1,000 tokens in 64-token pages hold 1,024 cells.
    est = kvcalc.estimate("deepseek-v3.2", tokens=1000, serving=kvcalc.Serving(engine="sglang-rocm", kv_dtype="fp8"))
    assert est.total_bytes == 1024 * ROCM_FP8_CELL
    assert any("plain fp8 row" in n for n in est.notes)
    est = kvcalc.estimate("deepseek-v3.2", tokens=1000, serving=kvcalc.Serving(engine="sglang", kv_dtype="fp8"))
    assert est.total_bytes == 1024 * CUDA_FP8_CELL


def test_an_amd_gpu_preset_selects_rocm() -> None:
    # fit on an MI300X (gpus.yaml arch cdna3: AMD) with plain "sglang": ROCm's fp8 rows.
    fp8 = kvcalc.Serving(engine="sglang", kv_dtype="fp8")
    eight = kvcalc.Capacity(gpus=8, max_model_len=4096)
    report = kvcalc.fit("deepseek-v3.2", tokens=4096, gpu="mi300x", serving=fp8, capacity=eight)
    assert isinstance(report.result.plan, SGLangPlan) and report.result.plan.full_cell == ROCM_FP8_CELL
    on_h200 = kvcalc.fit("deepseek-v3.2", tokens=4096, gpu="h200", serving=fp8, capacity=eight)
    assert isinstance(on_h200.result.plan, SGLangPlan) and on_h200.result.plan.full_cell == CUDA_FP8_CELL


def test_rocm_changes_nothing_for_a_model_without_dsa() -> None:
    # Llama 3.1 8B on an MI300X: the same plan as the CUDA rules give on the same budget.
    on_rocm = kvcalc.fit("llama-3.1-8b", tokens=4096, gpu="mi300x", serving=kvcalc.Serving(engine="sglang"))
    cuda, _ = make_engine("sglang")
    as_cuda = kvcalc.fit("llama-3.1-8b", tokens=4096, gpu="mi300x", serving=kvcalc.Serving(engine=cuda))
    assert on_rocm.result == as_cuda.result
    assert getattr(on_rocm.engine, "platform", None) == "rocm"


def test_sglang_rocm_on_an_nvidia_gpu_is_refused() -> None:
    with pytest.raises(UsageError, match="AMD GPUs") as caught:
        kvcalc.fit("llama-3.1-8b", gpu="h100", serving=kvcalc.Serving(engine="sglang-rocm"))
    assert caught.value.params == ("engine",)


def test_releases_select_their_rules() -> None:
    engine, notes = make_engine("sglang@0.5.23")
    assert getattr(engine, "version", None) == (0, 5, 23) and notes == []
    # sglang@0.5: the line's newest release read (PyPI has no 0.5.0).
    engine, notes = make_engine("sglang@0.5")
    assert getattr(engine, "version", None) == (0, 5, 23) and notes == []
    _, notes = make_engine("sglang@0.5.10")
    assert any("0.5.10: its own cache rules" in n for n in notes)
    _, notes = make_engine("sglang@0.5.3")
    assert any("0.5.8 is the oldest read" in n for n in notes)
    _, notes = make_engine("sglang@0.5.30")
    assert any("read in 0.5.23" in n for n in notes)


# --- real published SGLang logs on ROCm (tests/fixtures/logs/sglang/, each citing its URL) --------------

LOGS = Path(__file__).parents[2] / "fixtures" / "logs" / "sglang"


def test_the_glm_5_log_one_token_pages_for_a_dsa_model_on_rocm_0_5_8_and_0_5_9() -> None:
    # rocm-0.5.8-0.5.9-mi355x-glm-5-dsa-page-1.log: GLM-5-FP8 (DSA) on the 0.5.8.post1 and 0.5.9 ROCm
    # images, --kv-cache-dtype fp8_e4m3: both print server_args.py's "Setting page size to 1 for
    # DeepSeek DSA on ROCm". On CUDA the same release pages DSA models by 64.
    log = (LOGS / "rocm-0.5.8-0.5.9-mi355x-glm-5-dsa-page-1.log").read_text()
    assert log.startswith("# source: https://github.com/")
    assert log.count("Setting page size to 1 for DeepSeek DSA on ROCm.") == 2
    assert "v0.5.8.post1-rocm720" in log and "v0.5.9-rocm720" in log
    for engine in ("sglang-rocm@0.5.8", "sglang-rocm@0.5.9"):
        est = kvcalc.fit("glm-5", tokens=4096, serving=kvcalc.Serving(engine=engine, kv_dtype="fp8_e4m3"),
                         capacity=kvcalc.Capacity(kv_budget=BUDGET, max_model_len=4096))  # fmt: skip
        assert est.result.plan is not None and est.result.plan.page_size == 1
    cuda = kvcalc.fit("glm-5", tokens=4096, serving=kvcalc.Serving(engine="sglang@0.5.9", kv_dtype="fp8_e4m3"),
                      capacity=kvcalc.Capacity(kv_budget=BUDGET, max_model_len=4096))  # fmt: skip
    assert cuda.result.plan is not None and cuda.result.plan.page_size == 64
