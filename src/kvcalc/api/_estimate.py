"""estimate and compare (a request mix: _requests)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from kvcalc import checks
from kvcalc.calc.estimate import Estimate, Plan, Workload, compile_plan
from kvcalc.checks import MAX_COUNT, MAX_PARALLEL
from kvcalc.defaults import DEFAULT_TOKENS
from kvcalc.dtypes import DEFAULT_QUANT_GROUP
from kvcalc.errors import UsageError
from kvcalc.spec import ModelSpec

if TYPE_CHECKING:  # the heavier modules load only when asked for (fractions alone costs ~3 ms)
    from kvcalc.calc.compare import Comparison
    from kvcalc.engines import Engine

from kvcalc.api._models import DTypeLike, Model, ModelArg, OnFetch, open_model
from kvcalc.api._sequences import Sequences, as_sequences
from kvcalc.api._serving import (
    KnobValue,
    Layout,
    Serving,
    _dtype,
    _images,
    _past_limit,
    _tokens,
    as_layout,
    as_serving,
    check_options,
    refuse_idle_knobs,
    resolve_serving,
)


def estimate(
    model: ModelArg,
    *,
    tokens: int | None = None,
    prompt: int | None = None,
    output: int | None = None,
    batch: int = 1,
    kv_dtype: DTypeLike = None,
    engine: str | Engine | None = None,
    options: Mapping[str, KnobValue] | None = None,
    serving: Serving | None = None,
    tp: int = 1,
    layout: Layout | None = None,
    sequences: Sequences | None = None,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
) -> Estimate:
    """The KV cache of ``model`` holding ``batch`` sequences of ``tokens`` tokens (or ``prompt`` +
    ``output``) under ``engine``'s storage rules, across ``tp`` GPUs (or a ``layout`` of tp x pp x
    dp). ``sequences`` gives the rest of the workload (a shared prefix, an encoder-decoder's
    encoder tokens, Llama 3.2 Vision's images of image_tokens each; none: a text-only prompt) in
    place of tokens, prompt, output and batch; ``serving`` the engine with its options and the K
    and V formats in place of engine, kv_dtype and options. The estimate's ``notes`` hold every
    default applied, the model's first.

    >>> est = estimate("llama-3.1-8b", tokens=2048)
    >>> est.total_bytes
    268435456
    """
    shared_prefix, encoder_tokens, images, image_tokens, pp, dp = 0, None, None, None, 1, 1
    if sequences is not None:
        given = as_sequences(sequences, tokens=tokens, prompt=prompt, output=output, batch=batch)
        tokens, prompt, output, batch = given.tokens, given.prompt, given.output, given.batch
        shared_prefix, encoder_tokens, images, image_tokens = (
            given.shared_prefix, given.encoder_tokens, given.images, given.image_tokens,
        )  # fmt: skip
    # Checked before the compiled calls are looked up (True == 1 as a key, but is no batch); the
    # common call (plain ints in range, no layout, no images) in one expression: ~0.3 us.
    if not (layout is None and images is None and image_tokens is None and type(strict) is bool
            and type(batch) is int and type(shared_prefix) is int and type(tp) is int and type(pp) is int
            and type(dp) is int and 0 < batch <= MAX_COUNT and 0 <= shared_prefix <= MAX_COUNT
            and 0 < tp <= MAX_PARALLEL and 0 < pp <= MAX_PARALLEL and 0 < dp <= MAX_PARALLEL):  # fmt: skip
        batch = checks.count(batch, "batch")
        shared_prefix = checks.count(shared_prefix, "shared_prefix", minimum=0)
        images = checks.optional_count(images, "images", minimum=0)
        image_tokens = checks.optional_count(image_tokens, "image_tokens")
        tp, pp, dp = _layout(layout, tp, pp, dp)
        checks.flag(strict, "strict")
    if serving is not None or options is not None:
        checks.instance(serving, "serving", Serving, "a kvcalc.Serving or None")
        checks.instance(options, "options", Mapping, "a mapping of knob names to values, or None")
    spec = model.spec if isinstance(model, Model) else model if isinstance(model, ModelSpec) else None
    key = None
    if spec is not None and not (strict and spec.warnings):
        key = (id(spec), batch, kv_dtype, engine, None if options is None else
               tuple(options.items()), _serving_key(serving), tp, pp, dp, shared_prefix, images,
               image_tokens, revision)  # fmt: skip
        try:
            compiled = _CALLS.get(key)
        except TypeError:  # an argument that cannot be a key (a list for a count): the full path says why
            key = compiled = None
        if compiled is not None and compiled.spec is spec:
            return compiled.at(tokens, prompt, output, encoder_tokens)
    opened = open_model(model, revision=revision, on_fetch=on_fetch, strict=strict)
    spec = opened.spec
    t, enc, _ = _tokens(spec, tokens, prompt, output, encoder_tokens)  # checked here, noted by the call
    pictures = _images(spec, images, image_tokens)
    asked = as_serving(serving, engine=engine, kv_dtype=kv_dtype, options=options)
    chosen = resolve_serving(spec, asked)
    refuse_idle_knobs(spec, chosen.engine, asked.options)
    workload = Workload(
        tokens=t, batch=batch, kv_dtype=chosen.k_dtype, v_dtype=chosen.v_dtype, encoder_tokens=enc,
        shared_prefix=shared_prefix, residual_tokens=chosen.residual_tokens, tp=tp, pp=pp, dp=dp, **pictures,
    )  # fmt: skip
    # Compiled without the encoder length, which may change with each call's prompt.
    plan = compile_plan(spec, replace(workload, encoder_tokens=None), chosen.engine)
    call = _Compiled(spec, plan, batch, shared_prefix, spec.notes, chosen.notes)
    if key is not None:
        if len(_CALLS) >= _MAX_CALLS:
            _CALLS.clear()
        _CALLS[key] = call
    return call.at(tokens, prompt, output, encoder_tokens)


# Calls compiled once, by the opened model's identity and every argument but the lengths: a
# dashboard sizing each request re-resolves nothing. A frozen ModelSpec never changes, and each
# entry holds its spec, so an id is never confused with a later object's.
_CALLS: dict[tuple[object, ...], _Compiled] = {}
_MAX_CALLS = 256


def _serving_key(serving: Serving | None) -> tuple[object, ...] | None:
    if serving is None:
        return None
    return (serving.engine, serving.kv_dtype, serving.k_dtype, serving.v_dtype, serving.quant_group,
            serving.residual_tokens, tuple(check_options(serving.options).items()))  # fmt: skip


class _Compiled:
    """One estimate call with its serving, layout and workload resolved and compiled: what is
    left to do per call is the lengths (their checks and notes) and the plan's arithmetic. (A
    plain class: a dataclass costs its methods' compilation at every start-up.)"""

    __slots__ = ("batch", "encoder_decoder", "lead", "model_notes", "plan", "serving_notes", "shared_prefix", "spec")

    def __init__(
        self,
        spec: ModelSpec,
        plan: Plan,
        batch: int,
        shared_prefix: int,
        model_notes: tuple[str, ...],
        serving_notes: tuple[str, ...],
    ) -> None:
        self.spec = spec
        self.plan = plan
        self.batch = batch
        self.shared_prefix = shared_prefix
        self.model_notes = model_notes
        self.serving_notes = serving_notes
        self.lead = (*model_notes, *serving_notes)
        self.encoder_decoder = spec.is_encoder_decoder

    def at(self, tokens: int | None, prompt: int | None, output: int | None, encoder: int | None) -> Estimate:
        spec = self.spec
        t, enc, token_notes = _tokens(spec, tokens, prompt, output, encoder)
        limit_notes = () if self.encoder_decoder else _past_limit(spec, t)
        lead = (*self.model_notes, *token_notes, *self.serving_notes) if token_notes else self.lead
        return self.plan.at(t, self.batch, self.shared_prefix, enc, lead=lead, tail=limit_notes)


# --- compare ------------------------------------------------------------------------------------------


def compare(
    models: Sequence[ModelArg],
    *,
    tokens: Sequence[int] | None = None,
    kv_dtypes: Sequence[DTypeLike] | None = None,
    batch: int = 1,
    kv_heads: Sequence[int] = (),
    latent_dim: int | None = None,
    rope_dim: int | None = None,
    baseline: str | None = None,
    engine: str | Engine | None = None,
    serving: Serving | None = None,
    mark_own: bool = True,
    revision: str | None = None,
    on_fetch: OnFetch = None,
    strict: bool = False,
) -> Comparison:
    """One model: its MHA / GQA (``kv_heads``) / MQA / MLA (``latent_dim``, ``rope_dim``) variants
    side by side. Several: the models side by side, smallest cache first. Every row is estimated
    at each of ``tokens`` and ``kv_dtypes`` (None or "auto": each model's own) under ``engine``
    (None: the default engine's storage rules). ``serving``: the engine with its options (and
    one kv_dtype) in place of engine and kv_dtypes.

    >>> compare(["llama-3.1-8b"], tokens=[1000], serving=Serving("vllm", options={"block_size": 32}))  # doctest: +SKIP
    """
    from kvcalc.calc.compare import attention_variants, candidate_for
    from kvcalc.calc.compare import compare as run_compare
    from kvcalc.engines import DEFAULT_ENGINE, make_engine, uses_dsa
    from kvcalc.engines import Engine as EngineBase

    engine, kv_dtypes, options = _compare_serving(serving, engine, kv_dtypes)
    if engine is None:
        engine = DEFAULT_ENGINE

    if isinstance(models, str | bytes) or not isinstance(models, Sequence):
        raise UsageError(f"models must be a list of models (one: its variants; several: side by side), got "
                         f"{checks.shown(models)}", param="models")  # fmt: skip
    if not models:
        raise UsageError("give one model (its variants) or several (side by side)", param="models")
    batch = checks.count(batch, "batch")
    if tokens is not None:
        tokens = checks.counts(tokens, "tokens", allow_empty=True)
    if kv_dtypes is not None and (isinstance(kv_dtypes, str | bytes) or not isinstance(kv_dtypes, Sequence)):
        raise UsageError(f"kv_dtypes must be a list of formats, got {checks.shown(kv_dtypes)}", param="kv_dtypes")
    kv_heads = checks.counts(kv_heads, "kv_heads", allow_empty=True)
    checks.text(baseline, "baseline")
    checks.flag(mark_own, "mark_own")
    if not isinstance(engine, str):
        checks.instance(engine, "engine", EngineBase, "an engine's name (a str) or an Engine")
    opened = [open_model(m, revision=revision, on_fetch=on_fetch, strict=strict) for m in models]
    names = [m.name for m in opened]
    repeated = next((n for n in names if names.count(n) > 1), None)
    if repeated is not None:
        raise UsageError(f"{repeated} is given more than once: each model is compared once", param="models")
    notes: list[str] = []
    if tokens is None:
        tokens = [DEFAULT_TOKENS]
        notes.append(f"tokens not given: {DEFAULT_TOKENS:,} tokens per sequence assumed")
    if not tokens:
        raise UsageError("tokens needs at least one length", param="tokens")
    twice = _first_repeat(tokens)
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
        if options:
            raise UsageError("options configure an engine given by name; this engine is built already",
                             param="options")  # fmt: skip
        chosen: Engine | Callable[[ModelSpec], Engine] = engine
    else:
        # Each candidate served as estimate would serve it: the engine configured for its own
        # layers (an MLA variant must not move the model's own row to MLA's blocks).
        configured: dict[tuple[bool, bool], Engine] = {}
        for c in candidates:
            key = (any(x.is_latent for x in c.spec.caches), uses_dsa(c.spec.caches))
            if key not in configured:
                configured[key], engine_notes = make_engine(
                    engine, uses_mla=key[0], uses_dsa=key[1], platform=None, **options
                )
                notes += [n for n in engine_notes if n not in notes]

        def chosen(spec: ModelSpec) -> Engine:
            return configured[(any(x.is_latent for x in spec.caches), uses_dsa(spec.caches))]

        if options:
            _refuse_idle_everywhere([(c.spec, chosen(c.spec)) for c in candidates], options)

    return run_compare(
        candidates, engine=chosen, mode=mode, tokens=list(tokens), dtypes=dtypes, batch=batch, baseline=baseline,
        notes=notes,
    )  # fmt: skip


def _compare_serving(
    serving: Serving | None, engine: str | Engine | None, kv_dtypes: Sequence[DTypeLike] | None
) -> tuple[str | Engine | None, Sequence[DTypeLike] | None, dict[str, KnobValue]]:
    """compare's engine, formats and engine options: from ``serving`` (its engine, options and one
    kv_dtype) or the short forms, not both. What compare does not model (K and V apart, a quant
    group, residual tokens) is refused: it would change nothing."""
    from kvcalc.engines import check_knobs

    checks.instance(serving, "serving", Serving, "a kvcalc.Serving or None")
    if serving is None:
        return engine, kv_dtypes, {}
    for name, value in (("engine", engine), ("kv_dtypes", kv_dtypes if serving.kv_dtype is not None else None)):
        if value is not None:
            raise UsageError(f"{name} is part of serving: give serving or {name}, not both", param=("serving", name))
    for name in ("k_dtype", "v_dtype", "quant_group", "residual_tokens"):
        if getattr(serving, name) is not None:
            raise UsageError(f"serving's {name} changes nothing in compare, which takes its engine, options and "
                             "kv_dtype (estimate takes them all)", param=name)  # fmt: skip
    options = dict(check_options(serving.options))
    check_knobs(options)
    return serving.engine, [serving.kv_dtype] if serving.kv_dtype is not None else kv_dtypes, options


def _refuse_idle_everywhere(rows: Sequence[tuple[ModelSpec, Engine]], options: Mapping[str, KnobValue]) -> None:
    """A knob given that shapes no row's cache changes nothing: refused as estimate refuses it
    (naming the first row's model: the one model whose variants these are, or the first of them)."""
    idle = set.intersection(*(set(engine.idle_knobs(spec)) for spec, engine in rows))
    if idle:
        spec, engine = rows[0]
        refuse_idle_knobs(spec, engine, {knob: value for knob, value in options.items() if knob in idle})


def _first_repeat(values: Sequence[int]) -> int | None:
    """The first value that is given more than once (counted at once: 10,000 lengths are)."""
    counts: dict[int, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return next((value for value in values if counts[value] > 1), None)


def _layout(layout: Layout | None, tp: int, pp: int, dp: int) -> tuple[int, int, int]:
    got_tp, got_pp, got_dp = as_layout(layout, tp=tp, pp=pp, dp=dp)
    return got_tp if got_tp is not None else 1, got_pp, got_dp
