"""mlx-lm's prompt cache: its plugin (here: the name, releases and knobs the registry and the CLI
read, light) and its rules (rules.py), loaded on first use (``from kvcalc.engines.mlx import mlx_quantized``)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from kvcalc.engines.knobs import EngineOptions, EnginePlugin, knob
from kvcalc.spec import MAX_DIMENSION


class MLXOptions(EngineOptions):
    """mlx-lm's knobs, in its own names (mlx_lm.generate / generate_step): ``max_kv_size``,
    ``prefill_step_size``, ``kv_bits``, ``kv_group_size``, ``quantized_kv_start``,
    ``max_tokens``: how many of the context's tokens were generated after the prompt (0: the
    whole context is the prompt), and for fit ``prompt_cache_bytes`` (mlx_lm.server's limit on the
    finished prompts' caches it keeps)."""

    max_kv_size: int | None = knob(
        flag="--max-kv-size", engine_flag="--max-kv-size", default="none (every token)",
        help="mlx: a rotating cache of N tokens in every layer (the first 4 kept), for models with no make_cache.",
    )  # fmt: skip
    prefill_step_size: int | None = knob(
        flag="--prefill-step-size", engine_flag="--prefill-step-size", default="2048",
        help="mlx: prompt tokens per prefill step (default 2048).",
    )  # fmt: skip
    kv_bits: int | None = knob(
        flag="--kv-bits", engine_flag="--kv-bits", maximum=64, default="none (the model dtype)",
        help="mlx: quantize the KV cache to N bits (2-6 or 8; mx.quantize).",
    )  # fmt: skip
    # A quantization group is at most a row's length.
    kv_group_size: int | None = knob(
        flag="--kv-group-size", engine_flag="--kv-group-size", maximum=MAX_DIMENSION, default="64",
        help="mlx: quantization group of --kv-bits (32, 64, 128; default 64).",
    )  # fmt: skip
    # 0 is a value: mlx-lm quantizes from the first token.
    quantized_kv_start: int | None = knob(
        flag="--quantized-kv-start", engine_flag="--quantized-kv-start", minimum=0, default="5000",
        help="mlx: the cache is quantized whole once it holds N tokens (default 5000; below, the model dtype).",
    )  # fmt: skip
    # 0 is a value: no generated tokens.
    max_tokens: int | None = knob(
        flag="--max-tokens", engine_flag="-m, --max-tokens", minimum=0, default="0 (all prompt)",
        help="mlx: N of the context's tokens were generated after the prompt (default 0: all prompt).",
    )  # fmt: skip
    prompt_cache_bytes: int | None = knob(
        flag="--prompt-cache-bytes", engine_flag="--prompt-cache-bytes (mlx_lm.server)", kind="size",
        maximum=2**50, metavar="SIZE", default="none", sizes_cache=False,
        help="mlx: room for mlx_lm.server's cache of finished prompts (its --prompt-cache-bytes).",
    )  # fmt: skip


PLUGIN = EnginePlugin(
    name="mlx",
    summary="mlx-lm (Apple silicon): 256-token steps, sliding rings where its model keeps them; mlx@0.32.2",
    rules="kvcalc.engines.mlx.rules:MLX",
    options=MLXOptions,
    versions=("0.32",),
    default_version="0.32.2",
    panel="mlx-lm (--engine mlx)",
)


if TYPE_CHECKING:
    from kvcalc.engines.mlx.rules import MLX, mlx_quantized

# The rules' names this package hands out; its submodules (probe.py, ...) import as modules.
_RULES = (
    "MLX",
    "mlx_quantized",
)

__all__ = ["MLX", "PLUGIN", "MLXOptions", "mlx_quantized"]


def __getattr__(name: str) -> Any:
    if name in _RULES:
        return getattr(import_module(f"{__name__}.rules"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
