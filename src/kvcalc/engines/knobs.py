"""An engine's vocabulary: its knobs (typed, self-validating ``EngineOptions`` fields, each with its
limits, help text and the engine's own flag spelling) and the one ``EnginePlugin`` record each engine
package exports. Light on purpose: the CLI reads every engine's knobs from here to build its flags,
so this module and each engine package's ``__init__`` import no engine rules (tests/engines/test_knobs.py).
"""

from __future__ import annotations

from collections.abc import Mapping
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


class Knob:
    """One knob of an engine: its API name (the options field), kvcalc's flag, the engine's own
    spelling of it, its help, how it is written and its bounds, and its default as help shows it.
    ``sizes_cache``: whether it shapes the cache an estimate sizes (False: only fit's runtime).
    ``simulate_only``: read by simulate's scheduler alone (a step's token budget, mixed chunks): no
    pool or runtime depends on it, so only ``kvcalc simulate`` offers its flag.

    A plain class, not a dataclass: every command builds its flags from every engine's knobs at
    start-up, where a dataclass costs about 0.4 ms to define (benchmarks/startup.py)."""

    __slots__ = ("default", "engine_flag", "flag", "help", "kind", "maximum", "metavar", "minimum", "name",
                 "simulate_only", "sizes_cache")  # fmt: skip

    def __init__(self, name: str, flag: str, engine_flag: str, help: str, kind: KnobKind = "int",
                 minimum: int = 1, maximum: int = MAX_COUNT, default: str = "", metavar: str = "N",
                 sizes_cache: bool = True, simulate_only: bool = False) -> None:  # fmt: skip
        self.name, self.flag, self.engine_flag, self.help, self.kind = name, flag, engine_flag, help, kind
        self.minimum, self.maximum, self.default, self.metavar = minimum, maximum, default, metavar
        self.sizes_cache = sizes_cache and not simulate_only
        self.simulate_only = simulate_only

    def named(self, name: str) -> Knob:
        """This knob under the name of the options field that holds it."""
        return Knob(name, self.flag, self.engine_flag, self.help, self.kind, self.minimum, self.maximum,
                    self.default, self.metavar, self.sizes_cache, self.simulate_only)  # fmt: skip

    def __repr__(self) -> str:
        return f"Knob({self.name!r}, {self.flag!r}, engine_flag={self.engine_flag!r})"

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
    simulate_only: bool = False,
) -> Any:
    """A knob of an ``EngineOptions`` subclass, written as its attribute's default
    (``block_size: int | None = knob(...)``): not given, the attribute is None (False for a flag),
    the engine's default; the class records the ``Knob`` under the attribute's name."""
    return Knob("", flag, engine_flag, help, kind, minimum, maximum, default, metavar, sizes_cache, simulate_only)


class EngineOptions:
    """An engine's knobs, one ``knob(...)`` attribute each (None or False: the engine's default).
    The base engine has none; each engine that has knobs subclasses this with the ones it reads, in
    the API's names (``ubatch``, ``block_size``), and names it in its plugin and
    ``Engine.options_type``. An instance is frozen and checks what it is given: a name that is no
    knob is refused, so a flag that would change nothing is an error, never silently dropped.
    (``make_engine`` refuses it first, in one line naming the engines that have it.)"""

    _knobs: ClassVar[tuple[Knob, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        found = {k.name: k for k in cls._knobs}  # the parent's, then this class's own
        for name, value in list(vars(cls).items()):
            if isinstance(value, Knob):
                found[name] = value.named(name)
                setattr(cls, name, False if value.is_flag else None)
        cls._knobs = tuple(found.values())

    def __init__(self, **values: KnobValue) -> None:
        own = self.knob_names()
        for name, value in values.items():
            if name not in own:
                raise TypeError(f"{type(self).__name__} has no knob {name!r}")
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def _values(self) -> tuple[KnobValue, ...]:
        return tuple(getattr(self, k.name) for k in self._knobs)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._values() == self._values()

    def __hash__(self) -> int:
        return hash((type(self), self._values()))

    def __repr__(self) -> str:
        given = ", ".join(f"{k.name}={getattr(self, k.name)!r}" for k in self._knobs)
        return f"{type(self).__name__}({given})"

    @classmethod
    def knobs(cls) -> tuple[Knob, ...]:
        """This engine's knobs, in the order the class declares them, each named after its attribute."""
        return cls._knobs

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


class EnginePlugin:
    """The one object an engine package exports: everything kvcalc's help, completion,
    ``--engine NAME@VERSION`` and flags need to know about the engine without loading its rules --
    its name, aliases, a summary line, the releases it models (oldest first; empty: no versioned
    rules) and the one a plain NAME means, its options type (the knobs), the title of its knobs'
    help panel, the key of its capacity plan in fit's JSON when it has one (``plan_key``: every
    engine's key is in every answer, null but the plan's own) -- and where the rest lives:
    ``load()`` gives its rules class (``"kvcalc.engines.vllm.rules:VLLM"``: storage rules, runtime
    model, capacity plan and step costs as its hooks), ``prober`` its real probe.

    ``version_scheme`` says how ``NAME@VERSION`` is written: "release" (X.Y or X.Y.Z, one of
    ``versions``) or "build" (a build number, ``bNNNN`` as llama.cpp tags its builds: any build at
    or after the oldest of ``versions``, which name the builds whose rules were read)."""

    __slots__ = ("aliases", "default_version", "name", "options", "panel", "plan_key", "rules", "summary",
                 "version_scheme", "versions")  # fmt: skip

    def __init__(self, name: str, summary: str, rules: str, options: type[EngineOptions] = EngineOptions,
                 aliases: tuple[str, ...] = (), versions: tuple[str, ...] = (), default_version: str | None = None,
                 panel: str = "", plan_key: str | None = None, version_scheme: str = "release") -> None:  # fmt: skip
        self.name, self.summary, self.rules, self.options = name, summary, rules, options
        self.aliases, self.versions, self.default_version = aliases, versions, default_version
        self.panel, self.plan_key, self.version_scheme = panel, plan_key, version_scheme

    def __repr__(self) -> str:
        return f"EnginePlugin({self.name!r}, rules={self.rules!r})"

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
