"""Record the real llama-server under load for ``kvcalc simulate`` (issue 40): a seeded trace
replayed through it, and a calibration of its step times, into
tests/fixtures/servers/llama-server-0c1e570/load-*/ (that folder's README says what each holds).

    flock -x /work/notes/cpu.lock python scripts/llama_server_load.py OUT_DIR

The server is the llama-server the tests use (tests/helpers/llama_server.py: built from the llama.cpp
that llama-cpp-python 0.3.36 vendors, 0c1e570), bound to 127.0.0.1, one thread, stopped by its PID
when the run ends or fails. Its model is a tiny llama GGUF of zero-filled f32 tensors
(``llama_gguf``: 4 layers, 8 heads of 64, 4 KV heads), so every step costs real compute while the
tokens it picks do not matter: each request asks for exactly its output (``ignore_eos``,
``n_predict``) and reads its prompt afresh (``cache_prompt`` false, ``--cache-ram 0``).

Per request the non-streamed /completion reply's ``timings`` are the engine's own clock
(tools/server/server-context.cpp at 0c1e570, ``update_slots``: on the first sampled token
``t_prompt_processing = t_start_generation - t_start_process_prompt``, the slot's start on the task
to its first token; ``t_token_generation`` from there to the last token; ``get_timings`` sends them
as ``prompt_ms`` and ``predicted_ms``), and ``id_slot`` the slot that ran it. The client's own send
and end times frame them: a request's wait for a slot plus the HTTP handling is (end - send) -
(prompt_ms + predicted_ms).
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers.engine_record import least_squares  # noqa: E402
from tests.helpers.llama_server import llama_gguf, llama_server  # noqa: E402


def server_args(slots: int) -> list[str]:
    """-np slots of 512 cells each: -c 512 x slots, a stream a slot (no -kvu); no prompt cache in
    host memory (--cache-ram 0); -lv 4 logs each slot's task, timings and release."""
    return ["-np", str(slots), "-c", str(512 * slots), "--cache-ram", "0", "-lv", "4"]


# Each case: the slots and the trace's seed, request count and rate (requests a second).
CASES = {"load-np2": (2, 40, 16, 10.0), "load-np4": (4, 44, 24, 16.0)}
CALIBRATION_SLOTS = 4
MODEL = {"layers": 4, "heads": 8, "kv": 4, "dim": 64}


def _prompt(rng: random.Random, n: int) -> list[int]:
    """n token ids from the four plain tokens (2..5): random, so no two prompts share a prefix that
    llama-server's slot choice by similarity (get_available_slot, --slot-prompt-similarity 0.1) sees."""
    return [rng.randint(2, 5) for _ in range(n)]


def _complete(url: str, prompt: list[int], output: int) -> dict[str, Any]:
    body = json.dumps({"prompt": prompt, "n_predict": output, "ignore_eos": True, "temperature": 0,
                       "cache_prompt": False}).encode()  # fmt: skip
    request = urllib.request.Request(f"{url}/completion", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        reply: dict[str, Any] = json.loads(response.read())
    return reply


def _replay(url: str, trace: list[tuple[float, int, int]], seed: int) -> list[dict[str, Any]]:
    """Each request sent by its own thread at its arrival time; per request the client's send and
    end (seconds from the run's start), the engine's timings and its slot."""
    rng = random.Random(seed)
    prompts = [_prompt(rng, p) for _, p, _ in trace]
    results: list[dict[str, Any]] = [{} for _ in trace]
    start = time.monotonic() + 0.2

    def one(i: int) -> None:
        arrival, prompt, output = trace[i]
        time.sleep(max(0.0, start + arrival - time.monotonic()))
        send = time.monotonic() - start
        reply = _complete(url, prompts[i], output)
        end = time.monotonic() - start
        t = reply["timings"]
        results[i] = {"id": i, "arrival_s": arrival, "send_s": send, "end_s": end, "prompt_tokens": prompt,
                      "completion_tokens": output, "id_slot": reply["id_slot"], "prompt_n": t["prompt_n"],
                      "predicted_n": t["predicted_n"], "prompt_ms": t["prompt_ms"],
                      "predicted_ms": t["predicted_ms"]}  # fmt: skip

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(trace))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


def _trace(seed: int, count: int, rate: float) -> list[tuple[float, int, int]]:
    rng = random.Random(seed)
    t, trace = 0.0, []
    for _ in range(count):
        t += rng.expovariate(rate)
        trace.append((round(t, 4), rng.randint(64, 384), rng.randint(32, 112)))
    return trace


def _calibrate(url: str) -> dict[str, Any]:
    """Lone prefills (one step each: P <= n_ubatch 512) and decode runs at 1, 2 and 4 slots, each
    request's timings; the least-squares fit of step = a + b x tokens + c x decode context (in
    relative terms: a decode step weighs as much as a prefill), and the request handling
    d = (end - send) - (prompt_ms + predicted_ms) of lone requests."""
    rng = random.Random(7)
    points: list[dict[str, Any]] = []
    handling: list[float] = []
    for p in (32, 64, 128, 256, 384, 480) * 3:
        send = time.monotonic()
        reply = _complete(url, _prompt(rng, p), 1)
        wall = time.monotonic() - send
        t = reply["timings"]
        handling.append(wall - (t["prompt_ms"] + t["predicted_ms"]) / 1e3)
        points.append({"kind": "prefill", "tokens": p, "decode_context": 0, "step_s": t["prompt_ms"] / 1e3})
    for slots in (1, 2, 4):
        for p in (16, 320):
            m = 96
            replies: list[dict[str, Any]] = []
            prompts = [_prompt(rng, p) for _ in range(slots)]
            threads = [threading.Thread(target=_into, args=(replies, url, prompt, m)) for prompt in prompts]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)
            for reply in replies:
                t = reply["timings"]
                # predicted_ms spans the m - 1 steps after the first token; each reads p + j cells.
                points.append({"kind": f"decode x{slots}", "tokens": slots,
                               "decode_context": slots * (p + 1 + m // 2),
                               "step_s": t["predicted_ms"] / 1e3 / (t["predicted_n"] - 1)})  # fmt: skip
    a, b, c = _fit(points)
    return {"model": "step_s = a + b x tokens + c x decode_context; d = client (end - send) - (prompt_ms + "
            "predicted_ms) of lone requests", "points": points, "handling_s_all": handling,
            "coefficients": {"a_s": a, "b_s_per_token": b, "c_s_per_kv_token": c,
                             "d_request_overhead_s": statistics.median(handling)}}  # fmt: skip


def _into(replies: list[dict[str, Any]], url: str, prompt: list[int], output: int) -> None:
    replies.append(_complete(url, prompt, output))


def _fit(points: list[dict[str, Any]]) -> tuple[float, float, float]:
    """Least squares of the relative error, (fit - step_s) / step_s, on (1, tokens, decode_context)
    by the normal equations; c held at 0 where it comes out negative."""
    rows = [[1.0 / q["step_s"], q["tokens"] / q["step_s"], q["decode_context"] / q["step_s"]] for q in points]
    ones = [1.0] * len(rows)
    a, b, c = least_squares(rows, ones)
    if c < 0:
        a, b = least_squares([r[:2] for r in rows], ones)
        c = 0.0
    return a, b, c


def main(out: Path) -> None:
    work = out / "_work"
    work.mkdir(parents=True, exist_ok=True)
    model = llama_gguf(work / "tiny-llama.gguf", **MODEL)
    try:
        with llama_server(model, server_args(CALIBRATION_SLOTS), work / "calibration.log") as server:
            calibration = _calibrate(server.url)
        target = out / "load-calibration"
        target.mkdir(exist_ok=True)
        (target / "calibration.json").write_text(json.dumps({"server": server_args(CALIBRATION_SLOTS),
                                                             **calibration}, indent=1) + "\n")  # fmt: skip
        for name, (slots, seed, count, rate) in CASES.items():
            log = work / f"{name}.log"
            with llama_server(model, server_args(slots), log) as server:
                results = _replay(server.url, _trace(seed, count, rate), seed=seed + 1)
            target = out / name
            target.mkdir(exist_ok=True)
            (target / "results.json").write_text(json.dumps({"server": server_args(slots), "model": MODEL,
                                                             "results": results}, indent=1) + "\n")  # fmt: skip
            keep = [line for line in log.read_text().splitlines()
                    if (" slot " in line and (("launch_slot_" in line and "processing task" in line)
                                              or "print_timing" in line or "release" in line))
                    or "server_strea" in line]  # fmt: skip
            source = (f"# source: scripts/llama_server_load.py on llama-server 0c1e570 {' '.join(server_args(slots))} "
                      f"-t 1 ({time.strftime('%Y-%m-%d')}): the log's lines of each request's arrival, slot, "
                      "timings and release")  # fmt: skip
            (target / "slots.log").write_text("\n".join([source, *keep]) + "\n")
    finally:
        for path in work.iterdir():
            path.unlink()
        work.rmdir()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
