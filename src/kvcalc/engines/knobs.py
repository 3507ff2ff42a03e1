"""An engine's vocabulary: its knobs (typed, self-validating ``EngineOptions`` fields, each with its
limits, help text and the engine's own flag spelling) and the one ``EnginePlugin`` record each engine
package exports. Light on purpose: the CLI reads every engine's knobs from here to build its flags,
so this module and each engine's options module import no engine rules (tests/engines/test_knobs.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from importlib import import_module
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from kvcalc.checks import MAX_COUNT
from kvcalc.errors import UsageError

if TYPE_CHECKING:
    from kvcalc.engines.base import Engine
    from kvcalc.engines.probing import Prober

KnobValue = int | bool | None
# How a knob is written: "int" a whole number (click checks it against the minimum), "count" a
# count as users write counts (1k), "size" a byte size (1GiB), "flag" an on/off flag.
KnobKind = Literal["int", "count", "size", "flag"]


@dataclass(frozen=True)
class Knob:
    """One knob of an engine: its API name (the options field), kvcalc's flag, the engine's own
    spelling of it, its help, how it is written and its bounds, and its default as help shows it.
    ``sizes_cache``: whether it shapes the cache an estimate sizes (False: only fit's runtime)."""

    name: str
    flag: str
    engine_flag: str
    help: str
    kind: KnobKind = "int"
    minimum: int = 1
    maximum: int = MAX_COUNT
    default: str = ""
    metavar: str = "N"
    sizes_cache: bool = True

    @property
    def is_flag(self) -> bool:
        return self.kind == "flag"

    def check(self, value: object) -> None:
        """Raise a one-line UsageError (of this knob) for a value out of its bounds; None (and
        False for a flag) is "not given"."""
        param = self.name
        if self.is_flag:
            if value is not None and not isinstance(value, bool):
                raise UsageError(f"{param} is a flag (True or False), got {value!r}", param=param)
            return
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value < self.minimum:
            what = "must not be negative" if self.minimum == 0 else "must be positive"
            raise UsageError(f"{param} {what}, got {value}", param=param)
        if value > self.maximum:
            raise UsageError(f"{param} is implausibly large: {value:.3g} (at most {self.maximum:,})", param=param)


def knob(
    *,
    flag: str,
    engine_flag: str,
    help: str,
    kind: KnobKind = "int",
    minimum: int = 1,
    maximum: int = MAX_COUNT,
    default: str = "",
    metavar: str = "N",
    sizes_cache: bool = True,
) -> Any:
    """An ``EngineOptions`` field that is a knob: None (False for a flag) means not given, the
    engine's default; the ``Knob`` record rides in the field's metadata (its name: the field's)."""
    record = Knob("", flag, engine_flag, help, kind, minimum, maximum, default, metavar, sizes_cache)
    return field(default=False if kind == "flag" else None, metadata={"knob": record})


@dataclass(frozen=True)
class EngineOptions:
    """An engine's knobs, one ``knob(...)`` field each (None or False: the engine's default). The
    base engine has none; each engine that has knobs subclasses this with the ones it reads, in the
    API's names (``ubatch``, ``block_size``), and names it in its plugin and ``Engine.options_type``.
    ``make_engine`` refuses a knob the chosen engine's options lack, so a flag that would change
    nothing is an error, never silently dropped."""

    _knobs: ClassVar[dict[type, tuple[Knob, ...]]] = {}

    @classmethod
    def knobs(cls) -> tuple[Knob, ...]:
        """This engine's knobs, in field order, each named after its field."""
        cached = EngineOptions._knobs.get(cls)
        if cached is None:
            cached = tuple(replace(f.metadata["knob"], name=f.name) for f in fields(cls) if "knob" in f.metadata)
            EngineOptions._knobs[cls] = cached
        return cached

    @classmethod
    def knob_names(cls) -> frozenset[str]:
        return frozenset(k.name for k in cls.knobs())

    @classmethod
    def check(cls, values: Mapping[str, object]) -> dict[str, KnobValue]:
        """The knobs given (neither None nor False), each checked against its bounds; a name
        that is none of this engine's knobs is a one-line UsageError."""
        own = {k.name: k for k in cls.knobs()}
        for name, value in values.items():
            found = own.get(name)
            if found is None:
                known = ", ".join(own) or "none"
                raise UsageError(f"{name} is no engine option kvcalc knows; they are {known}", param=name)
            found.check(value)
        return {name: value for name, value in values.items() if value is not None and value is not False}  # type: ignore[misc]

    @classmethod
    def parse(cls, values: Mapping[str, object]) -> EngineOptions:
        """The options a mapping of knob names to values stands for, checked."""
        return cls(**cls.check(values))


@dataclass(frozen=True)
class EnginePlugin:
    """The one object an engine package exports: everything kvcalc's help, completion,
    ``--engine NAME@VERSION`` and flags need to know about the engine without loading its rules --
    its name, aliases, a summary line, the releases it models (oldest first; empty: no versioned
    rules) and the one a plain NAME means, its options type (the knobs), the title of its knobs'
    help panel, the key of its capacity plan in fit's JSON when it has one (``plan_key``: every
    engine's key is in every answer, null but the plan's own) -- and where the rest lives:
    ``load()`` gives its rules class (``"kvcalc.engines.vllm.rules:VLLM"``: storage rules, runtime
    model, capacity plan and step costs as its hooks), ``prober`` its real probe."""

    name: str
    summary: str
    rules: str
    options: type[EngineOptions] = EngineOptions
    aliases: tuple[str, ...] = ()
    versions: tuple[str, ...] = ()
    default_version: str | None = None
    panel: str = ""
    plan_key: str | None = None

    @property
    def module(self) -> str:
        """The engine's package (or module) under kvcalc.engines: ``vllm``, ``llamacpp``."""
        return self.rules.partition(":")[0].removeprefix("kvcalc.engines.").partition(".")[0]

    @property
    def class_name(self) -> str:
        return self.rules.partition(":")[2]

    @property
    def prober(self) -> Prober | None:
        """How ``kvcalc probe`` runs the engine's real probe: its package's light
        ``probing.PROBER`` (None: the engine has no probe of its own)."""
        name = f"kvcalc.engines.{self.module}.probing"
        try:
            module = import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # a module the probing module imports is missing: not ours to hide
                raise
            return None
        found: Prober = module.PROBER
        return found

    def load(self) -> type[Engine]:
        """The engine's rules class (its module imported now): its storage rules, and the hooks of
        its runtime model, capacity plan and step costs."""
        module, _, name = self.rules.partition(":")
        cls: type[Engine] = getattr(import_module(module), name)
        return cls
