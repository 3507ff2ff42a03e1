"""probe: a real engine's cache beside the estimate. Each function returns its report as data (it
describes itself: kvcalc.engines.probing); the views draw it. What is one engine's own (its
request, its result's release, its figures) is in that engine's package; each engine's probe is
named through its package's ``probing.PROBER``, not by a literal here."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import kvcalc.checks as valid
from kvcalc.calc.estimate import Estimate, Workload
from kvcalc.calc.estimate import estimate as estimate_spec
from kvcalc.defaults import DEFAULT_TOKENS
from kvcalc.dtypes import DEFAULT_QUANT_GROUP
from kvcalc.engines.llamacpp.probing import PROBER as LLAMACPP
from kvcalc.engines.mlx.probing import PROBER as MLX
from kvcalc.engines.probing import Item, Remark
from kvcalc.engines.sglang.probing import PROBER as SGLANG
from kvcalc.engines.transformers.probing import PROBER as MODEL_PROBE
from kvcalc.engines.vllm.probing import PROBER as VLLM
from kvcalc.errors import DependencyError, UsageError
from kvcalc.spec import ModelSpec
from kvcalc.units import format_exact

if TYPE_CHECKING:  # the heavier modules load only when asked for (fractions alone costs ~3 ms)
    from kvcalc.engines.llamacpp.probe import LlamaCppProbe
    from kvcalc.engines.mlx.probe import MLXProbe
    from kvcalc.engines.sglang.probe import SGLangProbe
    from kvcalc.engines.transformers.crosscheck import CrossCheck
    from kvcalc.engines.vllm.probe import VllmProbe

from kvcalc.api._estimate import estimate
from kvcalc.api._fit import Capacity, fit
from kvcalc.api._models import DTypeLike, Model, ModelArg, OnFetch, open_model
from kvcalc.api._sequences import Sequences, as_sequences
from kvcalc.api._serving import KnobValue, Serving, _dtype, _images, _merge, _tokens, check_options, resolve_serving


@dataclass(frozen=True)
class ProbeReport:
    """A probe's request and result beside the estimate under the same engine's rules."""

    model: Model
    estimate: Estimate
    request: dict[str, Any]
    result: dict[str, Any]
    tolerance_bytes: int
    check: CrossCheck | None  # None for the raw probe
    notes: tuple[str, ...] = ()

    @property
    def measured_bytes(self) -> int:
        return int(self.check.measured_bytes if self.check is not None else self.result["tensor_bytes"])

    @property
    def match(self) -> bool:
        if self.check is not None:
            return self.check.within(self.tolerance_bytes)
        return abs(self.measured_bytes - self.estimate.total_bytes) <= self.tolerance_bytes

    def as_json(self) -> dict[str, Any]:
        """The JSON answer, with the config fields kvcalc could not model (``warnings``)."""
        from kvcalc.engines.transformers.probe_report import probe_json

        if self.check is None:
            data = _raw_json(self.estimate, self.result)
        else:
            data = probe_json(self.check, self.result, self.tolerance_bytes, list(self.notes))
        data["warnings"] = list(dict.fromkeys(self.model.spec.warnings))
        return data

    def describe(self) -> list[Item]:
        """The answer as items a view draws (kvcalc.engines.probing)."""
        from kvcalc.engines.transformers.probe_report import probe_items

        if self.check is None:
            return list(_raw_lines(self.estimate, self.result))
        items = probe_items(self.model.name, self.check, self.result, self.tolerance_bytes)
        return items + [Remark(note) for note in dict.fromkeys(self.notes)]


def _raw_json(est: Estimate, result: dict[str, Any]) -> dict[str, Any]:
    data = {
        "estimated_bytes": est.total_bytes,
        "measured_bytes": result["tensor_bytes"],
        "match": result["tensor_bytes"] == est.total_bytes,
        "device": result["device"],
        "engine": est.engine,
        "tensors": result["tensors"],
    }
    for key in ("allocated_bytes", "requested_bytes", "reserved_bytes"):
        if key in result:
            data[key] = result[key]
    return data


def _raw_lines(est: Estimate, result: dict[str, Any]) -> list[str]:
    """The raw probe: the allocator's figures beside the estimate, exact and in both units."""
    lines = [
        f"Raw probe of {est.model.name} ({est.engine}) on {result['device']}: {result['tensors']:,} tensors",
        f"estimated      {format_exact(est.total_bytes, 'both')}",
        f"tensor bytes   {format_exact(result['tensor_bytes'], 'both')}",
    ]
    if "allocated_bytes" in result:
        lines += [
            f"requested      {format_exact(result['requested_bytes'], 'both')}  (allocator, unrounded)",
            f"allocated      {format_exact(result['allocated_bytes'], 'both')}  (rounded to 512-byte blocks)",
            f"reserved       {format_exact(result['reserved_bytes'], 'both')}  (segments the caching allocator holds)",
        ]
    else:
        lines.append("(CPU: no allocator statistics; tensor bytes only)")
    return lines


def probe_request(
    model: ModelArg,
    *,
    tokens: int | None = None,
    batch: int = 1,
    sequences: Sequences | None = None,
    decode: int = 2,
    kv_dtype: DTypeLike = None,
    device: str = "auto",
    raw: bool = False,
    engine: str = MODEL_PROBE.engine,
    tolerance: str = "0",
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
) -> tuple[Model, Estimate, dict[str, Any], int, tuple[str, ...]]:
    """What the probe will run: (model, estimate, request, tolerance in bytes, notes). The request
    is plain JSON for torch_probe.py, here or on another machine. ``batch`` sequences of ``tokens``
    (None: the default workload's) in all, the last ``decode`` of them decoded one at a time; or
    ``sequences``, which may also give the images and encoder length of the models that cache
    them (a prompt, output or shared prefix changes nothing in the probe, and is refused)."""
    from kvcalc.dtypes import FP32
    from kvcalc.engines import make_engine
    from kvcalc.engines.transformers.crosscheck import model_request, parse_tolerance, raw_request

    work = as_sequences(sequences, tokens=tokens, batch=batch, takes=("encoder_tokens", "images", "image_tokens"),
                        what="the probe")  # fmt: skip
    tokens = valid.count(DEFAULT_TOKENS if work.tokens is None else work.tokens, "tokens")
    batch = valid.count(work.batch, "batch")
    decode = valid.count(decode, "decode", minimum=0)
    valid.flag(raw, "raw")
    valid.text(engine, "engine", optional=False)
    valid.text(tolerance, "tolerance", optional=False)
    encoder_tokens = valid.optional_count(work.encoder_tokens, "encoder_tokens")
    if not raw and engine != MODEL_PROBE.engine:
        raise UsageError("the model probe measures transformers' cache: engine applies to the raw probe only",
                         param="engine")  # fmt: skip
    if device not in ("auto", "cpu", "cuda"):
        raise UsageError(f"device must be auto, cpu or cuda, got {valid.shown(device)}", param="device")
    opened = open_model(model, revision=revision, on_fetch=on_fetch, strict=strict)
    spec = opened.spec
    chosen, notes = make_engine(engine if raw else MODEL_PROBE.engine, uses_mla=any(c.is_latent for c in spec.caches))
    asked = _dtype(kv_dtype, DEFAULT_QUANT_GROUP, "kv_dtype")
    # The probe runs the model in its own dtype; a config without one builds in torch's float32.
    dtype = asked or (spec.dtype if spec.dtype and spec.dtype.is_plain else FP32)
    pictures = _images(spec, work.images, work.image_tokens)
    if encoder_tokens is not None:
        _tokens(spec, tokens, None, None, encoder_tokens)  # refuses it for a model without cross-attention
        pictures["encoder_tokens"] = encoder_tokens
    # The whole model runs in that dtype, so a state layer's conv history is kept in it too.
    run = Workload(tokens=tokens, batch=batch, kv_dtype=dtype, state_dtype=None if raw else dtype, **pictures)
    est = estimate_spec(spec, run, engine=chosen)
    # Checked before any run, so a bad tolerance fails in a second, not after minutes of probing.
    allowed = parse_tolerance(tolerance, est.total_bytes)
    if raw:
        request = raw_request(est, device=device, block_size=getattr(chosen, "block_size", None))
    else:
        config = opened.source.config if opened.source is not None else None
        if not isinstance(config, dict):
            raise UsageError("the model probe needs a model's JSON config (a preset, file or repo id)")
        request = model_request(config, est, decode=decode, device=device)
    return opened, est, request, allowed, _merge(spec.notes, notes, est.notes)


def probe(
    model: ModelArg,
    *,
    tokens: int | None = None,
    batch: int = 1,
    sequences: Sequences | None = None,
    decode: int = 2,
    kv_dtype: DTypeLike = None,
    device: str = "auto",
    raw: bool = False,
    engine: str = MODEL_PROBE.engine,
    tolerance: str = "0",
    from_result: str | Path | dict[str, Any] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
) -> ProbeReport:
    """Measure a real cache (transformers on CPU or CUDA, or raw tensors for an engine's layout)
    and set it beside the estimate; or check a result torch_probe.py printed elsewhere (``from_result``:
    a file path or the parsed JSON), refusing one that answers another request. The workload as
    ``probe_request`` takes it."""
    from kvcalc.engines.transformers.crosscheck import check_model, validate_result
    from kvcalc.engines.transformers.probe_report import version_note
    from kvcalc.engines.transformers.torch_probe import MissingPackage, ProbeError, run

    if from_result is not None and not isinstance(from_result, str | os.PathLike | dict):
        raise UsageError(f"from_result must be a result file's path or its parsed JSON (a dict), got "
                         f"{valid.shown(from_result)}", param="from_result")  # fmt: skip
    valid.callback(progress, "progress")

    opened, est, request, allowed, notes = probe_request(
        model, tokens=tokens, batch=batch, sequences=sequences, decode=decode, kv_dtype=kv_dtype, device=device,
        raw=raw, engine=engine, tolerance=tolerance, revision=revision, on_fetch=on_fetch, strict=strict,
    )  # fmt: skip
    if from_result is not None:
        from kvcalc.inputs.files import RESULT_LIMIT, read_json_file

        where = "result" if isinstance(from_result, dict) else str(from_result)
        loaded = from_result if isinstance(from_result, dict) else read_json_file(Path(from_result), limit=RESULT_LIMIT)
        result = validate_result(loaded, request, where=where, model_types=(opened.spec.model_type,))
    else:
        try:
            result = run(request, progress=progress) if progress is not None else run(request)
        except MissingPackage as exc:
            raise DependencyError(str(exc)) from None
        except ProbeError as exc:
            raise UsageError(str(exc)) from None
    warning = version_note(result)
    notes = (warning, *notes) if warning else notes
    if raw:
        return ProbeReport(opened, est, request, result, allowed, None, notes)
    check = check_model(opened.spec, est, result)
    return ProbeReport(
        opened, est, request, result, allowed, check, _merge(notes, check.notes, result.get("notes", []))
    )


def probe_llamacpp(
    model: ModelArg,
    *,
    tokens: int = DEFAULT_TOKENS,
    batch: int = 1,
    engine: str = LLAMACPP.engine,
    kv_dtype: DTypeLike = None,
    k_dtype: DTypeLike = None,
    v_dtype: DTypeLike = None,
    options: Mapping[str, KnobValue] | None = None,
    timeout: float = 600,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
) -> LlamaCppProbe:
    """Create a real llama.cpp context for ``batch`` sequences of ``tokens`` over a GGUF of the
    model's attention and recurrent geometry (a GGUF model's own metadata) and set its KV caches and
    recurrent R/S buffers beside ``estimate`` under the same llama.cpp settings
    (kvcalc.engines.llamacpp.probe.LlamaCppProbe; ``.match`` is byte-for-byte agreement)."""
    from kvcalc.engines.llamacpp.probe import (
        ALLOCATE_LIMIT,
        LlamaCppMissing,
        LlamaCppProbeError,
        compare,
        context_request,
        gguf_plan,
        measure,
    )

    tokens = valid.count(tokens, "tokens")
    batch = valid.count(batch, "batch")
    from kvcalc.engines.probing import prober

    if prober(engine) is not LLAMACPP:
        raise UsageError(f"the llama.cpp probe runs llama.cpp: engine {engine!r} is not llama.cpp", param="engine")
    _check_timeout(timeout)
    opened = open_model(model, revision=revision, on_fetch=on_fetch, strict=strict)
    chosen = resolve_serving(opened.spec, Serving(engine, options=options or {})).engine
    # The real engine takes every knob; the estimate leaves out those that shape none of this model's
    # layers (it would refuse them as changing nothing: the figure is the same without them).
    idle = chosen.idle_knobs(opened.spec)
    sizing = {knob: value for knob, value in (options or {}).items() if knob not in idle}
    est = estimate(opened, tokens=tokens, batch=batch, serving=Serving(engine, kv_dtype=kv_dtype, k_dtype=k_dtype,
                                                                       v_dtype=v_dtype, options=sizing))  # fmt: skip
    plan = _llamacpp_plan(opened, tokens * batch, gguf_plan)
    k_type = est.kv_dtype.name
    request = context_request(chosen, tokens, batch, k_type, (est.v_dtype or est.kv_dtype).name)
    # Allocated for real when cache and tiny weights fit easily; else sized by llama.cpp unallocated.
    allocated = max(est.total_bytes, plan.weights_bytes) <= ALLOCATE_LIMIT
    try:
        answer = measure(plan, [request], timeout=timeout, no_alloc=not allocated)
    except LlamaCppMissing as exc:
        raise DependencyError(str(exc)) from None
    except LlamaCppProbeError as exc:
        raise UsageError(str(exc)) from None
    result = answer["results"][0]
    if "error" in result:
        raise UsageError(f"llama.cpp refused the context: {result['error']}")
    checks = compare(est, result)
    from kvcalc.engines.llamacpp.probe import LlamaCppProbe, version_note

    warning = version_note(answer)
    notes = _merge([warning] if warning else [], est.notes, plan.notes)
    return LlamaCppProbe(opened.name, est, request, checks, result["cparams"], notes, allocated)


# The longest a real engine's run may be given: a day (a large model's first start takes minutes).
MAX_TIMEOUT = 86_400


def _check_timeout(timeout: float) -> None:
    """A real engine's time limit: a finite number of seconds, at least one, at most a day."""
    if (isinstance(timeout, bool) or not isinstance(timeout, int | float) or not math.isfinite(timeout)
            or not 1 <= timeout <= MAX_TIMEOUT):  # fmt: skip
        raise UsageError(f"timeout must be a finite number of seconds, at least 1 and at most {MAX_TIMEOUT:,}, got "
                         f"{valid.shown(timeout)}", param="timeout")  # fmt: skip


def _llamacpp_plan(opened: Model, n_ctx: int, from_spec: Callable[[ModelSpec, int], Any]) -> Any:
    """A GGUF file's own metadata (llamacpp_probe.file_plan: llama.cpp reads the file's keys, not
    kvcalc's reading of them; its NextN blocks read here, as an engine reads no input), or the GGUF
    of any other model's geometry (gguf_plan)."""
    from kvcalc.inputs.source import gguf_headers

    headers = gguf_headers(opened.source) if opened.source is not None else None
    if headers is not None and opened.source is not None:
        from kvcalc.engines.llamacpp.probe import file_plan
        from kvcalc.inputs.gguf import nextn_layers

        label = opened.source.label
        return file_plan(headers[0], label, nextn=nextn_layers(headers[0].metadata, label))
    return from_spec(opened.spec, n_ctx)


def probe_vllm(
    model: ModelArg,
    *,
    max_model_len: int = 4096,
    kv_budget: int | None = None,
    block_size: int | None = None,
    max_batched_tokens: int | None = None,
    python: str | None = None,
    timeout: float = 300,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
) -> VllmProbe:
    """Start the real vLLM (its own Python: ``python``, $KVCALC_VLLM_PYTHON, or this one) on a
    random-weight model of the model's geometry with ``max_model_len``, ``block_size``,
    ``max_batched_tokens`` (None: vLLM's defaults) and ``kv_budget`` bytes of KV cache (None: 64 MiB), and set the
    KV cache config it built and the capacity it logged beside ``fit`` under the same release and
    platform (kvcalc.engines.vllm.probe.VllmProbe; ``.match`` when every figure agrees)."""
    from kvcalc.engines.vllm.probe import VllmProbe, compare, fitted_engine, run_probe, vllm_python

    opened = open_model(model, revision=revision, on_fetch=on_fetch, strict=strict)
    config = opened.source.config if opened.source is not None else None
    if not isinstance(config, dict):
        raise UsageError("the vLLM probe needs a model's JSON config (a preset, file or repo id)")
    if kv_budget is None:
        kv_budget = 64 * 2**20  # room for a few requests of a small model; the figures scale with it
    _check_timeout(timeout)
    max_model_len = valid.count(max_model_len, "max_model_len")
    kv_budget = valid.size(kv_budget, "kv_budget")
    valid.text(python, "python")
    # Checked here first: a setting kvcalc refuses fails in a second, not after vLLM's start.
    knobs = {"block_size": block_size, "max_batched_tokens": max_batched_tokens}
    resolve_serving(opened.spec, Serving(VLLM.engine, options=knobs))
    request = {
        "config": config, "max_model_len": max_model_len, "kv_cache_memory_bytes": kv_budget,
        "block_size": block_size, "max_num_batched_tokens": max_batched_tokens, "dtype": "auto", "seed": 0,
    }  # fmt: skip
    result = run_probe(vllm_python(python), request, timeout)
    engine = fitted_engine(result)
    report = fit(opened, tokens=max_model_len, capacity=Capacity(kv_budget=kv_budget, max_model_len=max_model_len),
                 serving=Serving(engine, options=knobs))  # fmt: skip
    checks = compare(result, report.result)
    return VllmProbe(opened.name, engine, request, result, checks, report.notes)


def probe_sglang(
    model: ModelArg,
    *,
    kv_budget: int | None = None,
    block_size: int | None = None,
    kv_dtype: str | None = None,
    context_length: int | None = None,
    allocate: bool | None = None,
    python: str | None = None,
    timeout: float = 300,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
) -> SGLangProbe:
    """Build SGLang's own pools (its Python: ``python``, $KVCALC_SGLANG_PYTHON, or this one) for the
    model's config and ``kv_budget`` bytes (None: 256 MiB) with page size ``block_size``, KV
    ``kv_dtype`` ("fp8" or the model's own) and ``context_length`` (None: the model's), and set the
    sizes and buffers SGLang chose beside ``fit --engine sglang`` for the same budget
    (kvcalc.engines.sglang.probe.SGLangProbe; ``.match`` when every figure agrees). ``allocate``
    False sizes the pools without allocating them; None: allocate budgets up to 16 GiB."""
    from kvcalc.engines.sglang.capacity import plan_of
    from kvcalc.engines.sglang.probe import SGLangProbe, compare, fitted_engine, run_probe, sglang_python

    opened = open_model(model, revision=revision, on_fetch=on_fetch, strict=strict)
    config = opened.source.config if opened.source is not None else None
    if not isinstance(config, dict):
        raise UsageError("the SGLang probe needs a model's JSON config (a preset, file or repo id)")
    if kv_budget is None:
        kv_budget = 256 * 2**20
    _check_timeout(timeout)
    kv_budget = valid.size(kv_budget, "kv_budget")
    context_length = valid.optional_count(context_length, "context_length")
    if allocate is not None:
        valid.flag(allocate, "allocate")
    valid.text(python, "python")
    if allocate is None:
        allocate = kv_budget <= 2**34
    if allocate and kv_budget > 2**34:
        raise UsageError("an SGLang probe that allocates its pools takes at most 16 GiB here: size larger budgets "
                         "without allocating (allocate=False)", param="kv_budget")  # fmt: skip
    if kv_dtype not in (None, "auto", "fp8", "fp8_e4m3"):
        raise UsageError(f"the SGLang probe builds the model dtype's cache or fp8, not {kv_dtype}", param="kv_dtype")
    fp8 = kv_dtype in ("fp8", "fp8_e4m3")
    knobs = {"block_size": block_size}
    context = context_length or opened.spec.max_context or 4096
    report = fit(opened, tokens=context, capacity=Capacity(kv_budget=kv_budget, max_model_len=context),
                 serving=Serving(SGLANG.engine, options=knobs, kv_dtype="fp8" if fp8 else None))  # fmt: skip
    plan = plan_of(report.result)
    request = {"config": config, "budget": kv_budget, "page_size": plan.page_size, "context_length": context,
               "kv_cache_dtype": "fp8_e4m3" if fp8 else "auto", "pools": allocate}  # fmt: skip
    output = run_probe(sglang_python(python), {"cases": [request]}, timeout)
    result = {"sglang_version": output.get("sglang_version"), "files": output.get("files"), **output["results"][0]}
    if "unsupported" in result or "error" in result:
        why = result.get("unsupported") or result["error"]
        hint = "; a shorter --tokens or a smaller --kv-budget needs less" if "out of memory" in why else ""
        raise UsageError(f"SGLang could not build {opened.name}'s pools: {why}{hint}")
    engine = fitted_engine(result)
    sized = "pools sized by SGLang's own code, not allocated (a budget over 16 GiB)"
    notes = report.notes if allocate else (*report.notes, sized)
    return SGLangProbe(opened.name, engine, request, result, compare(result, report.result), notes)


def probe_mlx(
    model: ModelArg,
    *,
    tokens: int = DEFAULT_TOKENS,
    decode: int = 2,
    options: Mapping[str, KnobValue] | None = None,
    window: int | None = None,
    python: str | None = None,
    timeout: float = 300,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
) -> MLXProbe:
    """Run mlx-lm's own generate loop (its Python: ``python``, $KVCALC_MLX_PYTHON, or this one) on a
    random-weight model of the config, shrunk (at most 8 layers, a hidden size of at most 256,
    every head and head dim kept), for ``tokens`` in all, the last ``decode`` of them generated, with
    mlx-lm's ``options`` (max_kv_size, prefill_step_size, kv_bits, kv_group_size, quantized_kv_start),
    and set every layer's cache bytes beside ``estimate --engine mlx`` of that same config
    (kvcalc.engines.mlx.probe.MLXProbe; ``.match`` on byte-for-byte agreement). ``window`` sets the
    config's sliding windows and attention chunks to that many tokens, so short runs cross them."""
    from kvcalc.engines.mlx.probe import MLXProbe, mlx_python, run_probe

    opened = open_model(model, revision=revision, on_fetch=on_fetch, strict=strict)
    config = opened.source.config if opened.source is not None else None
    if not isinstance(config, dict):
        raise UsageError("the mlx-lm probe needs a model's JSON config (a preset, file or repo id)")
    _check_timeout(timeout)
    tokens = valid.count(tokens, "tokens")
    decode = valid.count(decode, "decode", minimum=0)
    window = valid.optional_count(window, "window", minimum=2)
    valid.text(python, "python")
    if decode >= tokens:
        raise UsageError(f"decode ({decode:,}) leaves no prompt in {tokens:,} tokens", param="decode")
    knobs = dict(check_options(options or {}))
    if "max_tokens" in knobs:
        raise UsageError("the probe's generated tokens are decode, not max_tokens", param="options")
    # Checked here first: a setting kvcalc refuses fails in a second, not after mlx-lm's run.
    estimate(opened, tokens=tokens, engine=MLX.engine, options={**knobs, "max_tokens": decode})
    request: dict[str, Any] = {"config": config, "tokens": tokens - decode, "decode": decode, "batch": 1, "seed": 0,
                               "window": window, "shrink": True}  # fmt: skip
    request.update({k: v for k, v in knobs.items() if v is not None})
    result = run_probe(mlx_python(python), request, timeout)
    est, checks, notes = mlx_checks(result, opened.name, tokens, decode, knobs)
    return MLXProbe(opened.name, est, request, result, checks, notes)


def mlx_checks(
    result: dict[str, Any], name: str, tokens: int, decode: int, knobs: Mapping[str, KnobValue]
) -> tuple[Estimate, tuple[Any, ...], tuple[str, ...]]:
    """``estimate --engine mlx`` of the config mlx_probe.py built (its ``config``: the shrunk one),
    with every layer of mlx-lm's cache set beside it, and the notes of both."""
    from kvcalc.engines.mlx.probe import compare, version_note
    from kvcalc.inputs.hf.configs import read_config

    tiny = read_config(result["config"], name=f"{name} (shrunk)")
    est = estimate(tiny, tokens=tokens, engine=MLX.engine, options={**knobs, "max_tokens": decode})
    checks, notes = compare(result, est)
    warning = version_note(result)
    return est, checks, _merge([warning] if warning else [], est.notes, notes, result.get("notes", []))
