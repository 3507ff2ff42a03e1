"""The documented Python API: load a model, describe one by hand, estimate its cache."""

from __future__ import annotations

from collections.abc import Callable

from .configs import read_config
from .dtypes import DType, parse_dtype
from .errors import UsageError
from .estimator import Estimate, Workload
from .estimator import estimate as estimate_spec
from .sources import Source, resolve
from .spec import MAX_DIMENSION, MAX_LAYERS, AttentionCache, ModelSpec


def load_model(model: str, *, revision: str | None = None, on_fetch: Callable[[str], None] | None = None) -> ModelSpec:
    """A preset name, a path to a config.json (or its folder), or a Hub repo id or URL -> ModelSpec.

    What resolving MODEL noted (e.g. a local folder read instead of a Hub repo of the same name)
    leads the spec's notes. ``on_fetch`` is called with a short message right before anything is
    fetched from the Hub.
    """
    return model_from_source(resolve(model, revision=revision, on_fetch=on_fetch))


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
    for label, value in (
        ("layers", layers),
        ("heads", heads),
        ("kv_heads", kv_heads),
        ("head_dim", head_dim),
    ):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise UsageError(f"{label.replace('_', ' ')} must be a positive integer, got {value!r}")
        bound = MAX_LAYERS if label == "layers" else MAX_DIMENSION
        if value is not None and value > bound:
            raise UsageError(f"{label.replace('_', ' ')} {value:,} is implausibly large (at most {bound:,})")
    if kv_heads is None:
        if heads is None:
            raise UsageError("give --kv-heads (or --heads for multi-head attention)")
        kv_heads = heads
        notes.append(f"--kv-heads not given: multi-head attention assumed ({heads} KV heads)")
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


def estimate(
    model: str | ModelSpec,
    *,
    tokens: int,
    batch: int = 1,
    kv_dtype: str | DType | None = None,
    encoder_tokens: int | None = None,
    revision: str | None = None,
) -> Estimate:
    """The KV cache of ``model`` holding ``batch`` sequences of ``tokens`` tokens.

    >>> est = estimate("llama-3.1-8b", tokens=2048)
    >>> est.total_bytes
    268435456
    """
    spec = load_model(model, revision=revision) if isinstance(model, str) else model
    dtype = parse_dtype(kv_dtype) if isinstance(kv_dtype, str) else kv_dtype
    workload = Workload(tokens=tokens, batch=batch, kv_dtype=dtype, encoder_tokens=encoder_tokens)
    return estimate_spec(spec, workload)


def model_from_source(source: Source) -> ModelSpec:
    """The spec of an already resolved MODEL, with what resolving it noted (so a command that
    needs the raw config too resolves, and downloads, only once)."""
    from dataclasses import replace

    spec = read_config(source.config, name=source.label)
    notes: tuple[str, ...] = getattr(source, "notes", ())
    return replace(spec, notes=(*notes, *spec.notes)) if notes else spec
