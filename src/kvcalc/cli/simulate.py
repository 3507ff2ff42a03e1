"""``kvcalc simulate``: a server under load over the exact KV pool, step by step."""

import math
from dataclasses import replace
from typing import Annotated, Any

import typer

from kvcalc.cli.knobs import engine_knobs
from kvcalc.cli.options import (
    HARDWARE_PANEL,
    OUTPUT_PANEL,
    WORKLOAD_PANEL,
    EngineOpt,
    JsonOpt,
    KvDtypeOpt,
    ModelArg,
    RevisionOpt,
    complete_gpu,
    count,
    print_json,
    print_view,
    say_fetching,
    serving_flags,
    size,
)
from kvcalc.engines import DEFAULT_ENGINE

GpuOpt = Annotated[
    str | None,
    typer.Option("--gpu", metavar="NAME", autocompletion=complete_gpu, rich_help_panel=HARDWARE_PANEL,
                 help="GPU preset: the pool fit finds on it, and speed's step times on it."),
]  # fmt: skip
TpOpt = Annotated[int, typer.Option("--tp", metavar="N", min=1, rich_help_panel=HARDWARE_PANEL,
                                    help="Tensor-parallel GPUs: KV heads split.")]  # fmt: skip
KvBudgetOpt = Annotated[
    str | None,
    typer.Option("--kv-budget", metavar="SIZE", rich_help_panel=HARDWARE_PANEL,
                 help="A ready KV budget per GPU (16MiB, 40GB) in place of the GPU's."),
]  # fmt: skip
MaxModelLenOpt = Annotated[
    str | None,
    typer.Option("--max-model-len", metavar="T", rich_help_panel=WORKLOAD_PANEL,
                 help="The longest request the engine takes (default: the longest asked)."),
]  # fmt: skip
PromptOpt = Annotated[str | None, typer.Option("--prompt", "-p", metavar="P", rich_help_panel=WORKLOAD_PANEL,
                                               help="Prompt tokens of every request (default 1024).")]  # fmt: skip
OutputOpt = Annotated[str | None, typer.Option("--output", "-o", metavar="O", rich_help_panel=WORKLOAD_PANEL,
                                               help="Output tokens of every request (default 256).")]  # fmt: skip
LengthsOpt = Annotated[
    str | None,
    typer.Option("--lengths", metavar="FILE", rich_help_panel=WORKLOAD_PANEL,
                 help="A request mix (CSV prompt,output or JSON lines, in turn), or a trace with arrival times, "
                      "replayed."),
]  # fmt: skip
SharedPrefixOpt = Annotated[
    str | None,
    typer.Option("--shared-prefix", metavar="N[,GROUPS]", rich_help_panel=WORKLOAD_PANEL,
                 help="Every prompt's first N tokens shared with its group's (GROUPS groups in turn, default 1: a "
                      "system prompt), for the engine's prefix cache."),
]  # fmt: skip
PrefixCachingOpt = Annotated[
    bool | None,
    typer.Option("--prefix-caching/--no-prefix-caching", rich_help_panel=WORKLOAD_PANEL, show_default=False,
                 help="The engine's prefix cache on or off (default on: vLLM's prefix caching, SGLang's radix "
                      "cache, llama-server's prompt cache)."),
]  # fmt: skip
RateOpt = Annotated[
    str | None,
    typer.Option("--rate", metavar="R", rich_help_panel=WORKLOAD_PANEL,
                 help="Requests a second, Poisson (inf: all at once)."),
]  # fmt: skip
ConcurrencyOpt = Annotated[
    int | None,
    typer.Option("--concurrency", metavar="N", min=1, rich_help_panel=WORKLOAD_PANEL,
                 help="Closed loop: N clients, each sending its next request when the last ends."),
]  # fmt: skip
RequestsOpt = Annotated[
    int | None,
    typer.Option("--requests", "-n", metavar="N", min=1, rich_help_panel=WORKLOAD_PANEL,
                 help="Requests in all (default 1000; a trace: its first N)."),
]  # fmt: skip
BurstinessOpt = Annotated[
    float | None,
    typer.Option("--burstiness", metavar="B", rich_help_panel=WORKLOAD_PANEL,
                 help="Gaps' gamma shape (default 1: Poisson; below 1 burstier), as vllm bench serve's."),
]  # fmt: skip
SlotsOpt = Annotated[
    str | None,
    typer.Option("--batch", "-b", metavar="B", rich_help_panel=WORKLOAD_PANEL,
                 help="llama-server's slots (-np B), as fit and speed take them: B requests at once, the next "
                 "waiting for a free slot (default 1). Refused by an engine without slots."),
]  # fmt: skip
SeedOpt = Annotated[
    int | None,
    typer.Option("--seed", metavar="S", rich_help_panel=WORKLOAD_PANEL,
                 help="The arrivals' random seed (default 0): a run is repeatable."),
]  # fmt: skip
StepTimesOpt = Annotated[
    str | None,
    typer.Option("--step-times", metavar="A,B[,C,P,H]", rich_help_panel=HARDWARE_PANEL,
                 help="Measured step times in place of speed's: A s a step + B s a token + C s a cached token a "
                      "decode reads (+ P s a prompt token, if not B; H s of handling before a request's first "
                      "step)."),
]  # fmt: skip
SloOpt = Annotated[
    str | None,
    typer.Option("--slo", metavar="SLO", rich_help_panel=OUTPUT_PANEL,
                 help="Latency bounds, e.g. ttft=1s,tpot=50ms,p=90: goodput, and --find's target."),
]  # fmt: skip
FindOpt = Annotated[
    str | None,
    typer.Option("--find", metavar="WHAT", rich_help_panel=OUTPUT_PANEL,
                 help="rate or concurrency: the most load within --slo, and what binds there; gpus: the fewest."),
]  # fmt: skip
PlotOpt = Annotated[
    str | None,
    typer.Option("--plot", metavar="FILE", rich_help_panel=OUTPUT_PANEL,
                 help="Also save the run over time as FILE.png or .svg (pool, queue, TTFT; the plot extra)."),
]  # fmt: skip
TimelineOpt = Annotated[
    bool,
    typer.Option("--timeline", rich_help_panel=OUTPUT_PANEL,
                 help="With --json: every request's times and every step's sample."),
]  # fmt: skip


@engine_knobs(runtime=True, simulate=True)
def simulate(
    model: ModelArg = None,
    gpu: GpuOpt = None,
    tp: TpOpt = 1,
    kv_budget: KvBudgetOpt = None,
    step_times: StepTimesOpt = None,
    prompt: PromptOpt = None,
    output: OutputOpt = None,
    lengths: LengthsOpt = None,
    shared_prefix: SharedPrefixOpt = None,
    prefix_caching: PrefixCachingOpt = None,
    rate: RateOpt = None,
    concurrency: ConcurrencyOpt = None,
    requests: RequestsOpt = None,
    burstiness: BurstinessOpt = None,
    seed: SeedOpt = None,
    batch: SlotsOpt = None,
    max_model_len: MaxModelLenOpt = None,
    engine: EngineOpt = DEFAULT_ENGINE,
    kv_dtype: KvDtypeOpt = None,
    slo: SloOpt = None,
    find: FindOpt = None,
    timeline: TimelineOpt = False,
    plot: PlotOpt = None,
    as_json: JsonOpt = False,
    revision: RevisionOpt = None,
    *,
    knobs: dict[str, int | bool],
) -> None:
    """A server under load: each engine's scheduler over the exact KV pool, step by step, and the
    latency percentiles and throughput it gives.

    \b
    Examples:
      kvcalc simulate llama-3.1-8b --gpu h100 --engine vllm -p 1k -o 256 --rate 10
      kvcalc simulate qwen3-8b --gpu h100 -p 2k -o 512 --concurrency 64 -n 500
      kvcalc simulate qwen3-8b --gpu h100 -n 200 --slo ttft=1s --find rate
      kvcalc simulate llama-3.1-8b --gpu h100 --engine llama-server -b 4 --rate 2

    Requests arrive (--rate, Poisson; or --concurrency clients), the engine's scheduler builds each
    step within its pool (vLLM: token budget, chunked prefill, preemption by recompute, prefix
    caching; SGLang: its radix cache too), and each step takes speed's estimate for its mix of
    prefill and decode tokens.
    llama-server runs --batch slots (-np) of --max-model-len tokens each.
    """
    from kvcalc import api
    from kvcalc.errors import UsageError

    if model is None:
        raise UsageError("give a MODEL (preset, config.json or repo id)")
    prefix = _shared_prefix(shared_prefix)
    trace = None if lengths is None else api.read_trace(lengths, limit=requests)
    if trace is not None:
        _refuse_with_a_trace(rate=rate, concurrency=concurrency, burstiness=burstiness, find=find,
                             lengths=prompt is not None or output is not None, seed=seed)  # fmt: skip
    else:
        _refuse_undrawn(rate=_rate(rate), concurrency=concurrency, burstiness=burstiness, seed=seed, find=find)
    load = api.Load(rate=_rate(rate), concurrency=concurrency, count=1000 if requests is None else requests,
                    prompt=count(prompt, "--prompt"), output=count(output, "--output"),
                    lengths=_lengths(lengths) if trace is None else (),
                    trace=trace.requests if trace is not None else (),
                    burstiness=1.0 if burstiness is None else burstiness, seed=seed or 0, batch=count(batch, "--batch"),
                    prefix_caching=prefix_caching, shared_prefix=prefix[0], prefixes=prefix[1])  # fmt: skip
    trace_notes = trace.notes if trace is not None else ()
    common: dict[str, Any] = {
        "gpu": gpu, "tp": tp, "kv_budget": size(kv_budget, "--kv-budget"), "step_times": _step_times(step_times),
        "max_model_len": count(max_model_len, "--max-model-len"), "revision": revision, "on_fetch": say_fetching,
        **serving_flags(engine, kv_dtype, None, None, None, None, knobs),
    }  # fmt: skip
    target = None if slo is None else api.parse_slo(slo)
    if find is not None:
        if target is None:
            raise UsageError("--find needs --slo: the latencies the load must meet")
        if plot is not None or timeline:
            raise UsageError("--plot and --timeline draw one run: give them without --find")
        found = api.find_capacity(model, load=load, slo=target, find=find, **common)
        found = replace(found, notes=(*trace_notes, *found.notes))
        from kvcalc.views.simulate import capacity_dict, capacity_view

        data = capacity_dict(found)
        print_json(data) if as_json else print_view(capacity_view(data))
        return
    if timeline and not as_json:
        raise UsageError("--timeline goes with --json")
    report = api.simulate(model, load=load, slo=target, timeline=timeline or plot is not None, **common)
    report = replace(report, notes=(*trace_notes, *report.notes))
    from kvcalc.views.simulate import simulation_dict, simulation_view

    if plot is not None:
        from kvcalc.charts import save_simulation_plot

        run = report.run
        save_simulation_plot(run.samples, run.pool_units, run.done, plot,
                             f"{report.model}, {report.engine} on {report.gpu or 'a KV budget'}")  # fmt: skip
    data = simulation_dict(report, timeline=timeline)
    if as_json:
        print_json(data)
        return
    print_view(simulation_view(data))


def _rate(text: str | None) -> float | None:
    from kvcalc.errors import UsageError

    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"--rate {text!r}: give requests a second (2, 0.5, inf)") from None
    return value


def _refuse_undrawn(*, rate: float | None, concurrency: int | None, burstiness: float | None, seed: int | None,
                    find: str | None) -> None:  # fmt: skip
    """--burstiness and --seed shape the random gaps between Poisson arrivals: with none drawn (a closed
    loop, all at once, a search over concurrency) they change nothing, and are refused."""
    from kvcalc.errors import UsageError

    if find == "concurrency" or concurrency is not None:
        why = "--concurrency clients send as requests end, drawing no arrival gaps"
    elif rate is not None and math.isinf(rate) and find != "rate":
        why = "--rate inf sends every request at once, drawing no arrival gaps"
    else:
        return
    for flag, value in (("--burstiness", burstiness), ("--seed", seed)):
        if value is not None:
            raise UsageError(f"{flag} changes nothing: {why}")


def _refuse_with_a_trace(*, rate: str | None, concurrency: int | None, burstiness: float | None,
                         find: str | None, lengths: bool, seed: int | None) -> None:  # fmt: skip
    """A trace holds its own arrivals: the flags that shape arrivals change nothing, and are refused."""
    from kvcalc.errors import UsageError

    why = "the --lengths file is a trace with arrival times, replayed as recorded"
    if rate is not None:
        raise UsageError(f"--rate changes nothing: {why}")
    if concurrency is not None:
        raise UsageError(f"--concurrency changes nothing: {why}")
    if burstiness is not None:
        raise UsageError(f"--burstiness changes nothing: {why}")
    if seed is not None:
        raise UsageError(f"--seed changes nothing: {why}")
    if lengths:
        raise UsageError(f"--prompt and --output change nothing: {why}, each request's lengths its own")
    if find in ("rate", "concurrency"):
        raise UsageError(f"--find {find} varies the arrivals, and {why}: give a mix without arrival times")


def _lengths(path: str | None) -> tuple[tuple[int, int], ...]:
    if path is None:
        return ()
    from kvcalc import api

    return tuple((r.prompt, r.output) for r in api.read_requests(path))


def _shared_prefix(text: str | None) -> tuple[int, int]:
    """``N[,GROUPS]``: the shared prefix's tokens (1k, 2048) and its groups (default 1)."""
    from kvcalc.errors import UsageError

    if text is None:
        return 0, 1
    tokens, _, groups = text.partition(",")
    found = count(tokens.strip(), "--shared-prefix")
    try:
        number = int(groups) if groups.strip() else 1
    except ValueError:
        number = 0
    if found is None or number < 1:
        raise UsageError(f"--shared-prefix {text!r}: give N[,GROUPS]: the prefix's tokens, and its groups (1 or more)")
    return found, number


def _step_times(text: str | None) -> Any:
    from kvcalc import api
    from kvcalc.errors import UsageError

    if text is None:
        return None
    parts = text.split(",")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if not 2 <= len(values) <= 5 or any(v < 0 or not math.isfinite(v) for v in values):
        raise UsageError(f"--step-times {text!r}: give A,B[,C,P,H]: seconds a step, a token, a cached token read, "
                         "a prompt token, a request's handling")  # fmt: skip
    base, token, *rest = values
    context = rest[0] if rest else 0.0
    prefill = rest[1] if len(rest) > 1 else None  # None: a prompt token costs B, as a decode token does
    handling = rest[2] if len(rest) > 2 else 0.0
    return api.StepTimes(base, token, context, handling, prefill)
