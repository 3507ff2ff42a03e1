"""kvcalc fit: the KV budget of a GPU and what it holds, each figure derived by hand."""

from __future__ import annotations

import json
import struct
from fractions import Fraction
from pathlib import Path

import pytest

from kvcalc import api, load_model
from kvcalc.calc.estimate import Workload
from kvcalc.calc.fit import SEARCH_LIMIT, fit, kv_budget, largest, largest_within
from kvcalc.engines import THEORETICAL, VLLM, LlamaCpp, SGLang
from kvcalc.errors import UsageError
from kvcalc.gpus import find_gpu
from kvcalc.inputs.hf.configs import context_limit
from kvcalc.units import parse_size
from tests.conftest import FIXTURES
from tests.helpers.theoretical import compile_plan

# H100 SXM as the CUDA runtime reports it: 85,017,755,648 B. x 0.9 = 76,515,980,083 (floor);
# Llama 3.1 8B weights: 8,030,261,248 parameters x 2 B = 16,060,522,496; allowance 2 GiB.
# KV budget = 76,515,980,083 - 16,060,522,496 - 2,147,483,648 = 58,307,973,939 B.
H100_BUDGET = 58_307_973_939


def test_sizes_are_decimal_or_binary_as_written() -> None:
    assert parse_size("80GB", what="x") == 80 * 10**9
    assert parse_size("80GiB", what="x") == 80 * 2**30
    assert parse_size("5.38GiB", what="x") == 5_776_731_013  # floor(5.38 x 2^30)
    assert parse_size("512B", what="x") == 512
    with pytest.raises(UsageError, match="80GB"):
        parse_size("80 gigs", what="--gpu-memory")


def test_budget_derivation_lines() -> None:
    budget = kv_budget(
        gpu_bytes=find_gpu("H100").runtime_bytes,
        utilization=Fraction("0.9"),
        weights_bytes=8_030_261_248 * 2,
        overhead_bytes=2 * 2**30,
        shards=1,
        weights_label="preset",
    )
    assert [line.bytes for line in budget.lines] == [
        85_017_755_648, 76_515_980_083, 16_060_522_496, 2_147_483_648, H100_BUDGET
    ]  # fmt: skip
    assert budget.kv_bytes == H100_BUDGET


def test_theoretical_answers() -> None:
    # 131,072 B per token: 58,307,973,939 // 131,072 = 444,854 tokens; requests of 32,768 tokens:
    # 444,854 // 32,768 = 13; at batch 8 the longest context is 444,854 // 8 = 55,606.
    spec = load_model("llama-3.1-8b")
    result = fit(spec, Workload(tokens=32_768, batch=8), THEORETICAL, H100_BUDGET)
    assert result.max_tokens == H100_BUDGET // 131_072 == 444_854
    assert result.max_concurrency == 13
    assert result.max_context == 444_854 // 8 == 55_606


def test_vllm_answers() -> None:
    # Page = 16 tokens x 8 heads x 256 x 2 B = 65,536 B per layer; one group of 32 layers:
    # num_blocks = 58,307,973,939 // (65,536 x 32) = 27,803 -> 27,803 x 16 = 444,848 tokens.
    # A 32,768-token request needs 2,048 blocks: 27,803 / 2,048 = 13.58x.
    result = fit(load_model("llama-3.1-8b"), Workload(tokens=32_768), VLLM(), H100_BUDGET)
    assert result.plan is not None and result.plan.num_blocks == 27_803
    assert result.max_tokens == 444_848
    assert result.max_concurrency_exact == Fraction(27_803, 2048)
    assert result.max_concurrency == 13


def test_vllm_tp8_kv_budget() -> None:
    # Llama 3.1 70B, TP 8, 10 GiB per GPU: 1 KV head per rank, page 16 x 1 x 256 x 2 = 8,192 B
    # x 80 layers = 655,360 B per block -> 10,737,418,240 // 655,360 = 16,384 blocks = 262,144 tokens.
    result = fit(load_model("llama-3.1-70b"), Workload(tokens=4096, tp=8), VLLM(), 10 * 2**30)
    assert result.max_tokens == 262_144


def test_sglang_hybrid_swa_pool() -> None:
    # gpt-oss-120b: 18 full + 18 sliding layers of 8 x 128 x 2 = 2,048 B per token (fp16):
    # tokens = int(5,776,731,013 / (36,864 + 0.8 x 36,864)) = int(87,057.7) = 87,057 (the full pool;
    # the SWA pool gets 0.8 of it).
    result = fit(load_model("gpt-oss-120b"), Workload(tokens=4096), SGLang(), 5_776_731_013)
    assert result.max_tokens == 87_057


def test_llama_cpp_context_is_a_multiple_of_256() -> None:
    # 1 GiB at 131,072 B per token = 8,192 cells, already a multiple of 256.
    result = fit(load_model("llama-3.1-8b"), Workload(tokens=1000), LlamaCpp(), 2**30 + 100_000)
    assert result.max_tokens == 8192
    assert result.max_context == 8192  # pad(T, 256) cells must fit: 8,192 is the largest T


def test_windowed_model_context_is_unbounded() -> None:
    # Mistral 7B slides on every layer: 4,096 tokens x 131,072 B = 512 MiB caps any one sequence.
    result = fit(load_model("mistral-7b-v0.1"), Workload(tokens=4096), THEORETICAL, 2**30)
    assert result.max_context is None
    assert result.max_concurrency == 2  # 1 GiB / 512 MiB


def test_fit_cli_json_contract(run_cli) -> None:
    data = run_cli("fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--tokens", "32k", "--batch", "8", "--json").json()
    assert data["kv_budget_bytes"] == H100_BUDGET
    assert (data["max_tokens"], data["max_concurrency"], data["max_context"]) == (444_854, 13, 55_606)
    assert [line["bytes"] for line in data["budget"]][-1] == H100_BUDGET


def test_fit_cli_kv_budget_gpt_oss(run_cli) -> None:
    # Issue check: within 0.5% of the 78,384 tokens vLLM logged (see tests/engines/vllm/test_capacity.py), a
    # release that logged num_blocks // groups x block (0.11 to 0.20.0: engines/vllm.py).
    result = run_cli("fit", "gpt-oss-120b", "--kv-budget", "5.38GiB", "--engine", "vllm@0.11", "--tokens", "128k")
    assert result.exit_code == 0, result.stderr
    assert "max tokens     78,336" in result.stdout
    assert "every layer stored every token" in result.stdout  # why it differs from the theoretical count


def test_weights_from_a_local_safetensors_index(run_cli, tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text((FIXTURES / "Llama-3.1-8B.json").read_text())
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 16_060_522_496}}))
    data = run_cli("fit", str(folder), "--gpu-memory", "80GB", "--overhead", "0", "--utilization", "1", "--json").json()
    # 80 x 10^9 - 16,060,522,496 = 63,939,477,504 B.
    assert data["kv_budget_bytes"] == 63_939_477_504


def test_weights_from_a_single_safetensors_header(run_cli, tmp_path: Path) -> None:
    # Two tensors: BF16 [4, 8] (64 B) then F32 [8] (32 B): the data ends at byte 96.
    header = {"a": {"dtype": "BF16", "shape": [4, 8], "data_offsets": [0, 64]},
              "b": {"dtype": "F32", "shape": [8], "data_offsets": [64, 96]}}  # fmt: skip
    raw = json.dumps(header).encode()
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(96))
    (folder / "config.json").write_text((FIXTURES / "gpt2.json").read_text())
    data = run_cli("fit", str(folder / "config.json"), "--gpu-memory", "1000B", "--overhead", "0",
                   "--utilization", "1", "--json").json()  # fmt: skip
    assert data["kv_budget_bytes"] == 1000 - 96


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--gpu", "h1000"), "unknown GPU 'h1000'; did you mean"),
        (("--gpu", "h100", "--tp", "3"), "--tp 3 does not divide the 32 query heads"),
        # The tp the user never typed is said to come from --gpus (it named --tp alone).
        (("--gpu", "h100", "--gpus", "3"), "--gpus 3 over --pp 1 x --dp 1 is --tp 3, which does not divide the 32"),
        (("--gpu", "h100", "--gpus", "4", "--tp", "2"), "does not equal"),
        (("--gpu", "h100", "--gpu-memory", "80GB"), "not both"),
        ((), "give --gpu, --gpu-memory or --kv-budget"),
        (("--kv-budget", "0"), "--kv-budget must be a positive size in bytes, got 0"),
        (("--gpu", "h100", "--utilization", "1.5"), "--utilization"),
        (("--kv-budget", "1GiB", "--engine", "vllm", "--kv-dtype", "int4"), "vLLM stores"),
        (("--gpu", "h100", "--tp", "0"), "Invalid value for '--tp': 0"),
        (("--gpu", "h100", "--gpus", "0"), "Invalid value for '--gpus': 0"),
    ],
)
def test_fit_errors(run_cli, args: tuple[str, ...], message: str) -> None:
    result = run_cli("fit", "llama-3.1-8b", *args)
    assert result.exit_code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_gpus_alone_sets_tensor_parallel(run_cli) -> None:
    # --gpus 8 on Llama 3.1 70B: TP 8, weights / 8 per GPU, 1 KV head per GPU.
    data = run_cli("fit", "llama-3.1-70b", "--kv-budget", "10GiB", "--gpus", "8", "--engine", "vllm", "--json").json()
    assert (data["tp"], data["max_tokens"]) == (8, 262_144)


def test_an_affine_cost_is_solved_not_searched() -> None:
    # 1,000 fixed bytes and 7 a token: 1,000 + 7n <= 10**9 up to n = 142,857,000.
    calls: list[int] = []

    def cost(n: int) -> int:
        calls.append(n)
        return 1000 + 7 * n

    assert largest_within(cost, 10**9, SEARCH_LIMIT) == 142_857_000
    assert len(calls) <= 5  # cost(1), cost(limit), cost(limit / 2), the check at n and n + 1
    assert largest_within(cost, 999, SEARCH_LIMIT) == 0
    assert largest_within(cost, 10**20, SEARCH_LIMIT) is None


def test_a_stepped_or_unproven_cost_is_searched_with_the_same_answer() -> None:
    # Whole blocks of 16 tokens at 10 bytes a token: the solve misses the step, bisection decides.
    def blocks(n: int) -> int:
        return -(-n // 16) * 160

    for budget in (160, 1599, 1600, 1601, 10**9 + 7):
        expected = largest(lambda n: blocks(n) <= budget, SEARCH_LIMIT)  # noqa: B023
        assert largest_within(blocks, budget, SEARCH_LIMIT) == expected
        assert largest_within(blocks, budget, SEARCH_LIMIT, solve=False) == expected
    # 160 bytes hold one block: 16 tokens.
    assert largest_within(blocks, 160, SEARCH_LIMIT) == 16


def test_only_a_cost_that_never_falls_is_solved() -> None:
    # DeepSeek-V4's compressor buffers empty each time a window closes (T mod ratio entries): its
    # bytes are not monotone in T, so fit does not solve for its context.
    assert compile_plan(load_model("llama-3.1-8b"), Workload(tokens=1)).monotone
    assert not compile_plan(load_model("deepseek-v4-flash"), Workload(tokens=1)).monotone


def test_largest_within_searches_each_monotone_piece() -> None:
    # A cost that falls at 50 (n below, n / 4 from there): within 30 the largest n is 30 below
    # the drop, and 120 past it; a bisection over 1..1,000 would stop below the drop.
    def cost(n: int) -> int:
        return n if n < 50 else n // 4

    assert largest_within(cost, 30, 1000, drops=(50,)) == 123  # 123 // 4 = 30, 124 // 4 = 31
    assert largest_within(cost, 11, 1000, drops=(50,)) == 11  # past the drop every n costs >= 12
    assert largest_within(cost, 10**6, 1000, drops=(50,)) is None
    assert largest_within(cost, 0, 1000, drops=(50,)) == 0


# llama-3.1-8b under mlx-lm: a token of its 32 layers is 2 x 8 x 128 elements a layer, bf16 (2 B):
# 131,072 B; 4-bit (group 64: 32 B of data and a bf16 scale and bias, 36 B per 64 elements):
# 32 x 2,048 / 64 x 36 = 36,864 B. Buffers grow 256 tokens at a time; the whole cache turns 4-bit
# once it holds quantized_kv_start (5,000) tokens.
MLX_BF16, MLX_Q4 = 131_072, 36_864


@pytest.mark.parametrize(
    ("budget", "context"),
    [
        # 7,936 x 36,864 = 292,552,704 fits 300 MB, 8,192 x 36,864 = 301,989,888 does not
        (300_000_000, 7_936),
        # 5,000 tokens hold 5,120 4-bit slots: 188,743,680 <= 190 MB < 5,376 x 36,864
        (190_000_000, 5_120),
        # 5,120 4-bit slots do not fit 150 MB; below the start 1,024 bf16 slots (134,217,728) do
        (150_000_000, 1_024),
    ],
)
def test_mlx_max_context_past_quantized_kv_start(budget: int, context: int) -> None:
    from kvcalc import api

    r = api.fit(
        "llama-3.1-8b",
        tokens=1000,
        serving=api.Serving(engine="mlx", options={"kv_bits": 4}),
        capacity=api.Capacity(kv_budget=budget),
    ).result
    below = api.estimate("llama-3.1-8b", engine="mlx", options={"kv_bits": 4}, tokens=context)
    assert below.total_bytes == -(-context // 256) * 256 * (MLX_BF16 if context < 5000 else MLX_Q4)
    assert r.max_context == context
    # max tokens: the 4-bit cache's capacity in whole steps of 256, budget // 36,864 rounded down
    assert r.max_tokens == budget // MLX_Q4 // 256 * 256


# fit's context cap (the model's own limit) and its verdict for a requested workload; every
# figure derived by hand.


# Llama 3.1 8B: 32 layers x 2 x 8 KV heads x 128 x 2 B = 131,072 B per token (bf16).
PER_TOKEN = 131_072


@pytest.mark.parametrize(
    ("config", "limit", "words"),
    [
        # vLLM 0.32 derive_max_model_len_and_key: the smallest of the length keys.
        ({"max_position_embeddings": 131_072, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, 131_072,
         "max_position_embeddings 131,072"),
        ({"n_positions": 1024}, 1024, "n_positions 1,024"),
        ({"max_position_embeddings": 4096, "seq_length": 2048}, 2048, "seq_length 2,048"),
        # model_max_length overrides the rest (Command-R), even when larger.
        ({"max_position_embeddings": 8192, "model_max_length": 131_072}, 131_072, "model_max_length 131,072"),
        # A linear or dynamic RoPE factor extends the limit: 4,096 x 4 = 16,384.
        ({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 4.0}}, 16_384,
         "x RoPE linear factor 4"),
        ({"max_position_embeddings": 4096, "rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}, 8192,
         "dynamic"),
        # YaRN leaves max_position_embeddings as the scaled length (config/model.py, 0.32).
        ({"max_position_embeddings": 163_840, "rope_scaling": {"type": "yarn", "factor": 40}}, 163_840, "163,840"),
        # Per-layer-type RoPE parameters (Gemma-style nesting): the first factor applies.
        ({"max_position_embeddings": 1000,
          "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 2.0}, "sliding_attention": {}}},
         2000, "factor 2"),
        ({"hidden_size": 8}, None, None),
    ],
)  # fmt: skip
def test_context_limit_follows_vllm(config: dict, limit: int | None, words: str | None) -> None:
    found, how = context_limit(config, "llama")
    assert found == limit
    if words is None:
        assert how is None
    else:
        assert how is not None and words in how


def test_gemma3_factor_is_already_applied() -> None:
    # vLLM skips the factor for gemma3: its 131,072 is already the scaled length.
    config = {"max_position_embeddings": 131_072, "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
    assert context_limit(config, "gemma3_text")[0] == 131_072


def test_fit_caps_context_at_the_model_limit() -> None:
    # A budget of 100 GiB holds 107,374,182,400 // 131,072 = 819,200 tokens; the model allows 131,072.
    budget = 100 * 2**30
    capped = api.fit("llama-3.1-8b", tokens=4096, capacity=api.Capacity(kv_budget=budget))
    assert capped.result.max_context == 131_072
    assert capped.context_limit == 131_072
    assert any("model's own limit (max_position_embeddings 131,072)" in n for n in capped.notes)
    free = api.fit("llama-3.1-8b", tokens=4096, capacity=api.Capacity(kv_budget=budget, context_cap=False))
    assert free.result.max_context == budget // PER_TOKEN == 819_200
    assert any("--no-context-cap" in n for n in free.notes)
    # An explicit max_model_len past the limit is taken, with a warning note.
    past = api.fit("llama-3.1-8b", tokens=4096, capacity=api.Capacity(kv_budget=budget, max_model_len=262_144))
    assert past.result.max_context == 262_144
    assert any("VLLM_ALLOW_LONG_MAX_MODEL_LEN" in n for n in past.notes)


def test_cli_no_context_cap(run_cli) -> None:
    capped = json.loads(run_cli("fit", "llama-3.1-8b", "--kv-budget", "100GiB", "--json").stdout)
    assert capped["max_context"] == capped["context_limit"] == 131_072
    free = json.loads(run_cli("fit", "llama-3.1-8b", "--kv-budget", "100GiB", "--no-context-cap", "--json").stdout)
    assert free["max_context"] == 819_200
    assert free["context_limit"] is None


def test_verdict_fits_with_headroom() -> None:
    # 8 requests x 4,096 tokens x 131,072 B = 4,294,967,296 B; budget 10 GiB leaves 6 GiB.
    report = api.fit("llama-3.1-8b", tokens=4096, batch=8, capacity=api.Capacity(kv_budget=10 * 2**30))
    verdict = report.verdict
    assert verdict is not None and verdict.fits
    assert verdict.needed_bytes == 8 * 4096 * PER_TOKEN == 4_294_967_296
    assert verdict.headroom_bytes == 6 * 2**30
    assert verdict.remedies == ()


def test_verdict_does_not_fit_and_says_what_to_change() -> None:
    # 8 x 32,768 tokens x 131,072 B = 32 GiB against a 20 GiB budget: short by 12 GiB.
    budget = 20 * 2**30
    report = api.fit("llama-3.1-8b", tokens=32_768, batch=8, capacity=api.Capacity(kv_budget=budget))
    v = report.verdict
    assert v is not None and not v.fits
    assert v.needed_bytes == 32 * 2**30
    assert v.headroom_bytes == -12 * 2**30
    changes = {r.change.split(" (")[0]: r for r in v.remedies}
    # fp8 KV halves the cache: 16 GiB needed, 4 GiB of headroom: the first change that fits.
    assert changes["fp8 KV cache"].fits
    assert changes["fp8 KV cache"].figure == f"headroom {4 * 2**30:,} B per GPU"
    assert v.first_remedy is changes["fp8 KV cache"]
    # tp 2 with a fixed per-GPU budget: 16 GiB per GPU, 4 GiB of headroom.
    assert changes["tp 2"].figure == f"headroom {4 * 2**30:,} B per GPU"
    # At batch 8: 20 GiB // 131,072 B // 8 = 20,480 tokens; at 32,768 tokens: 160 // 32 = 5 requests.
    assert changes["shorter context"].figure == "up to 20,480 tokens at batch 8"
    assert changes["fewer sequences"].figure == "up to 5 at 32,768 tokens each"


def test_verdict_in_json_and_text(run_cli) -> None:
    args = ("fit", "llama-3.1-8b", "--kv-budget", "20GiB", "-t", "32k", "-b", "8")
    data = json.loads(run_cli(*args, "--json").stdout)["verdict"]
    assert data["fits"] is False
    assert data["headroom_bytes"] == -12 * 2**30
    assert data["first_remedy"] == "fp8 KV cache (--kv-dtype fp8)"
    text = run_cli(*args).stdout
    assert "does not fit" in text and "first change fp8 KV cache" in text


def test_weights_too_big_say_how_many_gpus() -> None:
    # GLM-5 in bf16: 1,507,728,316,928 B less its 19,905,841,664 B MTP layer = 1,487,822,475,264 B loaded.
    # An H200 (150,109,945,856 B) x 0.9 = 135,098,951,270, less the 2 GiB assumed runtime =
    # 132,951,467,622 per GPU: 11 GPUs hold 1,462,466,143,842 (too few), 12 hold enough.
    # That is an answer, not an error: fits false, and the first count of GPUs that splits GLM-5's
    # 64 query heads evenly from 12 up is 16.
    report = api.fit("glm-5", gpu="h200", tokens=4096, capacity=api.Capacity(gpus=8))
    assert report.budget.gpus_needed == 12
    assert report.verdict is not None and not report.verdict.fits
    first = report.verdict.first_remedy
    assert first is not None and first.change == "16 GPUs (--tp 16)"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--kv-budget", "10GiB", "--weights", "1GB"), "--weights has no effect"),
        (("--kv-budget", "10GiB", "--overhead", "1GiB"), "--overhead has no effect"),
        (("--gpu", "h100", "--enforce-eager"), "--enforce-eager changes nothing under the theoretical engine"),
        (
            ("--gpu", "h100", "--engine", "sglang", "--max-num-seqs", "8"),
            "--max-num-seqs changes nothing under the sglang engine",
        ),
        (("--gpu", "h100", "--engine", "vllm-cpu"), "VLLM_CPU_KVCACHE_SPACE"),
    ],
)
def test_flags_that_would_do_nothing_are_errors(run_cli, args: tuple[str, ...], message: str) -> None:
    result = run_cli("fit", "llama-3.1-8b", *args)
    assert result.exit_code == 2 and message in result.stderr
