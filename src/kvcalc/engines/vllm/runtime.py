"""What vLLM takes from a GPU besides weights and KV cache (kvcalc.calc.runtime's terms)."""

from __future__ import annotations

from fractions import Fraction

from kvcalc.calc.runtime import GIB, MIB, Runtime, RuntimeTerm, cdiv
from kvcalc.dims import ModelDims

# --- vLLM (V1 engine: every release kvcalc models, 0.11 on) ------------------------------------------
# vllm/v1/worker/gpu_worker.py Worker.determine_available_memory: available KV = total x
# gpu_memory_utilization - (weights + torch peak increase of the profiling run + non-torch increase);
# 0.32 counts the same through the free-memory drop, and from 0.21 also subtracts its CUDA-graph
# estimate (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, on by default) unless --enforce-eager.
UTILIZATION_092_FROM = (0, 21, 0)  # gpu_memory_utilization default 0.9 -> 0.92 (config/cache.py)
CUDA_GRAPHS_COUNTED_FROM = (0, 21, 0)  # "default-on since v0.21.0" (gpu_worker.py, 0.32 log message)
# Which top-k/top-p runs in the dummy sampler run. Up to 0.10 FlashInfer's sampling kernel (PR
# #11394; on whenever flashinfer is installed, as in vLLM's images); PR #26859 (2025-10-15) turned it
# off, leaving the sort-based PyTorch path (public 0.11 logs measure it); PR #33538 (merged
# 2026-02-02) replaced that with a Triton kernel that masks in place. The first release after
# each merge is taken to be 0.11 and 0.16 (not checked against tags).
SORT_SAMPLER_FROM = (0, 11, 0)
TRITON_SAMPLER_FROM = (0, 16, 0)


def vllm_utilization(version: tuple[int, int, int]) -> Fraction:
    return Fraction(92, 100) if version >= UTILIZATION_092_FROM else Fraction(9, 10)


def vllm_batch_defaults(gpu_bytes: int, gpu_name: str | None) -> tuple[int, int, str]:
    """(max_num_batched_tokens, max_num_seqs) of ``vllm serve`` for a GPU of ``gpu_bytes``
    (vllm/engine/arg_utils.py get_batch_defaults, 0.32: OPENAI_API_SERVER), and why."""
    name = (gpu_name or "").lower()
    if gpu_bytes >= 160 * GIB:
        return 16384, 1024, "GPU of 160 GiB or more"
    if gpu_bytes >= 70 * GIB and "a100" not in name:
        return 8192, 1024, "GPU of 70 GiB or more, not an A100"
    return 2048, 256, "GPU under 70 GiB, or an A100"


# vLLM's own measurement of the sort-based top-k/top-p (PR #32558, 2026-01-18: "Pyt Mem 1.25 GB"
# at batch 256 x vocab 131,072, on top of the fp32 logits it is given): 37.25 B per logit.
SORT_BYTES_PER_LOGIT = Fraction(1_250_000_000, 256 * 131_072)


def _sampler_bytes_per_logit(version: tuple[int, int, int], b: int, tp: int) -> tuple[Fraction, str]:
    """Bytes alive per logit (one row x one vocabulary entry) at the dummy sampler run's peak.

    The model's logits (b; under TP each rank also keeps its 1/tp shard before the all-gather),
    then Sampler.forward's fp32 copy (4). Before the Triton kernel, apply_top_k_top_p_pytorch
    sorts every row (values 4, int64 indices 8, the radix sort's buffers, masks, softmax and
    cumsum, the scatter back): 37.25 B per logit in vLLM's own measurement. With the Triton kernel
    the mask is applied in place and the peak is at random_sample: probabilities (4) and
    exponential noise (4). FlashInfer's kernel (up to 0.10) keeps the top-k masked logits (4) and
    their softmax (4).
    """
    shard = Fraction(b, tp) if tp > 1 else Fraction(0)
    extra = f" + 1/{tp} shard" if tp > 1 else ""
    if SORT_SAMPLER_FROM <= version < TRITON_SAMPLER_FROM:
        return b + SORT_BYTES_PER_LOGIT + shard, f"logits {b} + sort-based top-k/top-p 37.25 (PR #32558){extra}"
    if version >= TRITON_SAMPLER_FROM:
        return b + 4 + 4 + 4 + shard, f"logits {b} + fp32 4 + probs 4 + noise 4{extra}"
    # FlashInfer's top_k_top_p_sampling_from_logits: top-k masked logits, then their softmax.
    return b + 4 + 4 + 4 + shard, f"logits {b} + fp32 4 + masked logits 4 + probs 4 (FlashInfer){extra}"


def vllm_activation_peak(
    dims: ModelDims, *, tokens: int, rows: int, tp: int, b: int, version: tuple[int, int, int]
) -> tuple[int, str]:
    """The profiling run's transient peak on one TP rank: the larger of the forward pass at
    ``tokens`` (max_num_batched_tokens) and the dummy sampler run over ``rows`` (one logit row per
    request, min(max_num_batched_tokens, max_num_seqs)), from the live tensors of each phase."""
    h = dims.hidden
    # Between layers the hidden state and the residual (2 x N x h); the dense MLP adds gate_up
    # (N x 2I/tp) and its activation output (N x I/tp) before down_proj.
    dense = tokens * (2 * h + 3 * cdiv(dims.intermediate, tp)) * b if dims.intermediate else 0
    moe = 0
    if dims.is_moe:
        # fused_experts: intermediate caches of M x top_k x 2I/tp and M x top_k x I/tp, plus the
        # M x top_k x h expert outputs, beside the hidden state and residual.
        width = cdiv(dims.expert_intermediate, tp)
        moe = tokens * (2 * h + dims.top_k * (3 * width + h)) * b
    forward = max(dense, moe)
    per_logit, how = _sampler_bytes_per_logit(version, b, tp)
    # profile_run keeps the N x h hidden states alive through the sampler run.
    sampler = tokens * h * b + rows * h * b + int(rows * dims.vocab * per_logit)
    if sampler >= forward:
        per = f"{float(per_logit):.2f}"
        return sampler, f"sampler: {rows:,} rows x {dims.vocab:,} vocab x {per} B ({how}), + hidden states"
    kind = "MoE layer" if moe >= dense else "MLP"
    return forward, f"forward at {tokens:,} batched tokens, {kind}: hidden, residual and intermediates"


# Non-torch memory the profiling run adds (NCCL buffers, cuBLAS, attention libraries) and the CUDA
# graph estimate: vLLM measures both; its source sets no size. Central figures and ranges are
# those of public start-up logs (llm-d-benchmark config_explorer/empirical-vllm-memory-results.md:
# non-torch 0.13-0.14 GiB at TP 1 and 0.54-0.55 GiB at TP 2 on H100; CUDA graphs 0.1-1.03 GiB).
def _non_torch(tp: int) -> RuntimeTerm:
    if tp == 1:
        return RuntimeTerm("non-torch memory (assumed)", 140 * MIB, "not derived: ~0.14 GiB at TP 1 in logs",
                           low=50 * MIB, high=512 * MIB, derived=False)  # fmt: skip
    return RuntimeTerm("non-torch memory, NCCL (assumed)", 560 * MIB,
                       "not derived: ~0.55 GiB at TP 2 in logs", low=200 * MIB, high=1536 * MIB,
                       derived=False)  # fmt: skip


CUDA_GRAPHS = RuntimeTerm(
    "CUDA graphs (vLLM's estimate, assumed)", GIB // 2, "not derived: 0.1-1 GiB in logs; 0 with --enforce-eager",
    low=100 * MIB, high=3 * GIB // 2, derived=False,
)  # fmt: skip


def vllm_runtime(
    dims: ModelDims | None,
    *,
    version: tuple[int, int, int],
    tp: int,
    last_stage: bool = True,
    dtype_bytes: int = 2,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    utilization: Fraction | None,
    enforce_eager: bool = False,
    multimodal: bool = False,
    recurrent: bool = False,
) -> Runtime:
    """vLLM's share and the terms it subtracts from it on the most loaded GPU (the last pipeline
    stage runs the sampler). ``multimodal`` and ``recurrent`` flag what the activation peak leaves
    out (an encoder profiled on its largest input; linear-attention and Mamba prefill kernels)."""
    share = utilization if utilization is not None else vllm_utilization(version)
    notes: list[str] = []
    if utilization is None:
        notes.append(f"vLLM's gpu_memory_utilization default {float(share):g} (config/cache.py of the release)")
    terms: list[RuntimeTerm] = []
    rows = min(max_num_batched_tokens, max_num_seqs)
    if dims is None:
        raise ValueError("the vLLM runtime model needs the model's widths")
    peak, how = vllm_activation_peak(
        dims, tokens=max_num_batched_tokens, rows=rows if last_stage else 0, tp=tp, b=dtype_bytes, version=version
    )
    # torch.compile fuses some intermediates, the allocator rounds every block: a range around it.
    terms.append(RuntimeTerm("activation peak (profiling run)", peak, how, low=peak * 3 // 4, high=peak * 5 // 4))
    terms.append(_non_torch(tp))
    if version >= CUDA_GRAPHS_COUNTED_FROM and not enforce_eager:
        terms.append(CUDA_GRAPHS)
    elif enforce_eager:
        notes.append("--enforce-eager: no CUDA graphs are captured")
    else:
        notes.append(
            "vLLM before 0.21 captures CUDA graphs after sizing the KV cache: their memory (~0.1-1 GiB) must fit "
            "in the share gpu_memory_utilization leaves"
        )
    if multimodal:
        notes.append(
            "vLLM also profiles the model's vision/audio encoder on its largest input: not in the activation peak "
            "(measure it, or give --overhead)"
        )
    if recurrent:
        notes.append(
            "the prefill kernels of linear-attention and Mamba layers keep chunk states that the activation peak "
            "leaves out (public logs show up to ~5 GiB at 8,192 batched tokens)"
        )
    for d in dims.notes:
        notes.append(d)
    return Runtime("vllm", tuple(terms), share, f"x gpu_memory_utilization {float(share):g}", notes=tuple(notes))
