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
G = 10**9
T = 10**12


@dataclass(frozen=True)
class Link:
    """A GPU's interconnect to its peers in one node: the bandwidth one GPU can send in one
    direction (bytes/s, decimal as vendors state it) and what it is."""

    kind: str  # "nvlink" | "pcie" | "infinity-fabric" | "none"
    bandwidth: int  # bytes/s, one direction, per GPU (NVIDIA's "900 GB/s" NVLink figure is bidirectional: 450e9 here)
    label: str  # e.g. "NVLink 4 (18 links)", "PCIe 5.0 x16", "Infinity Fabric (7 x 128 GB/s)"
    source: str  # datasheet wording


@dataclass(frozen=True)
class Peaks:
    """A GPU's peak memory bandwidth (bytes/s, decimal as vendors state it) and dense tensor
    throughput (FLOP/s, no 2:4 sparsity: NVIDIA's starred figures halved) per compute dtype; None
    where the GPU has no tensor path for it. ``int8`` counts operations. ``arch`` is the GPU
    generation ("ampere", "ada", "hopper", "blackwell", "cdna3", "apple"), ``memory_kind`` "hbm",
    "gddr" or "unified", and ``link`` the GPU-to-GPU interconnect as the product is usually
    deployed (None on a Mac: one GPU)."""

    bandwidth: int
    bf16: int
    fp8: int | None
    fp4: int | None
    int8: int
    source: str
    arch: str = ""
    memory_kind: str = ""
    link: Link | None = None

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

    @property
    def one_per_machine(self) -> bool:
        """Whether the machine holds this one GPU only (a Mac): more GPUs are more machines, so
        fit suggests no tensor parallelism on it."""
        return self.unified_bytes is not None


_H100 = "NVIDIA H100 datasheet (SXM column; starred figures are with sparsity) and Hopper whitepaper: "
# GPU-to-GPU links, one direction per GPU: NVIDIA and AMD quote NVLink, Infinity Fabric and PCIe
# bidirectionally ("NVLink: 900GB/s", "PCIe Gen5: 128GB/s"), so each figure is halved here.
_NVLINK4 = Link(
    "nvlink",
    450 * G,
    "NVLink 4 (18 links)",
    "NVIDIA H100 and H200 datasheets, SXM column: 'NVIDIA NVLink: 900GB/s, PCIe Gen5: 128GB/s' "
    "(18 links x 50 GB/s, bidirectional: 450 GB/s each way)",
)
_PCIE4 = "PCIe Gen4 x16: 64GB/s bidirectional (32 GB/s each way); no NVLink"
_MI300_LINK = (
    "7 AMD Infinity Fabric links, 'Peak Infinity Fabric Link Bandwidth: 128 GB/s' each (bidirectional), "
    "896 GB/s aggregate peer bandwidth on the 8-GPU platform: 7 x 64 GB/s each way"
)
# The A100 presets are SXM figures: the SXM board's NVLink.
_A100_LINK = Link(
    "nvlink",
    300 * G,
    "NVLink 3 (12 links)",
    "NVIDIA A100 datasheet, SXM column: 'NVIDIA NVLink: 600GB/s, PCIe Gen4: 64GB/s' (12 links x 50 "
    "GB/s, bidirectional: 300 GB/s each way)",
)
# Where a vendor published two bandwidths the larger is kept: a lower bound on time must not be too high.
PEAKS = {
    "h100-sxm": Peaks(3_350_000_000_000, 989_400_000_000_000, 1_978_900_000_000_000, None, 1_978_900_000_000_000,
                      _H100 + "3.35 TB/s HBM3, BF16 1,979* / FP8 3,958* / INT8 3,958* TFLOPS (whitepaper 989.4 / "
                      "1,978.9 dense); ai-dynamo/aiconfigurator systems/h100_sxm.yaml mem_bw 3350e9",
                      arch="hopper", memory_kind="hbm", link=_NVLINK4),
    "h100-pcie": Peaks(2_000_000_000_000, 756_500_000_000_000, 1_513_000_000_000_000, None, 1_513_000_000_000_000,
                       "NVIDIA H100 datasheet, PCIe column: 2 TB/s HBM2e, BF16 1,513* / FP8 3,026* / INT8 3,026* "
                       "TFLOPS (* with sparsity; dense half)",
                       arch="hopper", memory_kind="hbm",
                       link=Link("pcie", 64 * G, "PCIe 5.0 x16",
                                 "NVIDIA H100 datasheet, PCIe column: 'PCIe Gen5: 128GB/s' (64 GB/s each way); "
                                 "'NVIDIA NVLink: 600GB/s' only through the optional 2-way NVLink bridge, not "
                                 "assumed")),
    "h200": Peaks(4_800_000_000_000, 989_400_000_000_000, 1_978_900_000_000_000, None, 1_978_900_000_000_000,
                  "NVIDIA H200 (SXM) product page: 4.8 TB/s HBM3e, BF16 1,979* / FP8 3,958* TFLOPS (* with "
                  "sparsity; dense half: the H100's GH100 compute); aiconfigurator systems/h200_sxm.yaml "
                  "mem_bw 4800e9",
                  arch="hopper", memory_kind="hbm", link=_NVLINK4),
    "h800": Peaks(3_350 * G, 989_400 * G, 1_978_900 * G, None, 1_978_900 * G,
                  "NVIDIA H800 SXM (listed in NVIDIA's vGPU docs; its spec table as OEMs reproduce it, no nvidia.com "
                  "datasheet): 80 GB HBM3 at 3.35 TB/s, BF16 1,979* / FP8 3,958* / INT8 3,958* TFLOPS as the H100 "
                  "SXM (* with sparsity; dense half: the H100's GH100 compute, FP64 and NVLink cut for export)",
                  arch="hopper", memory_kind="hbm",
                  link=Link("nvlink", 200 * G, "NVLink 4 (export-limited)",
                            "NVIDIA H800 SXM spec table: 'NVLink: 400GB/s, PCIe Gen5: 128GB/s' (the H100's 900 "
                            "GB/s cut for export; bidirectional: 200 GB/s each way)")),
    "a100-40gb": Peaks(1_555_000_000_000, 312 * T, None, None, 624 * T,
                       "NVIDIA A100 datasheet: 40GB 1,555 GB/s HBM2, BF16 312 (624*) TFLOPS, INT8 624 (1,248*) TOPS",
                       arch="ampere", memory_kind="hbm", link=_A100_LINK),
    "a100-80gb": Peaks(2_039_000_000_000, 312 * T, None, None, 624 * T,
                       "NVIDIA A100 datasheet: 80GB SXM 2,039 GB/s (PCIe 1,935 GB/s; the larger kept), BF16 312 "
                       "TFLOPS dense; aiconfigurator systems/a100_sxm.yaml mem_bw 2039e9",
                       arch="ampere", memory_kind="hbm", link=_A100_LINK),
    "l4": Peaks(300_000_000_000, 121 * T, 242_500_000_000_000, None, 242_500_000_000_000,
                "NVIDIA L4 datasheet: 300 GB/s GDDR6, BF16 242* / FP8 485* TFLOPS (* with sparsity; dense half)",
                arch="ada", memory_kind="gddr",
                link=Link("pcie", 32 * G, "PCIe 4.0 x16",
                          "NVIDIA L4 datasheet: 'Interconnect: PCIe Gen4 x16 64GB/s' (bidirectional: 32 GB/s each "
                          "way); no NVLink")),
    "l40": Peaks(864 * G, 181_050 * G, 362 * T, None, 362 * T,
                 "NVIDIA L40 datasheet: 864 GB/s GDDR6, BF16 181.05 | 362.1* TFLOPS, FP8 362 | 724*, INT8 362 | "
                 "724* TOPS (* with sparsity)",
                 arch="ada", memory_kind="gddr",
                 link=Link("pcie", 32 * G, "PCIe 4.0 x16", "NVIDIA L40 datasheet: 'Interconnect Interface: " + _PCIE4)),
    "l40s": Peaks(864_000_000_000, 362_050_000_000_000, 733 * T, None, 733 * T,
                  "NVIDIA L40S datasheet: 864 GB/s GDDR6, BF16 362.05 | 733* TFLOPS, FP8 733 | 1,466*; "
                  "aiconfigurator systems/l40s.yaml",
                  arch="ada", memory_kind="gddr",
                  link=Link("pcie", 32 * G, "PCIe 4.0 x16",
                            "NVIDIA L40S datasheet: 'Interconnect Interface: " + _PCIE4)),
    "rtx-4090": Peaks(1_008_000_000_000, 330_300_000_000_000, 660_600_000_000_000, None, 660_600_000_000_000,
                      "NVIDIA Ada GPU architecture whitepaper, RTX 4090: 1,008 GB/s GDDR6X; FP16 with FP16 "
                      "accumulate 330.3 TFLOPS dense (FP32 accumulate, BF16: 165.2), FP8 with FP16 accumulate "
                      "660.6, INT8 660.6 TOPS: the fastest path, as a bound needs (llama.cpp's F16 GEMMs use it)",
                      arch="ada", memory_kind="gddr",
                      link=Link("pcie", 32 * G, "PCIe 4.0 x16",
                                "NVIDIA GeForce RTX 4090 specs: PCI Express Gen 4 (x16: 64 GB/s bidirectional, 32 GB/s "
                                "each way); the 4090 has no NVLink")),
    "rtx-5090": Peaks(1_792 * G, 419 * T, 838 * T, 1_676 * T, 838 * T,
                      "NVIDIA RTX Blackwell GPU architecture whitepaper, RTX 5090: 1,792 GB/s GDDR7; FP16 with FP16 "
                      "accumulate 419 | 838* TFLOPS (FP32 accumulate, BF16: 209.5), FP8 with FP16 accumulate 838 | "
                      "1,676*, FP4 1,676 | 3,352* (NVIDIA's '3,352 AI TOPS'), INT8 838 | 1,676* TOPS (* with "
                      "sparsity): the fastest path, as for the RTX 4090",
                      arch="blackwell", memory_kind="gddr",
                      link=Link("pcie", 64 * G, "PCIe 5.0 x16",
                                "NVIDIA GeForce RTX 5090 specs: PCI Express Gen 5 (x16: 128 GB/s bidirectional, 64 "
                                "GB/s each way); no NVLink")),
    "rtx-6000-ada": Peaks(960 * G, 364_250 * G, 728_500 * G, None, 728_500 * G,
                          "NVIDIA RTX 6000 Ada datasheet: 48 GB GDDR6 at 960 GB/s, 'Tensor Performance 1,457.0 "
                          "TFLOPS' (FP8 with sparsity: 728.5 dense); a pro Ada card runs FP16 / BF16 with FP32 "
                          "accumulate at the full rate, half FP8's: 364.25 dense; INT8 728.5 dense TOPS",
                          arch="ada", memory_kind="gddr",
                          link=Link("pcie", 32 * G, "PCIe 4.0 x16",
                                    "NVIDIA RTX 6000 Ada datasheet: 'System Interface: PCIe 4.0 x16' (64 GB/s "
                                    "bidirectional, 32 GB/s each way); no NVLink")),
    "b200": Peaks(8 * T, 2_250 * T, 4_500 * T, 9_000 * T, 4_500 * T,
                  "NVIDIA HGX/DGX B200 specs: 8 TB/s HBM3e per GPU at launch (a later table says 7.7; the larger "
                  "kept), BF16 4.5* / FP8 9* / FP4 18* PFLOPS (* with sparsity; dense half); aiconfigurator "
                  "systems/b200_sxm.yaml",
                  arch="blackwell", memory_kind="hbm",
                  link=Link("nvlink", 900 * G, "NVLink 5 (18 links)",
                            "NVIDIA HGX B200 specs: 'NVLink 5', 'NVSwitch GPU-to-GPU Bandwidth 1.8TB/s', 'Total "
                            "NVLink Bandwidth 14.4TB/s' for 8 GPUs (bidirectional: 900 GB/s each way)")),
    "b300": Peaks(8 * T, 2_250 * T, 4_500 * T, 14_000 * T, 153_500 * G,
                  "NVIDIA Blackwell Ultra datasheet, HGX B300 column (per GPU, up to 1,100 W): FP4 18 | 14 PFLOPS "
                  "(sparse | dense), FP8/FP6 9* / FP16/BF16 4.5* PFLOPS, INT8 307* TOPS (* with sparsity: dense "
                  "half; Blackwell Ultra cuts INT8), 270 GB | 7.7 TB/s; nvidia.com/en-us/data-center/hgx, 8 GPUs: "
                  "FP4 144 | 108 PFLOPS (13.5 dense a GPU; the larger kept), FP8/FP6 72*, FP16/BF16 36*; Blackwell "
                  "Ultra: 288 GB HBM3E at 8 TB/s (the larger kept). GB300 NVL72 runs the chip at 1,400 W: FP4 15, "
                  "FP8 5, BF16 2.5 PFLOPS dense a GPU (not this preset); aiconfigurator systems/b300_sxm.yaml fp4 "
                  "14e15",
                  arch="blackwell", memory_kind="hbm",
                  link=Link("nvlink", 900 * G, "NVLink 5 (18 links)",
                            "NVIDIA HGX B300 specs: 'NVLink 5', 'GPU-to-GPU Bandwidth 1.8 TB/s', 'Total NVLink "
                            "Bandwidth 14.4 TB/s' for 8 GPUs (bidirectional: 900 GB/s each way)")),
    "gb200": Peaks(8 * T, 2_500 * T, 5_000 * T, 10_000 * T, 5_000 * T,
                   "NVIDIA GB200 NVL72 specs, the rack's 72-GPU totals / 72: FP4 1,440* PFLOPS -> 20* (10 dense), "
                   "FP8/FP6 720* -> 10* (5 dense), INT8 720* POPS -> 10* (5 dense), FP16/BF16 360* -> 5* (2.5 "
                   "dense), HBM3e 13.4 TB | 576 TB/s -> 186 GB | 8 TB/s (* with sparsity; dense half)",
                   arch="blackwell", memory_kind="hbm",
                   link=Link("nvlink", 900 * G, "NVLink 5 (72-GPU NVLink domain)",
                             "NVIDIA GB200 NVL72 specs: 'NVLink Bandwidth 130TB/s' for 72 GPUs: 1.8 TB/s a GPU "
                             "(bidirectional: 900 GB/s each way)")),
    "mi300x": Peaks(5_300_000_000_000, 1_307_400_000_000_000, 2_614_900_000_000_000, None, 2_614_900_000_000_000,
                    "AMD Instinct MI300X data sheet: 5.3 TB/s HBM3, BF16 1,307.4 TFLOPS dense (2,614.9 with "
                    "sparsity), FP8 2,614.9 dense",
                    arch="cdna3", memory_kind="hbm",
                    link=Link("infinity-fabric", 448 * G, "Infinity Fabric (7 x 128 GB/s)",
                              "AMD Instinct MI300X data sheet: " + _MI300_LINK)),
    "mi325x": Peaks(6 * T, 1_307_400 * G, 2_614_900 * G, None, 2_614_900 * G,
                    "AMD Instinct MI325X data sheet: 256 GB HBM3E at 6 TB/s; the MI300X's CDNA 3 compute: BF16 "
                    "1,307.4 TFLOPS dense (2,614.9 with sparsity), FP8 2,614.9 dense, INT8 2,614.9 TOPS dense",
                    arch="cdna3", memory_kind="hbm",
                    link=Link("infinity-fabric", 448 * G, "Infinity Fabric (7 x 128 GB/s)",
                              "AMD Instinct MI325X data sheet: " + _MI300_LINK)),
}  # fmt: skip


_MEMORY = (
    GPU("h100-sxm", 85_017_755_648, 81_559,
        "CUDA deviceQuery 81,079 MiB (85,017,755,648 B), driver 13.0 / runtime 12.5; torch shows 81,082-81,090 MiB "
        "on other drivers; nvidia-smi 81,559 MiB (modal-labs/modal-client PR #2797)",
        ("h100", "h100-80gb", "h100-sxm5")),
    GPU("h100-pcie", 81_008 * MIB, 81_559, "torch total_memory=81008MB; nvidia-smi 81,559 MiB", ("h100-pcie-80gb",)),
    GPU("h200", 143_156 * MIB, 143_771,
        "torch total_memory=143156MB; nvidia-smi 143,771 MiB (NVIDIA/cuda-samples issue #311)", ("h200-141gb",)),
    GPU("h800", 85_017_755_648, 81_559,
        "derived, not measured (no H800 log found): nvidia-smi names it 'NVIDIA H800 80GB HBM3', the H100 SXM's 80 GB "
        "HBM3, so the h100-sxm figures are used (CUDA deviceQuery 85,017,755,648 B; nvidia-smi 81,559 MiB)",
        ("h800-sxm", "h800-80gb", "h800-sxm5")),
    GPU("a100-40gb", 42_298_834_944, 40_960,
        "CUDA deviceQuery 40,339 MiB (42,298,834,944 B), driver 12.2 (bottlerocket-os PR #3873); nvidia-smi 40,960 MiB",
        ("a100-40", "a100-sxm4-40gb")),
    GPU("a100-80gb", 81_049 * MIB, 81_920,
        "CUDA 'Total global mem: 81049 MB' on A100 80GB PCIe, driver 12.3 (ekondis/mixbench issue #47); "
        "nvidia-smi 81,920 MiB", ("a100-80", "a100-sxm4-80gb")),
    GPU("l4", 23_612_293_120, 23_034,
        "CUDA deviceQuery 22,518 MiB (23,612,293,120 B), driver 12.0; nvidia-smi 23,034 MiB"),
    GPU("l40", 47_674_136_985, 46_068,
        "torch 'GPU 0 has a total capacity of 44.40 GiB' on one L40 (QwenLM/Qwen3-VL issue #2097): 44.40 GiB as "
        "printed (two decimals); nvidia-smi 46,068 MiB, as the L40S", ("l40-48gb",)),
    GPU("l40s", 45_589 * MIB, 46_068, "torch total_memory=45589MB; nvidia-smi 46,068 MiB"),
    GPU("rtx-4090", 24_563 * MIB, 24_564,
        "torch total_memory=24563MB; nvidia-smi 24,564 MiB (RLinf/RLinf issue #255)", ("4090", "rtx4090")),
    GPU("rtx-5090", 33_660_534_784, 32_607,
        "CUDA deviceQuery 32,101 MiB (33,660,534,784 B), driver 13.0 / runtime 12.8 (another card: 32,109 MiB); "
        "nvidia-smi 32,607 MiB, driver 570.195 (pavanjava/vision_rag system_requirements.md)",
        ("5090", "rtx5090", "geforce-rtx-5090")),
    GPU("rtx-6000-ada", 48_622 * MIB, 49_140,
        "torch total_memory=48622MB (torch 2.3.0+cu121); nvidia-smi 49,140 MiB ('NVIDIA RTX 6000 Ada Gene...')",
        ("rtx6000-ada", "6000-ada", "rtx-6000-ada-generation")),
    GPU("b200", 182_631 * MIB, 183_359,
        "torch total_memory=182631MB; nvidia-smi 183,359 MiB (NVIDIA/TensorRT-LLM issue #10278)", ("b200-180gb",)),
    GPU("b300", 287_429_948_866, 275_040,
        "torch 'GPU 0 has a total capacity of 267.69 GiB' in B300 OOM logs: 267.69 GiB as printed (two decimals); "
        "nvidia-smi 275,040 MiB ('NVIDIA B300 SXM6 AC', 1100 W cap, driver 580), = aiconfigurator "
        "systems/b300_sxm.yaml mem_capacity 288,400,343,040 B", ("b300-288gb", "b300-sxm", "b300-sxm6")),
    GPU("gb200", 197_901_355_581, 189_471,
        "torch 'GPU 0 has a total capacity of 184.31 GiB' in GB200 (NVL72) vLLM OOM logs: 184.31 GiB as printed "
        "(two decimals); nvidia-smi 189,471 MiB ('NVIDIA GB200', 1200 W cap)", ("gb200-nvl72", "gb200-186gb")),
    GPU("mi300x", 206_141_652_992, 196_592,
        "ROCm torch total_memory=196592MB = rocm-smi 206,141,652,992 B, bare metal (ROCm/ROCm issue #4203); "
        "SR-IOV cloud VFs report 205,822,885,888 B", ("mi300",)),
    GPU("mi325x", 274_861_129_728, 262_128,
        "rocminfo GPU pool 268,419,072 KB = 274,861,129,728 B (ROCm/rocm-systems issue #8263), 16 MiB short of "
        "256 GiB as the MI300X's 201,310,208 KB pool (= its rocm-smi and torch total) is of 192 GiB; smi_mib is "
        "that pool in MiB, derived as for the MI300X, not a rocm-smi print", ("mi325", "mi325x-256gb")),
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
        peaks = Peaks(bandwidth * 10**9, flops, None, None, flops, source, arch="apple", memory_kind="unified")
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


# Names sold in more than one memory size: a name alone does not say which card, so it is refused
# with the choices (the A100 in 40 GB and 80 GB, NVIDIA A100 datasheet).
AMBIGUOUS: dict[str, tuple[str, ...]] = {
    "a100": ("a100-40gb", "a100-80gb"),
    "a100-sxm4": ("a100-40gb", "a100-80gb"),
    "a100-pcie": ("a100-40gb", "a100-80gb"),
}


def find_gpu(name: str) -> GPU:
    """The GPU preset a name or alias stands for; a name several presets share (``a100``) or no
    preset has is refused in one line naming the choices."""
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    for gpu in GPUS:
        if key == gpu.name or key in gpu.aliases:
            return gpu
    if key in AMBIGUOUS:
        raise UsageError(f"gpu {name!r} comes in several memory sizes: choose {' or '.join(AMBIGUOUS[key])}",
                         param="gpu")  # fmt: skip
    by_label = {label: g for g in GPUS for label in (g.name, *g.aliases)}
    close = difflib.get_close_matches(key, list(by_label), n=len(by_label), cutoff=0.5)
    # One name per preset (its own), however many of its aliases are close.
    names = list(dict.fromkeys(by_label[label].name for label in close))[:3]
    hint = f"; did you mean {', '.join(names)}?" if names else f"; known: {', '.join(g.name for g in GPUS)}"
    raise UsageError(f"unknown GPU {name!r}{hint} (or give --gpu-memory SIZE)")
