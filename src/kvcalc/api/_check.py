"""check: a running server, or its start-up log, held against kvcalc's answer for the same
settings: the pool in the engine's own units beside kvcalc's, the gap term by term, what-ifs
anchored on the server's own pool, and live usage."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvcalc import checks
from kvcalc.errors import KvcalcError, SourceError, UsageError

if TYPE_CHECKING:
    from kvcalc.api._fit import FitReport
    from kvcalc.engines.commandline import SettingValue
    from kvcalc.engines.observing import Observation, Pool, PoolRules, Predicted, Usage

GIB = 2**30
# The share of GPU memory a what-if tries (vLLM's documented headroom for a dedicated GPU).
WHAT_IF_UTILIZATION = 0.95
# The settings kvcalc reads beside a server, by API name, and what each is called in messages.
SETTING_NAMES = {"tokens": "--tokens", "batch": "--batch", "tp": "--tp", "pp": "--pp", "kv_dtype": "--kv-dtype",
                 "utilization": "--utilization", "max_model_len": "--max-model-len"}  # fmt: skip
# Settings that are not a knob of the engine (everything else in a reading is one).
_PLAIN = {"model", "tokens", "batch", "max_model_len", "tp", "pp", "dp", "utilization", "kv_budget", "kv_dtype",
          "k_dtype", "v_dtype", "engine", "revision", "tokens_from_model"}  # fmt: skip


@dataclass(frozen=True)
class PoolCheck:
    """The server's pool of one kind beside kvcalc's for the same settings. ``kvcalc`` is None when
    kvcalc could not predict it (no model, no GPU to size it from); ``server`` None when the server
    does not reveal its pool (Ollama's API): kvcalc's alone is shown. ``basis`` says what kvcalc's
    figure rests on (the server's own budget, or kvcalc's budget for the GPU)."""

    kind: str
    unit: str
    unit_tokens: int
    server: int | None
    kvcalc: int | None
    unit_bytes: int | None
    basis: str
    server_bytes: int | None = None
    server_bytes_exact: bool = True
    kvcalc_bytes: int | None = None
    bytes_step: int = 0

    @property
    def difference(self) -> int | None:
        return None if self.kvcalc is None or self.server is None else self.kvcalc - self.server

    @property
    def relative(self) -> float | None:
        if self.kvcalc is None or self.server is None:
            return None
        return 0.0 if self.kvcalc == self.server else (self.kvcalc - self.server) / max(self.server, 1)

    @property
    def pool_bytes(self) -> int | None:
        """The server's pool in bytes: as it states them, else its count x kvcalc's unit bytes."""
        if self.server_bytes is not None:
            return self.server_bytes
        return None if self.unit_bytes is None or self.server is None else self.server * self.unit_bytes

    def within(self, tolerance: float) -> bool | None:
        """Whether kvcalc's count (and bytes, where the server states them) agree within ``tolerance``
        (a share: 0 is exact); a rounded byte figure agrees when kvcalc's rounds to it."""
        relative = self.relative
        if relative is None:
            return None
        if abs(relative) > tolerance:
            return False
        if self.server_bytes is None or self.kvcalc_bytes is None or self.server is None:
            return True
        if self.server_bytes_exact:
            return abs(self.kvcalc_bytes - self.server_bytes) <= tolerance * self.server_bytes
        if self.bytes_step:
            return abs(self.kvcalc_bytes - self.server_bytes) * 2 <= self.bytes_step + 2 * tolerance * self.server_bytes
        return True


@dataclass(frozen=True)
class FigureCheck:
    """Another figure the server states beside kvcalc's (vLLM's kv_cache_size_tokens)."""

    name: str
    server: int | float | str | bool | None
    kvcalc: int | float


@dataclass(frozen=True)
class GapLine:
    """One term of the GPU's memory, as kvcalc's budget has it and as the server states it."""

    term: str
    kvcalc: int | None
    server: int | None
    server_exact: bool = False
    detail: str = ""


@dataclass(frozen=True)
class WhatIf:
    """The pool under one change, anchored on the server's own pool (its count x kvcalc's bytes per
    unit): ``count`` units, ``tokens``, and the requests of max_model_len that fit (``concurrency``)."""

    change: str
    count: int
    unit: str
    tokens: int
    bytes: int
    concurrency: float | None = None


@dataclass(frozen=True)
class CheckReport:
    """What ``check`` found: the server's observation, the kvcalc engine and model the prediction
    used, the pools and figures compared, the gap, the what-ifs, and what was assumed."""

    observation: Observation
    asked: tuple[str, ...]
    engine: str | None
    model: str | None
    settings: Mapping[str, SettingValue]
    pools: tuple[PoolCheck, ...] = ()
    figures: tuple[FigureCheck, ...] = ()
    gap: tuple[GapLine, ...] = ()
    what_ifs: tuple[WhatIf, ...] = ()
    assumed: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    tolerance: float | None = None

    @property
    def agrees(self) -> bool | None:
        """Whether every pool kvcalc predicted agrees within the tolerance (exact when none was
        given); None when kvcalc could predict none."""
        verdicts = [p.within(self.tolerance or 0.0) for p in self.pools]
        judged = [v for v in verdicts if v is not None]
        figures_agree = all(_same_figure(f) for f in self.figures)
        return (all(judged) and figures_agree) if judged else None


def _same_figure(figure: FigureCheck) -> bool:
    if isinstance(figure.server, bool) or not isinstance(figure.server, (int, float)):
        return True
    if isinstance(figure.kvcalc, float) or isinstance(figure.server, float):
        return abs(float(figure.server) - float(figure.kvcalc)) < 0.01  # both printed to two decimals
    return figure.server == figure.kvcalc


@dataclass
class _Request:
    """What the user gave beside the target."""

    model: str | None
    gpu: str | None
    engine: str | None
    given: dict[str, SettingValue]
    line: tuple[str, ...]
    tolerance: float | None
    assumed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def check(
    target: str,
    model: str | None = None,
    *,
    gpu: str | None = None,
    engine: str | None = None,
    tokens: int | None = None,
    batch: int | None = None,
    tp: int | None = None,
    pp: int | None = None,
    kv_dtype: str | None = None,
    utilization: float | None = None,
    line: Sequence[str] = (),
    tolerance: float | None = None,
    timeout: float = 5.0,
) -> CheckReport:
    """Read a running server (``target``: ``http://HOST:PORT``) with a few read-only GETs, or its
    start-up log (a file, ``-`` for standard input), and set its KV pool beside kvcalc's for the
    same settings. What the server does not reveal comes from ``model``, ``gpu`` and the other
    parameters, or from the engine's own command ``line`` (``vllm serve MODEL ...``); each is listed
    in ``assumed``. A parameter the server already states differently is refused. ``tolerance``: the
    share kvcalc may differ by (``agrees``); None: exact."""
    given = {k: v for k, v in (("tokens", tokens), ("batch", batch), ("tp", tp), ("pp", pp),
                               ("kv_dtype", kv_dtype), ("utilization", utilization)) if v is not None}  # fmt: skip
    if tolerance is not None and not 0 <= tolerance <= 1:
        raise UsageError("tolerance must be a share from 0 to 1 (0.01 is 1%)", param="tolerance")
    if timeout <= 0 or timeout > 600:
        raise UsageError("timeout must be over 0 and at most 600 seconds", param="timeout")
    request = _Request(model, gpu, engine, dict(given), tuple(line), tolerance)
    observation, asked = observe(target, timeout=timeout)
    settings = _settings(observation, request)
    if "utilization" in request.given and gpu is None and observation.term("gpu memory") is None:
        # The share sizes kvcalc's budget on a GPU, and the 0.95 what-if on the GPU's memory: neither here.
        raise UsageError("utilization changes nothing without the GPU: give gpu (or a log that states its memory)",
                         param="utilization")  # fmt: skip
    predicted_engine, opened_model = _prediction_inputs(observation, request, settings)
    report = CheckReport(observation, asked, predicted_engine, opened_model, settings, tolerance=tolerance)
    if opened_model is not None and predicted_engine is not None:
        report = _predict(report, request)
    return _finished(report, request)


def observe(target: str, *, timeout: float = 5.0) -> tuple[Observation, tuple[str, ...]]:
    """What the server at ``target`` (or the log file it names, ``-``: standard input) reveals, and
    what was asked of it (the GET paths, or the log's name)."""
    from kvcalc.engines.observing import Answer, clean_lines, log_readers, server_readers
    from kvcalc.inputs.server import ServerGet, read_log, server_address

    address = server_address(checks.text(target, "target") or "")
    if address is None:
        text, name = read_log(target)
        lines = clean_lines(text)
        for log_reader in log_readers():
            if log_reader.claims(lines):
                return log_reader.read(lines, name), (name,)
        raise SourceError(f"{name}: no line of it is a start-up line of an engine kvcalc reads (vLLM, SGLang, "
                          "llama.cpp, Ollama, TGI)")  # fmt: skip
    server = ServerGet(address, timeout)

    def get(path: str) -> Answer:
        return Answer(*server(path))

    readers = server_readers()
    for reader in readers:
        if reader.identify(get):
            return reader.read(get, address), tuple(server.asked)
    replies = [server(p) for p in server.asked]
    if all(status == 0 for status, _ in replies):
        raise SourceError(f"{address}: no answer ({replies[0][1] if replies else 'nothing asked'})")
    paths = ", ".join(server.asked)
    raise SourceError(f"{address}: answers, but as no engine kvcalc reads (asked {paths})")


def watch(
    target: str, *, count: int = 10, interval: float = 5.0, duration: float | None = None, timeout: float = 5.0
) -> Iterator[tuple[float, Usage | None]]:
    """Live usage of a running server, sampled ``count`` times ``interval`` seconds apart (stopping
    early after ``duration`` seconds): (seconds since the first sample, its usage) each."""
    from kvcalc.engines.observing import Answer, server_readers
    from kvcalc.inputs.server import ServerGet, server_address

    checks.count(count, "count", maximum=100_000)
    if interval <= 0 or interval > 3600:
        raise UsageError("interval must be over 0 and at most 3600 seconds", param="interval")
    if duration is not None and duration <= 0:
        raise UsageError("duration must be over 0 seconds", param="duration")
    address = server_address(target)
    if address is None:
        raise UsageError(f"{target}: watching needs a running server (http://HOST:PORT), not a log", param="target")
    server = ServerGet(address, timeout)
    reader = next((r for r in server_readers() if r.identify(lambda p: Answer(*server(p)))), None)
    if reader is None:
        raise SourceError(f"{address}: answers as no engine kvcalc reads")
    start = last = time.monotonic()
    for index in range(count):
        if index:
            # interval seconds after the last sample began: a slow answer delays the next, never bunches them
            if duration is not None and last + interval - start > duration:
                return
            time.sleep(max(0.0, last + interval - time.monotonic()))
            last = time.monotonic()
        for path in reader.paths:
            server.fresh(path)
        usage = reader.read(lambda p: Answer(*server(p)), address).usage
        yield last - start, usage


# --- the settings: the server's, then the user's, then the engine line's ----------------------------


def _settings(observation: Observation, request: _Request) -> dict[str, SettingValue]:
    """The server's settings, with what it does not say taken from the user's parameters, then from
    the engine line; a parameter that contradicts the server is refused, a line that does is
    overruled with a warning."""
    settings: dict[str, SettingValue] = dict(observation.settings)
    served = settings.get("model")
    if isinstance(served, str):
        from kvcalc.api._engines import hub_preset

        preset = hub_preset(served)
        if preset is not None:
            request.notes.append(f"the server's model {served}: read as kvcalc's preset {preset} (that "
                                 "repository's config.json)")  # fmt: skip
            settings["model"] = preset
    for key, value in request.given.items():
        known = settings.get(key)
        if known is not None and not _same(known, value):
            raise UsageError(f"{SETTING_NAMES.get(key, key)} {value}: the server runs with {known}; drop it",
                             param=key)  # fmt: skip
        if known is None:
            settings[key] = value
            request.assumed.append(f"{SETTING_NAMES.get(key, key)} {value}: given")
    if request.line:
        from kvcalc.api._engines import read_engine_command

        command = read_engine_command(request.line, request.engine, request.model)
        request.warnings.extend(command.warnings)
        request.notes.extend(command.notes)
        for key, value in command.settings.items():
            known = settings.get(key)
            if key == "engine" or (key in command.soft and known is not None):
                continue  # the line's own default yields to what the server runs with
            if known is not None and not _same(known, value):
                request.warnings.append(f"{command.program}: {key} {value}, but the server runs with {known}: "
                                        "the server's is used")  # fmt: skip
            elif known is None:
                settings[key] = value
                request.assumed.append(f"{key} {value}: from the {command.program} line")
    return settings


def _same(a: SettingValue, b: SettingValue) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(float(a) - float(b)) < 1e-9
    return str(a) == str(b)


def _prediction_inputs(
    observation: Observation, request: _Request, settings: dict[str, SettingValue]
) -> tuple[str | None, str | None]:
    """The kvcalc engine and the model the prediction uses, each None (with a note) when there is
    none: the model the user names wins over the server's, which may be a path on another host."""
    from kvcalc.engines import DEFAULT_ENGINE

    engine = observation.engine if observation.modelled else DEFAULT_ENGINE
    if request.engine is not None:
        if _family(request.engine) != _family(observation.engine) and observation.modelled:
            raise UsageError(f"--engine {request.engine}: the server is {observation.engine}", param="engine")
        engine = request.engine
    served = settings.get("model")
    model = request.model
    if model is None and isinstance(served, str):
        model = served
    if model is None:
        if not any("MODEL" in m for m in observation.missing):
            request.notes.append("no model: kvcalc cannot predict the pool; give MODEL (a preset, config or Hub id)")
        return engine, None
    from kvcalc.api._models import open_model

    try:
        open_model(model)
    except KvcalcError as exc:
        if request.model is not None:
            raise
        request.notes.append(f"the server's model {model!r} cannot be opened here ({exc}); give MODEL")
        return engine, None
    if request.model is not None and isinstance(served, str) and served != request.model:
        request.notes.append(f"the server serves {served!r}; kvcalc reads it as {request.model}")
    return engine, model


def _family(engine: str) -> str:
    from kvcalc.engines import REGISTRY

    name = engine.split("@", 1)[0]
    for plugin in REGISTRY.values():
        if name == plugin.name or name in plugin.aliases:
            return plugin.name
    return name


# --- the prediction ------------------------------------------------------------------------------------


def _predict(report: CheckReport, request: _Request) -> CheckReport:
    from dataclasses import replace

    from kvcalc.engines.observing import pool_rules

    assert report.engine is not None and report.model is not None
    if not report.observation.modelled:
        return replace(report, pools=_theoretical_sizes(report))
    rules = pool_rules(_family(report.engine))
    if rules is None:
        request.notes.append(f"kvcalc cannot set a {report.engine} pool beside its own yet")
        return report
    try:
        if rules.sizing == "budget":
            return replace(report, **_budget_prediction(report, request, rules))
        return replace(report, **_context_prediction(report, request, rules))
    except KvcalcError as exc:
        if set(exc.params) & {*request.given, "gpu", "engine"}:
            raise  # a value the user gave: their error to fix
        # What the server runs, kvcalc refuses or cannot model: the server's own figures still stand.
        request.notes.append(f"kvcalc cannot predict this pool: {exc}")
        return report


def _theoretical_sizes(report: CheckReport) -> tuple[PoolCheck, ...]:
    """An engine kvcalc reads but does not model (TGI): the bytes its pool's tokens take in the
    theoretical cache, beside its count, not judged."""
    from kvcalc.api._estimate import estimate

    found = []
    for pool in report.observation.pools:
        tokens = pool.count * pool.unit_tokens
        one = estimate(str(report.model), tokens=tokens, batch=1, kv_dtype=_text(report.settings.get("kv_dtype")))
        found.append(PoolCheck(pool.kind, pool.unit, pool.unit_tokens, pool.count, None, None,
                               f"the theoretical cache of {tokens:,} tokens", server_bytes=one.total_bytes,
                               server_bytes_exact=False))  # fmt: skip
    return tuple(found)


def _text(value: SettingValue | None) -> str | None:
    return None if value is None else str(value)


def _fit_at(report: CheckReport, *, kv_budget: int | None = None, gpu: str | None = None,
            kv_dtype: SettingValue | None = None) -> FitReport:  # fmt: skip
    """kvcalc's fit under the server's settings, at a KV budget or on a GPU preset (at the server's
    share of it)."""
    from kvcalc.api._fit import Capacity, fit
    from kvcalc.api._serving import Layout, Serving

    s = report.settings
    tokens = _int(s.get("tokens")) or _int(s.get("max_model_len"))
    knobs = _knobs(s)
    if kv_budget is not None:  # a ready budget: the knobs that only size the runtime change nothing
        from kvcalc.engines import every_knob

        sizing = every_knob()
        knobs = {k: v for k, v in knobs.items() if k not in sizing or sizing[k].sizes_cache}
    serving = Serving(str(report.engine), kv_dtype=str(kv_dtype or s.get("kv_dtype") or "") or None, options=knobs)
    share = s.get("utilization")
    capacity = Capacity(kv_budget=kv_budget, utilization=float(share) if isinstance(share, (int, float)) and gpu
                        else None, max_model_len=_int(s.get("max_model_len")))  # fmt: skip
    layout = Layout(tp=_int(s.get("tp")) or 1, pp=_int(s.get("pp")) or 1, dp=1)
    return fit(str(report.model), gpu=gpu, tokens=tokens, batch=_int(s.get("batch")) or 1, serving=serving,
               layout=layout, capacity=capacity, verdict=False)  # fmt: skip


def _knobs(settings: Mapping[str, SettingValue]) -> dict[str, int | bool | None]:
    """The engine's knobs among the settings (block_size, ubatch ...): counts and switches."""
    return {k: v for k, v in settings.items() if k not in _PLAIN and isinstance(v, (int, bool))}


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _budget_prediction(report: CheckReport, request: _Request, rules: PoolRules) -> dict[str, Any]:
    """A pool sized from memory (vLLM, SGLang): kvcalc's count at the server's own budget where it
    states one (exact), else at kvcalc's budget for the GPU; the gap term by term; what-ifs."""
    assert rules.from_fit is not None
    observation = report.observation
    budget = _int(report.settings.get("kv_budget"))
    gpu_lines: tuple[Any, ...] = ()
    if budget is not None:
        fitted = _fit_at(report, kv_budget=budget).result
        basis = f"the server's own KV budget, {budget:,} B"
    elif request.gpu is not None:
        on_gpu = _fit_at(report, gpu=request.gpu)
        fitted, gpu_lines = on_gpu.result, on_gpu.budget.lines
        basis = f"kvcalc's budget on {request.gpu}, {fitted.kv_budget:,} B"
        request.assumed.append(f"--gpu {request.gpu}: given (the server does not say its GPU)")
    else:
        fitted = _fit_at(report, kv_budget=GIB).result  # only for kvcalc's bytes per unit
        basis = ""
    predicted = tuple(rules.from_fit(fitted))
    pools = tuple(_pool_check(pool, _matching(pool.kind, pool.unit, predicted), basis) for pool in observation.pools)
    figures = _figure_checks(observation, predicted) if basis else ()
    what_ifs = _budget_what_ifs(report, request, rules, pools)
    return {"pools": pools, "figures": figures, "gap": _gap(observation, gpu_lines, pools), "what_ifs": what_ifs}


def _matching(kind: str, unit: str, predicted: Sequence[Predicted]) -> Predicted | None:
    """kvcalc's pool of the same kind in the same unit (vLLM's blocks, or the tokens its log states)."""
    same = [p for p in predicted if p.kind == kind]
    return next((p for p in same if p.unit == unit), next((p for p in same if p.unit is None), None))


def _pool_check(pool: Pool, predicted: Predicted | None, basis: str) -> PoolCheck:
    count = predicted.count if predicted is not None and basis else None
    return PoolCheck(
        kind=pool.kind, unit=pool.unit, unit_tokens=pool.unit_tokens, server=pool.count, kvcalc=count,
        unit_bytes=None if predicted is None else predicted.unit_bytes, basis=basis, server_bytes=pool.bytes,
        server_bytes_exact=pool.bytes_exact, kvcalc_bytes=None if count is None or predicted is None else
        count * predicted.unit_bytes, bytes_step=pool.bytes_step,
    )  # fmt: skip


def _figure_checks(observation: Observation, predicted: Any) -> tuple[FigureCheck, ...]:
    said = {f.name: f.value for f in observation.figures}
    found: list[FigureCheck] = []
    for p in predicted:
        for name, value in p.figures.items():
            if said.get(name) not in (None, "None", "") and all(f.name != name for f in found):
                server = said[name]
                found.append(FigureCheck(name, _number(server), value))
    return tuple(found)


def _number(value: object) -> int | float | str | bool | None:
    if isinstance(value, str):
        for kind in (int, float):
            try:
                return kind(value)
            except ValueError:
                continue
        return value
    return value if isinstance(value, (int, float, str, bool)) else None


# The server's memory terms (observing.TERMS) and the words kvcalc's budget lines use for each.
_TERM_WORDS = {"gpu memory": "gpu memory", "usable": "x ", "weights": "- weights", "activation peak": "activation",
               "non-torch": "non-torch", "cuda graphs": "cuda graph", "kv cache": "= kv cache"}  # fmt: skip


def _gap(observation: Observation, lines: Sequence[Any], pools: Sequence[PoolCheck]) -> tuple[GapLine, ...]:
    """kvcalc's budget for the GPU beside the terms the server states, term by term, and the KV pool
    itself (the server's count x kvcalc's bytes per unit)."""
    if not lines:
        return ()
    gap = []
    for term, words in _TERM_WORDS.items():
        ours = next((ln for ln in lines if ln.label.lower().startswith(words) or words in ln.label.lower()), None)
        theirs = observation.term(term)
        if ours is None and theirs is None:
            continue
        server = theirs.bytes if theirs is not None else None
        exact = theirs.exact if theirs is not None else False
        if term == "kv cache" and server is None and pools and pools[0].pool_bytes is not None:
            server, exact = pools[0].pool_bytes, pools[0].server_bytes is None
        detail = "" if ours is None else ours.detail or ours.label.lstrip("-=x ")
        gap.append(GapLine(term, None if ours is None else ours.bytes, server, exact, detail))
    return tuple(gap)


def _budget_what_ifs(
    report: CheckReport, request: _Request, rules: PoolRules, pools: Sequence[PoolCheck]
) -> tuple[WhatIf, ...]:
    """The pool under a change, anchored on the server's own: its count x kvcalc's bytes per unit,
    plus a GiB, at 0.95 of the GPU (where its memory is known), with an fp8 cache."""
    assert rules.from_fit is not None
    pool = next((p for p in pools if p.kind == "kv"), None)
    if pool is None or pool.unit_bytes is None or pool.server is None:
        return ()
    anchor = pool.server * pool.unit_bytes
    changes: list[tuple[str, int, SettingValue | None]] = [("+1 GiB for the cache", anchor + GIB, None)]
    share = report.settings.get("utilization")
    memory = _gpu_memory(report.observation, request.gpu)
    if isinstance(share, (int, float)) and memory is not None and share < WHAT_IF_UTILIZATION:
        extra = int((WHAT_IF_UTILIZATION - float(share)) * memory)
        changes.append((f"utilization {WHAT_IF_UTILIZATION} (from {share:g})", anchor + extra, None))
    dtype = str(report.settings.get("kv_dtype") or "")
    if "fp8" not in dtype and "int" not in dtype and "q" not in dtype:
        changes.append(("an fp8 KV cache", anchor, "fp8"))
    found = []
    for change, budget, kv_dtype in changes:
        try:
            fitted = _fit_at(report, kv_budget=budget, kv_dtype=kv_dtype).result
        except KvcalcError as exc:
            request.notes.append(f"what-if {change}: {exc}")
            continue
        ours = _matching("kv", pool.unit, tuple(rules.from_fit(fitted)))
        if ours is None:
            continue
        exact = fitted.max_concurrency_exact
        concurrency = float(exact) if exact is not None else float(fitted.max_concurrency)
        found.append(WhatIf(change, ours.count, pool.unit, ours.count * ours.unit_tokens, ours.bytes, concurrency))
    return tuple(found)


def _gpu_memory(observation: Observation, gpu: str | None) -> int | None:
    """The GPU's memory: as the log states it, else the preset's."""
    term = observation.term("gpu memory")
    if term is not None:
        return term.bytes
    if gpu is None:
        return None
    from kvcalc.gpus import find_gpu

    return find_gpu(gpu).runtime_bytes


def _context_prediction(report: CheckReport, request: _Request, rules: PoolRules) -> dict[str, Any]:
    """A pool set by its context and slots (llama.cpp, Ollama, MLX): kvcalc's estimate at the
    server's context and slots, per pool kind, and what one more slot would cost."""
    assert rules.from_estimate is not None
    from kvcalc.api._estimate import estimate
    from kvcalc.api._serving import Layout, Serving

    s = report.settings
    tokens = _int(s.get("tokens"))
    if tokens is None:
        request.notes.append("the context per slot: not revealed; give --tokens")
        return {}
    batch = _int(s.get("batch")) or 1
    if _int(s.get("batch")) is None:
        request.assumed.append("--batch 1: one slot, kvcalc's default (the server does not say how many)")
    knobs = _knobs(s)

    def at(slots: int, kv_dtype: SettingValue | None = None) -> Any:
        serving = Serving(str(report.engine), kv_dtype=str(kv_dtype or s.get("kv_dtype") or "") or None,
                          options=knobs)  # fmt: skip
        return estimate(str(report.model), tokens=tokens, batch=slots, serving=serving,
                        layout=Layout(tp=_int(s.get("tp")) or 1, pp=1, dp=1))  # fmt: skip

    found = at(batch)
    predicted = tuple(rules.from_estimate(found))
    basis = f"kvcalc's estimate at {tokens:,} tokens x {batch} slot(s)"
    pools = tuple(_pool_check(p, _matching(p.kind, p.unit, predicted), basis) for p in report.observation.pools)
    said = {p.kind for p in report.observation.pools}
    unseen = tuple(PoolCheck(p.kind, p.unit or "cell", p.unit_tokens, None, p.count, p.unit_bytes, basis,
                             kvcalc_bytes=p.bytes) for p in predicted if p.kind not in said)  # fmt: skip
    pools = (*pools, *unseen)
    more = sum(p.bytes for p in rules.from_estimate(at(batch + 1)))
    what_if = WhatIf(f"{batch + 1} slots (+1)", batch + 1, "slot", tokens * (batch + 1), more)
    return {"pools": pools, "what_ifs": (what_if,)}


def _finished(report: CheckReport, request: _Request) -> CheckReport:
    from dataclasses import replace

    observation = report.observation
    notes = [*observation.notes, *request.notes]
    # What the server did not say but the user gave is no longer missing.
    given = [flag for flag, known in (("--gpu", request.gpu), ("MODEL", report.model)) if known]
    given += [flag for key, flag in SETTING_NAMES.items() if report.settings.get(key) is not None]
    missing = tuple(m for m in observation.missing if not any(f"give {flag}" in m or f"unless {flag}" in m
                                                               for flag in given))  # fmt: skip
    return replace(report, observation=replace(observation, missing=missing), assumed=tuple(request.assumed),
                   notes=tuple(dict.fromkeys(notes)), warnings=tuple(dict.fromkeys(request.warnings)))  # fmt: skip
