"""simulate: a server under load over the exact KV pool: each engine's scheduler step by step,
each step's time from speed's step costs (or times measured on a real server), and every
request's queueing, first token, inter-token gaps and end."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvcalc import checks
from kvcalc.errors import UsageError

if TYPE_CHECKING:
    from kvcalc.api._speed import Compute
    from kvcalc.calc.simulate import ClosedLoop, Done, Request, Run, Scheduler, Stats, StepShape, StepTime

from kvcalc.api._models import DTypeLike, ModelArg, OnFetch
from kvcalc.api._serving import Layout, Serving, as_serving

# The SLO terms a capacity search takes, and what each bounds.
SLO_TERMS = ("ttft", "tpot", "itl", "e2e")


@dataclass(frozen=True)
class Load:
    """How requests come: ``rate`` per second (gaps drawn from a gamma of shape ``burstiness``: 1
    Poisson, below 1 burstier; inf: all at once) or ``concurrency`` clients each sending the next
    request when the last ends; ``count`` requests in all, lengths ``prompt`` + ``output`` or the
    ``lengths`` given (in turn), drawn with ``seed``. ``batch``: the requests a server with slots
    runs at once, llama-server's ``-np`` (fit's and speed's batch; None: one slot), refused by an
    engine without slots. ``shared_prefix``: the first tokens of every prompt the same as those of
    the other requests of its group, ``prefixes`` groups, requests assigned to them in turn (1: a
    system prompt all share; more: vLLM bench's prefix_repetition dataset), for the engine's prefix
    cache; ``prefix_caching`` turns that cache on or off for the run (None: the engine's default),
    where the engine's scheduler models one."""

    rate: float | None = None
    concurrency: int | None = None
    # A recorded trace in place of a rate or concurrency: (arrival seconds, prompt, output) each.
    trace: tuple[tuple[float, int, int], ...] = ()
    count: int = 1000
    prompt: int | None = None
    output: int | None = None
    lengths: tuple[tuple[int, int], ...] = ()
    burstiness: float = 1.0
    seed: int = 0
    batch: int | None = None
    shared_prefix: int = 0
    prefixes: int = 1
    prefix_caching: bool | None = None


@dataclass(frozen=True)
class StepTimes:
    """Step times measured on a real server, in place of speed's model: ``base_s`` a step,
    ``token_s`` a token fed, ``context_s`` a cached token a decoding sequence reads,
    ``handling_s`` the server's time with a request before its first step (the API server), and
    ``prefill_token_s`` a prompt token fed in a prefill chunk where it costs other than a decode
    token (None: ``token_s``; a decoding sequence's one token carries its sampling and its row of
    the batch, a chunk's tokens share theirs)."""

    base_s: float
    token_s: float
    context_s: float = 0.0
    handling_s: float = 0.0
    prefill_token_s: float | None = None

    def __call__(self, shape: StepShape) -> float:
        prefill = self.token_s if self.prefill_token_s is None else self.prefill_token_s
        decode_tokens = shape.tokens - shape.prefill_tokens
        return (self.base_s + self.token_s * decode_tokens + prefill * shape.prefill_tokens
                + self.context_s * shape.decode_context)  # fmt: skip


@dataclass(frozen=True)
class Slo:
    """The latencies a request must meet (seconds; None: no bound) at ``percentile``."""

    ttft: float | None = None
    tpot: float | None = None
    itl: float | None = None
    e2e: float | None = None
    percentile: float = 90.0

    def met_by(self, done: Done) -> bool:
        """Whether one request met every bound (its own TTFT, TPOT and end to end; ITL is a run's)."""
        pairs = ((self.ttft, done.ttft_s), (self.e2e, done.e2e_s), (self.tpot, done.tpot_s))
        return all(bound is None or value is None or value <= bound for bound, value in pairs)


@dataclass(frozen=True)
class SimulationReport:
    """A simulated run and its summary: the engine and pool it ran on, latency statistics (seconds),
    throughput, goodput under the SLO where one is given, and every note."""

    model: str
    engine: str
    gpu: str | None
    load: Load
    run: Run
    pool_bytes: int
    queue: Stats
    ttft: Stats
    tpot: Stats
    itl: Stats
    e2e: Stats
    request_rate: float
    output_rate: float
    goodput: float | None
    slo: Slo | None
    notes: tuple[str, ...] = field(default=())


def simulate(
    model: ModelArg,
    *,
    load: Load,
    gpu: str | None = None,
    engine: str | None = None,
    kv_dtype: DTypeLike = None,
    tp: int = 1,
    serving: Serving | None = None,
    max_model_len: int | None = None,
    step_times: StepTimes | None = None,
    kv_budget: int | None = None,
    slo: Slo | None = None,
    timeline: bool = True,
    compute: Compute | None = None,
    revision: str | None = None,
    on_fetch: OnFetch = None,
) -> SimulationReport:
    """Run ``load`` through ``engine``'s scheduler over the KV pool ``fit`` finds on ``gpu`` (or a
    ready ``kv_budget``), each step timed by speed's step costs on that GPU (or ``step_times``
    measured on a real server): per request, the queue, TTFT, TPOT, inter-token gaps and end.
    ``compute``: as speed takes it; its ``weights`` bytes (an FP8 checkpoint of a bf16 preset) also
    size fit's pool."""
    from kvcalc.calc import simulate as sim

    notes: list[str] = []
    if load.trace and (load.lengths or load.prompt is not None or load.output is not None):
        raise UsageError("a trace holds its requests' lengths: give no lengths, prompt or output", param="trace")
    lengths = _lengths(load, notes) if not load.trace else [(p, o) for _, p, o in load.trace]
    longest = max(p + o for p, o in lengths)
    limit = max_model_len or longest
    if limit < longest:
        raise UsageError(f"a request of {longest:,} tokens is longer than max_model_len {limit:,}",
                         param="max_model_len")  # fmt: skip
    if gpu is not None and kv_budget is not None and step_times is not None:
        raise UsageError("gpu changes nothing here: kv_budget sizes the pool and step_times time the steps",
                         param="gpu")  # fmt: skip
    wanted = as_serving(serving, engine=engine, kv_dtype=kv_dtype)
    weights = compute.weights if compute is not None else None
    batch = None if load.batch is None else checks.count(load.batch, "batch")
    scheduler, pool_bytes, engine_name, fit_notes = _scheduler(model, gpu, wanted, tp, limit, kv_budget, revision,
                                                               on_fetch, weights, batch)  # fmt: skip
    notes += fit_notes
    _prefix_caching(scheduler, engine_name, load, lengths, notes)
    handling = 0.0
    timer: StepTime
    if step_times is not None:
        timer, handling = step_times, step_times.handling_s
        notes.append(f"step times as measured: {step_times.base_s * 1e3:g} ms a step + {step_times.token_s * 1e6:g} us "
                     f"a token + {step_times.context_s * 1e9:g} ns a cached token read")  # fmt: skip
    else:
        timer, handling = _speed_step_time(model, gpu, wanted, tp, notes, compute)
    arrivals = _arrivals(load, lengths)
    run = sim.simulate(arrivals, scheduler, timer, timeline=timeline, handling_s=handling)
    if load.shared_prefix:
        prompts = sum(d.request.prompt for d in run.done)
        hits = getattr(scheduler, "hit_tokens", 0)
        notes.append(f"prefix cache: {hits:,} of the finished requests' {prompts:,} prompt tokens (and recomputed "
                     "ones) taken from the cache")  # fmt: skip
    return _report(model, engine_name, gpu, load, run, pool_bytes, slo, notes)


def _lengths(load: Load, notes: list[str]) -> list[tuple[int, int]]:
    """The request mix: the lengths given, or every request prompt + output (each defaulting to
    kvcalc's DEFAULT_PROMPT and DEFAULT_OUTPUT, said in a note)."""
    from kvcalc.defaults import DEFAULT_OUTPUT, DEFAULT_PROMPT

    if load.lengths:
        if load.prompt is not None or load.output is not None:
            raise UsageError("give lengths or prompt and output, not both", param="lengths")
        return [(checks.count(p, "prompt", minimum=0), checks.count(o, "output")) for p, o in load.lengths]
    prompt = DEFAULT_PROMPT if load.prompt is None else load.prompt
    output = DEFAULT_OUTPUT if load.output is None else load.output
    defaulted = [f"{name} {value:,}" for name, value, given in (("prompt", prompt, load.prompt),
                 ("output", output, load.output)) if given is None]  # fmt: skip
    if defaulted:
        notes.append(f"every request: {' and '.join(defaulted)} tokens, kvcalc's default (--prompt, --output)")
    return [(checks.count(prompt, "prompt", minimum=0), checks.count(output, "output"))]


def _prefix_caching(scheduler: Scheduler, engine: str, load: Load, lengths: Sequence[tuple[int, int]],
                    notes: list[str]) -> None:  # fmt: skip
    """The scheduler's prefix cache as asked, and a shared prefix checked: refused where it would
    change nothing (no prefix cache modelled, or it is off) or does not fit a prompt."""
    asked = load.prefix_caching
    shared = checks.count(load.shared_prefix, "shared_prefix", minimum=0)
    checks.count(load.prefixes, "prefixes")
    if load.prefixes != 1 and not shared:
        raise UsageError("prefixes groups a shared prefix: give shared_prefix too", param="prefixes")
    models = bool(getattr(scheduler, "prefix_caching", False))  # on by default where it is modelled
    if asked is not None:
        if not models:
            raise UsageError(f"{engine}'s scheduler does not model a prefix cache here: prefix_caching changes "
                             "nothing", param="prefix_caching")  # fmt: skip
        scheduler.prefix_caching = asked  # type: ignore[attr-defined]
        notes.append(f"prefix caching {'on' if asked else 'off'}, as asked")
    if not shared:
        return
    if not getattr(scheduler, "prefix_caching", False):
        why = "it is off" if models else f"{engine}'s scheduler does not model one here"
        raise UsageError(f"a shared prefix changes nothing without a prefix cache, and {why}",
                         param="shared_prefix")  # fmt: skip
    shortest = min(p for p, _ in lengths)
    if shared > shortest:
        raise UsageError(f"shared_prefix {shared:,} is longer than the shortest prompt, {shortest:,} tokens",
                         param="shared_prefix")  # fmt: skip
    grain = getattr(scheduler, "cache_tokens", scheduler.unit_tokens)  # what its cache shares whole
    if shared < grain:
        raise UsageError(f"a shared prefix of {shared:,} tokens fills no block of {grain:,}: "
                         f"{engine}'s prefix cache shares whole blocks only, so it changes nothing",
                         param="shared_prefix")  # fmt: skip
    notes.append(f"every prompt's first {shared:,} tokens shared with the other requests of its group, "
                 f"{load.prefixes:,} group(s), requests assigned in turn")  # fmt: skip


def _arrivals(load: Load, lengths: Sequence[tuple[int, int]]) -> list[Request] | ClosedLoop:
    from kvcalc.calc import simulate as sim

    groups = load.prefixes if load.shared_prefix else 0
    shared = load.shared_prefix
    if load.trace:
        if load.rate is not None or load.concurrency is not None:
            raise UsageError("a trace holds its own arrivals: give no rate or concurrency", param="trace")
        return [sim.Request(i, float(t), p, o, i % groups if groups else -1, shared)
                for i, (t, p, o) in enumerate(sorted(load.trace))]  # fmt: skip
    count = checks.count(load.count, "count", maximum=10_000_000)
    # Lengths and prefix groups each in turn: the mix repeats after lcm(lengths, groups) requests.
    cycle = math.lcm(len(lengths), groups) if groups else len(lengths)
    mix = [sim.Length(*lengths[i % len(lengths)], i % groups if groups else -1, shared) for i in range(cycle)]
    if (load.rate is None) == (load.concurrency is None):
        raise UsageError("give a request rate or a concurrency (closed loop), one of the two", param="rate")
    if load.concurrency is not None:
        return sim.ClosedLoop(mix, checks.count(load.concurrency, "concurrency"), count)
    rate = float(load.rate)  # type: ignore[arg-type]
    if not rate > 0:
        raise UsageError("rate must be over 0 requests a second (inf: all at once)", param="rate")
    if not 0 < load.burstiness <= 100:
        raise UsageError("burstiness must be over 0 (1: Poisson)", param="burstiness")
    return sim.poisson(mix, rate, count, load.seed, load.burstiness)


def _scheduler(model: ModelArg, gpu: str | None, serving: Serving, tp: int, max_model_len: int,
               kv_budget: int | None, revision: str | None, on_fetch: OnFetch, weights: int | None = None,
               batch: int | None = None) -> tuple[Scheduler, int, str, list[str]]:  # fmt: skip
    """The engine's scheduler over the pool fit finds (its own arithmetic: vLLM's blocks); ``batch``
    the slots of an engine that has them (fit's batch: llama-server's -np)."""
    from kvcalc.api._fit import Capacity, fit

    if gpu is None and kv_budget is None:
        raise UsageError("give a GPU (--gpu) or a KV budget (--kv-budget) to size the pool", param="gpu")
    capacity = Capacity(kv_budget=kv_budget, weights=weights, max_model_len=max_model_len)
    report = fit(model, gpu=None if kv_budget is not None else gpu, tokens=max_model_len, batch=batch or 1,
                 serving=serving, layout=Layout(tp=tp), capacity=capacity, verdict=False, revision=revision,
                 on_fetch=on_fetch)  # fmt: skip
    chosen = report.engine
    assert chosen is not None
    if batch is not None and not chosen.has_slots:
        raise UsageError(f"{chosen.name} has no slots: batch sizes llama-server's -np, and changes nothing "
                         "here", param="batch")  # fmt: skip
    gpu_bytes = None
    if gpu is not None:
        from kvcalc.gpus import find_gpu

        gpu_bytes = find_gpu(gpu).runtime_bytes
    scheduler, notes = chosen.scheduler(report.result, max_model_len, gpu_bytes)
    return scheduler, report.result.kv_budget, chosen.name, [*report.notes, *notes]


def _speed_step_time(model: ModelArg, gpu: str | None, serving: Serving, tp: int, notes: list[str],
                     compute: Compute | None = None) -> tuple[StepTime, float]:  # fmt: skip
    from kvcalc.api._speed import step_coster

    if gpu is None:
        raise UsageError("give a GPU (--gpu) for speed's step times, or measured ones (step_times)", param="gpu")
    coster, handling, speed_notes = step_coster(model, gpu=gpu, tp=tp, serving=serving, compute=compute)
    notes.append(f"step times: speed's estimate of each step's mix on {gpu}; {handling * 1e3:g} ms of request "
                 "handling before a request's first step")  # fmt: skip
    notes += [n for n in speed_notes if n.startswith("estimate:")]
    return coster, handling


def _report(model: ModelArg, engine: str, gpu: str | None, load: Load, run: Run, pool_bytes: int, slo: Slo | None,
            notes: list[str]) -> SimulationReport:  # fmt: skip
    from kvcalc.calc import simulate as sim

    done = run.done
    span = run.makespan_s or math.inf
    arriving = max((d.request.arrival_s for d in done), default=0.0)
    e2e = sorted(d.e2e_s for d in done)
    if done and load.trace == () and arriving < 3 * e2e[len(e2e) // 2]:
        notes.append(f"the requests arrive over {arriving:,.1f} s, under 3 x the median request's "
                     f"{e2e[len(e2e) // 2]:,.1f} s: the run is mostly filling and draining, not a steady load; "
                     "give more requests for the steady state")  # fmt: skip
    out = sum(d.request.output for d in done)
    goodput = None if slo is None else sum(1 for d in done if slo.met_by(d)) / span
    if run.refused:
        notes.append(f"{len(run.refused)} request(s) refused: {run.refused[0][1]}")
    return SimulationReport(
        str(model), engine, gpu, load, run, pool_bytes, sim.stats(d.queue_s for d in done),
        sim.stats(d.ttft_s for d in done), sim.stats(t for d in done if (t := d.tpot_s) is not None),
        sim.weighted_stats(run.itl), sim.stats(d.e2e_s for d in done), len(done) / span, out / span, goodput, slo,
        tuple(notes),
    )  # fmt: skip


def parse_slo(text: str) -> Slo:
    """``ttft=1s,tpot=50ms,p=90``: each bound a duration (s or ms), p the percentile (default 90)."""
    from kvcalc.units import parse_duration

    bounds: dict[str, float] = {}
    percentile = 90.0
    for part in text.split(","):
        name, equals, value = part.strip().partition("=")
        name = name.strip().lower()
        if not equals or not value.strip():
            raise UsageError(f"--slo {text!r}: give name=value pairs (ttft=1s,tpot=50ms,p=90)", param="slo")
        if name == "p":
            try:
                percentile = float(value)
            except ValueError:
                percentile = -1.0
            if not 0 < percentile <= 100:
                raise UsageError(f"--slo p={value}: a percentile from 0 to 100", param="slo")
        elif name in SLO_TERMS:
            bounds[name] = parse_duration(value, what=f"--slo {name}")
        else:
            raise UsageError(f"--slo {name}: not one of {', '.join(SLO_TERMS)}, p", param="slo")
    if not bounds:
        raise UsageError(f"--slo {text!r}: bound at least one of {', '.join(SLO_TERMS)}", param="slo")
    return Slo(percentile=percentile, **bounds)


def meets(report: SimulationReport, slo: Slo) -> bool:
    """Whether the run's latencies at the SLO's percentile are within its bounds (refused requests
    fail it)."""
    if report.run.refused or not report.run.done:
        return False
    at = {"ttft": report.ttft, "tpot": report.tpot, "itl": report.itl, "e2e": report.e2e}
    for name in SLO_TERMS:
        bound = getattr(slo, name)
        if bound is not None and _at(at[name], slo.percentile) > bound:
            return False
    return True


def _at(stats: Stats, percentile: float) -> float:
    """The run's value at a percentile from its summary: p50, p90, p99 exactly, others between."""
    from itertools import pairwise

    points = ((50.0, stats.p50), (90.0, stats.p90), (99.0, stats.p99))
    for (low_q, low), (high_q, high) in pairwise(points):
        if percentile <= high_q:
            if percentile <= low_q:
                return low
            return low + (high - low) * (percentile - low_q) / (high_q - low_q)
    return stats.p99


@dataclass(frozen=True)
class CapacityReport:
    """The most load meeting an SLO: ``value`` (requests a second, or clients), the run there and
    the run just beyond it, and what binds beyond it."""

    find: str
    value: float
    at: SimulationReport | None
    beyond: SimulationReport
    binding: str
    slo: Slo
    notes: tuple[str, ...] = ()


# What a stall reason of a scheduler binds, in words.
_BINDS = {"kv": "the KV pool (requests wait for blocks, or are preempted)",
          "seqs": "the engine's cap on requests running at once (its max_num_seqs, running requests or slots)",
          "budget": "compute (the step's token budget is full: requests wait for prefill)",
          "swa": "the sliding-window KV pool (requests wait for its tokens to free)",
          "burst": "the scheduler's decode bursts (multi-step: new requests wait for one to end)"}  # fmt: skip


def find_capacity(model: ModelArg, *, load: Load, slo: Slo, find: str = "rate", **common: object) -> CapacityReport:
    """The highest ``rate`` (requests a second, Poisson) or ``concurrency`` (clients) at which ``load``'s
    requests meet ``slo`` at its percentile, by bisection over repeatable runs (the same seed), with
    the binding constraint named from the run just beyond it: the KV pool, the cap on running requests, or compute.
    ``find`` "gpus": the fewest tensor-parallel GPUs (1, 2, 4, 8) that serve ``load`` within it."""
    from dataclasses import replace

    if find not in ("rate", "concurrency", "gpus"):
        raise UsageError(f"find {find!r}: rate, concurrency or gpus", param="find")
    if find == "gpus":
        return _fewest_gpus(model, load, slo, common)

    def run(value: float) -> SimulationReport:
        shaped = replace(load, rate=value, concurrency=None) if find == "rate" else replace(
            load, concurrency=int(value), rate=None)  # fmt: skip
        return simulate(model, load=shaped, slo=slo, timeline=False, **common)  # type: ignore[arg-type]

    beyond: SimulationReport | None = None
    if find == "rate":
        flood = run(math.inf)
        if meets(flood, slo):
            return CapacityReport(find, math.inf, flood, flood, "nothing: all the requests at once meet the SLO "
                                  f"({load.count:,} requests; more of them may not)", slo)  # fmt: skip
        beyond = flood
        high = max(flood.request_rate * 2, 1e-3)
        low, best = 0.0, None
        for _ in range(14):
            middle = (low + high) / 2
            got = run(middle)
            if meets(got, slo):
                low, best = middle, got
            else:
                high, beyond = middle, got
        value = low
    else:
        low_n, high_n, best = 0, 1, None
        while high_n <= 65536:
            got = run(high_n)
            if not meets(got, slo):
                beyond = got
                break
            low_n, best, high_n = high_n, got, high_n * 2
        assert beyond is not None, "a concurrency of 65,536 clients meets any SLO only with no requests"
        while high_n - low_n > 1:
            middle_n = (low_n + high_n) // 2
            got = run(middle_n)
            if meets(got, slo):
                low_n, best = middle_n, got
            else:
                high_n, beyond = middle_n, got
        value = float(low_n)
    assert beyond is not None
    return CapacityReport(find, value, best, beyond, _binding(beyond), slo)


def _fewest_gpus(model: ModelArg, load: Load, slo: Slo, common: dict[str, object]) -> CapacityReport:
    """The fewest tensor-parallel GPUs of 1, 2, 4, 8 whose run of ``load`` meets ``slo``."""
    if common.get("tp", 1) != 1:
        raise UsageError("find gpus chooses the tensor parallelism: give no tp", param="tp")
    beyond = None
    for tp in (1, 2, 4, 8):
        try:
            got = simulate(model, load=load, slo=slo, timeline=False, **{**common, "tp": tp})  # type: ignore[arg-type]
        except UsageError as exc:
            if "no KV pool" not in str(exc):
                raise
            continue  # the weights leave no cache on so few GPUs
        if meets(got, slo):
            binding = "" if beyond is None else f"at {tp // 2} GPU(s): " + _binding(beyond)
            return CapacityReport("gpus", float(tp), got, beyond or got, binding or "nothing: one GPU serves it", slo)
        beyond = got
    if beyond is None:
        raise UsageError("no KV pool on up to 8 GPUs: the weights leave no cache", param="gpu")
    return CapacityReport("gpus", math.inf, None, beyond, "at 8 GPUs: " + _binding(beyond), slo)


def _binding(report: SimulationReport) -> str:
    stalls = report.run.stalls
    reason = max(stalls, key=lambda k: stalls[k]) if stalls else None
    return _BINDS.get(reason or "", "compute (each step takes longer than the arrivals allow)")
