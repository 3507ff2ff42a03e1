"""vLLM's own capacity arithmetic: the KV cache spec groups its layers form, the block-table
groups, pages and blocks a budget buys, "GPU KV cache size: N tokens" and "Maximum concurrency"
(vllm/v1/core/kv_cache_utils.py), which fit follows for vLLM instead of searching the estimate."""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from kvcalc.calc.estimate import Plan, Workload, estimate, stage_entries
from kvcalc.calc.fit import SEARCH_LIMIT, Fit, largest
from kvcalc.calc.pages import cdiv
from kvcalc.engines.vllm.groups import VllmGroup, group_layers
from kvcalc.engines.vllm.releases import version_text
from kvcalc.errors import UsageError
from kvcalc.spec import ModelSpec

if TYPE_CHECKING:
    from kvcalc.engines.vllm.rules import VLLM


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

    # --- the capacity-plan contract (calc.contracts.CapacityPlan) --------------------------------

    @property
    def held_by(self) -> VLLM:
        """The engine as the plan configured it (pipeline stages, the max_model_len's blocks)."""
        return self.engine

    @property
    def refused_because(self) -> str | None:
        return None

    def table_lines(self) -> list[str]:
        groups = ", ".join(
            f"{k.kind} x{k.layers} ({k.groups} group(s), {k.block_size}-token blocks)" for k in self.kinds
        )
        block = self.page_bytes * self.group_size
        return [
            f"vLLM layout    {groups}",
            f"vLLM block     {self.group_size} layer(s) x {self.page_bytes:,} B page = {block:,} B",
            f"vLLM blocks    {self.num_blocks:,}",
        ]

    def json_fields(self) -> dict[str, Any]:
        return {
            "vllm": {
                "num_blocks": self.num_blocks,
                "page_bytes": self.page_bytes,
                "group_size": self.group_size,
                "groups": [
                    {"kind": k.kind, "layers": k.layers, "groups": k.groups, "block_size": k.block_size}
                    for k in self.kinds
                ],
            }
        }

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


def plan_of(fit: Fit) -> VllmPlan:
    """The vLLM plan a fit under vLLM carries (its probe compares with it)."""
    if not isinstance(fit.plan, VllmPlan):  # fit under a vLLM engine always plans
        raise UsageError("the vLLM probe compares with kvcalc's vLLM plan")
    return fit.plan


def vllm_plan(spec: ModelSpec, workload: Workload, engine: VLLM, budget: int) -> VllmPlan:
    """Group the layers of the most loaded worker as vLLM does and count its blocks."""
    w = workload
    # Batches in flight grow with pipeline stages (VllmConfig.max_concurrent_batches).
    engine = replace(engine, pipeline_stages=w.pp)
    # Page sizes come from the estimator itself: one token of one sequence, per layer and GPU, so
    # fit and estimate share the formats, heads per GPU and state sizes.
    encoder = w.encoder_tokens or spec.encoder_tokens or (w.tokens if spec.is_encoder_decoder else None)
    one = estimate(spec, replace(w, tokens=1, batch=1, dp=1, pp=1, shared_prefix=0, encoder_tokens=encoder),
                   engine=engine)  # fmt: skip
    # A state's own bytes (its parts), not the page the estimate's layout gives it: the grouping pads it.
    per_layer = {g.cache: (g.bytes_per_token, g.own_state_bytes) for g in one.groups if not g.padding}
    stage = max(stage_entries(spec, w.pp), key=len)
    layers = [(spec.caches[i], *per_layer[spec.caches[i]]) for i in stage]
    if not any(cache.caches_tokens or cache.is_state for cache, _, _ in layers):
        raise UsageError(f"{spec.name} has no KV cache for vLLM to size")
    grouped = group_layers(engine, layers)
    # The formats chosen, as estimate notes them (the grouping's own notes among them).
    notes = list(dict.fromkeys((*one.notes, *grouped.notes)))
    num_blocks = budget // grouped.page_bytes // grouped.group_size
    return VllmPlan(grouped.page_bytes, grouped.group_size, num_blocks, grouped.kinds, engine, tuple(notes))


def vllm_fit(spec: ModelSpec, w: Workload, engine: VLLM, budget: int, context_limit: int | None) -> Fit:
    """Fit in vLLM's own arithmetic: the plan's blocks for the budget, its logged token count and
    concurrency, and the longest context by its block tables."""
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
    # The encoder length estimate assumes (and notes) when none is given: the request's own.
    encoder = w.encoder_tokens or spec.encoder_tokens or w.tokens
    if spec.is_encoder_decoder and encoder != (w.encoder_tokens or spec.encoder_tokens):
        notes.append(Plan.assumed_encoder_note(encoder))
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
        plan=plan,
        notes=tuple(notes),
    )
