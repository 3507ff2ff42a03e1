"""fit's context cap (the model's own limit) and its verdict for a requested workload; every
figure derived by hand."""

from __future__ import annotations

import json

import pytest

from kvcalc import api
from kvcalc.inputs.hf.configs import context_limit

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
