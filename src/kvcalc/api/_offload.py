"""llama.cpp offload: layers on GPUs and the CPU (-ngl)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kvcalc import checks
from kvcalc.calc.estimate import Estimate, Workload
from kvcalc.calc.estimate import estimate as estimate_spec
from kvcalc.defaults import DEFAULT_TOKENS
from kvcalc.errors import UsageError

if TYPE_CHECKING:  # the heavier modules load only when asked for (fractions alone costs ~3 ms)
    from kvcalc.calc.offload import Device, LayerWeights
    from kvcalc.engines import Engine
    from kvcalc.inputs.gguf.header import GgufHeader

from kvcalc.api._fit import _weights
from kvcalc.api._models import DTypeLike, Model, ModelArg, OnFetch, open_model
from kvcalc.api._serving import Served, Serving, _merge, as_serving, gpu_platform, resolve_serving


@dataclass(frozen=True)
class OffloadReport:
    """llama.cpp's split of one model over GPUs and the CPU at one context: what each device
    holds, whether every GPU has room, and (``gpu_layers="auto"``) the most layers that fit."""

    model: Model
    devices: tuple[Device, ...]  # GPUs first, then the CPU
    gpu_layers: int
    n_layer: int
    gpu_bytes: int | None
    gpu_label: str | None
    auto: bool
    workload: Workload
    notes: tuple[str, ...] = ()

    @property
    def fits(self) -> bool | None:
        """Whether every GPU holds its share (None: no GPU memory given)."""
        if self.gpu_bytes is None:
            return None
        return all(d.total <= self.gpu_bytes for d in self.devices if d.name != "CPU")


def fit_offload(
    model: ModelArg,
    *,
    gpu_layers: int | str,
    gpu: str | None = None,
    gpu_memory: int | None = None,
    gpus: int = 1,
    tensor_split: Sequence[float] = (),
    kv_offload: bool = True,
    tokens: int | None = None,
    batch: int = 1,
    kv_dtype: DTypeLike = None,
    serving: Serving | None = None,
    weights: int | None = None,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
) -> OffloadReport:
    """llama.cpp with ``gpu_layers`` (``-ngl``: a count, llama.cpp counting the output layer as
    one more, or ``"auto"``: the most that fit every GPU) at a context of ``tokens`` x ``batch``
    cells: weights, KV cache and compute buffer per GPU and on the CPU (kvcalc.calc.offload).
    ``serving``: the engine (llama.cpp when not given, or llama-server), its options (``ubatch``,
    ``n_batch``, ``kv_unified``, ``swa_full``) and its K/V formats; ``kv_dtype`` alone: llama.cpp
    with that cache format."""
    from kvcalc.engines import layer_split_engines

    gpu = checks.text(gpu, "gpu")
    gpu_memory = None if gpu_memory is None else checks.size(gpu_memory, "gpu_memory")
    weights = None if weights is None else checks.size(weights, "weights")
    gpus = checks.count(gpus, "gpus", maximum=checks.MAX_PARALLEL)
    tokens = checks.optional_count(tokens, "tokens")
    batch = checks.count(batch, "batch")
    checks.flag(kv_offload, "kv_offload")
    _check_tensor_split(tensor_split)
    asked = as_serving(serving, kv_dtype=kv_dtype)
    splitting = layer_split_engines()
    if serving is None:
        asked = replace(asked, engine=splitting[0])
    opened = open_model(model, revision=revision, on_fetch=on_fetch, strict=strict)
    spec = opened.spec
    chosen = resolve_serving(spec, asked, gpu_platform(gpu))
    if not chosen.engine.splits_layers:
        raise UsageError(f"gpu_layers applies to {splitting[0]}: use engine "
                         f"{' or '.join(splitting)}", param="gpu_layers")  # fmt: skip
    if tensor_split and (len(tensor_split) != gpus or any(s < 0 for s in tensor_split) or not sum(tensor_split)):
        raise UsageError(
            f"tensor_split needs {gpus} non-negative share(s), one per GPU, not all zero", param="tensor_split"
        )
    auto = _check_gpu_layers(gpu_layers)
    notes = list(chosen.notes)
    gpu_bytes, gpu_label = _gpu_bytes(gpu, gpu_memory)
    if auto and gpu_bytes is None:
        raise UsageError("gpu_layers 'auto' needs the GPU's memory: give gpu or gpu_memory", param="gpu_layers")
    if tokens is None:
        tokens = DEFAULT_TOKENS
        notes.append(f"tokens not given: a context of {DEFAULT_TOKENS:,} tokens per sequence assumed")
    workload = Workload(tokens=tokens, batch=batch, kv_dtype=chosen.k_dtype, v_dtype=chosen.v_dtype)
    est = estimate_spec(spec, workload, engine=chosen.engine)
    layer_weights, per_layer_kv = _layers(opened, est, weights, revision, on_fetch, chosen.engine, notes)
    compute = _compute_buffer(opened, chosen, workload, notes)
    context = chosen.engine.device_context_bytes
    notes.append(f"each GPU also needs the CUDA context, cuBLAS workspace and memory pool: {context:,} B assumed "
                 "(0.25-1 GiB), not counted above")  # fmt: skip
    if not kv_offload:
        notes.append("--no-kv-offload: every layer's KV cache stays in CPU memory")
    layers = _Layers(layer_weights, per_layer_kv, gpus, tuple(tensor_split), kv_offload, compute)
    chosen_layers = _gpu_layer_count(layers, gpu_layers, gpu_bytes, context, notes)
    room = gpu_bytes - context if gpu_bytes is not None else None
    return OffloadReport(
        opened, layers.place(chosen_layers), chosen_layers, layers.count, room, gpu_label, auto, workload,
        _merge(spec.notes, notes, est.notes),
    )  # fmt: skip


def _check_tensor_split(tensor_split: object) -> None:
    if (
        isinstance(tensor_split, str | bytes)
        or not isinstance(tensor_split, Sequence)
        or any(isinstance(s, bool) or not isinstance(s, int | float) or not math.isfinite(s) for s in tensor_split)
    ):
        raise UsageError(f"tensor_split must be a list of numbers, one share per GPU, got {checks.shown(tensor_split)}",
                         param="tensor_split")  # fmt: skip


def _check_gpu_layers(gpu_layers: object) -> bool:
    """Whether gpu_layers is "auto" (else a count of layers)."""
    auto = gpu_layers == "auto"
    if not auto and (not isinstance(gpu_layers, int) or isinstance(gpu_layers, bool) or not 0 <= gpu_layers <= 2**31):
        raise UsageError(f"gpu_layers must be a count of layers or 'auto', got {checks.shown(gpu_layers)}",
                         param="gpu_layers")  # fmt: skip
    return auto


def _gpu_bytes(gpu: str | None, gpu_memory: int | None) -> tuple[int | None, str | None]:
    """Each GPU's memory and its label (None: not given)."""
    from kvcalc.gpus import find_gpu

    if gpu is not None and gpu_memory is not None:
        raise UsageError("give gpu or gpu_memory, not both", param=("gpu", "gpu_memory"))
    if gpu is not None:
        found = find_gpu(gpu)
        return found.runtime_bytes, f"{found.name}, {found.runtime_bytes:,} bytes"
    if gpu_memory is not None:
        return gpu_memory, f"{gpu_memory:,} bytes per GPU"
    return None, None


def _layers(
    model: Model, est: Estimate, weights: int | None, revision: str | None, on_fetch: OnFetch, engine: Engine,
    notes: list[str],
) -> tuple[LayerWeights, list[int]]:  # fmt: skip
    """Each layer's weights and KV bytes, one entry per -ngl slot."""
    per_layer_kv = _kv_per_layer(est)
    layer_weights, weight_notes = _layer_weights(model, weights, revision, on_fetch, engine)
    notes += weight_notes
    if layer_weights.nextn and len(per_layer_kv) + layer_weights.nextn == len(layer_weights.layers):
        per_layer_kv += [0] * layer_weights.nextn  # NextN blocks: slots for -ngl, nothing loaded or cached
    if len(layer_weights.layers) != len(per_layer_kv):
        raise UsageError(f"{model.name}: {len(per_layer_kv)} cache entries for {len(layer_weights.layers)} layers: "
                         "the offload split needs one per layer")  # fmt: skip
    return layer_weights, per_layer_kv


def _compute_buffer(model: Model, chosen: Served, workload: Workload, notes: list[str]) -> int:
    """The compute buffer on each backend that holds layers (0: not sized, said in a note)."""
    from kvcalc.inputs.hf.dims import read_dims

    dims = read_dims(model.source.config) if model.source is not None else None
    quantized = any(d is not None and d.bits < 16 for d in (chosen.k_dtype, chosen.v_dtype))
    tokens, batch = workload.tokens, workload.batch
    buffer = chosen.engine.compute_buffer(dims, n_ctx=tokens * batch, n_seq=batch, quantized_kv=quantized)
    if buffer is not None:
        compute, how = buffer
        notes.append(f"compute buffer {compute:,} B on each backend that holds layers ({how}; an upper bound "
                     "when layers are split)")  # fmt: skip
        return compute
    if dims is not None and not dims.heads:
        notes.append("compute buffer not sized: kvcalc models llama.cpp's attention graph only, and this model has "
                     "no attention heads")  # fmt: skip
    else:
        notes.append("compute buffer not sized: the model does not give its hidden size, heads and vocabulary")
    return 0


@dataclass(frozen=True)
class _Layers:
    """What the split places: each layer's weights and KV, over ``gpus`` GPUs and the CPU."""

    weights: LayerWeights
    kv: list[int]
    gpus: int
    tensor_split: tuple[float, ...]
    kv_offload: bool
    compute: int

    @property
    def count(self) -> int:
        return len(self.weights.layers)

    def place(self, n: int) -> tuple[Device, ...]:
        from kvcalc.calc.offload import place

        return place(self.weights, self.kv, n_gpu_layers=n, gpus=self.gpus, tensor_split=self.tensor_split,
                     kv_offload=self.kv_offload, compute=self.compute)  # fmt: skip


def _gpu_layer_count(
    layers: _Layers, gpu_layers: int | str, gpu_bytes: int | None, context: int, notes: list[str]
) -> int:
    """The layers on the GPUs: the most whose share fits each GPU's memory less the ``context``
    ("auto"), else the count given, at most every slot."""
    from kvcalc.calc.offload import largest_fitting

    n_layer = layers.count
    if gpu_layers == "auto":
        assert gpu_bytes is not None
        room = gpu_bytes - context
        chosen = largest_fitting(lambda n: all(d.total <= room for d in layers.place(n) if d.name != "CPU"), n_layer)
        notes.append(
            f"gpu_layers auto: the most of the {n_layer + 1} slots (layers and the output layer) whose share fits "
            f"each GPU's {gpu_bytes:,} B less the assumed {context:,} B context"
        )
        return chosen
    assert isinstance(gpu_layers, int)
    if gpu_layers > n_layer + 1:
        notes.append(f"-ngl {gpu_layers} offloads everything: {n_layer} layers and the output layer")
    return min(gpu_layers, n_layer + 1)


def _kv_per_layer(est: Estimate) -> list[int]:
    """Each layer's KV bytes in the estimate (every entry of the spec, in order)."""
    by_cache = {g.cache: g.bytes // g.layers for g in est.groups}
    return [by_cache[c] for c in est.model.caches]


def _gguf_headers(model: Model, on_fetch: OnFetch) -> list[GgufHeader] | None:
    """The headers of every shard of a GGUF model, the first one first; None when it is no GGUF."""
    from kvcalc.inputs.source import gguf_headers

    return gguf_headers(model.source, on_fetch) if model.source is not None else None


def _layer_weights(
    model: Model, weights: int | None, revision: str | None, on_fetch: OnFetch, engine: Engine
) -> tuple[LayerWeights, list[str]]:
    """Weights by llama.cpp layer: exact from a GGUF's tensor infos; otherwise the checkpoint's
    total split as embeddings, output head and equal layers (said in a note)."""
    from fractions import Fraction

    from kvcalc.calc.offload import LayerWeights
    from kvcalc.inputs.hf.dims import read_dims

    source = model.source
    headers = _gguf_headers(model, on_fetch)
    if headers is not None and source is not None:
        from kvcalc.inputs.gguf import headers_layer_weights

        return headers_layer_weights(headers, source.label), []
    notes: list[str] = []
    if weights is None:
        total, label, notes = _weights(model, engine, revision, on_fetch)
    else:
        total, label = weights, f"--weights {weights:,} bytes"
    dims = read_dims(source.config) if source is not None else None
    layers = model.spec.layers
    if dims is None:
        raise UsageError("the offload split needs the model's hidden size and vocabulary", param="gpu_layers")
    raw = source.config if source is not None and isinstance(source.config, dict) else {}
    params = source.preset.parameters if source is not None and source.preset is not None else None
    per_param = Fraction(total, params) if params else Fraction(2)
    embedding = int(dims.vocab * dims.hidden * per_param)
    tied = bool(raw.get("tie_word_embeddings", False))
    body = total - embedding - (0 if tied else embedding)
    if body <= 0:
        raise UsageError(f"{model.name}: weights of {total:,} B are smaller than its embeddings", param="weights")
    share, rest = divmod(body, layers)
    per_layer = tuple(share + (1 if i < rest else 0) for i in range(layers))
    notes.append(
        f"weights by layer from the checkpoint ({label}): embeddings {embedding:,} B on the CPU, the output head "
        f"{embedding:,} B{' (a copy of the tied embeddings)' if tied else ''}, the rest in {layers} equal layers; "
        "a GGUF file gives them exactly"
    )
    return LayerWeights(embedding, per_layer, embedding, exact=False), notes
