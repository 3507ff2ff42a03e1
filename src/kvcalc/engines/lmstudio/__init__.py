"""LM Studio as an engine: its two runtimes, each the engine it runs with LM Studio's defaults (here:
the plugins the registry and the CLI read, light; the rules in rules.py, loaded on first use).

Two plugins, not one choosing by model format: LM Studio picks the runtime by the file it loads (a
GGUF runs on its llama.cpp runtime, an MLX folder on its MLX runtime: lmstudio.ai/docs/app/runtimes/mlx,
"the MLX runtime only supports models in MLX format, and the llama.cpp runtime only supports models in
GGUF format"), and kvcalc is given a model's config, not the file, so the format is not known; the two
runtimes also take different settings (llama.cpp's batch sizes and K/V cache types, MLX's KV bits), so
each plugin lists exactly the knobs its runtime has and refuses the others. ``lmstudio`` is the
llama.cpp runtime (GGUF, on CUDA, Vulkan, Metal or the CPU), ``lmstudio-mlx`` the MLX runtime (Apple
silicon), as ``llama.cpp`` / ``llama-server`` and ``mlx`` are here.

Sources: lmstudio-ai/lmstudio-js packages/lms-shared-types/src/llm/LLMLoadModelConfig.ts (the load
settings: maxParallelPredictions, useUnifiedKvCache, evalBatchSize, physicalBatchSize, the K/V cache
types, mlxKvCacheQuantization), lmstudio-ai/docs @ c6854fb (1_developer/2_rest/list.md and load.md:
a loaded instance's defaults context_length 4096, eval_batch_size 512, parallel 4;
0_app/5_advanced/parallel-requests.md: Max Concurrent Predictions 4 by default), lmstudio-ai/mlx-engine
@ 08f0c07 (mlx_engine/generate.py load_model, model_kit/model_kit.py, utils/kv_cache_quantization.py).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from kvcalc.engines.knobs import EngineOptions, EnginePlugin, knob

# LM Studio's defaults, as its docs and SDK state them (see rules.py for where each applies).
# lmstudio-ai/docs 1_developer/2_rest/list.md (@ c6854fb): a loaded instance's config, defaults
# included: "context_length": 4096, "eval_batch_size": 512, "parallel": 4.
DEFAULT_CONTEXT_LENGTH = 4096
DEFAULT_EVAL_BATCH = 512
# 0_app/5_advanced/parallel-requests.md: "By default, Max Concurrent Predictions is set to 4."
DEFAULT_PARALLEL = 4
# The runtime releases LM Studio's published logs name (runtime, LM Studio release, source). LM Studio
# publishes its runtimes by its own version (llama.cpp runtime v2.x), not by the llama.cpp build they
# bundle; none of the sources read here gives that build number, so none is recorded.
RUNTIME_RELEASES = (
    ("llama.cpp (metal) v2.14.0", "0.4.12", "https://github.com/lmstudio-ai/lmstudio-bug-tracker/issues/1862"),
    ("llama.cpp (cuda12) v2.20.1", "0.4.16", "https://github.com/lmstudio-ai/lmstudio-bug-tracker/issues/2024"),
)


def _parallel() -> Any:
    return knob(flag="--parallel", engine_flag="Max Concurrent Predictions (lms load --parallel)",
                default=f"{DEFAULT_PARALLEL}",
                help=f"LM Studio: predictions run at once (Max Concurrent Predictions, default "
                f"{DEFAULT_PARALLEL}).")  # fmt: skip


class LMStudioOptions(EngineOptions):
    """LM Studio's llama.cpp runtime's load settings that shape its cache: Max Concurrent
    Predictions (``parallel``), Unified KV Cache off (``no_kv_unified``), Evaluation Batch Size
    (``n_batch``) and the physical batch size (``ubatch``)."""

    parallel: int | None = _parallel()
    no_kv_unified: bool = knob(
        flag="--no-kv-unified", engine_flag="Unified KV Cache off (useUnifiedKvCache: false)", kind="flag",
        default="off (unified)",
        help="LM Studio: each prediction its own cache of the full context length (Unified KV Cache off).",
    )  # fmt: skip
    n_batch: int | None = knob(flag="--n-batch", engine_flag="Evaluation Batch Size (evalBatchSize)",
                               default=f"{DEFAULT_EVAL_BATCH}",
                               help="LM Studio: Evaluation Batch Size (default 512).")  # fmt: skip
    ubatch: int | None = knob(flag="--ubatch", engine_flag="physicalBatchSize", default="512",
                              help="LM Studio: physical batch size (default 512).")  # fmt: skip


class LMStudioMLXOptions(EngineOptions):
    """LM Studio's MLX runtime's load settings that shape its cache: the context length (mlx-engine's
    ``max_kv_size``), KV Cache Quantization (``kv_bits``, ``kv_group_size``, ``quantized_kv_start``)
    and Max Concurrent Predictions (``parallel``)."""

    max_kv_size: int | None = knob(
        flag="--max-kv-size", engine_flag="Context Length (lms load --context-length)",
        default="none (every token)",
        help="LM Studio MLX: the context length, mlx-engine's max_kv_size (a rotating cache of N tokens).",
    )  # fmt: skip
    kv_bits: int | None = knob(flag="--kv-bits", engine_flag="KV Cache Quantization bits (mlxKvCacheQuantization)",
                               maximum=64, default="none (the model dtype)",
                               help="LM Studio MLX: quantize the KV cache to N bits (2, 3, 4, 6 or 8).")  # fmt: skip
    kv_group_size: int | None = knob(flag="--kv-group-size", engine_flag="KV Cache Quantization group size",
                                     maximum=128, default="64",
                                     help="LM Studio MLX: quantization group (32, 64, 128; default 64).")  # fmt: skip
    quantized_kv_start: int | None = knob(
        flag="--quantized-kv-start", engine_flag="KV Cache Quantization start", minimum=0, default="0",
        help="LM Studio MLX: quantize once the cache holds N tokens (default 0).",
    )  # fmt: skip
    parallel: int | None = _parallel()


PLUGIN = EnginePlugin(
    name="lmstudio",
    summary="LM Studio's llama.cpp runtime (GGUF): 4 predictions, one unified cache",
    rules="kvcalc.engines.lmstudio.rules:LMStudio",
    options=LMStudioOptions,
    aliases=("lm-studio", "lmstudio-gguf"),
    panel="LM Studio (--engine lmstudio)",
)
MLX_PLUGIN = EnginePlugin(
    name="lmstudio-mlx",
    summary="LM Studio's MLX runtime (mlx-engine): mlx-lm's cache, the context as max_kv_size",
    rules="kvcalc.engines.lmstudio.rules:LMStudioMLX",
    options=LMStudioMLXOptions,
    aliases=("lm-studio-mlx",),
    # Its knobs sit under the mlx-lm row of the help overview: the runtime is mlx-lm, through mlx-engine.
    panel="mlx-lm (--engine lmstudio-mlx)",
)


if TYPE_CHECKING:
    from kvcalc.engines.lmstudio.rules import LMStudio, LMStudioMLX

_RULES = (
    "LMStudio",
    "LMStudioMLX",
)

__all__ = [
    "DEFAULT_CONTEXT_LENGTH",
    "DEFAULT_EVAL_BATCH",
    "DEFAULT_PARALLEL",
    "MLX_PLUGIN",
    "PLUGIN",
    "RUNTIME_RELEASES",
    "LMStudio",
    "LMStudioMLX",
    "LMStudioMLXOptions",
    "LMStudioOptions",
]


def __getattr__(name: str) -> Any:
    if name in _RULES:
        return getattr(import_module(f"{__name__}.rules"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
