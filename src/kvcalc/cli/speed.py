"""``kvcalc speed``: lower bounds on time to first token and time per output token."""

from typing import TYPE_CHECKING, Annotated

import typer

from kvcalc.cli.knobs import engine_knobs
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

if TYPE_CHECKING:
    from kvcalc.api import Compute, SpeedReport

# speed's own options (the others are shared: kvcalc.cli.options).
GpuOpt = Annotated[
    str | None,
    typer.Option(
        "--gpu",
        metavar="NAME",
        autocompletion=complete_gpu,
        help="GPU preset, with its peak bandwidth and dense FLOP/s ('kvcalc gpus' lists them).",
        rich_help_panel=HARDWARE_PANEL,
    ),
]
PromptOpt = Annotated[
    str,
    typer.Option(
        "--prompt",
        "-p",
        metavar="P",
        help="Prompt tokens per sequence (k = 1024); 0: decode only.",
        rich_help_panel=WORKLOAD_PANEL,
    ),
]
OutputOpt = Annotated[
    str,
    typer.Option(
        "--output",
        "-o",
        metavar="O",
        help="Generated tokens per sequence (k = 1024).",
        rich_help_panel=WORKLOAD_PANEL,
    ),
]
SpeedTpOpt = Annotated[
    int,
    typer.Option(
        "--tp",
        metavar="N",
        min=1,
        help="Tensor-parallel GPUs: weights, FLOPs split.",
        rich_help_panel=HARDWARE_PANEL,
    ),
]
SpeedPpOpt = Annotated[
    int,
    typer.Option(
        "--pp",
        metavar="N",
        min=1,
        help="Pipeline stages (their hand-offs added).",
        rich_help_panel=HARDWARE_PANEL,
    ),
]
EpOpt = Annotated[
    int,
    typer.Option(
        "--ep",
        metavar="N",
        min=1,
        help="Expert-parallel GPUs of the --tp (all-to-alls added).",
        rich_help_panel=HARDWARE_PANEL,
    ),
]
EagerOpt = Annotated[
    bool,
    typer.Option(
        "--eager",
        help="Estimate decode without CUDA graphs (an engine's eager mode).",
        rich_help_panel=ENGINE_PANEL,
    ),
]
ComputeDtypeOpt = Annotated[
    str | None,
    typer.Option(
        "--compute-dtype",
        metavar="DTYPE",
        help="Whose dense peak times the FLOPs: bf16 (= fp16), fp8, fp4 or int8 (default: the fastest "
        "path for the checkpoint, and the engine's kernel for the estimate; said in notes).",
        rich_help_panel=HARDWARE_PANEL,
    ),
]
BandwidthOpt = Annotated[
    str | None,
    typer.Option(
        "--bandwidth",
        metavar="RATE",
        help="Peak bandwidth per GPU instead of the preset's: 3.35TB/s, 3350GB/s.",
        rich_help_panel=HARDWARE_PANEL,
    ),
]
FlopsOpt = Annotated[
    str | None,
    typer.Option(
        "--flops",
        metavar="RATE",
        help="Dense peak FLOP/s per GPU instead of the preset's: 989.4T, 989.4e12.",
        rich_help_panel=HARDWARE_PANEL,
    ),
]
BandwidthEfficiencyOpt = Annotated[
    float | None,
    typer.Option(
        "--bandwidth-efficiency",
        metavar="F",
        help="Share of peak bandwidth the estimate takes, in (0, 1].",
        rich_help_panel=HARDWARE_PANEL,
    ),
]
FlopsEfficiencyOpt = Annotated[
    float | None,
    typer.Option(
        "--flops-efficiency",
        metavar="F",
        help="Share of the dense peak its matmuls take, in (0, 1].",
        rich_help_panel=HARDWARE_PANEL,
    ),
]
WeightsOpt = Annotated[
    str,
    typer.Option(
        "--weights",
        metavar="auto|SIZE",
        help="Model weights: auto (read as fit reads them) or a SIZE." + SIZE_HELP,
        rich_help_panel=WORKLOAD_PANEL,
    ),
]
WeightsFormatOpt = Annotated[
    str | None,
    typer.Option(
        "--weights-format",
        metavar="FMT",
        help="The checkpoint's format (bf16, fp8, int4, mxfp4, nvfp4, gguf, ...; default: from the "
        "config), which sets the estimate's matmul dtype.",
        rich_help_panel=WORKLOAD_PANEL,
    ),
]
SweepOpt = Annotated[
    str | None,
    typer.Option(
        "--sweep",
        metavar="B,B,...",
        help="Batch sizes of the throughput table (default 1, 2, 4, ..., 256).",
        rich_help_panel=OUTPUT_PANEL,
    ),
]
ExplainOpt = Annotated[
    bool,
    typer.Option(
        "--explain",
        help="Show the arithmetic of the first decode step and the prefill.",
        rich_help_panel=OUTPUT_PANEL,
    ),
]
ChartOpt = Annotated[
    bool,
    typer.Option(
        "--chart",
        help="Also draw the batch sweep as text bars.",
        rich_help_panel=OUTPUT_PANEL,
    ),
]
PlotOpt = Annotated[
    str | None,
    typer.Option(
        "--plot",
        metavar="FILE",
        help="Also save the batch sweep as FILE.png or .svg (the plot extra).",
        rich_help_panel=OUTPUT_PANEL,
    ),
]


@engine_knobs()
def speed(
    model: ModelArg = None,
    gpu: GpuOpt = None,
    prompt: PromptOpt = str(DEFAULT_PROMPT),
    output: OutputOpt = str(DEFAULT_OUTPUT),
    batch: BatchOpt = "1",
    tp: SpeedTpOpt = 1,
    pp: SpeedPpOpt = 1,
    ep: EpOpt = 1,
    dp_attention: DpAttentionOpt = 1,
    eager: EagerOpt = False,
    engine: EngineOpt = DEFAULT_ENGINE,
    kv_dtype: KvDtypeOpt = None,
    compute_dtype: ComputeDtypeOpt = None,
    bandwidth: BandwidthOpt = None,
    flops: FlopsOpt = None,
    bandwidth_efficiency: BandwidthEfficiencyOpt = None,
    flops_efficiency: FlopsEfficiencyOpt = None,
    weights: WeightsOpt = "auto",
    weights_format: WeightsFormatOpt = None,
    sweep: SweepOpt = None,
    explain: ExplainOpt = False,
    chart: ChartOpt = False,
    plot: PlotOpt = None,
    as_json: JsonOpt = False,
    revision: RevisionOpt = None,
    strict: StrictOpt = False,
    *,
    knobs: dict[str, int | bool],
) -> None:
    """How fast: prefill (TTFT) and decode (TPOT) bounds from bytes and FLOPs, and estimates beside them.

    \b
    Examples:
      kvcalc speed llama-3.1-8b --gpu h100-sxm
      kvcalc speed llama-3.1-8b --gpu h100-sxm --engine vllm -p 1k -o 256
      kvcalc speed llama-3.1-70b --gpu h100 --tp 4 --batch 16 --sweep 1,16,64
      kvcalc speed qwen3-32b --gpu m4-max-64gb --engine mlx --explain
      kvcalc speed --gpu h100-sxm -- vllm serve Qwen/Qwen3-8B -tp 2

    A step takes at least max(bytes / bandwidth, FLOPs / peak): decode reads the active weights and
    every KV cache, prefill runs the prompt's FLOPs. Beside each bound, an estimate with a range.

    After '--', an engine's own command line (vllm serve ..., llama-server ...) stands for its flags.
    """
    from kvcalc import api
    from kvcalc.errors import UsageError

    if model is None:
        raise UsageError("give a MODEL (preset, config.json, GGUF or repo id)")
    json_or_drawing(as_json, ("--explain", explain), ("--chart", chart), ("--plot", plot))
    compute = _compute(weights, weights_format, eager, bandwidth, flops, compute_dtype, bandwidth_efficiency,
                       flops_efficiency)  # fmt: skip
    report = api.speed(
        model, prompt=count_or_zero(prompt, "--prompt") or 0, output=count(output, "--output") or 1,
        batch=count(batch, "--batch") or 1, gpu=gpu, layout=api.Layout(tp, pp, ep=ep, dp_attention=dp_attention),
        compute=compute, serving=api.Serving(engine, kv_dtype=kv_dtype, options=knobs), sweep=_sweep(sweep),
        revision=revision, on_fetch=say_fetching, strict=strict,
    )  # fmt: skip
    _show(report, as_json=as_json, explain=explain, chart=chart, plot=plot)


def _compute(weights: str, weights_format: str | None, eager: bool, bandwidth: str | None, flops: str | None,
             compute_dtype: str | None, bandwidth_efficiency: float | None,
             flops_efficiency: float | None) -> "Compute":  # fmt: skip
    """The flags of the checkpoint (its bytes and format) and the GPU's peaks as the API's ``Compute``."""
    from kvcalc import api
    from kvcalc.units import parse_size

    return api.Compute(
        weights_format=(weights_format or "").strip().lower() or None, eager=eager,
        bandwidth=parse_rate(bandwidth, what="--bandwidth") if bandwidth is not None else None,
        flops=parse_rate(flops, what="--flops") if flops is not None else None,
        compute_dtype=(compute_dtype or '').strip().lower() or None, bandwidth_efficiency=bandwidth_efficiency,
        flops_efficiency=flops_efficiency,
        weights=None if weights.strip().lower() == "auto" else parse_size(weights, what="--weights"),
    )  # fmt: skip


def _sweep(sweep: str | None) -> list[int] | None:
    """--sweep's batch sizes (None: the API's default sweep)."""
    if sweep is None:
        return None
    return [count(b, "--sweep") or 1 for b in split_list(sweep, "--sweep")]


def _show(report: "SpeedReport", *, as_json: bool, explain: bool, chart: bool, plot: str | None) -> None:
    """The report as JSON, or as tables (and the sweep's text bars or saved plot)."""
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
