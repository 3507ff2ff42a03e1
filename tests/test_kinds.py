"""One home per layer kind: every kind is one class in kvcalc.kinds, and every engine either sizes a
model holding it or refuses it in one line. Code outside the kinds and the engines asks the kinds
instead of switching on their classes, and the kinds never reach back into kvcalc.spec."""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path
from typing import Any

import pytest

import kvcalc
from kvcalc.calc.requests import Workload
from kvcalc.engines import ENGINE_NAMES, make_engine
from kvcalc.errors import UsageError
from kvcalc.kinds import (
    AttentionCache,
    CompressedCache,
    CompressorBufferCache,
    CompressorOverlapCache,
    IndexerCache,
    KVWindowCache,
    LatentCache,
    LayerCache,
    LayerKind,
    StateCache,
)
from kvcalc.spec import ModelSpec
from tests.helpers.theoretical import estimate

PACKAGE = Path(kvcalc.__file__).parent


def _public_kinds() -> set[type]:
    """Every public subclass of LayerKind, however deep (engines' own private layouts left out)."""
    found: set[type] = set()
    todo = list(LayerKind.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if not inspect.isabstract(cls) and not cls.__name__.startswith("_"):
            found.add(cls)
    return found


KINDS = sorted(_public_kinds(), key=lambda c: c.__name__)


def test_every_kind_is_one_class_in_the_union_and_in_kinds() -> None:
    assert KINDS and set(KINDS) == set(typing.get_args(LayerCache))
    assert all(cls.__module__.startswith("kvcalc.kinds.") for cls in KINDS)


def _sample(cls: type) -> Any:
    """One instance from the dataclass's required fields alone (ints 64, the first literal), so a new
    kind is checked without anyone writing its sample."""
    hints = typing.get_type_hints(cls)
    args: dict[str, Any] = {}
    for name, param in inspect.signature(cls).parameters.items():
        if param.default is inspect.Parameter.empty:
            hint = hints[name]
            if hint is int:
                args[name] = 64
            elif typing.get_origin(hint) is typing.Literal:
                args[name] = typing.get_args(hint)[0]
            else:
                raise AssertionError(f"{cls.__name__}.{name}: no sample value for {hint!r}")
    return cls(**args)


_GQA = AttentionCache(8, 128, 128)
_MLA = LatentCache(512, 64, 192, 128)
# DeepSeek-V4's layers as transformers 5.24 caches them: a K=V window in every layer, and CSA (ratio
# 4, with its compressed indexer) or HCA (ratio 128) compressed entries with their compressor's state.
_DSV4 = (
    KVWindowCache(512, 128),
    CompressedCache(512, 4),
    IndexerCache(128, ratio=4),
    CompressorBufferCache(4, 1280, 1280),
    CompressorOverlapCache(4, 640),
    CompressedCache(512, 128),
    CompressorBufferCache(128, 512, 512),
)


def _company(cache: LayerCache) -> tuple[LayerCache, ...]:
    """The layers a kind sits beside in the models that have it: an indexer beside the layer it
    picks tokens for (DSA: MLA; MSA: GQA), a shared layer after the one whose K and V it reads,
    DeepSeek-V4's kinds together. Empty for a kind that stands alone."""
    if cache.is_compressed_attention:
        return _DSV4
    if cache.indexer_family is not None:
        return (_MLA,) if cache.indexer_family == "dsa" else (_GQA,)
    return (_GQA,) if cache.reuses_kv else ()


# Each kind's sample (from its required fields alone), then the variants a class covers.
SAMPLES: list[LayerCache] = [_sample(cls) for cls in KINDS] + [
    AttentionCache(8, 128, 128, window=16),
    AttentionCache(8, 128, 128, chunk=16),
    AttentionCache(8, 128, 128, tokens="encoder"),
    AttentionCache(8, 128, 128, tokens="image"),
    LatentCache(512, 64),
    StateCache("mamba", 64, 4, 64),
    StateCache("mamba", 64, 4, 64, whole_kernel=True),  # mamba_ssm's own format keeps d_conv columns
    StateCache("short_conv", 64, 3, 0),
    IndexerCache(128, family="msa"),
    CompressedCache(512, 4),  # in its company: DeepSeek-V4 exactly
]


def _model(caches: tuple[LayerCache, ...]) -> ModelSpec:
    """A one-layer model of these entries (all on layer 0)."""
    extra: dict[str, Any] = {"entry_layers": (0,) * len(caches)} if len(caches) > 1 else {}
    if any(c.tokens == "image" for c in caches):
        extra["image_tokens"] = 64
    return ModelSpec("m", caches, 1, 8, "test", None, **extra)


def _layouts() -> dict[str, ModelSpec]:
    """Every sample alone, and in its company where it has one."""
    layouts: dict[str, ModelSpec] = {}
    for cache in SAMPLES:
        name = f"{type(cache).__name__}-{cache.kind.value}"
        if cache.indexer_family is not None or cache.compress_ratio > 1:
            name += f"-{cache.indexer_family or 'ratio'}{cache.compress_ratio}"
        name += f"-{'x'.join(map(str, cache.fields().values()))}" if name in layouts else ""
        layouts[name] = _model((cache,))
        company = _company(cache)
        if company:
            layouts[f"{name}-in-company"] = _model(company if cache in company else (*company, cache))
    return layouts


LAYOUTS = _layouts()


@pytest.mark.parametrize("engine_name", ENGINE_NAMES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_engine_sizes_or_refuses_every_kind(layout: str, engine_name: str) -> None:
    """Never an AttributeError, an assertion or a wrong type: an estimate in whole bytes, or a
    one-line UsageError saying why the engine does not model the kind."""
    spec = LAYOUTS[layout]
    engine, _ = make_engine(engine_name, uses_mla=any(c.is_latent for c in spec.caches))
    try:
        est = estimate(spec, Workload(tokens=1000), engine=engine)
    except UsageError as e:
        message = str(e)
        assert message and "\n" not in message
        return
    assert type(est.per_gpu_bytes) is int and est.per_gpu_bytes >= 0
    assert [g.cache for g in est.groups]
    for group in est.groups:
        assert type(group.bytes) is int and group.bytes >= 0


# --- no switches on the kinds outside their home and the engines ------------------------------------------

# Where a switch on a kind's class belongs: the kinds themselves, and each engine's own rules and
# probes (the llama.cpp probe builds each kind as llama.cpp metadata).
_MAY_SWITCH = ("kinds/", "spec.py", "engines/")
_KIND_NAMES = {cls.__name__ for cls in KINDS} | {"LayerKind", "_Layer", "LayerCache"}


def _kind_switches(source: str) -> list[str]:
    """Each ``isinstance(x, <kind class>)`` in ``source`` (a bare name or an attribute, alone or in a
    tuple or union), as "line: name"."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            for part in ast.walk(node.args[1]) if len(node.args) > 1 else ():
                name = part.id if isinstance(part, ast.Name) else part.attr if isinstance(part, ast.Attribute) else ""
                if name in _KIND_NAMES:
                    found.append(f"{node.lineno}: {name}")
    return found


def test_no_isinstance_on_a_kind_outside_kinds_and_engines() -> None:
    """Code outside the kinds and the engines asks a kind (``is_latent``, ``as_attention()``,
    ``indexer_family``, ...) instead of switching on its class, so a new kind is one class."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if not where.startswith(_MAY_SWITCH):
            found += [f"{where}:{hit}" for hit in _kind_switches(path.read_text())]
    assert found == []


def test_the_scan_sees_a_switch() -> None:
    """The scan above catches each way of writing one, so its empty answer means something."""
    source = """
isinstance(c, AttentionCache)
isinstance(c, (StateCache, LatentCache))
isinstance(c, spec.IndexerCache | int)
isinstance(c, int)
"""
    assert _kind_switches(source) == ["2: AttentionCache", "3: StateCache", "3: LatentCache", "4: IndexerCache"]


def _imported(path: Path) -> set[str]:
    """Every module ``path`` imports, at module level or inside a function, relative imports made
    absolute (and ``from X import y`` counted as X and as X.y, which may be a module)."""
    package = "kvcalc.kinds"
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            names |= {module} | {f"{module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("kvcalc."):
            names.add(node.value)  # import_module("kvcalc....")
    return names


def test_kinds_never_import_spec() -> None:
    """kvcalc.spec builds models out of the kinds; the kinds must not reach back into it, or the two
    would import each other."""
    paths = sorted((PACKAGE / "kinds").glob("*.py"))
    imported = {path.name: _imported(path) for path in paths}
    assert "kvcalc.kinds.base" in imported["attention.py"]  # the scan resolves relative imports
    spec = {
        name: sorted(m for m in mods if m == "kvcalc.spec" or m.startswith("kvcalc.spec."))
        for name, mods in imported.items()
    }
    assert {name: found for name, found in spec.items() if found} == {}
