"""GPU presets: memory in exact bytes as the CUDA/ROCm runtime reports it.

``runtime_bytes`` is ``torch.cuda.mem_get_info()[1]`` / ``get_device_properties().total_memory``
(what vLLM multiplies by gpu_memory_utilization); it is below the ``nvidia-smi`` total by the
driver's reservation and moves a little between driver versions. Where a source printed MiB
(torch prints ``total_memory=NNNNNMB`` meaning floor(bytes / 2^20)), the bytes are MiB x 2^20.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from kvcalc.errors import UsageError

MIB = 2**20
T = 10**12


@dataclass(frozen=True)
class Peaks:
    """A GPU's peak memory bandwidth (bytes/s, decimal as vendors state it) and dense tensor
    throughput (FLOP/s, no 2:4 sparsity: NVIDIA's starred figures halved) per compute dtype; None
    where the GPU has no tensor path for it. ``int8`` counts operations."""

    bandwidth: int
    bf16: int
    fp8: int | None
    fp4: int | None
    int8: int
    source: str

    def flops(self, dtype: str) -> int | None:
        return {"bf16": self.bf16, "fp16": self.bf16, "fp8": self.fp8, "fp4": self.fp4, "int8": self.int8}[dtype]


@dataclass(frozen=True)
class GPU:
    name: str
    runtime_bytes: int
    smi_mib: int
    source: str
    aliases: tuple[str, ...] = ()
    peaks: Peaks | None = None
    # An Apple silicon Mac: its whole unified memory (bytes). ``runtime_bytes`` is then what macOS
    # lets the GPU wire by default (Metal's recommendedMaxWorkingSetSize, the wired limit mlx-lm
    # sets), not the memory on a card.
    unified_bytes: int | None = None


_H100 = "NVIDIA H100 datasheet (SXM column; starred figures are with sparsity) and Hopper whitepaper: "
# Where a vendor published two bandwidths the larger is kept: a lower bound on time must not be too high.
PEAKS = {
    "h100-sxm": Peaks(3_350_000_000_000, 989_400_000_000_000, 1_978_900_000_000_000, None, 1_978_900_000_000_000,
                      _H100 + "3.35 TB/s HBM3, BF16 1,979* / FP8 3,958* / INT8 3,958* TFLOPS (whitepaper 989.4 / "
                      "1,978.9 dense); ai-dynamo/aiconfigurator systems/h100_sxm.yaml mem_bw 3350e9"),
    "h100-pcie": Peaks(2_000_000_000_000, 756_500_000_000_000, 1_513_000_000_000_000, None, 1_513_000_000_000_000,
                       "NVIDIA H100 datasheet, PCIe column: 2 TB/s HBM2e, BF16 1,513* / FP8 3,026* / INT8 3,026* "
                       "TFLOPS (* with sparsity; dense half)"),
    "h200": Peaks(4_800_000_000_000, 989_400_000_000_000, 1_978_900_000_000_000, None, 1_978_900_000_000_000,
                  "NVIDIA H200 (SXM) product page: 4.8 TB/s HBM3e, BF16 1,979* / FP8 3,958* TFLOPS (* with "
                  "sparsity; dense half: the H100's GH100 compute); aiconfigurator systems/h200_sxm.yaml "
                  "mem_bw 4800e9"),
    "a100-40gb": Peaks(1_555_000_000_000, 312 * T, None, None, 624 * T,
                       "NVIDIA A100 datasheet: 40GB 1,555 GB/s HBM2, BF16 312 (624*) TFLOPS, INT8 624 (1,248*) TOPS"),
    "a100-80gb": Peaks(2_039_000_000_000, 312 * T, None, None, 624 * T,
                       "NVIDIA A100 datasheet: 80GB SXM 2,039 GB/s (PCIe 1,935 GB/s; the larger kept), BF16 312 "
                       "TFLOPS dense; aiconfigurator systems/a100_sxm.yaml mem_bw 2039e9"),
    "l4": Peaks(300_000_000_000, 121 * T, 242_500_000_000_000, None, 242_500_000_000_000,
                "NVIDIA L4 datasheet: 300 GB/s GDDR6, BF16 242* / FP8 485* TFLOPS (* with sparsity; dense half)"),
    "l40s": Peaks(864_000_000_000, 362_050_000_000_000, 733 * T, None, 733 * T,
                  "NVIDIA L40S datasheet: 864 GB/s GDDR6, BF16 362.05 | 733* TFLOPS, FP8 733 | 1,466*; "
                  "aiconfigurator systems/l40s.yaml"),
    "rtx-4090": Peaks(1_008_000_000_000, 330_300_000_000_000, 660_600_000_000_000, None, 660_600_000_000_000,
                      "NVIDIA Ada GPU architecture whitepaper, RTX 4090: 1,008 GB/s GDDR6X; FP16 with FP16 "
                      "accumulate 330.3 TFLOPS dense (FP32 accumulate, BF16: 165.2), FP8 with FP16 accumulate "
                      "660.6, INT8 660.6 TOPS: the fastest path, as a bound needs (llama.cpp's F16 GEMMs use it)"),
    "b200": Peaks(8 * T, 2_250 * T, 4_500 * T, 9_000 * T, 4_500 * T,
                  "NVIDIA HGX/DGX B200 specs: 8 TB/s HBM3e per GPU at launch (a later table says 7.7; the larger "
                  "kept), BF16 4.5* / FP8 9* / FP4 18* PFLOPS (* with sparsity; dense half); aiconfigurator "
                  "systems/b200_sxm.yaml"),
    "mi300x": Peaks(5_300_000_000_000, 1_307_400_000_000_000, 2_614_900_000_000_000, None, 2_614_900_000_000_000,
                    "AMD Instinct MI300X data sheet: 5.3 TB/s HBM3, BF16 1,307.4 TFLOPS dense (2,614.9 with "
                    "sparsity), FP8 2,614.9 dense"),
}  # fmt: skip


_MEMORY = (
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


# --- Apple silicon: one preset per chip and memory size ---------------------------------------------
# Memory sizes and bandwidths: Apple's tech specs and newsroom pages for each chip (M1 Pro / Max
# 200 / 400 GB/s, M1 Ultra 800; M2 Pro / Max / Ultra 200 / 400 / 800; M3 Max 300 (30-core GPU) / 400
# (40-core), M3 Ultra 819; M4 120, M4 Pro 273, M4 Max 410 (32-core) / 546 (40-core); M5 153).
# GPU FLOP/s: Apple's launch figures for M1 (Pro 5.2, Max 10.4, Ultra 21 TFLOPS) and M2 (Pro 6.8,
# Max 13.6, Ultra 27.2); Apple publishes none from M3 on, so those are GPU cores x 128 FP32 lanes x
# 2 x 1.6 GHz, an upper estimate (a time bound must not use a peak that is too low). Apple GPUs
# run FP16 and BF16 at the FP32 rate; they have no FP8 or FP4 path.
_APPLE_SPEC = "Apple tech specs / newsroom: {bw} GB/s unified memory bandwidth; {flops}"


def _apple_flops(cores: int) -> int:
    return cores * 128 * 2 * 1_600_000_000


_APPLE_CHIPS = (
    # (chip, memory sizes in GB as Apple sells them, bandwidth GB/s, FP32 FLOP/s, where the FLOP/s come from)
    ("m1-pro", (16, 32), 200, 5_200 * 10**9, "5.2 TFLOPS (16-core GPU, Apple)"),
    ("m1-max", (32, 64), 400, 10_400 * 10**9, "10.4 TFLOPS (32-core GPU, Apple)"),
    ("m1-ultra", (64, 128), 800, 21_000 * 10**9, "21 TFLOPS (64-core GPU, Apple)"),
    ("m2-pro", (16, 32), 200, 6_800 * 10**9, "6.8 TFLOPS (19-core GPU, Apple)"),
    ("m2-max", (32, 64, 96), 400, 13_600 * 10**9, "13.6 TFLOPS (38-core GPU, Apple)"),
    ("m2-ultra", (64, 128, 192), 800, 27_200 * 10**9, "27.2 TFLOPS (76-core GPU, Apple)"),
    ("m3-max", (36, 48, 64, 96, 128), 400, _apple_flops(40), "40 cores x 128 x 2 x 1.6 GHz (estimate)"),
    ("m3-ultra", (96, 256, 512), 819, _apple_flops(80), "80 cores x 128 x 2 x 1.6 GHz (estimate)"),
    ("m4", (16, 24, 32), 120, _apple_flops(10), "10 cores x 128 x 2 x 1.6 GHz (estimate)"),
    ("m4-pro", (24, 48, 64), 273, _apple_flops(20), "20 cores x 128 x 2 x 1.6 GHz (estimate)"),
    ("m4-max", (36, 48, 64, 128), 546, _apple_flops(40), "40 cores x 128 x 2 x 1.6 GHz (estimate)"),
    ("m5", (16, 24, 32), 153, _apple_flops(10), "10 cores x 128 x 2 x 1.6 GHz (estimate)"),
)  # fmt: skip

# Metal's recommendedMaxWorkingSetSize as measured (GiB of unified memory -> bytes): llama.cpp's
# ggml_metal_init log lines, which print it in MiB: 16 GB 10,922.67 (abetlen/llama-cpp-python
# issue #687, M1 Pro) and 10.67 GB on an M4 (exo-explore/exo PR #1672); 32 GB 21,845.34 (ollama
# issue #434, M2 Max; ggml-org/llama.cpp PR #2011, M1 Max); 64 GB 49,152.00 (llama.cpp issue #1870,
# M1 Max); 96 GB 73,728.00 (llama.cpp issue #3213, M2 Max); 128 GB 107.52 GiB on macOS 26 (antirez/ds4
# PR #893: two machines, M5 Max among them). Other sizes follow the measured rule: 2/3 of memory
# below 64 GB, 3/4 from 64 GB.
_WORKING_SET_MEASURED = {128: 115_448_720_916}  # 107.52 GiB as printed (two decimals)


def mac_working_set(ram_gib: int) -> tuple[int, bool]:
    """(bytes macOS lets the GPU wire by default, whether that size was measured)."""
    if ram_gib in _WORKING_SET_MEASURED:
        return _WORKING_SET_MEASURED[ram_gib], True
    ram = ram_gib * 2**30
    fraction = (2, 3) if ram_gib < 64 else (3, 4)
    return ram * fraction[0] // fraction[1], ram_gib in (16, 32, 64, 96)


def _macs() -> tuple[GPU, ...]:
    macs = []
    for chip, sizes, bandwidth, flops, flops_source in _APPLE_CHIPS:
        source = _APPLE_SPEC.format(bw=bandwidth, flops=flops_source)
        peaks = Peaks(bandwidth * 10**9, flops, None, None, flops, source)
        for gb in sizes:
            wired, measured = mac_working_set(gb)
            how = "measured" if measured else "2/3 of memory below 64 GB, 3/4 from 64 GB (the measured rule)"
            macs.append(GPU(
                f"{chip}-{gb}gb", wired, gb * 1024,
                f"Apple {chip.upper().replace('-', ' ')} with {gb} GB unified memory; macOS lets the GPU wire "
                f"{wired:,} B by default (recommendedMaxWorkingSetSize, {how})",
                (f"{chip}-{gb}", f"{chip.replace('-', '')}-{gb}gb"), peaks, unified_bytes=gb * 2**30,
            ))  # fmt: skip
    return tuple(macs)


# Each GPU with its peaks (kvcalc.calc.speed), then the Macs.
GPUS = (
    *(GPU(g.name, g.runtime_bytes, g.smi_mib, g.source, g.aliases, PEAKS.get(g.name)) for g in _MEMORY),
    *_macs(),
)


def find_gpu(name: str) -> GPU:
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    for gpu in GPUS:
        if key == gpu.name or key in gpu.aliases:
            return gpu
    labels = [label for g in GPUS for label in (g.name, *g.aliases)]
    close = difflib.get_close_matches(key, labels, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(g.name for g in GPUS)}"
    raise UsageError(f"unknown GPU {name!r}{hint} (or give --gpu-memory SIZE)")
