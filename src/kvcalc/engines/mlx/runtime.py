"""What mlx-lm takes from a Mac's memory besides weights and the KV cache (kvcalc.calc.runtime's terms).

On Apple silicon the GPU has no memory of its own: it may wire up to Metal's
recommendedMaxWorkingSetSize of the unified memory (mlx_lm/generate.py ``wired_limit`` sets MLX's
wired limit to it; ``sudo sysctl iogpu.wired_limit_mb=N`` raises it), and macOS and every other
program share the rest. fit's budget is that limit, less the weights, less the terms below.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

from kvcalc.calc.runtime import GIB, Runtime, RuntimeRequest, RuntimeTerm

if TYPE_CHECKING:
    from kvcalc.engines.mlx.rules import MLX

# MLX's activations for a prefill step and its buffer cache (mx.clear_cache runs between steps)
# are not fixed by mlx-lm's source: an assumption with a wide range.
MLX_ACTIVATIONS = RuntimeTerm(
    "activations of a prefill step and MLX's buffer cache (assumed)", GIB, "not derived: about 1 GiB, 0.5-3 GiB",
    low=GIB // 2, high=3 * GIB, derived=False,
)  # fmt: skip


def mlx_runtime(engine: MLX, request: RuntimeRequest) -> tuple[Runtime, list[str]]:
    """The wired limit taken whole, less MLX's activations and, when asked for, the server's
    prompt cache (mlx_lm.server --prompt-cache-bytes)."""
    notes: list[str] = []
    gpu = request.gpu
    if gpu is not None and gpu.unified_bytes is not None:
        notes.append(
            f"macOS lets the GPU wire {gpu.runtime_bytes / GIB:.2f} GiB of this Mac's {gpu.unified_bytes / GIB:.0f} "
            "GiB by default (Metal's recommendedMaxWorkingSetSize, the limit mlx-lm wires); sudo sysctl "
            "iogpu.wired_limit_mb=N raises it: then give --gpu-memory NMiB"
        )
    elif gpu is not None:
        notes.append(f"mlx-lm runs on Apple silicon: {gpu.name} is not a Mac (its figures are used as given)")
    terms = [MLX_ACTIVATIONS]
    if engine.prompt_cache_bytes:
        terms.append(RuntimeTerm(
            "mlx_lm.server prompt cache (--prompt-cache-bytes)", engine.prompt_cache_bytes,
            f"{engine.prompt_cache_bytes:,} B as given",
        ))  # fmt: skip
    else:
        notes.append(
            "mlx_lm.server also keeps up to 10 finished prompts' caches (--prompt-cache-size 10, no byte limit "
            "unless --prompt-cache-bytes): give --prompt-cache-bytes to leave room for them"
        )
    share = request.share if request.share is not None else Fraction(1)
    runtime = Runtime("mlx", tuple(terms), share, f"x wired limit share {float(share):g}", notes=tuple(notes))
    return runtime, notes
