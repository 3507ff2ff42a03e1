"""What fits: the KV budget of a GPU, and the tokens, sequences and context it holds.

``estimate`` answers "how big is this workload"; this module inverts it. An engine with its own
capacity arithmetic answers itself (``StorageRules.capacity``: vLLM's blocks per group, "GPU KV cache
size: N tokens", "Maximum concurrency"); for the others fit searches the exact estimate, which is
monotone in tokens and batch.
Pure: sizes come in as integers, nothing is read or printed here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import TYPE_CHECKING

from kvcalc.calc.estimate import Workload, compile_plan, estimate
from kvcalc.calc.pages import cdiv
from kvcalc.calc.runtime import Runtime, given_runtime
from kvcalc.spec import ModelSpec

if TYPE_CHECKING:
    from kvcalc.calc.contracts import CapacityPlan, StorageRules

# Searches stop here: a context or batch this large means "unbounded" for any real GPU.
SEARCH_LIMIT = 2**40


@dataclass(frozen=True)
class BudgetLine:
    label: str
    bytes: int
    detail: str = ""  # the arithmetic behind a runtime term, with its inputs
    low: int | None = None  # the range a term (or the budget) may fall in, when it is not exact
    high: int | None = None


@dataclass(frozen=True)
class Budget:
    """Bytes per GPU left for the KV cache, with every step that led there; ``kv_low`` and
    ``kv_high`` bound it when a runtime term is a range."""

    kv_bytes: int
    lines: tuple[BudgetLine, ...]
    kv_low: int | None = None
    kv_high: int | None = None
    runtime: Runtime | None = None
    # When nothing is left for the cache (kv_bytes <= 0): the fewest GPUs (tp x pp) whose share of
    # the weights leaves anything, or None when even one GPU's runtime does not fit.
    gpus_needed: int | None = None

    @property
    def leaves_nothing(self) -> bool:
        """The weights and the runtime take the whole share: no KV cache at all."""
        return self.kv_bytes <= 0


def kv_budget(
    *,
    gpu_bytes: int,
    utilization: Fraction,
    weights_bytes: int,
    overhead_bytes: int,
    shards: int,
    weights_label: str,
) -> Budget:
    """total x utilization - weights / shards - a fixed overhead, per GPU."""
    runtime = given_runtime(overhead_bytes, "any", utilization, f"x utilization {float(utilization):g}")
    budget = derive_budget(gpu_bytes=gpu_bytes, weights_bytes=weights_bytes, shards=shards,
                           weights_label=weights_label, runtime=runtime)  # fmt: skip
    return budget


def derive_budget(
    *, gpu_bytes: int, weights_bytes: int, shards: int, weights_label: str, runtime: Runtime,
    replicated: tuple[int, str] | None = None,
) -> Budget:  # fmt: skip
    """The engine's share of a GPU minus weights / shards (and ``replicated`` bytes a GPU holds
    beyond its share, with their derivation) minus its runtime terms, per GPU, as
    vLLM's worker computes it (vllm/v1/worker/gpu_worker.py determine_available_memory: requested
    memory minus weights, peak activations and non-torch memory) or SGLang's model runner
    (free memory x mem_fraction_static minus weights)."""
    lines = [BudgetLine("GPU memory", gpu_bytes)]
    base, base_low, base_high = gpu_bytes, gpu_bytes, gpu_bytes
    for term in runtime.before_share:
        low, high = term.range
        lines.append(BudgetLine(f"- {term.label}", term.bytes, term.detail, low, high))
        base, base_low, base_high = base - term.bytes, base_low - high, base_high - low
    share = Fraction(runtime.share)
    usable = int(base * share)
    usable_low, usable_high = int(base_low * share), int(base_high * share)
    lines.append(BudgetLine(runtime.share_label, usable))
    weights = cdiv(weights_bytes, shards)
    split = f"{weights_bytes:,} B / {shards} GPUs; " if shards > 1 else ""
    lines.append(BudgetLine("- weights", weights, f"{split}{weights_label}"))
    if replicated is not None:  # attention-DP: attention weights split over fewer GPUs than the rest
        weights += replicated[0]
        lines.append(BudgetLine("- attention weights beyond a TP share", replicated[0], replicated[1]))
    for term in runtime.terms:
        low, high = term.range
        lines.append(BudgetLine(f"- {term.label}", term.bytes, term.detail, low, high))
    kv = usable - weights - runtime.bytes
    kv_low = usable_low - weights - runtime.high
    kv_high = usable_high - weights - runtime.low
    ranged = (kv_low, kv_high) != (kv, kv)
    lines.append(
        BudgetLine("= KV cache budget per GPU", kv, low=kv_low if ranged else None, high=kv_high if ranged else None)
    )
    least = None
    if kv <= 0:
        room = usable - runtime.bytes
        # The fewest GPUs (tp x pp) whose share of the weights leaves anything for the cache: an
        # answer (the verdict says it), not an error.
        least = weights_bytes // room + 1 if room > 0 else None
    return Budget(kv, tuple(lines), kv_low if ranged else None, kv_high if ranged else None, runtime, least)


def largest(fits: Callable[[int], bool], limit: int, low: int = 1) -> int | None:
    """The largest n in [low, limit] with fits(n) (fits is monotone), 0 if none, None if limit fits."""
    if not fits(low):
        return 0
    if fits(limit):
        return None
    high = limit
    while high - low > 1:
        mid = (low + high) // 2
        if fits(mid):
            low = mid
        else:
            high = mid
    return low


def largest_within(
    cost: Callable[[int], int], budget: int, limit: int, *, solve: bool = True, drops: Sequence[int] = ()
) -> int | None:
    """The largest n in [1, limit] with cost(n) <= budget, 0 if none, None if limit fits: ``largest``
    for a cost in bytes, monotone between ``drops`` (the n where it may fall: MLX quantizes a whole
    buffer at its quantized_kv_start). Each monotone piece is searched, the last first: the answer
    is the largest n of the last piece that holds one."""
    starts = sorted({1, *(d for d in drops if 1 < d <= limit)})
    ends = [s - 1 for s in starts[1:]] + [limit]
    for low, high in reversed(list(zip(starts, ends, strict=True))):
        found = _largest_within(cost, budget, low, high, solve=solve)
        if found is None:
            return None if high == limit else high
        if found:
            return found
    return 0


def _largest_within(cost: Callable[[int], int], budget: int, low: int, limit: int, *, solve: bool) -> int | None:
    """``largest_within`` on [low, limit], where cost is monotone. Where the cost is affine in n
    past some point (every layer's tokens past its window, the batch's sequences) the answer is
    solved for from two far-apart points and kept once cost(n) <= budget < cost(n + 1) proves it;
    steps (blocks, pages, cells) or ``solve=False`` (a cost not known to be monotone) leave it to
    bisection."""
    if cost(low) > budget:
        return 0
    high_cost = cost(limit)
    if high_cost <= budget:
        return None
    if solve and limit - low > 1:
        mid = (low + limit) // 2
        slope = (high_cost - cost(mid)) // (limit - mid)
        if slope > 0:
            # cost(n) = high_cost - slope x (limit - n) <= budget
            n = max(low, limit - cdiv(high_cost - budget, slope))
            if cost(n) <= budget < cost(n + 1):
                return n
    return largest(lambda n: cost(n) <= budget, limit, low)


@dataclass(frozen=True)
class Fit:
    """The answers: tokens the budget holds, requests of ``tokens`` that fit at once, and the
    longest context at ``batch`` (None: no limit, every layer is windowed or a fixed state)."""

    kv_budget: int
    tokens: int
    batch: int
    max_tokens: int | None
    max_concurrency: int
    max_context: int | None
    engine: str
    max_concurrency_exact: Fraction | None = None
    # The engine's own capacity arithmetic, where it answered (Engine.capacity: vLLM's blocks,
    # SGLang's pools): it describes itself for the table and for JSON.
    plan: CapacityPlan | None = None
    notes: tuple[str, ...] = field(default=())
    # True when the answer is only the search's stopping point (SEARCH_LIMIT): the budget holds
    # at least that much, and more was not tried.
    max_concurrency_capped: bool = False
    max_context_capped: bool = False

    @property
    def fits(self) -> bool:
        """Whether at least one request of ``tokens`` fits."""
        return self.max_concurrency > 0


def grows_without_bound(spec: ModelSpec) -> bool:
    """Whether some layer keeps every token of a sequence (so no budget holds an endless context)."""
    return any(c.grows_without_bound for c in spec.caches)


def fit(
    spec: ModelSpec, workload: Workload, engine: StorageRules, budget: int, *, context_limit: int | None = None
) -> Fit:
    """Invert the estimate for a per-GPU ``budget``: workload.tokens and .batch are the request
    length and the batch the concurrency and context answers are about."""
    result = _fit(spec, workload, engine, budget, context_limit=context_limit)
    if result.max_context is None and grows_without_bound(spec):
        # The search stopped at its limit with room to spare: "at least", never "unbounded".
        result = replace(result, max_context=SEARCH_LIMIT, max_context_capped=True)
    return result


def _fit(spec: ModelSpec, workload: Workload, engine: StorageRules, budget: int, *, context_limit: int | None) -> Fit:
    w = workload
    for dtype in (w.kv_dtype, w.v_dtype):
        if dtype is not None:
            engine.check_dtype(dtype)
    answer = engine.capacity(spec, w, budget, context_limit)
    if answer is not None:
        return answer

    # One plan for every length and batch the searches try (on one replica: the batch is split).
    plan = compile_plan(spec, replace(w, tokens=1, batch=1, dp=1, shared_prefix=0), engine)

    def per_gpu(tokens: int, batch: int) -> int:
        return plan.per_gpu_bytes(tokens, batch, min(w.shared_prefix, tokens))

    probe = plan.at(1)
    per_token = probe.per_gpu_token_bytes
    max_tokens = None if per_token == 0 else engine.max_tokens(probe, budget)
    concurrency = largest_within(lambda b: per_gpu(w.tokens, b), budget, SEARCH_LIMIT)
    context = largest_within(
        lambda t: per_gpu(t, cdiv(w.batch, w.dp)), budget, context_limit or SEARCH_LIMIT, solve=plan.monotone,
        drops=plan.drops,
    )  # fmt: skip
    if context is None and context_limit is not None:
        context = context_limit
    return Fit(
        kv_budget=budget,
        tokens=w.tokens,
        batch=w.batch,
        max_tokens=max_tokens,
        max_concurrency=(concurrency if concurrency is not None else SEARCH_LIMIT) * w.dp,
        max_context=context,
        engine=engine.name,
        max_concurrency_capped=concurrency is None,
    )


def workload_bytes(spec: ModelSpec, workload: Workload, engine: StorageRules, result: Fit) -> int:
    """KV bytes per GPU the requested workload holds at once (``batch`` requests of ``tokens``,
    split over the replicas): the exact estimate, as ``kvcalc estimate`` gives it, under the engine
    the answers followed (an engine's pool layout, vLLM's block groups, is part of the estimate)."""
    w = workload
    per_replica = cdiv(w.batch, w.dp)
    held_by = (result.plan.held_by if result.plan is not None else None) or engine
    one = replace(w, batch=per_replica, dp=1, shared_prefix=min(w.shared_prefix, w.tokens))
    return estimate(spec, one, engine=held_by).per_gpu_bytes


@dataclass(frozen=True)
class Remedy:
    """One change to the workload or the deployment, and what it gives."""

    change: str
    fits: bool
    figure: str


@dataclass(frozen=True)
class Verdict:
    """Whether the requested workload fits, by how much, and what to change first when it does not
    (``remedies`` in the order tried; the first that fits is the one to take)."""

    fits: bool
    needed_bytes: int
    kv_budget: int
    remedies: tuple[Remedy, ...] = ()
    # Why it does not fit when the budget's headroom is not the whole story: the weights leave no
    # room at all, or the request is longer than the model's context limit.
    reason: str | None = None

    @property
    def headroom_bytes(self) -> int:
        """Budget left over (negative: the shortfall)."""
        return self.kv_budget - self.needed_bytes

    @property
    def first_remedy(self) -> Remedy | None:
        return next((r for r in self.remedies if r.fits), None)
