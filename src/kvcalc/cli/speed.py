"""``kvcalc speed``: lower bounds on time to first token and time per output token."""

from typing import Annotated

import typer

from kvcalc.cli.options import (
    ENGINE_PANEL,
    HARDWARE_PANEL,
    OUTPUT_PANEL,
    SIZE_HELP,
    WORKLOAD_PANEL,
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
    json_or_drawing,
    print_json,
    print_view,
    say_fetching,
    split_list,
    warn,
    with_warnings,
)
from kvcalc.defaults import DEFAULT_OUTPUT, DEFAULT_PROMPT
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
            help="GPU preset, with its peak bandwidth and dense FLOP/s ('kvcalc gpus' lists them).",
            rich_help_panel=HARDWARE_PANEL,
        ),
    ] = None,
    prompt: Annotated[
        str,
        typer.Option(
            "--prompt",
            "-p",
            metavar="P",
            help="Prompt tokens per sequence (k = 1024); 0: decode only.",
            rich_help_panel=WORKLOAD_PANEL,
        ),
    ] = str(DEFAULT_PROMPT),
    output: Annotated[
        str,
        typer.Option(
            "--output",
            "-o",
            metavar="O",
            help="Generated tokens per sequence (k = 1024).",
            rich_help_panel=WORKLOAD_PANEL,
        ),
    ] = str(DEFAULT_OUTPUT),
    batch: BatchOpt = "1",
    tp: Annotated[
        int,
        typer.Option(
            "--tp",
            metavar="N",
            min=1,
            help="Tensor-parallel GPUs: weights, FLOPs split.",
            rich_help_panel=HARDWARE_PANEL,
        ),
    ] = 1,
    pp: Annotated[
        int,
        typer.Option(
            "--pp",
            metavar="N",
            min=1,
            help="Pipeline stages (their hand-offs added).",
            rich_help_panel=HARDWARE_PANEL,
        ),
    ] = 1,
    ep: Annotated[
        int,
        typer.Option(
            "--ep",
            metavar="N",
            min=1,
            help="Expert-parallel GPUs of the --tp (all-to-alls added).",
            rich_help_panel=HARDWARE_PANEL,
        ),
    ] = 1,
    dp_attention: DpAttentionOpt = 1,
    eager: Annotated[
        bool,
        typer.Option(
            "--eager",
            help="Estimate decode without CUDA graphs (an engine's eager mode).",
            rich_help_panel=ENGINE_PANEL,
        ),
    ] = False,
    engine: EngineOpt = DEFAULT_ENGINE,
    kv_dtype: KvDtypeOpt = None,
    compute_dtype: Annotated[
        str | None,
        typer.Option(
            "--compute-dtype",
            metavar="DTYPE",
            help="Whose dense peak times the FLOPs: bf16 (= fp16), fp8, fp4 or int8 (default: the fastest "
            "path for the checkpoint, and the engine's kernel for the estimate; said in notes).",
            rich_help_panel=HARDWARE_PANEL,
        ),
    ] = None,
    bandwidth: Annotated[
        str | None,
        typer.Option(
            "--bandwidth",
            metavar="RATE",
            help="Peak bandwidth per GPU instead of the preset's: 3.35TB/s, 3350GB/s.",
            rich_help_panel=HARDWARE_PANEL,
        ),
    ] = None,
    flops: Annotated[
        str | None,
        typer.Option(
            "--flops",
            metavar="RATE",
            help="Dense peak FLOP/s per GPU instead of the preset's: 989.4T, 989.4e12.",
            rich_help_panel=HARDWARE_PANEL,
        ),
    ] = None,
    bandwidth_efficiency: Annotated[
        float | None,
        typer.Option(
            "--bandwidth-efficiency",
            metavar="F",
            help="Share of peak bandwidth the estimate takes, in (0, 1].",
            rich_help_panel=HARDWARE_PANEL,
        ),
    ] = None,
    flops_efficiency: Annotated[
        float | None,
        typer.Option(
            "--flops-efficiency",
            metavar="F",
            help="Share of the dense peak its matmuls take, in (0, 1].",
            rich_help_panel=HARDWARE_PANEL,
        ),
    ] = None,
    weights: Annotated[
        str,
        typer.Option(
            "--weights",
            metavar="auto|SIZE",
            help="Model weights: auto (read as fit reads them) or a SIZE." + SIZE_HELP,
            rich_help_panel=WORKLOAD_PANEL,
        ),
    ] = "auto",
    weights_format: Annotated[
        str | None,
        typer.Option(
            "--weights-format",
            metavar="FMT",
            help="The checkpoint's format (bf16, fp8, int4, mxfp4, nvfp4, gguf, ...; default: from the "
            "config), which sets the estimate's matmul dtype.",
            rich_help_panel=WORKLOAD_PANEL,
        ),
    ] = None,
    sweep: Annotated[
        str | None,
        typer.Option(
            "--sweep",
            metavar="B,B,...",
            help="Batch sizes of the throughput table (default 1, 2, 4, ..., 256).",
            rich_help_panel=OUTPUT_PANEL,
        ),
    ] = None,
    explain: Annotated[
        bool,
        typer.Option(
            "--explain",
            help="Show the arithmetic of the first decode step and the prefill.",
            rich_help_panel=OUTPUT_PANEL,
        ),
    ] = False,
    chart: Annotated[
        bool,
        typer.Option(
            "--chart",
            help="Also draw the batch sweep as text bars.",
            rich_help_panel=OUTPUT_PANEL,
        ),
    ] = False,
    plot: Annotated[
        str | None,
        typer.Option(
            "--plot",
            metavar="FILE",
            help="Also save the batch sweep as FILE.png or .svg (the plot extra).",
            rich_help_panel=OUTPUT_PANEL,
        ),
    ] = None,
    as_json: JsonOpt = False,
    revision: RevisionOpt = None,
    strict: StrictOpt = False,
) -> None:
    """How fast: prefill (TTFT) and decode (TPOT) bounds from bytes and FLOPs, and estimates beside them.

    \b
    Examples:
      kvcalc speed llama-3.1-8b --gpu h100-sxm
      kvcalc speed llama-3.1-8b --gpu h100-sxm --engine vllm -p 1k -o 256
      kvcalc speed llama-3.1-70b --gpu h100 --tp 4 --batch 16 --sweep 1,16,64
      kvcalc speed qwen3-32b --gpu m4-max-64gb --engine mlx --explain

    A step takes at least max(bytes / bandwidth, FLOPs / peak): decode reads the active weights and
    every KV cache, prefill runs the prompt's FLOPs. Beside each bound, an estimate with a range.
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
        batch=count(batch, "--batch") or 1, gpu=gpu, layout=api.Layout(tp, pp, ep=ep, dp_attention=dp_attention),
        compute=api.Compute(
            weights_format=(weights_format or "").strip().lower() or None, eager=eager,
            bandwidth=parse_rate(bandwidth, what="--bandwidth") if bandwidth is not None else None,
            flops=parse_rate(flops, what="--flops") if flops is not None else None,
            compute_dtype=(compute_dtype or '').strip().lower() or None, bandwidth_efficiency=bandwidth_efficiency,
            flops_efficiency=flops_efficiency),
        engine=engine, kv_dtype=kv_dtype,
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
