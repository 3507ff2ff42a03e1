"""Short labels shared by the JSON dicts and the tables (no rich here: ``--json`` imports it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcalc.spec import ModelSpec


def attention_kind(spec: ModelSpec) -> str:
    """A short label: MHA / GQA / MQA / MLA, plus the hybrid and windowed layer kinds present."""
    base = ""
    extras: list[str] = []
    for cache in spec.caches:
        if cache.is_latent:
            base = "MLA"
        elif cache.caches_tokens and not base:
            kv = cache.rows(1)[2]
            heads = spec.query_heads
            if kv == 1 and heads != 1:
                base = "MQA"
            elif heads is None or kv == heads:
                base = "MHA"
            else:
                base = "GQA"
        label = cache.kind.feature
        if label and label not in extras:
            extras.append(label)
    if not base:  # no attention at all: a pure state-space or linear model
        return " + ".join(extras)
    return " + ".join([base, *extras])
