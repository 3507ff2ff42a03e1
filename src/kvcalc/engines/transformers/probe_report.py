"""The model probe's answer as data: its JSON (``probe_json``) and the items a view draws
(``probe_items``: the table of layer kinds and the verdict, the storage under them, the peak, the
timings), from transformers' result and the cross-check (kvcalc.engines.transformers.crosscheck)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvcalc.engines.probing import Item, Table, Verdict

if TYPE_CHECKING:
    from kvcalc.engines.transformers.crosscheck import CrossCheck


def probe_items(name: str, check: CrossCheck, result: dict[str, Any], allowed: int) -> list[Item]:
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
    match = check.within(allowed)
    verdict = "match" if match else f"MISMATCH (tolerance {allowed:,} bytes)"
    lines: list[Item] = [
        Table(title, headers, tuple(rows), left=("layer type",)),
        Verdict(f"result         {verdict}", match),
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


def probe_json(check: CrossCheck, result: dict[str, Any], allowed: int, notes: list[str]) -> dict[str, Any]:
    return {
        "estimated_bytes": check.estimated_bytes,
        "measured_bytes": check.measured_bytes,
        "difference_bytes": check.difference,
        "storage_bytes": check.storage_bytes,
        "tolerance_bytes": allowed,
        "match": check.within(allowed),
        "device": result["device"],
        "dtype": result["dtype"],
        "torch": result["torch"],
        "transformers": result["transformers"],
        "kinds": [
            {
                "kind": k.kind,
                "layers": k.layers,
                "estimated_bytes": k.estimated_bytes,
                "measured_bytes": k.measured_bytes,
            }
            for k in check.kinds
        ],
        "peak": result["peak"],
        "prefill_seconds": result["prefill_seconds"],
        "decode_seconds_per_token": result["decode_seconds_per_token"],
        "shrunk_layers": result["layers"],
        "notes": notes,
    }


def version_note(result: dict[str, Any]) -> str | None:
    """One line when the transformers the probe ran is not the release these rules were read from."""
    from kvcalc.engines.transformers import RULES_VERSION, version_warning

    return version_warning(str(result.get("transformers", RULES_VERSION)))
