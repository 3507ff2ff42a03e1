"""The shape the code promises: one registry of engines that every path reads, layer kinds that
answer for themselves, and capacity (fit) built on the same arithmetic as estimate."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvcalc.api import load_model
from kvcalc.calc.estimate import Workload
from kvcalc.calc.fit import fit
from kvcalc.engines import ENGINE_NAMES, REGISTRY, VLLM, Engine, SGLang, engine_class, make_engine
from kvcalc.engines.vllm.capacity import vllm_plan
from kvcalc.errors import UsageError
from kvcalc.spec import (
    AttentionCache,
    CompressedCache,
    CompressorBufferCache,
    CompressorOverlapCache,
    IndexerCache,
    Kind,
    KVWindowCache,
    LatentCache,
    NoCache,
    SharedCache,
    StateCache,
)
from tests.helpers.theoretical import estimate

# --- the engine registry ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_every_registered_engine_is_complete(name: str) -> None:
    entry = REGISTRY[name]
    cls = engine_class(name)
    assert issubclass(cls, Engine) and cls.__name__ == entry.class_name
    engine, _notes = make_engine(name)
    assert engine.name == name and isinstance(engine, cls)
    assert entry.summary  # one line for --help and the docs
    for alias in entry.aliases:
        assert engine_class(alias) is cls
        assert engine_class(alias.upper()) is cls


def test_unknown_engine_names_every_engine() -> None:
    with pytest.raises(UsageError) as info:
        engine_class("tensorrt")
    for name in ENGINE_NAMES:
        assert name in str(info.value)


def test_engine_help_and_completion_read_the_registry(run_cli) -> None:
    from kvcalc.cli import _complete_engine

    assert _complete_engine("") == list(ENGINE_NAMES)
    text = " ".join(run_cli("estimate", "--help").stdout.split())
    for name in REGISTRY:  # the names; each engine's summary is no longer pasted into every --help
        assert name in text


# --- layer kinds answer for themselves ------------------------------------------------------------------

EXAMPLES = [
    AttentionCache(8, 128, 128),
    AttentionCache(8, 128, 128, window=4096),
    AttentionCache(8, 128, 128, chunk=8192),
    AttentionCache(8, 128, 128, tokens="encoder"),
    LatentCache(512, 64, 192, 128),
    StateCache("linear_attention", 8192, 4, 16 * 128 * 128),
    StateCache("mamba", 5120, 4, 5120 * 16),
    StateCache("short_conv", 2048, 3, 0),
    StateCache("lightning_attention", 0, 1, 64 * 128 * 128),
    StateCache("rg_lru", 2560, 4, 2560),
    SharedCache(),
    NoCache(),
    IndexerCache(128),
    AttentionCache(8, 128, 128, tokens="image"),
    KVWindowCache(512, 128),
    CompressedCache(512, 4),
    CompressorBufferCache(4, 1280, 1280),
    CompressorOverlapCache(4, 640),
]


def test_one_kind_each_and_every_kind_covered() -> None:
    assert sorted(c.kind for c in EXAMPLES) == sorted(Kind)


@pytest.mark.parametrize("cache", EXAMPLES, ids=lambda c: str(c.kind))
def test_kind_contract(cache) -> None:
    heads, dims = cache.describe()
    assert heads and dims
    assert cache.kind.short
    k_row, v_row, _per_gpu = cache.rows(1)
    # A layer stores rows per token exactly when it has elements per token.
    assert (k_row + v_row > 0) == cache.caches_tokens == (cache.elements_per_token > 0)
    assert cache.is_state == (sum(cache.state_elements(whole_kernel=False)) > 0)
    # 8 KV heads split over 2 ranks: 4 each (vllm get_num_kv_heads); MLA replicated.
    if isinstance(cache, AttentionCache):
        assert cache.rows(2) == (4 * 128, 4 * 128, 4)
    if isinstance(cache, LatentCache):
        assert cache.rows(2) == (576, 0, None)


# --- fit and estimate agree, engine by engine -------------------------------------------------------------

MODELS = ["llama-3.1-8b", "gpt-oss-20b", "mistral-7b-v0.1", "deepseek-v2-lite", "llama-4-scout", "qwen3-next-80b-a3b"]


@pytest.mark.parametrize("engine_name", ENGINE_NAMES)
@pytest.mark.parametrize("model", MODELS)
def test_fit_inverts_estimate(engine_name: str, model: str) -> None:
    """fit's answers sit exactly at estimate's boundary: the longest context and the largest batch
    it reports fit the budget under estimate's own arithmetic, and one more does not."""
    spec = load_model(model)
    engine, _ = make_engine(engine_name, uses_mla=any(c.is_latent for c in spec.caches))
    workload = Workload(tokens=4096, batch=1)
    budget = 3 * 2**30
    result = fit(spec, workload, engine, budget)

    def per_gpu(tokens: int, batch: int) -> int:
        return estimate(spec, replace(workload, tokens=tokens, batch=batch), engine=engine).per_gpu_bytes

    if isinstance(engine, VLLM):
        # vLLM's own arithmetic: pages are estimate's bytes per token of one layer x block size.
        plan = vllm_plan(spec, workload, engine, budget)
        one = estimate(spec, replace(workload, tokens=1), engine=engine)
        rows = {g.cache: g.bytes_per_token for g in one.groups if g.cache.caches_tokens}
        for group in plan.kinds:
            if not group.cache.is_state and group.block_size == engine.block_size:
                assert plan.page_bytes % (engine.block_size * rows[group.cache]) == 0
        # And every request of 4,096 tokens that fits in blocks fits in estimate's bytes.
        assert result.max_concurrency * per_gpu(4096, 1) <= budget + plan.page_bytes * plan.group_size * len(plan.kinds)
        return
    if isinstance(engine, SGLang):
        # SGLang's own arithmetic (engines/sglang/capacity.py, checked against SGLang's pools in
        # tests/engines/sglang): requests are admitted by whole pages of its token pool.
        plan = result.plan
        assert plan is not None
        assert result.max_concurrency == plan.requests_fit(4096)
        if plan.refusal is None and result.max_concurrency < plan.max_running_requests:
            # Bounded by the token pool and not by the request cap: one more would not fit in it.
            assert result.max_concurrency * 4096 <= plan.max_total_tokens
            assert plan.swa_tokens is not None or (result.max_concurrency + 1) * 4096 > plan.max_total_tokens
        return
    n = result.max_concurrency
    assert per_gpu(4096, n) <= budget < per_gpu(4096, n + 1)
    context = result.max_context
    if context is not None and not result.max_context_capped:
        assert per_gpu(context, 1) <= budget < per_gpu(context + 1, 1)
    else:
        assert not any(c.grows_without_bound for c in spec.caches)
