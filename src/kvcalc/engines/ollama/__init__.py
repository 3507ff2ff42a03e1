"""Ollama's KV cache: its plugin (here: the name, releases and knobs the registry and the CLI read,
light) and its rules (rules.py: llama.cpp's cache as Ollama runs it, by release), loaded on first
use (``from kvcalc.engines.ollama import Ollama``).

kvcalc's workload is Ollama's: ``--tokens`` is ``num_ctx`` (a Modelfile's ``PARAMETER num_ctx``,
``OLLAMA_CONTEXT_LENGTH``), ``--batch`` is ``OLLAMA_NUM_PARALLEL`` (the slots, each of num_ctx
tokens), and ``--kv-dtype`` is ``OLLAMA_KV_CACHE_TYPE`` (f16, q8_0, q4_0). There is no
num_parallel knob: Ollama allocates ``num_ctx x num_parallel`` cells for num_parallel slots
(llm/server.go: ``KvSize: opts.NumCtx * numParallel`` up to v0.24.0, ``-c NumCtx*numParallel -np
numParallel`` from v0.30.0), exactly kvcalc's batch of sequences of --tokens each, so a knob
would say --batch twice. Only flash attention, which decides whether Ollama honours a quantized
cache type (and, before v0.13, the cell padding), is a knob of its own.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from kvcalc.engines.knobs import EngineOptions, EnginePlugin, knob

# Ollama's minor releases whose cache rules kvcalc models (rules.py says which changed where): from
# 0.5 (OLLAMA_KV_CACHE_TYPE, OLLAMA_CONTEXT_LENGTH) to 0.32 (github.com/ollama/ollama tags, the
# newest stable v0.32.15).
OLLAMA_VERSIONS = tuple(f"0.{minor}" for minor in range(5, 33))
DEFAULT_VERSION = "0.32"


class OllamaOptions(EngineOptions):
    """Ollama's knob: ``OLLAMA_FLASH_ATTENTION`` (None: the release's default)."""

    flash_attention: int | None = knob(
        flag="--flash-attention", engine_flag="OLLAMA_FLASH_ATTENTION", minimum=0, maximum=1, metavar="0|1",
        default="by release and model",
        help="Ollama: OLLAMA_FLASH_ATTENTION (1 on, 0 off). Default: off before 0.12.5, then on for the "
        "models Ollama lists, auto (on on CUDA) from 0.30. A quantized --kv-dtype needs it on.",
    )  # fmt: skip


PLUGIN = EnginePlugin(
    name="ollama",
    summary="num_ctx x OLLAMA_NUM_PARALLEL (--tokens x --batch) on its bundled llama.cpp; ollama@0.24 etc. "
    f"for a release (default {DEFAULT_VERSION})",
    rules="kvcalc.engines.ollama.rules:Ollama",
    options=OllamaOptions,
    versions=OLLAMA_VERSIONS,
    default_version=DEFAULT_VERSION,
    panel="Ollama (--engine ollama)",
)


if TYPE_CHECKING:
    from kvcalc.engines.ollama.rules import Ollama

_RULES = ("Ollama",)

__all__ = ["DEFAULT_VERSION", "OLLAMA_VERSIONS", "PLUGIN", "Ollama", "OllamaOptions"]


def __getattr__(name: str) -> Any:
    if name in _RULES:
        return getattr(import_module(f"{__name__}.rules"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
