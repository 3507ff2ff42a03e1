"""`kvcalc simulate` against published serving benchmarks measured under load.

Every source of benchmarks/data/serving_measurements.yaml is one setup (engine and version, GPU,
TP, model, lengths) with several loads; each load is run through the simulator as ``api.simulate``
runs it (the engine's scheduler over fit's pool, speed's step costs for each step's mix, the
engine's request handling before the first step) and its latencies compared with the ones the
source prints, statistic for statistic (median to p50, mean to mean, p99 to p99; a figure printed
without its statistic, ``unstated``, to the mean, and marked ``~``). How each load becomes a run:

- ``max_concurrency`` N: a closed loop of N clients (``Load(concurrency=N)``), also where the source
  sets ``request_rate`` inf beside it (the benchmark clients then send the next request when one
  ends); ``request_rate`` R alone: Poisson arrivals at R a second (inf: all at once);
- ``num_prompts`` requests, at most COUNT_CAP (a longer run changes the percentiles little and
  costs seconds); where the source prints no count, COUNT_DEFAULT x the concurrency, capped;
- lengths fixed as the dataset states (``input_len``/``output_len`` or the ``_from_totals`` ones);
  ShareGPT runs at its means, SHAREGPT below; the RTX 4090 source's 128 is a cap, and the output
  is its own printed output tok/s over req/s at each load (about 100); where the source's client draws
  the lengths (``range_ratio`` r: InferenceX's ``--random-range-ratio 0.8``), each request its own
  prompt and output uniform over [int(r x L), L], from a fixed seed (``drawn_lengths``);
- engines: vLLM and SGLang as themselves, with the source's release where kvcalc models it (else
  the current one, named in the notes); NIM (TensorRT-LLM inside) as ``theoretical``, as
  benchmarks/speed.py runs it, with its FP8 KV cache.

Points kvcalc cannot run (no preset for the model, lengths not printed) are listed as skipped with
the reason. Low load: concurrency <= 4 or rate <= 2 a second; beside the simulator, the same points
through ``kvcalc speed`` alone (handed the concurrency as its batch).

Sources, not points, are split in two by a hash of their id, as benchmarks/speed.py splits its
points: ``--fit`` fits the request handling before the first step (``handling_s``, one figure for
every engine) and a factor on every step's time on the fit half only, and reports both halves.

What it finds (unfitted, as shipped; median |ln(simulated / measured)|, held-out TTFT / TPOT for salts
"", 1, 2, 3, then every point):

- before issue 40's scheduler work here: 0.52 / 0.10, 0.35 / 0.16, 0.72 / 0.10, 0.98 / 0.12; every
  point TTFT 0.94, TPOT 0.12;
- vLLM 0.6's sources through V0's scheduler (``flags: engine: V0``: prefills first and whole, decodes
  paused; ``num_scheduler_steps`` 10, a new request waits for the decode burst to end;
  engines/vllm/scheduler.py VllmV0Scheduler over the current release's blocks, V0's
  max_num_batched_tokens max(max_model_len, 2048) and 256 sequences): their TTFT from 0.19-0.34 of the
  measured to 0.63-0.84 of it, TPOT from 0.72-0.90 to 0.80-0.93; every point TTFT 0.64, TPOT 0.11. Both sources fall in
  the fit half under all four salts, so no held-out figure moves;
- NIM through the ideal batcher with TensorRT-LLM's token budget (``engine_defaults: max_num_tokens
  8192``, ``--max-num-tokens``; prompts chunked after the decodes): TTFT at concurrency 5 / 25 / 50 /
  100 from 4.0 / 15.7 / 26 / 4.8x the measured to 1.8 / 2.8 / 4.0 / 1.7x; salt 3's held-out TTFT 0.98
  -> 0.83, every point TTFT 0.56, TPOT 0.11. Held-out now: 0.52 / 0.10, 0.35 / 0.16, 0.72 / 0.10,
  0.83 / 0.12 (salt "": 11 TTFT points, 0.37 under load, 0.52 on its one low-load point);
- nine more sources (issue 40's B2: 23 in all, 18 runnable, 62 TTFT and 51 TPOT points, from 36 and 21):
  held-out TTFT / TPOT for salts "", 1, 2, 3 0.65 / 0.10, 0.43 / 0.15, 0.90 / 0.11, 0.80 / 0.11 (salt "":
  36 TTFT points, 0.67 under load); fit half 0.79 / 0.11, 0.77 / 0.10, 0.43 / 0.12, 0.52 / 0.13 (from
  0.68 / 0.12, 0.59 / 0.10, 0.35 / 0.15, 0.25 / 0.10); every point TTFT 0.68, TPOT 0.11. What they show:
  TPOT mostly holds (0.75-1.1x on SGLang's DeepSeek-R1 sweeps, gpt-oss-120b on MI300X, Qwen3-Next on
  vLLM 0.11; MI325X at concurrency 4-8 0.56-0.72x); TTFT grows past the measured with concurrency for
  DeepSeek-R1 on H200 (8k prompts 1.5x at 4 to 3.7x at 32, 1k prompts 0.72x at 4 to 2.3x at 64) and
  MI325X (8k, 0.60x at 4 to 3.4x at 64), yet is 0.35-0.53x on B200's 1k prompts at 16-64 and 0.15x for
  Qwen3-Next's 128-token prompts at 64; the two old releases kvcalc does not model (SGLang 0.3.0
  with Llama-3.1-405B FP8 at 16 req/s, vLLM 0.7.0's V1 with DeepSeek-R1 at 4 req/s, which served
  2.11) are run as today's engines, far faster than measured (TPOT 0.29x and 0.06x). The simulator
  was not changed for them; ``CHECK``'s TTFT went from 0.6 to 0.75 with the held-out median it now
  holds.
- InferenceX's five SGLang DeepSeek-R1 sources run with the lengths their client draws (issue 40's
  T2; ``range_ratio: 0.8``, cited in the YAML) instead of fixed ones: with every request alike, the
  closed loop's clients started together, decoded together and came back together, so each round's
  8k prompts queued behind one another (H200 8k at 32 clients: 32 prefills of 224 ms, mean TTFT 3.6 s
  against 0.98 s measured); drawn, the clients spread out and the TTFT's growth with concurrency is
  the measured one (H200 8k at 4 / 8 / 16 / 32 / 64 clients: 1.51 / 2.06 / 2.77 / 3.69 / 3.10x -> 0.65 /
  0.59 / 0.57 / 0.60 / 0.73x; MI325X 8k 0.60-3.35x -> 0.24-0.81x; H200 1k (0.5.12) 0.72-2.31x ->
  0.37-0.66x; B200 1k 0.21-0.53x -> 0.11-0.21x), TPOT about as before. The medians move away from the
  goal, because the lockstep had hidden how much shorter the simulated TTFT is than the measured one
  with no queue at all (B200 at one client: 34 ms simulated, 160 ms measured; H200 1k at 4: 61 against
  158): held-out TTFT / TPOT for salts "", 1, 2, 3 0.91 / 0.11, 0.87 / 0.11, 1.10 / 0.11, 0.80 / 0.11;
  fit half 0.79 / 0.11, 0.90 / 0.11, 0.51 / 0.11, 1.28 / 0.14; every point TTFT 0.88, TPOT 0.11.
  ``CHECK``'s TTFT follows to 1.0 (salt "": 0.91 held-out). What is left there is no scheduling: a
  request's own prefill and handling (speed's DeepSeek MLA prefill on TP 8 and SGLang's per-request
  costs, vLLM's fitted ones assumed) are short of the measured by about 100 ms; and two server flags
  InferenceX sets that the simulator did not model (next item).
- The sources' scheduler flags passed (issue 40's U; the YAML's ``flags``, cited in its ``flags_note``,
  read by ``scheduler_knobs``): B200's ``--scheduler-recv-interval`` 10, 30 from 16 clients
  (InferenceX's benchmarks/single_node/dsr1_fp8_b200.sh at the run's date): SGLang reads new requests
  only every that many decode steps (and after each prefill; scheduler_components/recv_skipper.py),
  so a request that arrives meanwhile waits; its TTFT at 2 / 8 / 16 / 32 / 64 clients 0.20 / 0.18 /
  0.15 / 0.15 / 0.11x -> 0.30 / 0.31 / 0.59 / 0.65 / 0.36x the measured (one client: the scheduler is
  idle when the request comes, 0.21x as before), TPOT about as before. MI325X's
  ``--num-continuous-decode-steps 4`` is recorded but not passed: SGLang 0.5.23 declares it and no
  code reads it (kvcalc has no flag for it). Held-out TTFT / TPOT for salts "", 1, 2, 3 0.91 / 0.11
  -> 0.84 / 0.10, 0.87 / 0.11 (B200 in the fit half: 0.90 / 0.11 -> 0.68 / 0.11 there), 1.10 / 0.11
  -> 1.02 / 0.10, 0.80 / 0.11 (fit half 1.28 / 0.14 -> 0.94 / 0.11); every point TTFT 0.88 -> 0.84,
  TPOT 0.11.

Issue 40's TTFT goal (0.3) is still missed. What is left: NIM's clients at concurrency 5 to 50 start
together in the simulator and stay in lockstep (each 5,000-token prompt queued behind the others'
chunks), 1.8-4x the measured; its TTFT past concurrency 100 reads as a cap on running requests
(throughput flat at 920 tok/s) that the page does not print; a cold first request at concurrency 1
on B200 (362 ms against 14 simulated) and a 2.5 s TTFT at concurrency 4 on Modal, which the sources
do not show to be cold (no warm-up stated is not a warm-up shown missing), so they stay in;
``kvcalc speed`` alone at low load: TTFT 1.08, TPOT 0.34 (1.96 and 0.12 before the nine sources).
``--fit`` (step times x 1.15, handling to its 20 ms limit) chased the fit half's outliers before and
is not kept.

    python benchmarks/serving.py            # table of every compared figure and the summary
    python benchmarks/serving.py --fit      # fit on the fit half first, report both halves
    python benchmarks/serving.py --check    # exit 1 when a held-out median exceeds its threshold
"""

from __future__ import annotations

import argparse
import hashlib
import math
import random
import statistics
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from kvcalc import api
from kvcalc.api import _simulate as api_sim
from kvcalc.calc import simulate as sim
from kvcalc.engines.vllm.scheduler import VllmScheduler, VllmV0Scheduler
from kvcalc.errors import KvcalcError
from kvcalc.inputs.presets import find_preset

DATA = Path(__file__).parent / "data" / "serving_measurements.yaml"
ENGINES = {"vllm": "vllm", "sglang": "sglang", "nim": "theoretical"}
COUNT_CAP = 300
COUNT_DEFAULT = 10
# ShareGPT through bench_serving with the Llama-3 tokenizer: sglang issue 2805 prints 369,103 input
# and 326,408 generated tokens over 1,648 requests (224 and 198 a request,
# https://github.com/sgl-project/sglang/issues/2805, SGLang 0.4.0.post2, Llama-3.1-8B-Instruct). The
# output here is the sources' own all-at-once output tok/s over req/s (4281.51 / 22.03 = 194).
SHAREGPT = (224, 194)
# The seed of a random dataset's drawn lengths (``range_ratio`` below 1): any fixed one, for a deterministic run.
LENGTHS_SEED = 0
# The thresholds --check holds the held-out half to (median |ln(simulated / measured)|), set at what
# the simulator achieves today with a margin, NOT issue 40's goals (0.3 TTFT, 0.15 TPOT, 0.2 at low
# load), which it misses: see the summary's "goal" column.
CHECK = {"ttft": 1.0, "tpot": 0.15}
GOALS = {"ttft": 0.3, "tpot": 0.15, "low": 0.2}


@dataclass(frozen=True, eq=False)  # hashed by identity: run() caches by point
class Point:
    source: dict[str, Any]
    index: int
    salt: str = ""

    @property
    def raw(self) -> dict[str, Any]:
        return dict(self.source["points"][self.index])

    @property
    def id(self) -> str:
        load = self.raw["load"]
        if "max_concurrency" in load:
            return f"c={load['max_concurrency']}"
        return f"rate={load['request_rate']}"

    @property
    def half(self) -> str:
        digest = hashlib.sha256((self.salt + str(self.source["id"])).encode()).digest()
        return "fit" if digest[0] % 2 == 0 else "held-out"

    @property
    def low_load(self) -> bool:
        load = self.raw["load"]
        if "max_concurrency" in load:
            return int(load["max_concurrency"]) <= 4
        rate = float(load["request_rate"])
        return rate <= 2

    @property
    def concurrency(self) -> int | None:
        load = self.raw["load"]
        return int(load["max_concurrency"]) if "max_concurrency" in load else None

    @property
    def rate(self) -> float:
        return float(self.raw["load"].get("request_rate", "inf"))


def skip_reason(source: dict[str, Any]) -> str | None:
    """Why kvcalc cannot run a source, or None."""
    if find_preset(str(source["model"])) is None:
        return f"no kvcalc preset for {source['model']} (a Hub id; no config in the repository)"
    if _lengths(source, None) is None:
        return f"prompt/output lengths of the {source['dataset']['name']} dataset not printed"
    if source["engine"] not in ENGINES:
        return f"engine {source['engine']} has no kvcalc counterpart"
    return None


def _lengths(source: dict[str, Any], point: dict[str, Any] | None) -> tuple[int, int] | None:
    dataset = source["dataset"]
    if dataset["name"] == "sharegpt":
        return SHAREGPT
    prompt = dataset.get("input_len") or dataset.get("input_len_from_totals")
    output = dataset.get("output_len") or dataset.get("output_len_from_totals")
    if prompt is None or output is None:
        return None
    if dataset.get("fixed") is False and point is not None and dataset.get("range_ratio") is None:
        # a cap: the source's own tokens a request (a range_ratio draws the lengths instead: load_of)
        m = point["metrics"]
        if "output_throughput_tok_s" in m and "request_throughput_req_s" in m:
            output = round(m["output_throughput_tok_s"] / m["request_throughput_req_s"])
    return int(prompt), int(output)


def points(salt: str = "") -> tuple[list[Point], list[tuple[dict[str, Any], str]]]:
    runnable, skipped = [], []
    for source in yaml.safe_load(DATA.read_text()):
        why = skip_reason(source)
        if why is not None:
            skipped.append((source, why))
            continue
        runnable.extend(Point(source, i, salt) for i in range(len(source["points"])))
    return runnable, skipped


# --- the run -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Knobs:
    """What a fit moves: the request handling before the first step (None: the engine's own,
    StepOverhead.request_s) and a factor on every step's time."""

    handling_s: float | None = None
    step_scale: float = 1.0


@dataclass(frozen=True)
class Setup:
    model: str
    engine: str
    gpu: str
    tp: int
    kv_dtype: str | None
    compute: api.Compute | None
    notes: tuple[str, ...]
    options: tuple[tuple[str, int], ...] = ()  # the engine's knobs, from the source's engine_defaults
    v0_steps: int | None = None  # vLLM V0 (no chunked prefill) with this many scheduler steps


@cache
def _setup(source_id: str) -> Setup:
    source = next(s for s in yaml.safe_load(DATA.read_text()) if s["id"] == source_id)
    engine = ENGINES[source["engine"]]
    notes = []
    version = str(source.get("engine_version", "")).split(" ")[0]
    if engine != "theoretical" and version[:1].isdigit():
        try:
            api.speed(source["model"], prompt=1, output=2, gpu=source["gpu"], engine=f"{engine}@{version}", sweep=[])
            engine = f"{engine}@{version}"
        except KvcalcError as error:
            notes.append(f"{engine}@{version} not modelled ({error}): the current release")
    kv_dtype = "fp8" if source["engine"] == "nim" and source.get("quantization") == "fp8" else None
    compute = None
    preset = find_preset(str(source["model"]))
    if source.get("quantization") == "fp8" and preset is not None and preset.parameters and \
            preset.weights is not None and preset.weights.format.startswith("bf16"):  # fmt: skip
        # An FP8 checkpoint of a bf16 preset: one byte a parameter, as benchmarks/speed.py weighs them.
        compute = api.Compute(weights_format="fp8", weights=preset.parameters)
        notes.append(f"{source['id']}: FP8 weights, {preset.parameters:,} bytes (one a parameter)")
    # The engine's own defaults the source states or its documentation gives (engine_defaults in the YAML,
    # cited there), as kvcalc knobs: TensorRT-LLM's max_num_tokens for NIM.
    options = tuple(sorted((str(k), int(v)) for k, v in (source.get("engine_defaults") or {}).items()))
    flags = source.get("flags") or {}
    v0_steps = None
    if flags.get("engine") == "V0":
        v0_steps = int(flags.get("num_scheduler_steps", 1))
        notes.append(f"{source['id']}: vLLM V0's scheduler (prefills first, whole; {v0_steps} scheduler steps a "
                     "decode burst) over the current release's blocks and step costs")  # fmt: skip
    return Setup(str(source["model"]), engine, str(source["gpu"]), int(source["tp"]), kv_dtype, compute,
                 tuple(notes), options, v0_steps)  # fmt: skip


@cache
def _coster(source_id: str) -> tuple[Any, float]:
    s = _setup(source_id)
    serving = api.Serving(s.engine, kv_dtype=s.kv_dtype, options=dict(s.options))
    timer, handling = api_sim._speed_step_time(s.model, s.gpu, serving, s.tp, [], s.compute)
    return timer, handling


def drawn_lengths(prompt: int, output: int, ratio: float, count: int) -> list[tuple[int, int]]:
    """A random dataset's lengths as its client draws them with ``--random-range-ratio`` r: each
    prompt and each output uniform over [int(L x r), L] (InferenceX's utils/bench_serving/
    benchmark_serving.py sample_uniform: np.random.randint(int(seq_len * range_ratio), seq_len + 1)),
    ``count`` pairs from a fixed seed (the client's own draws are not printed)."""
    rng = random.Random(LENGTHS_SEED)
    low_p, low_o = int(prompt * ratio), int(output * ratio)
    return [(rng.randint(low_p, prompt), rng.randint(low_o, output)) for _ in range(count)]


def load_of(point: Point) -> api.Load:
    prompt, output = _lengths(point.source, point.raw)  # type: ignore[misc]
    printed = point.raw.get("num_prompts")
    c = point.concurrency
    count = int(printed) if printed else COUNT_DEFAULT * (c or 20)
    count = min(count, COUNT_CAP)
    ratio = point.source["dataset"].get("range_ratio")
    if ratio is not None and float(ratio) < 1:  # lengths drawn, not fixed: each request its own
        lengths = tuple(drawn_lengths(prompt, output, float(ratio), count))
        if c is not None:
            return api.Load(concurrency=c, count=count, lengths=lengths)
        return api.Load(rate=point.rate, count=count, lengths=lengths)
    if c is not None:
        return api.Load(concurrency=c, count=count, prompt=prompt, output=output)
    return api.Load(rate=point.rate, count=count, prompt=prompt, output=output)


@cache
def run(point: Point, knobs: Knobs = Knobs()) -> sim.Run:
    """The point through the simulator as api.simulate runs it (its scheduler over fit's pool, speed's
    step costs, the engine's handling), with the fit's knobs where given."""
    s = _setup(str(point.source["id"]))
    load = load_of(point)
    lengths = api_sim._lengths(load, None)
    limit = max(p + o for p, o in lengths)
    flags = point.source.get("flags") or {}
    limit = max(limit, int(flags.get("max_model_len", 0)))
    serving = api.Serving(s.engine, kv_dtype=s.kv_dtype, options=dict(s.options) | scheduler_knobs(point))
    if knobs == Knobs() and s.v0_steps is None:  # api.simulate itself, as a user runs it
        return api.simulate(s.model, load=load, gpu=s.gpu, serving=serving, tp=s.tp,
                            max_model_len=limit, compute=s.compute, timeline=False).run  # fmt: skip
    weights = s.compute.weights if s.compute is not None else None
    scheduler, _, _, _ = api_sim._scheduler(s.model, s.gpu, serving, s.tp, limit, None, None, None, weights)
    if s.v0_steps is not None:
        scheduler = _v0(scheduler, limit, s.v0_steps)
    timer, handling = _coster(str(point.source["id"]))
    if knobs.step_scale != 1.0:
        base, scale = timer, knobs.step_scale
        timer = lambda shape: scale * base(shape)  # noqa: E731
    handling = handling if knobs.handling_s is None else knobs.handling_s
    return sim.simulate(api_sim._arrivals(load, lengths), scheduler, timer, timeline=False, handling_s=handling)


# Server flags the sources set that simulate's scheduler reads, as the engine's knobs (SGLang's
# --scheduler-recv-interval: engines/sglang/__init__.py).
SCHEDULER_FLAGS = {"scheduler_recv_interval": "recv_interval"}


def scheduler_knobs(point: Point) -> dict[str, int]:
    """The scheduler flags the point's source sets (the YAML's ``flags``, a point's own over its
    source's, cited in ``flags_note``), as kvcalc knobs."""
    flags = (point.source.get("flags") or {}) | (point.raw.get("flags") or {})
    return {knob: int(flags[flag]) for flag, knob in SCHEDULER_FLAGS.items() if flag in flags}


def _v0(current: Any, max_model_len: int, steps: int) -> VllmV0Scheduler:
    """vLLM V0's scheduler over the blocks kvcalc's current vLLM finds (0.6's own memory rules are not
    modelled), with V0's defaults without chunked prefill: max_num_batched_tokens max(max_model_len,
    2048) (vllm/config.py SchedulerConfig.__post_init__, 0.6.x), max_num_seqs 256 (EngineArgs)."""
    assert isinstance(current, VllmScheduler) and current._plain  # one group of full attention (Llama)
    return VllmV0Scheduler(current.pool_units, current.unit_tokens, max_num_batched_tokens=max(max_model_len, 2048),
                           max_num_seqs=256, max_model_len=max_model_len, num_scheduler_steps=steps)  # fmt: skip


# --- comparing ------------------------------------------------------------------------------------------


def _values(r: sim.Run, what: str) -> list[float]:
    if what == "ttft":
        return sorted(d.ttft_s for d in r.done)
    if what == "tpot":
        return sorted(t for d in r.done if (t := d.tpot_s) is not None)
    if what == "e2e":
        return sorted(d.e2e_s for d in r.done)
    return sorted(v for v, n in r.itl for _ in range(n))


def simulated(point: Point, key: str, r: sim.Run) -> float | None:
    """The simulated figure for a metric key of the YAML, in the key's unit; None where kvcalc has none."""
    gpus = int(point.source["gpus"])
    span = r.makespan_s
    out = sum(d.request.output for d in r.done)
    throughputs = {"request_throughput_req_s": len(r.done) / span, "output_throughput_tok_s": out / span,
                   "output_throughput_per_gpu_tok_s": out / span / gpus,
                   "unstated_throughput_tok_s": out / span}  # fmt: skip
    if key in throughputs:
        return throughputs[key]
    statistic, what, unit = key.split("_")
    values = _values(r, what)
    if not values:
        return None
    scale = 1e3 if unit == "ms" else 1.0
    if statistic in ("mean", "unstated"):
        return scale * math.fsum(values) / len(values)
    q = 50.0 if statistic == "median" else float(statistic[1:])
    return scale * sim.percentile(values, q)


@dataclass(frozen=True)
class Row:
    point: Point
    key: str
    measured: float
    simulated: float

    @property
    def ln(self) -> float:
        return math.log(self.simulated / self.measured)

    @property
    def what(self) -> str:
        return self.key.split("_")[1] if not self.key.endswith("tok_s") and not self.key.endswith("req_s") else "tput"


def rows(point: Point, knobs: Knobs = Knobs()) -> list[Row]:
    r = run(point, knobs)
    found = []
    for key, measured in point.raw["metrics"].items():
        if point.source["id"].startswith("sglang-057") and key.endswith("itl_ms"):
            continue  # streamed in chunks (the file's note): decode is judged on TPOT
        value = simulated(point, key, r)
        if value is not None and value > 0:
            found.append(Row(point, key, float(measured), value))
    return found


def speed_alone(point: Point) -> tuple[float, float]:
    """(TTFT, TPOT) in ms that `kvcalc speed` gives for the point with its concurrency as the batch."""
    s = _setup(str(point.source["id"]))
    prompt, output = _lengths(point.source, point.raw)  # type: ignore[misc]
    report = api.speed(s.model, prompt=prompt, output=output, batch=point.concurrency or 1, gpu=s.gpu, tp=s.tp,
                       engine=s.engine, kv_dtype=s.kv_dtype, compute=s.compute, sweep=[])  # fmt: skip
    est = report.estimate
    assert est is not None
    return est.at.ttft_s * 1e3, est.at.tpot_mean_s * 1e3


def _latency(rows_: list[Row], what: str) -> list[Row]:
    # The mean, median or unstated figure of each point (p99 and p95 are reported, not summarised).
    return [r for r in rows_ if r.what == what and r.key.split("_")[0] in ("mean", "median", "unstated")]


def median_abs(rows_: list[Row]) -> float:
    per_point: dict[tuple[str, int], list[float]] = {}
    for r in rows_:
        per_point.setdefault((r.point.source["id"], r.point.index), []).append(abs(r.ln))
    return statistics.median(statistics.fmean(v) for v in per_point.values()) if per_point else math.nan


def summary(all_rows: list[Row]) -> dict[tuple[str, str, str], tuple[float, int]]:
    """(half, load, ttft|tpot) -> (median |ln|, points); half ``every``: both halves."""
    found = {}
    for half in ("fit", "held-out", "every"):
        for load in ("low", "under load", "all"):
            for what in ("ttft", "tpot"):
                part = [r for r in _latency(all_rows, what) if half in (r.point.half, "every")
                        and (load == "all" or r.point.low_load == (load == "low"))]  # fmt: skip
                counted = {(r.point.source["id"], r.point.index) for r in part}
                found[(half, load, what)] = (median_abs(part), len(counted))
    return found


# --- fitting --------------------------------------------------------------------------------------------


def fit(pts: list[Point]) -> Knobs:
    """handling_s and step_scale minimising the mean |ln| of TTFT and TPOT over the fit half's points,
    by a grid: handling 0 to 20 ms (benchmarks/speed.py's physical limit on request_s; a wider grid
    chases the fit half's outliers, a cold start and a 2.5 s TTFT on Modal, to 150 ms, and the
    held-out TTFT doubles), step factor 0.75 to 1.3."""
    best, found = math.inf, Knobs()
    for handling in (0.0, 1e-3, 3e-3, 6e-3, 10e-3, 20e-3):
        for scale in (0.75, 0.9, 1.0, 1.15, 1.3):
            knobs = Knobs(handling, scale)
            errors = [abs(r.ln) for p in pts for r in rows(p, knobs) if r.what in ("ttft", "tpot")
                      and r.key.split("_")[0] in ("mean", "median", "unstated")]  # fmt: skip
            loss = statistics.fmean(errors)
            if loss < best:
                best, found = loss, knobs
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="fit handling and a step factor on the fit half first")
    parser.add_argument("--check", action="store_true", help="exit 1 when a held-out median exceeds its threshold")
    parser.add_argument("--quiet", action="store_true", help="the summary only")
    parser.add_argument("--salt", default="", help="split the sources another way")
    args = parser.parse_args(argv)
    pts, skipped = points(args.salt)
    knobs = Knobs()
    if args.fit:
        knobs = fit([p for p in pts if p.half == "fit"])
        print(f"fitted on the fit half: handling {knobs.handling_s * 1e3:g} ms, step time x {knobs.step_scale:g}")
    all_rows = [r for p in pts for r in rows(p, knobs)]
    if not args.quiet:
        print(f"{'half':8} {'source':48} {'load':9} {'metric':28} {'measured':>10} {'simulated':>10} {'ratio':>6}")
        for r in all_rows:
            mark = "~" if r.key.startswith("unstated") else " "
            print(f"{r.point.half:8} {r.point.source['id']:48} {r.point.id:9} {r.key:28} {r.measured:10.2f} "
                  f"{r.simulated:10.2f} {math.exp(r.ln):5.2f}{mark}")  # fmt: skip
        for source, why in skipped:
            print(f"skipped  {source['id']:48} {why}")
        notes = {n for p in pts for n in _setup(str(p.source["id"])).notes}
        for n in sorted(notes):
            print("note:", n)
    table = summary(all_rows)
    print("median |ln(simulated / measured)| (mean, median or unstated figures; points):")
    for (half, load, what), (value, n) in table.items():
        goal = GOALS["low"] if load == "low" else GOALS[what]
        print(f"  {half:8} {load:10} {what}: {value:.3f} over {n} points (issue 40's goal {goal})")
    low = [p for p in pts if p.low_load]
    if low and not args.quiet:
        print("kvcalc speed alone at low load (its concurrency as the batch): median |ln(speed / measured)|")
        for what in ("ttft", "tpot"):
            errors = []
            for p in low:
                ttft, tpot = speed_alone(p)
                for key, measured in p.raw["metrics"].items():
                    parts = key.split("_")
                    if parts[1] == what and parts[0] in ("mean", "median", "unstated") and parts[2] == "ms":
                        errors.append(abs(math.log((ttft if what == "ttft" else tpot) / measured)))
            print(f"  {what}: {statistics.median(errors):.3f} over {len(errors)} figures" if errors else f"  {what}: -")
    held = {what: table[("held-out", "all", what)][0] for what in ("ttft", "tpot")}
    ok = all(held[w] <= CHECK[w] for w in held)
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
