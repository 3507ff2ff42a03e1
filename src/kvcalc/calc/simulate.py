"""A server under load, step by step: requests arrive, an engine's scheduler builds each step from
its running and waiting requests within its KV pool, the step takes the time its mix of prefill
and decode tokens costs, and each request's queueing, first token, inter-token gaps and end are
recorded. Pure: the requests, the scheduler and the step's cost come in; the timeline goes out.

The scheduler is the engine's own piece (``engines/<engine>/scheduler.py``: vLLM v1's token budget,
chunked prefill and preemption by recompute; llama-server's slots ...); the one here is the ideal
continuous batcher the theoretical engine runs: every waiting request whose prompt fits the pool
joins the next step whole, every running one decodes, and when a request cannot grow the most
recently admitted one is preempted and recomputed later.

Percentiles are numpy's default (linear between closest ranks), as vLLM's and SGLang's serving
benchmarks compute them (``np.percentile``).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

# --- requests and their life in the engine ---------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One request: when it arrives (seconds from the start), its prompt and output tokens; the
    first ``prefix_len`` prompt tokens are the same as every other request's of group ``prefix``
    (-1: none; a system prompt, vLLM bench's prefix_repetition), for an engine's prefix cache."""

    id: int
    arrival_s: float
    prompt: int
    output: int
    prefix: int = -1
    prefix_len: int = 0


@dataclass(eq=False, slots=True)
class Live:
    """A request inside the engine. ``computed``: tokens whose K/V the engine holds (the prompt's
    processed part, then every output token fed back); ``generated``: output tokens sampled. A step
    that feeds the last of ``prompt + generated`` samples one more token."""

    request: Request
    computed: int = 0
    generated: int = 0
    held: int = 0  # pool units it holds (blocks, tokens), the scheduler's to count
    scheduled_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    finished_s: float | None = None
    preemptions: int = 0

    @property
    def tokens(self) -> int:
        """The sequence so far: the prompt and every output token sampled."""
        return self.request.prompt + self.generated


# A step's work: each scheduled request and the tokens it feeds (a prefill chunk, or 1 to decode).
Batch = list[tuple[Live, int]]


@dataclass(frozen=True)
class StepShape:
    """What a step's time depends on: the tokens fed, the positions they attend (the K/V read and
    the attention work), the sequences in it, and how many are prefill chunks."""

    tokens: int
    attended: int
    sequences: int
    prefill_tokens: int
    context: int  # cached tokens the step's sequences read (their K/V), new ones included
    decode_context: int = 0  # of those, the decoding sequences'


# A step's seconds for its shape (the speed model's, or times measured on a real server).
StepTime = Callable[[StepShape], float]


def shape_of(batch: Batch) -> StepShape:
    tokens = attended = prefill = context = decoding = decoders = read = 0
    for live, n in batch:
        computed = live.computed
        if n == 1 and computed >= live.request.prompt:  # decoding (the hot path): a token attending c + 1
            read += computed + 1
            decoders += 1
            continue
        tokens += n
        # A chunk of n tokens after c held attends c + 1 ... c + n positions; it reads c + n.
        attended += n * computed + n * (n + 1) // 2
        context += computed + n
        if n > 1 or computed < live.request.prompt:
            prefill += n
        else:
            decoding += computed + 1
    return StepShape(tokens + decoders, attended + read, len(batch), prefill, context + read, decoding + read)


class Scheduler(Protocol):
    """An engine's scheduler over its pool. ``admit`` takes an arrived request into its queue;
    ``schedule`` builds the next step (preempting where the pool runs out) and says why it left
    any waiting request out; ``release`` frees a finished request's pool units."""

    pool_units: int  # the pool, in the scheduler's units
    unit_tokens: int
    preemptions: int

    def admit(self, live: Live) -> None: ...

    def schedule(self) -> tuple[Batch, str | None]: ...

    def release(self, live: Live) -> None: ...

    def running(self) -> int: ...

    def waiting(self) -> int: ...

    def used_units(self) -> int: ...

    def refused(self, request: Request) -> str | None: ...

    # Optional, for speed (``_fast_forward``): ``steady()`` the running requests, how many steps of
    # pure decoding they can take with nothing else changing, none ending (the step that ends one
    # runs the usual way), and why a waiting request stays out (None: not now); ``advanced(lives,
    # k)`` takes the pool units those k steps used.


# --- the ideal continuous batcher ------------------------------------------------------------------


class IdealBatcher:
    """The theoretical engine's scheduler: a pool of ``pool_tokens`` tokens; every running request
    decodes each step; waiting requests join whole (their prompt in one step), first come first
    served, while the pool holds their prompt; a request that cannot grow preempts the most recently
    admitted one (its cache dropped, recomputed when it is back). No cap on sequences, and by
    default no token budget: the best any engine can do with this pool.

    With ``token_budget`` (an in-flight batcher's tokens a step, TensorRT-LLM's ``max_num_tokens``):
    the running requests' decodes come first, then prompts in chunks of what the step leaves
    (chunked context), a running prompt's next chunk before a waiting one's first; a request still
    joins only where the pool holds its whole prompt."""

    def __init__(self, pool_tokens: int, token_budget: int | None = None) -> None:
        if token_budget is not None and token_budget < 1:
            raise ValueError("a token budget is at least 1 token a step")
        self.pool_units = pool_tokens
        self._budget = token_budget
        self.unit_tokens = 1
        self.preemptions = 0
        self._running: list[Live] = []
        self._waiting: deque[Live] = deque()
        self._used = 0

    def refused(self, request: Request) -> str | None:
        need = request.prompt + request.output - 1
        return (
            f"needs {need:,} tokens of cache, more than the pool's {self.pool_units:,}"
            if need > self.pool_units
            else None
        )

    def admit(self, live: Live) -> None:
        self._waiting.append(live)

    def running(self) -> int:
        return len(self._running)

    def waiting(self) -> int:
        return len(self._waiting)

    def used_units(self) -> int:
        return self._used

    def release(self, live: Live) -> None:
        self._used -= live.held
        live.held = 0
        self._running.remove(live)

    def schedule(self) -> tuple[Batch, str | None]:
        batch: Batch = []
        budget = math.inf if self._budget is None else self._budget
        decoding = [live for live in self._running if live.tokens - live.computed == 1]
        chunking = [live for live in self._running if live.tokens - live.computed > 1]
        for live in decoding:
            if live not in self._running:
                continue  # preempted below by an earlier one
            if budget < 1:
                break
            grow = live.computed + 1 - live.held
            while self._used + grow > self.pool_units and self._running[-1] is not live:
                self._preempt(self._running[-1])
            if self._used + grow > self.pool_units:
                self._preempt(live)
                continue
            live.held += grow
            self._used += grow
            batch.append((live, 1))
            budget -= 1
        for live in chunking:  # their whole prompt is held since they joined
            if live in self._running and budget >= 1:
                n = int(min(live.tokens - live.computed, budget))
                batch.append((live, n))
                budget -= n
        reason = None
        while self._waiting:
            live = self._waiting[0]
            need = live.tokens - live.computed
            if self._used + need > self.pool_units:
                reason = "kv"
                break
            if budget < 1:
                reason = "budget"
                break
            self._waiting.popleft()
            live.held += need
            self._used += need
            self._running.append(live)
            n = int(min(need, budget))
            batch.append((live, n))
            budget -= n
        return batch, reason

    def _preempt(self, live: Live) -> None:
        self._running.remove(live)
        self._used -= live.held
        live.held = live.computed = 0
        live.preemptions += 1
        self.preemptions += 1
        self._waiting.appendleft(live)

    def steady(self) -> tuple[list[Live], int, str | None] | None:
        """Every running request decoding and no waiting one fitting: k steps while the pool holds
        k more tokens for each."""
        if not self._running or any(live.tokens - live.computed != 1 for live in self._running):
            return None
        if self._budget is not None and len(self._running) > self._budget:
            return None  # not every running request decodes each step
        stall = None
        if self._waiting:
            head = self._waiting[0]
            stall = "kv"
            if self._budget is not None and len(self._running) >= self._budget:
                stall = "budget"  # no token of the step is left for it, however long
            elif self._used + len(self._running) + head.tokens - head.computed <= self.pool_units:
                return None  # it would join the next step
        k = (self.pool_units - self._used) // len(self._running)
        k = min(k, min(live.request.output - live.generated for live in self._running) - 1)
        return list(self._running), k, stall

    def advanced(self, lives: list[Live], k: int) -> None:
        for live in lives:
            live.held += k
        self._used += k * len(lives)


# --- arrivals ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Length:
    """A request's prompt and output tokens, and its shared prefix (group, tokens; as Request's)."""

    prompt: int
    output: int
    prefix: int = -1
    prefix_len: int = 0


def poisson(lengths: Sequence[Length], rate: float, count: int, seed: int, burstiness: float = 1.0) -> list[Request]:
    """``count`` requests at ``rate`` per second, gaps drawn from a gamma distribution of shape
    ``burstiness`` (1: Poisson; below 1 burstier), as vLLM's ``bench serve --burstiness`` draws
    them; lengths taken in turn. ``rate`` inf: all at once."""
    draw = random.Random(seed)
    now = 0.0
    found = []
    for index in range(count):
        if index and math.isfinite(rate):
            now += draw.gammavariate(burstiness, 1.0 / (rate * burstiness))
        length = lengths[index % len(lengths)]
        found.append(Request(index, now, length.prompt, length.output, length.prefix, length.prefix_len))
    return found


# --- the run ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """The engine at one step: its start, running and waiting requests, pool units in use, the
    preemptions so far, the tokens the step fed."""

    time_s: float
    running: int
    waiting: int
    used_units: int
    preemptions: int
    tokens: int


@dataclass(frozen=True)
class Done:
    """A finished request's timeline (seconds from the start of the run)."""

    request: Request
    scheduled_s: float
    first_token_s: float
    finished_s: float
    preemptions: int

    @property
    def queue_s(self) -> float:
        return self.scheduled_s - self.request.arrival_s

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.request.arrival_s

    @property
    def e2e_s(self) -> float:
        return self.finished_s - self.request.arrival_s

    @property
    def tpot_s(self) -> float | None:
        """(end - first token) / (output - 1), as vLLM's benchmark defines it; None for one token."""
        if self.request.output <= 1:
            return None
        return (self.finished_s - self.first_token_s) / (self.request.output - 1)


@dataclass(frozen=True)
class Run:
    """A simulated run: each finished request, the requests refused (too long for the pool), the
    engine sampled at every step, the number of steps and the reasons admission stalled."""

    done: tuple[Done, ...]
    refused: tuple[tuple[Request, str], ...]
    samples: tuple[Sample, ...]
    steps: int
    preemptions: int
    stalls: dict[str, int]
    pool_units: int
    unit_tokens: int
    makespan_s: float
    peak_running: int = 0
    peak_waiting: int = 0
    peak_used: int = 0
    # Inter-token gaps: (seconds, how many) pairs (a decode step's time, once for each sequence in it).
    itl: tuple[tuple[float, int], ...] = ()


class ClosedLoop:
    """``users`` clients, each sending its next request the moment its last one ends; lengths in
    turn, ``count`` requests in all."""

    def __init__(self, lengths: Sequence[Length], users: int, count: int) -> None:
        self.lengths = lengths
        self.count = count
        self.sent = 0
        self.users = users

    def first(self) -> list[Request]:
        return [self._next(0.0) for _ in range(min(self.users, self.count))]

    def after(self, finished_s: float) -> Request | None:
        return self._next(finished_s) if self.sent < self.count else None

    def _next(self, now: float) -> Request:
        length = self.lengths[self.sent % len(self.lengths)]
        request = Request(self.sent, now, length.prompt, length.output, length.prefix, length.prefix_len)
        self.sent += 1
        return request


class ShapeCache:
    """A step time remembered by its shape: a run's steps repeat their shapes (the same lengths reach
    the same contexts; a slot decodes alone through the same ones request after request), and a
    step's time is a function of its shape alone. At most ``size`` shapes, then it starts over."""

    def __init__(self, step_time: StepTime, size: int = 1 << 16) -> None:
        self._step_time = step_time
        self._size = size
        self._seconds: dict[StepShape, float] = {}

    def __call__(self, shape: StepShape) -> float:
        seconds = self._seconds.get(shape)
        if seconds is None:
            if len(self._seconds) >= self._size:
                self._seconds.clear()
            seconds = self._seconds[shape] = self._step_time(shape)
        return seconds


def simulate(
    arrivals: Sequence[Request] | ClosedLoop,
    scheduler: Scheduler,
    step_time: StepTime,
    *,
    timeline: bool = True,
    handling_s: float = 0.0,
    max_steps: int = 50_000_000,
) -> Run:
    """Run the requests through the scheduler, one step at a time, until every one has finished.
    ``handling_s``: the server's time with a request before its scheduler sees it (the API server:
    parsing, tokenizing), counted in its queue and first token."""
    closed = arrivals if isinstance(arrivals, ClosedLoop) else None
    timed = ShapeCache(step_time)
    pending: list[tuple[float, int, Request]] = []
    first = closed.first() if closed is not None else list(arrivals)  # type: ignore[arg-type]
    for request in first:
        heapq.heappush(pending, (request.arrival_s + handling_s, request.id, request))
    now = 0.0
    done: list[Done] = []
    refused: list[tuple[Request, str]] = []
    samples: list[Sample] = []
    stalls: dict[str, int] = {}
    steps = 0
    peaks = [0, 0, 0]
    itl: list[tuple[float, int]] = []
    while pending or scheduler.running() or scheduler.waiting():
        while pending and pending[0][0] <= now:
            request = heapq.heappop(pending)[2]
            why = scheduler.refused(request)
            if why is not None:
                refused.append((request, why))
                _next_of(closed, now, pending, handling_s)
                continue
            scheduler.admit(Live(request))
        ahead = _fast_forward(scheduler, timed, now, pending[0][0] if pending else math.inf)
        if ahead is not None:
            advanced, seconds, durations, stall = ahead
            if stall is not None:
                stalls[stall] = stalls.get(stall, 0) + advanced
            if timeline:
                samples.append(Sample(now, scheduler.running(), scheduler.waiting(), scheduler.used_units(),
                                      scheduler.preemptions, scheduler.running()))  # fmt: skip
            steps += advanced
            now += seconds
            itl += durations
            peaks[2] = max(peaks[2], scheduler.used_units())
            continue
        batch, stall = scheduler.schedule()
        if stall is not None:
            stalls[stall] = stalls.get(stall, 0) + 1
        if not batch:
            if not pending:
                break  # nothing runs and nothing can: the scheduler holds what never fits
            now = max(now, pending[0][0])
            continue
        steps += 1
        if steps > max_steps:
            raise RuntimeError("the run did not end within its step limit")
        shape = shape_of(batch)
        running, waiting, used = scheduler.running(), scheduler.waiting(), scheduler.used_units()
        peaks = [max(peaks[0], running), max(peaks[1], waiting), max(peaks[2], used)]
        if timeline:
            samples.append(Sample(now, running, waiting, used, scheduler.preemptions, shape.tokens))
        start = now
        now += timed(shape)
        decoded = 0
        for live, n in batch:
            request, generated = live.request, live.generated + 1
            if n == 1 and live.last_token_s == start and live.computed + n == request.prompt + generated - 1:
                # The hot path: a decode right after its last token (its gap is this step's time).
                live.computed += 1
                live.generated = generated
                decoded += 1
                live.last_token_s = now
                if generated < request.output:
                    continue
            else:
                if live.scheduled_s is None:
                    live.scheduled_s = start
                live.computed += n
                if live.computed < live.tokens:
                    continue  # a prefill chunk short of the sequence's end samples nothing
                live.generated += 1
                if live.first_token_s is None:
                    live.first_token_s = now
                elif live.last_token_s is not None:
                    if live.last_token_s == start:
                        decoded += 1  # its gap is this step's time
                    else:
                        itl.append((now - live.last_token_s, 1))  # back after a wait (a preemption)
                live.last_token_s = now
            if live.generated >= live.request.output:
                live.finished_s = now
                scheduler.release(live)
                done.append(_done(live))
                _next_of(closed, now, pending, handling_s)
        if decoded:
            itl.append((now - start, decoded))
    return Run(tuple(done), tuple(refused), tuple(samples), steps, scheduler.preemptions, stalls,
               scheduler.pool_units, scheduler.unit_tokens, now, peaks[0], peaks[1], peaks[2], tuple(itl))  # fmt: skip


def _fast_forward(
    scheduler: Scheduler, step_time: StepTime, now: float, next_arrival: float
) -> tuple[int, float, list[tuple[float, int]], str | None] | None:
    """Steps of pure decoding taken at once where nothing can change the batch: the scheduler says
    it is steady (every running request decoding, none waiting that could join, blocks for k more
    tokens each), no request ends (the step that ends one runs the usual way) and no arrival comes
    before a step starts. Each step's time is interpolated between the first's and the last's (the
    context grows by one token a sequence a step: speed's time is linear in it, or nearly). None
    when fewer than two steps qualify."""
    steady = getattr(scheduler, "steady", None)
    found: tuple[list[Live], int, str | None] | None = steady() if steady is not None else None
    if found is None:
        return None
    lives, k, stall = found
    if k < 2:
        return None
    context = 0
    for live in lives:
        if live.last_token_s != now:
            return None  # one was left out of the last step: its gap is not this step's time
        context += live.computed + 1
    r = len(lives)
    first = step_time(StepShape(r, context, r, 0, context, context))

    def starts(j: int, last: float) -> float:  # when step j (0-based) starts, from now
        return j * first + (last - first) / max(k - 1, 1) * j * (j - 1) / 2

    grown = context + r * (k - 1)
    last = step_time(StepShape(r, grown, r, 0, grown, grown))
    if now + starts(k - 1, last) >= next_arrival:  # an arrival comes first: only the steps before it
        low, high = 0, k - 1
        while low < high:
            middle = (low + high + 1) // 2
            if now + starts(middle, last) < next_arrival:
                low = middle
            else:
                high = middle - 1
        k = low + 1
        if k < 2:
            return None
        grown = context + r * (k - 1)
        last = step_time(StepShape(r, grown, r, 0, grown, grown))
    durations = [(first + (last - first) * j / (k - 1), r) for j in range(k)]
    seconds = math.fsum(d for d, _ in durations)
    for live in lives:
        live.computed += k
        live.generated += k
        live.last_token_s = now + seconds
    scheduler.advanced(lives, k)  # type: ignore[attr-defined]
    return k, seconds, durations, stall


def _next_of(closed: ClosedLoop | None, now: float, pending: list[tuple[float, int, Request]],
             handling_s: float) -> None:  # fmt: skip
    if closed is None:
        return
    request = closed.after(now)
    if request is not None:
        heapq.heappush(pending, (request.arrival_s + handling_s, request.id, request))


def _done(live: Live) -> Done:
    assert live.scheduled_s is not None and live.first_token_s is not None and live.finished_s is not None
    return Done(live.request, live.scheduled_s, live.first_token_s, live.finished_s, live.preemptions)


# --- summaries ----------------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """numpy's default percentile (linear between the closest ranks) of sorted ``values``."""
    if not values:
        return math.nan
    position = (len(values) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (position - low)


@dataclass(frozen=True)
class Stats:
    """Mean, p50, p90, p99 of one latency (seconds), over ``count`` values."""

    mean: float
    p50: float
    p90: float
    p99: float
    count: int


def stats(values: Iterable[float]) -> Stats:
    ordered = sorted(values)
    if not ordered:
        return Stats(math.nan, math.nan, math.nan, math.nan, 0)
    return Stats(math.fsum(ordered) / len(ordered), percentile(ordered, 50), percentile(ordered, 90),
                 percentile(ordered, 99), len(ordered))  # fmt: skip


def weighted_stats(pairs: Sequence[tuple[float, int]]) -> Stats:
    """Stats of values given as (value, how many times) pairs (inter-token gaps: a step's time,
    once for each sequence it decoded), percentiles as numpy's over the values spelled out."""
    total = sum(w for _, w in pairs)
    if not total:
        return Stats(math.nan, math.nan, math.nan, math.nan, 0)
    ordered = sorted(pairs)
    mean = math.fsum(v * w for v, w in ordered) / total
    ranks = [(total - 1) * q / 100 for q in (50, 90, 99)]
    found = [_value_at(ordered, r) for r in ranks]
    return Stats(mean, found[0], found[1], found[2], total)


def _value_at(ordered: Sequence[tuple[float, int]], rank: float) -> float:
    low = math.floor(rank)
    values: list[float] = []
    seen = 0
    for value, weight in ordered:
        while seen + weight > low and len(values) < 2:
            values.append(value)
            low += 1
        seen += weight
        if len(values) == 2:
            break
    if len(values) < 2:
        values.append(values[-1] if values else ordered[-1][0])
    return values[0] + (values[1] - values[0]) * (rank - math.floor(rank))
