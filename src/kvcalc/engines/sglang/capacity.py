"""SGLang's own pool sizing: how a KV budget becomes its token pool, its sliding-window pool, its
Mamba/linear-state pool and its max running requests, which fit follows for SGLang instead of
searching the estimate. Each step reproduces SGLang 0.5.23's lines (engines/sglang/releases.py
names the files and their hashes) and is checked against SGLang's own code on the CPU
(tests/engines/sglang/test_sglang_conformance.py).

SGLang does this arithmetic in Python floats (GB for the budget, a float ratio for the SWA split);
it is reproduced here in the same order, so the integers it ends in are SGLang's own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kvcalc.calc.estimate import Workload, estimate
from kvcalc.calc.fit import SEARCH_LIMIT, Fit, largest
from kvcalc.calc.pages import pad
from kvcalc.engines.sglang.releases import (
    MAMBA_SLOTS_PER_REQUEST,
    MM_RESERVATION,
    REQUESTS_HIGH,
    REQUESTS_LOW,
    REQUESTS_PER_CONTEXT,
    VLM_CACHE_MIB,
    hybrid_swa,
)
from kvcalc.engines.sglang.releases import multimodal as is_multimodal
from kvcalc.errors import UsageError
from kvcalc.spec import AttentionCache

if TYPE_CHECKING:
    from kvcalc.engines.sglang.rules import SGLang
    from kvcalc.spec import ModelSpec

_GB = 1 << 30


@dataclass(frozen=True)
class SGLangPlan:
    """The pools SGLang builds for one GPU's budget.

    ``full_cell`` / ``swa_cell``: bytes one token takes across the layers of each pool (every
    cached layer is "full" unless the model has SGLang's hybrid sliding-window pool);
    ``state_bytes``: one request's Mamba/linear state across its layers. ``refusal``: SGLang's own
    reason for failing to start, when it would.
    """

    budget: int
    page_size: int
    full_cell: int
    swa_cell: int
    state_bytes: int
    swa_ratio: float
    mamba_ratio: float
    window: int | None
    context_len: int
    reserved: int  # the multimodal embedding cache's share of the budget
    kv_budget: int  # what the token pools get after the reservation and the state pool
    max_total_tokens: int
    swa_tokens: int | None
    mamba_slots: int | None  # max_mamba_cache_size
    max_running_requests: int
    refusal: str | None = None

    # --- the capacity-plan contract (calc.contracts.CapacityPlan) --------------------------------

    @property
    def held_by(self) -> None:
        return None

    @property
    def refused_because(self) -> str | None:
        return None if self.refusal is None else f"SGLang refuses this: {self.refusal}"

    def table_lines(self) -> list[str]:
        if self.refusal is not None:  # the verdict says why
            return []
        full = "token pool" if not self.swa_cell or self.full_cell else "SWA pool"
        lines = [f"SGLang pools   {full} {self.max_total_tokens:,} tokens x "
                 f"{self.full_cell or self.swa_cell:,} B, +1 padded page of {self.page_size}"]  # fmt: skip
        if self.swa_cell and self.full_cell and self.swa_tokens is not None:
            lines.append(f"               SWA pool {self.swa_tokens:,} tokens x {self.swa_cell:,} B")
        if self.mamba_slots is not None:
            lines.append(f"               state pool {self.mamba_slots:,} slots x {self.state_bytes:,} B "
                         "(max_mamba_cache_size), +1")  # fmt: skip
        lines.append(f"               max_running_requests {self.max_running_requests:,}")
        return lines

    def json_fields(self) -> dict[str, Any]:
        return {
            "sglang": {
                "page_size": self.page_size,
                "max_total_num_tokens": self.max_total_tokens,
                "swa_max_total_num_tokens": self.swa_tokens,
                "max_mamba_cache_size": self.mamba_slots,
                "max_running_requests": self.max_running_requests,
                "full_cell_bytes": self.full_cell,
                "swa_cell_bytes": self.swa_cell,
                "state_bytes_per_request": self.state_bytes,
                "pool_bytes": self.pool_bytes,
                "refusal": self.refusal,
            }
        }

    @property
    def hybrid_swa(self) -> bool:
        return self.swa_cell > 0

    @property
    def pool_bytes(self) -> int:
        """What the pools really allocate: every pool has one padded page more than it hands out
        (memory_pool.py: buffers of ``size + page_size`` rows; the Mamba pool ``size + 1`` slots)."""
        if self.refusal is not None:
            return 0
        full = (self.max_total_tokens + self.page_size) * self.full_cell
        swa = 0 if self.swa_tokens is None else (self.swa_tokens + self.page_size) * self.swa_cell
        state = 0 if self.mamba_slots is None else (self.mamba_slots + 1) * self.state_bytes
        return full + swa + state

    def requests_fit(self, tokens: int) -> int:
        """Requests of ``tokens`` the pools admit at once: whole pages in the token pool, and in the
        SWA pool the prefill admission floor min(tokens, window) + page_size
        (pool_configurator.py validate_swa_pool_size), at most max_running_requests."""
        if self.refusal is not None or tokens <= 0:
            return 0
        fit = self.max_running_requests
        if self.full_cell:
            fit = min(fit, self.max_total_tokens // pad(tokens, self.page_size))
        if self.swa_tokens is not None:
            window = tokens if self.window is None else min(tokens, self.window)
            fit = min(fit, self.swa_tokens // (window + self.page_size))
        return max(fit, 0)


def plan_of(fit: Fit) -> SGLangPlan:
    """The SGLang plan a fit under SGLang carries (its probe compares with it)."""
    if not isinstance(fit.plan, SGLangPlan):  # fit under the SGLang engine always plans
        raise UsageError("the SGLang probe compares with kvcalc's SGLang plan")
    return fit.plan


def sglang_plan(spec: ModelSpec, workload: Workload, engine: SGLang, budget: int, context_len: int) -> SGLangPlan:
    """Size SGLang's pools for ``budget`` bytes on one GPU (``_profile_available_bytes`` onward)."""
    hybrid = hybrid_swa(spec.checkpoint_type)
    # mm_runtime_reservation_gb: only from 0.5.18 (releases.py).
    multimodal = engine.version >= MM_RESERVATION and is_multimodal(
        spec.checkpoint_type, spec.top_model_type is not None
    )
    one = estimate(spec, replace(workload, tokens=1, batch=1, dp=1, pp=1, shared_prefix=0), engine=engine)
    full = swa = state = 0
    for g in one.groups:
        if g.state_bytes:
            state += g.layers * g.state_bytes
        elif g.grows_per_token and g.bytes_per_token:
            if hybrid and g.cache.token_bound is not None:
                swa += g.layers * g.bytes_per_token
            else:
                full += g.layers * g.bytes_per_token
    page = engine.page_size
    window = _window(spec) if hybrid else None
    # mm_runtime_reservation_gb: MiB / 1024 GB, off the budget in GB.
    reserved_gb = VLM_CACHE_MIB / 1024 if multimodal else 0.0
    rest_gb = budget / _GB - reserved_gb
    reserved = budget - int(rest_gb * _GB) if multimodal else 0
    base: dict[str, Any] = dict(budget=budget, page_size=page, full_cell=full, swa_cell=swa, state_bytes=state,
                                swa_ratio=engine.swa_ratio, mamba_ratio=engine.mamba_ratio, window=window,
                                context_len=context_len, reserved=reserved)  # fmt: skip
    slots = None
    if state:
        # _handle_max_mamba_cache: the state pool takes ratio / (1 + ratio) of the rest, in slots
        # of one request's state, with one padding slot.
        mamba_bytes = rest_gb * engine.mamba_ratio / (1 + engine.mamba_ratio) * _GB
        slots = int((mamba_bytes - state) // state)
        if slots <= 0:
            return SGLangPlan(**base, kv_budget=0, max_total_tokens=0, swa_tokens=None, mamba_slots=slots,
                              max_running_requests=0, refusal=(
                f"not enough memory for the Mamba/linear-attention state cache: max_mamba_cache_size {slots} "
                f"(one request's state is {state:,} B)"))  # fmt: skip
        rest_gb -= (slots + 1) * state / _GB
    if rest_gb <= 0:
        return SGLangPlan(**base, kv_budget=0, max_total_tokens=0, swa_tokens=None, mamba_slots=slots,
                          max_running_requests=0, refusal="the budget leaves no memory for the KV cache")  # fmt: skip
    available = int(rest_gb * _GB)
    swa_tokens = None
    if swa and full:
        # HybridSWAPoolConfigurator: one full-pool token costs full + ratio x swa bytes.
        tokens = int(available // (full + engine.swa_ratio * swa)) // page * page
        swa_tokens = int(tokens * engine.swa_ratio) // page * page
    elif swa:  # every layer sliding: one SWA pool, no ratio
        tokens = swa_tokens = available // swa // page * page
    elif full:
        tokens = available // full // page * page
    else:  # no per-token cache: SGLang sizes the empty pool to the context length
        tokens = context_len
    requests = _max_running_requests(tokens, context_len, slots)
    refusal = None
    if swa_tokens is not None and swa and full and window is not None and window + page >= swa_tokens:
        refusal = (f"its sliding-window pool ({swa_tokens:,} tokens) cannot hold one request: the admission floor "
                   f"is the window ({window:,}) + page_size ({page}); raise the budget "
                   "(or SGLang's --swa-full-tokens-ratio)")  # fmt: skip
    elif requests <= 0:
        refusal = (f"its state cache is too small to serve any request: max_mamba_cache_size {slots} / "
                   f"{MAMBA_SLOTS_PER_REQUEST} slots per request")  # fmt: skip
    return SGLangPlan(**base, kv_budget=available, max_total_tokens=tokens, swa_tokens=swa_tokens, mamba_slots=slots,
                      max_running_requests=max(requests, 0), refusal=refusal)  # fmt: skip


def _window(spec: ModelSpec) -> int | None:
    """The sliding_window_size SGLang's hybrid models report (resolve_sliding_window_size): the
    model classes' get_attention_sliding_window_size gives the config's window - 1 (gpt-oss,
    Gemma 4, MiMo-V2: seen in SGLang's own ModelConfig); Llama 4 has none, so its chunk."""
    windows = [c.window - 1 for c in spec.caches if isinstance(c, AttentionCache) and c.window is not None]
    chunks = [c.chunk for c in spec.caches if isinstance(c, AttentionCache) and c.chunk is not None]
    return max(windows or chunks, default=None)


def _max_running_requests(tokens: int, context_len: int, slots: int | None) -> int:
    """kv_cache_configurator.py resolve_max_num_reqs with no --max-running-requests: an estimate
    from the pool's size in contexts, clamped, at most half the tokens; a hybrid model at most a
    third of its state slots."""
    estimated = max(min(int(tokens / context_len * REQUESTS_PER_CONTEXT), REQUESTS_HIGH), REQUESTS_LOW)
    requests = min(estimated, tokens // 2)
    if slots is not None:
        requests = min(requests, slots // MAMBA_SLOTS_PER_REQUEST)
    return requests


def sglang_fit(spec: ModelSpec, w: Workload, engine: SGLang, budget: int, context_limit: int | None) -> Fit:
    """Fit in SGLang's own arithmetic: the token pool's size, the requests it admits, and the
    longest request its pools hold; a configuration SGLang refuses fits nothing, and says why."""
    context_len = context_limit or spec.max_context or w.tokens
    plan = sglang_plan(spec, w, engine, budget, context_len)
    notes = []
    if plan.reserved:
        notes.append(f"SGLang reserves {VLM_CACHE_MIB} MiB of the KV budget for a multimodal model's embedding cache "
                     "(SGLANG_VLM_CACHE_SIZE_MB)")  # fmt: skip
    if plan.mamba_slots is not None and plan.refusal is None:
        notes.append(
            f"SGLang gives the state pool {engine.mamba_ratio:g} / {1 + engine.mamba_ratio:g} of the budget "
            f"(its mamba_full_memory_ratio {engine.mamba_ratio:g}): {plan.mamba_slots:,} state slots "
            f"(max_mamba_cache_size) of {plan.state_bytes:,} B, {MAMBA_SLOTS_PER_REQUEST} per running request"
        )
    if plan.swa_tokens is not None and plan.full_cell and plan.refusal is None:
        notes.append(f"SGLang's sliding-window pool holds {plan.swa_tokens:,} tokens "
                     f"(its swa_full_tokens_ratio {engine.swa_ratio:g} of the full pool's)")  # fmt: skip
    if plan.refusal is not None:  # the verdict says why (SGLangPlan.refused_because)
        return Fit(kv_budget=budget, tokens=w.tokens, batch=w.batch, max_tokens=0, max_concurrency=0,
                   max_context=0, engine=engine.name, plan=plan, notes=tuple(notes))  # fmt: skip
    batch = -(-w.batch // w.dp)
    limit = min(context_len, SEARCH_LIMIT)
    found = largest(lambda n: plan.requests_fit(n) >= batch, limit)
    return Fit(
        kv_budget=budget,
        tokens=w.tokens,
        batch=w.batch,
        max_tokens=plan.max_total_tokens,
        max_concurrency=plan.requests_fit(w.tokens) * w.dp,
        max_context=limit if found is None else found,
        engine=engine.name,
        plan=plan,
        notes=tuple(notes),
    )
