"""``kvcalc probe``: measured against estimated by layer kind, then the run's peak and timings;
``--raw``: the allocator's figures beside the estimate. Every text from a result file is
``clean``-ed when drawn (``views.console``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from kvcalc.units import Units, format_exact
from kvcalc.views.console import Block, Line, Note
from kvcalc.views.table import Column, Grid

if TYPE_CHECKING:
    from kvcalc.api import ProbeReport
    from kvcalc.calc.estimate import Estimate
    from kvcalc.engines.transformers.crosscheck import CrossCheck


class ProbeOutcome(Protocol):
    """What every probe answers with (transformers' ``api.ProbeReport``, llama.cpp's
    ``LlamaCppProbe``, vLLM's ``VllmProbe``): whether the real engine agreed with kvcalc, and the
    answer as JSON and as view blocks. The CLI shows each the same
    way (``cli/probe.py show_probe``)."""

    @property
    def match(self) -> bool: ...

    def as_json(self) -> dict[str, Any]: ...

    def view(self) -> list[Any]: ...


def probe_view(report: ProbeReport) -> list[Block]:
    if report.check is None:
        return list(raw_probe_lines(report.estimate, report.result, "both"))
    blocks = probe_lines(report.model.name, report.check, report.result, report.tolerance_bytes)
    return blocks + [Note(note) for note in dict.fromkeys(report.notes)]


def probe_lines(name: str, check: CrossCheck, result: dict[str, Any], allowed: int) -> list[Block]:
    """The table of layer kinds and the verdict, the storage under them, the peak, the timings."""
    rows = []
    for k in check.kinds:
        share = f"{k.difference / k.estimated_bytes:+.3%}" if k.estimated_bytes else "-"
        rows.append(
            (k.kind, str(k.layers), f"{k.estimated_bytes:,}", f"{k.measured_bytes:,}", f"{k.difference:+,}", share)
        )
    share = f"{check.difference / check.estimated_bytes:+.3%}" if check.estimated_bytes else "-"
    rows.append(
        ("total", "", f"{check.estimated_bytes:,}", f"{check.measured_bytes:,}", f"{check.difference:+,}", share)
    )
    title = (
        f"Probe of {name} on {result['device']} ({result['dtype']}, transformers {result['transformers']}, "
        f"torch {result['torch']}): batch {result['batch']} x {result['prompt_tokens']:,} prompt + "
        f"{result['decode_tokens']} decoded tokens"
        + (f", {result['encoder_tokens']:,} encoder tokens" if result.get("encoder_tokens") else "")
    )
    headers = ("layer type", "layers", "estimated", "measured", "difference", "%")
    columns = tuple(Column(h, right=h != "layer type") for h in headers)
    match = check.within(allowed)
    verdict = "match" if match else f"MISMATCH (tolerance {allowed:,} bytes)"
    lines: list[Block] = [
        Grid(title, columns, tuple(rows)),
        Line(f"result         {verdict}", "green" if match else "bold red"),
    ]
    if check.storage_bytes != check.measured_bytes:
        lines.append(
            f"storage        {check.storage_bytes:,} bytes allocated under those tensors (sliding layers keep a view "
            "of W-1 tokens in a W-token buffer)"
        )
    peak = result["peak"]
    if "transient_bytes" in peak:
        lines.append(f"peak (shrunk)  {peak['transient_bytes']:,} bytes: {peak['kind']}")
    else:
        lines.append(
            f"peak (shrunk)  prefill {peak['prefill_bytes']:,} / decode {peak['decode_bytes']:,} bytes: {peak['kind']}"
        )
    per_token = result["decode_seconds_per_token"]
    decode_text = f", decode {per_token * 1000:.2f} ms/token" if per_token is not None else ""
    lines.append(f"time (shrunk)  prefill {result['prefill_seconds']:.3f} s{decode_text} ({result['timing_note']})")
    return lines


def raw_probe_lines(est: Estimate, result: dict[str, Any], units: Units) -> list[str]:
    lines = [
        f"Raw probe of {est.model.name} ({est.engine}) on {result['device']}: {result['tensors']:,} tensors",
        f"estimated      {format_exact(est.total_bytes, units)}",
        f"tensor bytes   {format_exact(result['tensor_bytes'], units)}",
    ]
    if "allocated_bytes" in result:
        lines += [
            f"requested      {format_exact(result['requested_bytes'], units)}  (allocator, unrounded)",
            f"allocated      {format_exact(result['allocated_bytes'], units)}  (rounded to 512-byte blocks)",
            f"reserved       {format_exact(result['reserved_bytes'], units)}  (segments the caching allocator holds)",
        ]
    else:
        lines.append("(CPU: no allocator statistics; tensor bytes only)")
    return lines
