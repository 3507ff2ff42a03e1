"""Engines: one module each, and the registry ``--engine``, help texts and completion read.

Adding an engine is one module here with an ``Engine`` subclass (its storage rules, each citing
the engine's source) and one entry in ``REGISTRY``. The registry names each engine's module
without importing it: a start-up pays only for the engine it uses (each engine module costs
about 2 ms to import, and ``kvcalc --help`` needs only the names and summaries).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any, NamedTuple

from kvcalc.errors import UsageError
from kvcalc.spec import LayerCache

from .base import Engine, EngineOptions, cdiv, pad
from .theoretical import THEORETICAL, Theoretical

if TYPE_CHECKING:
    from .llamacpp import LlamaCpp
    from .sglang import SGLang
    from .transformers import Transformers
    from .vllm import VLLM


class EngineEntry(NamedTuple):
    """A registered engine: its name, where its class lives, and one line for --help."""

    name: str
    module: str
    class_name: str
    summary: str
    aliases: tuple[str, ...] = ()


REGISTRY: dict[str, EngineEntry] = {
    entry.name: entry
    for entry in (
        EngineEntry("theoretical", "theoretical", "Theoretical", "what attention must keep (the default)"),
        EngineEntry("transformers", "transformers", "Transformers", "DynamicCache: sliding layers keep W-1"),
        EngineEntry("vllm", "vllm", "VLLM", "16-token blocks (MLA 64), sliding reservation"),
        EngineEntry("sglang", "sglang", "SGLang", "token pool in pages"),
        EngineEntry("llama.cpp", "llamacpp", "LlamaCpp", "cells padded to 256, SWA cells", ("llamacpp", "llama-cpp")),
    )
}
ENGINE_NAMES = tuple(REGISTRY)

__all__ = [
    "ENGINE_NAMES", "REGISTRY", "THEORETICAL", "VLLM", "Engine", "EngineEntry", "EngineOptions", "LlamaCpp",
    "SGLang", "Theoretical", "Transformers", "cdiv", "engine_class", "make_engine", "pad", "uses_mla",
]  # fmt: skip


def _load(entry: EngineEntry) -> type[Engine]:
    cls: type[Engine] = getattr(import_module(f"{__name__}.{entry.module}"), entry.class_name)
    return cls


def engine_class(name: str) -> type[Engine]:
    """The engine class a name (or alias, any case) stands for."""
    key = name.strip().lower()
    for entry in REGISTRY.values():
        if key == entry.name or key in entry.aliases:
            return _load(entry)
    raise UsageError(f"unknown engine {name!r}; choose one of {', '.join(ENGINE_NAMES)}", param="engine")


def __getattr__(name: str) -> Any:
    """The engine classes by name (``from kvcalc.engines import VLLM``), imported on first use."""
    for entry in REGISTRY.values():
        if entry.class_name == name:
            return _load(entry)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_engine(
    name: str,
    *,
    block_size: int | None = None,
    max_num_batched_tokens: int | None = None,
    n_ubatch: int | None = None,
    kv_unified: bool = False,
    uses_mla: bool = False,
) -> tuple[Engine, list[str]]:
    """The engine a name stands for, configured by the options it reads, with its defaults noted."""
    options = EngineOptions(
        block_size=block_size,
        max_num_batched_tokens=max_num_batched_tokens,
        n_ubatch=n_ubatch,
        kv_unified=kv_unified,
        uses_mla=uses_mla,
    )
    return engine_class(name).configure(options)


def uses_mla(caches: tuple[LayerCache, ...]) -> bool:
    return any(c.is_latent for c in caches)
