"""The engines kvcalc models and their knobs, read from the engines' plugins (no engine's rules load)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcalc.engines.knobs import EnginePlugin


def list_engines() -> list[EnginePlugin]:
    """Every registered engine's plugin (name, aliases, releases, summary, knobs), in help's order."""
    from kvcalc.engines import REGISTRY

    return list(REGISTRY.values())


def show_engine(name: str) -> EnginePlugin:
    """One engine's plugin by name or alias (any case; an ``@VERSION`` is ignored); its knobs are
    ``plugin.options.knobs()``. An unknown name is a one-line UsageError naming the engines."""
    from kvcalc import checks
    from kvcalc.engines import engine_entry
    from kvcalc.errors import UsageError

    checks.instance(name, "name", str, "an engine's name (a str) such as 'vllm'")
    try:
        return engine_entry(name)
    except UsageError as exc:
        raise UsageError(str(exc), param="name") from None
