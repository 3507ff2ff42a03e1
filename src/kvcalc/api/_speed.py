"""speed: prefill and decode bounds in time."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvcalc.calc.estimate import Plan, Workload, compile_plan
from kvcalc.dtypes import DType
from kvcalc.errors import SourceError, UsageError
from kvcalc.spec import ModelSpec

if TYPE_CHECKING:  # the heavier modules load only when asked for (fractions alone costs ~3 ms)
    from fractions import Fraction

    from kvcalc.calc.speed import Speed
    from kvcalc.engines import Engine

from kvcalc.api._fit import _weights
from kvcalc.api._models import DTypeLike, Model, OnFetch, open_model
from kvcalc.api._offload import _gguf_headers
from kvcalc.api._serving import Serving, _merge, _past_limit, resolve_serving

COMPUTE_DTYPES = ("bf16", "fp16", "fp8", "fp4", "int8")
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


def speed(
    model: str | ModelSpec | Model,
    *,
    prompt: int,
    output: int,
    batch: int = 1,
    gpu: str | None = None,
    tp: int = 1,
    bandwidth: int | None = None,
    flops: int | None = None,
    compute_dtype: str | None = None,
    bandwidth_efficiency: float | None = None,
    flops_efficiency: float | None = None,
    engine: str | Engine = "theoretical",
    kv_dtype: DTypeLike = None,
    weights: int | None = None,
    sweep: Sequence[int] | None = None,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
) -> SpeedReport:
    """Lower bounds on time to first token and time per output token for ``batch`` sequences of a
    ``prompt``-token prompt and ``output`` generated tokens, on a ``gpu`` preset (or ``bandwidth``
    bytes/s and ``flops`` FLOP/s per GPU) with ``tp``-way tensor parallelism (kvcalc.calc.speed).
    ``bandwidth_efficiency`` / ``flops_efficiency`` in (0, 1] scale the peaks to turn the bounds into
    estimates. ``sweep``: the batch sizes of the throughput table (None: powers of two to 256)."""
    from fractions import Fraction
    from functools import lru_cache

    from kvcalc.calc import speed as core
    from kvcalc.gpus import find_gpu
    from kvcalc.inputs.hf.configs import text_config
    from kvcalc.inputs.hf.dims import read_dims
    from kvcalc.spec import Kind

    for param, value in (("prompt", prompt), ("output", output), ("batch", batch), ("tp", tp)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"{param} must be a positive whole number, got {value!r}", param=param)
    if weights is not None and (isinstance(weights, bool) or weights <= 0):
        raise UsageError(f"weights must be a positive size in bytes, got {weights}", param="weights")
    if compute_dtype is not None and compute_dtype not in COMPUTE_DTYPES:
        raise UsageError(f"compute dtype must be one of {', '.join(COMPUTE_DTYPES)}, got {compute_dtype!r}",
                         param="compute_dtype")  # fmt: skip
    efficiency: dict[str, Fraction] = {}
    for param, given in (("bandwidth_efficiency", bandwidth_efficiency), ("flops_efficiency", flops_efficiency)):
        if given is not None and (isinstance(given, bool) or not isinstance(given, int | float | Fraction)
                                  or (isinstance(given, float) and not math.isfinite(given))):  # fmt: skip
            raise UsageError(f"{param} must be in (0, 1], got {given}", param=param)
        factor = Fraction(1) if given is None else Fraction(str(given)) if isinstance(given, float) else Fraction(given)
        if not 0 < factor <= 1:
            raise UsageError(f"{param} must be in (0, 1], got {given}", param=param)
        efficiency[param] = factor
    notes: list[str] = []
    peaks = None
    label = "given peaks"
    if gpu is not None:
        found = find_gpu(gpu)
        peaks, label = found.peaks, found.name
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
    for param, rate in (("bandwidth", bandwidth), ("flops", flops)):
        if rate is not None and (isinstance(rate, bool) or rate <= 0):
            raise UsageError(f"{param} must be positive, got {rate}", param=param)

    opened = open_model(model, revision=revision, on_fetch=on_fetch, strict=strict)
    spec = opened.spec
    source = opened.source
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
    chosen = resolve_serving(spec, Serving(engine, kv_dtype=kv_dtype))
    headers = _gguf_headers(opened, on_fetch)  # a GGUF's weights are read as the file stores them
    if weights is None and headers is not None:  # the headers in hand: no second read
        from kvcalc.inputs.gguf import loaded_tensor_bytes

        total, weights_label = loaded_tensor_bytes(headers, spec.name), "GGUF tensor infos"
        if total <= 0:
            raise SourceError(f"{spec.name} holds no tensors: give --weights SIZE")
    elif weights is None:
        total, weights_label, weight_notes = _weights(opened, chosen.engine, revision, on_fetch)
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
    held = spec.dtype if headers is not None else chosen.engine.weights_dtype(spec.dtype, spec.model_type)
    dtype_bytes = Fraction(held.bits, 8) if held is not None and held.bits >= 8 else Fraction(2)
    tied = text.get("tie_word_embeddings", raw.get("tie_word_embeddings"))
    if tied is None:
        notes.append("the config does not say whether the head is tied to the embeddings: taken as untied (the "
                     "input embedding is read by rows only; a lower bound either way)")  # fmt: skip
    split = core.split_weights(dims, text, total_bytes=total, parameters=parameters, bytes_per_param=dtype_bytes,
                               tied=bool(tied), stored=stored)  # fmt: skip
    if compute_dtype is None:
        fmt = preset.weights.format if preset is not None and preset.weights is not None and weights is None else ""
        compute_dtype, why = _compute_dtype(fmt, headers is not None and spec.dtype is None, split, peaks)
        notes.append(f"compute dtype {compute_dtype}: {why} (--compute-dtype to choose)")
    if flops is None:
        assert peaks is not None
        peak = peaks.flops(compute_dtype)
        if peak is None:
            raise UsageError(f"{label} has no dense {compute_dtype} tensor peak: give flops or another compute dtype",
                             param="flops")  # fmt: skip
        flops = peak
    hw = core.Hardware(label, bandwidth, flops, compute_dtype, efficiency["bandwidth_efficiency"],
                       efficiency["flops_efficiency"])  # fmt: skip
    if not hw.is_bound:
        notes.append(
            f"efficiency factors applied (bandwidth x{float(hw.bandwidth_efficiency):g}, FLOPs "
            f"x{float(hw.flops_efficiency):g}): these are estimates, not bounds"
        )
    if stored is None and split.experts:
        notes.append("the experts' bytes are taken at the checkpoint's mean bytes per parameter (a GGUF gives them "
                     "exactly); where experts are stored smaller than the rest, the dense bytes err low")  # fmt: skip
    notes += split.notes
    if split.experts:
        notes.append(
            f"MoE: {split.top_k} of {split.experts} experts per token; a step reads the experts its tokens are "
            "routed to, taken as uniform, independent routing (more skewed routing reads fewer)"
        )
    index_topk = text.get("index_topk")
    sparse = any(c.picks_attended_tokens for c in spec.caches)
    shape = core.AttentionShape(query_heads, int(text.get("index_n_heads", 0) or 0),
                                index_topk if isinstance(index_topk, int) and sparse else None)  # fmt: skip
    if sparse and shape.index_topk is None:
        raise UsageError(f"{spec.name}: sparse attention without index_topk in the config: its reads are not known",
                         param="model")  # fmt: skip
    if sparse:
        notes.append(f"sparse attention: each query reads the latent of at most index_topk {shape.index_topk:,} "
                     "tokens, and the indexer's keys of all of them")  # fmt: skip

    @lru_cache(maxsize=1)
    def plan() -> Plan:  # compiled at the first step's read, where an estimate used to be made
        return compile_plan(spec, Workload(tokens=1, kv_dtype=chosen.k_dtype, v_dtype=chosen.v_dtype, tp=tp),
                            chosen.engine)  # fmt: skip

    @lru_cache(maxsize=4096)
    def kv(context: int, seqs: int) -> int:
        est = plan().at(context, seqs)
        read = 0
        for g in est.groups:
            share = g.bytes // tp
            if sparse and g.kind is Kind.MLA and shape.index_topk is not None and g.tokens_kept > shape.index_topk:
                share = share * shape.index_topk // g.tokens_kept
            read += share
        return read

    limit = max(spec.max_context or 0, prompt + output)
    notes += _past_limit(spec, prompt + output)
    gpu_memory = find_gpu(gpu).runtime_bytes if gpu is not None else None
    if gpu_memory is not None:
        notes.append(f"'fit' in the sweep: weights / TP + the cache at prompt + output within the GPU's "
                     f"{gpu_memory:,} bytes, before activations and the engine's reserve (kvcalc fit derives "
                     "those)")  # fmt: skip
    notes.append("not counted: activations, kernel launch gaps, sampling, and TP communication (all-reduce): "
                 "real steps only take longer")  # fmt: skip
    if tp > 1:
        notes.append(f"weights and FLOPs split evenly over the {tp} GPUs; KV per GPU as the engine shards it")
    result = core.speed(
        hw, spec, split, shape, kv, prompt=prompt, output=output, batch=batch, tp=tp,
        sweep=tuple(sorted(set(DEFAULT_SWEEP if sweep is None else sweep) | {batch})),
        memory_per_gpu=gpu_memory, context_limit=limit, notes=(),
    )  # fmt: skip
    asked = next(r for r in result.sweep if r.batch == batch)
    if asked.fits is False:
        notes.insert(0, f"the weights / TP and the cache of batch {batch} do not fit the GPU's {gpu_memory:,} bytes: "
                        "these bounds assume they did (more --tp, a smaller batch or a shorter context)")  # fmt: skip
    if result.decode.sampled < result.decode.steps:
        notes.append(f"the mean TPOT is over {result.decode.sampled} evenly spaced of the {result.decode.steps:,} "
                     "decode steps")  # fmt: skip
    first = plan().at(prompt, batch)
    return SpeedReport(opened, result, chosen.engine.name, first.kv_dtype, weights_label,
                       _merge(spec.notes, chosen.notes, first.notes, notes))  # fmt: skip


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
        return "int8", "llama.cpp runs quantized GGUF matmuls on int8 tensor cores"
    if not fmt and per_param < Fraction(3, 2) and has("fp8"):
        return "fp8", f"{float(per_param):.2f} bytes a parameter: an 8-bit (or smaller) checkpoint"
    return "bf16", "a 16-bit checkpoint"
