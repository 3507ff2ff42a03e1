"""vLLM's rules on ROCm (engines/vllm/rules.py ``_configure_rocm``; vllm/platforms/rocm.py and the
ROCm attention backends of vLLM 0.32.0 and 0.33.0): MLA keeps CacheConfig.DEFAULT_BLOCK_SIZE 16
on TRITON_MLA (``MultipleOf(16)``; VLLM_ROCM_USE_AITER off by default) where CUDA's FlashMLA
forces 64; other attention keeps 16 on ROCM_ATTN. Bytes derived by hand below."""

from __future__ import annotations

import pytest

import kvcalc
from kvcalc import load_model
from kvcalc.calc.estimate import Workload
from kvcalc.engines import make_engine
from kvcalc.engines.vllm import VLLM
from kvcalc.engines.vllm.capacity import VllmPlan
from kvcalc.errors import UsageError
from tests.helpers.theoretical import estimate

# DeepSeek-V2-Lite (tests/fixtures/DeepSeek-V2-Lite.json): 27 layers, one latent row of
# kv_lora_rank 512 + qk_rope_head_dim 64 = 576 bf16 values = 1,152 B a token a layer.
V2_LITE_TOKEN = 27 * 576 * 2  # 31,104
# Llama-3.1-8B: 32 layers x 8 KV heads x 128 x (K + V) x 2 B = 131,072 B a token.
LLAMA_TOKEN = 32 * 8 * 128 * 2 * 2


def _engine(name: str, platform: str | None = None, **options: int) -> tuple[VLLM, list[str]]:
    chosen, notes = make_engine(name, uses_mla=True, platform=platform, **options)
    assert isinstance(chosen, VLLM)
    return chosen, notes


@pytest.mark.parametrize(("name", "platform"), [("vllm", "rocm"), ("vllm-rocm", None), ("vllm-rocm@0.32", "rocm")])
def test_mla_keeps_16_token_blocks_on_rocm(name: str, platform: str | None) -> None:
    engine, notes = _engine(name, platform)
    assert (engine.block_size, engine.platform) == (16, "rocm")
    assert any("TRITON_MLA" in n and "VLLM_ROCM_USE_AITER" in n for n in notes)


def test_mla_on_cuda_is_unchanged() -> None:
    engine, _ = _engine("vllm")
    assert (engine.block_size, engine.platform) == (64, "cuda")


@pytest.mark.parametrize(
    ("model", "gpu", "block", "page"),
    [
        # DeepSeek-V2-Lite: 1,000 tokens are cdiv(1000, 16) = 63 blocks of 16 = 1,008 tokens on
        # ROCm, cdiv(1000, 64) = 16 blocks of 64 = 1,024 on CUDA; a layer's page 16 x 1,152 B =
        # 18,432 B, 64 x 1,152 = 73,728 B.
        ("deepseek-v2-lite", "mi300x", 16, 18_432),
        ("deepseek-v2-lite", "h100-sxm", 64, 73_728),
        # Llama-3.1-8B: 16-token blocks on both (ROCM_ATTN's MultipleOf(16) keeps the default):
        # a layer's page 16 x 8 x 128 x 2 x 2 B = 65,536 B.
        ("llama-3.1-8b", "mi300x", 16, 65_536),
        ("llama-3.1-8b", "h100-sxm", 16, 65_536),
    ],
)
def test_an_amd_gpu_picks_rocm_blocks(model: str, gpu: str, block: int, page: int) -> None:
    report = kvcalc.fit(model, tokens=1000, gpu=gpu, serving=kvcalc.Serving(engine="vllm"))
    plan = report.result.plan
    assert isinstance(plan, VllmPlan)
    assert plan.page_bytes == page
    assert isinstance(plan.engine, VLLM) and plan.engine.block_size == block


def test_mla_bytes_on_rocm_and_cuda() -> None:
    spec = load_model("deepseek-v2-lite")
    rocm, _ = _engine("vllm-rocm")
    cuda, _ = _engine("vllm")
    assert estimate(spec, Workload(tokens=1000), engine=rocm).total_bytes == 1008 * V2_LITE_TOKEN == 31_352_832
    assert estimate(spec, Workload(tokens=1000), engine=cuda).total_bytes == 1024 * V2_LITE_TOKEN == 31_850_496


def test_gqa_bytes_are_the_same_on_rocm() -> None:
    spec = load_model("llama-3.1-8b")
    rocm, _ = make_engine("vllm-rocm")
    # cdiv(1000, 16) x 16 = 1,008 tokens x 131,072 B.
    assert estimate(spec, Workload(tokens=1000), engine=rocm).total_bytes == 1008 * LLAMA_TOKEN == 132_120_576


def test_rocm_block_size_must_be_a_multiple_of_16() -> None:
    assert _engine("vllm-rocm", block_size=32)[0].block_size == 32
    with pytest.raises(UsageError, match=r"ROCm attention backends .* multiples of 16, not 8") as caught:
        _engine("vllm-rocm", block_size=8)
    assert caught.value.params == ("block_size",)


def test_rocm_before_0_32_and_sparse_mla_are_refused() -> None:
    with pytest.raises(UsageError, match=r"ROCm rules are modelled from 0\.32\.0"):
        _engine("vllm-rocm@0.31")
    with pytest.raises(UsageError, match="ROCM_AITER_MLA_SPARSE"):
        make_engine("vllm-rocm", uses_mla=True, uses_dsa=True)


def test_vllm_rocm_on_an_nvidia_gpu_is_refused() -> None:
    with pytest.raises(UsageError, match="runs on AMD GPUs"):
        make_engine("vllm-rocm", platform="cuda")


def test_rocm_fp8_is_one_byte_with_a_note_on_its_format() -> None:
    # DeepSeek-V2-Lite in fp8: 1,008 tokens x 27 layers x 576 B.
    report = kvcalc.estimate(
        "deepseek-v2-lite", tokens=1000, serving=kvcalc.Serving(engine="vllm-rocm", kv_dtype="fp8")
    )
    assert report.total_bytes == 1008 * 27 * 576 == 15_676_416
    assert any("float8_e4m3fnuz" in n for n in report.notes)


def test_rocm_mla_refuses_fp8_e5m2() -> None:
    # TRITON_MLA's supported_kv_cache_dtypes (vllm/v1/attention/backends/mla/triton_mla.py, 0.33.0)
    # lists fp8 and fp8_e4m3 only.
    with pytest.raises(UsageError, match="TRITON_MLA, which takes no fp8_e5m2") as caught:
        kvcalc.estimate(
            "deepseek-v2-lite", tokens=1000, serving=kvcalc.Serving(engine="vllm-rocm", kv_dtype="fp8_e5m2")
        )
    assert caught.value.params == ("kv_dtype",)
    # Other attention (ROCM_ATTN) takes it.
    kvcalc.estimate("llama-3.1-8b", tokens=1000, serving=kvcalc.Serving(engine="vllm-rocm", kv_dtype="fp8_e5m2"))
