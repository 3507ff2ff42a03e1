"""``kvcalc simulate``: a run's summary as ``--json`` prints it (``simulation_dict``, no rich) and as
tables drawn from that dict (``simulation_view``); a capacity search's answer likewise."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from kvcalc.views.console import Block, Note
from kvcalc.views.table import Column, Grid

if TYPE_CHECKING:
    from kvcalc.api._simulate import CapacityReport, SimulationReport

LATENCIES = ("queue", "ttft", "tpot", "itl", "e2e")
_NAMES = {"queue": "queue", "ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "end to end"}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def simulation_dict(report: SimulationReport, *, timeline: bool = False) -> dict[str, Any]:
    """A run's answers in plain JSON types (seconds, requests and tokens a second)."""
    run = report.run
    load = report.load
    data: dict[str, Any] = {
        "model": report.model, "engine": report.engine, "gpu": report.gpu,
        "load": {"rate": _finite(load.rate) if load.rate is not None else None,
                 "all_at_once": load.rate is not None and math.isinf(load.rate), "concurrency": load.concurrency,
                 "requests": load.count, "burstiness": load.burstiness, "seed": load.seed,
                 "batch": load.batch, "shared_prefix": load.shared_prefix,
                 "prefixes": load.prefixes if load.shared_prefix else 0},
        "pool": {"units": run.pool_units, "unit_tokens": run.unit_tokens, "kv_budget_bytes": report.pool_bytes},
        "finished": len(run.done), "refused": len(run.refused), "steps": run.steps, "preemptions": run.preemptions,
        "makespan_s": run.makespan_s, "stalls": dict(run.stalls),
        "request_rate": report.request_rate, "output_tokens_per_s": report.output_rate,
        "goodput": report.goodput, "slo": None if report.slo is None else asdict(report.slo),
        "peak": {"running": run.peak_running, "waiting": run.peak_waiting, "used_units": run.peak_used},
        "notes": list(report.notes),
    }  # fmt: skip
    for name in LATENCIES:
        s = getattr(report, name)
        data[name] = {"mean_s": _finite(s.mean), "p50_s": _finite(s.p50), "p90_s": _finite(s.p90),
                      "p99_s": _finite(s.p99), "count": s.count}  # fmt: skip
    if timeline:
        data["requests"] = [
            {"id": d.request.id, "arrival_s": d.request.arrival_s, "prompt": d.request.prompt,
             "output": d.request.output, "scheduled_s": d.scheduled_s, "first_token_s": d.first_token_s,
             "finished_s": d.finished_s, "preemptions": d.preemptions}
            for d in sorted(run.done, key=lambda d: d.request.id)
        ]  # fmt: skip
        data["samples"] = [asdict(s) for s in run.samples]
    return data


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:,.1f}" if seconds < 10 else f"{seconds:,.2f} s"


def simulation_view(data: dict[str, Any]) -> list[Block]:
    """The latency table (ms), throughput, the pool and what stalled admission, notes."""
    load = data["load"]
    how = ("all at once" if load["all_at_once"] else f"{load['rate']:g} req/s" if load["rate"] is not None
           else f"{load['concurrency']} clients")  # fmt: skip
    where = data["gpu"] or "the given budget"
    title = f"{data['model']} on {where}, {data['engine']}: {load['requests']:,} requests, {how}"
    rows = tuple((_NAMES[n], _ms(data[n]["mean_s"]), _ms(data[n]["p50_s"]), _ms(data[n]["p90_s"]),
                  _ms(data[n]["p99_s"])) for n in LATENCIES)  # fmt: skip
    columns = (Column("ms", right=False), Column("mean"), Column("p50"), Column("p90"), Column("p99"))
    blocks: list[Block] = [title, Grid("Latencies", columns, rows)]
    blocks.append(
        f"throughput     {data['request_rate']:,.2f} req/s, {data['output_tokens_per_s']:,.0f} output tokens/s"
    )
    if data["goodput"] is not None:
        blocks.append(f"goodput        {data['goodput']:,.2f} req/s within the SLO")
    peak = data["peak"]
    pool = data["pool"]
    unit = "tokens" if pool["unit_tokens"] == 1 else f"blocks of {pool['unit_tokens']}"
    blocks.append(f"pool           {pool['units']:,} {unit}; peak {peak['used_units'] or 0:,} used, "
                  f"{peak['running'] or 0} running, {peak['waiting'] or 0} waiting")  # fmt: skip
    blocks.append(f"steps          {data['steps']:,}, {data['preemptions']:,} preemptions, "
                  f"{data['makespan_s']:,.1f} s in all")  # fmt: skip
    stalls = data["stalls"]
    if stalls:
        said = ", ".join(f"{_STALLS.get(k, k)} {v:,}" for k, v in sorted(stalls.items(), key=lambda kv: -kv[1]))
        blocks.append(Note(f"steps that left a waiting request out: {said}"))
    if data["refused"]:
        blocks.append(Note(f"{data['refused']} request(s) refused (longer than the pool or max_model_len)"))
    blocks += [Note(n) for n in data["notes"]]
    return blocks


_STALLS = {
    "kv": "KV pool",
    "seqs": "cap on running requests",
    "budget": "token budget",
    "swa": "sliding-window pool",
    "burst": "decode burst (multi-step)",
}


def capacity_dict(report: CapacityReport) -> dict[str, Any]:
    value = report.value if math.isfinite(report.value) else None
    return {"find": report.find, "value": value, "binding": report.binding, "slo": asdict(report.slo),
            "at": None if report.at is None else simulation_dict(report.at),
            "beyond": simulation_dict(report.beyond), "notes": list(report.notes)}  # fmt: skip


def capacity_view(data: dict[str, Any]) -> list[Block]:
    slo = data["slo"]
    bounds = ", ".join(f"{k} {_ms(v)} ms" for k, v in slo.items() if k != "percentile" and v is not None)
    find, value = data["find"], data["value"]
    if value is None:
        shown = "none of 1, 2, 4, 8 GPUs" if find == "gpus" else "no limit"
    elif find == "rate":
        shown = f"{value:,.2f} req/s"
    else:
        shown = f"{int(value):,} {'clients' if find == 'concurrency' else 'GPU(s), tensor-parallel'}"
    what = "fewest GPUs" if find == "gpus" else "most load"
    blocks: list[Block] = [f"{what} within p{slo['percentile']:g} {bounds}: {shown}",
                           f"binding        {data['binding']}"]  # fmt: skip
    if data["at"] is not None:
        blocks.append("at that load:")
        blocks += simulation_view(data["at"])[1:]
    else:
        blocks.append(Note("no load meets the SLO: even one request at a time misses it"))
    return blocks
