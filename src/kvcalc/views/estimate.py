"""``kvcalc estimate``: the per-layer-group table, the summary, ``--vs-theoretical``, the
``--explain`` derivation, and the request-mix view of ``--lengths``.

Nothing here computes bytes; it only lays out what ``estimate`` produced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.spec import Kind
from kvcalc.units import Units, format_binary, format_exact
from kvcalc.views.console import Block, Note
from kvcalc.views.table import Column, Grid

if TYPE_CHECKING:
    from kvcalc.calc.estimate import Estimate, GroupEstimate
    from kvcalc.calc.requests import RequestSummary


def estimate_view(est: Estimate, units: Units, *, theory: Estimate | None = None, explain: bool = False) -> list[Block]:
    """The table, the summary lines, the engine against theory, the derivation, the notes."""
    blocks: list[Block] = [estimate_grid(est), *summary_lines(est, units)]
    if theory is not None:
        blocks += vs_theoretical_lines(est, theory, units)
    if explain:
        blocks += ["", *explain_lines(est, units)]
    blocks += [Note(note) for note in dict.fromkeys(est.notes)]
    return blocks


def dtype_text(est: Estimate) -> str:
    return est.kv_dtype.name + (f" K / {est.v_dtype.name} V" if est.v_dtype else "")


def estimate_grid(est: Estimate) -> Grid:
    """The per-layer-type breakdown (bytes/token and state/seq are per layer)."""
    w = est.workload
    title = f"KV cache of {est.model.name}: batch {w.batch:,} x {w.tokens:,} tokens, {dtype_text(est)} ({est.engine})"
    with_state = any(g.state_bytes for g in est.groups)
    headers = ["layers", "type", "KV heads", "head dim", "tokens kept", "bytes/token"]
    if with_state:
        headers.append("state/seq")
    headers.append("bytes")
    rows = []
    for g in est.groups:
        heads, dims = g.cache.describe()
        if est.workload.tp > 1 and g.kv_heads_per_gpu is not None:
            heads = f"{g.kv_heads_per_gpu}/GPU of {heads}"
        cells = [str(g.layers), "padding" if g.padding else g.kind.short, heads, dims]
        cells.append(f"{g.tokens_kept:,}" if g.bytes_per_token else "-")
        cells.append(f"{g.bytes_per_token:,}" if g.bytes_per_token else "-")
        if with_state:
            cells.append(f"{g.state_bytes:,}" if g.state_bytes else "-")
        cells.append(f"{g.bytes:,}")
        rows.append(tuple(cells))
    columns = tuple(Column(h, right=h != "type") for h in headers)
    return Grid(title, columns, tuple(rows), keys=2)  # layers and type name a group


def summary_lines(est: Estimate, units: Units) -> list[str]:
    lines = [f"per token      {format_exact(est.per_token_bytes, units)}  (all layers, before any window)"]
    if est.fixed_bytes_per_sequence:
        lines.append(f"fixed per seq  {format_exact(est.fixed_bytes_per_sequence, units)}  (states, cross-attention)")
    lines.append(f"per sequence   {format_exact(est.per_sequence_bytes, units)}")
    if est.metadata_bytes:
        lines.append(f"of which meta  {format_exact(est.metadata_bytes, units)}  (quantization scales and zero-points)")
    lines.append(f"total          {format_exact(est.total_bytes, units)}")
    w = est.workload
    if est.gpus > 1:
        layout = f"tp {w.tp} x pp {w.pp} x dp {w.dp} = {est.gpus} GPUs"
        lines.append(f"per GPU        {format_exact(est.per_gpu_bytes, units)}  (most loaded of {layout})")
        lines.append(f"per GPU/token  {est.per_gpu_token_bytes:,} bytes")
    return lines


def vs_theoretical_lines(est: Estimate, theory: Estimate, units: Units) -> list[str]:
    """The engine's figure beside the theoretical one: the gap is what confuses users most."""
    gap = est.total_bytes - theory.total_bytes
    share = f" ({gap / theory.total_bytes:+.2%})" if theory.total_bytes else ""
    lines = [
        f"{theory.engine:<15}{format_exact(theory.total_bytes, units)}",
        f"{est.engine:<15}{format_exact(est.total_bytes, units)}",
        f"difference     {gap:+,} bytes{share}",
    ]
    for g, t in zip(est.groups, theory.groups, strict=True):
        if g.bytes != t.bytes:
            lines.append(
                f"  {g.kind}: {g.tokens_kept:,} slots/seq vs {t.tokens_kept:,} kept -> {g.bytes - t.bytes:+,} bytes"
            )
    return lines


def _seed_form(est: Estimate) -> bool:
    """Whether every group is literally 2 x L x B x T x H_kv x d_h x s (else slots x row bytes)."""
    w = est.workload
    # Every group in a whole-byte format (a vLLM fp8 indexer with its scales is not).
    plain = est.kv_dtype.is_plain and est.v_dtype is None and all(g.dtype.is_plain for g in est.groups)
    simple_layout = w.tp == w.pp == w.dp == 1 and not w.shared_prefix and not w.residual_tokens
    per_sequence = all(g.slots == w.batch * g.tokens_kept for g in est.groups if g.bytes_per_token)
    # The engine stores the layer's own rows (transformers copies DeepSeek-V4's shared K=V row twice
    # and expands MLA per head: the layer's seed term would not be what is stored).
    own_rows = plain and all(
        g.bytes_per_token == g.cache.elements_per_token * g.dtype.bytes_per_element
        for g in est.groups
        if g.bytes_per_token
    )
    return plain and simple_layout and per_sequence and own_rows


def explain_lines(est: Estimate, units: Units) -> list[str]:
    """The seed formula with this model's numbers substituted, one line per layer group."""
    w = est.workload
    seed = _seed_form(est)
    if seed:
        s = est.kv_dtype.bytes_per_element
        lines = [
            "M = sum over layer groups of 2 x L x B x T x H_kv x d_h x s",
            f"    L layers, B = {w.batch:,} sequence(s), T = tokens kept per sequence,",
            f"    H_kv KV heads, d_h head dim, s = {s} bytes per {est.kv_dtype.name} element",
        ]
    else:
        lines = [
            "M = sum over layer groups of L x slots x (K row + V row bytes) per GPU, over all GPUs",
            f"    slots = token slots the {est.engine} engine keeps per layer for the batch; rows are",
            f"    H_kv per GPU x d_h elements in {dtype_text(est)}, quantization metadata included",
        ]
    formula = _group_formula if seed else _slot_formula
    for g in est.groups:
        held = (
            f"{g.layers} empty {g.kind.short} slots the engine pads its layer groups with"
            if g.padding
            else (f"{g.layers} layers")
        )
        lines.append(f"  {g.kind} ({held}):")
        lines.extend(f"    {line}" for line in formula(est, g))
    if len(est.groups) > 1:
        terms = " + ".join(f"{g.bytes:,}" for g in est.groups)
        lines.append(f"  total: {terms} = {format_exact(est.total_bytes, units)}")
    else:
        lines.append(f"  total: {format_exact(est.total_bytes, units)}")
    return lines


def _group_formula(est: Estimate, g: GroupEstimate) -> list[str]:
    w = est.workload
    c = g.cache
    out: list[str] = []
    if c.caches_tokens and c.token_bound is not None:
        label = "chunk" if c.kind is Kind.CHUNKED else "W"
        if g.tokens_kept == min(w.tokens, c.token_bound):
            out.append(f"T = min({w.tokens:,}, {label} {c.token_bound:,}) = {g.tokens_kept:,}")
        else:  # the engine's own reservation and blocks around the window (vLLM's in-flight tokens)
            out.append(f"T = {g.tokens_kept:,} slots the {est.engine} engine keeps for {w.tokens:,} tokens "
                       f"({label} {c.token_bound:,}, in its own blocks)")  # fmt: skip
    elif c.caches_tokens and c.compress_ratio > 1:
        out.append(f"entries = floor({w.tokens:,} / {c.compress_ratio}) = {g.tokens_kept:,}")
    elif c.tokens == "encoder":
        out.append(f"T = {g.tokens_kept:,} encoder tokens (cross-attention)")
    elif c.tokens == "image":
        per_image = w.image_tokens or est.model.image_tokens or 0
        out.append(f"T = {w.images:,} image(s) x {per_image:,} tokens = {g.tokens_kept:,} image tokens")
    if c.explain():
        out.append(c.explain())
    if g.state_parts:
        out.extend(_state_formula(est, g))
        return out
    product = c.seed_product(g.layers, w.batch, g.tokens_kept, g.dtype.bytes_per_element)
    if product is not None:
        out.append(f"{product} = {g.bytes:,} bytes")
    return out


def _state_formula(est: Estimate, g: GroupEstimate) -> list[str]:
    """A state group's parts as the engine stores them, each in its own format, and the product
    that gives the group's bytes: L x B x (elements x s + ...)."""
    names = g.cache.state_part_names
    parts = [(name, n, d) for name, (n, d) in zip(names, g.state_parts, strict=True) if n]
    listed = " + ".join(f"{name} {n:,} elements in {d.name}" for name, n, d in parts)
    if len({d for _, _, d in parts}) == 1:
        s = parts[0][2].bytes_per_element
        inner = f"({' + '.join(f'{n:,}' for _, n, _ in parts)}) x {s}" if len(parts) > 1 else f"{parts[0][1]:,} x {s}"
    else:
        inner = "(" + " + ".join(f"{n:,} x {d.bytes_per_element}" for _, n, d in parts) + ")"
    own = g.own_state_bytes
    if own != g.state_bytes:  # the engine's pool gives each state a whole page (vLLM's hybrid layout)
        return [listed, f"{inner} = {own:,} B of state, held in a page of {g.state_bytes:,} B",
                f"{g.layers} x {est.workload.batch:,} x {g.state_bytes:,} = {g.bytes:,} bytes"]  # fmt: skip
    return [listed, f"{g.layers} x {est.workload.batch:,} x {inner} = {g.bytes:,} bytes"]


def _slot_formula(est: Estimate, g: GroupEstimate) -> list[str]:
    w = est.workload
    c = g.cache
    if not c.caches_tokens and not c.is_state:
        return [c.explain()]
    gpus = f" x {w.tp * w.pp} GPUs" if w.tp * w.pp > 1 else ""
    if c.is_state:
        return [f"{g.layers} x {w.batch:,} sequences x {g.state_bytes:,} B of state per GPU{gpus} -> {g.bytes:,} bytes"]
    heads = f"{g.kv_heads_per_gpu} KV head(s) per GPU, " if g.kv_heads_per_gpu is not None else ""
    lines = [f"{heads}{g.tokens_kept:,} slots per sequence, {g.slots:,} for the batch"]
    if w.dp > 1 or w.pp > 1 or w.residual_tokens:
        lines.append(f"{g.layers} x {g.slots:,} x {g.bytes_per_token:,} B per slot{gpus}, summed -> {g.bytes:,} bytes")
    else:
        lines.append(f"{g.layers} x {g.slots:,} x {g.bytes_per_token:,}{gpus.replace(' GPUs', '')} = {g.bytes:,} bytes")
    return lines


def lengths_view(summary: RequestSummary, units: Units) -> list[Block]:
    """A request mix: per-request percentiles, the mean, the total with every request resident."""
    rows = []
    for q in (50, 90, 99, 100):
        size = summary.bytes_percentile(q)
        rows.append(("max" if q == 100 else f"p{q}", f"{summary.tokens_percentile(q):,}", f"{size:,}",
                     format_binary(size)))  # fmt: skip
    n = summary.requests
    requests = f"{n:,} request{'' if n == 1 else 's'}"
    title = f"{requests} ({summary.engine}): tokens and KV bytes per request"
    columns = (Column("", right=False), Column("tokens"), Column("bytes"), Column("size"))
    mean = (summary.prompt_tokens + summary.output_tokens) / n
    per_gpu = summary.per_gpu_bytes
    gpu_line = [] if per_gpu is None else [f"per GPU        {format_exact(per_gpu, units)}  (most loaded)"]
    return [
        Grid(title, columns, tuple(rows)),
        f"mean tokens    {mean:,.1f} (prompt {summary.prompt_tokens / n:,.1f}, "
        f"output {summary.output_tokens / n:,.1f})",
        f"all resident   {format_exact(summary.total_bytes, units)}",
        *gpu_line,
        *(Note(note) for note in dict.fromkeys(summary.notes)),
    ]
