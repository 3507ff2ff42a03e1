"""kvcalc.api.fit's verdict: the changes it suggests are ones the user can make on that machine.

A Mac is one GPU (more GPUs would be more Macs): no --tp there, and mlx-lm's users convert the
weights to 4 bits (mlx_lm.convert -q: 4 bits plus a 16-bit scale and bias per 64 = 4.5 bits a
parameter), so that is offered with its figure.
"""

from __future__ import annotations

import pytest

from kvcalc import api
from kvcalc.errors import UsageError

# Qwen3 32B (preset: 32,762,123,264 parameters, bf16) x 4.5 bits / 8 = 18,428,694,336 B, as the
# README's "Macs and MLX" example derives.
QWEN3_32B_Q4 = 32_762_123_264 * 9 // 16
# 64 layers x 2 x 8 KV heads x 128 x 2 B x 32,768 tokens.
QWEN3_32B_32K = 64 * 2 * 8 * 128 * 2 * 32_768
M4_MAX_64GB = 64 * 2**30 * 3 // 4  # macOS's default wired limit from 64 GB: 3/4
MLX_RUNTIME = 2**30  # mlx's assumed prefill activations and buffer cache


def _changes(report: api.FitReport) -> list[str]:
    assert report.verdict is not None and not report.verdict.fits
    return [r.change for r in report.verdict.remedies]


def test_a_mac_whose_weights_do_not_fit_is_offered_4_bit_weights_not_more_gpus() -> None:
    report = api.fit("qwen3-32b", engine="mlx", gpu="m4-max-64gb", tokens=32_768)
    assert report.budget.leaves_nothing  # 65.5 GB of bf16 weights in 48 GiB
    assert QWEN3_32B_Q4 == 18_428_694_336
    changes = _changes(report)
    assert not any("--tp" in c or "GPUs" in c for c in changes), changes
    first = report.verdict.first_remedy
    assert first is not None and first.change.startswith("4-bit weights (mlx_lm.convert -q)")
    assert f"--weights {QWEN3_32B_Q4:,}" in first.change
    headroom = M4_MAX_64GB - QWEN3_32B_Q4 - MLX_RUNTIME - QWEN3_32B_32K
    assert headroom == 23_447_236_800 and first.figure == f"headroom {headroom:,} B per GPU"


def test_a_mac_whose_cache_does_not_fit_is_offered_no_tensor_parallelism() -> None:
    # 4-bit weights given; six 32k requests need 6 x 8 GiB = 48 GiB of KV.
    for engine in ("mlx", "theoretical"):
        report = api.fit(
            "qwen3-32b",
            engine=engine,
            gpu="m4-max-64gb",
            tokens=32_768,
            batch=6,
            capacity=api.Capacity(weights=QWEN3_32B_Q4),
        )
        changes = _changes(report)
        assert not any("--tp" in c for c in changes), (engine, changes)
        assert not any("4-bit weights" in c for c in changes), changes  # already that small
    assert _changes(report)[0].startswith("fp8 KV cache")  # the theoretical engine's smaller format
    mlx = api.fit(
        "qwen3-32b",
        engine="mlx",
        gpu="m4-max-64gb",
        tokens=32_768,
        batch=6,
        capacity=api.Capacity(weights=QWEN3_32B_Q4),
    )
    assert _changes(mlx)[0] == "4-bit KV cache (--kv-bits 4)"


def test_mlx_off_a_mac_preset_offers_no_tensor_parallelism() -> None:
    """mlx-lm's tensor parallelism (mx.distributed) spans Macs: not a change on this machine."""
    report = api.fit("qwen3-32b", engine="mlx", tokens=32_768, capacity=api.Capacity(gpu_memory=48 * 2**30))
    assert not any("--tp" in c or "GPUs" in c for c in _changes(report))


def test_a_gpu_server_is_still_offered_more_gpus() -> None:
    report = api.fit("qwen3-32b", engine="vllm", gpu="rtx-4090", tokens=32_768)
    changes = _changes(report)
    assert any("--tp" in c for c in changes) and not any("4-bit weights" in c for c in changes), changes


def test_overhead_refuses_the_knobs_only_the_runtime_model_reads(run_cli) -> None:
    """--overhead replaces the whole runtime model (README): vLLM's max_num_seqs (the dummy
    sampler's rows) and --enforce-eager (no CUDA-graph estimate) then change nothing, as they change
    nothing beside --kv-budget; both were accepted and ignored."""
    for knob in ({"max_num_seqs": 5}, {"enforce_eager": True}):
        with pytest.raises(UsageError, match="has no effect") as raised:
            api.fit(
                "llama-3.1-8b",
                gpu="h100-sxm",
                serving=api.Serving(engine="vllm", options=knob),
                capacity=api.Capacity(overhead=10**9),
            )
        assert raised.value.params == ("overhead", *knob)
    for flags in (("--max-num-seqs", "5"), ("--enforce-eager",)):
        result = run_cli("fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm", "--overhead", "1GB", *flags)
        assert result.exit_code == 2
        assert (
            result.stderr == f"kvcalc: error: --overhead replaces the runtime's derivation: {flags[0]} has no "
            "effect with it\n"
        )
    # Without them --overhead still answers.
    assert (
        api.fit("llama-3.1-8b", gpu="h100-sxm", engine="vllm", capacity=api.Capacity(overhead=10**9)).result.max_tokens
        > 0
    )


def test_weights_that_leave_nothing_still_say_what_the_workload_needs() -> None:
    """Llama 3.1 70B's 141 GB of bf16 weights leave an L4 nothing: the verdict's needed_bytes was 0
    (so --json's headroom_bytes was the budget alone). 3 requests of 5,000 tokens need 80 layers x
    2 (K, V) x 8 KV heads x 128 x 2 B = 327,680 B a token x 15,000 tokens = 4,915,200,000 B."""
    report = api.fit("llama-3.1-70b", gpu="l4", tokens=5000, batch=3)
    assert report.budget.leaves_nothing and report.verdict is not None and not report.verdict.fits
    assert report.verdict.needed_bytes == 80 * 2 * 8 * 128 * 2 * 15_000 == 4_915_200_000
    assert report.verdict.headroom_bytes == report.budget.kv_bytes - 4_915_200_000


def test_a_request_past_the_model_limit_is_capped_and_not_called_a_fit() -> None:
    # Gemma-2-9B: max_position_embeddings 8,192. Whatever --tokens says, max context stops there.
    for tokens in (16_384, 131_072):
        report = api.fit("gemma-2-9b", gpu="h100", tokens=tokens)
        assert report.result.max_context == 8_192, tokens
        assert report.verdict is not None and not report.verdict.fits
        assert report.verdict.reason is not None and "past the model's context limit" in report.verdict.reason
    within = api.fit("gemma-2-9b", gpu="h100", tokens=8_192)
    assert within.verdict is not None and within.verdict.fits
    uncapped = api.fit("gemma-2-9b", gpu="h100", tokens=16_384, capacity=api.Capacity(context_cap=False))
    assert uncapped.verdict is not None and uncapped.verdict.fits


def test_weights_that_do_not_fit_are_a_verdict_exit_0(run_cli) -> None:
    # Llama-3.1-70B: 141,107,412,992 B of weights; an A100 40GB (42,298,834,944 B) x 0.9 less the 2 GiB
    # runtime leaves 35,921,467,801 B: 141,107,412,992 // 35,921,467,801 + 1 = 4 GPUs leave anything;
    # tp 5, 6 and 7 do not split its 64 query heads, tp 4 leaves too little for 8k tokens, tp 8 fits.
    result = run_cli("fit", "llama-3.1-70b", "--gpu", "a100-40gb", "--tokens", "8k", "--json")
    assert result.exit_code == 0, result.stderr
    data = result.json()
    assert data["fits"] is False and data["verdict"]["fits"] is False
    assert data["kv_budget_bytes"] == 35_921_467_801 - 141_107_412_992
    assert data["verdict"]["first_remedy"] == "8 GPUs (--tp 8)"
    text = run_cli("fit", "llama-3.1-70b", "--gpu", "a100-40gb", "--tokens", "8k")
    assert text.exit_code == 0 and "first change 8 GPUs (--tp 8)" in text.stdout


def test_a_float32_checkpoint_held_as_stored_says_where_it_would_be_16_bits() -> None:
    said = "holds this fp32 checkpoint as stored; vLLM, SGLang and llama.cpp hold it in 16 bits"
    assert any(
        said in n for n in api.fit("mamba-2.8b", gpu="h100", tokens=100, capacity=api.Capacity(overhead=0)).notes
    )
    assert not any(said in n for n in api.fit("llama-3.1-8b", gpu="h100", tokens=100).notes)


def test_a_fit_that_does_not_fit_reads_the_weights_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 37: fit re-entered itself through dict(locals()) for each remedy of its verdict, and each
    # re-entry read the weights again (3 reads for a Hub id: three network round trips). Llama 3.1
    # 70B's bf16 weights (~141 GB) leave nothing on one L4 (24 GB), so the verdict tries remedies
    # (more GPUs); the checkpoint's size is read once for all of them.
    import kvcalc.inputs.weights as weights_module

    reads: list[str] = []
    real = weights_module.weights_bytes

    def counted(model: str, **kwargs: object) -> tuple[int, str]:
        reads.append(model)
        return real(model, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(weights_module, "weights_bytes", counted)
    report = api.fit("llama-3.1-70b", gpu="l4", tokens=5000, batch=3)
    assert report.verdict is not None and not report.verdict.fits
    assert report.verdict.remedies  # the remedies were tried, from the same weights
    assert reads == ["llama-3.1-70b"]


def test_an_engine_may_say_the_request_length_fit_assumes(monkeypatch: pytest.MonkeyPatch) -> None:
    # Engine.default_tokens: the engine's own default context when tokens is not given, told the
    # memory of every GPU together (here 2 x 10 GiB), with its note.
    from kvcalc.engines.theoretical import Theoretical

    told: list[int | None] = []

    def one_token_a_mib(self, spec, gpu_memory):
        told.append(gpu_memory)
        return None if gpu_memory is None else (gpu_memory // 2**20, "a token a MiB")

    monkeypatch.setattr(Theoretical, "default_tokens", one_token_a_mib)
    report = api.fit("qwen3-8b", tp=2, capacity=api.Capacity(gpu_memory=10 * 2**30, weights=2**30))
    assert told[0] == 20 * 2**30
    assert report.result.tokens == 20 * 1024  # 20 GiB / 1 MiB
    assert any("tokens not given: requests of 20,480 tokens, the engine's default: a token a MiB" in n
               for n in report.notes)  # fmt: skip
    # A given budget stands in for the GPUs: the engine is told None.
    api.fit("qwen3-8b", capacity=api.Capacity(kv_budget=2**30))
    assert told[-1] is None


def test_an_engine_without_a_default_gets_kvcalcs() -> None:
    report = api.fit("qwen3-8b", gpu="h100-sxm", engine="vllm")
    assert report.result.tokens == 2048  # kvcalc.defaults.DEFAULT_TOKENS
    assert "tokens not given: requests of 2,048 tokens assumed" in report.notes


@pytest.mark.parametrize(
    ("gpu", "tp", "engine", "tokens"),
    [
        # server/routes.go v0.32.15: the GPUs' total memory >= 47 GiB: 262144, >= 23 GiB: 32768, else 4096.
        ("rtx-4090", 1, "ollama", 32768),  # 25,756,172,288 B = 23.99 GiB
        ("l4", 1, "ollama", 4096),  # 23,612,293,120 B = 21.99 GiB
        ("l4", 2, "ollama", 32768),  # 2 x 21.99 = 43.98 GiB
        ("l4", 4, "ollama", 262144),  # 4 x 21.99 = 87.96 GiB
        # Ollama 0.6.7 .. 0.15.4: 4096 whatever the memory (envconfig OLLAMA_CONTEXT_LENGTH's default).
        ("h100-sxm", 1, "ollama@0.14", 4096),
    ],
)  # fmt: skip
def test_fit_takes_ollamas_default_num_ctx_by_gpu_memory(gpu: str, tp: int, engine: str, tokens: int) -> None:
    # qwen3-8b's trained context is 40,960 (max_position_embeddings): 262144 is capped there.
    report = api.fit("qwen3-8b", gpu=gpu, tp=tp, engine=engine)
    assert report.result.tokens == min(tokens, 40960)


def test_llama_cpps_max_requests_fit_beside_their_own_compute_buffer() -> None:
    # llama.cpp's compute buffer holds a KQ mask of every cell, so N requests leave less budget than
    # the one asked: the answer N must fit when asked for itself, and N + 1 must not.
    from kvcalc.api import fit

    asked = fit("llama-3.1-8b", gpu="h100-sxm", tokens=32768, batch=2, engine="llama-server")
    n = asked.result.max_concurrency
    assert n > 2
    assert fit("llama-3.1-8b", gpu="h100-sxm", tokens=32768, batch=n, engine="llama-server").verdict.fits
    assert not fit("llama-3.1-8b", gpu="h100-sxm", tokens=32768, batch=n + 1, engine="llama-server").verdict.fits


def test_max_requests_below_what_the_asked_budget_holds_is_said() -> None:
    # gpt-oss-20b at 16k: the budget for one request holds more 16k requests than fit beside the
    # compute buffer so many need; the answer is the smaller, with a note saying why.
    from kvcalc.api import fit

    asked = fit("gpt-oss-20b", gpu="h100-sxm", tokens=16384, engine="llama-server")
    n = asked.result.max_concurrency
    assert any(note.startswith(f"max requests: {n:,}, not the") for note in asked.notes)
    assert fit("gpt-oss-20b", gpu="h100-sxm", tokens=16384, batch=n, engine="llama-server").verdict.fits
    assert not fit("gpt-oss-20b", gpu="h100-sxm", tokens=16384, batch=n + 1, engine="llama-server").verdict.fits
