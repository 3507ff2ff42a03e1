"""Side-by-side views over the estimator: attention variants of one model, or several models,
across KV dtypes and context lengths. Pure: builds specs and estimates, prints nothing."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import cached_property
from typing import TYPE_CHECKING

from kvcalc.calc.estimate import Estimate, Plan, Workload, compile_plan, copy_with
from kvcalc.dtypes import DType
from kvcalc.errors import UsageError
from kvcalc.spec import MAX_DIMENSION, LatentCache, LayerCache, ModelSpec

if TYPE_CHECKING:
    from kvcalc.calc.contracts import StorageRules


@dataclass(frozen=True)
class Candidate:
    """One column-of-the-comparison model: a real model, or a variant of one.

    ``kv_heads`` / ``latent_dim`` describe its (first) attention layer for display; ``own`` marks
    the geometry the model actually has.
    """

    label: str
    spec: ModelSpec
    kv_heads: int | None
    latent_dim: int | None
    elements_per_token: int
    own: bool = True


@dataclass(frozen=True)
class CompareRow:
    """One candidate at one format and length: its totals, and the whole estimate on demand (a
    sweep of 10,000 lengths needs only the totals)."""

    candidate: Candidate
    kv_dtype: DType
    tokens: int
    total_bytes: int
    baseline_bytes: int  # the baseline candidate's at the same length and the first format
    per_token_bytes: int
    # The estimate's notes but what windows and chunks drop at this length (shown in the numbers).
    notes: tuple[str, ...]
    plan: Plan = field(repr=False, compare=False)
    batch: int = 1

    @property
    def ratio(self) -> Fraction:
        """This row's cache over the baseline's."""
        return Fraction(self.total_bytes, self.baseline_bytes)

    @cached_property
    def estimate(self) -> Estimate:
        return self.plan.at(self.tokens, self.batch)


@dataclass(frozen=True)
class Comparison:
    mode: str  # "variants" or "models"
    rows: tuple[CompareRow, ...]
    baseline: str
    tokens: tuple[int, ...]
    dtypes: tuple[DType, ...]
    batch: int
    notes: tuple[str, ...]
    own_dtypes: bool = False  # no dtype was asked for: each model at its own


def _attention_of(spec: ModelSpec) -> LayerCache | None:
    """The first layer that caches rows per token (attention or an MLA latent)."""
    return next((c for c in spec.caches if c.caches_tokens), None)


def candidate_for(spec: ModelSpec, label: str | None = None, *, own: bool = True) -> Candidate:
    """A model as it is, summarised by its first attention layer."""
    first = _attention_of(spec)
    return Candidate(
        label=label or spec.name,
        spec=spec,
        kv_heads=None if first is None else first.rows(1)[2],
        latent_dim=first.elements_per_token if first is not None and first.is_latent else None,
        elements_per_token=first.elements_per_token if first is not None else 0,
        own=own,
    )


def variant_label(kv_heads: int, query_heads: int) -> str:
    if kv_heads == query_heads:
        return "MHA"
    if kv_heads == 1:
        return "MQA"
    return f"GQA-{kv_heads}"


def attention_variants(
    spec: ModelSpec,
    *,
    kv_heads: Sequence[int] = (),
    latent_dim: int | None = None,
    rope_dim: int | None = None,
    mark_own: bool = True,
) -> tuple[list[Candidate], list[str]]:
    """MHA, the model's own GQA, any ``kv_heads`` asked for, MQA, and MLA, all else equal.

    Every attention layer (windowed, chunked and cross-attention ones too) gets the variant's
    heads; state and shared layers are untouched. ``mark_own=False`` for a geometry given by hand,
    which has no "own" attention. Returns the candidates, MHA first, and notes.
    """
    heads = spec.query_heads
    first = _attention_of(spec)
    asked = bool(kv_heads) or latent_dim is not None or rope_dim is not None
    why = None
    if heads is None or first is None:
        why = f"{spec.name} has no attention heads to vary"
    elif any(c.is_compressed_attention for c in spec.caches):
        why = (f"{spec.name} uses DeepSeek-V4 compressed attention (one K=V head, compressed entries): it has no "
               "MHA/GQA/MQA variants")  # fmt: skip
    if why is not None and asked:
        raise UsageError(f"{why}: --kv-heads, --latent-dim and --rope-dim change nothing")
    if why is not None:
        # The model's own cache alone, as estimate gives it: a comparison of its lengths and formats.
        return [candidate_for(spec, own=mark_own)], [f"{why}: its own cache alone (compare it with other models)"]
    assert heads is not None and first is not None
    k_dim, v_dim = first.head_dims
    if k_dim is None or v_dim is None:  # only MLA entries can lack them
        raise UsageError(f"{spec.name} is MLA without qk_nope_head_dim/v_head_dim: its uncompressed heads are unknown")
    for label, value, least in (("latent dim", latent_dim, 1), ("rope dim", rope_dim, 0)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not least <= value <= MAX_DIMENSION):  # fmt: skip
            kind = "positive" if least else "non-negative"
            raise UsageError(f"the MLA {label} must be a {kind} whole number up to {MAX_DIMENSION:,}, got "
                             f"{value!r:.40}", param=label.replace(" ", "_"))  # fmt: skip
    if rope_dim is not None and latent_dim is None:
        raise UsageError("--rope-dim is the MLA variant's RoPE key beside --latent-dim: give --latent-dim too")
    for kv in kv_heads:
        if kv <= 0 or kv > heads or heads % kv:
            raise UsageError(f"--kv-heads {kv} does not divide the {heads} query heads of {spec.name}")

    own_kv = first.rows(1)[2]  # None for an MLA latent
    wanted = sorted({heads, 1, *kv_heads, *([own_kv] if own_kv else [])}, reverse=True)
    notes: list[str] = []
    candidates = []
    for kv in wanted:
        own = mark_own and kv == own_kv
        # The model's own row is the model itself, not a rebuilt variant: layers whose heads or
        # dims differ from the first attention layer's (Gemma 4's global layers, MiMo's) keep them,
        # so this row and estimate give one answer.
        variant = spec if own else _with_caches(spec, lambda c: c.vary_heads(kv, k_dim, v_dim))  # noqa: B023
        candidates.append(candidate_for(variant, variant_label(kv, heads), own=own))

    mla_latent = latent_dim
    mla_rope = rope_dim
    own_latent = first.latent_shape
    if own_latent is not None and latent_dim is None:
        mla_latent, mla_rope = own_latent
    if mla_latent is not None:
        if mla_rope is None:
            mla_rope = 0
            notes.append("--rope-dim not given: the MLA variant has no decoupled RoPE key (0)")
        latent = LatentCache(mla_latent, mla_rope, k_head_dim=k_dim, v_head_dim=v_dim)
        if any(c.token_bound is not None for c in spec.caches):
            notes.append("the MLA variant caches every token: sliding windows and chunks are dropped")
        own = own_latent == (mla_latent, mla_rope)
        # Only attention layers become latents: an indexer's keys (DeepSeek-V3.2's DSA) stay as
        # they are, as do states and shared layers.
        variant = spec if own else _with_caches(spec, lambda c: latent if _has_heads(c) else c)
        candidates.append(candidate_for(variant, "MLA", own=own))
    notes.append("variants change the model's quality and need (re)training: this compares memory only")
    return candidates, notes


def _has_heads(cache: LayerCache) -> bool:
    """Whether a layer caches attention heads (plain K/V or an MLA latent of them)."""
    return cache.head_dims != (None, None)


def _with_caches(spec: ModelSpec, change: Callable[[LayerCache], LayerCache]) -> ModelSpec:
    return replace(spec, caches=tuple(change(c) for c in spec.caches))


def _match(label: str, candidates: Sequence[Candidate]) -> Candidate | None:
    key = label.strip().lower()
    for c in candidates:
        names = {c.label.lower(), c.spec.name.lower()}
        if c.kv_heads is not None and c.label.startswith(("GQA", "MHA", "MQA")):
            names.add(str(c.kv_heads))
        if key in names:
            return c
    return None


def compare(
    candidates: Sequence[Candidate],
    *,
    mode: str,
    tokens: Sequence[int],
    dtypes: Sequence[DType | None],
    batch: int = 1,
    baseline: str | None = None,
    notes: Sequence[str] = (),
    engine: StorageRules | Callable[[ModelSpec], StorageRules],
) -> Comparison:
    """Estimate every candidate x dtype x length; ratios are to the baseline candidate at the
    first dtype and the same length. ``None`` in ``dtypes`` means each model's own dtype.
    ``engine``: one for every candidate, or the engine each candidate's spec is served by (an
    engine configures itself by the model: vLLM's MLA backends take larger blocks, and only the MLA
    variant may be served by one)."""
    if not candidates or not tokens or not dtypes:
        raise UsageError("nothing to compare: every list needs at least one value")
    if baseline is None:
        base = next((c for c in candidates if c.label == "MHA"), candidates[0])
    else:
        found = _match(baseline, candidates)
        if found is None:
            labels = ", ".join(c.label for c in candidates)
            raise UsageError(f"--baseline {baseline!r} is not in the table ({labels})")
        base = found

    # One plan per candidate and format, evaluated at each length.
    def plan(c: Candidate, dtype: DType | None) -> Plan:
        served = engine(c.spec) if callable(engine) else engine
        return compile_plan(c.spec, Workload(tokens=tokens[0], batch=batch, kv_dtype=dtype), served)

    base_plan = plan(base, dtypes[0])
    base_totals = dict(zip(tokens, base_plan.totals(tokens, batch), strict=True))
    for t, total in base_totals.items():
        if total == 0:
            raise UsageError(f"the baseline {base.label} holds 0 bytes at {t:,} tokens, so ratios to it are undefined")
    rows = []
    for c in candidates:
        for dtype in dtypes:
            p = base_plan if c is base and dtype == dtypes[0] else plan(c, dtype)
            first = CompareRow(c, p.estimate.kv_dtype, 0, 0, 1, p.per_token_bytes, (), p, batch)
            totals = p.totals(tokens, batch)
            for t, total in zip(tokens, totals, strict=True):
                rows.append(copy_with(first, {"tokens": t, "total_bytes": total, "baseline_bytes": base_totals[t],
                                              "notes": p.fixed_notes(t)}))  # fmt: skip
    if mode == "models":
        # Smallest cache first, judged at the longest length and the first dtype.
        final: dict[int, int] = {}
        for r in rows:
            if r.tokens == tokens[-1]:
                final.setdefault(id(r.candidate), r.total_bytes)
        order = {id(c): i for i, c in enumerate(candidates)}
        rows.sort(key=lambda r: (final[id(r.candidate)], order[id(r.candidate)]))
    return Comparison(
        mode=mode,
        rows=tuple(rows),
        baseline=base.label,
        tokens=tuple(tokens),
        dtypes=tuple(dict.fromkeys(r.kv_dtype for r in rows)),
        batch=batch,
        notes=tuple(notes),
        own_dtypes=list(dtypes) == [None],
    )
