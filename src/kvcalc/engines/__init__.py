"""Engines: one module each, and the registry ``--engine``, help texts and completion read.

Adding an engine is one module here with an ``Engine`` subclass (its storage rules, each citing
the engine's source) and one line in ``REGISTRY``.
"""

from __future__ import annotations

from kvcalc.errors import UsageError
from kvcalc.spec import LayerCache

from .base import Engine, EngineOptions, cdiv, pad
from .llamacpp import LlamaCpp
from .sglang import SGLang
from .theoretical import THEORETICAL, Theoretical
from .transformers import Transformers
from .vllm import VLLM

REGISTRY: dict[str, type[Engine]] = {
    "theoretical": Theoretical,
    "transformers": Transformers,
    "vllm": VLLM,
    "sglang": SGLang,
    "llama.cpp": LlamaCpp,
}
ENGINE_NAMES = tuple(REGISTRY)

__all__ = [
    "ENGINE_NAMES", "REGISTRY", "THEORETICAL", "VLLM", "Engine", "EngineOptions", "LlamaCpp", "SGLang",
    "Theoretical", "Transformers", "cdiv", "engine_class", "make_engine", "pad", "uses_mla",
]  # fmt: skip


def engine_class(name: str) -> type[Engine]:
    """The engine class a name (or alias, any case) stands for."""
    key = name.strip().lower()
    for registered, cls in REGISTRY.items():
        if key == registered or key in cls.aliases:
            return cls
    raise UsageError(f"unknown engine {name!r}; choose one of {', '.join(ENGINE_NAMES)}")


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
