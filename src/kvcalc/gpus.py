"""GPU presets: memory in exact bytes as the CUDA/ROCm runtime reports it.

``runtime_bytes`` is ``torch.cuda.mem_get_info()[1]`` / ``get_device_properties().total_memory``
(what vLLM multiplies by gpu_memory_utilization); it is below the ``nvidia-smi`` total by the
driver's reservation and moves a little between driver versions. Where a source printed MiB
(torch prints ``total_memory=NNNNNMB`` meaning floor(bytes / 2^20)), the bytes are MiB x 2^20.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from .errors import UsageError

MIB = 2**20


@dataclass(frozen=True)
class GPU:
    name: str
    runtime_bytes: int
    smi_mib: int
    source: str
    aliases: tuple[str, ...] = ()


GPUS = (
    GPU("h100-sxm", 85_017_755_648, 81_559,
        "CUDA deviceQuery 81,079 MiB (85,017,755,648 B), driver 13.0 / runtime 12.5; torch shows 81,082-81,090 MiB "
        "on other drivers; nvidia-smi 81,559 MiB (modal-labs/modal-client PR #2797)",
        ("h100", "h100-80gb", "h100-sxm5")),
    GPU("h100-pcie", 81_008 * MIB, 81_559, "torch total_memory=81008MB; nvidia-smi 81,559 MiB", ("h100-pcie-80gb",)),
    GPU("h200", 143_156 * MIB, 143_771,
        "torch total_memory=143156MB; nvidia-smi 143,771 MiB (NVIDIA/cuda-samples issue #311)", ("h200-141gb",)),
    GPU("a100-40gb", 42_298_834_944, 40_960,
        "CUDA deviceQuery 40,339 MiB (42,298,834,944 B), driver 12.2 (bottlerocket-os PR #3873); nvidia-smi 40,960 MiB",
        ("a100-40", "a100-sxm4-40gb")),
    GPU("a100-80gb", 81_049 * MIB, 81_920,
        "CUDA 'Total global mem: 81049 MB' on A100 80GB PCIe, driver 12.3 (ekondis/mixbench issue #47); "
        "nvidia-smi 81,920 MiB", ("a100", "a100-80", "a100-sxm4-80gb")),
    GPU("l4", 23_612_293_120, 23_034,
        "CUDA deviceQuery 22,518 MiB (23,612,293,120 B), driver 12.0; nvidia-smi 23,034 MiB"),
    GPU("l40s", 45_589 * MIB, 46_068, "torch total_memory=45589MB; nvidia-smi 46,068 MiB"),
    GPU("rtx-4090", 24_563 * MIB, 24_564,
        "torch total_memory=24563MB; nvidia-smi 24,564 MiB (RLinf/RLinf issue #255)", ("4090", "rtx4090")),
    GPU("b200", 182_631 * MIB, 183_359,
        "torch total_memory=182631MB; nvidia-smi 183,359 MiB (NVIDIA/TensorRT-LLM issue #10278)", ("b200-180gb",)),
    GPU("mi300x", 206_141_652_992, 196_592,
        "ROCm torch total_memory=196592MB = rocm-smi 206,141,652,992 B, bare metal (ROCm/ROCm issue #4203); "
        "SR-IOV cloud VFs report 205,822,885,888 B", ("mi300",)),
)  # fmt: skip


def find_gpu(name: str) -> GPU:
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    for gpu in GPUS:
        if key == gpu.name or key in gpu.aliases:
            return gpu
    labels = [label for g in GPUS for label in (g.name, *g.aliases)]
    close = difflib.get_close_matches(key, labels, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(g.name for g in GPUS)}"
    raise UsageError(f"unknown GPU {name!r}{hint} (or give --gpu-memory SIZE)")
