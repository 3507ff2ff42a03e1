"""``kvcalc probe``: measure a real cache and cross-check the estimate byte for byte."""

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvcalc.cli.options import (
    ENGINE_PANEL,
    HARDWARE_PANEL,
    KNOBS_PANEL,
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
    mlx_flags,
    print_json,
    print_view,
    say_fetching,
    size,
    warn,
)
from kvcalc.defaults import DEFAULT_TOKENS
from kvcalc.errors import UsageError

if TYPE_CHECKING:
    from kvcalc.views.probe import ProbeOutcome


def probe(
    model: ModelArg = None,
    device: Annotated[
        str,
        typer.Option(
            "--device",
            metavar="auto|cpu|cuda",
            help="Where to build the cache (auto: CUDA if present).",
            rich_help_panel=HARDWARE_PANEL,
        ),
    ] = "auto",
    tokens: Annotated[
        str | None,
        typer.Option(
            "--tokens",
            "-t",
            metavar="T",
            help=f"Tokens per sequence, prompt + decoded (default {DEFAULT_TOKENS}).",
            rich_help_panel=WORKLOAD_PANEL,
        ),
    ] = None,
    batch: BatchOpt = "1",
    images: ImagesOpt = None,
    image_tokens: ImageTokensOpt = None,
    encoder_tokens: EncoderTokensOpt = None,
    decode: Annotated[
        int,
        typer.Option(
            "--decode",
            metavar="N",
            min=0,
            help="Of the T tokens, how many are decoded one at a time.",
            rich_help_panel=WORKLOAD_PANEL,
        ),
    ] = 2,
    kv_dtype: Annotated[
        str | None,
        typer.Option(
            "--kv-dtype",
            metavar="DTYPE",
            autocompletion=complete_dtype,
            help="Model and cache dtype: fp32, bf16, fp16 or auto (the model's own, else fp32).",
            rich_help_panel=ENGINE_PANEL,
        ),
    ] = None,
    raw: Annotated[
        bool,
        typer.Option(
            "--raw",
            help="Allocate the estimated tensors with torch instead of running the model.",
            rich_help_panel=ENGINE_PANEL,
        ),
    ] = False,
    engine: EngineOpt = "transformers",
    tolerance: Annotated[
        str,
        typer.Option(
            "--tolerance",
            metavar="BYTES|PCT",
            help="Allowed difference: 0 (exact, the default), 4096 (bytes) or 0.5%.",
            rich_help_panel=OUTPUT_PANEL,
        ),
    ] = "0",
    as_json: JsonOpt = False,
    revision: RevisionOpt = None,
    print_request: Annotated[
        bool,
        typer.Option(
            "--print-request",
            help="Print the probe's JSON request, to run torch_probe.py elsewhere.",
            rich_help_panel=OUTPUT_PANEL,
        ),
    ] = False,
    from_result: Annotated[
        str | None,
        typer.Option(
            "--from-result",
            metavar="FILE",
            help="Compare a result torch_probe.py printed elsewhere.",
            rich_help_panel=OUTPUT_PANEL,
        ),
    ] = None,
    strict: StrictOpt = False,
    k_dtype: KDtypeOpt = None,
    v_dtype: VDtypeOpt = None,
    ubatch: UbatchOpt = None,
    n_batch: NBatchOpt = None,
    kv_unified: UnifiedOpt = False,
    swa_full: SwaFullOpt = False,
    kv_budget: Annotated[
        str | None,
        typer.Option(
            "--kv-budget",
            metavar="SIZE",
            help="--engine vllm / sglang: the KV budget the engine gets (vLLM 64MiB, SGLang 256MiB)." + SIZE_HELP,
            rich_help_panel=HARDWARE_PANEL,
        ),
    ] = None,
    block_size: BlockOpt = None,
    max_batched_tokens: BatchedOpt = None,
    engine_python: Annotated[
        str | None,
        typer.Option(
            "--engine-python",
            metavar="PATH",
            help="The engine environment's Python (default $KVCALC_<ENGINE>_PYTHON).",
            rich_help_panel=ENGINE_PANEL,
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            metavar="S",
            help="Seconds the real engine may take (default 300).",
            rich_help_panel=ENGINE_PANEL,
        ),
    ] = None,
    kv_bits: KvBitsOpt = None,
    kv_group_size: KvGroupSizeOpt = None,
    quantized_kv_start: QuantizedKvStartOpt = None,
    max_kv_size: MaxKvSizeOpt = None,
    prefill_step_size: PrefillStepOpt = None,
    window: Annotated[
        int | None,
        typer.Option(
            "--window",
            metavar="N",
            min=2,
            help="--engine mlx: set the config's sliding windows and attention chunks to N tokens for the run, so a "
            "short one crosses them (the estimate reads the same config).",
            rich_help_panel=KNOBS_PANEL,
        ),
    ] = None,
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
    """
    from kvcalc import api

    if model is None:
        raise UsageError("give a MODEL (preset, config.json or repo id)")
    llama_flags = {"--k-dtype": k_dtype is not None, "--v-dtype": v_dtype is not None, "--ubatch": ubatch is not None,
                   "--n-batch": n_batch is not None, "--kv-unified": kv_unified, "--swa-full": swa_full}  # fmt: skip
    if _runs_llama_cpp(engine) and not raw:
        ignored = {"--print-request": print_request, "--from-result": from_result is not None,
                   "--images": images is not None, "--image-tokens": image_tokens is not None,
                   "--encoder-tokens": encoder_tokens is not None,
                   "--tolerance": tolerance != "0", "--kv-budget": kv_budget is not None,
                   "--block-size": block_size is not None, "--max-batched-tokens": max_batched_tokens is not None,
                   "--engine-python": engine_python is not None}  # fmt: skip
        dropped = [flag for flag, present in ignored.items() if present]
        if dropped:
            raise UsageError(f"{', '.join(dropped)} do not apply to the real llama.cpp probe (it runs here, exactly)")
        _probe_llama_cpp(
            model, engine=engine, tokens=count(tokens, "--tokens") or DEFAULT_TOKENS,
            batch=count(batch, "--batch") or 1,
            kv_dtype=kv_dtype, k_dtype=k_dtype, v_dtype=v_dtype, ubatch=ubatch, n_batch=n_batch,
            kv_unified=kv_unified, swa_full=swa_full, as_json=as_json, revision=revision, strict=strict,
            timeout=300 if timeout is None else timeout,
        )  # fmt: skip
        return
    if _runs_sglang(engine) and not raw:
        dropped = [flag for flag, present in {"--max-batched-tokens": max_batched_tokens is not None,
                   "--print-request": print_request, "--from-result": from_result is not None,
                   "--encoder-tokens": encoder_tokens is not None,
                   "--tolerance": tolerance != "0", **llama_flags}.items() if present]  # fmt: skip
        if dropped:
            raise UsageError(f"{', '.join(dropped)} do not apply to the SGLang probe (it builds SGLang's pools)")
        show_probe(api.probe_sglang(
            model, kv_budget=size(kv_budget, "--kv-budget"), block_size=block_size, kv_dtype=kv_dtype,
            context_length=count(tokens, "--tokens"), python=engine_python,
            timeout=300 if timeout is None else timeout, revision=revision, on_fetch=say_fetching, strict=strict,
        ), as_json)  # fmt: skip
        return
    mlx_knobs = mlx_flags(kv_bits, kv_group_size, quantized_kv_start, max_kv_size, prefill_step_size, None)
    mlx_given = {"--kv-bits": kv_bits, "--kv-group-size": kv_group_size,
                 "--quantized-kv-start": quantized_kv_start, "--max-kv-size": max_kv_size,
                 "--prefill-step-size": prefill_step_size, "--window": window}  # fmt: skip
    if _runs_mlx(engine) and not raw:
        dropped = [flag for flag, present in {"--max-batched-tokens": max_batched_tokens is not None,
                   "--kv-budget": kv_budget is not None, "--block-size": block_size is not None,
                   "--print-request": print_request, "--from-result": from_result is not None,
                   "--tolerance": tolerance != "0", "--kv-dtype": kv_dtype is not None, "--batch": batch != "1",
                   "--images": images is not None, "--image-tokens": image_tokens is not None,
                   "--encoder-tokens": encoder_tokens is not None,
                   "--device": device != "auto", **llama_flags}.items() if present]  # fmt: skip
        if dropped:
            verb = "does" if len(dropped) == 1 else "do"
            raise UsageError(
                f"{', '.join(dropped)} {verb} not apply to the mlx-lm probe (one sequence, its own formats)"
            )
        show_probe(api.probe_mlx(
            model, tokens=count(tokens, "--tokens") or DEFAULT_TOKENS, decode=decode,
            options={k: v for k, v in mlx_knobs.items() if v is not None}, window=window, python=engine_python,
            timeout=300 if timeout is None else timeout, revision=revision, on_fetch=say_fetching, strict=strict,
        ), as_json)  # fmt: skip
        return
    given = [flag for flag, value in mlx_given.items() if value is not None]
    if given:
        raise UsageError(
            f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to --engine mlx (the mlx-lm probe)"
        )
    vllm_flags = {"--kv-budget": kv_budget, "--block-size": block_size, "--max-batched-tokens": max_batched_tokens,
                  "--engine-python": engine_python}  # fmt: skip
    if _runs_vllm(engine) and not raw:  # --raw --engine vllm: the estimated tensors, allocated by torch
        if encoder_tokens is not None:
            raise UsageError("--encoder-tokens does not apply to the vLLM probe (it runs decoder-only models)")
        _probe_vllm(
            model, tokens=count(tokens, "--tokens") or DEFAULT_TOKENS, kv_budget=size(kv_budget, "--kv-budget"),
            block_size=block_size, max_batched_tokens=max_batched_tokens, python=engine_python,
            timeout=300 if timeout is None else timeout,
            as_json=as_json, revision=revision, strict=strict,
        )  # fmt: skip
        return
    given = [flag for flag, value in vllm_flags.items() if value is not None]
    if given:
        raise UsageError(f"{', '.join(given)} apply to --engine vllm (the real vLLM probe)")
    if timeout is not None:
        raise UsageError("--timeout applies to the real engines' probes (--engine vllm or llama.cpp, without --raw)")
    given = [flag for flag, present in llama_flags.items() if present]
    if given:
        raise UsageError(f"{', '.join(given)} apply to --engine llama.cpp without --raw (the real llama.cpp probe)")
    if print_request and from_result is not None:
        raise UsageError("--print-request prints a request to run elsewhere; --from-result reads its answer: give one")
    shape: dict[str, Any] = {
        "tokens": count(tokens, "--tokens") or DEFAULT_TOKENS, "batch": count(batch, "--batch"), "decode": decode,
        "kv_dtype": kv_dtype, "device": device, "raw": raw, "engine": engine, "tolerance": tolerance,
        "revision": revision, "on_fetch": say_fetching, "strict": strict,
        "images": count_or_zero(images, "--images"), "image_tokens": count(image_tokens, "--image-tokens"),
        "encoder_tokens": count(encoder_tokens, "--encoder-tokens"),
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
    show_probe(report, as_json)


def _runs_llama_cpp(engine: str) -> bool:
    from kvcalc.engines import engine_entry

    return engine_entry(engine).module == "llamacpp"


def _probe_llama_cpp(model: str, *, engine: str, as_json: bool, **options: Any) -> None:
    """The real llama.cpp probe: its table (or JSON) on stdout, exit status 1 on a difference."""
    from kvcalc import api

    knobs = {name: options.pop(name) for name in ("ubatch", "n_batch", "kv_unified", "swa_full")}
    given = {name: value for name, value in knobs.items() if value is not None and value is not False}
    show_probe(api.probe_llamacpp(model, engine=engine, on_fetch=say_fetching, options=given, **options), as_json)


def _runs_mlx(engine: str) -> bool:
    from kvcalc.engines import engine_entry

    return engine_entry(engine).module == "mlx"


def _runs_sglang(engine: str) -> bool:
    from kvcalc.engines import engine_entry

    return engine_entry(engine).module == "sglang"


def _runs_vllm(engine: str) -> bool:
    from kvcalc.engines import engine_entry

    return engine_entry(engine).module == "vllm"


def _probe_vllm(model: str, *, tokens: int, as_json: bool, **options: Any) -> None:
    """The real vLLM probe: its table (or JSON) on stdout, exit status 1 on a difference."""
    from kvcalc import api

    show_probe(api.probe_vllm(model, max_model_len=tokens, on_fetch=say_fetching, **options), as_json)


def show_probe(report: "ProbeOutcome", as_json: bool) -> None:
    """Every probe's answer, shown one way: its JSON or its view on stdout; exit status 1 when the
    real engine disagreed."""
    if as_json:
        print_json(report.as_json())
    else:
        print_view(report.view())
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
