"""What an engine takes from a GPU besides weights and KV cache: activations, CUDA graphs, the
CUDA context and communication buffers, each a term with its inputs and the range it may fall in.

``fit`` subtracts these terms to find the KV budget. Each engine decides differently how much of
the GPU it claims (vLLM: total x gpu_memory_utilization; SGLang: free memory x
mem_fraction_static; llama.cpp: whatever is free), so a model here returns both the share it
claims and the terms it takes out of that share. A term the engine's source does not determine
(the CUDA context's size, allocator slack) is an assumption with a range, marked as such; a user
who knows better gives ``--overhead``. Pure: integers in, integers out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from .dims import ModelDims

GIB = 2**30
MIB = 2**20


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class RuntimeTerm:
    """One thing the runtime takes per GPU: ``bytes`` the central figure, ``low``..``high`` the
    range it may fall in, ``detail`` the arithmetic with its inputs. ``derived`` is False for an
    assumption the engine's source does not settle."""

    label: str
    bytes: int
    detail: str
    low: int | None = None
    high: int | None = None
    derived: bool = True

    @property
    def range(self) -> tuple[int, int]:
        return (self.bytes if self.low is None else self.low, self.bytes if self.high is None else self.high)


@dataclass(frozen=True)
class Runtime:
    """The terms one engine subtracts per GPU, and the share of memory it claims first:
    ``claimed = memory x share`` (vLLM's gpu_memory_utilization; SGLang's mem_fraction_static of
    the memory free at start, after ``before_share`` is gone)."""

    engine: str
    terms: tuple[RuntimeTerm, ...]
    share: Fraction
    share_label: str
    before_share: tuple[RuntimeTerm, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def bytes(self) -> int:
        return sum(t.bytes for t in self.terms)

    @property
    def low(self) -> int:
        return sum(t.range[0] for t in self.terms)

    @property
    def high(self) -> int:
        return sum(t.range[1] for t in self.terms)


def given_runtime(overhead: int, engine: str, share: Fraction, share_label: str) -> Runtime:
    """The user's --overhead, taken as it is."""
    term = RuntimeTerm("activations and runtime (--overhead)", overhead, f"{overhead:,} B as given")
    return Runtime(engine, (term,), share, share_label)


# --- SGLang ---------------------------------------------------------------------------------------
# python/sglang/srt/server_args.py ServerArgs._handle_gpu_memory_settings (sgl-project/sglang main,
# 2025-2026): gpu_mem is the card's memory in MiB as nvidia-smi reports it; chunked_prefill_size and
# cuda_graph_max_bs default by that size and tp; reserved MiB = 512 (attention-backend metadata)
# + 1.5 x max(chunked_prefill_size, 2048) (prefill activations) + 2 x cuda_graph_max_bs (graphs)
# + tp x pp / 8 x 1024 (parallel buffers), at least 10 GiB on cards over 60 GiB;
# mem_fraction_static = round((gpu_mem - reserved) / gpu_mem, 3).
# model_runner profile_max_num_token / profile_available_bytes: KV pool = free memory after the
# weights load - F x (1 - mem_fraction_static), F the free memory after distributed init.


def sglang_defaults(smi_mib: int, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang picks for a card of ``smi_mib`` MiB."""
    if smi_mib < 20 * 1024:
        return 2048, 8
    if smi_mib < 35 * 1024:
        return 2048, 24 if tp < 4 else 80
    if smi_mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if smi_mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def sglang_mem_fraction_static(smi_mib: int, tp: int, pp: int = 1) -> tuple[float, str]:
    """SGLang's default mem_fraction_static and the arithmetic behind it."""
    chunk, graph_bs = sglang_defaults(smi_mib, tp)
    reserved = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + tp * pp / 8 * 1024
    floor = smi_mib > 60 * 1024 and reserved < 10 * 1024
    if floor:
        reserved = 10 * 1024
    share = round((smi_mib - reserved) / smi_mib, 3)
    how = (
        f"(gpu {smi_mib:,} MiB - reserved {reserved:,.0f} MiB) / gpu = {share}; reserved = 512 + 1.5 x "
        f"chunked_prefill_size {chunk:,} + 2 x cuda_graph_max_bs {graph_bs} + tp x pp / 8 x 1024"
        f"{', raised to the 10 GiB floor' if floor else ''}"
    )
    return share, how


# Memory gone before SGLang measures its free memory (CUDA context, NCCL communicators, the
# scheduler's own buffers): not set by SGLang's source; an assumption with a wide range.
SGLANG_START = RuntimeTerm(
    "CUDA context and communicators before start (assumed)", GIB, "not derived: about 1 GiB, 0.5-2 GiB",
    low=GIB // 2, high=2 * GIB, derived=False,
)  # fmt: skip


def sglang_runtime(smi_mib: int | None, tp: int, pp: int, mem_fraction_static: Fraction | None) -> Runtime:
    """SGLang claims mem_fraction_static of the memory free at start; activations, CUDA graphs and
    metadata live in the rest, so nothing more is subtracted from the claimed share."""
    notes: list[str] = []
    if mem_fraction_static is None:
        if smi_mib is None:
            value, how = 0.88, "0.88, SGLang's default when the GPU's memory is unknown"
        else:
            value, how = sglang_mem_fraction_static(smi_mib, tp, pp)
        notes.append(f"SGLang mem_fraction_static {how} (server_args.py _handle_gpu_memory_settings)")
        share = Fraction(str(value))
    else:
        share = mem_fraction_static
    return Runtime(
        "sglang", (), share, f"x mem_fraction_static {float(share):g}", before_share=(SGLANG_START,),
        notes=tuple(notes),
    )  # fmt: skip


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
