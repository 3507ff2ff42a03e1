"""The public Python API, and the only thing the CLI calls.

Open a model once (``open_model``: a preset, a config.json, a Hub repo id or URL, or a geometry
given by hand) and ask about it: ``estimate``, ``estimate_requests`` (a request mix),
``compare``, ``fit`` and ``probe``. Every parameter takes plain Python values (ints for counts
and bytes, names or ``DType`` for formats); errors are ``KvcalcError`` subclasses whose
messages speak of these parameters.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .configs import read_config
from .dtypes import DEFAULT_QUANT_GROUP, DType, parse_kv_dtype
from .errors import SourceError, StrictError, UsageError
from .estimator import Estimate, Workload
from .estimator import estimate as estimate_spec
from .sources import Source, resolve
from .spec import MAX_DIMENSION, MAX_LAYERS, AttentionCache, ModelSpec

if TYPE_CHECKING:  # the heavier modules load only when asked for (fractions alone costs ~3 ms)
    from fractions import Fraction

    from .capacity import Budget, Fit, Verdict
    from .comparison import Comparison
    from .crosscheck import CrossCheck
    from .engines import Engine
    from .gpus import GPU
    from .llamacpp_probe import LlamaCppProbe
    from .presets import Preset
    from .runtime import Runtime
    from .workloads import Request, RequestSummary

OnFetch = Callable[[str], None] | None
DTypeLike = str | DType | None


# --- models -----------------------------------------------------------------------------------------


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


def open_model(
    model: str | ModelSpec | Model, *, revision: str | None = None, on_fetch: OnFetch = None, strict: bool = False
) -> Model:
    """A preset name, a config.json (or its folder), a Hub repo id or URL, or an already built
    ``ModelSpec`` -> ``Model``. ``on_fetch`` is called with a short message right before anything
    is fetched from the Hub. The model's ``spec.warnings`` name config fields kvcalc does not
    model that may shape the cache; ``strict`` turns them into a ``StrictError``."""
    opened = _open(model, revision=revision, on_fetch=on_fetch)
    if strict and opened.spec.warnings:
        more = len(opened.spec.warnings) - 1
        also = f" (and {more} more field{'s' if more > 1 else ''})" if more else ""
        raise StrictError(f"strict: {opened.spec.warnings[0]}{also}")
    return opened


def _open(model: str | ModelSpec | Model, *, revision: str | None, on_fetch: OnFetch) -> Model:
    if isinstance(model, Model):
        return model
    if isinstance(model, ModelSpec):
        return Model(model)
    if not model.strip():
        raise UsageError("MODEL is empty: give a preset name, a config.json path or a Hub repo id", param="models")
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


# --- serving: engine and formats ---------------------------------------------------------------------


@dataclass(frozen=True)
class Serving:
    """The engine and K/V formats a request asks for, with every default applied noted."""

    engine: Engine
    k_dtype: DType | None
    v_dtype: DType | None
    residual_tokens: int
    notes: tuple[str, ...] = ()


def serving(
    spec: ModelSpec,
    *,
    engine: str | Engine = "theoretical",
    kv_dtype: DTypeLike = None,
    k_dtype: DTypeLike = None,
    v_dtype: DTypeLike = None,
    quant_group: int | None = None,
    residual_tokens: int | None = None,
    block_size: int | None = None,
    max_batched_tokens: int | None = None,
    ubatch: int | None = None,
    kv_unified: bool = False,
    n_batch: int | None = None,
    swa_full: bool | None = None,
    max_num_seqs: int | None = None,
    enforce_eager: bool = False,
) -> Serving:
    """Resolve the engine (by registry name) and the formats; ``None`` / ``"auto"`` formats are
    the engine's own default for the model, decided by the estimator."""
    from .engines import Engine as EngineBase
    from .engines import make_engine
    from .units import MAX_COUNT

    # A block or quantization group is at most a row's length; token counts at most any count.
    knobs = (("block_size", block_size, MAX_DIMENSION), ("max_batched_tokens", max_batched_tokens, MAX_COUNT),
             ("ubatch", ubatch, MAX_COUNT), ("quant_group", quant_group, MAX_DIMENSION),
             ("n_batch", n_batch, MAX_COUNT), ("max_num_seqs", max_num_seqs, MAX_COUNT))  # fmt: skip
    for param, value, most in knobs:
        if value is not None and (isinstance(value, bool) or value <= 0):
            raise UsageError(f"{param} must be positive, got {value}", param=param)
        if value is not None and value > most:
            raise UsageError(f"{param} is implausibly large: {value:.3g} (at most {most:,})", param=param)
    if residual_tokens is not None and residual_tokens < 0:
        raise UsageError(f"residual_tokens must not be negative, got {residual_tokens}", param="residual_tokens")
    notes: list[str] = []
    if isinstance(engine, EngineBase):
        chosen = engine
    else:
        chosen, engine_notes = make_engine(
            engine, uses_mla=any(c.is_latent for c in spec.caches), block_size=block_size,
            max_batched_tokens=max_batched_tokens, ubatch=ubatch, kv_unified=kv_unified, n_batch=n_batch,
            swa_full=swa_full, max_num_seqs=max_num_seqs, enforce_eager=enforce_eager,
        )  # fmt: skip
        notes += engine_notes
    if kv_dtype is not None and k_dtype is not None and v_dtype is not None:
        raise UsageError("kv_dtype changes nothing when k_dtype and v_dtype are both given",
                         param=("kv_dtype", "k_dtype", "v_dtype"))  # fmt: skip
    if (k_dtype is not None or v_dtype is not None) and not any(c.caches_tokens for c in spec.caches):
        raise UsageError(
            f"{spec.name} caches no K or V rows (its layers keep states or nothing): k_dtype and v_dtype change "
            "nothing; kv_dtype sets the state's format",
            param=("k_dtype", "v_dtype"),
        )
    if (k_dtype is not None or v_dtype is not None) and not chosen.separate_kv_formats:
        raise UsageError(
            f"{chosen.name} stores K and V in one format: give kv_dtype (k_dtype and v_dtype apart are llama.cpp's "
            "-ctk and -ctv)",
            param=("kv_dtype", "k_dtype", "v_dtype"),
        )
    group = quant_group if quant_group is not None else DEFAULT_QUANT_GROUP
    base = _dtype(kv_dtype, group, "kv_dtype")
    k = _dtype(k_dtype, group, "k_dtype") if k_dtype is not None else base
    v = _dtype(v_dtype, group, "v_dtype") if v_dtype is not None else base
    named = [_dtype(d, group, "kv_dtype") for d in (kv_dtype, k_dtype, v_dtype) if isinstance(d, str)]
    if quant_group is not None and not any(d is not None and d.is_group_quantized for d in named):
        raise UsageError(
            "quant_group applies to the group-quantized formats int8, int4 and int2; the formats asked for have no "
            "groups",
            param="quant_group",
        )
    if v is None and k is not None and k_dtype is not None:
        # K alone (llama.cpp -ctk without -ctv): V keeps the engine's own default format, as the
        # engine does (common/arg.cpp sets cache_type_k and cache_type_v apart); it must not follow K.
        v, _ = chosen.auto_kv_dtype(spec.dtype, spec.model_type)
        notes.append(f"V format not given: {v.name}, {chosen.name}'s default (--v-dtype or --kv-dtype to set it)")
    quantized = any(d is not None and not d.is_plain for d in (k, v))
    if residual_tokens is not None and not quantized:
        raise UsageError(
            "residual_tokens applies to a quantized KV cache (the newest tokens it keeps unquantized); the cache "
            "asked for keeps every token in its own format",
            param="residual_tokens",
        )
    residual = residual_tokens
    if residual is None:
        residual, residual_note = chosen.default_residual_tokens(quantized)
        notes += [residual_note] if residual_note else []
    return Serving(chosen, k, v if v != k else None, residual, tuple(notes))


def is_theoretical(engine: str | Engine) -> bool:
    """Whether an engine name (or alias) is the theoretical engine, the figure others are set beside."""
    from .engines import engine_entry

    name = engine.name if not isinstance(engine, str) else engine_entry(engine).name
    return name == "theoretical"


def _dtype(value: DTypeLike, quant_group: int, param: str) -> DType | None:
    if value is None or isinstance(value, DType):
        return value
    try:
        return parse_kv_dtype(value, quant_group=quant_group)
    except UsageError as exc:
        raise UsageError(str(exc), param=param) from None


def _tokens(
    spec: ModelSpec, tokens: int | None, prompt: int | None, output: int | None, encoder_tokens: int | None
) -> tuple[int, int | None, list[str]]:
    """T (and the encoder length) from ``tokens`` or ``prompt`` + ``output``: decoder-only models
    cache P + O; encoder-decoder models cache O in self-attention and the prompt in cross-attention."""
    notes: list[str] = []
    if encoder_tokens is not None and not spec.is_encoder_decoder:
        raise UsageError(
            f"encoder_tokens applies to encoder-decoder models; {spec.name} has no cross-attention",
            param="encoder_tokens",
        )
    if tokens is not None and (prompt is not None or output is not None):
        raise UsageError("give either tokens or prompt/output, not both", param=("tokens", "prompt", "output"))
    if prompt is not None or output is not None:
        if spec.is_encoder_decoder:
            if not output:
                raise UsageError("an encoder-decoder model caches generated tokens: give output", param="output")
            return output, encoder_tokens or prompt, notes
        return (prompt or 0) + (output or 0), encoder_tokens, notes
    if tokens is None:
        notes.append("tokens not given: 2,048 tokens per sequence assumed")
        return 2048, encoder_tokens, notes
    return tokens, encoder_tokens, notes


def _images(spec: ModelSpec, images: int | None, image_tokens: int | None) -> dict[str, Any]:
    """The workload's image fields: ``images`` per sequence of ``image_tokens`` tokens each (None:
    the model's own count), for models with image cross-attention (Llama 3.2 Vision) only."""
    for param, value in (("images", images), ("image_tokens", image_tokens)):
        if value is not None and not spec.has_image_cross_attention:
            raise UsageError(
                f"{param} applies to models with image cross-attention (Llama 3.2 Vision); {spec.name} has none",
                param=param,
            )
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise UsageError(f"{param} must be a non-negative integer, got {value!r}", param=param)
    if image_tokens == 0:
        raise UsageError("image_tokens must be positive", param="image_tokens")
    if images and image_tokens is None and spec.image_tokens is None:
        raise UsageError(
            f"{spec.name} does not say how many tokens an image has (no vision_config): give image_tokens",
            param="image_tokens",
        )
    return {"images": images or 0, "image_tokens": image_tokens}


def _past_limit(spec: ModelSpec, tokens: int, who: str = "") -> list[str]:
    """The note every command gives once when a length is past the model's own context limit
    (its max_position_embeddings or kin): engines refuse such requests unless told otherwise."""
    limit = spec.max_context
    if limit is None or tokens <= limit:
        return []
    return [f"{who}{tokens:,} tokens is past the model's context limit ({spec.max_context_key}): engines refuse "
            "such requests by default"]  # fmt: skip


def _merge(*groups: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(note for group in groups for note in group))


# --- estimate -----------------------------------------------------------------------------------------


def estimate(
    model: str | ModelSpec | Model,
    *,
    tokens: int | None = None,
    prompt: int | None = None,
    output: int | None = None,
    batch: int = 1,
    kv_dtype: DTypeLike = None,
    k_dtype: DTypeLike = None,
    v_dtype: DTypeLike = None,
    quant_group: int | None = None,
    residual_tokens: int | None = None,
    engine: str | Engine = "theoretical",
    block_size: int | None = None,
    max_batched_tokens: int | None = None,
    ubatch: int | None = None,
    kv_unified: bool = False,
    n_batch: int | None = None,
    swa_full: bool | None = None,
    tp: int = 1,
    pp: int = 1,
    dp: int = 1,
    shared_prefix: int = 0,
    encoder_tokens: int | None = None,
    images: int | None = None,
    image_tokens: int | None = None,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
) -> Estimate:
    """The KV cache of ``model`` holding ``batch`` sequences of ``tokens`` tokens (or ``prompt`` +
    ``output``) under ``engine``'s storage rules, across ``tp`` x ``pp`` x ``dp`` GPUs. ``images``
    per sequence (of ``image_tokens`` tokens each; None: the model's own tiling) feed a Llama 3.2
    Vision model's image cross-attention layers; none: a text-only prompt. The estimate's
    ``notes`` hold every default applied, the model's first.

    >>> est = estimate("llama-3.1-8b", tokens=2048)
    >>> est.total_bytes
    268435456
    """
    opened = open_model(model, revision=revision, on_fetch=on_fetch, strict=strict)
    spec = opened.spec
    t, enc, token_notes = _tokens(spec, tokens, prompt, output, encoder_tokens)
    pictures = _images(spec, images, image_tokens)
    chosen = serving(
        spec, engine=engine, kv_dtype=kv_dtype, k_dtype=k_dtype, v_dtype=v_dtype, quant_group=quant_group,
        residual_tokens=residual_tokens, block_size=block_size, max_batched_tokens=max_batched_tokens,
        ubatch=ubatch, kv_unified=kv_unified, n_batch=n_batch, swa_full=swa_full,
    )  # fmt: skip
    workload = Workload(
        tokens=t, batch=batch, kv_dtype=chosen.k_dtype, v_dtype=chosen.v_dtype, encoder_tokens=enc,
        shared_prefix=shared_prefix, residual_tokens=chosen.residual_tokens, tp=tp, pp=pp, dp=dp, **pictures,
    )  # fmt: skip
    result = estimate_spec(spec, workload, engine=chosen.engine)
    limit_notes = [] if spec.is_encoder_decoder else _past_limit(spec, t)
    return replace(result, notes=_merge(spec.notes, token_notes, chosen.notes, result.notes, limit_notes))


def read_requests(path: str | Path) -> list[Request]:
    """A request-mix file: CSV (prompt,output or tokens columns) or JSON lines, a regular file of
    bounded size."""
    from .sources import LENGTHS_LIMIT, read_regular_file
    from .workloads import parse_lengths

    # A file that cannot be read or parsed is a failure (exit 1), as an unreadable MODEL is.
    try:
        data = read_regular_file(Path(path), what="lengths file", limit=LENGTHS_LIMIT)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise SourceError(f"lengths file {path} is not UTF-8 text") from None
        return parse_lengths(text, name=f"lengths file {path}")
    except SourceError as exc:
        raise SourceError(str(exc), param="lengths") from None


def estimate_requests(
    model: str | ModelSpec | Model,
    requests: Sequence[Request] | str | Path,
    *,
    kv_dtype: DTypeLike = None,
    k_dtype: DTypeLike = None,
    v_dtype: DTypeLike = None,
    quant_group: int | None = None,
    residual_tokens: int | None = None,
    engine: str | Engine = "theoretical",
    block_size: int | None = None,
    max_batched_tokens: int | None = None,
    ubatch: int | None = None,
    kv_unified: bool = False,
    n_batch: int | None = None,
    swa_full: bool | None = None,
    tp: int = 1,
    pp: int = 1,
    shared_prefix: int = 0,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
) -> RequestSummary:
    """A request mix (a list of ``Request``, or a CSV/JSONL file path): each request's own cache
    and the total with every request resident at once."""
    from .workloads import summarize_requests

    opened = open_model(model, revision=revision, on_fetch=on_fetch, strict=strict)
    spec = opened.spec
    listed = read_requests(requests) if isinstance(requests, str | Path) else list(requests)
    chosen = serving(
        spec, engine=engine, kv_dtype=kv_dtype, k_dtype=k_dtype, v_dtype=v_dtype, quant_group=quant_group,
        residual_tokens=residual_tokens, block_size=block_size, max_batched_tokens=max_batched_tokens,
        ubatch=ubatch, kv_unified=kv_unified, n_batch=n_batch, swa_full=swa_full,
    )  # fmt: skip
    longest = max(r.tokens for r in listed) if listed else 1
    workload = Workload(
        tokens=longest, kv_dtype=chosen.k_dtype, v_dtype=chosen.v_dtype, residual_tokens=chosen.residual_tokens,
        shared_prefix=min(shared_prefix, longest), tp=tp, pp=pp,
    )  # fmt: skip
    summary = summarize_requests(spec, workload, chosen.engine, listed)
    past = sum(1 for r in listed if spec.max_context is not None and r.tokens > spec.max_context)
    limit_notes = (
        _past_limit(spec, longest, f"{past:,} request(s), the longest ") if past and not spec.is_encoder_decoder else []
    )
    return replace(summary, notes=_merge(spec.notes, chosen.notes, summary.notes, limit_notes))


# --- compare ------------------------------------------------------------------------------------------


def compare(
    models: Sequence[str | ModelSpec | Model],
    *,
    tokens: Sequence[int] | None = None,
    kv_dtypes: Sequence[DTypeLike] | None = None,
    batch: int = 1,
    kv_heads: Sequence[int] = (),
    latent_dim: int | None = None,
    rope_dim: int | None = None,
    baseline: str | None = None,
    engine: str | Engine = "theoretical",
    mark_own: bool = True,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
) -> Comparison:
    """One model: its MHA / GQA (``kv_heads``) / MQA / MLA (``latent_dim``, ``rope_dim``) variants
    side by side. Several: the models side by side, smallest cache first. Every row is estimated
    at each of ``tokens`` and ``kv_dtypes`` (None or "auto": each model's own)."""
    from .comparison import attention_variants, candidate_for
    from .comparison import compare as run_compare
    from .engines import Engine as EngineBase
    from .engines import make_engine

    if not models:
        raise UsageError("give one model (its variants) or several (side by side)", param="models")
    opened = [open_model(m, revision=revision, on_fetch=on_fetch, strict=strict) for m in models]
    names = [m.name for m in opened]
    repeated = next((n for n in names if names.count(n) > 1), None)
    if repeated is not None:
        raise UsageError(f"{repeated} is given more than once: each model is compared once", param="models")
    notes: list[str] = []
    if tokens is None:
        tokens = [2048]
        notes.append("tokens not given: 2,048 tokens per sequence assumed")
    if not tokens:
        raise UsageError("tokens needs at least one length", param="tokens")
    twice = next((t for t in tokens if list(tokens).count(t) > 1), None)
    if twice is not None:
        raise UsageError(f"tokens lists {twice:,} more than once: each length is one column", param="tokens")
    dtypes = [_dtype(d, DEFAULT_QUANT_GROUP, "kv_dtype") for d in (kv_dtypes or [None])]
    same = next((d for d in dtypes if dtypes.count(d) > 1), None)
    if len(dtypes) > 1 and same is not None:
        shown = same.name if same is not None else "auto"
        raise UsageError(f"kv_dtypes lists {shown} more than once: each format is one column", param="kv_dtypes")
    if len(opened) == 1:
        candidates, variant_notes = attention_variants(
            opened[0].spec, kv_heads=kv_heads, latent_dim=latent_dim, rope_dim=rope_dim, mark_own=mark_own
        )
        mode = "variants"
        notes += variant_notes
    else:
        if kv_heads or latent_dim is not None or rope_dim is not None:
            raise UsageError(
                "kv_heads, latent_dim and rope_dim compare variants of one model; give one model",
                param=("kv_heads", "latent_dim", "rope_dim"),
            )
        candidates = [candidate_for(m.spec) for m in opened]
        mode = "models"
    for m in opened:
        if not m.spec.is_encoder_decoder:
            notes += _past_limit(m.spec, max(tokens), f"{m.name}: " if len(opened) > 1 else "")
    if isinstance(engine, EngineBase):
        chosen = engine
    else:
        chosen, engine_notes = make_engine(engine, uses_mla=any(x.is_latent for c in candidates for x in c.spec.caches))
        notes += engine_notes
    return run_compare(
        candidates, engine=chosen, mode=mode, tokens=list(tokens), dtypes=dtypes, batch=batch, baseline=baseline,
        notes=notes,
    )  # fmt: skip


# --- fit ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FitReport:
    """``fit``'s answers with everything that led to them: the budget line by line, the GPU, the
    workload the answers are about, and every note."""

    model: Model
    result: Fit
    budget: Budget
    workload: Workload
    gpu_label: str | None
    notes: tuple[str, ...] = field(default=())
    # The longest request the context answer considers (max_model_len, else the model's limit).
    context_limit: int | None = None
    verdict: Verdict | None = None
    engine: Engine | None = None  # the engine the answers follow, with its options


def fit(
    model: str | ModelSpec | Model,
    *,
    gpu: str | None = None,
    gpu_memory: int | None = None,
    kv_budget: int | None = None,
    gpus: int | None = None,
    utilization: float | Fraction | None = None,
    weights: int | None = None,
    overhead: int | None = None,
    tokens: int | None = None,
    batch: int = 1,
    kv_dtype: DTypeLike = None,
    k_dtype: DTypeLike = None,
    v_dtype: DTypeLike = None,
    quant_group: int | None = None,
    residual_tokens: int | None = None,
    engine: str | Engine = "theoretical",
    block_size: int | None = None,
    max_batched_tokens: int | None = None,
    ubatch: int | None = None,
    kv_unified: bool = False,
    n_batch: int | None = None,
    swa_full: bool | None = None,
    tp: int | None = None,
    pp: int = 1,
    dp: int = 1,
    max_model_len: int | None = None,
    context_cap: bool = True,
    max_num_seqs: int | None = None,
    enforce_eager: bool = False,
    images: int | None = None,
    image_tokens: int | None = None,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
    verdict: bool = True,
) -> FitReport:
    """How many tokens, concurrent requests of ``tokens`` and how long a context fit on ``gpus``
    GPUs (a ``gpu`` preset or ``gpu_memory`` bytes each, or a ready ``kv_budget`` per GPU).
    ``images`` per request (Llama 3.2 Vision) as in ``estimate``. ``weights`` in bytes (None: read
    from the model's safetensors, the Hub or the preset)."""
    call = dict(locals())  # the request as given, to try the remedies of the verdict with
    from .capacity import Budget, BudgetLine, derive_budget
    from .capacity import fit as run_fit
    from .gpus import find_gpu

    opened = open_model(model, revision=revision, on_fetch=on_fetch, strict=strict)
    spec = opened.spec
    if isinstance(utilization, float) and not math.isfinite(utilization):
        raise UsageError(f"utilization must be in (0, 1], got {utilization}", param="utilization")
    from fractions import Fraction

    share: Fraction | None = None
    if utilization is not None:
        share = Fraction(str(utilization)) if isinstance(utilization, float) else Fraction(utilization)
        if not 0 < share <= 1:
            raise UsageError(f"utilization must be in (0, 1], got {float(share):g}", param="utilization")
    if weights is not None and (isinstance(weights, bool) or weights <= 0):
        raise UsageError(f"weights must be a positive size in bytes, got {weights}", param="weights")
    for param, value in (("overhead", overhead), ("max_num_seqs", max_num_seqs)):
        if value is not None and (isinstance(value, bool) or value < (0 if param == "overhead" else 1)):
            raise UsageError(f"{param} must be {'zero or more' if param == 'overhead' else 'positive'}, got {value}",
                             param=param)  # fmt: skip
    for param, value in (("pp", pp), ("dp", dp), ("tp", tp), ("gpus", gpus)):
        if value is not None and value < 1:
            raise UsageError(f"{param} must be a positive whole number, got {value}", param=param)
    if tp is None:
        tp = gpus // (pp * dp) if gpus is not None else 1
        if tp < 1:
            raise UsageError(f"gpus {gpus} is fewer than pp {pp} x dp {dp}", param=("gpus", "pp", "dp"))
    if gpus is not None and gpus != tp * pp * dp:
        raise UsageError(f"gpus {gpus} does not equal tp {tp} x pp {pp} x dp {dp}", param=("gpus", "tp", "pp", "dp"))
    chosen = serving(
        spec, engine=engine, kv_dtype=kv_dtype, k_dtype=k_dtype, v_dtype=v_dtype, quant_group=quant_group,
        residual_tokens=residual_tokens, block_size=block_size, max_batched_tokens=max_batched_tokens,
        ubatch=ubatch, kv_unified=kv_unified, n_batch=n_batch, swa_full=swa_full, max_num_seqs=max_num_seqs,
        enforce_eager=enforce_eager,
    )  # fmt: skip
    notes = list(chosen.notes)
    if tokens is None:
        tokens = 4096
        notes.append("tokens not given: requests of 4,096 tokens assumed")
    if max_model_len is not None and tokens > max_model_len:
        raise UsageError(
            f"tokens {tokens:,} is longer than max_model_len {max_model_len:,}: an engine refuses such requests",
            param=("tokens", "max_model_len"),
        )
    context_limit, limit_notes = _context_limit(spec, tokens, max_model_len, context_cap)
    notes += limit_notes
    workload = Workload(
        tokens=tokens, batch=batch, kv_dtype=chosen.k_dtype, v_dtype=chosen.v_dtype,
        residual_tokens=chosen.residual_tokens, tp=tp, pp=pp, dp=dp, **_images(spec, images, image_tokens),
    )  # fmt: skip
    gpu_label = None
    if kv_budget is not None:
        if gpu is not None or gpu_memory is not None:
            raise UsageError(
                "kv_budget replaces gpu/gpu_memory: give one or the other", param=("kv_budget", "gpu", "gpu_memory")
            )
        if kv_budget <= 0:
            raise UsageError(f"kv_budget must be positive, got {kv_budget}", param="kv_budget")
        derivation = {"weights": weights, "overhead": overhead, "utilization": utilization,
                      "max_num_seqs": max_num_seqs, "enforce_eager": enforce_eager or None}  # fmt: skip
        unused = [name for name, value in derivation.items() if value is not None]
        if unused:
            raise UsageError(
                f"kv_budget replaces the budget's derivation: {unused[0]} has no effect with it",
                param=("kv_budget", unused[0]),
            )
        budget = Budget(kv_budget, (BudgetLine("KV cache budget per GPU (--kv-budget)", kv_budget),))
    else:
        if gpu is not None and gpu_memory is not None:
            raise UsageError("give gpu or gpu_memory, not both", param=("gpu", "gpu_memory"))
        found = None
        if gpu_memory is not None:
            if gpu_memory <= 0:
                raise UsageError(f"gpu_memory must be positive, got {gpu_memory}", param="gpu_memory")
            gpu_bytes, gpu_label = gpu_memory, f"{gpu_memory:,} bytes per GPU"
        elif gpu is not None:
            found = find_gpu(gpu)
            gpu_bytes = found.runtime_bytes
            gpu_label = f"{found.name}, {found.runtime_bytes:,} bytes as the CUDA/ROCm runtime reports them"
            notes.append(f"{found.name} memory: {found.source}")
        else:
            raise UsageError("give gpu, gpu_memory or kv_budget", param=("gpu", "gpu_memory", "kv_budget"))
        if weights is None:
            weights_bytes, weights_label, weight_notes = _weights(opened, chosen.engine, revision, on_fetch)
            notes += weight_notes
        else:
            weights_bytes, weights_label = weights, f"--weights {weights:,} bytes"
        runtime, engine_now, runtime_notes = _runtime(
            opened, chosen.engine, gpu_bytes=gpu_bytes, gpu=found, tp=tp, pp=pp, share=share, overhead=overhead,
            n_ctx=tokens * cdiv_int(batch, dp), n_seq=cdiv_int(batch, dp), k_dtype=chosen.k_dtype,
            v_dtype=chosen.v_dtype,
        )  # fmt: skip
        chosen = replace(chosen, engine=engine_now)
        notes += runtime_notes
        budget = derive_budget(
            gpu_bytes=gpu_bytes, weights_bytes=weights_bytes, shards=tp * pp, weights_label=weights_label,
            runtime=runtime,
        )  # fmt: skip
    if budget.leaves_nothing:  # weights and runtime take it all: an answer, with how many GPUs would do
        from .capacity import Fit

        result = Fit(budget.kv_bytes, tokens, batch, 0, 0, 0, chosen.engine.name)
    else:
        result = run_fit(spec, workload, chosen.engine, budget.kv_bytes, context_limit=context_limit)
    if context_limit is not None and max_model_len is None and result.max_context == context_limit:
        notes.append(
            f"max context is the model's own limit ({spec.max_context_key}), not the budget's: "
            "--no-context-cap searches past it"
        )
    report = FitReport(
        opened, result, budget, workload, gpu_label, _merge(spec.notes, notes, result.notes), context_limit,
        engine=chosen.engine,
    )  # fmt: skip
    if verdict:
        report = replace(report, verdict=_verdict(report, {**call, "model": opened}))
    return report


def _verdict(report: FitReport, call: dict[str, Any]) -> Verdict:
    """Fits or not, the headroom, and when it does not fit what to change, in this order: an fp8
    KV cache, twice the tensor parallelism, a shorter context, fewer sequences, each with its figure."""
    from .capacity import Remedy, Verdict, workload_bytes

    result, w, engine = report.result, report.workload, report.engine
    assert engine is not None
    spec = report.model.spec

    def headroom(change: str, **changed: Any) -> Remedy | None:
        try:
            alt = fit(**{**call, **changed, "verdict": False})
        except UsageError:
            return None  # the engine cannot do it (fp8 KV on this engine, a tp that splits no heads)
        assert alt.engine is not None
        if alt.budget.leaves_nothing:
            return Remedy(change, False, f"the weights still leave nothing ({alt.budget.kv_bytes:,} B per GPU)")
        alt_needed = workload_bytes(alt.model.spec, alt.workload, alt.engine, alt.result)
        room = alt.result.kv_budget - alt_needed
        return Remedy(change, room >= 0, f"headroom {room:,} B per GPU")

    if report.budget.leaves_nothing:
        least = report.budget.gpus_needed
        reason = f"the weights and the runtime leave nothing for the KV cache ({result.kv_budget:,} B per GPU)" + (
            "; no count of such GPUs does: the runtime alone fills one" if least is None else ""
        )
        tried: list[Remedy] = []
        # The fewest GPUs that hold the request too: from the fewest that leave anything, upward,
        # eight counts at most (a count that splits no heads is skipped).
        first = max(cdiv_int(least, w.pp), w.tp + 1) if least is not None else 0  # least counts tp x pp
        for tp in range(first, first + 8 if least is not None else 0):
            gpus = tp * w.pp * w.dp
            remedy = headroom(f"{gpus} GPUs (--tp {tp})", tp=tp, gpus=None)
            if remedy is not None:
                tried.append(remedy)
                if remedy.fits:
                    break
        remedies_found = tuple(r for r in tried if r.fits) or tuple(tried[-1:])
        return Verdict(False, 0, result.kv_budget, remedies_found, reason)
    needed = workload_bytes(spec, w, engine, result)
    limit = report.context_limit
    if limit is not None and w.tokens > limit and call.get("max_model_len") is None:
        reason = (
            f"requests of {w.tokens:,} tokens are past the model's context limit ({spec.max_context_key}): "
            "engines refuse them (--no-context-cap to size them anyway)"
        )
        fits_memory = needed <= result.kv_budget
        memory = Remedy("past the limit anyway (--no-context-cap)", fits_memory,
                        f"headroom {result.kv_budget - needed:,} B per GPU")  # fmt: skip
        shorter = Remedy("shorter context (--tokens)", True, f"up to {min(limit, result.max_context or limit):,} "
                         f"tokens at batch {w.batch:,}")  # fmt: skip
        return Verdict(False, needed, result.kv_budget, (shorter, memory), reason)
    if needed <= result.kv_budget:
        return Verdict(True, needed, result.kv_budget)

    remedies: list[Remedy | None] = []
    kv = w.kv_dtype or report.model.spec.dtype
    if kv is None or (kv.block == 1 and kv.bits > 8):
        remedies.append(headroom("fp8 KV cache (--kv-dtype fp8)", kv_dtype="fp8", k_dtype=None, v_dtype=None))
    remedies.append(headroom(f"tp {w.tp * 2} (--tp {w.tp * 2}, twice the GPUs)", tp=w.tp * 2, gpus=None))
    if result.max_context:
        remedies.append(
            Remedy("shorter context (--tokens)", True, f"up to {result.max_context:,} tokens at batch {w.batch:,}")
        )
    if result.max_concurrency:
        remedies.append(
            Remedy("fewer sequences (--batch)", True, f"up to {result.max_concurrency:,} at {w.tokens:,} tokens each")
        )
    return Verdict(False, needed, result.kv_budget, tuple(r for r in remedies if r is not None))


def cdiv_int(a: int, b: int) -> int:
    return -(-a // b)


def _context_limit(
    spec: ModelSpec, tokens: int, max_model_len: int | None, context_cap: bool
) -> tuple[int | None, list[str]]:
    """The longest request fit considers: max_model_len when given, else the model's own limit
    (what vLLM takes as its default max_model_len), else none."""
    notes: list[str] = []
    limit = spec.max_context
    if max_model_len is not None and not context_cap:
        raise UsageError(
            "context_cap changes nothing beside max_model_len: the context stops there",
            param=("context_cap", "max_model_len"),
        )
    if max_model_len is None and limit is None and not context_cap:
        raise UsageError(
            f"context_cap changes nothing: {spec.name}'s config gives no context limit to cap at",
            param="context_cap",
        )
    if max_model_len is not None:
        if limit is not None and max_model_len > limit:
            notes.append(
                f"max_model_len {max_model_len:,} is past the model's own limit ({spec.max_context_key}): vLLM "
                "refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, and positions past it were never trained"
            )
        return max_model_len, notes
    if limit is None:
        notes.append("the config gives no context limit (max_position_embeddings or kin): context is not capped")
        return None, notes
    if not context_cap:
        notes.append(f"context not capped at the model's limit ({spec.max_context_key}): --no-context-cap")
        return None, notes
    return limit, notes


def _weights(model: Model, engine: Engine, revision: str | None, on_fetch: OnFetch) -> tuple[int, str, list[str]]:
    """Weights bytes of an opened model as the engine holds them (beside its config file, from the
    Hub, or its preset), with notes: a preset's own remark, and vLLM's or SGLang's 16-bit load of
    a float32 checkpoint."""
    from .sources import is_gguf_file, weights_bytes

    source = model.source
    if source is None:
        raise UsageError("a model given by hand has no weights to read: give weights", param="weights")
    where = source.preset.name if source.preset is not None else source.label
    if source.kind == "file" and not is_gguf_file(Path(source.label)):
        where = str(Path(source.label).parent)  # a config.json: the weights lie beside it
    at = revision if revision is not None else source.revision  # a URL's revision: the config's own
    size, label = weights_bytes(where, spec_dtype=model.spec.dtype, revision=at, on_fetch=on_fetch)
    notes: list[str] = []
    preset_weights = source.preset.weights if source.preset is not None else None
    if preset_weights is not None:
        notes.append(f"weights: {preset_weights.source}")
        if preset_weights.note:
            notes.append(f"weights: {preset_weights.note}")
    dtype = model.spec.dtype
    held = engine.weights_dtype(dtype, model.spec.model_type)
    if dtype is not None and held is not None and held.bits < dtype.bits and not _is_gguf(source):
        # The engine's one decision (Engine.weights_dtype): vLLM and SGLang load a float32
        # checkpoint in 16 bits, a converted GGUF stores it in bf16; every tensor at that size.
        size = size * held.bits // dtype.bits
        label += f", held in {held.name}"
        notes.append(f"{engine.name} holds this {dtype.name} checkpoint in {held.name}: weights scaled to "
                     f"{held.bits} bits")  # fmt: skip
    elif dtype is not None and dtype.bits > 16 and held == dtype and not _is_gguf(source):
        notes.append(f"{engine.name} holds this {dtype.name} checkpoint as stored; vLLM, SGLang and llama.cpp "
                     "hold it in 16 bits (--engine to choose)")  # fmt: skip
    return size, label, notes


def _is_gguf(source: Source) -> bool:
    """A GGUF file, local or in a Hub repo: its tensors are sized as the file stores them."""
    from .gguf_hub import parse_hub_gguf
    from .sources import is_gguf_file

    if source.kind == "file":
        return is_gguf_file(Path(source.label))
    return source.kind == "hub" and parse_hub_gguf(source.label) is not None


def _runtime(
    model: Model,
    engine: Engine,
    *,
    gpu_bytes: int,
    gpu: GPU | None,
    tp: int,
    pp: int,
    share: Fraction | None,
    overhead: int | None,
    n_ctx: int = 4096,
    n_seq: int = 1,
    k_dtype: DType | None = None,
    v_dtype: DType | None = None,
) -> tuple[Runtime, Engine, list[str]]:
    """The engine's share of each GPU and what its runtime takes from it (the engine's runtime
    model), the engine with the batch defaults that GPU gives it, and notes. ``overhead`` replaces
    the model."""
    from .dims import read_dims
    from .runtime import RuntimeRequest, given_runtime

    source = model.source
    raw = source.config if source is not None and isinstance(source.config, dict) else {}
    dtype = model.spec.dtype
    request = RuntimeRequest(
        gpu_bytes=gpu_bytes, gpu=gpu, tp=tp, pp=pp, share=share,
        dims=read_dims(source.config) if source is not None else None,
        dtype_bytes=2 if dtype is None or dtype.name == "fp32" else max(1, dtype.bits // 8),
        multimodal=any(key in raw for key in ("vision_config", "audio_config", "vision_tower")),
        recurrent=any(c.is_state for c in model.spec.caches), n_ctx=n_ctx, n_seq=n_seq,
        quantized_kv=any(d is not None and d.bits < 16 for d in (k_dtype, v_dtype)),
    )  # fmt: skip
    engine, notes = engine.for_gpu(request)
    if overhead is not None:
        default = share if share is not None else engine.default_share
        runtime = given_runtime(overhead, engine.name, default, f"x {engine.share_name} {float(default):g}")
        return runtime, engine, notes
    runtime, runtime_notes = engine.runtime(request)
    return runtime, engine, [*notes, *runtime_notes]


# --- probe --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeReport:
    """A probe's request and result beside the estimate under the same engine's rules."""

    model: Model
    estimate: Estimate
    request: dict[str, Any]
    result: dict[str, Any]
    tolerance_bytes: int
    check: CrossCheck | None  # None for the raw probe
    notes: tuple[str, ...] = ()

    @property
    def measured_bytes(self) -> int:
        return int(self.check.measured_bytes if self.check is not None else self.result["tensor_bytes"])

    @property
    def match(self) -> bool:
        if self.check is not None:
            return self.check.within(self.tolerance_bytes)
        return abs(self.measured_bytes - self.estimate.total_bytes) <= self.tolerance_bytes


def probe_request(
    model: str | ModelSpec | Model,
    *,
    tokens: int = 512,
    batch: int = 1,
    decode: int = 2,
    kv_dtype: DTypeLike = None,
    device: str = "auto",
    raw: bool = False,
    engine: str = "transformers",
    tolerance: str = "0",
    images: int | None = None,
    image_tokens: int | None = None,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
) -> tuple[Model, Estimate, dict[str, Any], int, tuple[str, ...]]:
    """What the probe will run: (model, estimate, request, tolerance in bytes, notes). The request
    is plain JSON for torch_probe.py, here or on another machine."""
    from .crosscheck import model_request, parse_tolerance, raw_request
    from .dtypes import FP32
    from .engines import make_engine

    if not raw and engine != "transformers":
        raise UsageError("the model probe measures transformers' cache: engine applies to the raw probe only",
                         param="engine")  # fmt: skip
    if decode < 0:
        raise UsageError(f"decode must not be negative, got {decode}", param="decode")
    if device not in ("auto", "cpu", "cuda"):
        raise UsageError(f"device must be auto, cpu or cuda, got {device!r}", param="device")
    opened = open_model(model, revision=revision, on_fetch=on_fetch, strict=strict)
    spec = opened.spec
    chosen, notes = make_engine(engine if raw else "transformers", uses_mla=any(c.is_latent for c in spec.caches))
    asked = _dtype(kv_dtype, DEFAULT_QUANT_GROUP, "kv_dtype")
    # The probe runs the model in its own dtype; a config without one builds in torch's float32.
    dtype = asked or (spec.dtype if spec.dtype and spec.dtype.is_plain else FP32)
    pictures = _images(spec, images, image_tokens)
    # The whole model runs in that dtype, so a state layer's conv history is kept in it too.
    run = Workload(tokens=tokens, batch=batch, kv_dtype=dtype, state_dtype=None if raw else dtype, **pictures)
    est = estimate_spec(spec, run, engine=chosen)
    # Checked before any run, so a bad tolerance fails in a second, not after minutes of probing.
    allowed = parse_tolerance(tolerance, est.total_bytes)
    if raw:
        request = raw_request(est, device=device, block_size=getattr(chosen, "block_size", None))
    else:
        config = opened.source.config if opened.source is not None else None
        if not isinstance(config, dict):
            raise UsageError("the model probe needs a model's JSON config (a preset, file or repo id)")
        request = model_request(config, est, decode=decode, device=device)
    return opened, est, request, allowed, _merge(spec.notes, notes, est.notes)


def probe(
    model: str | ModelSpec | Model,
    *,
    tokens: int = 512,
    batch: int = 1,
    decode: int = 2,
    kv_dtype: DTypeLike = None,
    device: str = "auto",
    raw: bool = False,
    engine: str = "transformers",
    tolerance: str = "0",
    from_result: str | Path | dict[str, Any] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    images: int | None = None,
    image_tokens: int | None = None,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
) -> ProbeReport:
    """Measure a real cache (transformers on CPU or CUDA, or raw tensors for an engine's layout)
    and set it beside the estimate; or check a result torch_probe.py printed elsewhere (``from_result``:
    a file path or the parsed JSON), refusing one that answers another request."""
    from .crosscheck import check_model, validate_result
    from .torch_probe import ProbeError, run

    opened, est, request, allowed, notes = probe_request(
        model, tokens=tokens, batch=batch, decode=decode, kv_dtype=kv_dtype, device=device, raw=raw,
        engine=engine, tolerance=tolerance, images=images, image_tokens=image_tokens, revision=revision,
        on_fetch=on_fetch, strict=strict,
    )  # fmt: skip
    if from_result is not None:
        from .sources import RESULT_LIMIT, read_json_file

        where = "result" if isinstance(from_result, dict) else str(from_result)
        loaded = from_result if isinstance(from_result, dict) else read_json_file(Path(from_result), limit=RESULT_LIMIT)
        result = validate_result(loaded, request, where=where, model_types=(opened.spec.model_type,))
    else:
        try:
            result = run(request, progress=progress) if progress is not None else run(request)
        except ProbeError as exc:
            raise UsageError(str(exc)) from None
    if raw:
        return ProbeReport(opened, est, request, result, allowed, None, notes)
    check = check_model(opened.spec, est, result)
    return ProbeReport(
        opened, est, request, result, allowed, check, _merge(notes, check.notes, result.get("notes", []))
    )


def probe_llamacpp(
    model: str | ModelSpec | Model,
    *,
    tokens: int = 512,
    batch: int = 1,
    engine: str = "llama.cpp",
    kv_dtype: DTypeLike = None,
    k_dtype: DTypeLike = None,
    v_dtype: DTypeLike = None,
    ubatch: int | None = None,
    n_batch: int | None = None,
    kv_unified: bool = False,
    swa_full: bool | None = None,
    timeout: float = 600,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
) -> LlamaCppProbe:
    """Create a real llama.cpp context for ``batch`` sequences of ``tokens`` over a GGUF of the
    model's attention and recurrent geometry (a GGUF model's own metadata) and set its KV caches and
    recurrent R/S buffers beside ``estimate`` under the same llama.cpp settings
    (kvcalc.llamacpp_probe.LlamaCppProbe; ``.match`` is byte-for-byte agreement)."""
    from .engines import engine_entry
    from .llamacpp_probe import (
        ALLOCATE_LIMIT,
        LlamaCppProbeError,
        compare,
        context_request,
        gguf_plan,
        measure,
    )

    if engine_entry(engine).module != "llamacpp":
        raise UsageError(f"the llama.cpp probe runs llama.cpp: engine {engine!r} is not llama.cpp", param="engine")
    _check_timeout(timeout)
    opened = open_model(model, revision=revision, on_fetch=on_fetch, strict=strict)
    est = estimate(
        opened, tokens=tokens, batch=batch, engine=engine, kv_dtype=kv_dtype, k_dtype=k_dtype, v_dtype=v_dtype,
        ubatch=ubatch, n_batch=n_batch, kv_unified=kv_unified, swa_full=swa_full,
    )  # fmt: skip
    chosen = serving(opened.spec, engine=engine, ubatch=ubatch, n_batch=n_batch, kv_unified=kv_unified,
                     swa_full=swa_full).engine  # fmt: skip
    plan = _llamacpp_plan(opened, tokens * batch, gguf_plan)
    k_type = est.kv_dtype.name
    request = context_request(chosen, tokens, batch, k_type, (est.v_dtype or est.kv_dtype).name)
    # Allocated for real when cache and tiny weights fit easily; else sized by llama.cpp unallocated.
    allocated = max(est.total_bytes, plan.weights_bytes) <= ALLOCATE_LIMIT
    try:
        answer = measure(plan, [request], timeout=timeout, no_alloc=not allocated)
    except LlamaCppProbeError as exc:
        raise UsageError(str(exc)) from None
    result = answer["results"][0]
    if "error" in result:
        raise UsageError(f"llama.cpp refused the context: {result['error']}")
    checks = compare(est, result)
    from .llamacpp_probe import LlamaCppProbe

    return LlamaCppProbe(opened.name, est, request, checks, result["cparams"], _merge(est.notes, plan.notes), allocated)


def _check_timeout(timeout: float) -> None:
    """A real engine's time limit: a finite number of seconds, at least one."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not math.isfinite(timeout) or timeout < 1:
        raise UsageError(f"timeout must be a finite number of seconds, at least 1, got {timeout}", param="timeout")


def _llamacpp_plan(opened: Model, n_ctx: int, from_spec: Callable[[ModelSpec, int], Any]) -> Any:
    """A GGUF file's own metadata (llamacpp_probe.file_plan: llama.cpp reads the file's keys, not
    kvcalc's reading of them), or the GGUF of any other model's geometry (gguf_plan)."""
    source = opened.source
    if source is not None and source.kind == "file" and not source.label.lower().endswith(".json"):
        from .gguf import is_gguf, read_header
        from .llamacpp_probe import file_plan

        path = Path(source.label)
        if path.is_file() and is_gguf(path):
            return file_plan(read_header(path), source.label)
    if source is not None and source.kind == "hub":
        from .gguf_hub import parse_hub_gguf

        hub_gguf = parse_hub_gguf(source.label)
        if hub_gguf is not None:  # a Hub GGUF: its header, as resolving MODEL read it (cached)
            from .gguf_hub import shard_headers
            from .llamacpp_probe import file_plan

            first = shard_headers(hub_gguf, revision=source.revision, on_fetch=None)[0]
            return file_plan(first.header, source.label)
    return from_spec(opened.spec, n_ctx)


def probe_vllm(
    model: str | ModelSpec | Model,
    *,
    max_model_len: int = 4096,
    kv_budget: int | None = None,
    block_size: int | None = None,
    max_batched_tokens: int | None = None,
    python: str | None = None,
    timeout: float = 300,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
) -> Any:
    """Start the real vLLM (its own Python: ``python``, $KVCALC_VLLM_PYTHON, or this one) on a
    random-weight model of the model's geometry with ``max_model_len``, ``block_size``,
    ``max_batched_tokens`` (None: vLLM's defaults) and ``kv_budget`` bytes of KV cache (None: 64 MiB), and set the
    KV cache config it built and the capacity it logged beside ``fit`` under the same release and
    platform (kvcalc.vllm_compare.VllmProbe; ``.match`` when every figure agrees)."""
    import re

    from .vllm_compare import VllmProbe, compare, run_probe, vllm_python

    opened = open_model(model, revision=revision, on_fetch=on_fetch, strict=strict)
    config = opened.source.config if opened.source is not None else None
    if not isinstance(config, dict):
        raise UsageError("the vLLM probe needs a model's JSON config (a preset, file or repo id)")
    if kv_budget is None:
        kv_budget = 64 * 2**20  # room for a few requests of a small model; the figures scale with it
    _check_timeout(timeout)
    for param, value in (("max_model_len", max_model_len), ("kv_budget", kv_budget)):
        if isinstance(value, bool) or value <= 0:
            raise UsageError(f"{param} must be positive, got {value}", param=param)
    # Checked here first: a setting kvcalc refuses fails in a second, not after vLLM's start.
    serving(opened.spec, engine="vllm", block_size=block_size, max_batched_tokens=max_batched_tokens)
    request = {
        "config": config, "max_model_len": max_model_len, "kv_cache_memory_bytes": kv_budget,
        "block_size": block_size, "max_num_batched_tokens": max_batched_tokens, "dtype": "auto", "seed": 0,
    }  # fmt: skip
    result = run_probe(vllm_python(python), request, timeout)
    platform = "vllm-cpu" if result.get("device") == "cpu" else "vllm"
    # "0.32.0", "0.33.0+cu129", "0.19.1rc1.dev301+g60995c05b": the release's major.minor.patch.
    release = re.match(r"(\d+\.\d+)(\.\d+)?", str(result.get("vllm_version", "")))
    engine = f"{platform}@{release.group(0) if release else result.get('vllm_version')}"
    report = fit(
        opened, kv_budget=kv_budget, tokens=max_model_len, max_model_len=max_model_len, engine=engine,
        block_size=block_size, max_batched_tokens=max_batched_tokens,
    )  # fmt: skip
    checks = compare(result, report.result)
    return VllmProbe(opened.name, engine, request, result, checks, report.notes)


# --- presets ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PresetSummary:
    """A bundled preset, its model, and the bytes one token adds at bf16 (every layer, no window)."""

    preset: Preset
    spec: ModelSpec
    bf16_bytes_per_token: int


def list_presets() -> list[PresetSummary]:
    """Every bundled preset, in file order."""
    from .dtypes import BF16
    from .presets import load_presets

    found = []
    for preset in load_presets().values():
        spec = read_config(preset.config, name=preset.name)
        per_token = estimate_spec(spec, Workload(tokens=1, kv_dtype=BF16)).per_token_bytes
        found.append(PresetSummary(preset, spec, per_token))
    return found


def show_preset(name: str) -> PresetSummary:
    """One preset by name or alias (case-insensitive)."""
    from .presets import get_preset

    preset = get_preset(name)
    return next(s for s in list_presets() if s.preset.name == preset.name)


# --- llama.cpp offload --------------------------------------------------------------------------------


@dataclass(frozen=True)
class OffloadReport:
    """llama.cpp's split of one model over GPUs and the CPU at one context: what each device
    holds, whether every GPU has room, and (``gpu_layers="auto"``) the most layers that fit."""

    model: Model
    devices: tuple[Any, ...]  # offload.Device, GPUs first, then the CPU
    gpu_layers: int
    n_layer: int
    gpu_bytes: int | None
    gpu_label: str | None
    auto: bool
    workload: Workload
    notes: tuple[str, ...] = ()

    @property
    def fits(self) -> bool | None:
        """Whether every GPU holds its share (None: no GPU memory given)."""
        if self.gpu_bytes is None:
            return None
        return all(d.total <= self.gpu_bytes for d in self.devices if d.name != "CPU")


def fit_offload(
    model: str | ModelSpec | Model,
    *,
    gpu_layers: int | str,
    gpu: str | None = None,
    gpu_memory: int | None = None,
    gpus: int = 1,
    tensor_split: Sequence[float] = (),
    kv_offload: bool = True,
    tokens: int | None = None,
    batch: int = 1,
    kv_dtype: DTypeLike = None,
    k_dtype: DTypeLike = None,
    v_dtype: DTypeLike = None,
    ubatch: int | None = None,
    n_batch: int | None = None,
    kv_unified: bool = False,
    swa_full: bool | None = None,
    engine: str | Engine = "llama.cpp",
    weights: int | None = None,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
) -> OffloadReport:
    """llama.cpp with ``gpu_layers`` (``-ngl``: a count, llama.cpp counting the output layer as
    one more, or ``"auto"``: the most that fit every GPU) at a context of ``tokens`` x ``batch``
    cells: weights, KV cache and compute buffer per GPU and on the CPU (kvcalc.offload)."""
    from .dims import read_dims
    from .gpus import find_gpu
    from .offload import largest_fitting, place

    opened = open_model(model, revision=revision, on_fetch=on_fetch, strict=strict)
    spec = opened.spec
    chosen = serving(spec, engine=engine, kv_dtype=kv_dtype, k_dtype=k_dtype, v_dtype=v_dtype, ubatch=ubatch,
                     n_batch=n_batch, kv_unified=kv_unified, swa_full=swa_full)  # fmt: skip
    if not chosen.engine.splits_layers:
        raise UsageError("gpu_layers applies to llama.cpp: use engine llama.cpp or llama-server", param="gpu_layers")
    if gpus < 1:
        raise UsageError(f"gpus must be a positive whole number, got {gpus}", param="gpus")
    if tensor_split and (len(tensor_split) != gpus or any(s < 0 for s in tensor_split) or not sum(tensor_split)):
        raise UsageError(
            f"tensor_split needs {gpus} non-negative share(s), one per GPU, not all zero", param="tensor_split"
        )
    auto = gpu_layers == "auto"
    if not auto and (not isinstance(gpu_layers, int) or isinstance(gpu_layers, bool) or gpu_layers < 0):
        raise UsageError(f"gpu_layers must be a count of layers or 'auto', got {gpu_layers!r}", param="gpu_layers")
    notes = list(chosen.notes)
    gpu_bytes, gpu_label = None, None
    if gpu is not None and gpu_memory is not None:
        raise UsageError("give gpu or gpu_memory, not both", param=("gpu", "gpu_memory"))
    if gpu is not None:
        found = find_gpu(gpu)
        gpu_bytes, gpu_label = found.runtime_bytes, f"{found.name}, {found.runtime_bytes:,} bytes"
    elif gpu_memory is not None:
        gpu_bytes, gpu_label = gpu_memory, f"{gpu_memory:,} bytes per GPU"
    if auto and gpu_bytes is None:
        raise UsageError("gpu_layers 'auto' needs the GPU's memory: give gpu or gpu_memory", param="gpu_layers")
    if tokens is None:
        tokens = 4096
        notes.append("tokens not given: a context of 4,096 tokens per sequence assumed")
    workload = Workload(tokens=tokens, batch=batch, kv_dtype=chosen.k_dtype, v_dtype=chosen.v_dtype)
    est = estimate_spec(spec, workload, engine=chosen.engine)
    per_layer_kv = _kv_per_layer(est)
    layer_weights, weight_notes = _layer_weights(opened, weights, revision, on_fetch, chosen.engine)
    notes += weight_notes
    if layer_weights.nextn and len(per_layer_kv) + layer_weights.nextn == len(layer_weights.layers):
        per_layer_kv += [0] * layer_weights.nextn  # NextN blocks: slots for -ngl, nothing loaded or cached
    if len(layer_weights.layers) != len(per_layer_kv):
        raise UsageError(f"{spec.name}: {len(per_layer_kv)} cache entries for {len(layer_weights.layers)} layers: "
                         "the offload split needs one per layer")  # fmt: skip
    dims = read_dims(opened.source.config) if opened.source is not None else None
    compute = 0
    quantized = any(d is not None and d.bits < 16 for d in (chosen.k_dtype, chosen.v_dtype))
    buffer = chosen.engine.compute_buffer(dims, n_ctx=tokens * batch, n_seq=batch, quantized_kv=quantized)
    if buffer is not None:
        compute, how = buffer
        notes.append(f"compute buffer {compute:,} B on each backend that holds layers ({how}; an upper bound "
                     "when layers are split)")  # fmt: skip
    else:
        notes.append("compute buffer not sized: the model does not give its hidden size, heads and vocabulary")
    context = chosen.engine.device_context_bytes
    notes.append(f"each GPU also needs the CUDA context, cuBLAS workspace and memory pool: {context:,} B assumed "
                 "(0.25-1 GiB), not counted above")  # fmt: skip
    if not kv_offload:
        notes.append("--no-kv-offload: every layer's KV cache stays in CPU memory")

    def plan(n: int) -> tuple[Any, ...]:
        return place(layer_weights, per_layer_kv, n_gpu_layers=n, gpus=gpus, tensor_split=tensor_split,
                     kv_offload=kv_offload, compute=compute)  # fmt: skip

    n_layer = len(layer_weights.layers)
    if auto:
        assert gpu_bytes is not None
        room = gpu_bytes - context
        chosen_layers = largest_fitting(
            lambda n: all(d.total <= room for d in plan(n) if d.name != "CPU"), n_layer
        )  # fmt: skip
        notes.append(
            f"gpu_layers auto: the most of the {n_layer + 1} slots (layers and the output layer) whose share fits "
            f"each GPU's {gpu_bytes:,} B less the assumed {context:,} B context"
        )
    else:
        assert isinstance(gpu_layers, int)
        chosen_layers = min(gpu_layers, n_layer + 1)
        if gpu_layers > n_layer + 1:
            notes.append(f"-ngl {gpu_layers} offloads everything: {n_layer} layers and the output layer")
    devices = plan(chosen_layers)
    return OffloadReport(
        opened, devices, chosen_layers, n_layer, gpu_bytes - context if gpu_bytes is not None else None, gpu_label,
        auto, workload, _merge(spec.notes, notes, est.notes),
    )  # fmt: skip


def _kv_per_layer(est: Estimate) -> list[int]:
    """Each layer's KV bytes in the estimate (every entry of the spec, in order)."""
    by_cache = {g.cache: g.bytes // g.layers for g in est.groups}
    return [by_cache[c] for c in est.model.caches]


def _gguf_headers(model: Model, on_fetch: OnFetch) -> list[Any] | None:
    """The headers of every shard of a GGUF model (local, or a Hub file read in byte ranges and
    cached), the first one first; None when the model is no GGUF."""
    source = model.source
    if source is not None and source.kind == "file" and _is_gguf(source):  # by suffix or magic, as MODEL was read
        from .gguf import read_header, split_shards

        return [read_header(shard) for shard in split_shards(Path(source.label))]
    if source is not None and source.kind == "hub":
        from .gguf_hub import parse_hub_gguf

        hub_gguf = parse_hub_gguf(source.label)
        if hub_gguf is not None:
            from .gguf_hub import shard_headers

            return [f.header for f in shard_headers(hub_gguf, revision=source.revision, on_fetch=on_fetch)]
    return None


def _layer_weights(
    model: Model, weights: int | None, revision: str | None, on_fetch: OnFetch, engine: Engine
) -> tuple[Any, list[str]]:
    """Weights by llama.cpp layer: exact from a GGUF's tensor infos; otherwise the checkpoint's
    total split as embeddings, output head and equal layers (said in a note)."""
    from fractions import Fraction

    from .dims import read_dims
    from .offload import LayerWeights

    source = model.source
    headers = _gguf_headers(model, on_fetch)
    if headers is not None and source is not None:
        from .gguf import headers_layer_weights

        return headers_layer_weights(headers, source.label), []
    notes: list[str] = []
    if weights is None:
        total, label, notes = _weights(model, engine, revision, on_fetch)
    else:
        total, label = weights, f"--weights {weights:,} bytes"
    dims = read_dims(source.config) if source is not None else None
    layers = model.spec.layers
    if dims is None:
        raise UsageError("the offload split needs the model's hidden size and vocabulary", param="gpu_layers")
    raw = source.config if source is not None and isinstance(source.config, dict) else {}
    params = source.preset.parameters if source is not None and source.preset is not None else None
    per_param = Fraction(total, params) if params else Fraction(2)
    embedding = int(dims.vocab * dims.hidden * per_param)
    tied = bool(raw.get("tie_word_embeddings", False))
    body = total - embedding - (0 if tied else embedding)
    if body <= 0:
        raise UsageError(f"{model.name}: weights of {total:,} B are smaller than its embeddings", param="weights")
    share, rest = divmod(body, layers)
    per_layer = tuple(share + (1 if i < rest else 0) for i in range(layers))
    notes.append(
        f"weights by layer from the checkpoint ({label}): embeddings {embedding:,} B on the CPU, the output head "
        f"{embedding:,} B{' (a copy of the tied embeddings)' if tied else ''}, the rest in {layers} equal layers; "
        "a GGUF file gives them exactly"
    )
    return LayerWeights(embedding, per_layer, embedding, exact=False), notes


# --- speed: prefill and decode bounds in time --------------------------------------------------------------

COMPUTE_DTYPES = ("bf16", "fp16", "fp8", "fp4", "int8")
DEFAULT_SWEEP = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class SpeedReport:
    """``kvcalc speed``: the model, the workload's KV dtype and engine, and kvcalc.roofline's answer."""

    model: Model
    result: Any  # kvcalc.roofline.Speed
    engine: str
    kv_dtype: DType
    weights_label: str
    notes: tuple[str, ...] = ()


def speed(
    model: str | ModelSpec | Model,
    *,
    prompt: int,
    output: int,
    batch: int = 1,
    gpu: str | None = None,
    tp: int = 1,
    bandwidth: int | None = None,
    flops: int | None = None,
    compute_dtype: str | None = None,
    bandwidth_efficiency: float | None = None,
    flops_efficiency: float | None = None,
    engine: str | Engine = "theoretical",
    kv_dtype: DTypeLike = None,
    weights: int | None = None,
    sweep: Sequence[int] | None = None,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
) -> SpeedReport:
    """Lower bounds on time to first token and time per output token for ``batch`` sequences of a
    ``prompt``-token prompt and ``output`` generated tokens, on a ``gpu`` preset (or ``bandwidth``
    bytes/s and ``flops`` FLOP/s per GPU) with ``tp``-way tensor parallelism (kvcalc.roofline).
    ``bandwidth_efficiency`` / ``flops_efficiency`` in (0, 1] scale the peaks to turn the bounds into
    estimates. ``sweep``: the batch sizes of the throughput table (None: powers of two to 256)."""
    from fractions import Fraction
    from functools import lru_cache

    from . import roofline as core
    from .configs import text_config
    from .dims import read_dims
    from .gpus import find_gpu
    from .spec import IndexerCache, Kind

    for param, value in (("prompt", prompt), ("output", output), ("batch", batch), ("tp", tp)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"{param} must be a positive whole number, got {value!r}", param=param)
    if weights is not None and (isinstance(weights, bool) or weights <= 0):
        raise UsageError(f"weights must be a positive size in bytes, got {weights}", param="weights")
    if compute_dtype is not None and compute_dtype not in COMPUTE_DTYPES:
        raise UsageError(f"compute dtype must be one of {', '.join(COMPUTE_DTYPES)}, got {compute_dtype!r}",
                         param="compute_dtype")  # fmt: skip
    efficiency: dict[str, Fraction] = {}
    for param, given in (("bandwidth_efficiency", bandwidth_efficiency), ("flops_efficiency", flops_efficiency)):
        if given is not None and (isinstance(given, bool) or not isinstance(given, int | float | Fraction)
                                  or (isinstance(given, float) and not math.isfinite(given))):  # fmt: skip
            raise UsageError(f"{param} must be in (0, 1], got {given}", param=param)
        factor = Fraction(1) if given is None else Fraction(str(given)) if isinstance(given, float) else Fraction(given)
        if not 0 < factor <= 1:
            raise UsageError(f"{param} must be in (0, 1], got {given}", param=param)
        efficiency[param] = factor
    notes: list[str] = []
    peaks = None
    label = "given peaks"
    if gpu is not None:
        found = find_gpu(gpu)
        peaks, label = found.peaks, found.name
        if peaks is None:
            raise UsageError(f"GPU {found.name} has no bandwidth and FLOPs on record: give bandwidth and flops",
                             param="gpu")  # fmt: skip
    if bandwidth is None:
        if peaks is None:
            raise UsageError("give a gpu preset, or bandwidth (bytes/s) and flops (FLOP/s)", param="gpu")
        bandwidth = peaks.bandwidth
        notes.append(f"{label}: {peaks.source}")
    else:
        label += f", bandwidth {bandwidth:,} B/s given"
    if flops is None and peaks is None:
        raise UsageError("give a gpu preset, or bandwidth (bytes/s) and flops (FLOP/s)", param="gpu")
    if flops is not None:
        label += f", {flops:,} FLOP/s given"
    for param, rate in (("bandwidth", bandwidth), ("flops", flops)):
        if rate is not None and (isinstance(rate, bool) or rate <= 0):
            raise UsageError(f"{param} must be positive, got {rate}", param=param)

    opened = open_model(model, revision=revision, on_fetch=on_fetch, strict=strict)
    spec = opened.spec
    source = opened.source
    raw = source.config if source is not None and isinstance(source.config, dict) else None
    dims = read_dims(raw) if raw is not None else None
    if raw is None or dims is None:
        raise UsageError(f"{spec.name}: speed needs the model's hidden size, layers and vocabulary from its config",
                         param="model")  # fmt: skip
    text, _ = text_config(raw)
    query_heads = spec.query_heads or dims.heads
    attends = any(c.kind not in (Kind.MAMBA, Kind.LINEAR, Kind.CONV, Kind.NONE) for c in spec.caches)
    if attends and not query_heads:
        raise UsageError(f"{spec.name}: the config gives no attention head count", param="model")
    chosen = serving(spec, engine=engine, kv_dtype=kv_dtype)
    headers = _gguf_headers(opened, on_fetch)  # a GGUF's weights are read as the file stores them
    if weights is None and headers is not None:  # the headers in hand: no second read
        from .gguf import loaded_tensor_bytes

        total, weights_label = loaded_tensor_bytes(headers, spec.name), "GGUF tensor infos"
        if total <= 0:
            raise SourceError(f"{spec.name} holds no tensors: give --weights SIZE")
    elif weights is None:
        total, weights_label, weight_notes = _weights(opened, chosen.engine, revision, on_fetch)
        notes += weight_notes
    else:
        total, weights_label = weights, f"given {weights:,} bytes"
    preset = source.preset if source is not None else None
    parameters = preset.parameters if preset is not None else None  # the model's, whatever checkpoint is given
    stored = None
    if headers is not None:
        from .gguf import loaded_parameters, stored_split

        # Every element, whatever its quantization; a file with no tensors (given --weights) has
        # none to count, and the weights' bytes stand for them.
        parameters = loaded_parameters(headers, spec.name) or None
        if weights is None:
            stored = stored_split(headers, spec.name)
    if parameters is not None and preset is not None and preset.weights is not None and preset.weights.unloaded_bytes:
        # Tensors the engine does not load (an MTP module) hold parameters no step runs: take off
        # their share at the checkpoint's mean bytes per parameter.
        w = preset.weights
        parameters -= w.unloaded_bytes * w.parameters // w.bytes
    held = spec.dtype if headers is not None else chosen.engine.weights_dtype(spec.dtype, spec.model_type)
    dtype_bytes = Fraction(held.bits, 8) if held is not None and held.bits >= 8 else Fraction(2)
    tied = text.get("tie_word_embeddings", raw.get("tie_word_embeddings"))
    if tied is None:
        notes.append("the config does not say whether the head is tied to the embeddings: taken as untied (the "
                     "input embedding is read by rows only; a lower bound either way)")  # fmt: skip
    split = core.split_weights(dims, text, total_bytes=total, parameters=parameters, bytes_per_param=dtype_bytes,
                               tied=bool(tied), stored=stored)  # fmt: skip
    if compute_dtype is None:
        fmt = preset.weights.format if preset is not None and preset.weights is not None and weights is None else ""
        compute_dtype, why = _compute_dtype(fmt, headers is not None and spec.dtype is None, split, peaks)
        notes.append(f"compute dtype {compute_dtype}: {why} (--compute-dtype to choose)")
    if flops is None:
        assert peaks is not None
        peak = peaks.flops(compute_dtype)
        if peak is None:
            raise UsageError(f"{label} has no dense {compute_dtype} tensor peak: give flops or another compute dtype",
                             param="flops")  # fmt: skip
        flops = peak
    hw = core.Hardware(label, bandwidth, flops, compute_dtype, efficiency["bandwidth_efficiency"],
                       efficiency["flops_efficiency"])  # fmt: skip
    if not hw.is_bound:
        notes.append(
            f"efficiency factors applied (bandwidth x{float(hw.bandwidth_efficiency):g}, FLOPs "
            f"x{float(hw.flops_efficiency):g}): these are estimates, not bounds"
        )
    if stored is None and split.experts:
        notes.append("the experts' bytes are taken at the checkpoint's mean bytes per parameter (a GGUF gives them "
                     "exactly); where experts are stored smaller than the rest, the dense bytes err low")  # fmt: skip
    notes += split.notes
    if split.experts:
        notes.append(
            f"MoE: {split.top_k} of {split.experts} experts per token; a step reads the experts its tokens are "
            "routed to, taken as uniform, independent routing (more skewed routing reads fewer)"
        )
    index_topk = text.get("index_topk")
    sparse = any(isinstance(c, IndexerCache) for c in spec.caches)
    shape = core.AttentionShape(query_heads, int(text.get("index_n_heads", 0) or 0),
                                index_topk if isinstance(index_topk, int) and sparse else None)  # fmt: skip
    if sparse and shape.index_topk is None:
        raise UsageError(f"{spec.name}: sparse attention without index_topk in the config: its reads are not known",
                         param="model")  # fmt: skip
    if sparse:
        notes.append(f"sparse attention: each query reads the latent of at most index_topk {shape.index_topk:,} "
                     "tokens, and the indexer's keys of all of them")  # fmt: skip

    @lru_cache(maxsize=4096)
    def kv(context: int, seqs: int) -> int:
        est = estimate_spec(spec, Workload(tokens=context, batch=seqs, kv_dtype=chosen.k_dtype,
                                           v_dtype=chosen.v_dtype, tp=tp), engine=chosen.engine)  # fmt: skip
        read = 0
        for g in est.groups:
            share = g.bytes // tp
            if sparse and g.kind is Kind.MLA and shape.index_topk is not None and g.tokens_kept > shape.index_topk:
                share = share * shape.index_topk // g.tokens_kept
            read += share
        return read

    limit = max(spec.max_context or 0, prompt + output)
    notes += _past_limit(spec, prompt + output)
    gpu_memory = find_gpu(gpu).runtime_bytes if gpu is not None else None
    if gpu_memory is not None:
        notes.append(f"'fit' in the sweep: weights / TP + the cache at prompt + output within the GPU's "
                     f"{gpu_memory:,} bytes, before activations and the engine's reserve (kvcalc fit derives "
                     "those)")  # fmt: skip
    notes.append("not counted: activations, kernel launch gaps, sampling, and TP communication (all-reduce): "
                 "real steps only take longer")  # fmt: skip
    if tp > 1:
        notes.append(f"weights and FLOPs split evenly over the {tp} GPUs; KV per GPU as the engine shards it")
    result = core.speed(
        hw, spec, split, shape, kv, prompt=prompt, output=output, batch=batch, tp=tp,
        sweep=tuple(sorted(set(DEFAULT_SWEEP if sweep is None else sweep) | {batch})),
        memory_per_gpu=gpu_memory, context_limit=limit, notes=(),
    )  # fmt: skip
    asked = next(r for r in result.sweep if r.batch == batch)
    if asked.fits is False:
        notes.insert(0, f"the weights / TP and the cache of batch {batch} do not fit the GPU's {gpu_memory:,} bytes: "
                        "these bounds assume they did (more --tp, a smaller batch or a shorter context)")  # fmt: skip
    if result.decode.sampled < result.decode.steps:
        notes.append(f"the mean TPOT is over {result.decode.sampled} evenly spaced of the {result.decode.steps:,} "
                     "decode steps")  # fmt: skip
    first = estimate_spec(spec, Workload(tokens=prompt, batch=batch, kv_dtype=chosen.k_dtype, v_dtype=chosen.v_dtype,
                                         tp=tp), engine=chosen.engine)  # fmt: skip
    return SpeedReport(opened, result, chosen.engine.name, first.kv_dtype, weights_label,
                       _merge(spec.notes, chosen.notes, first.notes, notes))  # fmt: skip


def _compute_dtype(fmt: str, quantized_gguf: bool, split: Any, peaks: Any) -> tuple[str, str]:
    """The tensor peak that bounds a checkpoint's matmuls: the fastest path an engine may take for
    its weights (a bound must not be too slow). FP8 checkpoints run W8A8 on GPUs with FP8 tensor
    cores; FP4 ones (MXFP4, NVFP4) FP4 where there are FP4 tensor cores, else FP8; llama.cpp's
    quantized GGUF matmuls run on int8 tensor cores (its MMQ kernels); the rest bf16."""
    from fractions import Fraction

    fmt = fmt.lower()
    per_param: Fraction = split.bytes_per_param

    def has(dtype: str) -> bool:  # given flops (no preset): the name is only a label
        return peaks is None or peaks.flops(dtype) is not None

    if "fp4" in fmt and has("fp4"):
        return "fp4", f"the checkpoint stores {fmt}"
    if ("fp8" in fmt or "fp4" in fmt) and has("fp8"):
        return "fp8", f"the checkpoint stores {fmt}"
    if quantized_gguf:
        return "int8", "llama.cpp runs quantized GGUF matmuls on int8 tensor cores"
    if not fmt and per_param < Fraction(3, 2) and has("fp8"):
        return "fp8", f"{float(per_param):.2f} bytes a parameter: an 8-bit (or smaller) checkpoint"
    return "bf16", "a 16-bit checkpoint"
