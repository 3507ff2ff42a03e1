"""``kvcalc speed``: the prefill and decode bounds, the crossovers, the batch sweep and its chart."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from kvcalc.units import format_binary
from kvcalc.views.console import Block, Note
from kvcalc.views.table import Column, Grid

if TYPE_CHECKING:
    from kvcalc.api import SpeedReport
    from kvcalc.calc.speed import Speed, Step, SweepRow
    from kvcalc.calc.step_cost import SpeedEstimate, Terms

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
    tp = f" x {s.tp} (TP {s.tp})" if s.tp > 1 else ""
    layout = _layout(report)
    lines: list[Block] = [
        f"Speed for {report.model.name} on {s.hardware.label}{tp}: batch {s.batch}, prompt {s.prompt:,}, "
        f"output {s.output:,} tokens ({report.engine}, KV {report.kv_dtype.name}, compute {s.hardware.compute_dtype})"
        + layout,
        f"peaks per GPU  {s.hardware.bandwidth / 1e12:,.4g} TB/s, {s.hardware.flops / 1e12:,.5g} TFLOP/s dense "
        f"{s.hardware.compute_dtype}",
        f"weights        {s.weights.total_bytes:,} B ({format_binary(s.weights.total_bytes)}; {report.weights_label})",
    ]
    if report.estimate is not None:
        lines.append(_estimates(s, report.estimate))
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
        if report.estimate is not None:
            lines += estimate_lines(s, report.estimate)
    if s.sweep:
        lines.append(_sweep(s, report.estimate))
    if chart and s.sweep:
        lines.append(SweepChart(s.sweep))
    lines += [Note(n) for n in report.notes]
    return lines


def _phases(s: Speed) -> Grid:
    d = s.decode
    rows = [
        ("prefill (TTFT)" if s.batch == 1 else f"prefill of {s.batch} (last TTFT)", *_step_cells(s.prefill),
         ms(s.prefill.seconds), _rate(s.batch * s.prompt / s.prefill.seconds) if s.prompt else "-"),
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
    return Grid("Bounds per step, per GPU (time = max(bytes / bandwidth, FLOPs / peak))", columns, tuple(rows))


def _step_cells(step: Step) -> tuple[str, str, str, str]:
    return (format_binary(step.weight_bytes), format_binary(step.kv_bytes), f"{step.flops:.4g}", step.bound_by)


def _sweep(s: Speed, est: SpeedEstimate | None) -> Grid:
    rows = []
    estimates = {p.batch: p for p in est.sweep} if est is not None else {}
    for r in s.sweep:
        fits = "" if r.fits is None else ("yes" if r.fits else "no")
        e = estimates.get(r.batch)
        rows.append(
            (f"{r.batch:,}", ms(r.ttft_mean_s), ms(r.decode.mean_s), _rate(r.throughput),
             ms(e.tpot_mean_s) if e else "", _rate(e.output_tokens_per_s) if e else "",
             f"{r.decode.memory_bound_steps * 100 // r.decode.sampled}%",
             format_binary(r.decode.first.kv_bytes), fits)
        )  # fmt: skip
    columns = (
        Column("batch"), Column("TTFT mean (bound)"), Column("TPOT (bound)"), Column("tokens/s (bound)"),
        Column("TPOT (estimate)"), Column("tokens/s (estimate)"), Column("memory-bound steps"),
        Column("KV read at first step"), Column("weights + KV fit"),
    )  # fmt: skip
    title = "Batch sweep: each request waits longer per token as the batch grows, while the batch's tokens/s rises"
    return Grid(title, columns, tuple(rows))


def _layout(report: SpeedReport) -> str:
    lay = report.layout
    if lay is None:
        return ""
    parts = [f"PP {lay.pp}" if lay.pp > 1 else "", f"EP {lay.ep}" if lay.ep > 1 else "",
             f"attention-DP {lay.dp_attention}" if lay.dp_attention > 1 else ""]  # fmt: skip
    given = ", ".join(p for p in parts if p)
    return f"; {given}" if given else ""


def _span(low: float, high: float, fmt: Callable[[float], str]) -> str:
    return f"{fmt(low)} - {fmt(high)}"


def _estimates(s: Speed, est: SpeedEstimate) -> Grid:
    """The estimates beside the bounds: TTFT, TPOT, end to end and throughput."""
    a = est.at
    steps = s.output if s.prompt == 0 else s.output - 1
    bound_e2e = s.prefill.seconds + steps * s.decode.mean_s
    rows: list[tuple[str, ...]] = []
    if s.prompt:
        rows.append(("TTFT" if s.batch == 1 else f"TTFT (last of {s.batch})", ms(s.prefill.seconds), ms(a.ttft_s),
                     _span(a.low["ttft_seconds"], a.high["ttft_seconds"], ms)))  # fmt: skip
        if s.batch > 1:
            rows.append((f"TTFT (mean of {s.batch})", ms(s.ttft_mean_s), ms(a.ttft_mean_s),
                         _span(a.low["ttft_mean_seconds"], a.high["ttft_mean_seconds"], ms)))  # fmt: skip
    rows += [
        ("TPOT (mean)", ms(s.decode.mean_s), ms(a.tpot_mean_s),
         _span(a.low["tpot_mean_seconds"], a.high["tpot_mean_seconds"], ms)),
        ("end to end", ms(bound_e2e), ms(a.e2e_s), _span(a.low["e2e_seconds"], a.high["e2e_seconds"], ms)),
        ("output tokens/s", _rate(s.decode.tokens_per_s * s.batch), _rate(a.output_tokens_per_s),
         _span(a.low["output_tokens_per_s"], a.high["output_tokens_per_s"], _rate)),
    ]  # fmt: skip
    columns = (Column("", right=False), Column("bound"), Column("estimate"), Column("estimate range"))
    from kvcalc.calc.step_cost import extrapolated

    setting = est.setting
    gaps = extrapolated(setting.device.arch, setting.model, setting.layout, est.costs.coverage)
    assumed = "assumed" in est.overhead.source
    if gaps:
        how = f"partly extrapolated: no {' / '.join(gaps)} measurement" + ("; partly assumed" if assumed else "")
    else:
        how = "partly assumed: see the notes" if assumed else "fitted on published measurements"
    return Grid(f"Bound (never beaten) and estimate ({how})", columns, tuple(rows))


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


def estimate_lines(s: Speed, est: SpeedEstimate) -> list[Block]:
    """The estimate's terms, first decode step and first prefill pass, per GPU."""
    costs, device, model, overhead = est.costs, est.setting.device, est.setting.model, est.overhead
    share = costs.memory.get(device.arch, costs.memory[""])
    gemm = costs.gemm.get(f"{device.arch}/{device.compute_dtype}",
                          costs.gemm.get(device.compute_dtype, costs.gemm["bf16"]))  # fmt: skip
    graphs = "CUDA graphs" if est.setting.graphs else "no CUDA graphs"
    layer_s = overhead.layer_graphs_s if est.setting.graphs else overhead.layer_eager_s

    def terms(t: Terms, label: str, graphs_text: str, per_layer: float, prefill: bool) -> list[Block]:
        short = f" x {t.tokens:,} / ({t.tokens:,} + {costs.gemm_half_tokens}) tokens" if prefill else ""
        return [
            f"  memory        = bytes / ({device.bandwidth / 1e12:,.4g} TB/s x {share:.2f} of peak) = {ms(t.memory_s)}",
            f"  matmuls       = FLOPs / ({device.flops / 1e12:,.5g} TFLOP/s {device.compute_dtype} x {gemm:.2f}"
            f"{short}) = {ms(t.gemm_s)}",
            f"  attention     = attention FLOPs / ({device.flops_16bit / 1e12:,.5g} TFLOP/s x {costs.attention:.2f}) "
            f"= {ms(t.attention_s)}",
            f"  kernels       = max(memory, matmuls + attention) = {ms(t.kernels_s)}",
            f"  communication = all-reduces (2 a layer), EP / PP exchanges = {ms(t.communication_s)}",
            f"  MoE routing   = {model.moe_layers} MoE layers x {costs.route_s * 1e6:,.3g} us = {ms(t.routing_s)}",
            f"  engine        = {overhead.step_s * 1e3:,.3g} ms a step + {model.layers} layers x "
            f"{per_layer * 1e6:,.3g} us ({graphs_text}) = {ms(t.overhead_s)}",
            f"  {label} = {ms(t.seconds)}",
        ]

    lines: list[Block] = [f"estimate (first decode step, per GPU, {overhead.engine}):"]
    lines += terms(est.decode, "step        ", graphs, layer_s, False)
    lines.append(f"  TPOT (mean over the decode steps) ~ {ms(est.at.tpot_mean_s)}")
    if s.prompt:
        passes = est.prefill_passes
        lines.append(f"estimate (prefill: {passes:,} pass(es) of up to {est.prefill.tokens:,} tokens, per GPU):")
        lines += terms(est.prefill, "one pass    ", "launched eagerly", overhead.layer_eager_s, True)
        lines.append(f"  TTFT ~ {passes:,} x {ms(est.prefill.seconds)} + request handling "
                     f"{overhead.request_s * 1e3:,.3g} ms = {ms(est.at.ttft_s)}")  # fmt: skip
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
