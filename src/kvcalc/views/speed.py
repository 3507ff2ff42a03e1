"""``kvcalc speed``: the prefill and decode bounds, the crossovers, the batch sweep and its chart."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from kvcalc.units import format_binary
from kvcalc.views.console import Block, Note
from kvcalc.views.table import Column, Grid

if TYPE_CHECKING:
    from kvcalc.api import SpeedReport
    from kvcalc.calc.speed import Speed, Step, SweepRow

CHART_WIDTH = 40
MIN_CHART_WIDTH = 10


def ms(seconds: float) -> str:
    """Milliseconds with four significant figures (a bound is no more precise than its peaks)."""
    value = seconds * 1e3
    return f"{value:,.4g} ms" if value < 1000 else f"{value:,.0f} ms"


def _rate(per_s: float) -> str:
    return f"{per_s:,.1f}" if per_s < 100 else f"{per_s:,.0f}"


def speed_view(report: SpeedReport, *, explain: bool = False, chart: bool = False) -> list[Block]:
    s = report.result
    what = "bound" if s.hardware.is_bound else "estimate"
    tp = f" x {s.tp} (TP {s.tp})" if s.tp > 1 else ""
    lines: list[Block] = [
        f"Speed {what}s for {report.model.name} on {s.hardware.label}{tp}: batch {s.batch}, prompt {s.prompt:,}, "
        f"output {s.output:,} tokens ({report.engine}, KV {report.kv_dtype.name}, compute {s.hardware.compute_dtype})",
        f"peaks per GPU  {s.hardware.bandwidth / 1e12:,.4g} TB/s, {s.hardware.flops / 1e12:,.5g} TFLOP/s dense "
        f"{s.hardware.compute_dtype}",
        f"weights        {s.weights.total_bytes:,} B ({format_binary(s.weights.total_bytes)}; {report.weights_label})",
    ]
    lines.append(_phases(s))
    crossover = (
        f"prefill turns compute-bound from a prompt of {s.compute_bound_prompt:,} tokens at batch {s.batch}"
        if s.compute_bound_prompt is not None
        else "prefill stays memory-bound at every prompt length the model takes"
    )
    kv = (
        f"a decode step reads more KV cache than weights from a context of {s.kv_overtakes_at:,} tokens at batch "
        f"{s.batch}"
        if s.kv_overtakes_at is not None
        else "a decode step never reads more KV cache than weights within the model's context"
    )
    lines += [f"crossover      {crossover}", f"               {kv}"]
    if explain:
        lines += explain_lines(s)
    if s.sweep:
        lines.append(_sweep(s))
    if chart and s.sweep:
        lines.append(SweepChart(s.sweep))
    lines += [Note(n) for n in report.notes]
    return lines


def _phases(s: Speed) -> Grid:
    d = s.decode
    rows = [
        ("prefill (TTFT)" if s.batch == 1 else f"prefill of {s.batch} (last TTFT)", *_step_cells(s.prefill),
         ms(s.prefill.seconds), _rate(s.batch * s.prompt / s.prefill.seconds)),
        *([] if s.batch == 1 else [(f"TTFT mean of {s.batch}", "", "", "", "", ms(s.ttft_mean_s), "")]),
        (f"decode first (ctx {s.prompt:,})", *_step_cells(d.first), ms(d.first.seconds),
         _rate(s.batch / d.first.seconds)),
        (f"decode last (ctx {s.prompt + d.steps - 1:,})", *_step_cells(d.last), ms(d.last.seconds),
         _rate(s.batch / d.last.seconds)),
        (f"decode mean ({d.steps:,} steps)", "", "", "", "", ms(d.mean_s), _rate(s.batch / d.mean_s)),
    ]  # fmt: skip
    columns = (
        Column("phase", right=False), Column("weights read"), Column("KV read / written"), Column("FLOPs"),
        Column("bound by", right=False), Column("time"), Column("tokens/s"),
    )  # fmt: skip
    what = "bounds" if s.hardware.is_bound else "estimates"
    return Grid(f"Per step, per GPU ({what}: time = max(bytes / bandwidth, FLOPs / peak))", columns, tuple(rows))


def _step_cells(step: Step) -> tuple[str, str, str, str]:
    return (format_binary(step.weight_bytes), format_binary(step.kv_bytes), f"{step.flops:.4g}", step.bound_by)


def _sweep(s: Speed) -> Grid:
    rows = []
    for r in s.sweep:
        fits = "" if r.fits is None else ("yes" if r.fits else "no")
        rows.append(
            (f"{r.batch:,}", ms(r.ttft_mean_s), ms(r.prefill.seconds), ms(r.decode.mean_s), _rate(r.throughput),
             f"{r.decode.memory_bound_steps * 100 // r.decode.sampled}%",
             format_binary(r.decode.first.kv_bytes), fits)
        )  # fmt: skip
    columns = (
        Column("batch"), Column("TTFT (mean)"), Column("TTFT (last)"), Column("TPOT (mean)"), Column("output tokens/s"),
        Column("memory-bound steps"), Column("KV read at first step"), Column("weights + KV fit"),
    )  # fmt: skip
    title = "Batch sweep: each request waits longer per token as the batch grows, while the batch's tokens/s rises"
    return Grid(title, columns, tuple(rows))


def explain_lines(s: Speed) -> list[Block]:
    """The arithmetic of the first decode step and of the prefill, term by term."""
    hw, w, d, p = s.hardware, s.weights, s.decode.first, s.prefill
    bw = hw.bandwidth * hw.bandwidth_efficiency
    fl = hw.flops * hw.flops_efficiency
    lines: list[Block] = ["how (first decode step, per GPU):"]
    experts = ""
    if w.experts:
        experts = (
            f" - untouched experts (of {w.expert_bytes:,} B of routed experts, {w.top_k} of {w.experts} per token)"
        )
    lines += [
        f"  weights read  = {w.total_bytes:,} B - input embedding {w.embedding_bytes:,} B (read by rows){experts}"
        + (f", / TP {s.tp}" if s.tp > 1 else "")
        + f" = {d.weight_bytes:,} B",
        f"  KV read       = the cache of {s.batch} sequence(s) at {s.prompt:,} tokens, as the engine keeps it "
        f"= {d.kv_bytes:,} B",
        f"  memory time   = {d.bytes:,} B / {float(bw):,.0f} B/s = {ms(d.memory_s)}",
        f"  FLOPs         = batch {s.batch} x 2 x {w.params_per_token:,} parameters{' / TP' if s.tp > 1 else ''} "
        f"= {d.flops - d.attention_flops:,}, + attention over the context {d.attention_flops:,} = {d.flops:,}",
        f"  compute time  = {d.flops:,} / {float(fl):,.0f} FLOP/s = {ms(d.compute_s)}",
        f"  TPOT >= max({ms(d.memory_s)}, {ms(d.compute_s)}) = {ms(d.seconds)} ({d.bound_by}-bound)",
        "how (prefill, per GPU):",
        f"  FLOPs         = batch {s.batch} x (2 x {w.params_per_token - w.head_params:,} x {s.prompt:,} prompt "
        f"tokens + 2 x {w.head_params:,} head parameters for the last position){' / TP' if s.tp > 1 else ''} "
        f"= {p.flops - p.attention_flops:,}, + causal attention {p.attention_flops:,} = {p.flops:,}",
        f"  bytes         = weights {p.weight_bytes:,} B + KV written {p.kv_bytes:,} B = {p.bytes:,} B",
        f"  TTFT >= max({ms(p.memory_s)}, {ms(p.compute_s)}) = {ms(p.seconds)} ({p.bound_by}-bound)",
    ]
    return lines


class SweepChart(NamedTuple):
    """Per-request TPOT and the batch's output tokens/s against batch size, as text bars."""

    rows: tuple[SweepRow, ...]

    def lines(self, width: int) -> list[str]:
        label = max(len(f"{r.batch:,}") for r in self.rows)
        slowest = max(r.decode.mean_s for r in self.rows) or 1.0
        fastest = max(r.throughput for r in self.rows) or 1.0
        room = (width - label - 2 * 3 - 24) // 2
        bar = max(MIN_CHART_WIDTH, min(CHART_WIDTH, room))
        out = [f"batch  TPOT per request (bar to {ms(slowest)})  |  output tokens/s of the batch (bar to "
               f"{_rate(fastest)})"]  # fmt: skip
        for r in self.rows:
            left = "█" * max(1, round(bar * r.decode.mean_s / slowest))
            right = "█" * max(1, round(bar * r.throughput / fastest))
            out.append(f"{r.batch:>{label},}  {left:<{bar}} {ms(r.decode.mean_s):>10}  |  {right:<{bar}} "
                       f"{_rate(r.throughput)}")  # fmt: skip
        return out
