"""What a running server, or the log it printed at start-up, reveals about its KV pool: the pool in
the engine's own units (vLLM's blocks, SGLang's tokens, llama.cpp's cells), the settings it runs
with in kvcalc's terms, the memory it states, and its live usage, each figure with where it came
from. ``kvcalc check`` sets this beside kvcalc's own answer for the same settings.

Each engine package that can be read declares its readers in an ``observe`` module of its own:
``SERVERS`` (how to tell its server from the answers to a few read-only GET requests, and what to
read from them) and ``LOGS`` (how to tell its start-up log from its lines, and what to read from
them). Readers are pure: the API hands a server reader a ``get`` function (bounded GET requests on
one address, each answered once) and a log reader the log's cleaned lines; no reader opens a socket
or a file. A figure a reader cannot read is named in ``unread``, what the estimate needs and the
server does not say in ``missing``: a partial answer says what it lacks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from kvcalc.calc.estimate import Estimate
    from kvcalc.calc.fit import Fit
    from kvcalc.engines.commandline import SettingValue


@dataclass(frozen=True)
class Answer:
    """A server's answer to one GET: its HTTP status (0 when no answer came: refused, timed out, not
    HTTP; ``body`` then says why) and its body as text."""

    status: int
    body: str

    @property
    def ok(self) -> bool:
        return self.status == 200

    def json(self) -> Any:
        """The body as JSON, or None when it is not JSON (or the request failed)."""
        if not self.ok:
            return None
        try:
            return json.loads(self.body)
        except ValueError:
            return None


# A read-only GET of one path on the server being checked ("/metrics"), answered once and cached.
Get = Callable[[str], Answer]

# The units engines count their pools in.
Unit = Literal["block", "token", "page", "cell"]


@dataclass(frozen=True)
class Figure:
    """One value the server or log revealed, as it said it, and where: ``GET /metrics
    vllm:cache_config_info num_gpu_blocks`` or ``log line 42``."""

    name: str
    value: int | float | str | bool | None
    source: str


@dataclass(frozen=True)
class Pool:
    """A KV pool as its engine counts it, per GPU (or rank): ``count`` units of ``unit_tokens`` tokens
    each (vLLM: 12,345 blocks of 16 tokens; SGLang: 2,454,391 tokens; llama.cpp: 32,768 cells).
    ``kind`` tells pools apart where an engine keeps several ("kv"; llama.cpp's "swa" beside it,
    "recurrent" state). ``bytes``: where the engine states them, ``bytes_exact`` False when it
    printed a rounded figure (llama.cpp's MiB to two decimals, SGLang's GB)."""

    count: int
    unit: Unit
    unit_tokens: int = 1
    kind: str = "kv"
    bytes: int | None = None
    bytes_exact: bool = False
    source: str = ""
    # The step of a rounded figure ("12.25 MiB": 0.01 MiB): kvcalc's bytes agree when they round to
    # it; 0 when unknown (a rounded figure is then only set beside kvcalc's, not judged).
    bytes_step: int = 0

    @property
    def tokens(self) -> int:
        return self.count * self.unit_tokens


# The memory terms a server or log may state, in the order a GPU's memory is spent. Readers name
# theirs with these words, so the gap explanation sets each beside kvcalc's own term.
TERMS = ("gpu memory", "usable", "weights", "activation peak", "non-torch", "cuda graphs", "kv cache", "free")


@dataclass(frozen=True)
class MemoryTerm:
    """A share of one GPU's memory the server or log states (one of ``TERMS``), in bytes as
    printed: ``exact`` False when the engine rounded it (vLLM's "4.2 GiB")."""

    name: str
    bytes: int
    source: str
    exact: bool = False


@dataclass(frozen=True)
class Usage:
    """Live usage at one moment, as the server exports it. ``derived`` names the fields kvcalc
    worked out rather than read (vLLM's used blocks: usage x (num_gpu_blocks - 1)): approximate,
    as the exported share is rounded."""

    running: int | None = None
    waiting: int | None = None
    used_fraction: float | None = None
    used_units: int | None = None
    used_tokens: int | None = None
    preemptions: int | None = None
    derived: tuple[str, ...] = ()
    source: str = ""


@dataclass(frozen=True)
class Observation:
    """What one server or log revealed. ``engine``: the kvcalc engine whose rules it runs by
    (``vllm``, ``sglang``, ``llama.cpp``, ``ollama`` ...), or the name of an engine kvcalc reads but
    does not model (``modelled`` False: TGI). ``settings``: what the server runs with, by kvcalc API
    parameter name as ``read_engine_command`` gives them (``tokens``, ``batch``, ``max_model_len``,
    ``utilization``, ``kv_budget``, ``kv_dtype``, knobs such as ``block_size``), ``model`` among them
    when the server names its model. ``missing``: what the estimate needs that it did not say, one
    line each; ``unread``: what it said that kvcalc could not read (a log line, a field), named."""

    engine: str
    origin: str
    release: str | None = None
    settings: Mapping[str, SettingValue] = field(default_factory=dict)
    pools: tuple[Pool, ...] = ()
    memory: tuple[MemoryTerm, ...] = ()
    usage: Usage | None = None
    figures: tuple[Figure, ...] = ()
    gpu: str | None = None  # the accelerator's name where revealed ("NVIDIA H100 80GB HBM3")
    missing: tuple[str, ...] = ()
    unread: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    modelled: bool = True

    def pool(self, kind: str = "kv") -> Pool | None:
        return next((p for p in self.pools if p.kind == kind), None)

    def term(self, name: str) -> MemoryTerm | None:
        return next((t for t in self.memory if t.name == name), None)


@dataclass(frozen=True)
class Predicted:
    """kvcalc's own pool for the settings a server runs with, in the server's units: ``count`` units
    of ``unit_bytes`` each per GPU (the comparison's figure), ``kind`` matching the server's pool.
    ``figures``: kvcalc's value of other figures the server states, by the name the reader gives
    them (vLLM's ``kv_cache_size_tokens``), each set beside the server's."""

    count: int
    unit_bytes: int
    kind: str = "kv"
    unit_tokens: int = 1
    figures: Mapping[str, int | float] = field(default_factory=dict)
    # The unit ``count`` is in, where a reader's pools come in several (vLLM: blocks from /metrics,
    # the tokens a log states); None: whatever unit the server's pool of this kind is in.
    unit: Unit | None = None

    @property
    def bytes(self) -> int:
        return self.count * self.unit_bytes


# How an engine sizes its pool: from the memory left ("budget": vLLM, SGLang; kvcalc's fit predicts
# the count) or from the context and slots it is given ("context": llama.cpp, MLX; kvcalc's
# estimate predicts the bytes).
Sizing = Literal["budget", "context"]


@dataclass(frozen=True)
class ServerReader:
    """How to recognise one engine's server and read it. ``paths``: the GETs it makes, the ones that
    recognise it first; ``identify`` says from their answers whether the server is this engine's;
    ``read`` reads everything it reveals (``origin``: the address, for sources and the JSON)."""

    engine: str
    paths: tuple[str, ...]
    identify: Callable[[Get], bool]
    read: Callable[[Get, str], Observation]


@dataclass(frozen=True)
class LogReader:
    """How to recognise one engine's start-up log and read it: ``claims`` says from its cleaned
    lines whether the log is this engine's (its own banner or pool line), ``read`` reads it."""

    engine: str
    claims: Callable[[Sequence[str]], bool]
    read: Callable[[Sequence[str], str], Observation]


@dataclass(frozen=True)
class PoolRules:
    """How kvcalc predicts an engine's pool for the comparison: ``sizing`` (above) and the function
    that finds the server's units in kvcalc's answer: ``from_fit`` for budget-sized pools (a fit at
    the server's settings), ``from_estimate`` for context-sized ones (the estimate at its context
    and slots), one ``Predicted`` per pool kind."""

    sizing: Sizing
    from_fit: Callable[[Fit], tuple[Predicted, ...]] | None = None
    from_estimate: Callable[[Estimate], tuple[Predicted, ...]] | None = None


# --- finding the readers ---------------------------------------------------------------------------

# Packages with readers of engines kvcalc reads but has no rules for (no registry entry).
READ_ONLY_PACKAGES = ("kvcalc.engines.tgi",)


def _observe_modules() -> list[Any]:
    """Each engine package's ``observe`` module, in the registry's order, then the read-only ones."""
    from kvcalc.engines import REGISTRY

    packages: list[str] = []
    for plugin in REGISTRY.values():
        package, dot, leaf = plugin.rules.partition(":")[0].rpartition(".")
        if leaf == "rules" and dot and package not in packages:
            packages.append(package)
    modules = []
    for package in (*packages, *READ_ONLY_PACKAGES):
        name = f"{package}.observe"
        try:
            modules.append(import_module(name))
        except ModuleNotFoundError as exc:
            if exc.name not in (name, package):
                raise
    return modules


def server_readers() -> tuple[ServerReader, ...]:
    """Every engine's server readers, most specific first (each package's ``observe.SERVERS``)."""
    return tuple(r for m in _observe_modules() for r in getattr(m, "SERVERS", ()))


def log_readers() -> tuple[LogReader, ...]:
    """Every engine's log readers (each package's ``observe.LOGS``)."""
    return tuple(r for m in _observe_modules() for r in getattr(m, "LOGS", ()))


def pool_rules(engine: str) -> PoolRules | None:
    """The pool rules of the package that reads ``engine`` (``observe.POOL_RULES``), None if none."""
    for module in _observe_modules():
        rules: Mapping[str, PoolRules] = getattr(module, "POOL_RULES", {})
        if engine in rules:
            return rules[engine]
    return None


# --- reading helpers every reader shares ---------------------------------------------------------------

# Terminal colour and cursor codes some engines print even into files.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def clean_lines(text: str) -> list[str]:
    """A log's lines without colour codes, carriage-return progress bars or trailing space."""
    lines = []
    for raw in text.split("\n"):  # not splitlines(): a lone carriage return rewrites its line
        line = _ANSI.sub("", raw).rstrip().rsplit("\r", 1)[-1].rstrip()  # CRLF endings too
        lines.append(line)
    return lines[:-1] if lines and not lines[-1] else lines


def prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """The samples of a Prometheus text exposition: (name, labels, value) each, comments skipped."""
    samples = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, labels, value = match.group(1), match.group(2) or "", match.group(3)
        try:
            number = float(value)
        except ValueError:
            continue
        samples.append((name, dict(_parse_labels(labels)), number))
    return samples


_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def _parse_labels(text: str) -> Iterable[tuple[str, str]]:
    for match in _LABEL.finditer(text):
        value = match.group(2).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
        yield match.group(1), value


_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}  # fmt: skip


def printed_bytes(number: str, unit: str) -> int:
    """Bytes from a figure as an engine printed it ("4.25", "GiB"), to the nearest byte."""
    from decimal import Decimal

    scale = _UNITS[unit.strip().upper()]
    return int((Decimal(number) * scale).to_integral_value())


def line_source(index: int) -> str:
    """Where a log figure came from: its line, counted from 1."""
    return f"log line {index + 1}"
