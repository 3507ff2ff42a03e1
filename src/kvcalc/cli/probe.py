"""``kvcalc probe``: measure a real cache and cross-check the estimate byte for byte."""

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvcalc.cli.options import (
    ENGINE_PANEL,
    HARDWARE_PANEL,
    KNOB_PANELS,
    OUTPUT_PANEL,
    SIZE_HELP,
    WORKLOAD_PANEL,
    BatchedOpt,
    BatchOpt,
    BlockOpt,
    EncoderTokensOpt,
    EngineOpt,
    ImagesOpt,
    ImageTokensOpt,
    JsonOpt,
    KDtypeOpt,
    KvBitsOpt,
    KvGroupSizeOpt,
    MaxKvSizeOpt,
    ModelArg,
    NBatchOpt,
    PrefillStepOpt,
    QuantizedKvStartOpt,
    RevisionOpt,
    StrictOpt,
    SwaFullOpt,
    UbatchOpt,
    UnifiedOpt,
    VDtypeOpt,
    complete_dtype,
    count,
    count_or_zero,
    print_json,
    print_view,
    say_fetching,
    size,
    warn,
)
from kvcalc.defaults import DEFAULT_TOKENS
from kvcalc.engines.probing import MODEL_PROBE_ENGINE
from kvcalc.errors import UsageError
from kvcalc.units import parse_count

if TYPE_CHECKING:
    from kvcalc.engines.probing import ProbeOutcome, Prober


# The probe's own options (the others are shared: kvcalc.cli.options).
DeviceOpt = Annotated[
    str,
    typer.Option(
        "--device",
        metavar="auto|cpu|cuda",
        help="Where to build the cache (auto: CUDA if present).",
        rich_help_panel=HARDWARE_PANEL,
    ),
]
ProbeTokensOpt = Annotated[
    str | None,
    typer.Option(
        "--tokens",
        "-t",
        metavar="T",
        help=f"Tokens per sequence, prompt + decoded (default {DEFAULT_TOKENS}).",
        rich_help_panel=WORKLOAD_PANEL,
    ),
]
DecodeOpt = Annotated[
    int,
    typer.Option(
        "--decode",
        metavar="N",
        min=0,
        help="Of the T tokens, how many are decoded one at a time.",
        rich_help_panel=WORKLOAD_PANEL,
    ),
]
ProbeDtypeOpt = Annotated[
    str | None,
    typer.Option(
        "--kv-dtype",
        metavar="DTYPE",
        autocompletion=complete_dtype,
        help="Model and cache dtype: fp32, bf16, fp16 or auto (the model's own, else fp32).",
        rich_help_panel=ENGINE_PANEL,
    ),
]
RawOpt = Annotated[
    bool,
    typer.Option(
        "--raw",
        help="Allocate the estimated tensors with torch instead of running the model.",
        rich_help_panel=ENGINE_PANEL,
    ),
]
ToleranceOpt = Annotated[
    str,
    typer.Option(
        "--tolerance",
        metavar="BYTES|PCT",
        help="Allowed difference: 0 (exact, the default), 4096 (bytes) or 0.5%.",
        rich_help_panel=OUTPUT_PANEL,
    ),
]
PrintRequestOpt = Annotated[
    bool,
    typer.Option(
        "--print-request",
        help="Print the probe's JSON request, to run torch_probe.py elsewhere.",
        rich_help_panel=OUTPUT_PANEL,
    ),
]
FromResultOpt = Annotated[
    str | None,
    typer.Option(
        "--from-result",
        metavar="FILE",
        help="Compare a result torch_probe.py printed elsewhere.",
        rich_help_panel=OUTPUT_PANEL,
    ),
]
KvBudgetOpt = Annotated[
    str | None,
    typer.Option(
        "--kv-budget",
        metavar="SIZE",
        help="--engine vllm / sglang: the KV budget the engine gets (vLLM 64MiB, SGLang 256MiB)." + SIZE_HELP,
        rich_help_panel=HARDWARE_PANEL,
    ),
]
EnginePythonOpt = Annotated[
    str | None,
    typer.Option(
        "--engine-python",
        metavar="PATH",
        help="The engine environment's Python (default $KVCALC_<ENGINE>_PYTHON).",
        rich_help_panel=ENGINE_PANEL,
    ),
]
TimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        metavar="S",
        help="Seconds the real engine may take (default 300).",
        rich_help_panel=ENGINE_PANEL,
    ),
]
WindowOpt = Annotated[
    int | None,
    typer.Option(
        "--window",
        metavar="N",
        min=2,
        help="--engine mlx: set the config's sliding windows and attention chunks to N tokens for the run, so a "
        "short one crosses them (the estimate reads the same config).",
        rich_help_panel=KNOB_PANELS["max_kv_size"],  # the same engine's panel as its other knobs
    ),
]


def probe(
    model: ModelArg = None,
    device: DeviceOpt = "auto",
    tokens: ProbeTokensOpt = None,
    batch: BatchOpt = "1",
    images: ImagesOpt = None,
    image_tokens: ImageTokensOpt = None,
    encoder_tokens: EncoderTokensOpt = None,
    decode: DecodeOpt = 2,
    kv_dtype: ProbeDtypeOpt = None,
    raw: RawOpt = False,
    engine: EngineOpt = MODEL_PROBE_ENGINE,
    tolerance: ToleranceOpt = "0",
    as_json: JsonOpt = False,
    revision: RevisionOpt = None,
    print_request: PrintRequestOpt = False,
    from_result: FromResultOpt = None,
    strict: StrictOpt = False,
    k_dtype: KDtypeOpt = None,
    v_dtype: VDtypeOpt = None,
    ubatch: UbatchOpt = None,
    n_batch: NBatchOpt = None,
    kv_unified: UnifiedOpt = False,
    swa_full: SwaFullOpt = False,
    kv_budget: KvBudgetOpt = None,
    block_size: BlockOpt = None,
    max_batched_tokens: BatchedOpt = None,
    engine_python: EnginePythonOpt = None,
    timeout: TimeoutOpt = None,
    kv_bits: KvBitsOpt = None,
    kv_group_size: KvGroupSizeOpt = None,
    quantized_kv_start: QuantizedKvStartOpt = None,
    max_kv_size: MaxKvSizeOpt = None,
    prefill_step_size: PrefillStepOpt = None,
    window: WindowOpt = None,
) -> None:
    """Measure a real KV cache with PyTorch (or llama.cpp) and cross-check the estimate byte for byte.

    \b
    Examples:
      kvcalc probe llama-3.1-8b --tokens 300 --device cpu
      kvcalc probe qwen3-next-80b-a3b --tokens 300 --device cpu --json
      kvcalc probe gemma-2-9b --engine llama.cpp --tokens 4096 --batch 2
      kvcalc probe llama-3.1-8b --print-request > request.json

    The model probe builds the model's transformers implementation from its config with random
    weights, shrunk to one layer of each kind, prefills and decodes, and counts every cache tensor
    (torch_probe.py runs alone on a GPU box too). --engine runs that engine's own code instead, in
    its own environment where it needs one (README, "Probe: measure a real cache"). Exit status 1
    on any difference.

    After '--', an engine's own command line (vllm serve ..., llama-server ...) stands for its flags.
    """
    if model is None:
        raise UsageError("give a MODEL (preset, config.json or repo id)")
    values: dict[str, Any] = {
        "--max-batched-tokens": max_batched_tokens, "--kv-budget": kv_budget, "--block-size": block_size,
        "--print-request": print_request, "--from-result": from_result, "--tolerance": tolerance,
        "--kv-dtype": kv_dtype, "--batch": batch, "--images": images, "--image-tokens": image_tokens,
        "--encoder-tokens": encoder_tokens, "--device": device, "--decode": decode, "--k-dtype": k_dtype,
        "--v-dtype": v_dtype, "--ubatch": ubatch, "--n-batch": n_batch, "--kv-unified": kv_unified,
        "--swa-full": swa_full, "--engine-python": engine_python, "--timeout": timeout, "--kv-bits": kv_bits,
        "--kv-group-size": kv_group_size, "--quantized-kv-start": quantized_kv_start, "--max-kv-size": max_kv_size,
        "--prefill-step-size": prefill_step_size, "--window": window, "--tokens": tokens, "--raw": raw,
    }  # fmt: skip
    given = [flag for flag, value in values.items()
             if value is not None and value is not False and value != _DEFAULTS.get(flag)]  # fmt: skip
    chosen = _prober(engine, raw)
    _refuse(chosen, given)
    if not chosen.real:
        _probe_model(model, values, engine=engine, as_json=as_json, revision=revision, strict=strict)
        return
    values.update({"--engine": engine, "--timeout": 300 if timeout is None else timeout,
                   "--tokens": count(tokens, "--tokens") or DEFAULT_TOKENS, "--batch": count(batch, "--batch"),
                   "--kv-budget": size(kv_budget, "--kv-budget")})  # fmt: skip
    show_probe(_run(chosen, model, values, given, revision=revision, strict=strict), as_json)


# The probe flags' defaults: a flag at its default was not given (the others default to None or False).
_DEFAULTS: dict[str, object] = {"--batch": "1", "--decode": 2, "--device": "auto",
                                "--tolerance": "0"}  # fmt: skip


def _prober(engine: str, raw: bool) -> "Prober":
    """The engine's real probe, or the model probe (under --raw, and for an engine with none)."""
    from kvcalc.engines.probing import prober

    chosen = None if raw else prober(engine)
    if chosen is None or not chosen.real:
        model_probe = prober(MODEL_PROBE_ENGINE)
        assert model_probe is not None  # the model probe is transformers'
        return model_probe
    return chosen


def _refuse(chosen: "Prober", given: list[str]) -> None:
    """A flag the chosen probe does not take, refused in one line: under a real engine's probe, as
    not applying to it; under the model probe, as applying to the probe that takes it."""
    from kvcalc.engines.probing import probers

    dropped = [flag for flag in given if flag not in chosen.flags]
    if not dropped:
        return
    if chosen.real:
        verb = "does" if len(dropped) == 1 else "do"
        raise UsageError(f"{', '.join(dropped)} {verb} not apply to {chosen.refusal}")
    real = [p for p in probers() if p.real]

    def owner(flag: str) -> "Prober | None":  # the first real probe that takes it; None: every one does
        takers = [p for p in real if flag in p.flags]
        return takers[0] if len(takers) < len(real) else None

    first = owner(dropped[0])
    if first is None:
        names = ", ".join(p.engine for p in real[:-1]) + f" or {real[-1].engine}"
        raise UsageError(f"{dropped[0]} applies to the real engines' probes (--engine {names}, without --raw)")
    owned = [flag for flag in dropped if owner(flag) is first]
    raise UsageError(f"{', '.join(owned)} {'applies' if len(owned) == 1 else 'apply'} to {first.named_as}")


def _run(chosen: "Prober", model: str, values: dict[str, Any], given: list[str], **common: Any) -> "ProbeOutcome":
    """Call the api function the engine's prober names with the flags it maps, given or always."""
    import kvcalc.api

    kwargs: dict[str, Any] = {"on_fetch": say_fetching, **common}
    options: dict[str, Any] = {}
    for flag, param in chosen.params:
        if flag in given or flag in chosen.always:
            into, _, knob = param.rpartition(".")
            (options if into == "options" else kwargs)[knob or param] = values[flag]
    if options:
        kwargs["options"] = options
    report: ProbeOutcome = getattr(kvcalc.api, chosen.runs)(model, **kwargs)
    return report


def _probe_model(model: str, values: dict[str, Any], *, engine: str, as_json: bool, **common: Any) -> None:
    """The model probe: transformers' cache (or the estimated tensors under --raw) by torch_probe.py,
    here, as a request to run elsewhere (--print-request), or from its result (--from-result)."""
    import kvcalc.api

    print_request, from_result = values["--print-request"], values["--from-result"]
    if print_request and from_result is not None:
        raise UsageError("--print-request prints a request to run elsewhere; --from-result reads its answer: give one")
    sequences = kvcalc.api.Sequences(
        tokens=count(values["--tokens"], "--tokens") or DEFAULT_TOKENS,
        batch=parse_count(values["--batch"], what="--batch"),
        images=count_or_zero(values["--images"], "--images"),
        image_tokens=count(values["--image-tokens"], "--image-tokens"),
        encoder_tokens=count(values["--encoder-tokens"], "--encoder-tokens"),
    )  # fmt: skip
    shape: dict[str, Any] = {
        "sequences": sequences, "decode": values["--decode"], "kv_dtype": values["--kv-dtype"],
        "device": values["--device"], "raw": values["--raw"],
        "engine": engine, "tolerance": values["--tolerance"], "on_fetch": say_fetching, **common,
    }  # fmt: skip
    if print_request:
        print_json(kvcalc.api.probe_request(model, **shape)[2])
        return
    show = from_result is None and not as_json and sys.stderr is not None and sys.stderr.isatty()
    if show:
        with _ProbeProgress(raw=values["--raw"], device=values["--device"]) as progress:
            report = kvcalc.api.probe(model, progress=progress, **shape)
    else:
        report = kvcalc.api.probe(model, from_result=from_result, **shape)
    warn(report.model.spec.warnings)
    show_probe(report, as_json)


def show_probe(report: "ProbeOutcome", as_json: bool) -> None:
    """Every probe's answer, shown one way: its JSON or its view on stdout; exit status 1 when the
    real engine disagreed."""
    from kvcalc.views.probe import probe_view

    if as_json:
        print_json(report.as_json())
    else:
        print_view(probe_view(report))
    if not report.match:
        raise typer.Exit(1)


class _ProbeProgress:
    """A rich progress bar on stderr fed by the probe's (stage, done, total) callback; after two
    prefill passes it states how long the rest will take, when that is more than a few seconds."""

    def __init__(self, *, raw: bool, device: str) -> None:
        self._what = "allocating the estimated tensors" if raw else "building a shrunk model and filling its cache"
        self._device = device

    def __enter__(self) -> "_ProbeProgress":
        import time

        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        from kvcalc.console import colour_disabled, err

        err(f"kvcalc probe: {self._what} on {self._device}...")
        self._time = time.perf_counter
        self._start = self._time()
        self._told = False
        self._first: tuple[float, int] | None = None
        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed:,}/{task.total:,} tokens"),
            TimeRemainingColumn(),
            console=Console(stderr=True, no_color=colour_disabled() or None),
            transient=True,
        )
        self._bar.__enter__()
        self._tasks: dict[str, Any] = {}
        return self

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage not in self._tasks:
            self._tasks[stage] = self._bar.add_task(stage, total=total)
        self._bar.update(self._tasks[stage], completed=done, total=total)
        if stage != "prefill" or self._told or not 0 < done < total:
            return
        now = self._time()
        if self._first is None:  # the first pass also paid for building the model: time from here
            self._first = (now, done)
            return
        self._told = True
        since, at = self._first
        remaining = (now - since) / max(1, done - at) * (total - done)
        if remaining > 10:
            self._bar.console.print(f"kvcalc probe: about {remaining:,.0f} s more to prefill {total:,} tokens")

    def __exit__(self, *exc: object) -> None:
        self._bar.__exit__(None, None, None)
