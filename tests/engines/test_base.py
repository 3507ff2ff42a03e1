"""The engine interface (kvcalc.engines.base.Engine): which hooks an engine must answer, and that
every other one says it is optional and what its default does."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import pytest

from kvcalc.engines import ENGINE_NAMES, engine_class
from kvcalc.engines.base import Engine, EngineOptions, Target
from kvcalc.engines.theoretical import THEORETICAL, Theoretical

REQUIRED = {"configure", "check_dtype", "step_overhead"}


def test_the_required_hooks_are_abstract() -> None:
    assert Engine.__abstractmethods__ == REQUIRED
    with pytest.raises(TypeError, match="abstract"):
        Engine(name="x")  # type: ignore[abstract]


def test_an_engine_without_a_required_hook_cannot_be_made() -> None:
    @dataclass(frozen=True)
    class Half(Engine):
        name: str = "half"

        @classmethod
        def configure(cls, options: EngineOptions, target: Target) -> tuple[Engine, list[str]]:
            return cls(), []

        def check_dtype(self, dtype: object) -> None:
            return None

    with pytest.raises(TypeError, match="step_overhead"):
        Half()  # type: ignore[abstract]


def test_every_optional_hook_says_so_and_names_its_default() -> None:
    hooks = {n: v for n, v in vars(Engine).items() if not n.startswith("_") and n not in ("options_type", "name")}
    # base_slot_rules is computed from the class, never overridden: not a hook.
    optional = set(hooks) - REQUIRED - {"base_slot_rules"}
    silent = [n for n in sorted(optional) if "Optional: default" not in (inspect.getdoc(getattr(Engine, n)) or "")]
    assert silent == []


def test_every_registered_engine_answers_the_required_hooks() -> None:
    for name in ENGINE_NAMES:
        assert not getattr(engine_class(name), "__abstractmethods__", set()), name


def test_the_theoretical_rules_are_the_theoretical_engines() -> None:
    assert Theoretical() == THEORETICAL and THEORETICAL.name == "theoretical"
    assert "step_overhead" in vars(Theoretical) and "check_dtype" in vars(Theoretical)
