"""fit: the budget per GPU, what fits in it, and the verdict."""

from __future__ import annotations

from collections.abc import Mapping
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
    from kvcalc.gpus import GPU

from kvcalc.api._models import DTypeLike, Model, ModelArg, OnFetch, open_model
from kvcalc.api._serving import KnobValue, Layout, Serving, _images, _merge, as_layout, as_serving, resolve_serving


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


def fit(
    model: ModelArg,
    *,
    gpu: str | None = None,
    gpu_memory: int | None = None,
    kv_budget: int | None = None,
    gpus: int | None = None,
    utilization: float | Fraction | None = None,
    weights: int | None = None,
    overhead: int | None = None,
    tokens: int | None = None,
    batch: int = 1,
    kv_dtype: DTypeLike = None,
    k_dtype: DTypeLike = None,
    v_dtype: DTypeLike = None,
    engine: str | Engine | None = None,
    options: Mapping[str, KnobValue] | None = None,
    serving: Serving | None = None,
    tp: int | None = None,
    pp: int = 1,
    dp: int = 1,
    layout: Layout | None = None,
    dp_attention: int = 1,
    max_model_len: int | None = None,
    context_cap: bool = True,
    images: int | None = None,
    image_tokens: int | None = None,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
    verdict: bool = True,
) -> FitReport:
    """How many tokens, concurrent requests of ``tokens`` and how long a context fit on ``gpus``
    GPUs (a ``gpu`` preset or ``gpu_memory`` bytes each, or a ready ``kv_budget`` per GPU).
    ``images`` per request (Llama 3.2 Vision) as in ``estimate``. ``weights`` in bytes (None: read
    from the model's safetensors, the Hub or the preset). ``dp_attention`` groups of tp /
    dp_attention GPUs each attend to their own requests (SGLang's --enable-dp-attention --dp N,
    vLLM's data parallel with expert parallel): each GPU caches only its group's requests, with
    the KV heads over tp / dp_attention GPUs, and holds the attention weights split that many
    ways."""
    # Every value checked first, as the CLI's flags are (kvcalc.checks): bytes are whole and bounded.
    gpu = checks.text(gpu, "gpu")
    gpu_memory = None if gpu_memory is None else checks.size(gpu_memory, "gpu_memory")
    kv_budget = None if kv_budget is None else checks.size(kv_budget, "kv_budget")
    weights = None if weights is None else checks.size(weights, "weights")
    overhead = None if overhead is None else checks.size(overhead, "overhead", minimum=0)
    gpus = checks.optional_count(gpus, "gpus", maximum=checks.MAX_PARALLEL)
    tokens = checks.optional_count(tokens, "tokens")
    batch = checks.count(batch, "batch")
    dp_attention = checks.count(dp_attention, "dp_attention", maximum=checks.MAX_PARALLEL)
    max_model_len = checks.optional_count(max_model_len, "max_model_len")
    checks.flag(context_cap, "context_cap")
    checks.flag(verdict, "verdict")
    checks.flag(strict, "strict")
    call = dict(locals())  # the request as given (checked), to try the remedies of the verdict with
    share = None if utilization is None else checks.share(utilization, "utilization")
    from kvcalc.calc.estimate import check_parallel
    from kvcalc.calc.fit import Budget, BudgetLine, derive_budget
    from kvcalc.calc.fit import fit as run_fit
    from kvcalc.gpus import find_gpu

    opened = open_model(model, revision=revision, on_fetch=on_fetch, strict=strict)
    spec = opened.spec
    asked = as_serving(serving, engine=engine, kv_dtype=kv_dtype, k_dtype=k_dtype, v_dtype=v_dtype, options=options)
    tp, pp, dp = as_layout(layout, tp=tp, pp=pp, dp=dp)
    # The remedies re-ask with one thing changed: from the serving and layout as resolved here.
    call.update(serving=asked, engine=None, kv_dtype=None, k_dtype=None, v_dtype=None, options=None, layout=None,
                tp=tp, pp=pp, dp=dp)  # fmt: skip
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
    chosen = resolve_serving(spec, asked)
    chosen.engine.check_attention_dp(dp_attention)  # as speed: only an engine with attention-DP groups
    notes = list(chosen.notes)
    if tokens is None:
        tokens = DEFAULT_TOKENS
        notes.append(f"tokens not given: requests of {DEFAULT_TOKENS:,} tokens assumed")
    if max_model_len is not None and tokens > max_model_len:
        raise UsageError(
            f"tokens {tokens:,} is longer than max_model_len {max_model_len:,}: an engine refuses such requests",
            param=("tokens", "max_model_len"),
        )
    context_limit, limit_notes = _context_limit(spec, tokens, max_model_len, context_cap)
    notes += limit_notes
    workload = Workload(
        tokens=tokens, batch=batch, kv_dtype=chosen.k_dtype, v_dtype=chosen.v_dtype,
        residual_tokens=chosen.residual_tokens, tp=tp, pp=pp, dp=dp, **_images(spec, images, image_tokens),
    )  # fmt: skip
    if dp_attention > 1:
        # The cache as dp x dp_attention groups of tp / dp_attention GPUs hold it; with fewer
        # requests than groups the busiest GPU holds one, as with one request a group.
        groups = dp * dp_attention
        workload = replace(workload, tp=tp // dp_attention, dp=groups, batch=max(batch, groups))
        notes.append(f"attention-DP: {dp_attention} groups of {tp // dp_attention} GPU(s) within each TP {tp}, each "
                     "caching its own requests (the answers are per GPU of a group)")  # fmt: skip
    gpu_label = None
    # The knobs only the engine's runtime model reads (vLLM's sampler rows and CUDA graphs).
    runtime_knobs = {"max_num_seqs": asked.options.get("max_num_seqs"),
                     "enforce_eager": asked.options.get("enforce_eager") or None}  # fmt: skip
    if kv_budget is not None:
        if gpu is not None or gpu_memory is not None:
            raise UsageError(
                "kv_budget replaces gpu/gpu_memory: give one or the other", param=("kv_budget", "gpu", "gpu_memory")
            )
        derivation = {"weights": weights, "overhead": overhead, "utilization": utilization, **runtime_knobs}
        unused = [name for name, value in derivation.items() if value is not None]
        if unused:
            raise UsageError(
                f"kv_budget replaces the budget's derivation: {unused[0]} has no effect with it",
                param=("kv_budget", unused[0]),
            )
        budget = Budget(kv_budget, (BudgetLine("KV cache budget per GPU (--kv-budget)", kv_budget),))
    else:
        if gpu is not None and gpu_memory is not None:
            raise UsageError("give gpu or gpu_memory, not both", param=("gpu", "gpu_memory"))
        found = None
        if gpu_memory is not None:
            gpu_bytes, gpu_label = gpu_memory, f"{gpu_memory:,} bytes per GPU"
        elif gpu is not None:
            found = find_gpu(gpu)
            chosen.engine.check_gpu(found)
            gpu_bytes = found.runtime_bytes
            gpu_label = (
                f"{found.name}, {found.runtime_bytes:,} bytes the GPU may wire"
                if found.unified_bytes
                else f"{found.name}, {found.runtime_bytes:,} bytes as the CUDA/ROCm runtime reports them"
            )
            notes.append(f"{found.name} memory: {found.source}")
        else:
            raise UsageError("give gpu, gpu_memory or kv_budget", param=("gpu", "gpu_memory", "kv_budget"))
        unused = [name for name, value in runtime_knobs.items() if value is not None]
        if overhead is not None and unused:
            raise UsageError(
                f"overhead replaces the runtime's derivation: {unused[0]} has no effect with it",
                param=("overhead", unused[0]),
            )
        if weights is None:
            weights_bytes, weights_label, weight_notes = _weights(opened, chosen.engine, revision, on_fetch)
            notes += weight_notes
        else:
            weights_bytes, weights_label = weights, f"--weights {weights:,} bytes"
        runtime, engine_now, runtime_notes = _runtime(
            opened, chosen.engine, gpu_bytes=gpu_bytes, gpu=found, tp=tp, pp=pp, share=share, overhead=overhead,
            n_ctx=tokens * cdiv_int(batch, workload.dp), n_seq=cdiv_int(batch, workload.dp), k_dtype=chosen.k_dtype,
            v_dtype=chosen.v_dtype,
        )  # fmt: skip
        chosen = replace(chosen, engine=engine_now)
        notes += runtime_notes
        replicated = _replicated_attention(opened, weights_bytes, tp, dp_attention) if dp_attention > 1 else None
        budget = derive_budget(
            gpu_bytes=gpu_bytes, weights_bytes=weights_bytes, shards=tp * pp, weights_label=weights_label,
            runtime=runtime, replicated=replicated,
        )  # fmt: skip
    if budget.leaves_nothing:  # weights and runtime take it all: an answer, with how many GPUs would do
        from kvcalc.calc.fit import Fit

        result = Fit(budget.kv_bytes, tokens, batch, 0, 0, 0, chosen.engine.name)
    else:
        result = run_fit(spec, workload, chosen.engine, budget.kv_bytes, context_limit=context_limit)
    result = replace(result, batch=batch)
    if context_limit is not None and max_model_len is None and result.max_context == context_limit:
        notes.append(
            f"max context is the model's own limit ({spec.max_context_key}), not the budget's: "
            "--no-context-cap searches past it"
        )
    report = FitReport(
        opened, result, budget, workload, gpu_label, _merge(spec.notes, notes, result.notes), context_limit,
        engine=chosen.engine, dp_attention=dp_attention,
    )  # fmt: skip
    if verdict:
        report = replace(report, verdict=_verdict(report, {**call, "model": opened}))
    return report


def _verdict(report: FitReport, call: dict[str, Any]) -> Verdict:
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
            alt = fit(**{**call, **changed, "verdict": False})
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
        more = least is not None and _tensor_parallel_here(engine, call.get("gpu"))
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
    if result.sglang is not None and result.sglang.refusal is not None:
        # SGLang would not start: no change of the workload inside the same budget helps.
        return Verdict(False, needed, result.kv_budget, (), f"SGLang refuses this: {result.sglang.refusal}")
    limit = report.context_limit
    if limit is not None and w.tokens > limit and call.get("max_model_len") is None:
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
        smaller = replace(call["serving"], options={**call["serving"].options, **knobs})
        remedies.append(headroom(what, serving=smaller))
    elif kv is None or (kv.block == 1 and kv.bits > 8):
        fp8 = replace(call["serving"], kv_dtype="fp8", k_dtype=None, v_dtype=None)
        remedies.append(headroom("fp8 KV cache (--kv-dtype fp8)", serving=fp8))
    quantized = _quantized_weights(report)
    if quantized is not None:
        what, weights = quantized
        remedies.append(headroom(what, weights=weights))
    if _tensor_parallel_here(engine, call.get("gpu")):
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
    dtype = model.spec.dtype
    held = engine.weights_dtype(dtype, model.spec.model_type)
    if dtype is not None and held is not None and held.bits < dtype.bits and not source.is_gguf:
        # The engine's one decision (Engine.weights_dtype): vLLM and SGLang load a float32
        # checkpoint in 16 bits, a converted GGUF stores it in bf16; every tensor at that size.
        size = size * held.bits // dtype.bits
        label += f", held in {held.name}"
        notes.append(f"{engine.name} holds this {dtype.name} checkpoint in {held.name}: weights scaled to "
                     f"{held.bits} bits")  # fmt: skip
    elif dtype is not None and dtype.bits > 16 and held == dtype and not source.is_gguf:
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
