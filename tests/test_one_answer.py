"""One question, one answer: the bytes of a workload under an engine are the same in estimate,
in compare's own row (marked *) and in fit's needed bytes, for every preset under every engine.

Before hardening round 4 they differed: compare rebuilt the model's own row as a variant (61 x 576
x 2 = 70,272 B a token for DeepSeek-V3.2's latent became 140,544, its indexer swallowed), and fit
alone counted vLLM's padded layer-group slots (gemma-3-27b, 5,000 x 3: 7,630,749,696 B in
estimate, 8,638,955,520 B in fit). A preset an engine refuses is refused by all three alike.
"""

from __future__ import annotations

import pytest

from kvcalc import api
from kvcalc.engines import REGISTRY
from kvcalc.errors import KvcalcError

PRESETS = [summary.spec.name for summary in api.list_presets()]
ENGINES = [*REGISTRY, "vllm-cpu"]
WORKLOADS = ((5000, 3), (100, 1), (4097, 2))


def _answers(preset: str, engine: str, tokens: int, batch: int) -> tuple[object, object, object]:
    """(estimate, compare's own row, fit's needed bytes) on one GPU, or the refusal's class."""

    def outcome(ask: object) -> object:
        try:
            return ask()  # type: ignore[operator]
        except KvcalcError as exc:
            return type(exc).__name__

    est = outcome(lambda: api.estimate(preset, tokens=tokens, batch=batch, engine=engine).total_bytes)
    rows = outcome(lambda: api.compare([preset], tokens=[tokens], batch=batch, engine=engine).rows)
    own = [r.total_bytes for r in rows if r.candidate.own] if isinstance(rows, tuple) else [rows]
    needed = outcome(
        lambda: (
            api.fit(
                preset, tokens=tokens, batch=batch, engine=engine, capacity=api.Capacity(kv_budget=2**40)
            ).verdict.needed_bytes
        )
    )
    return est, own[0] if own else None, needed


@pytest.mark.parametrize("engine", ENGINES)
def test_estimate_compare_and_fit_give_one_answer(engine: str) -> None:
    differ = []
    for preset in PRESETS:
        for tokens, batch in WORKLOADS:
            est, own, needed = _answers(preset, engine, tokens, batch)
            if isinstance(est, str):
                continue  # refused by estimate, naming why (tests/test_presets_commands.py holds them)
            if not (est == own == needed):
                differ.append(f"{preset} {tokens}x{batch}: estimate {est}, compare {own}, fit {needed}")
    assert not differ, "\n".join(differ)


def test_the_issue_figures() -> None:
    # DeepSeek-V3.2 at 5,000 tokens: 61 x (576 latent + 128 indexer keys) x 2 B = 61 x 1,408 = 85,888 B a
    # token, 429,440,000 B; the latent alone is 61 x 576 x 2 = 70,272 B (KNOWLEDGE.md §5, ISCA 2025).
    est, own, needed = _answers("deepseek-v3.2", "theoretical", 5000, 1)
    assert est == own == needed == 61 * (576 + 128) * 2 * 5000
    # gemma-3-27b under vLLM, 5,000 x 3: 52 sliding + 10 full layers group in 10s (52 >= 1.5 x 10), the
    # sliding kind in 6 groups of 10, 8 empty slots; 70 slots x 3 x cdiv(5,000, 16) = 313 blocks x 16 x
    # 16 heads x 128 x 2 (K, V) x 2 B = 70 x 3 x 313 x 131,072 = 8,615,362,560 (every layer's window
    # 1,024 - 1 + 2 x 8,192 tokens in flight reaches past 5,000: no layer drops a token).
    est, own, needed = _answers("gemma-3-27b", "vllm", 5000, 3)
    assert est == own == needed == 70 * 3 * 313 * 131_072
