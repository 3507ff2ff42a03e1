"""What ``kvcalc probe`` needs from an engine, with no engine named here: the ``Prober`` each engine
package declares in a light ``probing`` module of its own (the flags its real probe takes, the
line a refusal names it by, the ``kvcalc.api`` function that runs it), and the neutral items a
probe's answer describes itself in (lines, tables, a verdict, notes), which ``views.probe`` draws.

Nothing here imports an engine's probe, a view or an input: the CLI reads a Prober before anything
heavy loads, and a report stays plain data until a view draws it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

# --- what a probe's answer describes itself in ------------------------------------------------------------


@dataclass(frozen=True)
class Table:
    """Rows of figures under a title; every column right-aligned but those named in ``left``."""

    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    left: tuple[str, ...] = ()


@dataclass(frozen=True)
class Verdict:
    """A line that says whether the real engine agreed (a view colours it by ``agrees``)."""

    text: str
    agrees: bool


@dataclass(frozen=True)
class Remark:
    """A note under the answer (a default applied, a field left out, a version told apart)."""

    text: str


# A line of text, or one of the items above.
Item = str | Table | Verdict | Remark


class ProbeOutcome(Protocol):
    """What every probe answers with: whether the real engine agreed with kvcalc, the answer as
    JSON, and as items a view draws (``describe``). The CLI shows each the same way."""

    @property
    def match(self) -> bool: ...

    def as_json(self) -> dict[str, Any]: ...

    def describe(self) -> list[Item]: ...


# The engine whose probe runs when none is named (its prober takes --raw for every engine's layout).
MODEL_PROBE_ENGINE = "transformers"


# --- an engine's prober ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prober:
    """How ``kvcalc probe --engine NAME`` runs an engine's real probe, declared by the engine.

    ``flags``: the probe's command-line flags it takes (beside MODEL, --engine, --json, --revision
    and --strict, which every probe takes); any other flag given is refused with
    "FLAGS do not apply to ``refusal``". ``params``: the ``kvcalc.api`` function's parameter each
    flag sets (``options.NAME``: the knob NAME of its ``options``); ``always``: flags passed with
    their default even when not given (the others only when given). ``named_as``: how a refusal
    elsewhere points to this probe ("--window applies to ``named_as``"). ``real``: it runs the
    engine itself (its flags are refused under --raw)."""

    engine: str
    refusal: str
    named_as: str
    runs: str
    flags: tuple[str, ...]
    params: tuple[tuple[str, str], ...] = ()
    always: tuple[str, ...] = ()
    real: bool = True


def prober(engine: str) -> Prober | None:
    """The Prober of the engine a name stands for (its plugin's ``prober``); None for an engine with
    no probe of its own. Imports only the light ``probing`` module."""
    from kvcalc.engines import engine_entry

    return engine_entry(engine).prober


def probers() -> list[Prober]:
    """Every engine's Prober, in the registry's order, each once."""
    from kvcalc.engines import REGISTRY

    found: list[Prober] = []
    for name in REGISTRY:
        p = prober(name)
        if p is not None and p not in found:
            found.append(p)
    return found
