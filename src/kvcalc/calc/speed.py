"""Prefill and decode in time (kvcalc speed): lower bounds on TTFT and TPOT from the bytes and FLOPs each step moves.

A roofline: a step cannot take less than the bytes it must read over the GPU's memory bandwidth,
nor less than its FLOPs over the GPU's dense peak; the step's bound is the larger of the two. The
bytes are the model's weights as a step reads them (MoE: the experts its tokens are routed to) and
the KV cache it attends over, exactly as kvcalc's per-layer model keeps it; the FLOPs are the
matmuls (2 per parameter a token goes through) and attention's score and value products over the
tokens each layer attends to. What the bound leaves out (activations, launch gaps, communication,
imperfect kernels) only makes real steps slower, so measured latencies sit above it; efficiency
factors, off by default and labelled, turn the bound into an estimate.

Pure: integers and callables in, a report out. The caller (kvcalc.api.speed) supplies the KV cache
bytes for a context length and batch, from the estimator under the chosen engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import Any

from kvcalc.dims import ModelDims
from kvcalc.errors import UsageError
from kvcalc.spec import ModelSpec

# Steps of a long output evaluated one by one; past this many, evenly spaced ones (a note says so).
MAX_STEPS = 512


@dataclass(frozen=True)
class Hardware:
    """One GPU's peaks (every GPU of a TP group alike) and the efficiency factors applied to them
    (1: the bound itself)."""

    label: str
    bandwidth: int  # bytes/s
    flops: int  # dense FLOP/s at compute_dtype
    compute_dtype: str
    bandwidth_efficiency: Fraction = Fraction(1)
    flops_efficiency: Fraction = Fraction(1)

    @property
    def is_bound(self) -> bool:
        return self.bandwidth_efficiency == 1 and self.flops_efficiency == 1

    # n / (peak x efficiency) exactly, rounded once (int / int is correctly rounded, as float(Fraction)
    # is), the rate's fraction made once: kvcalc simulate asks for thousands of steps.
    @cached_property
    def _rates(self) -> tuple[Fraction, Fraction]:
        return Fraction(self.bandwidth * self.bandwidth_efficiency), Fraction(self.flops * self.flops_efficiency)

    def memory_seconds(self, nbytes: int) -> float:
        rate = self._rates[0]
        return nbytes * rate.denominator / rate.numerator

    def compute_seconds(self, flops: int) -> float:
        rate = self._rates[1]
        return flops * rate.denominator / rate.numerator


# --- weights as a step reads them ---------------------------------------------------------------------------


@dataclass(frozen=True)
class WeightSplit:
    """The checkpoint's bytes by how a forward pass reads them, and the parameters behind its FLOPs.

    ``embedding_bytes``: the input embedding, read one row per token (0 when the head is tied to it,
    since the head reads the whole matrix anyway). ``expert_bytes``: every routed expert of every MoE
    layer; a step reads the share its tokens are routed to. ``dense_params``: parameters every token
    goes through (attention, dense MLPs, shared experts, norms), the head excluded; ``expert_params``
    the parameters of one routed expert summed over the MoE layers; ``head_params`` the LM head."""

    total_bytes: int
    embedding_bytes: int
    expert_bytes: int
    experts: int
    top_k: int
    dense_params: int
    expert_params: int
    head_params: int
    notes: tuple[str, ...] = ()
    parameters: int = 0  # all of them, each embedding and the head counted once
    # Attention-DP: the attention weights each GPU holds beyond an even TP share (they are split
    # over tp / dp_attention GPUs only).
    replicated_per_gpu: int = 0

    @property
    def bytes_per_param(self) -> Fraction:
        return Fraction(self.total_bytes, self.parameters or 1)

    @property
    def params_per_token(self) -> int:
        """Matmul parameters one token goes through: 2 FLOPs each."""
        return self.dense_params + self.top_k * self.expert_params + self.head_params

    def read_bytes(self, tokens: int) -> int:
        """Weight bytes one forward pass over ``tokens`` tokens reads: all but the input embedding
        (a few rows) and the routed experts no token goes to. Tokens are taken to pick experts
        uniformly and independently: each expert is left out with probability (1 - k/E)^tokens."""
        dense = self.total_bytes - self.embedding_bytes - self.expert_bytes
        if not self.experts:
            return dense
        untouched = (1 - self.top_k / self.experts) ** tokens
        return dense + int(self.expert_bytes * (1 - untouched))


def moe_layer_count(text: Mapping[str, Any], layers: int) -> tuple[int, str | None]:
    """How many decoder layers route to experts, from the config's layout keys; a note when none says."""
    pattern = text.get("hybrid_override_pattern")
    if isinstance(pattern, str):  # Nemotron-H: 'E' marks an MoE block
        return pattern.count("E"), None
    freq = text.get("moe_layer_freq")
    if isinstance(freq, list):  # MiMo-V2, MiniMax-M3: 1 marks an MoE layer
        return sum(1 for f in freq[:layers] if f), None
    if isinstance(text.get("first_k_dense_replace"), int):  # DeepSeek, GLM, Kimi: leading dense layers
        dense = int(text["first_k_dense_replace"])
        freq = text.get("moe_layer_freq", 1)
        freq = freq if isinstance(freq, int) and freq > 0 else 1
        return sum(1 for i in range(dense, layers) if i % freq == 0), None
    step = text.get("interleave_moe_layer_step")  # Llama 4: every step-th layer
    if isinstance(step, int) and step > 0:
        return sum(1 for i in range(layers) if (i + 1) % step == 0), None
    period = text.get("expert_layer_period")  # Jamba
    if isinstance(period, int) and period > 0:
        offset = int(text.get("expert_layer_offset", 0) or 0)
        return sum(1 for i in range(layers) if i % period == offset), None
    only = text.get("mlp_only_layers") or []
    sparse = text.get("decoder_sparse_step")
    if (isinstance(sparse, int) and sparse > 0) or only:  # Qwen-MoE
        step = sparse if isinstance(sparse, int) and sparse > 0 else 1
        return sum(1 for i in range(layers) if i not in only and (i + 1) % step == 0), None
    return layers, f"every one of the {layers} layers taken to route to experts (the config names no dense layers)"


def split_weights(
    dims: ModelDims,
    text: Mapping[str, Any],
    *,
    total_bytes: int,
    parameters: int | None,
    bytes_per_param: Fraction,
    tied: bool,
    stored: tuple[int, int] | None = None,
) -> WeightSplit:
    """Split a checkpoint of ``total_bytes`` (``parameters`` when known) by how a step reads it.

    Widths come from the config (kvcalc.inputs.hf.dims); the experts are gated MLPs (gate, up and down: 3 x
    hidden x width each) unless the config's MLP activation is relu2 (Nemotron-H: up and down
    only). Bytes: ``stored`` (input embedding, routed experts) when the file lists its tensors (a
    GGUF), else at the checkpoint's mean bytes per parameter, which errs low on the dense part when
    experts are stored smaller (gpt-oss's MXFP4), so the bound stays a bound."""
    notes: list[str] = []
    if parameters is None:
        parameters = int(Fraction(total_bytes) / bytes_per_param)
        notes.append(f"parameters taken as the weights' bytes / {float(bytes_per_param):g} B = {parameters:,}")
    per_param = Fraction(total_bytes, parameters)
    embedding_params = dims.vocab * dims.hidden
    head_params = embedding_params
    expert_params = experts = top_k = 0
    if dims.is_moe and dims.expert_intermediate:
        moe_layers, note = moe_layer_count(text, dims.layers)
        if note:
            notes.append(note)
        experts, top_k = dims.experts, dims.top_k
        matrices = 2 if "relu2" in (text.get("mlp_hidden_act"), text.get("hidden_act")) else 3
        expert_params = moe_layers * matrices * dims.hidden * dims.expert_intermediate
    all_expert_params = experts * expert_params
    dense_params = parameters - all_expert_params - head_params - (0 if tied else embedding_params)
    if dense_params <= 0:
        raise UsageError(
            f"the weights ({parameters:,} parameters) are smaller than the embeddings and experts the config "
            "describes: give the right --weights"
        )
    embedding_bytes, expert_bytes = int(embedding_params * per_param), int(all_expert_params * per_param)
    if stored is not None:
        embedding_bytes, expert_bytes = stored
    return WeightSplit(
        total_bytes=total_bytes,
        embedding_bytes=0 if tied else embedding_bytes,
        expert_bytes=expert_bytes if experts else 0,
        experts=experts,
        top_k=top_k,
        dense_params=dense_params,
        expert_params=expert_params,
        head_params=head_params,
        notes=tuple(notes),
        parameters=parameters,
    )


# --- attention FLOPs ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionShape:
    """What attention's FLOPs need beyond the cache geometry: query heads, and for sparse (DSA)
    attention the indexer's heads and the tokens each query keeps (``index_topk``)."""

    query_heads: int
    index_heads: int = 0
    index_topk: int | None = None


def attention_flops(spec: ModelSpec, shape: AttentionShape, *, context: int, prefill: int = 0) -> int:
    """Attention FLOPs of one sequence: the decode of one token after ``context`` tokens, or (with
    ``prefill`` n) a causal prefill of n tokens, summed over the layers; each kind says what one of
    its layers costs (``attention_flops`` in kvcalc.spec). Per head, the scores take 2 x d_k and the
    weighted values 2 x d_v FLOPs per attended token; MLA decodes in its absorbed form (scores over
    the latent and RoPE dims, values over the latent) and prefills decompressed. A recurrent layer
    takes about 4 FLOPs per state element per token (decay and update, then the read); the
    conv state 2 per element. Layers that reuse another's K/V attend like the cheapest attention
    layer (a lower bound)."""
    per_layer: list[tuple[int, bool, int]] = []  # (FLOPs of one layer, reuses another's K/V, layers like it)
    cheapest: int | None = None
    # A sparse (DSA) model's MLA layers read only the tokens its indexer picks.
    sparse = any(c.picks_attended_tokens for c, _ in spec.groups)
    topk = shape.index_topk if sparse else None
    for cache, count in spec.groups:
        refusal = cache.speed_refusal
        if refusal is not None:
            raise UsageError(f"{spec.name}: {refusal}")
        flops = cache.attention_flops(
            shape.query_heads, context=context, prefill=prefill, index_heads=shape.index_heads, index_topk=topk
        )
        per_layer.append((flops, cache.reuses_kv, count))
        if flops > 0 and cache.is_kv_source:
            cheapest = flops if cheapest is None else min(cheapest, flops)
    return sum(((cheapest or 0) if reuses else f) * n for f, reuses, n in per_layer)


# --- steps ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One forward pass: the bytes it must read (weights, KV cache) and its FLOPs, per GPU."""

    weight_bytes: int
    kv_bytes: int
    flops: int  # all of them: the matmuls over the parameters and attention_flops
    memory_s: float
    compute_s: float
    attention_flops: int = 0  # scores and weighted values over the attended tokens (states: their update)

    @property
    def bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes

    @property
    def seconds(self) -> float:
        return max(self.memory_s, self.compute_s)

    @property
    def bound_by(self) -> str:
        return "memory" if self.memory_s >= self.compute_s else "compute"


@dataclass(frozen=True)
class Decode:
    """The output's decode steps: the first (after the prompt), the last, and the mean TPOT."""

    first: Step
    last: Step
    mean_s: float
    steps: int
    sampled: int  # steps evaluated (all of them up to MAX_STEPS)
    memory_bound_steps: int  # of those evaluated
    evaluated: tuple[Step, ...] = ()  # the steps evaluated, in order (the estimate reads them)

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second of one sequence at the mean step."""
        return 1 / self.mean_s


@dataclass(frozen=True)
class SweepRow:
    batch: int
    decode: Decode
    prefill: Step  # every prompt of the batch in one pass: the last request's TTFT
    fits: bool | None  # weights + cache within the GPUs' memory; None: no memory given
    ttft_mean_s: float = 0.0  # the mean over the batch's requests (ttft_mean)

    @property
    def throughput(self) -> float:
        """Output tokens per second over the whole batch at the mean step."""
        return self.batch / self.decode.mean_s


@dataclass(frozen=True)
class Speed:
    """TTFT and TPOT bounds for ``batch`` sequences of ``prompt`` + ``output`` tokens, per GPU of a
    ``tp``-way group."""

    hardware: Hardware
    weights: WeightSplit
    prompt: int
    output: int
    batch: int
    tp: int
    prefill: Step  # every prompt of the batch in one pass: the last request's TTFT
    decode: Decode
    ttft_mean_s: float  # the mean over the batch's requests (ttft_mean)
    compute_bound_prompt: int | None  # shortest prompt whose prefill (this batch) is compute-bound
    kv_overtakes_at: int | None  # shortest context where a decode step reads more KV than weights
    sweep: tuple[SweepRow, ...]
    notes: tuple[str, ...] = field(default=())


KvBytes = Callable[[int, int], int]  # (context tokens per sequence, batch) -> KV bytes per GPU


def step(
    hw: Hardware, *, weight_bytes: int, kv_bytes: int, dense_flops: int, attention_flops: int, tp: int, extra: int = 0
) -> Step:
    """A step's bytes and FLOPs per GPU: weights and FLOPs split evenly over the TP group (``extra``:
    weight bytes a GPU holds beyond its share, attention-DP's replicated attention)."""
    w, f, a = weight_bytes // tp + extra, (dense_flops + attention_flops) // tp, attention_flops // tp
    return Step(w, kv_bytes, f, hw.memory_seconds(w + kv_bytes), hw.compute_seconds(f), a)


def decode_step(
    hw: Hardware, spec: ModelSpec, weights: WeightSplit, shape: AttentionShape, kv: KvBytes, *,
    context: int, batch: int, tp: int,
) -> Step:  # fmt: skip
    """Decoding one token for each of ``batch`` sequences that hold ``context`` tokens."""
    return step(
        hw, weight_bytes=weights.read_bytes(batch), kv_bytes=kv(context, batch),
        dense_flops=batch * 2 * weights.params_per_token,
        attention_flops=batch * attention_flops(spec, shape, context=context), tp=tp,
        extra=weights.replicated_per_gpu,
    )  # fmt: skip


def prefill_step(
    hw: Hardware, spec: ModelSpec, weights: WeightSplit, shape: AttentionShape, kv: KvBytes, *,
    prompt: int, batch: int, tp: int,
) -> Step:  # fmt: skip
    """The prompts of ``batch`` sequences in one pass: every prompt token through the body, the
    head for the last position of each sequence only (engines compute no other logits), and the
    cache written once (its bytes counted as moved)."""
    if prompt == 0:  # decode only: no prefill pass
        return Step(0, 0, 0, 0.0, 0.0)
    body = weights.params_per_token - weights.head_params
    return step(
        hw, weight_bytes=weights.read_bytes(batch * prompt), kv_bytes=kv(prompt, batch),
        dense_flops=batch * (2 * body * prompt + 2 * weights.head_params),
        attention_flops=batch * attention_flops(spec, shape, context=0, prefill=prompt), tp=tp,
        extra=weights.replicated_per_gpu,
    )  # fmt: skip


def floor_sum(n: int, m: int, a: int, b: int) -> int:
    """sum(floor((a * i + b) / m) for i in range(n)) for a, b >= 0, m > 0, in O(log) steps (the
    textbook Euclid-like reduction of a floor sum): a batch of a billion requests of one
    length costs no more than one."""
    total = 0
    while n > 0:
        total += (n * (n - 1) // 2) * (a // m) + n * (b // m)
        a, b = a % m, b % m
        last = a * n + b
        if last < m:
            break
        n, b, m, a = last // m, last % m, a, m
    return total


def _weight_read_sum(weights: WeightSplit, tokens: int, n: int, tp: int) -> int:
    """sum(weights.read_bytes(i * tokens) // tp for i in 1..n), in closed form: exact for a dense
    model (a constant read); with routed experts, their expected share is a geometric series (to
    within a byte or two a term, as read_bytes and the split over tp round each)."""
    dense = weights.total_bytes - weights.embedding_bytes - weights.expert_bytes
    if not weights.experts or n == 0:
        return dense // tp * n
    q = (1 - weights.top_k / weights.experts) ** tokens  # an expert left out by one request's tokens
    untouched = n if q == 1 else q * (1 - q**n) / (1 - q)  # sum of q^i, i = 1..n
    return (dense * n + int(weights.expert_bytes * (n - untouched))) // tp


def ttft_mean(
    hw: Hardware, weights: WeightSplit, one: Step, *, prompt: int, batch: int, tp: int, kv_bytes: int = 0
) -> float:
    """The mean TTFT over ``batch`` requests whose prompts arrive together, however an engine orders
    and chunks them: the i-th to get its first token waits at least for i prompts' FLOPs (``one``:
    a single prompt's prefill), for the weights those i x prompt tokens read and for i / batch of
    the batch's KV write (``kv_bytes`` per GPU, which the batch's prefill step counts: at batch 1
    the mean is that step's TTFT); the mean over i of the larger is the bound (the last request's
    is the whole batch's prefill).

    The requests are one group of one length, so the sum is in closed form: the memory term wins
    up to some i (the compute term grows linearly, the bytes at most so), the compute term after;
    a billion requests cost what one does."""
    if prompt == 0:
        return 0.0
    extra = weights.replicated_per_gpu

    def memory_bytes(i: int) -> int:
        return weights.read_bytes(i * prompt) // tp + extra + kv_bytes * i // batch

    # Requests 1..n wait on memory, n + 1..batch on FLOPs.
    crossing = first_where(lambda i: i * one.compute_s >= hw.memory_seconds(memory_bytes(i)), 1, batch)
    n = batch if crossing is None else crossing - 1
    weight_sum = _weight_read_sum(weights, prompt, n, tp)
    memory = weight_sum + extra * n + floor_sum(n + 1, batch, kv_bytes, 0)
    compute = (batch * (batch + 1) - n * (n + 1)) // 2  # sum of i over n + 1..batch
    return (hw.memory_seconds(memory) + compute * one.compute_s) / batch


def decode_phase(
    hw: Hardware, spec: ModelSpec, weights: WeightSplit, shape: AttentionShape, kv: KvBytes, *,
    prompt: int, output: int, batch: int, tp: int,
) -> Decode:  # fmt: skip
    """Every decode step of ``output`` tokens after a prompt of ``prompt`` (the first output token
    comes from the prefill, so output - 1 decode steps, at contexts prompt .. prompt + output - 2;
    with no prompt every output token is a decode step, from an empty context); past MAX_STEPS
    steps, MAX_STEPS evenly spaced ones stand for them."""
    steps = output if prompt == 0 else max(output - 1, 1)
    contexts = [prompt + i for i in _spread(steps)]
    done = [
        decode_step(hw, spec, weights, shape, kv, context=c, batch=batch, tp=tp) for c in contexts
    ]  # fmt: skip
    mean = sum(s.seconds for s in done) / len(done)
    memory = sum(s.bound_by == "memory" for s in done)
    return Decode(done[0], done[-1], mean, steps, len(done), memory, tuple(done))


def _spread(steps: int) -> list[int]:
    if steps <= MAX_STEPS:
        return list(range(steps))
    return sorted({round(i * (steps - 1) / (MAX_STEPS - 1)) for i in range(MAX_STEPS)})


def first_where(test: Callable[[int], bool], lo: int, hi: int) -> int | None:
    """The smallest n in lo..hi for which ``test`` holds, ``test`` being monotone; None if none."""
    if not test(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if test(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def speed(
    hw: Hardware,
    spec: ModelSpec,
    weights: WeightSplit,
    shape: AttentionShape,
    kv: KvBytes,
    *,
    prompt: int,
    output: int,
    batch: int,
    tp: int = 1,
    sweep: Sequence[int] = (),
    memory_per_gpu: int | None = None,
    context_limit: int,
    notes: Sequence[str] = (),
) -> Speed:
    """Prefill and decode bounds at ``batch``, the crossover points, and a batch sweep."""
    prefill = prefill_step(hw, spec, weights, shape, kv, prompt=prompt, batch=batch, tp=tp)
    decode = decode_phase(hw, spec, weights, shape, kv, prompt=prompt, output=output, batch=batch, tp=tp)
    single = prefill_step(hw, spec, weights, shape, kv, prompt=prompt, batch=1, tp=tp)

    def compute_bound(p: int) -> bool:
        return prefill_step(hw, spec, weights, shape, kv, prompt=p, batch=batch, tp=tp).bound_by == "compute"

    def kv_ahead(t: int) -> bool:
        return kv(t, batch) >= weights.read_bytes(batch) // tp + weights.replicated_per_gpu

    rows = []
    for b in sweep:
        d = decode_phase(hw, spec, weights, shape, kv, prompt=prompt, output=output, batch=b, tp=tp)
        p = prefill_step(hw, spec, weights, shape, kv, prompt=prompt, batch=b, tp=tp)
        fits = None
        if memory_per_gpu is not None:
            fits = weights.total_bytes // tp + weights.replicated_per_gpu + kv(prompt + output, b) <= memory_per_gpu
        mean = ttft_mean(hw, weights, single, prompt=prompt, batch=b, tp=tp, kv_bytes=p.kv_bytes)
        rows.append(SweepRow(b, d, p, fits, mean))
    return Speed(
        hw, weights, prompt, output, batch, tp, prefill, decode,
        ttft_mean(hw, weights, single, prompt=prompt, batch=batch, tp=tp, kv_bytes=prefill.kv_bytes),
        first_where(compute_bound, 1, context_limit), first_where(kv_ahead, 1, context_limit),
        tuple(rows), tuple(notes),
    )  # fmt: skip
