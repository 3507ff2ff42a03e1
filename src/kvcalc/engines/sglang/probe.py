"""``kvcalc probe --engine sglang``: run sglang_probe.py with SGLang's own Python and set the pools
SGLang built beside ``kvcalc fit --engine sglang`` for the same budget.

SGLang pins its own torch and CUDA packages, so it lives in an environment of its own (README,
"SGLang"): the probe runs ``sglang_probe.py`` (a standalone file) with that environment's Python,
found from ``--engine-python``, ``KVCALC_SGLANG_PYTHON``, or this Python when it can import sglang.
The run is bounded (``timeout``) and its process group is killed when it overruns.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvcalc.engines.child import EngineProbe, engine_python, run_child

if TYPE_CHECKING:
    from kvcalc.calc.fit import Fit

ENV_PYTHON = "KVCALC_SGLANG_PYTHON"
INSTALL_HINT = (
    "SGLang's pool code in its own environment: python3 -m venv .venv-sglang && .venv-sglang/bin/pip install "
    "torch==2.13.0 && .venv-sglang/bin/pip install --no-deps sglang==0.5.23 && .venv-sglang/bin/pip install -r "
    f"requirements/sglang-cpu.txt, then --engine-python .venv-sglang/bin/python or {ENV_PYTHON}"
)
PROBE_FILE = Path(__file__).with_name("sglang_probe.py")


def sglang_python(explicit: str | None = None) -> str:
    """The Python that runs SGLang: ``explicit``, then $KVCALC_SGLANG_PYTHON, then this one if it
    can import sglang; else a one-line UsageError with the set-up."""
    return engine_python(explicit, ENV_PYTHON, "sglang", "SGLang", INSTALL_HINT)


def run_probe(python: str, request: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run sglang_probe.py with ``python`` on ``request``; its JSON result. Killed (with every process
    it started) after ``timeout`` seconds."""
    return run_child(python, PROBE_FILE, request, timeout, engine="SGLang", doing="build its pools", env={})


@dataclass(frozen=True)
class Check:
    """One figure, as SGLang built it and as kvcalc computes it."""

    what: str
    sglang: Any
    kvcalc: Any

    @property
    def match(self) -> bool:
        return bool(self.sglang == self.kvcalc)


def compare(result: dict[str, Any], fit: Fit) -> tuple[Check, ...]:
    """SGLang's pools beside kvcalc's plan: whether it starts at all, the page size, the token
    pool's per-token bytes and size, the SWA pool's size, the state slots and one request's
    state, max running requests, and every buffer's bytes with its padded page."""
    from kvcalc.engines.sglang.capacity import plan_of

    plan = plan_of(fit)
    refused = result.get("refused")
    checks = [Check("starts", refused is None, plan.refusal is None)]
    if refused is not None or plan.refusal is not None:
        return tuple(checks)
    cell = result.get("cell_size", {})
    hybrid = plan.hybrid_swa and plan.full_cell > 0
    checks += [
        Check("page size", result["page_size"], plan.page_size),
        Check("token pool bytes per token", _cell(cell, hybrid), plan.full_cell + (0 if hybrid else plan.swa_cell)),
        Check("max_total_num_tokens", result["max_total_num_tokens"], plan.max_total_tokens),
    ]
    if hybrid or result.get("swa_max_total_num_tokens") is not None:
        checks.append(Check("SWA pool tokens", result.get("swa_max_total_num_tokens"), plan.swa_tokens))
        checks.append(Check("sliding_window_size", result.get("sliding_window_size"), plan.window))
    if result.get("mamba") is not None or plan.mamba_slots is not None:
        mamba = result.get("mamba") or {}
        checks.append(Check("state bytes per request", mamba.get("cache_per_req"), plan.state_bytes))
        checks.append(Check("max_mamba_cache_size", result.get("max_mamba_cache_size"), plan.mamba_slots))
    checks.append(Check("max_running_requests", result["max_running_requests"], plan.max_running_requests))
    if result.get("pools"):
        # The token pool hands out max_total_num_tokens slots and allocates one padded page more.
        checks.append(Check("token pool rows", _rows(result["pools"][0]), plan.max_total_tokens + plan.page_size))
    return tuple(checks)


def _rows(pool: dict[str, Any]) -> int | None:
    """The rows of the token pool's first K/V buffer (a [rows, heads, dim] tensor, or [2, rows, ...]
    for K and V in one), searching its SWA/full sub-pools when it has them."""
    for buffer in pool.get("buffers", ()):
        shape = buffer["shape"]
        if buffer["name"].split("[")[0] in ("k_buffer", "kv_buffer", "full_kv_buffer") and shape:
            return int(shape[1] if shape[0] == 2 and len(shape) == 4 else shape[0])
    for sub in pool.get("subpools", ()):
        if sub.get("attribute") in ("full_kv_pool", "kv_pool"):
            return _rows(sub)
    return None


def _cell(cell: dict[str, Any], hybrid: bool) -> Any:
    """SGLang's per-token bytes of the full pool: the sizer's cell, or for a hybrid SWA model its
    full side (the cell there is full + ratio x SWA, a float)."""
    return cell.get("full_cell_bytes") if hybrid else cell.get("cell_size")


@dataclass(frozen=True)
class SGLangProbe(EngineProbe):
    """SGLang's pools for one model and budget beside ``kvcalc fit --engine sglang``."""

    engine_key = "sglang"
    engine_label = "SGLang"

    def title(self) -> list[str]:
        result = self.result
        title = (f"SGLang {result.get('sglang_version')} pools vs kvcalc fit --engine {self.engine}: {self.model}, "
                 f"{self.request['budget']:,} B of KV budget")  # fmt: skip
        rows = [title]
        if result.get("refused"):
            rows.append(f"  SGLang refused: {result['refused']}")
        return rows


def fitted_engine(result: dict[str, Any]) -> str:
    """The kvcalc engine the pools are compared under: SGLang at the release that built them."""
    return f"sglang@{result.get('sglang_version')}"
