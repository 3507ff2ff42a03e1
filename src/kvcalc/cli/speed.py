"""``kvcalc speed``: lower bounds on time to first token and time per output token."""

from typing import Annotated

import typer

from kvcalc.cli.options import (
    SIZE_HELP,
    BatchOpt,
    DpAttentionOpt,
    EngineOpt,
    JsonOpt,
    KvDtypeOpt,
    ModelArg,
    RevisionOpt,
    StrictOpt,
    complete_gpu,
    count,
    count_or_zero,
    echo,
    gpu_names,
    json_or_drawing,
    print_json,
    print_view,
    say_fetching,
    split_list,
    warn,
    with_warnings,
)
from kvcalc.engines import DEFAULT_ENGINE
from kvcalc.units import parse_rate


def speed(
    model: ModelArg = None,
    gpu: Annotated[
        str | None,
        typer.Option(
            "--gpu",
            metavar="NAME",
            autocompletion=complete_gpu,
            help=f"GPU preset with its peak bandwidth and dense FLOPs (see the notes for the sources): {gpu_names()}.",
        ),
    ] = None,
    prompt: Annotated[
        str,
        typer.Option("--prompt", "-p", metavar="P", help="Prompt tokens per sequence (k = 1024); 0: decode only."),
    ] = "1024",
    output: Annotated[
        str, typer.Option("--output", "-o", metavar="O", help="Generated tokens per sequence (k = 1024).")
    ] = "256",
    batch: BatchOpt = "1",
    tp: Annotated[
        int, typer.Option("--tp", metavar="N", min=1, help="Tensor-parallel GPUs: weights and FLOPs split evenly.")
    ] = 1,
    pp: Annotated[
        int,
        typer.Option("--pp", metavar="N", min=1, help="Pipeline stages: the estimate adds the hand-offs between them."),
    ] = 1,
    ep: Annotated[
        int,
        typer.Option(
            "--ep", metavar="N", min=1, help="Expert-parallel GPUs of the --tp: the estimate adds the all-to-alls."
        ),
    ] = 1,
    dp_attention: DpAttentionOpt = 1,
    eager: Annotated[
        bool,
        typer.Option(
            "--eager",
            help="Estimate decode without CUDA graphs (vLLM's --enforce-eager, SGLang's --disable-cuda-graph).",
        ),
    ] = False,
    engine: EngineOpt = DEFAULT_ENGINE,
    kv_dtype: KvDtypeOpt = None,
    compute_dtype: Annotated[
        str | None,
        typer.Option(
            "--compute-dtype",
            metavar="DTYPE",
            help="Whose dense tensor peak times the FLOPs, bound and estimate: bf16 (= fp16), fp8, fp4 or int8. "
            "Default: for the bound the fastest path an engine may take for the checkpoint (fp8 for FP8 weights, "
            "fp4 for FP4 where the GPU has it, int8 for a quantized GGUF, else bf16); for the estimate the "
            "engine's own kernel for the weights' format on this GPU generation. Both said in notes.",
        ),
    ] = None,
    bandwidth: Annotated[
        str | None,
        typer.Option(
            "--bandwidth",
            metavar="RATE",
            help="Peak memory bandwidth per GPU instead of the "
            "preset's: 3.35TB/s, 3350GB/s or bytes/s (decimal prefixes).",
        ),
    ] = None,
    flops: Annotated[
        str | None,
        typer.Option(
            "--flops",
            metavar="RATE",
            help="Dense peak FLOP/s per GPU at --compute-dtype instead of "
            "the preset's: 989.4T, 989.4TFLOPS or 989.4e12.",
        ),
    ] = None,
    bandwidth_efficiency: Annotated[
        float | None,
        typer.Option(
            "--bandwidth-efficiency",
            metavar="F",
            help="Share of peak bandwidth the estimate takes, in (0, 1], instead of the fitted table's.",
        ),
    ] = None,
    flops_efficiency: Annotated[
        float | None,
        typer.Option(
            "--flops-efficiency",
            metavar="F",
            help="Share of the dense peak the estimate's matmuls take, in (0, 1], instead of the fitted table's.",
        ),
    ] = None,
    weights: Annotated[
        str,
        typer.Option(
            "--weights",
            metavar="auto|SIZE",
            help="Model weights: auto reads them as fit does (safetensors "
            "index, the Hub, a GGUF's tensors, the preset); SIZE gives them, e.g. 70GB for an FP8 70B." + SIZE_HELP,
        ),
    ] = "auto",
    weights_format: Annotated[
        str | None,
        typer.Option(
            "--weights-format",
            metavar="FMT",
            help="The checkpoint's format, which decides the estimate's matmul dtype: bf16, fp16, fp32, fp8, int8, "
            "int4 (AWQ, GPTQ), mxfp4, nvfp4 or gguf (quantized). Default: from the config or bytes per parameter.",
        ),
    ] = None,
    sweep: Annotated[
        str | None,
        typer.Option(
            "--sweep",
            metavar="B,B,...",
            help="Batch sizes of the throughput table (default 1, 2, 4, ..., 256, plus --batch).",
        ),
    ] = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="Show the arithmetic of the first decode step and of the prefill.")
    ] = False,
    chart: Annotated[
        bool, typer.Option("--chart", help="Also draw TPOT per request and the batch's tokens/s as text bars.")
    ] = False,
    plot: Annotated[
        str | None,
        typer.Option(
            "--plot",
            metavar="FILE",
            help="Also save the batch sweep (TPOT per request and the batch's tokens/s) as FILE.png or FILE.svg "
            "(needs matplotlib: the plot extra).",
        ),
    ] = None,
    as_json: JsonOpt = False,
    revision: RevisionOpt = None,
    strict: StrictOpt = False,
) -> None:
    """How fast: prefill (TTFT) and decode (TPOT) bounds from bytes and FLOPs, and estimates beside them.

    A decode step reads the active weights (MoE: the routed experts) and every sequence's KV cache
    as kvcalc's per-layer model keeps it (windows, latents, states, per engine); prefill runs the
    prompt's FLOPs (dense and causal attention). Each step takes at least max(bytes / bandwidth,
    FLOPs / peak): real engines are slower, never faster. Beside each bound, an estimate with a
    range: the kernels at fitted shares of peak, TP/EP/PP communication over the GPU's link, the
    engine's own per-step time and MoE routing. Also: where prefill turns compute-bound, where the
    KV read overtakes the weights, and a batch sweep of per-request TPOT vs tokens/s.
    """
    from kvcalc import api
    from kvcalc.errors import UsageError
    from kvcalc.units import parse_size

    if model is None:
        raise UsageError("give a MODEL (preset, config.json, GGUF or repo id)")
    json_or_drawing(as_json, ("--explain", explain), ("--chart", chart), ("--plot", plot))
    batches = None
    if sweep is not None:
        batches = [count(b, "--sweep") or 1 for b in split_list(sweep, "--sweep")]
    report = api.speed(
        model, prompt=count_or_zero(prompt, "--prompt") or 0, output=count(output, "--output") or 1,
        batch=count(batch, "--batch") or 1, gpu=gpu, tp=tp, pp=pp, ep=ep, dp_attention=dp_attention, eager=eager,
        weights_format=(weights_format or "").strip().lower() or None,
        bandwidth=parse_rate(bandwidth, what="--bandwidth") if bandwidth is not None else None,
        flops=parse_rate(flops, what="--flops") if flops is not None else None,
        compute_dtype=(compute_dtype or '').strip().lower() or None, bandwidth_efficiency=bandwidth_efficiency,
        flops_efficiency=flops_efficiency, engine=engine, kv_dtype=kv_dtype,
        weights=None if weights.strip().lower() == "auto" else parse_size(weights, what="--weights"),
        sweep=batches, revision=revision, on_fetch=say_fetching, strict=strict,
    )  # fmt: skip
    warn(report.model.spec.warnings)
    if as_json:
        from kvcalc.views.json import speed_json

        print_json(with_warnings(speed_json(report), report.model.spec.warnings))
        return
    if plot is not None:
        from kvcalc.charts import save_speed_plot

        s = report.result
        save_speed_plot(s.sweep, plot, f"{report.model.name} on {s.hardware.label}: prompt {s.prompt:,}, "
                        f"output {s.output:,} (bounds)")  # fmt: skip
    from kvcalc.views.speed import speed_view

    print_view(speed_view(report, explain=explain, chart=chart))
    if plot is not None:
        echo(f"plot saved to {plot}")
