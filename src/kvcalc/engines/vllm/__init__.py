"""vLLM's paged cache: its plugin (options.py: the name, releases and knobs the registry and the CLI
read) and its rules (rules.py), loaded on first use (``from kvcalc.engines.vllm import VLLM``)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from kvcalc.engines.vllm.options import PLUGIN, VLLM_VERSIONS, VLLMOptions

if TYPE_CHECKING:
    from kvcalc.engines.vllm.rules import CUDA_BLOCK_MULTIPLE, INDEXER_FP8, VLLM

# The rules' names this package hands out; its submodules (probe.py, ...) import as modules.
_RULES = (
    "CUDA_BLOCK_MULTIPLE",
    "INDEXER_FP8",
    "VLLM",
)

__all__ = ["CUDA_BLOCK_MULTIPLE", "INDEXER_FP8", "PLUGIN", "VLLM", "VLLM_VERSIONS", "VLLMOptions"]


def __getattr__(name: str) -> Any:
    if name in _RULES:
        return getattr(import_module(f"{__name__}.rules"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
