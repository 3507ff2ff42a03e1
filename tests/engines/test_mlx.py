"""``--engine mlx``: mlx-lm 0.32.2's rules, each figure worked by hand (growth rules:
test_growth.py; the same figures in the real mlx-lm: test_mlx_conformance.py)."""

from __future__ import annotations

import pytest

from kvcalc import api
from kvcalc.engines import engine_version, make_engine
from kvcalc.errors import UsageError
from kvcalc.gpus import find_gpu, mac_working_set
from tests.conftest import assert_one_line_error

# Llama 3.1 8B: 32 layers x 2 x 8 KV heads x 128 x 2 B (bf16) = 131,072 B per slot.
LLAMA_SLOT = 32 * 2 * 8 * 128 * 2


def test_slots_grow_in_256_token_steps() -> None:
    # 300 tokens: 299 in one prefill step -> 512 slots, the last token fits.
    assert api.estimate("llama-3.1-8b", tokens=300, engine="mlx").total_bytes == 512 * LLAMA_SLOT
    assert api.estimate("llama-3.1-8b", tokens=256, engine="mlx").total_bytes == 256 * LLAMA_SLOT
    assert api.estimate("llama-3.1-8b", tokens=257, engine="mlx").total_bytes == 512 * LLAMA_SLOT


def test_a_prefill_step_off_256_leaves_odd_buffers() -> None:
    # 3,000 tokens in steps of 1,000: 3,024 slots (test_growth.py).
    est = api.estimate("llama-3.1-8b", tokens=3000, engine="mlx", options={"prefill_step_size": 1000})
    assert est.total_bytes == 3024 * LLAMA_SLOT


def test_sliding_configs_mlx_serves_with_a_full_cache() -> None:
    # gemma2.py and llama.py (Mistral) build no RotatingKVCache: every layer keeps all 8,192 tokens.
    est = api.estimate("mistral-7b-v0.1", tokens=8192, engine="mlx")
    assert est.total_bytes == 8192 * 32 * 2 * 8 * 128 * 2
    assert any("keeps every token in mistral's sliding layers" in n for n in est.notes)
    theory = api.estimate("mistral-7b-v0.1", tokens=8192)
    assert theory.total_bytes == 4096 * 32 * 2 * 8 * 128 * 2
    gemma = api.estimate("gemma-2-9b", tokens=8192, engine="mlx")
    # 42 layers x 2 x 8 x 256 x 4 B (the preset is float32, which mlx-lm runs as stored).
    assert gemma.total_bytes == 8192 * 42 * 2 * 8 * 256 * 4


def test_gemma3_keeps_a_ring_of_the_window() -> None:
    # Gemma 3 27B: 62 layers, every 6th full; 52 sliding layers ring at 1,024 (RotatingKVCache),
    # 10 full ones hold 8,192; 16 KV heads x 128, bf16.
    est = api.estimate("gemma-3-27b", tokens=8192, engine="mlx")
    row = 2 * 16 * 128 * 2
    assert est.total_bytes == (52 * 1024 + 10 * 8192) * row


def test_max_kv_size_rings_every_layer_of_a_model_without_make_cache() -> None:
    # qwen3.py has no make_cache: RotatingKVCache(max_kv_size, keep=4) in all 36 layers.
    est = api.estimate("qwen3-8b", tokens=8192, engine="mlx", options={"max_kv_size": 1024})
    assert est.total_bytes == 1024 * 36 * 2 * 8 * 128 * 2


def test_max_kv_size_is_refused_where_the_model_builds_its_own_cache() -> None:
    with pytest.raises(UsageError, match=r"llama\.py builds its own cache"):
        api.estimate("llama-3.1-8b", tokens=8192, engine="mlx", options={"max_kv_size": 1024})


def test_kv_bits_quantizes_the_whole_buffer_once_past_the_start() -> None:
    # Qwen3 8B, 4 bits, group 64: per head 128 x 4 / 8 = 64 B + 2 groups x (bf16 scale + bias) 8 B
    # = 72 B; 8 KV heads x K and V = 1,152 B a slot and layer. 6,000 tokens: 6,144 slots.
    est = api.estimate("qwen3-8b", tokens=6000, engine="mlx", options={"kv_bits": 4})
    assert est.total_bytes == 6144 * 36 * 1152
    # Below quantized_kv_start (5,000) nothing is quantized: bf16, 4,096 B a slot and layer.
    est = api.estimate("qwen3-8b", tokens=4000, engine="mlx", options={"kv_bits": 4})
    assert est.total_bytes == 4096 * 36 * 4096
    est = api.estimate("qwen3-8b", tokens=4000, engine="mlx", options={"kv_bits": 8, "quantized_kv_start": 0})
    # 8 bits: 128 B + 8 B of scale and bias per head; 8 x 2 x 136 = 2,176 B.
    assert est.total_bytes == 4096 * 36 * 2176


@pytest.mark.parametrize(
    ("model", "options", "why"),
    [
        ("gemma-3-27b", {"kv_bits": 4}, "cannot quantize a RotatingKVCache"),
        ("qwen3-8b", {"kv_bits": 4, "max_kv_size": 1024}, "cannot quantize a RotatingKVCache"),
        ("falcon-h1-7b", {"kv_bits": 4}, "CacheList"),
        ("deepseek-v3", {"kv_bits": 4}, "MLA attention"),
        ("mamba-2.8b", {"kv_bits": 4}, "caches no K or V"),
        ("qwen3-8b", {"kv_bits": 7}, "takes --kv-bits"),
        ("qwen3-8b", {"kv_bits": 4, "kv_group_size": 48}, "takes --kv-group-size"),
    ],
)
def test_kv_bits_is_refused_where_mlx_lm_would_not_quantize(model: str, options: dict[str, int], why: str) -> None:
    with pytest.raises(UsageError, match=why):
        api.estimate(model, tokens=6000, engine="mlx", options=options)


def test_mla_latent_and_expanded() -> None:
    # deepseek_v3.py caches the latent (512) and the rope key (64) of one head: 576 values.
    est = api.estimate("deepseek-v3", tokens=256, engine="mlx")
    assert est.total_bytes == 256 * 61 * 576 * 2
    # deepseek_v2.py applies kv_b_proj first: 16 heads x (K 128 + 64, V 128) per token.
    est = api.estimate("deepseek-v2-lite", tokens=256, engine="mlx")
    assert est.total_bytes == 256 * 27 * 16 * (192 + 128) * 2
    assert any("K and V per head" in n for n in est.notes)


def test_mamba2_state_is_float32_and_mamba1_is_not() -> None:
    # Nemotron-H 8B's Mamba-2 layers: ssm.py keeps the state in float32 whatever the model dtype.
    est = api.estimate("nemotron-h-8b", tokens=256, engine="mlx")
    state = next(g for g in est.groups if g.cache.is_state)
    assert {d.name for _, d in state.state_parts} == {"bf16", "fp32"}


def test_max_tokens_splits_prompt_and_generated() -> None:
    # Gemma 3 27B at 600 tokens, window 1,024. All prompt: 599 -> 599 + 256 = 855 slots in a
    # sliding layer. 100 prompt + 500 generated: 99 + 256 = 355, then + 256 = 611.
    row = 2 * 16 * 128 * 2
    est = api.estimate("gemma-3-27b", tokens=600, engine="mlx")
    assert est.total_bytes == (52 * 855 + 10 * 768) * row
    est = api.estimate("gemma-3-27b", tokens=600, engine="mlx", options={"max_tokens": 500})
    assert est.total_bytes == (52 * 611 + 10 * 768) * row
    with pytest.raises(UsageError, match="leaves no prompt"):
        api.estimate("gemma-3-27b", tokens=600, engine="mlx", options={"max_tokens": 600})


@pytest.mark.parametrize(
    ("serving", "why"),
    [
        (api.Serving("mlx", kv_dtype="fp8"), "model's dtype"),
        (api.Serving("mlx", kv_dtype="int4", quant_group=32), "--kv-group-size"),
        (api.Serving("mlx", kv_dtype="bf16", options={"kv_bits": 4}), "drop --kv-dtype"),
    ],
)
def test_formats_mlx_lm_has_not(serving: api.Serving, why: str) -> None:
    with pytest.raises(UsageError, match=why):
        api.estimate("qwen3-8b", tokens=1000, serving=serving)


def test_models_mlx_lm_has_no_module_for_are_refused() -> None:
    for model in ("falcon-7b", "whisper-large-v3", "deepseek-v4-flash"):
        with pytest.raises(UsageError, match="has no model for"):
            api.estimate(model, tokens=1000, engine="mlx")


def test_release_naming() -> None:
    assert engine_version("mlx@0.32.2") == (0, 32, 2)
    with pytest.raises(UsageError, match=r"supported: 0\.32"):
        make_engine("mlx@0.31")


def test_mac_working_set_follows_the_measured_figures() -> None:
    # llama.cpp's logs: 16 GB 10,922.67 MiB, 32 GB 21,845.34 MiB, 64 GB 49,152 MiB, 96 GB 73,728 MiB.
    assert mac_working_set(16)[0] // 2**20 == 10922
    assert mac_working_set(32)[0] // 2**20 == 21845
    assert mac_working_set(64) == (48 * 2**30, True)
    assert mac_working_set(96) == (72 * 2**30, True)
    # 107.52 GiB on macOS 26 (antirez/ds4 PR #893).
    assert round(mac_working_set(128)[0] / 2**30, 2) == 107.52
    mac = find_gpu("m4-max-64gb")
    assert (mac.runtime_bytes, mac.unified_bytes) == (48 * 2**30, 64 * 2**30)
    assert mac.peaks is not None and mac.peaks.bandwidth == 546 * 10**9


def test_fit_on_a_mac(run_cli) -> None:
    # 48 GiB wired - 8B weights (preset bf16 16,060,522,496 B) - 1 GiB assumed runtime.
    report = api.fit("llama-3.1-8b", gpu="m4-max-64gb", tokens=32768, engine="mlx")
    assert report.budget.kv_bytes == 48 * 2**30 - 16_060_522_496 - 2**30
    assert any("iogpu.wired_limit_mb" in n for n in report.notes)
    result = run_cli("fit", "llama-3.1-8b", "--engine", "mlx", "--gpu", "m4-max-64gb", "--prompt-cache-bytes", "4GiB")
    assert result.exit_code == 0, result.stderr
    assert "prompt cache" in result.stdout


def test_cli_flags_are_mlx_only(run_cli) -> None:
    result = run_cli("estimate", "qwen3-8b", "--engine", "vllm", "--kv-bits", "4")
    assert result.exit_code == 2
    assert_one_line_error(result, "--kv-bits", "mlx")
    result = run_cli("estimate", "qwen3-8b", "--engine", "mlx", "--kv-group-size", "32")
    assert result.exit_code == 2
    assert_one_line_error(result, "--kv-group-size", "--kv-bits")
    result = run_cli("estimate", "qwen3-8b", "--engine", "mlx", "--tokens", "6000", "--kv-bits", "4", "--json")
    assert result.exit_code == 0
    # 6,144 slots x 36 layers x 1,152 B.
    assert result.json()["total_bytes"] == 6144 * 36 * 1152


@pytest.mark.parametrize(("tokens", "dtype", "per_token"), [(1000, "bf16", LLAMA_SLOT), (4999, "bf16", LLAMA_SLOT),
                                                           (5000, "mlx-q4", 36_864)])  # fmt: skip
def test_kv_bits_header_says_what_is_stored(tokens: int, dtype: str, per_token: int) -> None:
    # Below quantized_kv_start (5,000) every token stays bf16 (maybe_quantize_kv_cache converts a
    # cache once its offset >= the start): the estimate names bf16 and its bytes a token; past it,
    # 4-bit with a bf16 scale and bias per 64 elements, 36 B per 64 of the 32 x 2,048 a token.
    est = api.estimate("llama-3.1-8b", engine="mlx", options={"kv_bits": 4}, tokens=tokens)
    assert est.kv_dtype.name == dtype and [g.dtype.name for g in est.groups] == [dtype]
    assert est.per_token_bytes == per_token
    assert est.total_bytes == -(-tokens // 256) * 256 * per_token


def test_max_kv_size_must_leave_room_past_the_kept_tokens() -> None:
    # mlx_lm/models/cache.py (0.32.2): make_prompt_cache builds RotatingKVCache(max_kv_size, keep=4);
    # a full buffer rotates to _idx = keep and writes slot keep, which must lie within max_size.
    for size in (1, 4):
        with pytest.raises(UsageError, match=r"max_kv_size .* give 5 or more") as info:
            make_engine("mlx", max_kv_size=size)
        assert info.value.params == ("max_kv_size",)
    assert make_engine("mlx", max_kv_size=5)[0].max_kv_size == 5  # type: ignore[attr-defined]
