"""``kvcalc fit``: the budget derivation line by line, then the three answers."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from kvcalc.units import Units, format_bytes
from kvcalc.views.console import Block, Note

if TYPE_CHECKING:
    from kvcalc.api import FitReport, OffloadReport
    from kvcalc.calc.fit import Budget


def fit_view(report: FitReport, units: Units) -> list[Block]:
    """Budget lines, vLLM's block layout when it applies, the answers, the notes. The budget and
    the verdict show exact bytes with sizes beside them in ``units`` (fit's default: binary)."""
    result, budget, w = report.result, report.budget, report.workload
    a = report.dp_attention
    layout = f"tp {w.tp} x pp {w.pp} x dp {w.dp}"
    if a > 1:  # the workload is the KV's: groups of tp / a GPUs
        layout = f"tp {w.tp * a} x pp {w.pp} x dp {w.dp // a}, attention-DP {a} (KV heads over {w.tp} GPU(s))"
    lines: list[Block] = [f"Fit of {report.model.name} ({result.engine}): {layout}"]
    if report.gpu_label:
        lines.append(f"GPU: {report.gpu_label}")
    lines.append(_BudgetBlock(budget, units))
    if result.plan is not None:  # the engine's own capacity arithmetic (vLLM's blocks, SGLang's pools)
        lines += result.plan.table_lines()
    tokens = "unbounded (no per-token cache)" if result.max_tokens is None else f"{result.max_tokens:,}"
    lines.append(f"max tokens     {tokens}  (KV cache size in tokens, per replica)")
    exact = f" (vLLM's {float(result.max_concurrency_exact):.2f}x)" if result.max_concurrency_exact is not None else ""
    at_least = "at least " if result.max_concurrency_capped else ""
    lines.append(f"max requests   {at_least}{result.max_concurrency:,} at {result.tokens:,} tokens each{exact}")
    if result.max_context is None:
        context = "unbounded (every layer is windowed or a fixed state)"
    elif result.max_context_capped:
        context = f"at least {result.max_context:,} tokens (the search stops there; the budget is not the limit)"
    else:
        context = f"{result.max_context:,} tokens"
    lines.append(f"max context    {context} at batch {result.batch:,}")
    if not result.fits and not budget.leaves_nothing:  # else the verdict says why
        lines.append(
            f"nothing fits   not one request of {result.tokens:,} tokens fits in "
            f"{result.kv_budget:,} bytes of KV budget per GPU"
        )
    lines += _verdict_lines(report, units)
    command = report.command
    if command is not None:  # the engine's own line for this answer
        lines.append(f"command        {command.text}")
    lines += [Note(note) for note in dict.fromkeys(report.notes)]
    if command is not None:
        lines += [Note(note) for note in command.notes]
    return lines


BUDGET_WIDTH = 80  # the budget's columns fit a default terminal, or the narrower screen


class _BudgetBlock(NamedTuple):
    """The budget laid out for the screen's width (a wider screen keeps BUDGET_WIDTH's layout)."""

    budget: Budget
    units: Units = "binary"

    def lines(self, width: int) -> list[str]:
        return _budget_lines(self.budget, min(width, BUDGET_WIDTH), self.units)


def _budget_lines(budget: Budget, width: int = BUDGET_WIDTH, units: Units = "binary") -> list[str]:
    """The budget's steps in three columns, label, exact bytes and size in ``units``, within ``width``:
    a label too long to leave the numbers room stands on its own line, the numbers under it in
    their column; a range and the derivation follow, each on its own line."""

    def human(n: int) -> str:
        return format_bytes(n, units, sep=" / ")

    rows = [(line, f"{line.bytes:,}", human(line.bytes) if line.bytes > 0 else "") for line in budget.lines]
    figure = max(len(text) for _, text, _ in rows)
    size = max(len(text) for _, _, text in rows)
    room = width - 2 - 2 - figure - 2 - size  # indent, gaps, the two number columns
    label = max((len(line.label) for line, _, _ in rows if len(line.label) <= room), default=0)
    lines: list[str] = []
    for line, text, binary in rows:
        numbers = f"{text:>{figure}}  {binary}".rstrip()
        if len(line.label) <= label:
            lines.append(f"  {line.label:<{label}}  {numbers}")
        else:
            lines += [f"  {line.label}", f"  {'':<{label}}  {numbers}"]
        if line.low is not None and line.high is not None and (line.low, line.high) != (line.bytes, line.bytes):
            lines.append(f"    (may be {human(line.low)} to {human(line.high)})")
        if line.detail:
            lines.append(f"    ({line.detail})")
    return lines


def _verdict_lines(report: FitReport, units: Units = "binary") -> list[Block]:
    """Fits or not for the requested workload, the headroom, and the remedies with their figures."""
    v, w = report.verdict, report.workload
    if v is None:
        return []

    def human(n: int) -> str:
        return format_bytes(n, units, sep=" / ")

    need = f"{v.needed_bytes:,} B ({human(v.needed_bytes)})"
    ask = f"{report.result.batch:,} request(s) of {w.tokens:,} tokens need {need}"
    if v.fits:
        return [f"verdict        fits: {ask} of KV per GPU; headroom {v.headroom_bytes:,} B "
                f"({human(v.headroom_bytes)})"]  # fmt: skip
    short = -v.headroom_bytes
    if v.reason is not None:
        lines: list[Block] = [f"verdict        does not fit: {v.reason}"]
    else:
        lines = [f"verdict        does not fit: {ask} of KV per GPU, {short:,} B ({human(short)}) more than "
                 "the budget"]  # fmt: skip
    first = v.first_remedy
    for remedy in v.remedies:
        label = "first change" if remedy is first else ("would fit" if remedy.fits else "not enough")
        lines.append(f"  {label:<12} {remedy.change}: {remedy.figure}")
    return lines


def offload_view(report: OffloadReport, units: Units = "binary") -> list[Block]:
    """llama.cpp's split: one line per device (weights, KV cache, compute buffer, total, its size
    in ``units``), then whether every GPU has room."""
    w = report.workload
    how = "auto: the most that fit" if report.auto else "as asked"
    lines: list[Block] = [
        f"llama.cpp split of {report.model.name}: -ngl {report.gpu_layers} ({how}) of {report.n_layer} layers + the "
        f"output layer, context {w.tokens:,} x {w.batch:,}",
    ]
    if report.gpu_label:
        lines.append(f"GPU: {report.gpu_label}")
    lines.append(f"  {'device':<6}  {'weights':>18}  {'KV cache':>18}  {'compute':>15}  {'total':>18}")
    for d in report.devices:
        lines.append(
            f"  {d.name:<6}  {d.weights:>18,}  {d.kv_cache:>18,}  {d.compute:>15,}  {d.total:>18,}  "
            f"{format_bytes(d.total, units, sep=' / ')}"
        )
    if report.fits is not None and report.gpu_bytes is not None:
        worst = max((d for d in report.devices if d.name != "CPU"), key=lambda d: d.total)
        room = report.gpu_bytes - worst.total
        verdict = "fits" if report.fits else "does not fit"
        lines.append(
            f"verdict        {verdict}: the fullest GPU ({worst.name}) holds {worst.total:,} B of "
            f"{report.gpu_bytes:,} available; headroom {room:,} B ({format_bytes(abs(room), units, sep=' / ')}"
            f"{' short' if room < 0 else ''})"
        )
    lines += [Note(note) for note in dict.fromkeys(report.notes)]
    return lines
