"""What the Nemotron-H and NAS (block_configs) test modules share."""

from __future__ import annotations

from kvcalc.spec import Kind

SUPER_49B = "Llama-3_3-Nemotron-Super-49B-v1.json"


def _count(kinds: list[Kind]) -> dict[str, int]:
    out: dict[str, int] = {}
    for kind in kinds:
        out[str(kind)] = out.get(str(kind), 0) + 1
    return out
