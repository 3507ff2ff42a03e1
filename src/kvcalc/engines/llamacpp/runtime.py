"""What llama.cpp takes from a GPU besides weights and KV cache (kvcalc.calc.runtime's terms)."""

from __future__ import annotations

from fractions import Fraction

from kvcalc.calc.runtime import GIB, Runtime, RuntimeTerm, cdiv
from kvcalc.dims import ModelDims

# --- llama.cpp ------------------------------------------------------------------------------------
# The compute buffer llama.cpp reserves when a context is created (src/llama-context.cpp sched_reserve:
# the prompt graph of one ubatch with an output per token, then a one-token graph, then the prompt
# graph again; the scheduler keeps the high-water mark). ggml-alloc frees each tensor after its last
# use, so the buffer is the largest stage, not a sum. Measured with llama.cpp 0c1e570 (no_alloc,
# llama_get_memory_breakdown): 463 of 518 contexts exact, the rest within +8% / -3%.


def llamacpp_compute_bytes(
    dims: ModelDims,
    *,
    n_ctx: int,
    n_ubatch: int,
    n_batch: int,
    n_seq: int = 1,
    unified: bool = False,
    flash_attn: bool = True,
    quantized_kv: bool = False,
) -> tuple[int, str]:
    """Bytes of llama.cpp's compute buffer for one backend holding the whole graph, and which
    stage sets it (attention, feed-forward or output head)."""
    cells = cdiv(n_ctx, 256) * 256
    t = min(n_ubatch, n_batch, cells)
    n_kv = cells // n_seq if n_seq > 1 and not unified else cells
    n_q = dims.heads * dims.head_dim
    n_v = dims.kv_heads * dims.head_dim
    # Graph inputs: token ids, positions, output ids and K indices; V indices (one per element when V
    # is stored transposed, without flash attention); the KQ mask (f16 with flash attention).
    inputs = 20 * t + 8 * t * (1 if flash_attn else n_v) + n_kv * t * (2 if flash_attn else 4)
    attention = inputs + 4 * t * (3 * dims.hidden + 2 * n_q) + (0 if flash_attn else 4 * n_kv * t * dims.heads)
    if dims.is_moe:
        width = 3 * dims.top_k * dims.expert_intermediate
        if dims.top_k * dims.hidden > 2 * dims.top_k * dims.expert_intermediate:
            width += dims.top_k * dims.hidden
        width = max(width, 3 * dims.intermediate)
    else:
        width = 3 * dims.intermediate
    ffn = inputs + 4 * t * (3 * dims.hidden + n_q + width)
    output = 4 * t * (dims.vocab + 2 * dims.hidden) + 4 * t + (4 * t * dims.hidden if quantized_kv else 0)
    stages = {"attention": attention, "feed-forward": ffn, "output head (logits of every token)": output}
    stage = max(stages, key=lambda k: stages[k])
    return stages[stage], f"{stage} of a {t:,}-token ubatch over {n_kv:,} cells, f32" + (
        ", flash attention" if flash_attn else ", no flash attention: KQ scores"
    )


LLAMACPP_CONTEXT = RuntimeTerm(
    "CUDA context, cuBLAS workspace, memory pool (assumed)", GIB // 2,
    "not derived: llama.cpp reports none of them; 0.25-1 GiB", low=GIB // 4, high=GIB, derived=False,
)  # fmt: skip


def llamacpp_runtime(
    dims: ModelDims,
    *,
    n_ctx: int,
    n_ubatch: int,
    n_batch: int,
    n_seq: int,
    unified: bool,
    quantized_kv: bool,
    share: Fraction | None,
) -> Runtime:
    """llama.cpp takes what is free: all of the GPU unless told otherwise, less its compute buffer
    (flash attention on, as ``-fa auto`` picks it on CUDA) and the CUDA runtime's own memory."""
    compute, how = llamacpp_compute_bytes(
        dims, n_ctx=n_ctx, n_ubatch=n_ubatch, n_batch=n_batch, n_seq=n_seq, unified=unified, quantized_kv=quantized_kv
    )
    term = RuntimeTerm("compute buffer", compute, how, low=compute * 92 // 100, high=compute * 108 // 100)
    notes = (
        "llama.cpp compute buffer with flash attention (-fa auto turns it on for CUDA); without it the attention "
        "scores take 4 x cells x ubatch x heads bytes",
        f"llama.cpp compute buffer sized for a context of {n_ctx:,} cells; with flash attention it grows by "
        f"{2 * min(n_ubatch, n_batch):,} B per extra cell (the KQ mask)",
    )
    used = share if share is not None else Fraction(1)
    return Runtime("llama.cpp", (term, LLAMACPP_CONTEXT), used, f"x share {float(used):g}", notes=notes)
