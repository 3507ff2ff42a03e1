"""GPU presets: memory in exact bytes as the CUDA/ROCm runtime reports it, peaks and links.

The figures, each with its source, are data: ``gpus.yaml`` beside this module, validated when
first loaded (a bad field is one line naming the preset and the field). ``runtime_bytes`` is
``torch.cuda.mem_get_info()[1]`` / ``get_device_properties().total_memory`` (what vLLM
multiplies by gpu_memory_utilization); it is below the ``nvidia-smi`` total by the driver's
reservation and moves a little between driver versions. Here are the types, the Macs' rules (the
wired limit, the FLOP/s estimate) and the look-up.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvcalc.errors import PresetError, UsageError

MIB = 2**20


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
    def vendor(self) -> str:
        """Who makes it, from its architecture (``VENDORS``): "nvidia", "amd" or "apple"."""
        return VENDORS[self.peaks.arch if self.peaks is not None else ""]

    @property
    def platform(self) -> str:
        """The software platform engines run on it: "cuda" (NVIDIA), "rocm" (AMD) or "metal" (a Mac):
        an engine whose rules differ by platform (SGLang on ROCm) reads it as its ``Target.platform``."""
        return _PLATFORMS[self.vendor]

    @property
    def one_per_machine(self) -> bool:
        """Whether the machine holds this one GPU only (a Mac): more GPUs are more machines, so
        fit suggests no tensor parallelism on it."""
        return self.unified_bytes is not None


# --- Apple silicon: the rules that turn a chip's data into one preset per memory size ------------
# Metal's recommendedMaxWorkingSetSize as measured (GiB of unified memory -> bytes): llama.cpp's
# ggml_metal_init log lines, which print it in MiB: 16 GB 10,922.67 (abetlen/llama-cpp-python
# issue #687, M1 Pro) and 10.67 GB on an M4 (exo-explore/exo PR #1672); 32 GB 21,845.34 (ollama
# issue #434, M2 Max; ggml-org/llama.cpp PR #2011, M1 Max); 64 GB 49,152.00 (llama.cpp issue #1870,
# M1 Max); 96 GB 73,728.00 (llama.cpp issue #3213, M2 Max); 128 GB: gpus.yaml's
# working_set_measured. Other sizes follow the measured rule: 2/3 of memory below 64 GB, 3/4 from
# 64 GB.
_APPLE_SPEC = "Apple tech specs / newsroom: {bw} GB/s unified memory bandwidth; {flops}"


def _apple_flops(cores: int) -> int:
    """An Apple GPU's FP32 FLOP/s where Apple publishes none: cores x 128 lanes x 2 x 1.6 GHz."""
    return cores * 128 * 2 * 1_600_000_000


def mac_working_set(ram_gib: int) -> tuple[int, bool]:
    """(bytes macOS lets the GPU wire by default, whether that size was measured)."""
    return _wired(ram_gib, _data().working_set)


def _wired(ram_gib: int, measured: dict[int, int]) -> tuple[int, bool]:
    if ram_gib in measured:
        return measured[ram_gib], True
    ram = ram_gib * 2**30
    fraction = (2, 3) if ram_gib < 64 else (3, 4)
    return ram * fraction[0] // fraction[1], ram_gib in (16, 32, 64, 96)


# --- loading gpus.yaml ----------------------------------------------------------------------------

_FILE = Path(__file__).with_name("gpus.yaml")
_PACKED = Path(__file__).with_name("gpus.json")  # a wheel's pre-parsed copy (hatch_build.py)
_INT, _STR, _LIST, _MAP = int, str, list, dict
_CARD = {
    "name": (_STR, True),
    "aliases": (_LIST, False),
    "runtime_bytes": (_INT, False),
    "runtime_mib": (_INT, False),
    "smi_mib": (_INT, True),
    "source": (_STR, True),
    "peaks": (_MAP, True),
}
_PEAKS = {
    "bandwidth": (_INT, True),
    "bf16": (_INT, True),
    "fp8": (_INT, False),
    "fp4": (_INT, False),
    "int8": (_INT, True),
    "arch": (_STR, True),
    "memory_kind": (_STR, True),
    "source": (_STR, True),
    "link": (_MAP, True),
}
_LINK = {"kind": (_STR, True), "bandwidth": (_INT, True), "label": (_STR, True), "source": (_STR, True)}
_CHIP = {
    "chip": (_STR, True),
    "memory_gb": (_LIST, True),
    "bandwidth_gbs": (_INT, True),
    "fp32_flops": (_INT, False),
    "gpu_cores": (_INT, False),
    "flops_source": (_STR, True),
}
_TOP = {"cards": (_LIST, True), "macs": (_MAP, True), "ambiguous": (_MAP, True)}
_MACS = {"working_set_measured": (_MAP, True), "chips": (_LIST, True)}  # fmt: skip
# Each card architecture's maker: a card's vendor follows from its peaks.arch (gpus.yaml's arch must
# be one of these), every Mac's ("apple") is Apple's; a GPU built with no peaks is taken as NVIDIA's.
VENDORS = {"ampere": "nvidia", "ada": "nvidia", "hopper": "nvidia", "blackwell": "nvidia", "cdna3": "amd",
           "apple": "apple", "": "nvidia"}  # fmt: skip
_ARCHS = tuple(arch for arch in VENDORS if arch not in ("apple", ""))
# The platform each maker's GPUs run engines on.
_PLATFORMS = {"nvidia": "cuda", "amd": "rocm", "apple": "metal"}
_MEMORY_KINDS = ("hbm", "gddr")
_LINK_KINDS = ("nvlink", "pcie", "infinity-fabric")


def _fail(where: str, what: str) -> PresetError:
    return PresetError(f"GPU presets ({_FILE.name}): {where}: {what}")


def _fields(data: Any, fields: Mapping[str, tuple[type, bool]], where: str) -> dict[str, Any]:
    """A mapping with no unknown field, every required one, each of its type (None where optional)."""
    if not isinstance(data, dict):
        raise _fail(where, "expected a mapping")
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise _fail(where, f"unknown field {unknown[0]!r}")
    for key, (kind, required) in fields.items():
        value = data.get(key)
        if value is None:
            if required:
                raise _fail(where, f"missing field {key!r}")
            continue
        if not isinstance(value, kind) or isinstance(value, bool):
            raise _fail(where, f"field {key!r} must be {'an' if kind is int else 'a'} {kind.__name__}")
        if isinstance(value, int) and value <= 0:
            raise _fail(where, f"field {key!r} must be positive")
    return data


def _one_of(value: str, choices: tuple[str, ...], where: str, key: str) -> str:
    if value not in choices:
        raise _fail(where, f"{key} {value!r} is not one of {', '.join(choices)}")
    return value


def _names(value: list[Any], where: str, key: str) -> tuple[str, ...]:
    if not all(isinstance(v, str) and v and v == v.lower() for v in value):
        raise _fail(where, f"{key} must be lower-case names")
    return tuple(value)


def _card(data: Any, index: int) -> GPU:
    where = f"cards[{index}]" + (f" ({data['name']})" if isinstance(data, dict) and "name" in data else "")
    card = _fields(data, _CARD, where)
    if ("runtime_bytes" in card) == ("runtime_mib" in card):
        raise _fail(where, "give one of 'runtime_bytes' and 'runtime_mib'")
    runtime = card["runtime_bytes"] if "runtime_bytes" in card else card["runtime_mib"] * MIB
    p = _fields(card["peaks"], _PEAKS, where + " peaks")
    link = _fields(p["link"], _LINK, where + " peaks.link")
    peaks = Peaks(p["bandwidth"], p["bf16"], p.get("fp8"), p.get("fp4"), p["int8"], p["source"],
                  arch=_one_of(p["arch"], _ARCHS, where, "arch"),
                  memory_kind=_one_of(p["memory_kind"], _MEMORY_KINDS, where, "memory_kind"),
                  link=Link(_one_of(link["kind"], _LINK_KINDS, where, "link.kind"), link["bandwidth"],
                            link["label"], link["source"]))  # fmt: skip
    return GPU(_names([card["name"]], where, "name")[0], runtime, card["smi_mib"], card["source"],
               _names(card.get("aliases", []), where, "aliases"), peaks)  # fmt: skip


def _macs(chips: list[Any], working_set: dict[int, int]) -> list[GPU]:
    macs = []
    for index, data in enumerate(chips):
        chip = _fields(data, _CHIP, f"macs.chips[{index}]")
        where = f"macs.chips[{index}] ({chip['chip']})"
        if ("fp32_flops" in chip) == ("gpu_cores" in chip):
            raise _fail(where, "give one of 'fp32_flops' and 'gpu_cores'")
        flops = chip["fp32_flops"] if "fp32_flops" in chip else _apple_flops(chip["gpu_cores"])
        source = _APPLE_SPEC.format(bw=chip["bandwidth_gbs"], flops=chip["flops_source"])
        peaks = Peaks(chip["bandwidth_gbs"] * 10**9, flops, None, None, flops, source, arch="apple",
                      memory_kind="unified")  # fmt: skip
        name = _names([chip["chip"]], where, "chip")[0]
        for gb in chip["memory_gb"]:
            if not isinstance(gb, int) or isinstance(gb, bool) or gb <= 0:
                raise _fail(where, "memory_gb must be positive whole GB")
            wired, measured = _wired(gb, working_set)
            how = "measured" if measured else "2/3 of memory below 64 GB, 3/4 from 64 GB (the measured rule)"
            macs.append(GPU(
                f"{name}-{gb}gb", wired, gb * 1024,
                f"Apple {name.upper().replace('-', ' ')} with {gb} GB unified memory; macOS lets the GPU wire "
                f"{wired:,} B by default (recommendedMaxWorkingSetSize, {how})",
                (f"{name}-{gb}", f"{name.replace('-', '')}-{gb}gb"), peaks, unified_bytes=gb * 2**30,
            ))  # fmt: skip
    return macs


@dataclass(frozen=True)
class _Presets:
    working_set: dict[int, int]
    gpus: tuple[GPU, ...]
    ambiguous: dict[str, tuple[str, ...]]


_LOADED: list[_Presets] = []


def _read() -> Any:
    if _PACKED.is_file():  # an installed wheel: the same data, pre-parsed, no PyYAML import
        import json

        return json.loads(_PACKED.read_text(encoding="utf-8"))
    import yaml

    try:
        return yaml.load(_FILE.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise PresetError(f"GPU presets ({_FILE.name}): invalid YAML ({exc.__class__.__name__})") from None
    except OSError as exc:
        raise PresetError(f"GPU presets ({_FILE.name}) cannot be read: {exc.strerror}") from None


def _data() -> _Presets:
    """gpus.yaml, read and validated once."""
    if _LOADED:
        return _LOADED[0]
    top = _fields(_read(), _TOP, "the file")
    macs = _fields(top["macs"], _MACS, "macs")
    # Whole GB -> bytes (a JSON copy writes the GB as text).
    measured = macs["working_set_measured"]
    if not all(str(k).isdigit() and isinstance(v, int) and not isinstance(v, bool) and v > 0
               for k, v in measured.items()):  # fmt: skip
        raise _fail("macs.working_set_measured", "maps whole GB to a positive byte count")
    working = {int(k): v for k, v in measured.items()}
    ambiguous = {str(k): _names(v if isinstance(v, list) else [None], f"ambiguous.{k}", "choices")
                 for k, v in top["ambiguous"].items()}  # fmt: skip
    gpus = (*(_card(card, i) for i, card in enumerate(top["cards"])), *_macs(macs["chips"], dict(working)))
    taken: dict[str, str] = {}
    for gpu in gpus:
        for label in dict.fromkeys((gpu.name, *gpu.aliases)):
            if label in taken or label in ambiguous:
                raise _fail(gpu.name, f"name {label!r} is also {taken.get(label, 'an ambiguous name')}'s")
            taken[label] = gpu.name
    _LOADED.append(_Presets(dict(working), gpus, ambiguous))
    return _LOADED[0]


if TYPE_CHECKING:
    GPUS: tuple[GPU, ...]
    PEAKS: dict[str, Peaks | None]
    AMBIGUOUS: dict[str, tuple[str, ...]]


def __getattr__(name: str) -> Any:
    """``GPUS`` (every preset: the cards, then the Macs), ``PEAKS`` (a card's peaks by name) and
    ``AMBIGUOUS``, read from gpus.yaml on first use."""
    if name == "GPUS":
        return _data().gpus
    if name == "PEAKS":
        return {g.name: g.peaks for g in _data().gpus if g.unified_bytes is None}
    if name == "AMBIGUOUS":
        return _data().ambiguous
    raise AttributeError(f"module 'kvcalc.gpus' has no attribute {name!r}")


def find_gpu(name: str, param: str = "gpu") -> GPU:
    """The GPU preset a name or alias stands for; a name several presets share (``a100``) or no
    preset has is refused in one line naming the choices (``param``: the parameter that gave it)."""
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    data = _data()
    for gpu in data.gpus:
        if key == gpu.name or key in gpu.aliases:
            return gpu
    if key in data.ambiguous:
        raise UsageError(f"{param} {name!r} comes in several memory sizes: choose "
                         f"{' or '.join(data.ambiguous[key])}", param=param)  # fmt: skip
    by_label = {label: g for g in data.gpus for label in (g.name, *g.aliases)}
    close = difflib.get_close_matches(key, list(by_label), n=len(by_label), cutoff=0.5)
    # One name per preset (its own), however many of its aliases are close.
    names = list(dict.fromkeys(by_label[label].name for label in close))[:3]
    # The presets are many: a command lists them (kvcalc gpus), not this line.
    hint = f"did you mean {', '.join(names)}?" if names else "'kvcalc gpus' lists them"
    also = " (or give --gpu-memory SIZE)" if param == "gpu" else ""
    raise UsageError(f"unknown GPU {name!r}; {hint}{also}", param=param)
