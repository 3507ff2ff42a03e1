"""``kvcalc probe``: measure a real cache and cross-check the estimate byte for byte."""

import sys
from typing import Annotated, Any

import typer

from kvcalc.errors import UsageError

from .app import app
from .options import (
    BatchOpt,
    EngineOpt,
    ImagesOpt,
    ImageTokensOpt,
    JsonOpt,
    ModelArg,
    RevisionOpt,
    StrictOpt,
    complete_dtype,
    count,
    count_or_zero,
    print_json,
    print_view,
    say_fetching,
    warn,
    with_warnings,
)


@app.command()
def probe(
    model: ModelArg = None,
    device: Annotated[
        str, typer.Option("--device", metavar="auto|cpu|cuda", help="Where to build the cache (auto: CUDA if present).")
    ] = "auto",
    tokens: Annotated[
        str, typer.Option("--tokens", "-t", metavar="T", help="Tokens per sequence in all: prompt + decoded.")
    ] = "512",
    batch: BatchOpt = "1",
    images: ImagesOpt = None,
    image_tokens: ImageTokensOpt = None,
    decode: Annotated[
        int, typer.Option("--decode", metavar="N", min=0, help="Of the T tokens, how many are decoded one at a time.")
    ] = 2,
    kv_dtype: Annotated[
        str | None,
        typer.Option(
            "--kv-dtype",
            metavar="DTYPE",
            autocompletion=complete_dtype,
            help="Model and cache dtype for the run: fp32, bf16, fp16 or auto (default: the model's own, else fp32).",
        ),
    ] = None,
    raw: Annotated[
        bool,
        typer.Option(
            "--raw",
            help="Allocate the estimated tensors directly (only torch) and read the allocator's "
            "figures instead of running the model.",
        ),
    ] = False,
    engine: EngineOpt = "transformers",
    tolerance: Annotated[
        str,
        typer.Option(
            "--tolerance",
            metavar="BYTES|PCT",
            help="Allowed difference (0: exact tensor bytes, the default; 4096; 0.5%). Exit status 1 beyond it.",
        ),
    ] = "0",
    as_json: JsonOpt = False,
    revision: RevisionOpt = None,
    print_request: Annotated[
        bool,
        typer.Option(
            "--print-request",
            help="Print the probe's JSON request instead of running it (to run torch_probe.py on another machine).",
        ),
    ] = False,
    from_result: Annotated[
        str | None,
        typer.Option(
            "--from-result",
            metavar="FILE",
            help="Compare a result torch_probe.py printed elsewhere instead of running the probe here.",
        ),
    ] = None,
    strict: StrictOpt = False,
) -> None:
    """Measure a real KV cache with PyTorch and cross-check the estimate byte for byte.

    The model probe builds the model's transformers implementation from its config with random
    weights, shrunk to one layer of each kind (tiny vocab and MLPs, attention geometry exact),
    prefills and decodes, counts every cache tensor and scales by the real layer counts; the
    estimate uses transformers' semantics. No code from a model repo is run. The probe is one
    file, kvcalc/torch_probe.py: copy it to a GPU box and run `python torch_probe.py request.json`.
    """
    from kvcalc import api

    if model is None:
        raise UsageError("give a MODEL (preset, config.json or repo id)")
    if print_request and from_result is not None:
        raise UsageError("--print-request prints a request to run elsewhere; --from-result reads its answer: give one")
    shape: dict[str, Any] = {
        "tokens": count(tokens, "--tokens"), "batch": count(batch, "--batch"), "decode": decode,
        "kv_dtype": kv_dtype, "device": device, "raw": raw, "engine": engine, "tolerance": tolerance,
        "revision": revision, "on_fetch": say_fetching, "strict": strict,
        "images": count_or_zero(images, "--images"), "image_tokens": count(image_tokens, "--image-tokens"),
    }  # fmt: skip
    if print_request:
        print_json(api.probe_request(model, **shape)[2])
        return
    show = from_result is None and not as_json and sys.stderr is not None and sys.stderr.isatty()
    if show:
        with _ProbeProgress(raw=raw, device=device) as progress:
            report = api.probe(model, progress=progress, **shape)
    else:
        report = api.probe(model, from_result=from_result, **shape)
    warn(report.model.spec.warnings)
    if as_json:
        from kvcalc.views.json import probe_json, raw_probe_json

        if report.check is None:
            print_json(with_warnings(raw_probe_json(report.estimate, report.result), report.model.spec.warnings))
        else:
            data = probe_json(report.check, report.result, report.tolerance_bytes, list(report.notes))
            print_json(with_warnings(data, report.model.spec.warnings))
    else:
        from kvcalc.views.probe import probe_view

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
