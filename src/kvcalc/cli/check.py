"""``kvcalc check``: a running server, or its start-up log, beside kvcalc's answer."""

import sys
from typing import Annotated, Any

import typer

from kvcalc.cli.options import (
    HARDWARE_PANEL,
    OUTPUT_PANEL,
    WORKLOAD_PANEL,
    BatchOpt,
    JsonOpt,
    KvDtypeOpt,
    PpOpt,
    TokensOpt,
    complete_gpu,
    complete_model,
    count,
    echo,
    print_json,
    print_view,
)

TargetArg = Annotated[
    str,
    typer.Argument(
        metavar="TARGET",
        help="The server (http://HOST:PORT) or its start-up log (a file, - for standard input).",
        show_default=False,
    ),
]
CheckModelArg = Annotated[
    str | None,
    typer.Argument(
        metavar="MODEL",
        autocompletion=complete_model,
        help="The model, where the server's own name for it cannot be opened here (a preset, a config.json, "
        "a Hub repo id).",
        show_default=False,
    ),
]
GpuOpt = Annotated[
    str | None,
    typer.Option("--gpu", metavar="NAME", autocompletion=complete_gpu, rich_help_panel=HARDWARE_PANEL,
                 help="The server's GPU preset: kvcalc then predicts the pool from memory and explains the gap."),
]  # fmt: skip
EngineOpt = Annotated[
    str | None,
    typer.Option("--engine", metavar="NAME", rich_help_panel=HARDWARE_PANEL,
                 help="The engine's rules by release (vllm@0.19), where the server does not say its own."),
]  # fmt: skip
TpOpt = Annotated[
    int | None,
    typer.Option("--tp", metavar="N", min=1, rich_help_panel=HARDWARE_PANEL,
                 help="Tensor-parallel GPUs, where the server does not say (vLLM never does)."),
]  # fmt: skip
UtilizationOpt = Annotated[
    float | None,
    typer.Option("--utilization", metavar="U", rich_help_panel=HARDWARE_PANEL,
                 help="The engine's share of GPU memory, where the server does not say."),
]  # fmt: skip
FailOpt = Annotated[
    str | None,
    typer.Option("--fail-beyond", metavar="PCT", rich_help_panel=OUTPUT_PANEL,
                 help="Exit 1 when the server's pool differs from kvcalc's by more than PCT (0: any difference)."),
]  # fmt: skip
TimeoutOpt = Annotated[
    float,
    typer.Option("--timeout", metavar="S", rich_help_panel=OUTPUT_PANEL, help="Seconds each GET may take."),
]
WatchOpt = Annotated[
    bool,
    typer.Option("--watch", rich_help_panel=OUTPUT_PANEL,
                 help="Then sample live usage --count times, --interval seconds apart (a server only)."),
]  # fmt: skip
CountOpt = Annotated[
    int, typer.Option("--count", metavar="N", min=1, rich_help_panel=OUTPUT_PANEL, help="Samples --watch takes.")
]
IntervalOpt = Annotated[
    float,
    typer.Option("--interval", metavar="S", rich_help_panel=OUTPUT_PANEL, help="Seconds between --watch samples."),
]
DurationOpt = Annotated[
    float | None,
    typer.Option("--duration", metavar="S", rich_help_panel=OUTPUT_PANEL,
                 help="Stop --watch after S seconds, whatever --count says."),
]  # fmt: skip

_ = WORKLOAD_PANEL  # the workload flags (--tokens, --batch) keep their shared panel


def check(
    target: TargetArg,
    model: CheckModelArg = None,
    gpu: GpuOpt = None,
    engine: EngineOpt = None,
    tp: TpOpt = None,
    pp: PpOpt = 1,
    utilization: UtilizationOpt = None,
    tokens: TokensOpt = None,
    batch: BatchOpt = "1",
    kv_dtype: KvDtypeOpt = None,
    fail_beyond: FailOpt = None,
    timeout: TimeoutOpt = 5.0,
    watch: WatchOpt = False,
    samples: CountOpt = 10,
    interval: IntervalOpt = 5.0,
    duration: DurationOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Hold a running server, or its start-up log, against kvcalc's estimate, and explain the gap.

    \b
    Examples:
      kvcalc check http://127.0.0.1:8000
      kvcalc check http://gpu-box:8000 qwen3-32b --gpu h100 --tp 2
      kvcalc check server.log --gpu h100 -- vllm serve Qwen/Qwen3-32B -tp 2
      kvcalc check http://127.0.0.1:8000 --watch --count 12 --interval 5

    Only read-only GETs are sent (vLLM /metrics, SGLang /server_info, llama-server /props ...). What
    the server does not reveal comes from MODEL, the flags, or the engine's line after '--'.
    """
    from kvcalc import api
    from kvcalc.errors import UsageError

    line = _engine_line()
    given_batch = count(batch, "--batch")
    tolerance = None if fail_beyond is None else _share(fail_beyond)
    if not watch and (samples != 10 or interval != 5.0 or duration is not None):
        raise UsageError("--count, --interval and --duration go with --watch")
    report = api.check(
        target, model, gpu=gpu, engine=engine, tokens=count(tokens, "--tokens"),
        batch=given_batch if given_batch != 1 else None, tp=tp, pp=pp if pp != 1 else None, kv_dtype=kv_dtype,
        utilization=utilization, line=line, tolerance=tolerance, timeout=timeout,
    )  # fmt: skip
    from kvcalc.views.check import check_dict, usage_dict

    data = check_dict(report)
    if watch:
        if not as_json:
            _show(data)
        taken = []
        for seconds, usage in api.watch(target, count=samples, interval=interval, duration=duration,
                                        timeout=timeout):  # fmt: skip
            sample = {"seconds": round(seconds, 3), "usage": usage_dict(usage)}
            taken.append(sample)
            if not as_json:
                _say_sample(sample, data["usage_unit"])
        data["samples"] = taken
        if as_json:
            print_json(data)
    elif as_json:
        print_json(data)
    else:
        _show(data)
    if tolerance is not None and report.agrees is False:
        raise typer.Exit(1)


def _show(data: dict[str, Any]) -> None:
    from kvcalc.views.check import check_view

    print_view(check_view(data))


def _say_sample(sample: dict[str, Any], unit: str | None) -> None:
    from kvcalc.views.check import usage_line

    usage = sample["usage"]
    echo(f"+{sample['seconds']:7.1f} s  {'not exported' if usage is None else usage_line(usage, unit)}")
    sys.stdout.flush()


def _share(text: str) -> float:
    """--fail-beyond: a percent (1%, 0.5%) or 0."""
    from kvcalc.errors import UsageError

    value = text.strip()
    try:
        share = float(value[:-1]) / 100 if value.endswith("%") else float(value)
    except ValueError:
        share = -1.0
    if share < 0 or share > 1 or (not value.endswith("%") and share != 0):
        raise UsageError(f"--fail-beyond {text!r}: give a percent (1%, 0.5%) or 0")
    return share


def _engine_line() -> tuple[str, ...]:
    """The engine's command line given after '--' (kept aside by the CLI's main before typer read
    the arguments), if any."""
    line = sys.modules.get("kvcalc.cli.engine_line")
    return () if line is None else tuple(getattr(line, "CHECK_LINE", ()))
