"""``kvcalc fit``: what fits on a GPU (or a KV budget): tokens, concurrent requests, context."""

from typing import TYPE_CHECKING, Annotated

import typer

from kvcalc.cli.knobs import engine_knobs
from kvcalc.cli.options import (
    HARDWARE_PANEL,
    SIZE_HELP,
    WORKLOAD_PANEL,
    BatchOpt,
    DpAttentionOpt,
    DpOpt,
    EngineOpt,
    ImagesOpt,
    ImageTokensOpt,
    JsonOpt,
    KDtypeOpt,
    KvDtypeOpt,
    ModelArg,
    PpOpt,
    QuantGroupOpt,
    ResidualOpt,
    RevisionOpt,
    StrictOpt,
    TokensOpt,
    UnitsName,
    UnitsOpt,
    VDtypeOpt,
    complete_gpu,
    count,
    count_or_zero,
    print_json,
    print_view,
    say_fetching,
    serving_flags,
    size,
    units,
    warn,
    with_warnings,
)
from kvcalc.engines import DEFAULT_ENGINE
from kvcalc.units import Units, parse_size

if TYPE_CHECKING:
    from kvcalc.api import Capacity, FitReport


# fit's own options (the others are shared: kvcalc.cli.options).
GpuOpt = Annotated[
    str | None,
    typer.Option(
        "--gpu",
        metavar="NAME",
        autocompletion=complete_gpu,
        help="GPU preset, its memory as the runtime reports it ('kvcalc gpus' lists them).",
        rich_help_panel=HARDWARE_PANEL,
    ),
]
GpusOpt = Annotated[
    int | None,
    typer.Option(
        "--gpus",
        metavar="N",
        min=1,
        help="GPUs in all (default tp x pp x dp; alone: --tp).",
        rich_help_panel=HARDWARE_PANEL,
    ),
]
GpuMemoryOpt = Annotated[
    str | None,
    typer.Option(
        "--gpu-memory",
        metavar="SIZE",
        help="Memory per GPU instead of a preset." + SIZE_HELP,
        rich_help_panel=HARDWARE_PANEL,
    ),
]
UtilizationOpt = Annotated[
    float | None,
    typer.Option(
        "--utilization",
        metavar="U",
        help="Share of GPU memory the engine takes (default: the engine's own, said in a note).",
        rich_help_panel=HARDWARE_PANEL,
    ),
]
WeightsOpt = Annotated[
    str,
    typer.Option(
        "--weights",
        metavar="auto|SIZE",
        help="Model weights: auto (the checkpoint's index, the Hub's metadata or the preset) or a SIZE." + SIZE_HELP,
        rich_help_panel=WORKLOAD_PANEL,
    ),
]
OverheadOpt = Annotated[
    str,
    typer.Option(
        "--overhead",
        metavar="auto|SIZE",
        help="Per-GPU activations and runtime: auto (the engine's model, with ranges) or a SIZE.",
        rich_help_panel=HARDWARE_PANEL,
    ),
]
KvBudgetOpt = Annotated[
    str | None,
    typer.Option(
        "--kv-budget",
        metavar="SIZE",
        help="KV memory per GPU, skipping the derivation (a log's 'Available KV cache memory')." + SIZE_HELP,
        rich_help_panel=HARDWARE_PANEL,
    ),
]
FitTpOpt = Annotated[
    int | None,
    typer.Option("--tp", metavar="N", min=1, help="Tensor-parallel ranks.", rich_help_panel=HARDWARE_PANEL),
]
MaxModelLenOpt = Annotated[
    str | None,
    typer.Option(
        "--max-model-len",
        metavar="N",
        help="Longest request the engine accepts, capping the context search (default: the model's).",
        rich_help_panel=WORKLOAD_PANEL,
    ),
]
NoContextCapOpt = Annotated[
    bool,
    typer.Option(
        "--no-context-cap",
        help="Search the longest context past the model's own limit.",
        rich_help_panel=WORKLOAD_PANEL,
    ),
]
GpuLayersOpt = Annotated[
    str | None,
    typer.Option(
        "--gpu-layers",
        "-ngl",
        metavar="N|auto",
        help="llama.cpp -ngl: layers on the GPU(s), or auto: the most that fit; shows each device's "
        "weights, KV cache and compute buffer.",
        rich_help_panel=HARDWARE_PANEL,
    ),
]
NoKvOffloadOpt = Annotated[
    bool,
    typer.Option(
        "--no-kv-offload",
        help="llama.cpp -nkvo: the KV cache stays on the CPU.",
        rich_help_panel=HARDWARE_PANEL,
    ),
]
TensorSplitOpt = Annotated[
    str | None,
    typer.Option(
        "--tensor-split",
        metavar="A,B,...",
        help="llama.cpp -ts: each GPU's share of the offloaded layers (default equal).",
        rich_help_panel=HARDWARE_PANEL,
    ),
]


@engine_knobs(runtime=True)
def fit(
    model: ModelArg = None,
    gpu: GpuOpt = None,
    gpus: GpusOpt = None,
    gpu_memory: GpuMemoryOpt = None,
    utilization: UtilizationOpt = None,
    weights: WeightsOpt = "auto",
    overhead: OverheadOpt = "auto",
    kv_budget: KvBudgetOpt = None,
    tokens: TokensOpt = None,
    batch: BatchOpt = "1",
    images: ImagesOpt = None,
    image_tokens: ImageTokensOpt = None,
    kv_dtype: KvDtypeOpt = None,
    engine: EngineOpt = DEFAULT_ENGINE,
    k_dtype: KDtypeOpt = None,
    v_dtype: VDtypeOpt = None,
    quant_group: QuantGroupOpt = None,
    residual_tokens: ResidualOpt = None,
    tp: FitTpOpt = None,
    pp: PpOpt = 1,
    dp: DpOpt = 1,
    dp_attention: DpAttentionOpt = 1,
    max_model_len: MaxModelLenOpt = None,
    no_context_cap: NoContextCapOpt = False,
    units_choice: UnitsOpt = UnitsName.binary,
    gpu_layers: GpuLayersOpt = None,
    no_kv_offload: NoKvOffloadOpt = False,
    tensor_split: TensorSplitOpt = None,
    as_json: JsonOpt = False,
    revision: RevisionOpt = None,
    strict: StrictOpt = False,
    *,
    knobs: dict[str, int | bool],
) -> None:
    """How many tokens, concurrent requests and how long a context fit on these GPUs, and whether
    the asked workload fits.

    \b
    Examples:
      kvcalc fit qwen3-32b --gpu h100 --tokens 32k --batch 8 --engine vllm
      kvcalc fit gpt-oss-120b --kv-budget 5.38GiB --engine vllm@0.19 -t 128k
      kvcalc fit llama-3.1-8b --engine llama.cpp --gpu rtx-4090 --gpu-layers auto
      kvcalc fit --gpu h100 -- vllm serve Qwen/Qwen3-8B --max-model-len 8192

    Budget per GPU = share of memory - weights / (tp x pp) - runtime; the verdict on --batch x
    --tokens, then the engine's command line for it. After '--', an engine's line stands for its flags.
    """
    from kvcalc import api
    from kvcalc.errors import UsageError

    if model is None:
        raise UsageError("give a MODEL (preset, config.json or repo id)")
    unit_choice = units(units_choice)
    if kv_budget is not None and (gpu is not None or gpu_memory is not None):
        raise UsageError("--kv-budget replaces --gpu/--gpu-memory: give one or the other")
    weights_bytes = None if weights.strip().lower() == "auto" else parse_size(weights, what="--weights")
    if gpu_layers is not None:
        _offload(model, gpu, gpu_memory, gpus, gpu_layers, no_kv_offload, tensor_split, tokens, batch, kv_dtype,
                 k_dtype, v_dtype, knobs, engine, weights_bytes, revision, strict, as_json, unit_choice)  # fmt: skip
        return
    if no_kv_offload or tensor_split is not None:
        raise UsageError("--no-kv-offload and --tensor-split go with --gpu-layers (llama.cpp's split)")
    capacity = _capacity(gpu_memory, kv_budget, gpus, utilization, weights_bytes, overhead, max_model_len,
                         no_context_cap)  # fmt: skip
    report = api.fit(
        model, gpu=gpu, capacity=capacity, layout=api.Layout(tp, pp, dp, dp_attention=dp_attention),
        revision=revision, on_fetch=say_fetching, strict=strict, sequences=api.Sequences(
            tokens=count(tokens, "--tokens"), batch=count(batch, "--batch") or 1,
            images=count_or_zero(images, "--images"), image_tokens=count(image_tokens, "--image-tokens")),
        **serving_flags(engine, kv_dtype, k_dtype, v_dtype, quant_group, residual_tokens, knobs),
    )  # fmt: skip
    _show(report, unit_choice, as_json=as_json)


def _capacity(gpu_memory: str | None, kv_budget: str | None, gpus: int | None, utilization: float | None,
              weights: int | None, overhead: str, max_model_len: str | None,
              no_context_cap: bool) -> "Capacity":  # fmt: skip
    """The flags of the GPUs' memory, the weights and the runtime as the API's ``Capacity``."""
    from kvcalc import api

    overhead_bytes = None if overhead.strip().lower() == "auto" else parse_size(overhead, what="--overhead")
    return api.Capacity(
        gpu_memory=size(gpu_memory, "--gpu-memory"), kv_budget=size(kv_budget, "--kv-budget"), gpus=gpus,
        utilization=utilization, weights=weights, overhead=overhead_bytes,
        max_model_len=count(max_model_len, "--max-model-len"), context_cap=not no_context_cap,
    )  # fmt: skip


def _show(report: "FitReport", unit_choice: Units, *, as_json: bool) -> None:
    """What fits, as JSON or tables."""
    warn(report.model.spec.warnings)
    if as_json:
        from kvcalc.views.json import fit_json

        data = fit_json(
            report.result, report.budget, report.gpu_label, list(report.notes), report.workload,
            verdict=report.verdict, context_limit=report.context_limit, dp_attention=report.dp_attention,
            command=report.command,
        )  # fmt: skip
        print_json(with_warnings(data, report.model.spec.warnings))
        return
    from kvcalc.views.fit import fit_view

    print_view(fit_view(report, unit_choice))


def _offload(model: str, gpu: str | None, gpu_memory: str | None, gpus: int | None, gpu_layers: str,
             no_kv_offload: bool, tensor_split: str | None, tokens: str | None, batch: str, kv_dtype: str | None,
             k_dtype: str | None, v_dtype: str | None, knobs: dict[str, int | bool], engine: str,
             weights: int | None, revision: str | None, strict: bool, as_json: bool,
             unit_choice: Units) -> None:  # fmt: skip
    """``fit --gpu-layers``: llama.cpp's split over GPUs and the CPU."""
    from kvcalc import api
    from kvcalc.engines import make_engine
    from kvcalc.errors import UsageError

    layers: int | str = (
        "auto" if gpu_layers.strip().lower() == "auto" else (count_or_zero(gpu_layers, "--gpu-layers") or 0)
    )
    shares: list[float] = []
    if tensor_split is not None:
        try:
            shares = [float(x) for x in tensor_split.split(",")]
        except ValueError:
            raise UsageError(f"--tensor-split takes numbers separated by commas, got {tensor_split!r}") from None
    try:
        splits_layers = make_engine(engine)[0].splits_layers
    except UsageError:
        splits_layers = False
    if not splits_layers:
        raise UsageError("--gpu-layers is llama.cpp's: add --engine llama.cpp (or llama-server)")
    report = api.fit_offload(
        model, gpu_layers=layers, gpu=gpu, gpu_memory=size(gpu_memory, "--gpu-memory"), gpus=gpus or 1,
        tensor_split=shares, kv_offload=not no_kv_offload, tokens=count(tokens, "--tokens"),
        batch=count(batch, "--batch") or 1, weights=weights, revision=revision, on_fetch=say_fetching, strict=strict,
        serving=api.Serving(engine, kv_dtype=kv_dtype, k_dtype=k_dtype, v_dtype=v_dtype, options={
            name: value for name, value in knobs.items() if value is not None and value is not False}),
    )  # fmt: skip
    warn(report.model.spec.warnings)
    if as_json:
        from kvcalc.views.json import offload_json

        print_json(with_warnings(offload_json(report), report.model.spec.warnings))
        return
    from kvcalc.views.fit import offload_view

    print_view(offload_view(report, unit_choice))
