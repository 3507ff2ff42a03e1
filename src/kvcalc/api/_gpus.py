"""The GPU presets (kvcalc.gpus, read from gpus.yaml)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcalc.gpus import GPU


def list_gpus() -> tuple[GPU, ...]:
    """Every GPU preset: the cards, then the Macs (one per chip and memory size)."""
    from kvcalc.gpus import GPUS

    return GPUS


def show_gpu(name: str) -> GPU:
    """One GPU preset by name or alias (case-insensitive); an unknown one is refused in one line
    naming the closest."""
    from kvcalc import checks
    from kvcalc.gpus import find_gpu

    checks.text(name, "name", optional=False)
    return find_gpu(name, param="name")
