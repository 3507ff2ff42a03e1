"""What every engine shares (kvcalc.engines.base): the KV and state dtypes each engine picks when none
is asked for."""

from __future__ import annotations

import pytest

from kvcalc import api

# gemma-2-9b's config says float32: 42 layers (21 sliding W=4096, 21 full), 8 KV heads, head dim 256.
# At 4,096 tokens every layer keeps 4,096 slots under each engine below (vLLM: cdiv(4096, 16) = 256
# blocks, and a sliding layer's cdiv(min(4095 + 8192, 4096), 16) + 1 = 257 is capped at 256), so
# 16-bit K/V are 42 x 4,096 x 2 x 8 x 256 x 2 B = 1,409,286,144 B, and fp32 twice that.
GEMMA_16BIT = 42 * 4096 * 2 * 8 * 256 * 2


@pytest.mark.parametrize(
    ("engine", "dtype", "total"),
    [
        ("theoretical", "fp32", 2 * GEMMA_16BIT),  # what the checkpoint says
        # vllm/config/model.py _resolve_auto_dtype: float32 -> bf16 on compute capability 8.0+.
        ("vllm", "bf16", GEMMA_16BIT),
        # sglang/srt/configs/model_config.py _get_and_verify_dtype: gemma* float32 -> bf16.
        ("sglang", "bf16", GEMMA_16BIT),
        # llama.cpp common/common.h: cache_type_k/v = GGML_TYPE_F16 whatever the weights.
        ("llama.cpp", "fp16", GEMMA_16BIT),
    ],
)
def test_float32_checkpoint_kv_dtype_per_engine(run_cli, engine: str, dtype: str, total: int) -> None:
    extra = ["--kv-unified"] if engine == "llama.cpp" else []  # one stream: n_ctx = pad(4096, 256) = 4096
    data = run_cli("estimate", "gemma-2-9b", "--tokens", "4096", "--engine", engine, *extra, "--json").json()
    assert data["kv_dtype"] == dtype
    if engine != "llama.cpp":  # llama.cpp's sliding cells are pad(min(4096, 4096 + 512), 256) = 4096 too
        assert data["total_bytes"] == total
    auto = run_cli("estimate", "gemma-2-9b", "--tokens", "4096", "--engine", engine, *extra, "--kv-dtype", "auto",
                   "--json").json()  # fmt: skip
    assert auto["total_bytes"] == data["total_bytes"]


# mamba-2.8b (float32): 64 layers, d_inner 5,120, conv kernel 4, state size 16. Per layer and sequence
# the conv keeps 5,120 x 3 inputs and the SSM state 5,120 x 16 values.
MAMBA_CONV, MAMBA_SSM = 5120 * 3, 5120 * 16


@pytest.mark.parametrize(
    ("engine", "total"),
    [
        # vLLM: mamba_cache_dtype auto = the model's run dtype (bf16), SSM state the same.
        ("vllm", 64 * (MAMBA_CONV + MAMBA_SSM) * 2),
        # SGLang mamba2_state_dtype: conv bf16 (SGLANG_MAMBA_CONV_DTYPE), SSM float32.
        ("sglang", 64 * (MAMBA_CONV * 2 + MAMBA_SSM * 4)),
        # llama.cpp create_memory: recurrent r_l and s_l are GGML_TYPE_F32.
        ("llama.cpp", 64 * (MAMBA_CONV + MAMBA_SSM) * 4),
    ],
)
def test_mamba_state_dtype_per_engine(run_cli, engine: str, total: int) -> None:
    data = run_cli("estimate", "mamba-2.8b", "--tokens", "4096", "--engine", engine, "--json").json()
    assert data["total_bytes"] == total


# Mamba-2.8B's checkpoint is float32: 11,073,382,400 B (the preset's weights); Gemma-2-9B's config
# says float32 too. Each engine decides once how it holds such a checkpoint (Engine.weights_dtype
# and model_dtype) and every command reads that decision.
MAMBA_FP32_BYTES = 11_073_382_400


@pytest.mark.parametrize(
    ("engine", "kv", "weights"),
    [
        ("theoretical", "fp32", MAMBA_FP32_BYTES),  # the checkpoint as its config stores it
        ("transformers", "fp32", MAMBA_FP32_BYTES),  # from_pretrained keeps float32
        ("vllm", "bf16", MAMBA_FP32_BYTES // 2),  # _resolve_auto_dtype: 16 bits
        ("sglang", "fp16", MAMBA_FP32_BYTES // 2),  # _get_and_verify_dtype: fp16 outside Gemma
        ("llama.cpp", "fp16", MAMBA_FP32_BYTES // 2),  # converted to a bf16 GGUF, cache f16
    ],
)
def test_a_float32_checkpoint_is_one_decision_per_engine(engine: str, kv: str, weights: int) -> None:
    est = api.estimate("mamba-2.8b", tokens=100, engine=engine)
    fit = api.fit("mamba-2.8b", gpu="h100", tokens=100, engine=engine, overhead=0)
    speed = api.speed("mamba-2.8b", prompt=98, output=2, gpu="h100", sweep=[], engine=engine)
    weight_line = next(line for line in fit.budget.lines if line.label == "- weights")
    assert weight_line.bytes == speed.result.weights.total_bytes == weights
    assert est.kv_dtype.name == speed.kv_dtype.name == kv


@pytest.mark.parametrize("engine", ["theoretical", "vllm", "transformers", "llama.cpp"])
def test_gemma2_float32_reads_the_same_kv_format_in_estimate_and_speed(engine: str) -> None:
    est = api.estimate("gemma-2-9b", tokens=100, engine=engine)
    speed = api.speed("gemma-2-9b", prompt=98, output=2, gpu="h100", sweep=[], engine=engine)
    assert est.kv_dtype.name == speed.kv_dtype.name
