"""The layout's promises, measured on the source (ARCHITECTURE.md): imports run one way (cli ->
views -> api -> inputs/engines -> calc -> kinds -> leaf modules, function-level and TYPE_CHECKING
imports counted), shared code never asks which engine it runs, no module imports itself back
through others (function-level imports counted), and no source module grows past 900 lines.
(Kind switches: tests/test_kinds.py; the llama.cpp architecture names:
tests/engines/llamacpp/test_architectures.py.)"""

from __future__ import annotations

import ast
from pathlib import Path

from kvcalc.engines import ENGINE_NAMES, engine_class

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "kvcalc"
MAX_LINES = 900


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """Nodes under ``if TYPE_CHECKING:``: imports for annotations only, never run."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for n in ast.walk(node))
    return skipped


def _imports(name: str, path: Path, *, type_checking: bool = False) -> set[str]:
    """The kvcalc modules ``name`` imports anywhere in its body (functions included), resolved to
    absolute names; ``from package import submodule`` counts as importing the submodule alone.
    ``type_checking``: count the imports under ``if TYPE_CHECKING:`` too."""
    tree = ast.parse(path.read_text())
    skipped = set() if type_checking else _type_checking_nodes(tree)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in MODULES)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            subs = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in MODULES]
            found.update(subs)
            if len(subs) < len(node.names) and module in MODULES:
                found.add(module)
    found.discard(name)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle() -> None:
    graph = {name: _imports(name, path) for name, path in MODULES.items()}
    assert _cycles(graph) == []


def test_the_cycle_check_sees_function_level_imports(tmp_path: Path) -> None:
    # Two modules that import each other, one of them inside a function: a cycle.
    graph = {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    assert _cycles(graph) == [["a", "b"]]
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from kvcalc.spec import ModelSpec\n    from . import units\n")
    assert _imports("kvcalc.sample", sample) == {"kvcalc.spec", "kvcalc.units"}


ENGINE_CLASSES = {engine_class(name).__name__ for name in ENGINE_NAMES}


def _engine_switches(path: Path, root: Path = SRC) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            named = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
            named |= {n.attr for n in ast.walk(node.args[1]) if isinstance(n, ast.Attribute)}
            if named & ENGINE_CLASSES:
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_shared_code_never_asks_which_engine_it_is() -> None:
    # Outside engines/, code asks an engine (its hooks and options), never its class.
    outside = [p for name, p in MODULES.items() if not name.startswith("kvcalc.engines")]
    assert [hit for path in outside for hit in _engine_switches(path)] == []


def test_the_engine_check_would_see_a_switch(tmp_path: Path) -> None:
    sample = tmp_path / "kvcalc" / "sample.py"
    sample.parent.mkdir()
    sample.write_text("def f(e):\n    return isinstance(e, VLLM) or isinstance(e, (engines.LlamaCpp, int))\n")
    assert _engine_switches(sample, tmp_path) == ["kvcalc/sample.py:2", "kvcalc/sample.py:2"]


def test_no_source_module_over_900_lines() -> None:
    long = {str(p.relative_to(SRC)): n for p in MODULES.values() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


# --- tests mirror src/ --------------------------------------------------------------------------------

TESTS = Path(__file__).resolve().parent
# Modules that test across layers (the CLI end to end, the repository), named for what they hold
# rather than for one source module.
CROSS_CUTTING = {
    "cli/test_bad_input.py",  # every kind of bad input through every command: one error line
    "test_docs.py",  # the docs and the repository's text
    "test_hypothesis_inputs.py",  # random inputs through every command
    "test_layout.py",  # this file: the source's layout
    "test_one_answer.py",  # one workload, one answer across estimate, compare and fit
    "test_packaging.py",  # the wheel and the sdist
    "test_presets_commands.py",  # every preset through every command under every engine
    "test_readme.py",  # the README's examples
    "test_startup.py",  # start-up time and the imports it pays for
    "test_structure.py",  # every engine and kind complete
    "test_web.py",  # the web page (web/, scripts/build_site.py) built and driven in a real browser
}
# Conformance grids: kvcalc's figures against the real engine (its own code run in its own Python,
# skipped where that engine is not installed). Each runs the engine once over every case, through
# the engine's probe, the estimate and the plan together, so it tests the engine package as a whole
# rather than one of its modules; they stay apart so that a run without the engine skips them whole.
CONFORMANCE = {
    "engines/llamacpp/test_llamacpp_conformance.py",
    "engines/mlx/test_mlx_conformance.py",
    "engines/sglang/test_sglang_conformance.py",
}


def _mirrors(test: Path) -> bool:
    """tests/<path>/test_<name>.py tests src/kvcalc/<path>/<name>.py (or _<name>.py, the API's private
    modules), the package <name>/, or (test_init.py) the folder's own __init__.py."""
    folder = PACKAGE.joinpath(*test.relative_to(TESTS).parts[:-1])
    name = test.stem.removeprefix("test_")
    candidates = [folder / f"{name}.py", folder / f"_{name}.py", folder / name / "__init__.py"]
    if name == "init":
        candidates.append(folder / "__init__.py")
    return any(path.is_file() for path in candidates)


def test_test_modules_mirror_the_source() -> None:
    modules = sorted(p for p in TESTS.rglob("test_*.py") if "helpers" not in p.relative_to(TESTS).parts)
    names = {p.relative_to(TESTS).as_posix(): p for p in modules}
    unmirrored = {name for name, p in names.items() if not _mirrors(p) and name not in CROSS_CUTTING | CONFORMANCE}
    assert unmirrored == set(), "name each test module after the source module it tests"
    assert {name for name in CROSS_CUTTING | CONFORMANCE if name not in names} == set()
    assert {name for name in CROSS_CUTTING | CONFORMANCE if _mirrors(names[name])} == set()


# --- the direction of imports (ARCHITECTURE.md, "Which way imports run") ---------------------------

# Leaf modules: importable from every layer; they import only one another.
LEAVES = frozenset({"checks", "console", "defaults", "dims", "dtypes", "errors", "gpus", "units"})
# Each layer's rank: a module imports its own layer (calc from calc, engines.vllm from
# engines.base) or a lower rank, never a higher one nor the other layer of its rank (engines and
# inputs do not import each other but for SIDEWAYS).
RANKS = {"leaf": 0, "kinds": 1, "calc": 2, "engines": 3, "inputs": 3, "api": 4, "views": 5, "cli": 6, "top": 7}
# Modules outside a layer's package that belong to it: spec.py is the tuple of layer kinds, and
# charts.py draws a command's results (plotext) as the views do.
HOMES = {"kvcalc.spec": "kinds", "kvcalc.charts": "views", "kvcalc": "top", "kvcalc.__main__": "top"}
# inputs may read one engine module: llama.cpp's architecture table, a pure data module (it imports
# no other engine module: test_the_architecture_table_is_a_leaf), since a GGUF file's
# architecture names are llama.cpp's own vocabulary and the GGUF reader maps them by it.
SIDEWAYS = {("inputs", "kvcalc.engines.llamacpp.architectures")}
# Upward imports not yet removed, each with why; an edge here that the source no longer has fails
# (test_the_allowlist_is_current), so the list only shrinks.
ALLOWED_UPWARD: set[tuple[str, str]] = set()


def _layer(module: str) -> str:
    if module in HOMES:
        return HOMES[module]
    part = module.split(".")[1]
    return "leaf" if part in LEAVES else part


def _wrong_way(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    found = set()
    for source, targets in graph.items():
        for target in targets:
            mine, theirs = _layer(source), _layer(target)
            # The package itself (its __version__; every submodule's import runs it anyway, and it
            # loads the API's names only on first use), a module of the same layer, a lower one.
            if target == "kvcalc" or theirs == mine or RANKS[theirs] < RANKS[mine] or (mine, target) in SIDEWAYS:
                continue
            found.add((source, target))
    return found


def _graph(type_checking: bool) -> dict[str, set[str]]:
    return {name: _imports(name, path, type_checking=type_checking) for name, path in MODULES.items()}


def test_imports_run_one_way() -> None:
    # Every kvcalc import, TYPE_CHECKING ones included: an annotation is a dependency too.
    assert _wrong_way(_graph(type_checking=True)) - ALLOWED_UPWARD == set()


def test_the_allowlist_is_current() -> None:
    assert ALLOWED_UPWARD - _wrong_way(_graph(type_checking=True)) == set()


def test_calc_names_no_engine_and_no_input() -> None:
    # calc asks its contracts (calc.contracts), never an engine or an input format.
    graph = _graph(type_checking=True)
    calc = {t for s, ts in graph.items() if s.startswith("kvcalc.calc") for t in ts}
    assert {t for t in calc if _layer(t) in ("engines", "inputs")} == set()


def test_the_architecture_table_is_a_leaf() -> None:
    table = "kvcalc.engines.llamacpp.architectures"
    assert {t for t in _imports(table, MODULES[table], type_checking=True) if _layer(t) != "leaf"} == set()


def test_the_direction_check_sees_wrong_way_imports(tmp_path: Path) -> None:
    # calc reaching up to an engine (under TYPE_CHECKING), a leaf reaching into calc, engines and
    # inputs importing each other beyond the table, a view imported by the API: all found; a view
    # importing calc, a leaf importing a leaf and an engine its own base are fine.
    sample = tmp_path / "sample.py"
    sample.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kvcalc.engines import Engine\n")
    assert _imports("kvcalc.calc.sample", sample) == set()
    assert _imports("kvcalc.calc.sample", sample, type_checking=True) == {"kvcalc.engines"}
    graph = {
        "kvcalc.calc.fit": {"kvcalc.engines", "kvcalc.calc.estimate", "kvcalc.dtypes"},
        "kvcalc.units": {"kvcalc.calc.estimate", "kvcalc.checks"},
        "kvcalc.engines.base": {"kvcalc.inputs.hf.dims", "kvcalc.calc.contracts"},
        "kvcalc.inputs.gguf.config": {"kvcalc.engines.llamacpp.architectures", "kvcalc.engines.vllm"},
        "kvcalc.api._fit": {"kvcalc.views.fit", "kvcalc.engines.base"},
        "kvcalc.views.fit": {"kvcalc.calc.fit", "kvcalc.charts"},
        "kvcalc.engines.vllm": {"kvcalc.engines.base"},
    }
    assert _wrong_way(graph) == {
        ("kvcalc.calc.fit", "kvcalc.engines"),
        ("kvcalc.units", "kvcalc.calc.estimate"),
        ("kvcalc.engines.base", "kvcalc.inputs.hf.dims"),
        ("kvcalc.inputs.gguf.config", "kvcalc.engines.vllm"),
        ("kvcalc.api._fit", "kvcalc.views.fit"),
    }


# The issue 37 limits: a function a reader can hold in mind. The standalone probe children are
# scripts copied to another machine and run on their own, so they are exempt.
PROBE_CHILDREN = ("torch_probe", "vllm_probe", "sglang_probe", "mlx_probe", "probe_child")
MAX_FUNCTION_LINES = 120
MAX_PARAMETERS = 15  # outside cli/, where typer reads each option from a parameter


def _functions() -> list[tuple[str, str, int, int]]:
    """(module, function, lines, parameters) of every function in the source, self/cls not counted."""
    found = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args
                named = [*args.posonlyargs, *args.args, *args.kwonlyargs]
                params = len([a for a in named if a.arg not in ("self", "cls")])
                found.append((name, node.name, (node.end_lineno or node.lineno) - node.lineno + 1, params))
    return found


def test_no_function_over_120_lines() -> None:
    long = [f"{m}.{f}: {n}" for m, f, n, _ in _functions()
            if n > MAX_FUNCTION_LINES and m.rpartition(".")[2] not in PROBE_CHILDREN]  # fmt: skip
    assert long == []


def test_no_function_outside_the_cli_over_15_parameters() -> None:
    wide = [f"{m}.{f}: {p}" for m, f, _, p in _functions() if p > MAX_PARAMETERS and not m.startswith("kvcalc.cli")]
    assert wide == []


def _engine_literals(path: Path, names: set[str]) -> list[str]:
    """String constants that are an engine's name or alias (``NAME@VERSION`` too)."""
    tree = ast.parse(path.read_text())
    return [f"{path.name}:{node.lineno} {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value.strip().lower().partition("@")[0] in names]  # fmt: skip


def test_no_engine_is_named_outside_engines() -> None:
    # Shared code reads an engine's facts from its plugin; a name spelled out here would be a
    # branch on one engine that the next engine's package could not reach.
    from kvcalc.engines import REGISTRY

    names = {n for entry in REGISTRY.values() for n in (entry.name, *entry.aliases)}
    outside = [p for name, p in MODULES.items() if not name.startswith("kvcalc.engines")]
    assert [hit for path in outside for hit in _engine_literals(path, names)] == []


def test_the_literal_check_would_see_a_name(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('ENGINE = "vllm@0.11"\nOTHER = "vllm-q4 is not a name"\n')
    assert _engine_literals(sample, {"vllm"}) == ["sample.py:1 'vllm@0.11'"]
