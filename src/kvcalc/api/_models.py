"""Opening a model: a preset, a config, a GGUF, a Hub repo, or a geometry by hand."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kvcalc import checks
from kvcalc.dtypes import DType
from kvcalc.errors import StrictError, UsageError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.inputs.source import Source, resolve
from kvcalc.spec import MAX_DIMENSION, MAX_LAYERS, AttentionCache, ModelSpec

if TYPE_CHECKING:  # the heavier modules load only when asked for (fractions alone costs ~3 ms)
    pass


OnFetch = Callable[[str], None] | None
DTypeLike = str | DType | None


@dataclass(frozen=True)
class Model:
    """A model opened once: its per-layer cache spec and where it came from (None when it was
    described by hand). Commands that need the raw config too (the probe) read ``source``."""

    spec: ModelSpec
    source: Source | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def notes(self) -> tuple[str, ...]:
        return self.spec.notes


# What a model parameter takes: a preset name, a path (a str or any os.PathLike) to a config.json,
# its folder or a GGUF, a Hub repo id or URL, or a model already opened or described.
ModelArg = str | os.PathLike[str] | ModelSpec | Model


def open_model(
    model: ModelArg,
    *,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
) -> Model:
    """A preset name, a config.json (or its folder; a str or an ``os.PathLike`` such as a
    ``pathlib.Path``), a Hub repo id or URL, or an already built ``ModelSpec`` -> ``Model``.
    ``on_fetch`` is called with a short message right before anything is fetched from the Hub.
    The model's ``spec.warnings`` name config fields kvcalc does not model that may shape the
    cache; ``strict`` turns them into a ``StrictError``."""
    checks.text(revision, "revision")
    checks.callback(on_fetch, "on_fetch")
    checks.flag(strict, "strict")
    opened = _open(model, revision=revision, on_fetch=on_fetch)
    if strict and opened.spec.warnings:
        more = len(opened.spec.warnings) - 1
        also = f" (and {more} more field{'s' if more > 1 else ''})" if more else ""
        raise StrictError(f"strict: {opened.spec.warnings[0]}{also}")
    return opened


def _open(model: ModelArg, *, revision: str | None, on_fetch: OnFetch) -> Model:
    if isinstance(model, Model):
        return model
    if isinstance(model, ModelSpec):
        return Model(model)
    if isinstance(model, os.PathLike):
        path = os.fspath(model)
        model = path if isinstance(path, str) else os.fsdecode(path)
    if not isinstance(model, str):
        raise UsageError(
            "model must be a preset name, a path to a config.json, its folder or a GGUF, a Hub repo id, or an opened "
            f"Model or ModelSpec; got {checks.shown(model)}",
            param="model",
        )
    if not model.strip():
        raise UsageError("model is empty: give a preset name, a config.json path or a Hub repo id", param="model")
    source = resolve(model, revision=revision, on_fetch=on_fetch)
    if revision is not None and source.kind != "hub":
        what = "bundled preset" if source.kind == "preset" else "local file"
        raise UsageError(f"revision applies to Hub repos; {model} is a {what}", param="revision")
    return Model(model_from_source(source), source)


def load_model(model: str, *, revision: str | None = None, on_fetch: OnFetch = None) -> ModelSpec:
    """A preset name, a path to a config.json (or its folder), or a Hub repo id or URL -> ModelSpec.

    What resolving MODEL noted (e.g. a local folder read instead of a Hub repo of the same name)
    leads the spec's notes.
    """
    return open_model(model, revision=revision, on_fetch=on_fetch).spec


def model_from_source(source: Source) -> ModelSpec:
    """The spec of an already resolved MODEL, with what resolving it noted."""
    spec = read_config(source.config, name=source.label)
    notes: tuple[str, ...] = getattr(source, "notes", ())
    return replace(spec, notes=(*notes, *spec.notes)) if notes else spec


def model_from_geometry(
    *,
    layers: int,
    kv_heads: int | None = None,
    head_dim: int,
    heads: int | None = None,
    name: str = "custom",
) -> ModelSpec:
    """A plain decoder described by hand: ``layers`` full-attention layers of ``kv_heads`` heads."""
    notes = []
    checks.text(name, "name", optional=False)
    layers = checks.count(layers, "layers", maximum=MAX_LAYERS)
    head_dim = checks.count(head_dim, "head_dim", maximum=MAX_DIMENSION)
    for label, value in (("layers", layers), ("heads", heads), ("kv_heads", kv_heads), ("head_dim", head_dim)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise UsageError(f"{label} must be a positive integer, got {value!r}", param=label)
        bound = MAX_LAYERS if label == "layers" else MAX_DIMENSION
        if value is not None and value > bound:
            raise UsageError(f"{label} {value:,} is implausibly large (at most {bound:,})", param=label)
    if kv_heads is None:
        if heads is None:
            raise UsageError("give kv_heads (or heads for multi-head attention)", param="kv_heads")
        kv_heads = heads
        notes.append(f"kv_heads not given: multi-head attention assumed ({heads} KV heads)")
    if heads is not None and (kv_heads > heads or heads % kv_heads):
        raise UsageError(f"KV heads ({kv_heads}) must divide the query heads ({heads})")
    cache = AttentionCache(kv_heads=kv_heads, k_head_dim=head_dim, v_head_dim=head_dim)
    return ModelSpec(
        name=name,
        caches=(cache,) * layers,
        layers=layers,
        query_heads=heads,
        model_type="custom",
        dtype=None,
        notes=tuple(notes),
    )
