"""``kvcalc speed``'s estimate (kvcalc.calc.step_cost) and the parameters behind its FLOPs, derived
here by hand.

Figures: Llama-2-7B (tests/fixtures/Llama-2-7b-hf.json: hidden 4,096, 32 layers of 32 heads x 128,
intermediate 11,008, vocabulary 32,000, untied head); DeepSeek-V3 (hidden 7,168, 128 heads, q_lora
1,536, kv_lora 512, qk_nope 128, qk_rope 64, v_head 128, 61 layers); H100 SXM NVLink 4: 900 GB/s
both ways, 450 GB/s a direction (NVIDIA's datasheet).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kvcalc import api
from kvcalc.calc import step_cost as sc
from kvcalc.calc.params import attention_params, count_parameters
from kvcalc.errors import UsageError
from kvcalc.inputs.hf.configs import text_config
from kvcalc.inputs.hf.dims import read_dims
from kvcalc.kinds.base import Kind

FIXTURES = Path(__file__).parents[1] / "fixtures"
LLAMA2_7B = FIXTURES / "Llama-2-7b-hf.json"
# Llama-2-7B by hand: embedding and head 32,000 x 4,096 each (untied); per layer q, k, v, o 4 x
# 4,096^2 = 67,108,864, gate/up/down 3 x 4,096 x 11,008 = 135,266,304, two norms 8,192; the final
# norm 4,096: 2 x 131,072,000 + 32 x 202,383,360 + 4,096 = 6,738,415,616 (= Llama-2-7b-hf's
# safetensors total_size / 2, less its rotary buffers).
LLAMA2_7B_PARAMS = 2 * 131_072_000 + 32 * (67_108_864 + 135_266_304 + 8_192) + 4_096
# DeepSeek-V3's MLA by hand (modeling_deepseek_v3.py): q_a 7,168 x 1,536 + its norm 1,536 + q_b
# 1,536 x 128 x 192 = 48,760,320; kv_a 7,168 x (512 + 64) = 4,128,768, its norm 512; kv_b 512 x 128
# x (128 + 128) = 16,777,216; o 128 x 128 x 7,168 = 117,440,512.
DSV3_ATTENTION = 48_760_320 + 4_128_768 + 512 + 16_777_216 + 117_440_512
DSV3_LATENT_TOKEN = 61 * (512 + 64) * 2  # bytes a token of bf16 latent, every layer


def _config(path: Path) -> tuple[dict, dict]:  # type: ignore[type-arg]
    raw = json.loads(path.read_text())
    text, _ = text_config(raw)
    return raw, dict(text)


def test_hand_figures() -> None:
    assert LLAMA2_7B_PARAMS == 6_738_415_616
    assert DSV3_ATTENTION == 187_107_328 and DSV3_LATENT_TOKEN == 70_272


def test_llama2_parameters_counted_from_the_config() -> None:
    raw, text = _config(LLAMA2_7B)
    dims = read_dims(raw)
    assert dims is not None
    counted, why = count_parameters(dims, text, frozenset({Kind.FULL}), model_type="llama", tied=False)
    assert counted is not None, why
    assert counted.total == LLAMA2_7B_PARAMS
    assert counted.attention == 32 * 67_108_864


def test_mla_attention_parameters_by_hand() -> None:
    opened = api.open_model("deepseek-v3")
    assert opened.source is not None and isinstance(opened.source.config, dict)
    raw = opened.source.config
    text = dict(text_config(raw)[0])
    dims = read_dims(raw)
    assert dims is not None
    assert attention_params(dims, text) == DSV3_ATTENTION


def test_state_layers_are_not_counted() -> None:
    raw, text = _config(LLAMA2_7B)
    dims = read_dims(raw)
    assert dims is not None
    counted, why = count_parameters(dims, text, frozenset({Kind.FULL, Kind.MAMBA}), model_type="x", tied=False)
    assert counted is None and "not counted" in why


def test_a_plain_config_with_given_fp8_weights_keeps_its_parameters() -> None:
    """An FP8 Llama-2-7B given as 6,738,415,616 bytes (1 a parameter) still multiplies every
    parameter: the body (all but embedding and head) at 2 FLOPs a token over 2,048 tokens is
    2 x (6,738,415,616 - 2 x 131,072,000) x 2,048. Taken as bytes / 2, it would be about half."""
    r = api.speed(
        str(LLAMA2_7B), prompt=2048, output=2, gpu="h100-sxm", compute=api.Compute(weights=LLAMA2_7B_PARAMS), sweep=[]
    )
    body = 2 * (LLAMA2_7B_PARAMS - 2 * 131_072_000) * 2048
    assert r.result.prefill.flops - r.result.prefill.attention_flops == body + 2 * 131_072_000
    assert any("parameters counted from the config's widths: 6,738,415,616" in n for n in r.notes)


def test_an_all_reduce_by_hand() -> None:
    """Llama-3.1-70B decode (80 layers, hidden 8,192, batch 1) on 4 GPUs of NVLink 450 GB/s a
    direction, at a 70% share and 8 us a collective: each all-reduce of 8,192 x 2 B = 16,384 B takes
    8 us + 2 x 3/4 x 16,384 / (450e9 x 0.7) s, two a layer."""
    costs = replace(sc.COSTS, link_latency_s={"nvlink": 8e-6, "": 8e-6}, link_share=0.7)
    device = sc.Device(3_350 * 10**9, 989 * 10**12, 989 * 10**12, "bf16", "hopper", "nvlink", 450 * 10**9)
    model = sc.Model(layers=80, hidden=8192, moe_layers=0, top_k=0)
    one = 8e-6 + 2 * 3 / 4 * 16_384 / (450e9 * 0.7)
    assert sc.communication(device, model, sc.Layout(tp=4), 1, costs) == pytest.approx(160 * one, rel=1e-12)
    assert sc.communication(device, model, sc.Layout(tp=1), 1, costs) == 0.0
    # Two pipeline stages hand the hidden state on once: 8 us + 16,384 B over the link.
    both = sc.communication(device, model, sc.Layout(tp=1, pp=2), 1, costs)
    assert both == pytest.approx(8e-6 + 16_384 / (450e9 * 0.7), rel=1e-12)


def test_the_engine_term_by_hand() -> None:
    """vLLM's decode step: its per-step time plus 32 layers at the CUDA-graph rate; --eager: at the
    eager rate."""
    graphs = api.speed("llama-3.1-8b", prompt=512, output=2, gpu="h100-sxm", engine="vllm", sweep=[])
    eager = api.speed(
        "llama-3.1-8b", prompt=512, output=2, gpu="h100-sxm", engine="vllm", sweep=[], compute=api.Compute(eager=True)
    )
    assert graphs.estimate is not None and eager.estimate is not None
    o = graphs.estimate.overhead
    assert graphs.estimate.decode.overhead_s == pytest.approx(o.step_s + 32 * o.layer_graphs_s, rel=1e-12)
    assert eager.estimate.decode.overhead_s == pytest.approx(o.step_s + 32 * o.layer_eager_s, rel=1e-12)
    assert eager.estimate.at.tpot_mean_s > graphs.estimate.at.tpot_mean_s
    assert graphs.result.decode.mean_s == eager.result.decode.mean_s  # the bound is the same


def test_expert_parallel_is_refused_for_a_dense_model() -> None:
    with pytest.raises(UsageError, match="routes to no experts"):
        api.speed("llama-3.1-8b", prompt=16, output=2, gpu="h100-sxm", sweep=[], layout=api.Layout(tp=2, ep=2))
    moe = api.speed("mixtral-8x7b", prompt=16, output=2, gpu="h100-sxm", sweep=[], layout=api.Layout(tp=2, ep=2))
    assert moe.estimate is not None and moe.estimate.setting.layout.ep == 2


@pytest.mark.parametrize(("engine", "gpu"), [("transformers", "h100-sxm"), ("mlx", "m4-max-64gb")])
def test_eager_is_refused_where_there_are_no_cuda_graphs(engine: str, gpu: str) -> None:
    with pytest.raises(UsageError, match="no CUDA graphs to turn off"):
        api.speed(
            "llama-3.1-8b", prompt=16, output=2, gpu=gpu, engine=engine, sweep=[], compute=api.Compute(eager=True)
        )


@pytest.mark.parametrize(
    ("model", "gpu", "tp", "batch", "prompt"),
    [("llama-3.1-8b", "h100-sxm", 1, 1, 1024), ("llama-3.1-70b", "a100-80gb", 4, 16, 4096),
     ("mixtral-8x7b", "l40s", 2, 4, 512), ("deepseek-v3", "h200", 8, 32, 2048), ("gpt-oss-120b", "b200", 1, 8, 100),
     ("qwen3-32b", "rtx-4090", 2, 2, 0)],
)  # fmt: skip
def test_estimate_is_never_below_the_bound_and_its_range_brackets_it(
    model: str, gpu: str, tp: int, batch: int, prompt: int
) -> None:
    r = api.speed(model, prompt=prompt, output=64, batch=batch, gpu=gpu, tp=tp, sweep=sorted({1, batch}))
    s, est = r.result, r.estimate
    assert est is not None
    bounds = {"ttft_seconds": s.prefill.seconds, "ttft_mean_seconds": s.ttft_mean_s,
              "tpot_mean_seconds": s.decode.mean_s}  # fmt: skip
    a = est.at
    figures = {"ttft_seconds": a.ttft_s, "ttft_mean_seconds": a.ttft_mean_s, "tpot_mean_seconds": a.tpot_mean_s,
               "e2e_seconds": a.e2e_s}  # fmt: skip
    for name, bound in bounds.items():
        assert bound <= a.low[name] <= figures[name] <= a.high[name], name
    assert a.low["e2e_seconds"] <= a.e2e_s <= a.high["e2e_seconds"]
    assert a.output_tokens_per_s <= a.high["output_tokens_per_s"] <= batch / s.decode.mean_s
    assert a.output_tokens_per_s == pytest.approx(batch / a.tpot_mean_s)
    assert [p.batch for p in est.sweep] == [r.batch for r in s.sweep]


def test_prompt_zero_decodes_from_an_empty_context() -> None:
    """llama-bench's tg128: every output token a decode step, contexts 0 .. 127; no prefill. The
    last step reads 127 tokens of Llama-3.1-8B's 131,072 B a token (llama.cpp would read its 256
    padded cells: the theoretical cache here)."""
    r = api.speed("llama-3.1-8b", prompt=0, output=128, gpu="rtx-4090", sweep=[])
    s = r.result
    assert s.decode.steps == 128 and s.decode.first.kv_bytes == 0
    assert s.decode.last.kv_bytes == 127 * 131_072
    assert s.prefill.seconds == 0 and s.ttft_mean_s == 0
    assert r.estimate is not None and r.estimate.at.ttft_s == 0 and r.estimate.prefill_passes == 0
    assert r.estimate.at.e2e_s == pytest.approx(128 * r.estimate.at.tpot_mean_s)


@pytest.mark.parametrize(
    ("model", "gpu", "weights_format", "expected"),
    [("gpt-oss-120b", "h100-sxm", None, "bf16"),  # MXFP4 on Hopper: dequantized (W4A16)
     ("gpt-oss-120b", "b200", None, "fp4"),  # Blackwell's FP4 tensor cores
     ("llama-3.1-8b", "a100-80gb", "fp8", "bf16"),  # no FP8 tensor cores on Ampere: W8A16
     ("llama-3.1-8b", "h100-sxm", "fp8", "fp8"), ("llama-3.1-8b", "h100-sxm", "int4", "bf16")],
)  # fmt: skip
def test_the_engines_matmul_dtype_by_format_and_generation(
    model: str, gpu: str, weights_format: str | None, expected: str
) -> None:
    weights = 8_030_261_248 if weights_format == "fp8" else 4_500_000_000 if weights_format == "int4" else None
    r = api.speed(
        model,
        prompt=64,
        output=2,
        gpu=gpu,
        engine="vllm",
        sweep=[],
        compute=api.Compute(weights_format=weights_format, weights=weights),
    )
    assert r.estimate is not None and r.estimate.setting.device.compute_dtype == expected


def test_dp_attention_caches_each_groups_requests() -> None:
    """DeepSeek-V3 on 8 GPUs, batch 8 at 1,000 tokens: under TP every GPU holds every request's
    latent (MLA's one KV head is not split), 8 x 1,000 x 70,272 B; with 8 attention-DP groups each
    holds one request's, and the attention weights split over 1 GPU instead of 8: 7/8 of them more a
    GPU (61 x 187,107,328 parameters at the checkpoint's mean bytes a parameter)."""
    # SGLang's --enable-dp-attention (the theoretical engine runs none: refused there)
    tp = api.speed("deepseek-v3", prompt=1000, output=2, batch=8, gpu="h200", tp=8, engine="sglang", sweep=[])
    dp = api.speed(
        "deepseek-v3",
        prompt=1000,
        output=2,
        batch=8,
        gpu="h200",
        engine="sglang",
        sweep=[],
        layout=api.Layout(tp=8, dp_attention=8),
    )
    assert tp.result.decode.first.kv_bytes == 8 * 1000 * DSV3_LATENT_TOKEN
    assert dp.result.decode.first.kv_bytes == 1000 * DSV3_LATENT_TOKEN
    w = tp.result.weights
    attention_bytes = int(61 * DSV3_ATTENTION * w.bytes_per_param)
    assert dp.result.weights.replicated_per_gpu == attention_bytes * 7 // 8
    assert dp.result.decode.first.weight_bytes == tp.result.decode.first.weight_bytes + attention_bytes * 7 // 8
    with pytest.raises(UsageError, match="must divide tp"):
        api.speed("deepseek-v3", prompt=10, output=2, gpu="h200", sweep=[], layout=api.Layout(tp=8, dp_attention=3))


def test_fit_with_dp_attention_holds_each_groups_requests() -> None:
    """The same layout in fit: the budget loses the attention weights a GPU holds beyond its TP
    share, and each of the 8 GPUs caches its own requests, so the TP group holds 8 x as many
    requests per byte of budget."""
    base = api.fit("deepseek-v3", gpu="h200", tp=8, engine="sglang", tokens=32_768)
    dp = api.fit("deepseek-v3", gpu="h200", engine="sglang", tokens=32_768, layout=api.Layout(tp=8, dp_attention=8))
    extra = next(line for line in dp.budget.lines if line.label == "- attention weights beyond a TP share")
    preset = api.open_model("deepseek-v3").source.preset  # type: ignore[union-attr]
    assert preset is not None and preset.weights is not None
    weights = next(line for line in base.budget.lines if line.label == "- weights")
    assert weights.detail is not None
    loaded = int(weights.detail.split(" B / ")[0].replace(",", ""))
    attention = 61 * DSV3_ATTENTION * loaded // preset.parameters  # type: ignore[operator]
    assert extra.bytes == attention * 7 // 8
    assert dp.budget.kv_bytes == base.budget.kv_bytes - extra.bytes
    per_gpu_requests = dp.result.max_concurrency / 8
    assert per_gpu_requests == pytest.approx(base.result.max_concurrency * dp.budget.kv_bytes / base.budget.kv_bytes,
                                             rel=0.02)  # fmt: skip


def test_the_json_estimate_keeps_the_bounds_names() -> None:
    from kvcalc.views.json import speed_json

    r = api.speed("llama-3.1-8b", prompt=256, output=16, batch=2, gpu="h100-sxm", engine="vllm", sweep=[2])
    data = speed_json(r)
    est = data["estimate"]
    for name in ("ttft_seconds", "ttft_mean_seconds", "tpot_mean_seconds", "e2e_seconds", "output_tokens_per_s"):
        assert est["low"][name] <= est[name] <= est["high"][name]
    assert data["prefill"]["ttft_seconds"] <= est["ttft_seconds"]
    assert data["decode"]["tpot_mean_seconds"] <= est["tpot_mean_seconds"]
    assert est["sweep"][0]["batch"] == 2 and est["cuda_graphs"] is True
    assert est["engine_costs"]["engine"] == "vllm" and est["prefill_passes"] == 1
    assert data["kind"] == "bound"


# --- where the estimate extrapolates ---------------------------------------------------------------

MEASUREMENTS = Path(__file__).parents[2] / "benchmarks" / "data" / "speed_measurements.yaml"


def test_the_coverage_is_what_the_measurements_hold() -> None:
    """The table's coverage is read off the fit set itself: each measured point's GPU generation,
    its model's layer kinds and experts, its layout. A point added to the file moves it."""
    import yaml

    from kvcalc.gpus import find_gpu

    points = yaml.safe_load(MEASUREMENTS.read_text())
    coverage = sc.COSTS.coverage
    archs = {peaks.arch for p in points if (peaks := find_gpu(p["gpu"]).peaks) is not None}
    assert set(coverage.archs) == archs
    models = [api.open_model(name) for name in sorted({p["model"] for p in points})]
    assert coverage.kinds == {str(c.kind) for m in models for c in m.spec.caches}
    moe = [m.name for m in models if (dims := read_dims(m.source.config)) is not None and dims.is_moe]
    assert coverage.moe == bool(moe) and moe == ["gpt-oss-120b", "gpt-oss-20b"]
    assert coverage.max_tp == max(p["tp"] for p in points) == 8
    for key in ("pp", "ep", "dp_attention"):
        assert getattr(coverage, key) == any(p.get(key, 1) > 1 for p in points), key


def test_deepseek_v3_on_8_h200_says_where_it_extrapolates(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """No measured model caches an MLA latent and no point runs expert parallelism: the title says
    so, by what the fit set lacks, not by the model's name."""
    monkeypatch.setenv("COLUMNS", "200")
    title = "Bound (never beaten) and estimate ({})"
    text = run_cli("speed", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--ep", "8").stdout
    assert title.format("partly extrapolated: no MLA / expert-parallel measurement") in text
    assert "fitted on published measurements" not in text
    assert "estimate: no MLA / expert-parallel measurement is in the fit" in text
    text = run_cli("speed", "deepseek-v3", "--gpu", "h200", "--tp", "8").stdout
    assert title.format("partly extrapolated: no MLA measurement") in text
    # A measured kind of model in a measured layout: fitted.
    text = run_cli("speed", "llama-3.1-70b", "--gpu", "h200", "--tp", "8").stdout
    assert title.format("fitted on published measurements") in text and "is in the fit" not in text


def test_extrapolated_names_each_gap() -> None:
    model = sc.Model(layers=61, hidden=7168, moe_layers=58, top_k=8, experts=256,
                     kinds=frozenset({str(Kind.MLA)}))  # fmt: skip
    assert sc.extrapolated("hopper", model, sc.Layout(tp=8)) == ("MLA",)
    assert sc.extrapolated("apple", model, sc.Layout(tp=16, pp=2, ep=8, dp_attention=2)) == (
        "apple GPU", "MLA", "tp 16", "pipeline-parallel", "expert-parallel", "attention-DP",
    )  # fmt: skip
    dense = sc.Model(layers=32, hidden=4096, moe_layers=0, top_k=0, kinds=frozenset({str(Kind.FULL)}))
    assert sc.extrapolated("hopper", dense, sc.Layout(tp=8)) == ()
    assert sc.extrapolated("hopper", dense, sc.Layout(), replace(sc.COSTS.coverage, moe=False)) == ()


def test_mean_ttft_over_prefill_passes_by_hand() -> None:
    # vLLM passes of at most 8,192 tokens (max_num_batched_tokens): 3 prompts of 5,000 take 2 passes
    # of 7,500; the prompts end in passes ceil(5,000 / 7,500) = 1, ceil(10,000 / 7,500) = 2 and 2:
    # the mean TTFT is 5 / 3 passes, plus the engine's own time a request.
    r = api.speed("llama-3.1-8b", prompt=5000, output=2, batch=3, gpu="h100-sxm", engine="vllm", sweep=[])
    e = r.estimate
    assert e is not None and e.prefill_passes == 2
    assert e.at.ttft_mean_s == pytest.approx(5 / 3 * e.prefill.seconds + e.overhead.request_s, rel=1e-12)


def test_a_billion_requests_pass_by_pass_in_closed_form() -> None:
    # 10^9 prompts of 1,024 in passes of 8,192: the i-th ends in pass ceil(i / 8), and the sum over
    # i = 1..10^9 of ceil(i / 8) is 8 x (1 + ... + 10^9 / 8): the mean is (10^9 / 8 + 1) / 2 passes.
    b = 10**9
    r = api.speed("llama-3.1-8b", prompt=1024, output=2, batch=b, gpu="h100-sxm", engine="vllm", sweep=[])
    e = r.estimate
    assert e is not None and e.prefill_passes == b // 8
    mean = (b // 8 + 1) / 2 * e.prefill.seconds + e.overhead.request_s
    assert e.at.ttft_mean_s == pytest.approx(mean, rel=1e-9)
