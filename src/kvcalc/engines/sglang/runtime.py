"""What SGLang takes from a GPU besides weights and KV cache (kvcalc.calc.runtime's terms)."""

from __future__ import annotations

from fractions import Fraction

from kvcalc.calc.runtime import GIB, Runtime, RuntimeTerm
from kvcalc.engines.sglang.releases import CURRENT

# --- SGLang ---------------------------------------------------------------------------------------
# python/sglang/srt/server_args.py ServerArgs._handle_gpu_memory_settings (sgl-project/sglang main,
# 2025-2026): gpu_mem is the card's memory in MiB as nvidia-smi reports it; chunked_prefill_size and
# cuda_graph_max_bs default by that size and tp; reserved MiB = 512 (attention-backend metadata)
# + 1.5 x max(chunked_prefill_size, 2048) (prefill activations) + 2 x cuda_graph_max_bs (graphs)
# + tp x pp / 8 x 1024 (parallel buffers), at least 10 GiB on cards over 60 GiB;
# mem_fraction_static = round((gpu_mem - reserved) / gpu_mem, 3).
# model_runner profile_max_num_token / profile_available_bytes: KV pool = free memory after the
# weights load - F x (1 - mem_fraction_static), F the free memory after distributed init.


# sgl-project/sglang#37898 (merged 2026-09-04) raised the 20-35 GiB tier (A10, 4090, 5090) from
# chunked_prefill_size 2,048 and cuda_graph_max_bs 24 (tp >= 4: 80) to 4,096 and 48 (160), as 0.5.23's
# arg_groups/memory_hook.py _handle_gpu_memory_settings reads; taken as from 0.5.19, the first release
# after the merge (released 2026-09-07; its source is not read here).
MID_TIER_RAISED = (0, 5, 19)


def sglang_defaults(smi_mib: int, tp: int, version: tuple[int, int, int] = CURRENT) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang ``version`` picks for a card of ``smi_mib`` MiB."""
    if smi_mib < 20 * 1024:
        return 2048, 8
    if smi_mib < 35 * 1024:
        if version >= MID_TIER_RAISED:
            return 4096, 48 if tp < 4 else 160
        return 2048, 24 if tp < 4 else 80
    if smi_mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if smi_mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def sglang_mem_fraction_static(
    smi_mib: int, tp: int, pp: int = 1, version: tuple[int, int, int] = CURRENT
) -> tuple[float, str]:
    """SGLang's default mem_fraction_static and the arithmetic behind it."""
    chunk, graph_bs = sglang_defaults(smi_mib, tp, version)
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


def sglang_runtime(
    smi_mib: int | None, tp: int, pp: int, mem_fraction_static: Fraction | None,
    version: tuple[int, int, int] = CURRENT,
) -> Runtime:  # fmt: skip
    """SGLang claims mem_fraction_static of the memory free at start; activations, CUDA graphs and
    metadata live in the rest, so nothing more is subtracted from the claimed share."""
    notes: list[str] = []
    if mem_fraction_static is None:
        if smi_mib is None:
            value, how = 0.88, "0.88, SGLang's default when the GPU's memory is unknown"
        else:
            value, how = sglang_mem_fraction_static(smi_mib, tp, pp, version)
        notes.append(f"SGLang mem_fraction_static {how} (server_args.py _handle_gpu_memory_settings)")
        share = Fraction(str(value))
    else:
        share = mem_fraction_static
    return Runtime(
        "sglang", (), share, f"x mem_fraction_static {float(share):g}", before_share=(SGLANG_START,),
        notes=tuple(notes),
    )  # fmt: skip
