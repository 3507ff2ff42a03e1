"""Serving: the engine (with its options) and the K/V formats a request asks for."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvcalc import checks
from kvcalc.defaults import DEFAULT_TOKENS
from kvcalc.dtypes import DEFAULT_QUANT_GROUP, DType, parse_kv_dtype
from kvcalc.engines import DEFAULT_ENGINE
from kvcalc.errors import UsageError
from kvcalc.spec import MAX_DIMENSION, ModelSpec

if TYPE_CHECKING:  # the heavier modules load only when asked for (fractions alone costs ~3 ms)
    from kvcalc.engines import Engine
from kvcalc.api._models import DTypeLike

KnobValue = int | bool | None


@dataclass(frozen=True)
class Serving:
    """How a model is served: the engine (``NAME[@VERSION]``, or an Engine), its ``options``
    (the engine's knobs by name: ``{"block_size": 32}`` for vLLM, ``{"ubatch": 64,
    "kv_unified": True}`` for llama.cpp; a knob the engine lacks is refused), and the K/V formats
    (None or "auto": the engine's default for the model; ``quant_group`` for int8/int4/int2,
    ``residual_tokens`` kept unquantized by a quantized cache).

    >>> estimate("llama-3.1-8b", serving=Serving("vllm", kv_dtype="fp8", options={"block_size": 32}))  # doctest: +SKIP
    """

    engine: str | Engine = DEFAULT_ENGINE
    kv_dtype: DTypeLike = None
    k_dtype: DTypeLike = None
    v_dtype: DTypeLike = None
    quant_group: int | None = None
    residual_tokens: int | None = None
    options: Mapping[str, KnobValue] = field(default_factory=dict)


@dataclass(frozen=True)
class Layout:
    """How the GPUs are laid out: tensor parallel (``tp``; None: fit derives it from its GPU
    count, elsewhere 1), pipeline stages (``pp``) and data-parallel replicas (``dp``); for speed,
    expert-parallel GPUs of the tp (``ep``), and for fit and speed, attention-DP groups within
    the tp (``dp_attention``)."""

    tp: int | None = None
    pp: int = 1
    dp: int = 1
    ep: int = 1
    dp_attention: int = 1


@dataclass(frozen=True)
class Served:
    """A Serving resolved for one model: the configured engine, the K/V formats (None: the
    engine's default, decided by the estimator), the residual tokens, and every default noted."""

    engine: Engine
    k_dtype: DType | None
    v_dtype: DType | None
    residual_tokens: int
    notes: tuple[str, ...] = ()


def as_serving(
    serving: Serving | None,
    *,
    engine: str | Engine | None = None,
    kv_dtype: DTypeLike = None,
    k_dtype: DTypeLike = None,
    v_dtype: DTypeLike = None,
    options: Mapping[str, KnobValue] | None = None,
) -> Serving:
    """The Serving a call asks for: ``serving``, or the short forms (``engine=``, ``kv_dtype=``,
    ``options=``...), not both."""
    short = {"engine": engine, "kv_dtype": kv_dtype, "k_dtype": k_dtype, "v_dtype": v_dtype, "options": options}
    given = {name: value for name, value in short.items() if value is not None}
    checks.instance(serving, "serving", Serving, "a kvcalc.Serving or None")
    if serving is None:
        return Serving(**given)  # type: ignore[arg-type]
    if given:
        first = next(iter(given))
        raise UsageError(f"{first} is part of serving: give serving or {first}, not both", param=("serving", first))
    return serving


def as_layout(
    layout: Layout | None, *, tp: int | None, pp: int, dp: int, takes: tuple[str, ...] = (), what: str = "an estimate"
) -> tuple[int | None, int, int]:
    """(tp, pp, dp) from ``layout`` or the short forms, not both; each a count of GPUs. A layout's
    ``ep`` or ``dp_attention`` other than 1 is refused unless the call ``takes`` it (read it with
    ``layout_extras``)."""
    checks.instance(layout, "layout", Layout, "a kvcalc.Layout or None")
    if layout is None:
        tp = checks.optional_count(tp, "tp", maximum=checks.MAX_PARALLEL)
        return (
            tp,
            checks.count(pp, "pp", maximum=checks.MAX_PARALLEL),
            checks.count(dp, "dp", maximum=checks.MAX_PARALLEL),
        )
    if (tp is not None and tp != 1) or pp != 1 or dp != 1:
        raise UsageError("tp, pp and dp are part of layout: give layout or them, not both", param=("layout", "tp"))
    for name in ("ep", "dp_attention"):
        value = getattr(layout, name)
        if name not in takes and not (type(value) is int and value == 1):
            raise UsageError(f"{name} changes nothing in {what}", param=name)
    return (
        checks.optional_count(layout.tp, "tp", maximum=checks.MAX_PARALLEL),
        checks.count(layout.pp, "pp", maximum=checks.MAX_PARALLEL),
        checks.count(layout.dp, "dp", maximum=checks.MAX_PARALLEL),
    )


def layout_extras(layout: Layout | None) -> tuple[int, int]:
    """A layout's (ep, dp_attention), each a count of GPUs (1, 1 without a layout)."""
    checks.instance(layout, "layout", Layout, "a kvcalc.Layout or None")
    if layout is None:
        return 1, 1
    ep = checks.count(layout.ep, "ep", maximum=checks.MAX_PARALLEL)
    return ep, checks.count(layout.dp_attention, "dp_attention", maximum=checks.MAX_PARALLEL)


def check_options(options: object) -> Mapping[str, KnobValue]:
    """An engine's knobs as given: a mapping of their names to values (each checked as the engine
    is resolved)."""
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise UsageError(f"options must be a mapping of knob names to values, got {checks.shown(options)}",
                         param="options")  # fmt: skip
    return options


def resolve_serving(spec: ModelSpec, asked: Serving, platform: str | None = None) -> Served:
    """Resolve the engine (by registry name, with its options) and the formats for this model;
    ``None`` / ``"auto"`` formats are the engine's own default for the model, decided by the
    estimator. ``platform``: the GPU's (``gpu_platform``), which an engine with rules by platform
    follows (None: CUDA, or the platform the engine's name asks for)."""
    from kvcalc.engines import Engine as EngineBase
    from kvcalc.engines import check_knobs, make_engine, uses_dsa

    engine, kv_dtype, k_dtype, v_dtype = asked.engine, asked.kv_dtype, asked.k_dtype, asked.v_dtype
    quant_group, residual_tokens = asked.quant_group, asked.residual_tokens
    if not isinstance(engine, str | EngineBase):
        raise UsageError(f"engine must be an engine's name (a str) or an Engine, got {checks.shown(engine)}",
                         param="engine")  # fmt: skip
    options = dict(check_options(asked.options))
    check_knobs(options)
    if quant_group is not None:
        checks.count(quant_group, "quant_group", maximum=MAX_DIMENSION)
    if residual_tokens is not None:
        checks.count(residual_tokens, "residual_tokens", minimum=0)
    notes: list[str] = []
    if isinstance(engine, EngineBase):
        if any(value is not None and value is not False for value in options.values()):
            raise UsageError("options configure an engine given by name; this engine is built already",
                             param="options")  # fmt: skip
        chosen = engine
    else:
        chosen, engine_notes = make_engine(engine, uses_mla=any(c.is_latent for c, _ in spec.groups),
                                            uses_dsa=uses_dsa(spec.caches), platform=platform, **options)  # fmt: skip
        notes += engine_notes
    chosen.check_serving(any(d is not None and d != "auto" for d in (kv_dtype, k_dtype, v_dtype)), quant_group,
                         residual_tokens)  # fmt: skip
    if kv_dtype is not None and k_dtype is not None and v_dtype is not None:
        raise UsageError("kv_dtype changes nothing when k_dtype and v_dtype are both given",
                         param=("kv_dtype", "k_dtype", "v_dtype"))  # fmt: skip
    if (k_dtype is not None or v_dtype is not None) and not any(c.caches_tokens for c, _ in spec.groups):
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
    return Served(chosen, k, v if v != k else None, residual, tuple(notes))


def gpu_platform(gpu: str | None) -> str | None:
    """The platform of a GPU preset's maker (kvcalc.gpus.GPU.platform), or None: no preset, or a
    name no preset has (refused where the GPU is read, in its own words)."""
    if gpu is None:
        return None
    from kvcalc.gpus import find_gpu

    try:
        return find_gpu(gpu).platform
    except UsageError:
        return None


def is_theoretical(engine: str | Engine) -> bool:
    """Whether an engine name (or alias) is the theoretical engine, the figure others are set beside."""
    from kvcalc.engines import engine_entry

    name = engine.name if not isinstance(engine, str) else engine_entry(engine).name
    return name == DEFAULT_ENGINE


def _dtype(value: DTypeLike, quant_group: int, param: str) -> DType | None:
    if value is None or isinstance(value, DType):
        return value
    if not isinstance(value, str):
        raise UsageError(f"{param} must be a format's name such as 'fp8' (a str) or a DType, got {checks.shown(value)}",
                         param=param)  # fmt: skip
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
    if tokens is not None:
        tokens = checks.count(tokens, "tokens")
    if prompt is not None:
        prompt = checks.count(prompt, "prompt", minimum=0)
    if output is not None:
        output = checks.count(output, "output", minimum=0)
    if encoder_tokens is not None:
        encoder_tokens = checks.count(encoder_tokens, "encoder_tokens")
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
        notes.append(f"tokens not given: {DEFAULT_TOKENS:,} tokens per sequence assumed")
        return DEFAULT_TOKENS, encoder_tokens, notes
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
        if value is not None:
            checks.count(value, param, minimum=0)
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


def refuse_idle_knobs(spec: ModelSpec, engine: Engine, options: Mapping[str, KnobValue]) -> None:
    """A knob given to size the cache that shapes none of this model's layers changes nothing in an
    estimate, a comparison or speed's cache reads (fit, which uses it for the runtime, does not
    call this)."""
    for knob in engine.idle_knobs(spec):
        if options.get(knob) not in (None, False):
            raise UsageError(
                f"{knob} changes nothing in {spec.name}'s cache under {engine.name}: it sizes only sliding, "
                "chunked or compressed layers, and the model has none",
                param=knob,
            )
