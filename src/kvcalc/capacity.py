"""What fits: the KV budget of a GPU, and the tokens, sequences and context it holds.

``estimate`` answers "how big is this workload"; this module inverts it. For vLLM it follows the
engine's own arithmetic (blocks per group, "GPU KV cache size: N tokens", "Maximum concurrency");
for the other engines it searches the exact estimate, which is monotone in tokens and batch.
Pure: sizes come in as integers, nothing is read or printed here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from fractions import Fraction

from .engines import Engine, cdiv
from .engines.llamacpp import LlamaCpp
from .engines.sglang import SGLang
from .engines.vllm import VLLM, version_text
from .errors import UsageError
from .estimator import Estimate, Workload, estimate, stage_entries
from .runtime import Runtime, given_runtime
from .spec import LayerCache, ModelSpec

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


def derive_budget(*, gpu_bytes: int, weights_bytes: int, shards: int, weights_label: str, runtime: Runtime) -> Budget:
    """The engine's share of a GPU minus weights / shards minus its runtime terms, per GPU, as
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


@dataclass(frozen=True)
class VllmGroup:
    """Layers of one vLLM KVCacheSpec: a representative layer, how many there are, in how many
    block-table groups, and the group's block size in tokens."""

    cache: LayerCache
    kind: str
    layers: int
    groups: int
    block_size: int


@dataclass(frozen=True)
class VllmPlan:
    """vLLM's KV cache layout for one worker: kv_cache_utils.py @ 001cabc1.

    ``page_bytes`` is one block of one layer; ``group_size`` layers share each block index;
    ``num_blocks = budget // page // group_size``.
    """

    page_bytes: int
    group_size: int
    num_blocks: int
    kinds: tuple[VllmGroup, ...]
    engine: VLLM
    notes: tuple[str, ...] = ()

    @property
    def max_num_batched_tokens(self) -> int:
        return self.engine.max_num_batched_tokens

    @property
    def num_groups(self) -> int:
        return sum(k.groups for k in self.kinds)

    @property
    def cache_tokens(self) -> int:
        """The "GPU KV cache size: N tokens" vLLM up to 0.20.0 logs: num_blocks // groups x smallest
        block (kv_cache_utils.py ``_report_kv_cache_config``, vLLM 0.11.0 to 0.20.0)."""
        # Mamba specs use max_model_len-sized "blocks" (one state per request), so the smallest
        # block is an attention one whenever attention is present.
        attention = [k.block_size for k in self.kinds if not k.cache.is_state] or [k.block_size for k in self.kinds]
        return self.num_blocks // self.num_groups * min(attention)

    def logged_tokens(self, max_model_len: int) -> int:
        """The "KV cache size: N tokens" the engine's release logs for ``max_model_len``: from
        0.20.1 ``int(max_concurrency x max_model_len)`` (``get_kv_cache_capacity``), before that
        ``cache_tokens``. In floats, as vLLM computes it (num_blocks / blocks per request is a
        Python float), so the figure rounds exactly as the log does."""
        if not self.engine.logs_concurrency_capacity:
            return self.cache_tokens
        return int(self.num_blocks / self.blocks_per_request(max_model_len) * max_model_len)

    def blocks_per_request(self, tokens: int, encoder_tokens: int = 0) -> int:
        """Blocks one request of ``tokens`` reserves across all groups (max_memory_usage_bytes),
        from the engine's own per-layer arithmetic."""
        return sum(
            self.engine.blocks_held(
                k.cache, encoder_tokens if k.cache.tokens == "encoder" else tokens, k.block_size, planning=True
            )
            * k.groups
            for k in self.kinds
        )

    def max_concurrency(self, tokens: int, encoder_tokens: int = 0) -> Fraction:
        """get_max_concurrency_for_kv_cache_config: num_blocks / blocks per request."""
        return Fraction(self.num_blocks, self.blocks_per_request(tokens, encoder_tokens))

    def max_context(self, batch: int, limit: int | None = None) -> int | None:
        """The longest request length L <= ``limit`` (vLLM's max_model_len) with batch x blocks(L)
        <= num_blocks, as estimate_max_model_len searches it. No limit: None when unbounded."""
        found = largest(lambda n: batch * self.blocks_per_request(n) <= self.num_blocks, limit or SEARCH_LIMIT)
        return limit if found is None and limit is not None else found


def largest(fits: Callable[[int], bool], limit: int) -> int | None:
    """The largest n in [1, limit] with fits(n) (fits is monotone), 0 if none, None if limit fits."""
    if not fits(1):
        return 0
    if fits(limit):
        return None
    low, high = 1, limit
    while high - low > 1:
        mid = (low + high) // 2
        if fits(mid):
            low = mid
        else:
            high = mid
    return low


def vllm_plan(spec: ModelSpec, workload: Workload, engine: VLLM, budget: int) -> VllmPlan:
    """Group the layers of the most loaded worker as vLLM does and count its blocks."""
    w = workload
    # Batches in flight grow with pipeline stages (VllmConfig.max_concurrent_batches).
    engine = replace(engine, pipeline_stages=w.pp)
    # Page sizes come from the estimator itself: one token of one sequence, per layer and GPU, so
    # fit and estimate share the formats, heads per GPU and state sizes.
    one = estimate(spec, replace(w, tokens=1, batch=1, dp=1, pp=1, shared_prefix=0), engine=engine)
    notes: list[str] = list(one.notes)  # the formats chosen, as estimate notes them
    per_layer = {g.cache: (g.bytes_per_token, g.state_bytes) for g in one.groups}
    stages = stage_entries(spec, w.pp)
    stage = max(stages, key=len)

    # Page bytes per layer (one block of block_size tokens, or one state), per vLLM spec.
    pages: dict[str, list[int]] = {}
    first: dict[str, LayerCache] = {}
    for i in stage:
        cache = spec.caches[i]
        if not cache.caches_tokens and not cache.is_state:
            continue  # KV-sharing layers allocate no cache of their own
        label = engine.spec_label(cache)
        row, state = per_layer[cache]
        pages.setdefault(label, []).append(state if cache.is_state else engine.block_size * row)
        first.setdefault(label, cache)
    if not pages:
        raise UsageError(f"{spec.name} has no KV cache for vLLM to size")
    counts = {kind: len(p) for kind, p in pages.items()}
    block = dict.fromkeys(pages, engine.block_size)

    if len(pages) == 1:
        ((kind, layer_pages),) = pages.items()
        single = (VllmGroup(first[kind], kind, counts[kind], 1, engine.block_size),)
        if len(set(layer_pages)) == 1:  # one group of every layer, one page size
            page, size = layer_pages[0], len(layer_pages)
        else:  # UniformTypeKVCacheSpecs: layers of different sizes, one block spans them all
            page, size = sum(layer_pages), 1
            notes.append("vLLM sizes one block across layers of different sizes (UniformTypeKVCacheSpecs)")
        num_blocks = budget // page // size
        return VllmPlan(page, size, num_blocks, single, engine, tuple(notes))

    for kind, layer_pages in pages.items():
        if len(set(layer_pages)) > 1:
            raise UsageError(f"vLLM cannot group {kind} layers of different sizes with other layer kinds")
    page_of = {kind: p[0] for kind, p in pages.items()}
    states = [k for k in page_of if first[k].is_state]
    if states:
        # Platform._align_hybrid_block_size (vllm/platforms/interface.py, 0.32): attention blocks
        # grow, in steps of max(kernel block, block_size) tokens, until an attention page holds a
        # mamba state, and never shrink below block_size; the mamba page is padded to the attention
        # page. Steps of 16 on CUDA's default 16-token blocks; 128 on the CPU build's.
        attention = [k for k in page_of if k not in states]
        per_token = max(page_of[k] // engine.block_size for k in attention)
        step = max(16, engine.block_size)
        size = max(engine.block_size, step * cdiv(max(page_of[k] for k in states), step * per_token))
        for k in attention:
            block[k] = size
            page_of[k] = page_of[k] // engine.block_size * size
        for k in states:
            page_of[k] = max(page_of[a] for a in attention)
        notes.append(
            f"vLLM enlarges attention blocks to {size} tokens so a page holds one mamba state (hybrid "
            "attention/mamba layouts follow vLLM's rule approximately)"
        )
    largest = max(page_of.values())
    for kind, page in page_of.items():
        if largest % page:
            raise UsageError(f"vLLM cannot unify page sizes {largest:,} and {page:,} bytes (NotImplementedError)")
        block[kind] *= largest // page  # unify_kv_cache_spec_page_size: smaller pages take more tokens
    smallest, most = min(counts.values()), max(counts.values())
    group_size = most if most < smallest * 1.5 else smallest
    kinds = tuple(VllmGroup(first[k], k, counts[k], cdiv(counts[k], group_size), block[k]) for k in pages)
    padding = sum(k.groups * group_size - k.layers for k in kinds)
    if padding:
        notes.append(f"vLLM pads its layer groups with {padding} empty layer slot(s)")
    num_blocks = budget // largest // group_size
    return VllmPlan(largest, group_size, num_blocks, kinds, engine, tuple(notes))


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
    vllm: VllmPlan | None = None
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


def fit(spec: ModelSpec, workload: Workload, engine: Engine, budget: int, *, context_limit: int | None = None) -> Fit:
    """Invert the estimate for a per-GPU ``budget``: workload.tokens and .batch are the request
    length and the batch the concurrency and context answers are about."""
    result = _fit(spec, workload, engine, budget, context_limit=context_limit)
    if result.max_context is None and grows_without_bound(spec):
        # The search stopped at its limit with room to spare: "at least", never "unbounded".
        result = replace(result, max_context=SEARCH_LIMIT, max_context_capped=True)
    return result


def _fit(spec: ModelSpec, workload: Workload, engine: Engine, budget: int, *, context_limit: int | None) -> Fit:
    w = workload
    for dtype in (w.kv_dtype, w.v_dtype):
        if dtype is not None:
            engine.check_dtype(dtype)
    if isinstance(engine, VLLM):
        engine, cpu_notes = engine.for_max_model_len(context_limit or w.tokens, any(c.is_latent for c in spec.caches))
        plan = vllm_plan(spec, w, engine, budget)
        notes = [*plan.notes, *cpu_notes]
        windowed = any(c.token_bound is not None for c in spec.caches)
        if windowed:
            notes.append(plan.engine.in_flight_note())
        if windowed and not plan.engine.logs_concurrency_capacity:
            notes.append(
                "vLLM's token count assumes every layer stored every token (num_blocks // groups x block); "
                "windowed layers keep far fewer, so one request can run longer than that count"
            )
        encoder = w.encoder_tokens or spec.encoder_tokens or 0
        exact = plan.max_concurrency(w.tokens, encoder)
        logged_len = context_limit or w.tokens
        if plan.engine.logs_concurrency_capacity and plan.logged_tokens(logged_len) != plan.cache_tokens:
            # Said only where the formulas differ (windows, several groups, a length off the block grid).
            notes.append(
                f"vLLM {version_text(plan.engine.version)} logs its KV cache size as max concurrency x max_model_len "
                f"({logged_len:,}{'' if context_limit else ' = --tokens; set --max-model-len'}), rounded down"
            )
        return Fit(
            kv_budget=budget,
            tokens=w.tokens,
            batch=w.batch,
            max_tokens=plan.logged_tokens(logged_len),
            max_concurrency=int(exact) * w.dp,
            max_context=plan.max_context(cdiv(w.batch, w.dp), context_limit),
            engine=engine.name,
            max_concurrency_exact=exact,
            vllm=plan,
            notes=tuple(notes),
        )

    def per_gpu(tokens: int, batch: int) -> int:
        est = estimate(
            spec,
            replace(w, tokens=tokens, batch=batch, dp=1, shared_prefix=min(w.shared_prefix, tokens)),
            engine=engine,
        )
        return est.per_gpu_bytes

    probe = estimate(spec, replace(w, tokens=1, batch=1, dp=1, shared_prefix=0), engine=engine)
    per_token = probe.per_gpu_token_bytes
    max_tokens: int | None
    if per_token == 0:
        max_tokens = None
    elif isinstance(engine, SGLang):
        max_tokens = _sglang_tokens(probe, budget, engine.page_size)
    elif isinstance(engine, LlamaCpp):
        max_tokens = budget // per_token // engine.cell_padding * engine.cell_padding
    else:
        max_tokens = budget // per_token
    concurrency = largest(lambda b: per_gpu(w.tokens, b) <= budget, SEARCH_LIMIT)
    context = largest(lambda t: per_gpu(t, cdiv(w.batch, w.dp)) <= budget, context_limit or SEARCH_LIMIT)
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


def _sglang_tokens(probe: Estimate, budget: int, page_size: int, swa_ratio: float = 0.8) -> int:
    """SGLang's pool: budget // cell, cell = per-token bytes of every cached layer; with sliding
    layers the hybrid SWA pool gives them swa_full_tokens_ratio (0.8) of the full pool's tokens
    (model_runner_kv_cache_mixin.py set_num_tokens_hybrid_swa). Rounded down to whole pages."""
    full = sum(g.layers * g.bytes_per_token for g in probe.groups if g.grows_per_token and g.cache.token_bound is None)
    swa = sum(
        g.layers * g.bytes_per_token for g in probe.groups if g.grows_per_token and g.cache.token_bound is not None
    )
    tokens = int(budget / (full + swa_ratio * swa)) if full and swa else budget // (full + swa)
    return tokens // page_size * page_size


def workload_bytes(spec: ModelSpec, workload: Workload, engine: Engine, result: Fit) -> int:
    """KV bytes per GPU the requested workload holds at once (``batch`` requests of ``tokens``,
    split over the replicas): vLLM's whole blocks when the answer came from its plan, else the
    engine's exact estimate."""
    w = workload
    per_replica = cdiv(w.batch, w.dp)
    plan = result.vllm
    if plan is not None:
        encoder = w.encoder_tokens or spec.encoder_tokens or 0
        return per_replica * plan.blocks_per_request(w.tokens, encoder) * plan.page_bytes * plan.group_size
    if isinstance(engine, VLLM):  # not reached: vLLM answers always carry their plan
        raise AssertionError("vLLM fit without a plan")
    one = replace(w, batch=per_replica, dp=1, shared_prefix=min(w.shared_prefix, w.tokens))
    return estimate(spec, one, engine=engine).per_gpu_bytes


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
