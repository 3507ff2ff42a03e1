"""speed: prefill and decode bounds in time."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kvcalc import checks
from kvcalc.calc.estimate import Plan, Workload, compile_plan
from kvcalc.dtypes import DType
from kvcalc.errors import SourceError, UsageError
from kvcalc.spec import ModelSpec

if TYPE_CHECKING:  # the heavier modules load only when asked for (fractions alone costs ~3 ms)
    from fractions import Fraction

    from kvcalc.calc.simulate import StepShape
    from kvcalc.calc.speed import Speed
    from kvcalc.calc.step_cost import Layout, SpeedEstimate
    from kvcalc.engines import Engine

from kvcalc.api._fit import _weights
from kvcalc.api._models import DTypeLike, Model, ModelArg, OnFetch, open_model
from kvcalc.api._offload import _gguf_headers
from kvcalc.api._serving import Layout as ServingLayout
from kvcalc.api._serving import (
    Served,
    Serving,
    _merge,
    _past_limit,
    as_layout,
    as_serving,
    gpu_platform,
    layout_extras,
    refuse_idle_knobs,
    resolve_serving,
)

COMPUTE_DTYPES = ("bf16", "fp16", "fp8", "fp4", "int8")
# --weights-format: what the estimate's matmuls run at follows from it (Engine.matmul_dtype).
WEIGHT_FORMATS = ("bf16", "fp16", "fp32", "fp8", "int8", "int4", "mxfp4", "nvfp4", "gguf")
DEFAULT_SWEEP = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class SpeedReport:
    """``kvcalc speed``: the model, the workload's KV dtype and engine, and kvcalc.calc.speed's answer."""

    model: Model
    result: Speed
    engine: str
    kv_dtype: DType
    weights_label: str
    notes: tuple[str, ...] = ()
    estimate: SpeedEstimate | None = None
    layout: Layout | None = None


@dataclass(frozen=True)
class Compute:
    """How the GPU runs a step where its preset does not say, or is overridden: peaks given by
    hand (``bandwidth`` bytes/s and ``flops`` FLOP/s per GPU), the matmuls' ``compute_dtype``, the
    checkpoint's ``weights_format`` as the kernels see it (None: from the config or the bytes per
    parameter), ``bandwidth_efficiency`` / ``flops_efficiency`` in (0, 1] in place of the fitted
    memory and GEMM shares of peak, ``eager``: decode without CUDA graphs, and the checkpoint's
    ``weights`` in bytes (None: read as fit reads them)."""

    bandwidth: int | None = None
    flops: int | None = None
    compute_dtype: str | None = None
    weights_format: str | None = None
    bandwidth_efficiency: float | None = None
    flops_efficiency: float | None = None
    eager: bool = False
    weights: int | None = None


def speed(
    model: ModelArg,
    *,
    prompt: int,
    output: int,
    batch: int = 1,
    gpu: str | None = None,
    tp: int = 1,
    layout: ServingLayout | None = None,
    engine: str | Engine | None = None,
    kv_dtype: DTypeLike = None,
    serving: Serving | None = None,
    compute: Compute | None = None,
    sweep: Sequence[int] | None = None,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
) -> SpeedReport:
    """Lower bounds on time to first token and time per output token for ``batch`` sequences of a
    ``prompt``-token prompt and ``output`` generated tokens, on a ``gpu`` preset (or the peaks
    ``compute`` gives) with ``tp``-way tensor parallelism (kvcalc.calc.speed). Beside each bound,
    an estimate with its range (kvcalc.calc.step_cost): the kernels at the shares of peak a fitted
    table gives, TP / PP / EP / attention-DP communication over the GPU's link, the engine's own
    per-step time and MoE routing. A ``layout`` in place of tp: ``pp`` pipeline stages, ``ep``
    expert-parallel GPUs of the tp, ``dp_attention`` groups running attention on their own
    requests (SGLang's --enable-dp-attention --dp N; vLLM's --data-parallel-size N with
    --enable-expert-parallel over N x tp/N GPUs). ``prompt`` 0: decode only. ``serving``: the
    engine with its options (the knobs that shape the cache it reads) and the K/V formats, in place
    of engine and kv_dtype. ``sweep``: the batch sizes of the throughput table (None: powers of two
    to 256)."""
    from kvcalc.calc.step_cost import Layout

    checks.instance(compute, "compute", Compute, "a kvcalc.Compute or None")
    given = compute if compute is not None else Compute()
    bandwidth, flops, compute_dtype, weights_format, eager, weights = (
        given.bandwidth, given.flops, given.compute_dtype, given.weights_format, given.eager, given.weights,
    )  # fmt: skip
    wanted = as_serving(serving, engine=engine, kv_dtype=kv_dtype)
    if wanted.residual_tokens is not None:
        raise UsageError("speed does not model residual_tokens (a quantized cache's newest tokens kept "
                         "unquantized): estimate and fit do", param="residual_tokens")  # fmt: skip
    got_tp, pp, _ = as_layout(layout, tp=tp, pp=1, dp=1, takes=("ep", "dp_attention"), what="speed")
    if layout is not None and layout.dp != 1:
        raise UsageError("dp changes nothing in speed: the bounds are one replica's", param="dp")
    ep, dp_attention = layout_extras(layout)
    tp = got_tp if got_tp is not None else 1
    prompt = checks.count(prompt, "prompt", minimum=0)
    output = checks.count(output, "output")
    batch = checks.count(batch, "batch")
    bandwidth = None if bandwidth is None else checks.rate(bandwidth, "bandwidth")
    flops = None if flops is None else checks.rate(flops, "flops")
    weights = None if weights is None else checks.size(weights, "weights")
    sweep = _checked_sweep(sweep)
    gpu = checks.text(gpu, "gpu")
    checks.flag(eager, "eager")
    grid = Layout(tp, pp, ep, dp_attention)
    _check_layout(grid)
    _check_formats(weights_format, compute_dtype)
    efficiency = _efficiencies(given.bandwidth_efficiency, given.flops_efficiency)
    notes: list[str] = []
    peaks = _peaks(gpu, bandwidth, flops, notes)
    opened = open_model(model, revision=revision, on_fetch=on_fetch, strict=strict)
    config = _config(opened, pp)
    chosen = resolve_serving(opened.spec, wanted, gpu_platform(gpu))
    refuse_idle_knobs(opened.spec, chosen.engine, wanted.options)
    if gpu is not None:
        from kvcalc.gpus import find_gpu

        chosen.engine.check_gpu(find_gpu(gpu))
    chosen.engine.check_attention_dp(dp_attention)
    checkpoint = _checkpoint(opened, config, chosen.engine, weights, revision, on_fetch, notes)
    split, counted = _split(opened.spec, config, checkpoint, chosen.engine, notes)
    hw = _hardware(opened.spec, peaks, checkpoint, split, compute_dtype, grid, notes)
    split = _split_notes(opened.spec, split, counted, checkpoint, grid, notes)
    shape, sparse = _attention_shape(opened.spec, config, notes)
    kv = _KvReads(opened.spec, chosen, grid, shape, sparse)
    result = _bounds(opened.spec, hw, split, shape, kv.read, peaks, grid, (prompt, output, batch), sweep, notes)
    bound_given = _Given(peaks.bandwidth, peaks.flops_given, weights_format, compute_dtype, efficiency)
    est, est_notes = _estimate(result, chosen.engine, opened.spec, config, split, peaks.peaks, checkpoint,
                               layout=grid, eager=eager, given=bound_given)  # fmt: skip
    notes += est_notes
    asked = next(r for r in result.sweep if r.batch == batch)
    if asked.fits is False:
        notes.insert(0, f"the weights / TP and the cache of batch {batch} do not fit the GPU's "
                        f"{peaks.gpu_memory:,} bytes: these bounds assume they did (more --tp, a smaller batch or a "
                        "shorter context)")  # fmt: skip
    if result.decode.sampled < result.decode.steps:
        notes.append(f"the mean TPOT is over {result.decode.sampled} evenly spaced of the {result.decode.steps:,} "
                     "decode steps")  # fmt: skip
    first = kv.plan().at(max(prompt, 1), batch)
    merged = _merge(opened.spec.notes, chosen.notes, first.notes, notes)
    return SpeedReport(opened, result, chosen.engine.name, first.kv_dtype, checkpoint.label, merged, est, grid)


def _checked_sweep(sweep: Sequence[int] | None) -> list[int] | None:
    """The batch sizes of the throughput table, each once ([]: the batch alone)."""
    sweep = None if sweep is None else checks.counts(sweep, "sweep", allow_empty=True)
    seen: set[int] = set()
    for size in sweep or ():
        if size in seen:  # merged silently before: compare refuses a length given twice, so does this
            raise UsageError(f"sweep lists {size:,} more than once: each batch size is one row", param="sweep")
        seen.add(size)
    return sweep


def _check_layout(layout: Layout) -> None:
    """ep and dp_attention each divide tp."""
    tp, ep, dp_attention = layout.tp, layout.ep, layout.dp_attention
    if tp % ep:
        raise UsageError(f"ep {ep} must divide tp {tp}: the experts are split over ep of the tp GPUs",
                         param=("ep", "tp"))  # fmt: skip
    if tp % dp_attention:
        raise UsageError(f"dp_attention {dp_attention} must divide tp {tp}: each attention group is tp / "
                         "dp_attention GPUs", param=("dp_attention", "tp"))  # fmt: skip


def _check_formats(weights_format: str | None, compute_dtype: str | None) -> None:
    if weights_format is not None and weights_format not in WEIGHT_FORMATS:
        raise UsageError(f"weights_format must be one of {', '.join(WEIGHT_FORMATS)}, got {weights_format!r}",
                         param="weights_format")  # fmt: skip
    if compute_dtype is not None and compute_dtype not in COMPUTE_DTYPES:
        raise UsageError(f"compute dtype must be one of {', '.join(COMPUTE_DTYPES)}, got {compute_dtype!r}",
                         param="compute_dtype")  # fmt: skip


def _efficiencies(bandwidth_efficiency: float | None, flops_efficiency: float | None) -> dict[str, Fraction]:
    efficiency: dict[str, Fraction] = {}
    for param, given in (("bandwidth_efficiency", bandwidth_efficiency), ("flops_efficiency", flops_efficiency)):
        if given is not None:
            efficiency[param] = checks.share(given, param)
    return efficiency


@dataclass(frozen=True)
class _Peaks:
    """The GPU's peaks (None: given by hand), its label, the bandwidth the bounds read at, the
    FLOP/s given (None: the preset's at the compute dtype) and the GPU's memory."""

    peaks: Any
    label: str
    bandwidth: int
    flops_given: int | None
    gpu_memory: int | None


def _peaks(gpu: str | None, bandwidth: int | None, flops: int | None, notes: list[str]) -> _Peaks:
    from kvcalc.gpus import find_gpu

    peaks = None
    label = "given peaks"
    gpu_memory = None
    if gpu is not None:
        found = find_gpu(gpu)
        peaks, label, gpu_memory = found.peaks, found.name, found.runtime_bytes
        if peaks is None:
            raise UsageError(f"GPU {found.name} has no bandwidth and FLOPs on record: give bandwidth and flops",
                             param="gpu")  # fmt: skip
    if bandwidth is None:
        if peaks is None:
            raise UsageError("give a gpu preset, or bandwidth (bytes/s) and flops (FLOP/s)", param="gpu")
        bandwidth = peaks.bandwidth
        notes.append(f"{label}: {peaks.source}")
    else:
        label += f", bandwidth {bandwidth:,} B/s given"
    if flops is None and peaks is None:
        raise UsageError("give a gpu preset, or bandwidth (bytes/s) and flops (FLOP/s)", param="gpu")
    if flops is not None:
        label += f", {flops:,} FLOP/s given"
    return _Peaks(peaks, label, bandwidth, flops, gpu_memory)


@dataclass(frozen=True)
class _Config:
    """The config's raw mapping, its dims, its text config and the query heads."""

    raw: Mapping[str, Any]
    dims: Any
    text: Mapping[str, Any]
    query_heads: int


def _config(opened: Model, pp: int) -> _Config:
    from kvcalc.inputs.hf.configs import text_config
    from kvcalc.inputs.hf.dims import read_dims
    from kvcalc.spec import Kind

    spec, source = opened.spec, opened.source
    raw = source.config if source is not None and isinstance(source.config, dict) else None
    dims = read_dims(raw) if raw is not None else None
    if raw is None or dims is None:
        raise UsageError(f"{spec.name}: speed needs the model's hidden size, layers and vocabulary from its config",
                         param="model")  # fmt: skip
    text, _ = text_config(raw)
    query_heads = spec.query_heads or dims.heads
    attends = any(not c.is_state and c.kind is not Kind.NONE for c in spec.caches)
    if attends and not query_heads:
        raise UsageError(f"{spec.name}: the config gives no attention head count", param="model")
    if pp > spec.layers:
        raise UsageError(f"pp {pp} is more pipeline stages than the {spec.layers} layers of {spec.name}",
                         param="pp")  # fmt: skip
    return _Config(raw, dims, text, query_heads)


@dataclass(frozen=True)
class _Checkpoint:
    """The weights: their bytes and where the figure came from, a GGUF's headers (None: no GGUF),
    a GGUF's stored split, the parameters (None: not known yet), whether the bytes were given,
    and the preset's format."""

    total: int
    label: str
    headers: Any
    stored: Any
    parameters: int | None
    given: bool
    preset_format: str


def _checkpoint(
    opened: Model, config: _Config, engine: Engine, weights: int | None, revision: str | None, on_fetch: OnFetch,
    notes: list[str],
) -> _Checkpoint:  # fmt: skip
    spec, source = opened.spec, opened.source
    headers = _gguf_headers(opened, on_fetch)  # a GGUF's weights are read as the file stores them
    if weights is None and headers is not None:  # the headers in hand: no second read
        from kvcalc.inputs.gguf import loaded_tensor_bytes

        total, weights_label = loaded_tensor_bytes(headers, spec.name), "GGUF tensor infos"
        if total <= 0:
            raise SourceError(f"{spec.name} holds no tensors: give --weights SIZE")
    elif weights is None:
        total, weights_label, weight_notes = _weights(opened, engine, revision, on_fetch)
        notes += weight_notes
    else:
        total, weights_label = weights, f"given {weights:,} bytes"
    preset = source.preset if source is not None else None
    parameters = preset.parameters if preset is not None else None  # the model's, whatever checkpoint is given
    stored = None
    if headers is not None:
        from kvcalc.inputs.gguf import loaded_parameters, stored_split

        # Every element, whatever its quantization; a file with no tensors (given --weights) has
        # none to count, and the weights' bytes stand for them.
        parameters = loaded_parameters(headers, spec.name) or None
        if weights is None:
            stored = stored_split(headers, spec.name)
    if parameters is not None and preset is not None and preset.weights is not None and preset.weights.unloaded_bytes:
        # Tensors the engine does not load (an MTP module) hold parameters no step runs: take off
        # their share at the checkpoint's mean bytes per parameter.
        w = preset.weights
        parameters -= w.unloaded_bytes * w.parameters // w.bytes
    preset_format = (
        preset.weights.format if preset is not None and preset.weights is not None and weights is None else ""
    )
    return _Checkpoint(total, weights_label, headers, stored, parameters, weights is not None, preset_format)


def _split(
    spec: ModelSpec, config: _Config, checkpoint: _Checkpoint, engine: Engine, notes: list[str]
) -> tuple[Any, tuple[Any, str]]:
    """The weights split as a step reads them (kvcalc.calc.speed.split_weights), and the
    parameters counted from the config's widths (None, with why not)."""
    from fractions import Fraction

    from kvcalc.calc import speed as core
    from kvcalc.calc.params import count_parameters

    dims, text, raw, parameters = config.dims, config.text, config.raw, checkpoint.parameters
    held = spec.dtype if checkpoint.headers is not None else engine.weights_dtype(spec.dtype, spec.model_type)
    dtype_bytes = Fraction(held.bits, 8) if held is not None and held.bits >= 8 else Fraction(2)
    tied = text.get("tie_word_embeddings", raw.get("tie_word_embeddings"))
    if tied is None:
        notes.append("the config does not say whether the head is tied to the embeddings: taken as untied (the "
                     "input embedding is read by rows only; a lower bound either way)")  # fmt: skip
    counted, uncounted = count_parameters(dims, text, frozenset(c.kind for c in spec.caches),
                                          model_type=spec.model_type, tied=bool(tied))  # fmt: skip
    if parameters is None and counted is not None:
        # The config's widths, whatever the checkpoint's bytes: an FP8 checkpoint's given size
        # is not half its parameters.
        parameters = counted.total
        notes.append(f"parameters counted from the config's widths: {parameters:,} (biases left out)")
    elif parameters is None and checkpoint.given:
        notes.append(f"parameters not counted from the config ({uncounted}): taken from the given weights' bytes")
    split = core.split_weights(dims, text, total_bytes=checkpoint.total, parameters=parameters,
                               bytes_per_param=dtype_bytes, tied=bool(tied), stored=checkpoint.stored)  # fmt: skip
    return split, (counted, uncounted)


def _hardware(
    spec: ModelSpec, peaks: _Peaks, checkpoint: _Checkpoint, split: Any, compute_dtype: str | None, layout: Layout,
    notes: list[str],
) -> Any:  # fmt: skip
    """The GPU the bounds run on: its bandwidth and its FLOP/s at the compute dtype (given, or the
    fastest path the checkpoint's format allows)."""
    from kvcalc.calc import speed as core

    if compute_dtype is None:
        quantized_gguf = checkpoint.headers is not None and spec.dtype is None
        compute_dtype, why = _compute_dtype(checkpoint.preset_format, quantized_gguf, split, peaks.peaks)
        notes.append(f"compute dtype {compute_dtype}: {why} (--compute-dtype to choose)")
    flops = peaks.flops_given
    if flops is None:
        assert peaks.peaks is not None
        peak = peaks.peaks.flops(compute_dtype)
        if peak is None:
            raise UsageError(f"{peaks.label} has no dense {compute_dtype} tensor peak: give flops or another compute "
                             "dtype", param="flops")  # fmt: skip
        flops = peak
    if layout.ep > 1 and not split.experts:
        raise UsageError(f"ep {layout.ep}: {spec.name} routes to no experts, so expert parallelism changes nothing",
                         param="ep")  # fmt: skip
    return core.Hardware(peaks.label, peaks.bandwidth, flops, compute_dtype)


def _split_notes(
    spec: ModelSpec, split: Any, counted: tuple[Any, str], checkpoint: _Checkpoint, layout: Layout, notes: list[str]
) -> Any:
    """Attention-DP's replicated attention weights, and what the split assumed, as notes."""
    tp, dp_attention = layout.tp, layout.dp_attention
    if dp_attention > 1:
        if counted[0] is None:
            raise UsageError(f"{spec.name}: attention-DP needs the attention weights' size, and {counted[1]}",
                             param="dp_attention")  # fmt: skip
        # Each attention group of tp / dp_attention GPUs holds the attention weights whole between
        # them: (dp_attention - 1) / tp of them per GPU beyond an even TP share.
        attention_bytes = int(counted[0].attention * split.bytes_per_param)
        split = replace(split, replicated_per_gpu=attention_bytes * (dp_attention - 1) // tp)
        notes.append(f"attention-DP: {dp_attention} groups of {tp // dp_attention} GPU(s) each run attention on "
                     f"their own requests (KV of ceil(batch / {dp_attention}) sequences per GPU); each GPU also holds "
                     f"{split.replicated_per_gpu:,} B of attention weights beyond a TP share")  # fmt: skip
    if checkpoint.stored is None and split.experts:
        notes.append("the experts' bytes are taken at the checkpoint's mean bytes per parameter (a GGUF gives them "
                     "exactly); where experts are stored smaller than the rest, the dense bytes err low")  # fmt: skip
    notes += split.notes
    if split.experts:
        notes.append(
            f"MoE: {split.top_k} of {split.experts} experts per token; a step reads the experts its tokens are "
            "routed to, taken as uniform, independent routing (more skewed routing reads fewer)"
        )
    return split


def _attention_shape(spec: ModelSpec, config: _Config, notes: list[str]) -> tuple[Any, bool]:
    """What attention's FLOPs need beyond the cache (kvcalc.calc.speed.AttentionShape), and
    whether attention is sparse (DSA)."""
    from kvcalc.calc import speed as core

    text = config.text
    index_topk = text.get("index_topk")
    sparse = any(c.picks_attended_tokens for c in spec.caches)
    shape = core.AttentionShape(config.query_heads, int(text.get("index_n_heads", 0) or 0),
                                index_topk if isinstance(index_topk, int) and sparse else None)  # fmt: skip
    if sparse and shape.index_topk is None:
        raise UsageError(f"{spec.name}: sparse attention without index_topk in the config: its reads are not known",
                         param="model")  # fmt: skip
    if sparse:
        notes.append(f"sparse attention: each query reads the latent of at most index_topk {shape.index_topk:,} "
                     "tokens, and the indexer's keys of all of them")  # fmt: skip
    return shape, sparse


class _KvReads:
    """The KV bytes one GPU reads for a step at a context and a count of sequences (the busiest
    attention-DP group's share, heads over tp / dp_attention; a sparse MLA cache read at
    index_topk tokens), from a plan compiled at the first read."""

    def __init__(self, spec: ModelSpec, chosen: Served, layout: Layout, shape: Any, sparse: bool) -> None:
        from functools import lru_cache

        self.spec, self.chosen, self.shape, self.sparse = spec, chosen, shape, sparse
        self.dp_attention = layout.dp_attention
        self.attention_tp = layout.tp // layout.dp_attention
        self.plan = lru_cache(maxsize=1)(self._plan)
        self.read = lru_cache(maxsize=4096)(self._read)

    def _plan(self) -> Plan:  # compiled at the first step's read, where an estimate used to be made
        chosen = self.chosen
        workload = Workload(tokens=1, kv_dtype=chosen.k_dtype, v_dtype=chosen.v_dtype, tp=self.attention_tp)
        return compile_plan(self.spec, workload, chosen.engine)

    def _read(self, context: int, seqs: int) -> int:
        from kvcalc.spec import Kind

        if context == 0:  # decode from an empty context (--prompt 0)
            return 0
        # Attention-DP: the busiest group's share of the sequences, its heads over tp / dp_attention.
        est = self.plan().at(context, -(-seqs // self.dp_attention))
        topk = self.shape.index_topk
        read = 0
        for g in est.groups:
            share = g.bytes // self.attention_tp
            if self.sparse and g.kind is Kind.MLA and topk is not None and g.tokens_kept > topk:
                share = share * topk // g.tokens_kept
            read += share
        return read


def _bounds(
    spec: ModelSpec, hw: Any, split: Any, shape: Any, kv: Any, peaks: _Peaks, layout: Layout,
    lengths: tuple[int, int, int], sweep: list[int] | None, notes: list[str],
) -> Speed:  # fmt: skip
    """The bounds (kvcalc.calc.speed.speed) over the sweep, with what they leave out as notes."""
    from kvcalc.calc import speed as core

    prompt, output, batch = lengths
    tp, pp = layout.tp, layout.pp
    limit = max(spec.max_context or 0, prompt + output)
    notes += _past_limit(spec, prompt + output)
    gpu_memory = peaks.gpu_memory
    if gpu_memory is not None:
        notes.append(f"'fit' in the sweep: weights / TP + the cache at prompt + output within the GPU's "
                     f"{gpu_memory:,} bytes, before activations and the engine's reserve (kvcalc fit derives "
                     "those)")  # fmt: skip
    notes.append("the bounds leave out activations, kernel launch gaps, sampling and communication: real steps "
                 "only take longer; the estimates add them")  # fmt: skip
    if tp > 1:
        notes.append(f"weights and FLOPs split evenly over the {tp} GPUs; KV per GPU as the engine shards it")
    if pp > 1:
        notes.append(f"{pp} pipeline stages run one after another for a step: the bounds are one stage group's; "
                     "the estimate adds the hand-offs (pipelining several batches is not modelled)")  # fmt: skip
    if prompt == 0:
        notes.append("prompt 0: decode only, every output token a decode step from an empty context (no TTFT)")
    return core.speed(
        hw, spec, split, shape, kv, prompt=prompt, output=output, batch=batch, tp=tp,
        sweep=tuple(sorted(set(DEFAULT_SWEEP if sweep is None else sweep) | {batch})),
        # Stages hold a share of the layers each: weights / TP and the cache fit pp GPUs' memory.
        memory_per_gpu=gpu_memory * pp if gpu_memory is not None else None, context_limit=limit, notes=(),
    )  # fmt: skip


@dataclass(frozen=True)
class _Given:
    """What the user gave that the estimate beside the bound reads: the bandwidth, the FLOP/s, the
    weights' format, the compute dtype and the efficiencies replacing the fitted shares."""

    bandwidth: int
    flops: int | None
    weights_format: str | None
    compute_dtype: str | None
    efficiency: dict[str, Fraction]


def _compute_dtype(fmt: str, quantized_gguf: bool, split: Any, peaks: Any) -> tuple[str, str]:
    """The tensor peak that bounds a checkpoint's matmuls: the fastest path an engine may take for
    its weights (a bound must not be too slow). FP8 checkpoints run W8A8 on GPUs with FP8 tensor
    cores; FP4 ones (MXFP4, NVFP4) FP4 where there are FP4 tensor cores, else FP8; llama.cpp's
    quantized GGUF matmuls run on int8 tensor cores (its MMQ kernels); the rest bf16."""
    from fractions import Fraction

    fmt = fmt.lower()
    per_param: Fraction = split.bytes_per_param

    def has(dtype: str) -> bool:  # given flops (no preset): the name is only a label
        return peaks is None or peaks.flops(dtype) is not None

    if "fp4" in fmt and has("fp4"):
        return "fp4", f"the checkpoint stores {fmt}"
    if ("fp8" in fmt or "fp4" in fmt) and has("fp8"):
        return "fp8", f"the checkpoint stores {fmt}"
    if quantized_gguf:
        if peaks is not None and (peaks.flops("int8") or 0) < peaks.bf16:  # Blackwell Ultra cut int8
            return "bf16", "llama.cpp may dequantize GGUF blocks for 16-bit GEMMs, the faster path on this GPU"
        return "int8", "llama.cpp runs quantized GGUF matmuls on int8 tensor cores"
    if not fmt and per_param < Fraction(3, 2) and has("fp8"):
        return "fp8", f"{float(per_param):.2f} bytes a parameter: an 8-bit (or smaller) checkpoint"
    return "bf16", "a 16-bit checkpoint"


def _weight_format(given: str | None, preset_format: str, raw: Mapping[str, Any], gguf: bool,
                   spec_dtype: DType | None, per_param: Fraction) -> tuple[str, str]:  # fmt: skip
    """The checkpoint's format as an engine's kernels see it: given, the preset's, a GGUF's, the
    config's quantization_config, else from its bytes per parameter (said so)."""
    from fractions import Fraction

    if given is not None:
        return given, "--weights-format"
    if gguf:
        return ("gguf", "a quantized GGUF") if spec_dtype is None else ("bf16", "a 16-bit GGUF")
    fmt = preset_format.lower()
    for name in ("mxfp4", "nvfp4", "fp8"):
        if fmt.startswith(name) or (name != "fp8" and name in fmt):
            return name, "the checkpoint stores " + name
    quant = raw.get("quantization_config")
    method = str(quant.get("quant_method", "")).lower() if isinstance(quant, Mapping) else ""
    methods = {"fp8": "fp8", "mxfp4": "mxfp4", "modelopt": "nvfp4", "awq": "int4", "gptq": "int4",
               "bitsandbytes": "int4", "w8a8_int8": "int8"}  # fmt: skip
    if method in methods:
        return methods[method], f"quantization_config.quant_method {method}"
    if fmt:
        return "bf16", f"the checkpoint stores {fmt}"
    if per_param >= Fraction(7, 4):
        return "bf16", f"{float(per_param):.2f} bytes a parameter"
    if per_param >= Fraction(9, 10):
        return "fp8", f"{float(per_param):.2f} bytes a parameter: taken as FP8 (--weights-format to choose)"
    return "int4", f"{float(per_param):.2f} bytes a parameter: taken as 4-bit (--weights-format to choose)"


def _estimate(
    bound: Speed, engine: Engine, spec: ModelSpec, config: _Config, split: Any, peaks: Any, checkpoint: _Checkpoint,
    *, layout: Layout, eager: bool, given: _Given,
) -> tuple[SpeedEstimate, list[str]]:  # fmt: skip
    """The estimate beside the bound (kvcalc.calc.step_cost), with what it took as notes."""
    from dataclasses import replace as change

    from kvcalc.calc import speed as core
    from kvcalc.calc import step_cost as sc

    dims, text, raw, bandwidth, flops_given = config.dims, config.text, config.raw, given.bandwidth, given.flops
    compute_given, efficiency = given.compute_dtype, given.efficiency
    notes: list[str] = []
    overhead = engine.step_overhead()
    if eager and not engine.has_cuda_graphs:
        raise UsageError(f"{engine.name} has no CUDA graphs to turn off: eager changes nothing", param="eager")
    graphs = overhead.cuda_graphs and not eager
    fmt, why = _weight_format(given.weights_format, checkpoint.preset_format, raw, checkpoint.headers is not None,
                              spec.dtype, split.bytes_per_param)  # fmt: skip
    arch = peaks.arch if peaks is not None else ""
    dtype, dtype_why = engine.matmul_dtype(fmt, arch)
    if compute_given is not None:
        dtype, dtype_why = compute_given, "--compute-dtype"
    if flops_given is not None:
        flops = flops16 = flops_given
        notes.append(f"estimate: matmuls at the given {flops_given:,} FLOP/s")
    else:
        flops16 = peaks.flops("bf16")
        flops = peaks.flops(dtype)
        if flops is None:
            notes.append(f"estimate: {peaks.source.split(':')[0]} has no {dtype} tensor path: matmuls at bf16")
            dtype, flops = "bf16", flops16
        notes.append(f"estimate: {engine.name}'s matmuls at {dtype} for {fmt} weights on {arch or 'this GPU'}: "
                     f"{dtype_why} (the format: {why})")  # fmt: skip
    if arch not in sc.COSTS.coverage.archs:
        notes.append(f"estimate: no measurement on {arch or 'these'} GPUs is in the fit: their shares of peak are "
                     "assumed")  # fmt: skip
    link = peaks.link if peaks is not None else None
    device = sc.Device(bandwidth, flops, flops16, dtype, arch,
                       link.kind if link is not None else "", link.bandwidth if link is not None else 0)  # fmt: skip
    if layout.tp * layout.pp > 1:
        if link is None:
            notes.append("estimate: no link known for these peaks: each collective costs a PCIe latency only")
        else:
            notes.append(f"estimate: collectives over {link.label}, {link.bandwidth / 1e9:,.0f} GB/s a direction")
    moe_layers = core.moe_layer_count(text, dims.layers)[0] if split.experts else 0
    expert_share = split.top_k * split.expert_params / split.params_per_token if split.experts else 0.0
    model = sc.Model(dims.layers, dims.hidden, moe_layers, split.top_k, experts=split.experts,
                     expert_flops_share=expert_share, kinds=frozenset(str(c.kind) for c in spec.caches))  # fmt: skip
    beyond = [gap for gap in sc.extrapolated(arch, model, layout) if not gap.endswith(" GPU")]  # said above
    if beyond:
        notes.append(f"estimate: no {' / '.join(beyond)} measurement is in the fit: those terms are extrapolated "
                     "from the measured models and layouts")  # fmt: skip
    costs = sc.COSTS
    if efficiency:
        memory = efficiency.get("bandwidth_efficiency")
        gemm = efficiency.get("flops_efficiency")
        costs = change(
            costs,
            memory={k: float(memory) for k in costs.memory} if memory is not None else costs.memory,
            gemm={k: float(gemm) for k in costs.gemm} if gemm is not None else costs.gemm,
        )
        notes.append("estimate: " + ", ".join(f"{k.replace('_', ' ')} x{float(v):g}" for k, v in efficiency.items())
                     + " given in place of the fitted shares")  # fmt: skip
    tp = layout.tp

    def chunk_weights(tokens: int) -> int:
        return int(split.read_bytes(tokens) // tp + split.replicated_per_gpu)

    result = sc.estimate(bound, sc.Setting(device, model, layout, graphs, chunk_weights), overhead, costs)
    graphs_text = "CUDA graphs" if graphs else "no CUDA graphs"
    notes.append(f"estimate: {engine.name}'s own time a step and a layer, {graphs_text}: {overhead.source}; the "
                 "ranges are the fit's 10th-90th percentile residuals (benchmarks/speed.py)")  # fmt: skip
    return result, notes


def step_coster(
    model: ModelArg, *, gpu: str, engine: str | None = None, kv_dtype: DTypeLike = None, tp: int = 1,
    serving: Serving | None = None, compute: Compute | None = None,
) -> tuple[Callable[[StepShape], float], float, list[str]]:  # fmt: skip
    """speed's estimate of one step of any mix (kvcalc simulate): the weights the step's tokens
    read, the K/V its sequences read (bytes per cached token per GPU, from speed's decode step at a
    1,024-token context), the matmul and attention FLOPs, at the fitted shares of peak, plus the
    engine's own time a step (a prefill or mixed step without CUDA graphs); and the engine's time
    a request takes before its first step (the API server). Also speed's notes."""
    from kvcalc.calc import speed as core
    from kvcalc.calc import step_cost as sc

    probe = 1024
    report = speed(model, prompt=probe, output=2, batch=1, gpu=gpu, tp=tp, engine=engine, kv_dtype=kv_dtype,
                   serving=serving, compute=compute, sweep=(1,))  # fmt: skip
    est = report.estimate
    assert est is not None
    bound, setting, overhead, costs = report.result, est.setting, est.overhead, est.costs
    split, hw = bound.weights, bound.hardware
    kv_per_token = bound.decode.first.kv_bytes / (probe + 1)
    attention_per_pair = bound.prefill.attention_flops * tp / (probe * (probe + 1) // 2)
    # The body for every token; the LM head only for each sequence's last position (no other logits).
    body = split.params_per_token - split.head_params

    def seconds(shape: StepShape) -> float:
        kv_bytes, attention = int(kv_per_token * shape.context), int(attention_per_pair * shape.attended)
        step = core.step(hw, weight_bytes=split.read_bytes(shape.tokens), kv_bytes=kv_bytes,
                         dense_flops=2 * (body * shape.tokens + split.head_params * shape.sequences),
                         attention_flops=attention, tp=tp,
                         extra=split.replicated_per_gpu)  # fmt: skip
        prefill = shape.prefill_tokens > 0
        terms = sc.step_terms(step, setting.device, setting.model, setting.layout, overhead, tokens=shape.tokens,
                              graphs=setting.graphs and not prefill, costs=costs, prefill=prefill)  # fmt: skip
        return max(terms.seconds, step.seconds)

    return seconds, overhead.request_s, list(report.notes)
