"""kvcalc.engines.probing: each engine package declares its probe (a ``Prober`` in a light
``probing`` module), ``kvcalc probe`` dispatches through it, and neither the engines' probes nor
the api's probe import a view or (the engines) an input."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import kvcalc.api
from kvcalc.engines import ENGINE_NAMES
from kvcalc.engines.probing import MODEL_PROBE_ENGINE, prober, probers

SRC = Path(kvcalc.api.__file__).parents[2]


def test_every_engine_with_a_probe_declares_it() -> None:
    # theoretical has no probe of its own (its figures are raw tensors: --raw); the others each one,
    # aliases and llama-server sharing their engine's.
    assert prober("theoretical") is None
    assert prober("vllm-cpu") is prober("vllm") and prober("llama-server") is prober("llama.cpp")
    assert prober(MODEL_PROBE_ENGINE) is not None and not prober(MODEL_PROBE_ENGINE).real  # type: ignore[union-attr]
    assert {p.engine for p in probers()} == {"transformers", "vllm", "sglang", "mlx", "llama.cpp"}


@pytest.mark.parametrize("name", [n for n in ENGINE_NAMES if prober(n) is not None])
def test_a_prober_names_a_real_api_function_and_its_parameters(name: str) -> None:
    chosen = prober(name)
    assert chosen is not None
    function = getattr(kvcalc.api, chosen.runs)
    parameters = inspect.signature(function).parameters
    for flag, param in chosen.params:
        assert flag in chosen.flags or flag == "--engine"
        assert param.split(".")[0] in parameters  # options.NAME: a knob of its options
    assert set(chosen.always) <= {flag for flag, _ in chosen.params}
    assert chosen.refusal.startswith("the ") and "\n" not in chosen.refusal


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_probes_import_no_view_and_engines_no_input() -> None:
    """api/_probe imported views.console/json/probe, engines/child.py and the llama.cpp probe
    views.console and views.table, and probe_plans inputs.gguf: dependencies ran both ways."""
    engines = sorted((SRC / "kvcalc/engines").rglob("*.py"))
    for path in [SRC / "kvcalc/api/_probe.py", *engines]:
        bad = {m for m in _imports(path) if m.startswith("kvcalc.views")}
        if "engines" in path.parts:
            bad |= {m for m in _imports(path) if m.startswith("kvcalc.inputs") and "probe" in path.name}
        assert not bad, f"{path.relative_to(SRC)} imports {bad}"


def test_the_probing_modules_are_light() -> None:
    """The CLI reads a prober before anything heavy loads: the probing modules import only
    kvcalc.engines.probing."""
    for path in (SRC / "kvcalc/engines").glob("*/probing.py"):
        assert _imports(path) <= {"kvcalc.engines.probing"}, path
    assert {m for m in _imports(SRC / "kvcalc/engines/probing.py") if m.startswith("kvcalc")} == {"kvcalc.engines"}
