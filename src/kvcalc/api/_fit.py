"""fit: the budget per GPU, what fits in it, and the verdict."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvcalc import checks
from kvcalc.calc.estimate import Workload
from kvcalc.defaults import DEFAULT_TOKENS
from kvcalc.dtypes import DType
from kvcalc.errors import UsageError
from kvcalc.spec import ModelSpec

if TYPE_CHECKING:  # the heavier modules load only when asked for (fractions alone costs ~3 ms)
    from fractions import Fraction

    from kvcalc.calc.fit import Budget, Fit, Verdict
    from kvcalc.calc.runtime import Runtime
    from kvcalc.engines import Engine
    from kvcalc.engines.commandline import SettingValue, WrittenCommand
    from kvcalc.gpus import GPU

from kvcalc.api._models import DTypeLike, Model, ModelArg, OnFetch, open_model
from kvcalc.api._sequences import Sequences, as_sequences
from kvcalc.api._serving import (
    Layout,
    Served,
    Serving,
    _images,
    _merge,
    as_layout,
    as_serving,
    gpu_platform,
    layout_extras,
    resolve_serving,
)


@dataclass(frozen=True)
class FitReport:
    """``fit``'s answers with everything that led to them: the budget line by line, the GPU, the
    workload the answers are about, and every note."""

    model: Model
    result: Fit
    budget: Budget
    workload: Workload
    gpu_label: str | None
    notes: tuple[str, ...] = field(default=())
    # The longest request the context answer considers (max_model_len, else the model's limit).
    context_limit: int | None = None
    verdict: Verdict | None = None
    engine: Engine | None = None  # the engine the answers follow, with its options
    # Attention-DP groups within the TP GPUs; the workload is then the KV's: tp / dp_attention
    # GPUs a group, dp x dp_attention groups, each caching its own requests.
    dp_attention: int = 1
    # The engine's own command line that runs this answer (its context, the concurrency found, the
    # share of memory and cache type), with notes for what it cannot say; None for an engine
    # kvcalc writes no line for (theoretical, transformers).
    command: WrittenCommand | None = None


@dataclass(frozen=True)
class Capacity:
    """What ``fit`` sizes against beside a GPU preset: ``gpu_memory`` bytes per GPU (in place of a
    preset) or a ready ``kv_budget`` per GPU, ``gpus`` in all (the tensor parallelism follows from
    it when not given), the engine's share of each GPU (``utilization``), the weights' bytes (None:
    read from the checkpoint, the Hub or the preset), the runtime's ``overhead`` in bytes (None:
    the engine's runtime model), and the longest request the context answer considers:
    ``max_model_len`` (None: the model's own limit; ``context_cap`` False: none)."""

    gpu_memory: int | None = None
    kv_budget: int | None = None
    gpus: int | None = None
    utilization: float | Fraction | None = None
    weights: int | None = None
    overhead: int | None = None
    max_model_len: int | None = None
    context_cap: bool = True


def fit(
    model: ModelArg,
    *,
    gpu: str | None = None,
    tokens: int | None = None,
    batch: int = 1,
    engine: str | Engine | None = None,
    kv_dtype: DTypeLike = None,
    tp: int | None = None,
    serving: Serving | None = None,
    layout: Layout | None = None,
    sequences: Sequences | None = None,
    capacity: Capacity | None = None,
    verdict: bool = True,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
) -> FitReport:
    """How many tokens, concurrent requests of ``tokens`` and how long a context fit on a ``gpu``
    preset (or the memory ``capacity`` gives: bytes per GPU or a ready KV budget, the GPU count,
    the weights and the runtime's overhead, the longest request). ``sequences``: the requests in
    place of tokens and batch, with ``images`` per request (Llama 3.2 Vision) as in ``estimate``.
    ``layout.dp_attention`` groups of tp / dp_attention GPUs each attend to their own requests
    (SGLang's --enable-dp-attention --dp N, vLLM's data parallel with expert parallel): each GPU
    caches only its group's requests, with the KV heads over tp / dp_attention GPUs, and holds
    the attention weights split that many ways. ``verdict``: whether it fits, and what to change
    when it does not."""
    checks.instance(capacity, "capacity", Capacity, "a kvcalc.Capacity or None")
    cap = capacity if capacity is not None else Capacity()
    work = as_sequences(sequences, tokens=tokens, batch=batch, takes=("images", "image_tokens"), what="fit")
    _, dp_attention = layout_extras(layout)
    # Every value checked first, as the CLI's flags are (kvcalc.checks): bytes are whole and bounded.
    request = _FitRequest(
        gpu=checks.text(gpu, "gpu"),
        gpu_memory=None if cap.gpu_memory is None else checks.size(cap.gpu_memory, "gpu_memory"),
        kv_budget=None if cap.kv_budget is None else checks.size(cap.kv_budget, "kv_budget"),
        weights=None if cap.weights is None else checks.size(cap.weights, "weights"),
        overhead=None if cap.overhead is None else checks.size(cap.overhead, "overhead", minimum=0),
        gpus=checks.optional_count(cap.gpus, "gpus", maximum=checks.MAX_PARALLEL),
        tokens=checks.optional_count(work.tokens, "tokens"),
        batch=checks.count(work.batch, "batch"),
        dp_attention=dp_attention,
        max_model_len=checks.optional_count(cap.max_model_len, "max_model_len"),
        context_cap=checks.flag(cap.context_cap, "context_cap"),
        images=work.images,
        image_tokens=work.image_tokens,
    )
    checks.flag(verdict, "verdict")
    checks.flag(strict, "strict")
    share = None if cap.utilization is None else checks.share(cap.utilization, "utilization")
    opened = open_model(model, revision=revision, on_fetch=on_fetch, strict=strict)
    asked = as_serving(serving, engine=engine, kv_dtype=kv_dtype)
    got_tp, pp, dp = as_layout(layout, tp=tp, pp=1, dp=1, takes=("dp_attention",), what="fit")
    request = replace(request, share=share, serving=asked, tp=got_tp, pp=pp, dp=dp)
    report = _fit(opened, request, _WeightsOnce(opened, revision, on_fetch), verdict=verdict)
    return replace(report, command=_command_line(model, report, request))


def _command_line(model: ModelArg, report: FitReport, request: _FitRequest) -> WrittenCommand | None:
    """The engine's own command line for this answer (engines.commandline: each engine writes its
    line from these settings, in kvcalc's names): the model as the engine finds it (a preset: the
    Hub repository it was taken from), the request length and the concurrency found (none when nothing fits),
    the layout and every setting the user gave; the share of memory the budget used."""
    import os

    from kvcalc.engines import engine_entry
    from kvcalc.engines.commandline import writer

    serving, engine = request.serving, report.engine
    name = serving.engine if isinstance(serving.engine, str) else (engine.name if engine else "")
    if engine is None or not name or not report.result.fits:
        return None  # nothing fits: the engine would refuse to start (the verdict says what to change)
    found = writer(engine_entry(name).name)
    if found is None:
        return None
    source = report.model.source
    if source is not None and source.preset is not None:
        ref: str = source.preset.hf_repo
    elif isinstance(model, str | os.PathLike):
        ref = os.fspath(model)
    else:
        ref = report.model.name
    result = report.result
    settings: dict[str, SettingValue] = {"model": ref, "tokens": result.tokens, "batch": result.max_concurrency}
    layout = {"tp": report.workload.tp * report.dp_attention, "pp": report.workload.pp,
              "dp": report.workload.dp // report.dp_attention, "dp_attention": report.dp_attention}  # fmt: skip
    settings.update({key: value for key, value in layout.items() if value > 1})  # 1: every engine's default
    if request.max_model_len is not None:
        settings["max_model_len"] = request.max_model_len
    if request.kv_budget is not None:
        settings["kv_budget"] = request.kv_budget
    else:
        # The share the budget used: the engine derives its own where none is given (SGLang's
        # mem_fraction_static by GPU memory), which its default alone would not give back.
        runtime = report.budget.runtime
        share = request.share if request.share is not None else runtime.share if runtime else engine.default_share
        settings["utilization"] = float(share)
    for key, dtype in (("kv_dtype", serving.kv_dtype), ("k_dtype", serving.k_dtype), ("v_dtype", serving.v_dtype)):
        if dtype is not None:
            settings[key] = dtype.name if isinstance(dtype, DType) else str(dtype)
    for knob, value in serving.options.items():
        if value is not None and value is not False:
            settings[knob] = value
    written = found.write(settings)
    _, at, release = name.partition("@")
    if at:  # an engine's line names no release of it: the release is kvcalc's flag
        note = (f"written for {engine_entry(name).name} {release}: 'kvcalc fit --engine {name.strip()} -- LINE' "
                "reads it back as that release")  # fmt: skip
        written = replace(written, notes=(*written.notes, note))
    return written


@dataclass(frozen=True)
class _FitRequest:
    """A fit call's parameters, checked, with the serving and layout as asked: what the verdict's
    remedies ask again with one thing changed (the model stays opened, its weights read once)."""

    gpu: str | None = None
    gpu_memory: int | None = None
    kv_budget: int | None = None
    gpus: int | None = None
    share: Fraction | None = None
    weights: int | None = None
    overhead: int | None = None
    tokens: int | None = None
    batch: int = 1
    serving: Serving = field(default_factory=Serving)
    tp: int | None = None
    pp: int = 1
    dp: int = 1
    dp_attention: int = 1
    max_model_len: int | None = None
    context_cap: bool = True
    images: int | None = None
    image_tokens: int | None = None


class _WeightsOnce:
    """The checkpoint's bytes, read at the first ask and kept for the rest of one fit call (its
    remedies included): a Hub id is one network round trip, not one per remedy."""

    def __init__(self, model: Model, revision: str | None, on_fetch: OnFetch) -> None:
        self.model, self.revision, self.on_fetch = model, revision, on_fetch
        self.read: tuple[int, str, list[str]] | None = None

    def __call__(self, engine: Engine) -> tuple[int, str, list[str]]:
        if self.read is None:
            self.read = _read_weights(self.model, self.revision, self.on_fetch)
        return _held_weights(self.model, engine, *self.read)


def _fit(model: Model, request: _FitRequest, weights: _WeightsOnce, *, verdict: bool) -> FitReport:
    """Resolve the layout and the serving, derive the budget, size what fits, and judge it."""
    from kvcalc.calc.fit import Fit
    from kvcalc.calc.fit import fit as run_fit

    spec = model.spec
    tp, pp, dp = _fit_layout(spec, request)
    chosen = resolve_serving(spec, request.serving, gpu_platform(request.gpu))
    chosen.engine.check_attention_dp(request.dp_attention)  # as speed: only an engine with attention-DP groups
    notes = list(chosen.notes)
    tokens = request.tokens
    if tokens is None:
        engine_default = chosen.engine.default_tokens(spec, _all_gpu_memory(request, tp * pp * dp))
        if engine_default is None:
            tokens = DEFAULT_TOKENS
            notes.append(f"tokens not given: requests of {DEFAULT_TOKENS:,} tokens assumed")
        else:
            tokens, why = engine_default
            notes.append(f"tokens not given: requests of {tokens:,} tokens, the engine's default: {why}")
    context_limit = _checked_context(spec, request, tokens, notes)
    workload = _fit_workload(spec, request, chosen, tokens, (tp, pp, dp), notes)
    budget, engine, gpu_label = _budget(model, request, chosen.engine, workload, weights, notes)
    batch = request.batch
    if budget.leaves_nothing:  # weights and runtime take it all: an answer, with how many GPUs would do
        result = Fit(budget.kv_bytes, tokens, batch, 0, 0, 0, engine.name)
    else:
        result = run_fit(spec, workload, engine, budget.kv_bytes, context_limit=context_limit)
        result = _at_own_runtime(model, request, chosen.engine, workload, weights, result, notes)
    result = replace(result, batch=batch)
    if context_limit is not None and request.max_model_len is None and result.max_context == context_limit:
        notes.append(
            f"max context is the model's own limit ({spec.max_context_key}), not the budget's: "
            "--no-context-cap searches past it"
        )
    report = FitReport(
        model, result, budget, workload, gpu_label, _merge(spec.notes, notes, result.notes), context_limit,
        engine=engine, dp_attention=request.dp_attention,
    )  # fmt: skip
    if verdict:
        report = replace(report, verdict=_verdict(report, request, weights))
    return report


def _all_gpu_memory(request: _FitRequest, gpus: int) -> int | None:
    """The bytes of every GPU the model runs on, together (an engine's default context may follow
    them); None where a KV budget stands in their place."""
    from kvcalc.gpus import find_gpu

    if request.kv_budget is not None:
        return None
    if request.gpu_memory is not None:
        return request.gpu_memory * gpus
    if request.gpu is not None:
        return find_gpu(request.gpu).runtime_bytes * gpus
    return None


def _at_own_runtime(
    model: Model, request: _FitRequest, engine: Engine, workload: Workload, weights: _WeightsOnce, result: Fit,
    notes: list[str],
) -> Fit:  # fmt: skip
    """The most requests that fit beside the runtime they themselves need. An engine whose runtime
    grows with the requests it serves (llama.cpp's compute buffer holds a KQ mask of every cell)
    has less budget for N requests than for the --batch asked: the answer is the largest N whose
    own budget holds N, so the engine line written for it starts and holds them. A budget that does
    not depend on the requests (given, or vLLM's) leaves the answer as it is."""
    from kvcalc.calc.fit import fit as run_fit

    asked = request.batch
    found = result.max_concurrency
    if request.kv_budget is not None or request.overhead is not None or found <= asked:
        return result
    spec, dp = model.spec, workload.dp

    def held(n: int) -> int:
        # the budget with n requests per replica in flight, and how many of them it holds
        budget, engine_n, _ = _budget(model, replace(request, batch=n * dp), engine, workload, weights, [])
        if budget.leaves_nothing:
            return 0
        return run_fit(spec, workload, engine_n, budget.kv_bytes).max_concurrency

    if held(found) >= found:
        return result
    low, high = asked, found  # held(low) >= low (the budget shown); held(high) < high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if held(middle) >= middle else (low, middle)
    notes.append(f"max requests: {low:,}, not the {found:,} the budget above holds: the runtime grows with the "
                 f"requests served ({engine.name}'s compute buffer), leaving room for {low:,}")  # fmt: skip
    return replace(result, max_concurrency=low, max_concurrency_exact=None)


def _fit_layout(spec: ModelSpec, request: _FitRequest) -> tuple[int, int, int]:
    """(tp, pp, dp), tp from ``gpus`` when not given, each checked against the others."""
    from kvcalc.calc.estimate import check_parallel

    gpus, dp_attention = request.gpus, request.dp_attention
    tp, pp, dp = as_layout(None, tp=request.tp, pp=request.pp, dp=request.dp)
    if tp is None:
        tp = gpus // (pp * dp) if gpus is not None else 1
        if tp < 1:
            raise UsageError(f"gpus {gpus} is fewer than pp {pp} x dp {dp}", param=("gpus", "pp", "dp"))
        if gpus is not None:
            try:  # the tensor-parallel size the user never typed: say where it came from
                check_parallel(spec, tp)
            except UsageError as exc:
                why = str(exc).removeprefix(f"tp {tp} ")
                raise UsageError(f"gpus {gpus} over pp {pp} x dp {dp} is tp {tp}, which {why}",
                                 param=("gpus", "pp", "dp", "tp")) from None  # fmt: skip
    if tp % dp_attention:
        raise UsageError(f"dp_attention {dp_attention} must divide tp {tp}: each attention group is tp / "
                         "dp_attention GPUs", param=("dp_attention", "tp"))  # fmt: skip
    if gpus is not None and gpus != tp * pp * dp:
        raise UsageError(f"gpus {gpus} does not equal tp {tp} x pp {pp} x dp {dp}", param=("gpus", "tp", "pp", "dp"))
    return tp, pp, dp


def _checked_context(spec: ModelSpec, request: _FitRequest, tokens: int, notes: list[str]) -> int | None:
    """The longest request the context answer considers, after refusing requests past
    max_model_len."""
    max_model_len = request.max_model_len
    if max_model_len is not None and tokens > max_model_len:
        raise UsageError(
            f"tokens {tokens:,} is longer than max_model_len {max_model_len:,}: an engine refuses such requests",
            param=("tokens", "max_model_len"),
        )
    context_limit, limit_notes = _context_limit(spec, tokens, max_model_len, request.context_cap)
    notes += limit_notes
    return context_limit


def _fit_workload(
    spec: ModelSpec, request: _FitRequest, chosen: Served, tokens: int, layout: tuple[int, int, int], notes: list[str]
) -> Workload:
    """The workload the answers are about; with attention-DP, one group's."""
    tp, pp, dp = layout
    batch, dp_attention = request.batch, request.dp_attention
    workload = Workload(
        tokens=tokens, batch=batch, kv_dtype=chosen.k_dtype, v_dtype=chosen.v_dtype,
        residual_tokens=chosen.residual_tokens, tp=tp, pp=pp, dp=dp,
        **_images(spec, request.images, request.image_tokens),
    )  # fmt: skip
    if dp_attention > 1:
        # The cache as dp x dp_attention groups of tp / dp_attention GPUs hold it; with fewer
        # requests than groups the busiest GPU holds one, as with one request a group.
        groups = dp * dp_attention
        workload = replace(workload, tp=tp // dp_attention, dp=groups, batch=max(batch, groups))
        notes.append(f"attention-DP: {dp_attention} groups of {tp // dp_attention} GPU(s) within each TP {tp}, each "
                     "caching its own requests (the answers are per GPU of a group)")  # fmt: skip
    return workload


def _budget(
    model: Model, request: _FitRequest, engine: Engine, workload: Workload, weights: _WeightsOnce, notes: list[str]
) -> tuple[Budget, Engine, str | None]:
    """The KV budget per GPU (given, or derived from the GPU's memory less the weights and the
    engine's runtime), the engine with the batch defaults that GPU gives it, and the GPU's label."""
    from kvcalc.calc.fit import Budget, BudgetLine

    options = request.serving.options
    # The knobs only the engine's runtime model reads (vLLM's sampler rows and CUDA graphs).
    runtime_knobs = {"max_num_seqs": options.get("max_num_seqs"), "enforce_eager": options.get("enforce_eager") or None}
    kv_budget, gpu, gpu_memory = request.kv_budget, request.gpu, request.gpu_memory
    if kv_budget is not None:
        if gpu is not None or gpu_memory is not None:
            raise UsageError(
                "kv_budget replaces gpu/gpu_memory: give one or the other", param=("kv_budget", "gpu", "gpu_memory")
            )
        derivation = {"weights": request.weights, "overhead": request.overhead, "utilization": request.share,
                      **runtime_knobs}  # fmt: skip
        unused = [name for name, value in derivation.items() if value is not None]
        if unused:
            raise UsageError(
                f"kv_budget replaces the budget's derivation: {unused[0]} has no effect with it",
                param=("kv_budget", unused[0]),
            )
        return Budget(kv_budget, (BudgetLine("KV cache budget per GPU (--kv-budget)", kv_budget),)), engine, None
    found, gpu_bytes, gpu_label = _gpu_memory(request, engine, notes)
    unused = [name for name, value in runtime_knobs.items() if value is not None]
    if request.overhead is not None and unused:
        raise UsageError(
            f"overhead replaces the runtime's derivation: {unused[0]} has no effect with it",
            param=("overhead", unused[0]),
        )
    budget, engine = _derived_budget(model, request, engine, workload, weights, found, gpu_bytes, notes)
    return budget, engine, gpu_label


def _gpu_memory(request: _FitRequest, engine: Engine, notes: list[str]) -> tuple[GPU | None, int, str]:
    """The GPU preset (None: memory given in bytes), its memory per GPU and its label."""
    from kvcalc.gpus import find_gpu

    gpu, gpu_memory = request.gpu, request.gpu_memory
    if gpu is not None and gpu_memory is not None:
        raise UsageError("give gpu or gpu_memory, not both", param=("gpu", "gpu_memory"))
    if gpu_memory is not None:
        return None, gpu_memory, f"{gpu_memory:,} bytes per GPU"
    if gpu is None:
        raise UsageError("give gpu, gpu_memory or kv_budget", param=("gpu", "gpu_memory", "kv_budget"))
    found = find_gpu(gpu)
    engine.check_gpu(found)
    label = (
        f"{found.name}, {found.runtime_bytes:,} bytes the GPU may wire"
        if found.unified_bytes
        else f"{found.name}, {found.runtime_bytes:,} bytes as the CUDA/ROCm runtime reports them"
    )
    notes.append(f"{found.name} memory: {found.source}")
    return found, found.runtime_bytes, label


def _derived_budget(
    model: Model, request: _FitRequest, engine: Engine, workload: Workload, weights: _WeightsOnce,
    found: GPU | None, gpu_bytes: int, notes: list[str],
) -> tuple[Budget, Engine]:  # fmt: skip
    """The GPU's memory less the weights' share and the engine's runtime."""
    from kvcalc.calc.fit import derive_budget

    if request.weights is None:
        weights_bytes, weights_label, weight_notes = weights(engine)
        notes += weight_notes
    else:
        weights_bytes, weights_label = request.weights, f"--weights {request.weights:,} bytes"
    tp, pp, batch, dp_attention = workload.tp * request.dp_attention, workload.pp, request.batch, request.dp_attention
    k_dtype, v_dtype = workload.kv_dtype, workload.v_dtype
    runtime, engine_now, runtime_notes = _runtime(
        model, engine, gpu_bytes=gpu_bytes, gpu=found, tp=tp, pp=pp, share=request.share, overhead=request.overhead,
        n_ctx=workload.tokens * cdiv_int(batch, workload.dp), n_seq=cdiv_int(batch, workload.dp), k_dtype=k_dtype,
        v_dtype=v_dtype,
    )  # fmt: skip
    notes += runtime_notes
    replicated = _replicated_attention(model, weights_bytes, tp, dp_attention) if dp_attention > 1 else None
    budget = derive_budget(
        gpu_bytes=gpu_bytes, weights_bytes=weights_bytes, shards=tp * pp, weights_label=weights_label,
        runtime=runtime, replicated=replicated,
    )  # fmt: skip
    return budget, engine_now


def _verdict(report: FitReport, request: _FitRequest, weights: _WeightsOnce) -> Verdict:
    """Fits or not, the headroom, and when it does not fit what to change, in this order: a smaller
    KV format (fp8, or the engine's own), the engine's quantized weights, twice the tensor
    parallelism (where more GPUs stay in one machine), a shorter context, fewer sequences, each
    with its figure."""
    from kvcalc.calc.fit import Remedy, Verdict, workload_bytes

    result, w, engine = report.result, report.workload, report.engine
    assert engine is not None
    spec = report.model.spec

    def headroom(change: str, **changed: Any) -> Remedy | None:
        try:
            alt = _fit(report.model, replace(request, **changed), weights, verdict=False)
        except UsageError:
            return None  # the engine cannot do it (fp8 KV on this engine, a tp that splits no heads)
        assert alt.engine is not None
        if alt.budget.leaves_nothing:
            return Remedy(change, False, f"the weights still leave nothing ({alt.budget.kv_bytes:,} B per GPU)")
        alt_needed = workload_bytes(alt.model.spec, alt.workload, alt.engine, alt.result)
        room = alt.result.kv_budget - alt_needed
        return Remedy(change, room >= 0, f"headroom {room:,} B per GPU")

    if report.budget.leaves_nothing:
        least = report.budget.gpus_needed
        reason = f"the weights and the runtime leave nothing for the KV cache ({result.kv_budget:,} B per GPU)" + (
            "; no count of such GPUs does: the runtime alone fills one" if least is None else ""
        )
        tried: list[Remedy] = []
        quantized = _quantized_weights(report)
        smaller = headroom(quantized[0], weights=quantized[1]) if quantized is not None else None
        if smaller is not None:
            tried.append(smaller)
        # The fewest GPUs that hold the request too: from the fewest that leave anything, upward,
        # eight counts at most (a count that splits no heads is skipped); where more GPUs stay in
        # one machine, and smaller weights do not do.
        more = least is not None and _tensor_parallel_here(engine, request.gpu)
        more = more and not (smaller is not None and smaller.fits)
        first = max(cdiv_int(least, w.pp), w.tp + 1) if least is not None else 0  # least counts tp x pp
        for tp in range(first, first + 8 if more else first):
            gpus = tp * w.pp * w.dp
            remedy = headroom(f"{gpus} GPUs (--tp {tp})", tp=tp, gpus=None)
            if remedy is not None:
                tried.append(remedy)
                if remedy.fits:
                    break
        remedies_found = tuple(r for r in tried if r.fits) or tuple(tried[-1:])
        # What the workload needs stays the estimate's figure (it was 0, a headroom of the budget alone).
        needed = workload_bytes(spec, w, engine, result)
        return Verdict(False, needed, result.kv_budget, remedies_found, reason)
    needed = workload_bytes(spec, w, engine, result)
    if result.plan is not None and (refused := result.plan.refused_because) is not None:
        # The engine would not start: no change of the workload inside the same budget helps.
        return Verdict(False, needed, result.kv_budget, (), refused)
    limit = report.context_limit
    if limit is not None and w.tokens > limit and request.max_model_len is None:
        reason = (
            f"requests of {w.tokens:,} tokens are past the model's context limit ({spec.max_context_key}): "
            "engines refuse them (--no-context-cap to size them anyway)"
        )
        fits_memory = needed <= result.kv_budget
        memory = Remedy("past the limit anyway (--no-context-cap)", fits_memory,
                        f"headroom {result.kv_budget - needed:,} B per GPU")  # fmt: skip
        shorter = Remedy("shorter context (--tokens)", True, f"up to {min(limit, result.max_context or limit):,} "
                         f"tokens at batch {result.batch:,}")  # fmt: skip
        return Verdict(False, needed, result.kv_budget, (shorter, memory), reason)
    if needed <= result.kv_budget:
        return Verdict(True, needed, result.kv_budget)

    remedies: list[Remedy | None] = []
    kv = w.kv_dtype or report.model.spec.dtype
    own = engine.kv_remedy()
    if own is not None:
        what, knobs = own
        own_kv = replace(request.serving, options={**request.serving.options, **knobs})
        remedies.append(headroom(what, serving=own_kv))
    elif kv is None or (kv.block == 1 and kv.bits > 8):
        fp8 = replace(request.serving, kv_dtype="fp8", k_dtype=None, v_dtype=None)
        remedies.append(headroom("fp8 KV cache (--kv-dtype fp8)", serving=fp8))
    quantized = _quantized_weights(report)
    if quantized is not None:
        what, size = quantized
        remedies.append(headroom(what, weights=size))
    if _tensor_parallel_here(engine, request.gpu):
        remedies.append(headroom(f"tp {w.tp * 2} (--tp {w.tp * 2}, twice the GPUs)", tp=w.tp * 2, gpus=None))
    if result.max_context:
        remedies.append(
            Remedy("shorter context (--tokens)", True, f"up to {result.max_context:,} tokens at batch {result.batch:,}")
        )
    if result.max_concurrency:
        remedies.append(
            Remedy("fewer sequences (--batch)", True, f"up to {result.max_concurrency:,} at {w.tokens:,} tokens each")
        )
    return Verdict(False, needed, result.kv_budget, tuple(r for r in remedies if r is not None))


def _tensor_parallel_here(engine: Engine, gpu: str | None) -> bool:
    """Whether twice the tensor parallelism is a change on the same machine: the engine splits a
    model over the GPUs of one machine, and the GPU preset is not the only one in its machine (a
    Mac)."""
    from kvcalc.gpus import find_gpu

    return engine.tensor_parallel_in_one_machine and (gpu is None or not find_gpu(gpu).one_per_machine)


def _quantized_weights(report: FitReport) -> tuple[str, int] | None:
    """The engine's quantized weights format (Engine.weights_remedy) as a remedy: what to tell
    the user and the weights' bytes in it (the model's parameters x its bits a parameter,
    rounded up), when that is smaller than the weights counted; None where the engine offers
    none, the parameters are not known, or the budget was given whole (--kv-budget)."""
    engine = report.engine
    offered = engine.weights_remedy() if engine is not None else None
    weights = next((line.bytes for line in report.budget.lines if line.label == "- weights"), None)
    if offered is None or weights is None:
        return None
    what, bits = offered
    parameters = _parameters(report.model)
    if parameters is None:
        return None
    size = -(-parameters * bits.numerator // (8 * bits.denominator))
    shards = report.workload.tp * report.workload.pp
    if -(-size // shards) >= weights:
        return None  # the checkpoint is that small already
    return f"{what}, {parameters:,} parameters x {float(bits):g} bits (--weights {size:,})", size


def _parameters(model: Model) -> int | None:
    """The model's parameters: its preset's count, else counted from the config's widths."""
    from kvcalc.calc.params import count_parameters
    from kvcalc.inputs.hf.configs import text_config
    from kvcalc.inputs.hf.dims import read_dims

    source = model.source
    if source is None:
        return None
    w = source.preset.weights if source.preset is not None else None
    if w is not None and w.parameters:
        # Tensors the engine does not load (an MTP module) less, at the checkpoint's mean bytes
        # per parameter (as speed counts them).
        return w.parameters - w.unloaded_bytes * w.parameters // w.bytes
    raw = source.config if isinstance(source.config, dict) else None
    dims = read_dims(raw) if raw is not None else None
    if raw is None or dims is None:
        return None
    text, _ = text_config(raw)
    tied = bool(text.get("tie_word_embeddings", raw.get("tie_word_embeddings")))
    counted, _ = count_parameters(dims, text, frozenset(c.kind for c in model.spec.caches),
                                  model_type=model.spec.model_type, tied=tied)  # fmt: skip
    return counted.total if counted is not None else None


def cdiv_int(a: int, b: int) -> int:
    return -(-a // b)


def _context_limit(
    spec: ModelSpec, tokens: int, max_model_len: int | None, context_cap: bool
) -> tuple[int | None, list[str]]:
    """The longest request fit considers: max_model_len when given, else the model's own limit
    (what vLLM takes as its default max_model_len), else none."""
    notes: list[str] = []
    limit = spec.max_context
    if max_model_len is not None and not context_cap:
        raise UsageError(
            "context_cap changes nothing beside max_model_len: the context stops there",
            param=("context_cap", "max_model_len"),
        )
    if max_model_len is None and limit is None and not context_cap:
        raise UsageError(
            f"context_cap changes nothing: {spec.name}'s config gives no context limit to cap at",
            param="context_cap",
        )
    if max_model_len is not None:
        if limit is not None and max_model_len > limit:
            notes.append(
                f"max_model_len {max_model_len:,} is past the model's own limit ({spec.max_context_key}): vLLM "
                "refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, and positions past it were never trained"
            )
        return max_model_len, notes
    if limit is None:
        notes.append("the config gives no context limit (max_position_embeddings or kin): context is not capped")
        return None, notes
    if not context_cap:
        notes.append(f"context not capped at the model's limit ({spec.max_context_key}): --no-context-cap")
        return None, notes
    return limit, notes


def _replicated_attention(model: Model, weights_bytes: int, tp: int, dp_attention: int) -> tuple[int, str]:
    """Attention-DP: the attention weights (counted from the config's widths, at the checkpoint's
    mean bytes per parameter) each GPU holds beyond an even share of tp: (dp_attention - 1) / tp
    of them, since a group of tp / dp_attention GPUs splits them."""
    from kvcalc.calc.params import count_parameters
    from kvcalc.inputs.hf.configs import text_config
    from kvcalc.inputs.hf.dims import read_dims

    source = model.source
    raw = source.config if source is not None and isinstance(source.config, dict) else None
    dims = read_dims(raw) if raw is not None else None
    if raw is None or dims is None:
        raise UsageError(f"{model.name}: attention-DP needs the attention widths from the config", param="dp_attention")
    text, _ = text_config(raw)
    tied = bool(text.get("tie_word_embeddings", raw.get("tie_word_embeddings")))
    counted, why = count_parameters(dims, text, frozenset(c.kind for c in model.spec.caches),
                                    model_type=model.spec.model_type, tied=tied)  # fmt: skip
    if counted is None:
        raise UsageError(f"{model.name}: attention-DP needs the attention weights' size, and {why}",
                         param="dp_attention")  # fmt: skip
    preset = source.preset if source is not None else None
    parameters = (preset.parameters if preset is not None else None) or counted.total
    attention = counted.attention * weights_bytes // parameters
    extra = attention * (dp_attention - 1) // tp
    return extra, (f"{counted.attention:,} attention parameters x {weights_bytes:,} B / {parameters:,} = "
                   f"{attention:,} B, x ({dp_attention} - 1) / tp {tp}")  # fmt: skip


def _weights(model: Model, engine: Engine, revision: str | None, on_fetch: OnFetch) -> tuple[int, str, list[str]]:
    """Weights bytes of an opened model as the engine holds them (beside its config file, from the
    Hub, or its preset), with notes: a preset's own remark, and vLLM's or SGLang's 16-bit load of
    a float32 checkpoint."""
    return _held_weights(model, engine, *_read_weights(model, revision, on_fetch))


def _read_weights(model: Model, revision: str | None, on_fetch: OnFetch) -> tuple[int, str, list[str]]:
    """The checkpoint's bytes as stored (beside its config file, from the Hub, or its preset),
    where the figure came from, and a preset's own remarks."""
    from kvcalc.inputs.weights import weights_bytes

    source = model.source
    if source is None:
        raise UsageError("a model given by hand has no weights to read: give weights", param="weights")
    where = source.preset.name if source.preset is not None else source.label
    if source.kind == "file" and not source.is_gguf:
        where = str(Path(source.label).parent)  # a config.json: the weights lie beside it
    at = revision if revision is not None else source.revision  # a URL's revision: the config's own
    size, label = weights_bytes(where, spec_dtype=model.spec.dtype, revision=at, on_fetch=on_fetch)
    notes: list[str] = []
    preset_weights = source.preset.weights if source.preset is not None else None
    if preset_weights is not None:
        notes.append(f"weights: {preset_weights.source}")
        if preset_weights.note:
            notes.append(f"weights: {preset_weights.note}")
    return size, label, notes


def _held_weights(
    model: Model, engine: Engine, size: int, label: str, read_notes: list[str]
) -> tuple[int, str, list[str]]:
    """The checkpoint's bytes as the engine holds them: vLLM's or SGLang's 16-bit load of a
    float32 checkpoint (Engine.weights_dtype), said in a note."""
    notes = list(read_notes)
    dtype = model.spec.dtype
    held = engine.weights_dtype(dtype, model.spec.model_type)
    gguf = model.source is not None and model.source.is_gguf
    if dtype is not None and held is not None and held.bits < dtype.bits and not gguf:
        # The engine's one decision (Engine.weights_dtype): vLLM and SGLang load a float32
        # checkpoint in 16 bits, a converted GGUF stores it in bf16; every tensor at that size.
        size = size * held.bits // dtype.bits
        label += f", held in {held.name}"
        notes.append(f"{engine.name} holds this {dtype.name} checkpoint in {held.name}: weights scaled to "
                     f"{held.bits} bits")  # fmt: skip
    elif dtype is not None and dtype.bits > 16 and held == dtype and not gguf:
        notes.append(f"{engine.name} holds this {dtype.name} checkpoint as stored; vLLM, SGLang and llama.cpp "
                     "hold it in 16 bits (--engine to choose)")  # fmt: skip
    return size, label, notes


def _runtime(
    model: Model,
    engine: Engine,
    *,
    gpu_bytes: int,
    gpu: GPU | None,
    tp: int,
    pp: int,
    share: Fraction | None,
    overhead: int | None,
    n_ctx: int = 4096,
    n_seq: int = 1,
    k_dtype: DType | None = None,
    v_dtype: DType | None = None,
) -> tuple[Runtime, Engine, list[str]]:
    """The engine's share of each GPU and what its runtime takes from it (the engine's runtime
    model), the engine with the batch defaults that GPU gives it, and notes. ``overhead`` replaces
    the model."""
    from kvcalc.calc.runtime import RuntimeRequest, given_runtime
    from kvcalc.inputs.hf.dims import read_dims

    source = model.source
    raw = source.config if source is not None and isinstance(source.config, dict) else {}
    dtype = model.spec.dtype
    request = RuntimeRequest(
        gpu_bytes=gpu_bytes, gpu=gpu, tp=tp, pp=pp, share=share,
        dims=read_dims(source.config) if source is not None else None,
        dtype_bytes=2 if dtype is None or dtype.name == "fp32" else max(1, dtype.bits // 8),
        multimodal=any(key in raw for key in ("vision_config", "audio_config", "vision_tower")),
        recurrent=any(c.is_state for c in model.spec.caches), n_ctx=n_ctx, n_seq=n_seq,
        quantized_kv=any(d is not None and d.bits < 16 for d in (k_dtype, v_dtype)),
    )  # fmt: skip
    engine, notes = engine.for_gpu(request)
    if overhead is not None:
        default = share if share is not None else engine.default_share
        runtime = given_runtime(overhead, engine.name, default, f"x {engine.share_name} {float(default):g}")
        return runtime, engine, notes
    runtime, runtime_notes = engine.runtime(request)
    return runtime, engine, [*notes, *runtime_notes]
