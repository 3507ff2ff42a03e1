"""Every view of an estimate: rich tables, the --explain derivation, and plain JSON dicts.

Nothing here computes bytes; it only formats what ``estimate`` produced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .estimator import Estimate, GroupEstimate
from .presets import Preset
from .spec import Kind, ModelSpec
from .units import Units, format_binary, format_decimal

if TYPE_CHECKING:  # annotations only: estimate's start-up does not load the compare view
    from fractions import Fraction

    from .comparison import CompareRow, Comparison


def attention_kind(spec: ModelSpec) -> str:
    """A short label: MHA / GQA / MQA / MLA, plus the hybrid and windowed layer kinds present."""
    base = ""
    extras: list[str] = []
    for cache in spec.caches:
        if cache.is_latent:
            base = "MLA"
        elif cache.caches_tokens and not base:
            kv = cache.rows(1)[2]
            heads = spec.query_heads
            if kv == 1 and heads != 1:
                base = "MQA"
            elif heads is None or kv == heads:
                base = "MHA"
            else:
                base = "GQA"
        label = cache.kind.feature
        if label and label not in extras:
            extras.append(label)
    if not base:  # no attention at all: a pure state-space or linear model
        return " + ".join(extras)
    return " + ".join([base, *extras])


def box_table(title: str, headers: list[str], rows: list[list[str]], right: set[int]) -> str:
    """A box-drawn table (rich's heavy-head style) as plain text.

    Drawn here rather than with rich.table: importing rich's console and table costs ~20 ms, a
    40% start-up penalty on every ``kvcalc estimate`` (benchmarks/startup.py). Columns in
    ``right`` are right-aligned (numbers).
    """
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def cells(values: list[str], bar: str) -> str:
        padded = [v.rjust(w) if i in right else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths, strict=True))]
        return bar + bar.join(f" {p} " for p in padded) + bar

    def rule(left: str, mid: str, end: str, fill: str) -> str:
        return left + mid.join(fill * (w + 2) for w in widths) + end

    lines = [title, rule("┏", "┳", "┓", "━"), cells(headers, "┃"), rule("┡", "╇", "┩", "━")]
    lines += [cells(r, "│") for r in rows]
    lines.append(rule("└", "┴", "┘", "─"))
    return "\n".join(lines)


def dtype_text(est: Estimate) -> str:
    return est.kv_dtype.name + (f" K / {est.v_dtype.name} V" if est.v_dtype else "")


def estimate_table(est: Estimate) -> str:
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
        cells = [str(g.layers), g.kind.short, heads, dims]
        cells.append(f"{g.tokens_kept:,}" if g.bytes_per_token else "-")
        cells.append(f"{g.bytes_per_token:,}" if g.bytes_per_token else "-")
        if with_state:
            cells.append(f"{g.state_bytes:,}" if g.state_bytes else "-")
        cells.append(f"{g.bytes:,}")
        rows.append(cells)
    return box_table(title, headers, rows, right=set(range(len(headers))) - {1})


def summary_lines(est: Estimate, units: Units) -> list[str]:
    lines = [f"per token      {total_text(est.per_token_bytes, units)}  (all layers, before any window)"]
    if est.fixed_bytes_per_sequence:
        lines.append(f"fixed per seq  {total_text(est.fixed_bytes_per_sequence, units)}  (states, cross-attention)")
    lines.append(f"per sequence   {total_text(est.per_sequence_bytes, units)}")
    if est.metadata_bytes:
        lines.append(f"of which meta  {total_text(est.metadata_bytes, units)}  (quantization scales and zero-points)")
    lines.append(f"total          {total_text(est.total_bytes, units)}")
    w = est.workload
    if est.gpus > 1:
        layout = f"tp {w.tp} x pp {w.pp} x dp {w.dp} = {est.gpus} GPUs"
        lines.append(f"per GPU        {total_text(est.per_gpu_bytes, units)}  (most loaded of {layout})")
        lines.append(f"per GPU/token  {est.per_gpu_token_bytes:,} bytes")
    return lines


def total_text(n: int, units: Units) -> str:
    """``268,435,456 bytes = 256 MiB = 268.44 MB`` with the units asked for."""
    parts = [f"{n:,} bytes"]
    if units in ("binary", "both"):
        parts.append(format_binary(n))
    if units in ("decimal", "both"):
        parts.append(format_decimal(n))
    return " = ".join(dict.fromkeys(parts))


def _seed_form(est: Estimate) -> bool:
    """Whether every group is literally 2 x L x B x T x H_kv x d_h x s (else slots x row bytes)."""
    w = est.workload
    plain = est.kv_dtype.is_plain and est.v_dtype is None
    simple_layout = w.tp == w.pp == w.dp == 1 and not w.shared_prefix and not w.residual_tokens
    per_sequence = all(g.slots == w.batch * g.tokens_kept for g in est.groups if g.bytes_per_token)
    return plain and simple_layout and per_sequence


def explain_lines(est: Estimate, units: Units) -> list[str]:
    """The seed formula with this model's numbers substituted, one line per layer group."""
    w = est.workload
    if _seed_form(est):
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
    for g in est.groups:
        lines.append(f"  {g.kind} ({g.layers} layers):")
        formula = _group_formula if _seed_form(est) else _slot_formula
        lines.extend(f"    {line}" for line in formula(est, g))
    if len(est.groups) > 1:
        terms = " + ".join(f"{g.bytes:,}" for g in est.groups)
        lines.append(f"  total: {terms} = {total_text(est.total_bytes, units)}")
    else:
        lines.append(f"  total: {total_text(est.total_bytes, units)}")
    return lines


def _group_formula(est: Estimate, g: GroupEstimate) -> list[str]:
    w = est.workload
    c = g.cache
    out: list[str] = []
    if c.caches_tokens and c.token_bound is not None:
        label = "W" if c.kind is Kind.SLIDING else "chunk"
        out.append(f"T = min({w.tokens:,}, {label} {c.token_bound:,}) = {g.tokens_kept:,}")
    elif c.tokens == "encoder":
        out.append(f"T = {g.tokens_kept:,} encoder tokens (cross-attention)")
    if c.explain():
        out.append(c.explain() + (f" in {g.dtype.name}" if c.is_state else ""))
    product = c.seed_product(g.layers, w.batch, g.tokens_kept, g.dtype.bytes_per_element)
    if product is not None:
        out.append(f"{product} = {g.bytes:,} bytes")
    return out


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


def estimate_json(est: Estimate) -> dict[str, Any]:
    """Plain JSON-ready dict; byte counts are integers."""
    w = est.workload
    groups = []
    for g in est.groups:
        c = g.cache
        entry: dict[str, Any] = {"kind": str(g.kind), "layers": g.layers, **c.fields()}
        entry |= {
            "tokens_kept": g.tokens_kept,
            "slots": g.slots,
            "kv_heads_per_gpu": g.kv_heads_per_gpu,
            "metadata_bytes": g.metadata_bytes,
            "elements_per_token": g.cache.elements_per_token,
            "bytes_per_token": g.bytes_per_token,
            "state_bytes": g.state_bytes,
            "dtype": g.dtype.name,
            "bytes": g.bytes,
        }
        groups.append(entry)
    return {
        "model": est.model.name,
        "model_type": est.model.model_type,
        "attention": attention_kind(est.model),
        "engine": est.engine,
        "batch": w.batch,
        "tokens": w.tokens,
        "encoder_tokens": (w.encoder_tokens or est.model.encoder_tokens) if est.model.is_encoder_decoder else None,
        "kv_dtype": est.kv_dtype.name,
        "v_dtype": (est.v_dtype or est.kv_dtype).name,
        "bytes_per_element": est.kv_dtype.bytes_per_element if est.kv_dtype.is_plain else None,
        "bits_per_element": est.kv_dtype.bits,
        "metadata_bytes": est.metadata_bytes,
        "per_gpu_bytes": est.per_gpu_bytes,
        "per_gpu_token_bytes": est.per_gpu_token_bytes,
        "gpus": est.gpus,
        "tp": est.workload.tp,
        "pp": est.workload.pp,
        "dp": est.workload.dp,
        "shared_prefix": est.workload.shared_prefix,
        "total_bytes": est.total_bytes,
        "total_gib": est.total_bytes / 2**30,
        "total_gb": est.total_bytes / 10**9,
        "per_token_bytes": est.per_token_bytes,
        "per_sequence_bytes": est.per_sequence_bytes,
        "fixed_bytes_per_sequence": est.fixed_bytes_per_sequence,
        "groups": groups,
        "notes": [*est.model.notes, *est.notes],
    }


def preset_row(preset: Preset, spec: ModelSpec, bf16_per_token: int) -> dict[str, Any]:
    """One preset as a JSON-ready summary row."""
    attention = [c for c in spec.caches if c.caches_tokens and not c.is_latent]
    latent = [c.latent_shape for c in spec.caches if c.latent_shape is not None]
    return {
        "name": preset.name,
        "aliases": list(preset.aliases),
        "family": preset.family,
        "hf_repo": preset.hf_repo,
        "layers": spec.layers,
        "query_heads": spec.query_heads,
        "kv_heads": attention[0].rows(1)[2] if attention else None,
        "head_dim": attention[0].head_dims[0] if attention else None,
        "latent_dim": sum(latent[0]) if latent else None,
        "attention": attention_kind(spec),
        "bytes_per_token_bf16": bf16_per_token,
        "parameters": preset.parameters,
        "source": preset.source,
    }


def presets_table(rows: list[dict[str, Any]]) -> str:
    headers = ["name", "family", "layers", "KV heads", "head dim", "attention", "bytes/token (bf16)"]
    body = []
    for r in rows:
        heads = r["kv_heads"] if r["kv_heads"] is not None else ("latent" if r["latent_dim"] else "-")
        dim = r["head_dim"] if r["head_dim"] is not None else (r["latent_dim"] or "-")
        body.append(
            [r["name"], r["family"], str(r["layers"]), str(heads), str(dim), r["attention"],
             f"{r['bytes_per_token_bf16']:,}"]
        )  # fmt: skip
    title = "Bundled presets (bytes/token: every layer's K and V at bf16, before any window)"
    return box_table(title, headers, body, right={2, 3, 4, 6})


def ratio_text(ratio: Fraction) -> str:
    """``1/4`` -> ``0.25x (1/4)``; small exact fractions are shown, since they are the point."""
    if ratio.denominator == 1:
        return f"{ratio.numerator:,}x"
    text = f"{float(ratio):.3g}x"
    if ratio.numerator <= 99 and ratio.denominator <= 99:
        text += f" ({ratio.numerator}/{ratio.denominator})"
    return text


def _candidate_heads(row: CompareRow) -> str:
    c = row.candidate
    if c.latent_dim is not None:
        return f"latent {c.latent_dim}"
    return str(c.kv_heads) if c.kv_heads is not None else "-"


def comparison_table(comp: Comparison, units: Units) -> str:
    """Variants or models side by side: one row per candidate x dtype; a sweep puts one column
    per context length, each cell the total and its ratio to the baseline."""
    many_dtypes = len(comp.dtypes) > 1
    sweep = len(comp.tokens) > 1
    first = "variant" if comp.mode == "variants" else "model"
    headers = [first]
    if many_dtypes:
        headers.append("dtype")
    if comp.mode == "models":
        headers.append("attention")
    headers.append("KV heads")
    if comp.mode == "variants":
        headers.append("elements/token/layer")
    headers.append("bytes/token")
    if sweep:
        headers += [f"T={t:,}" for t in comp.tokens]
    else:
        headers += ["bytes", "total", "ratio"]

    body: list[list[str]] = []
    by_key: dict[tuple[int, str], list[CompareRow]] = {}
    for r in comp.rows:
        by_key.setdefault((id(r.candidate), r.kv_dtype.name), []).append(r)
    for group in by_key.values():
        r0 = group[0]
        label = r0.candidate.label + (" *" if comp.mode == "variants" and r0.candidate.own else "")
        cells = [label]
        if many_dtypes:
            cells.append(r0.kv_dtype.name)
        if comp.mode == "models":
            cells.append(attention_kind(r0.candidate.spec))
        cells.append(_candidate_heads(r0))
        if comp.mode == "variants":
            cells.append(f"{r0.candidate.elements_per_token:,}")
        cells.append(f"{r0.estimate.per_token_bytes:,}")
        if sweep:
            cells += [f"{_short(r.total_bytes, units)} ({float(r.ratio):.3g}x)" for r in group]
        else:
            cells += [f"{r0.total_bytes:,}", _short(r0.total_bytes, units), ratio_text(r0.ratio)]
        body.append(cells)
    dtype_text = "each model's own dtype" if comp.own_dtypes and many_dtypes else ", ".join(d.name for d in comp.dtypes)
    title = (
        f"{'Attention variants' if comp.mode == 'variants' else 'Models'}: batch {comp.batch:,}"
        + ("" if sweep else f" x {comp.tokens[0]:,} tokens")
        + f", {dtype_text}, ratio to {comp.baseline}"
        + (f" at {comp.dtypes[0].name}" if many_dtypes and not comp.own_dtypes else "")
    )
    left = {0, 1} if many_dtypes else {0}
    if comp.mode == "models":
        left.add(len(left))
    return box_table(title, headers, body, right=set(range(len(headers))) - left)


def _short(n: int, units: Units) -> str:
    if units == "decimal":
        return format_decimal(n)
    if units == "binary":
        return format_binary(n)
    return f"{format_binary(n)} / {format_decimal(n)}"


def comparison_chart(comp: Comparison, units: Units, width: int = 40) -> str:
    """Bytes against context length as text bars, one block per row, scaled to the largest."""
    largest = max((r.total_bytes for r in comp.rows), default=0) or 1
    label_width = max(len(f"{r.candidate.label} {r.kv_dtype.name}") for r in comp.rows)
    token_width = max(len(f"{t:,}") for t in comp.tokens)
    lines = [f"KV cache vs context length (bar = bytes, scaled to {_short(largest, units)})"]
    previous = None
    for r in comp.rows:
        name = f"{r.candidate.label} {r.kv_dtype.name}"
        shown = name if name != previous else ""
        previous = name
        cells = round(width * r.total_bytes / largest)
        bar = "█" * cells if cells or not r.total_bytes else "▏"
        lines.append(f"{shown:<{label_width}}  T={r.tokens:>{token_width},}  {bar} {_short(r.total_bytes, units)}")
    return "\n".join(lines)


def comparison_json(comp: Comparison) -> dict[str, Any]:
    rows = []
    for r in comp.rows:
        c = r.candidate
        rows.append(
            {
                "label": c.label,
                "model": c.spec.name,
                "own": c.own,
                "attention": attention_kind(c.spec),
                "kv_heads": c.kv_heads,
                "latent_dim": c.latent_dim,
                "elements_per_token_per_layer": c.elements_per_token,
                "kv_dtype": r.kv_dtype.name,
                "tokens": r.tokens,
                "batch": comp.batch,
                "per_token_bytes": r.estimate.per_token_bytes,
                "total_bytes": r.total_bytes,
                "ratio": float(r.ratio),
                "ratio_exact": f"{r.ratio.numerator}/{r.ratio.denominator}",
            }
        )
    notes = list(comp.notes)
    for r in comp.rows:
        for note in (*r.candidate.spec.notes, *r.estimate.notes):
            if "keep at most" not in note:  # windows show in the numbers; one note per length is noise
                notes.append(f"{r.candidate.spec.name}: {note}")
    notes = list(dict.fromkeys(notes))
    return {
        "mode": comp.mode,
        "baseline": comp.baseline,
        "batch": comp.batch,
        "tokens": list(comp.tokens),
        "kv_dtypes": [d.name for d in comp.dtypes],
        "rows": rows,
        "notes": notes,
    }


def vs_theoretical_lines(est: Estimate, theory: Estimate, units: Units) -> list[str]:
    """The engine's figure beside the theoretical one: the gap is what confuses users most."""
    gap = est.total_bytes - theory.total_bytes
    share = f" ({gap / theory.total_bytes:+.2%})" if theory.total_bytes else ""
    lines = [
        f"theoretical    {total_text(theory.total_bytes, units)}",
        f"{est.engine:<15}{total_text(est.total_bytes, units)}",
        f"difference     {gap:+,} bytes{share}",
    ]
    for g, t in zip(est.groups, theory.groups, strict=True):
        if g.bytes != t.bytes:
            lines.append(
                f"  {g.kind}: {g.tokens_kept:,} slots/seq vs {t.tokens_kept:,} kept -> {g.bytes - t.bytes:+,} bytes"
            )
    return lines


def lengths_lines(summary: Any, units: Units) -> list[str]:
    """A request mix: total with every request resident, per-request percentiles."""
    tokens = tuple(r.tokens for r in summary.requests)
    sizes = summary.per_request_bytes
    rows = []
    for q in (50, 90, 99, 100):
        label = "max" if q == 100 else f"p{q}"
        rows.append([label, f"{summary.percentile(tokens, q):,}", f"{summary.percentile(sizes, q):,}",
                     format_binary(summary.percentile(sizes, q))])  # fmt: skip
    table = box_table(
        f"{len(tokens):,} request{'' if len(tokens) == 1 else 's'} ({summary.engine}): tokens and KV bytes per request",
        ["", "tokens", "bytes", "size"],
        rows,
        right={1, 2, 3},
    )
    mean = sum(tokens) / len(tokens)
    return [
        table,
        f"mean tokens    {mean:,.1f} (prompt {sum(r.prompt for r in summary.requests) / len(tokens):,.1f}, "
        f"output {sum(r.output for r in summary.requests) / len(tokens):,.1f})",
        f"all resident   {total_text(summary.total_bytes, units)}",
    ]


def lengths_json(summary: Any, notes: list[str]) -> dict[str, Any]:
    tokens = tuple(r.tokens for r in summary.requests)
    sizes = summary.per_request_bytes
    return {
        "engine": summary.engine,
        "requests": len(tokens),
        "total_bytes": summary.total_bytes,
        "tokens": {f"p{q}": summary.percentile(tokens, q) for q in (50, 90, 99)} | {"max": max(tokens)},
        "bytes_per_request": {f"p{q}": summary.percentile(sizes, q) for q in (50, 90, 99)} | {"max": max(sizes)},
        "notes": notes,
    }


def fit_lines(name: str, result: Any, budget: Any, gpu_label: str | None, workload: Any, units: Units) -> list[str]:
    """The budget derivation, line by line, then the three answers."""
    w = workload
    lines = [f"Fit of {name} ({result.engine}): tp {w.tp} x pp {w.pp} x dp {w.dp}"]
    if gpu_label:
        lines.append(f"GPU: {gpu_label}")
    width = max(len(line.label) for line in budget.lines)
    for line in budget.lines:
        lines.append(f"  {line.label:<{width}}  {line.bytes:>20,}  {format_binary(line.bytes) if line.bytes else ''}")
    plan = result.vllm
    if plan is not None:
        groups = ", ".join(
            f"{k.kind} x{k.layers} ({k.groups} group(s), {k.block_size}-token blocks)" for k in plan.kinds
        )
        block = plan.page_bytes * plan.group_size
        lines.append(f"vLLM layout    {groups}")
        lines.append(f"vLLM block     {plan.group_size} layer(s) x {plan.page_bytes:,} B page = {block:,} B")
        lines.append(f"vLLM blocks    {plan.num_blocks:,}")
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
    if not result.fits:
        lines.append(
            f"nothing fits   not one request of {result.tokens:,} tokens fits in "
            f"{result.kv_budget:,} bytes of KV budget per GPU"
        )
    return lines


def fit_json(result: Any, budget: Any, gpu_label: str | None, notes: list[str], workload: Any) -> dict[str, Any]:
    plan = result.vllm
    return {
        "engine": result.engine,
        "gpu": gpu_label,
        "tp": workload.tp,
        "pp": workload.pp,
        "dp": workload.dp,
        "budget": [{"label": line.label, "bytes": line.bytes} for line in budget.lines],
        "kv_budget_bytes": result.kv_budget,
        "tokens": result.tokens,
        "batch": result.batch,
        "max_tokens": result.max_tokens,
        "max_concurrency": result.max_concurrency,
        "max_concurrency_exact": float(result.max_concurrency_exact)
        if result.max_concurrency_exact is not None
        else None,
        "max_context": result.max_context,
        "max_concurrency_capped": result.max_concurrency_capped,
        "max_context_capped": result.max_context_capped,
        "fits": result.fits,
        "vllm": None
        if plan is None
        else {
            "num_blocks": plan.num_blocks,
            "page_bytes": plan.page_bytes,
            "group_size": plan.group_size,
            "groups": [
                {"kind": k.kind, "layers": k.layers, "groups": k.groups, "block_size": k.block_size} for k in plan.kinds
            ],
        },
        "notes": notes,
    }


def probe_lines(name: str, check: Any, result: dict[str, Any], allowed: int) -> list[str]:
    """Measured against estimated, by layer kind, then the run's peak and timings."""
    rows = []
    for k in check.kinds:
        share = f"{k.difference / k.estimated_bytes:+.3%}" if k.estimated_bytes else "-"
        rows.append(
            [k.kind, str(k.layers), f"{k.estimated_bytes:,}", f"{k.measured_bytes:,}", f"{k.difference:+,}", share]
        )
    share = f"{check.difference / check.estimated_bytes:+.3%}" if check.estimated_bytes else "-"
    rows.append(
        ["total", "", f"{check.estimated_bytes:,}", f"{check.measured_bytes:,}", f"{check.difference:+,}", share]
    )
    title = (
        f"Probe of {name} on {result['device']} ({result['dtype']}, transformers {result['transformers']}, "
        f"torch {result['torch']}): batch {result['batch']} x {result['prompt_tokens']:,} prompt + "
        f"{result['decode_tokens']} decoded tokens"
    )
    table = box_table(
        title, ["layer type", "layers", "estimated", "measured", "difference", "%"], rows, right={1, 2, 3, 4, 5}
    )
    verdict = "match" if check.within(allowed) else f"MISMATCH (tolerance {allowed:,} bytes)"
    lines = [table, f"result         {verdict}"]
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


def probe_json(check: Any, result: dict[str, Any], allowed: int, notes: list[str]) -> dict[str, Any]:
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


def raw_probe_json(est: Estimate, result: dict[str, Any]) -> dict[str, Any]:
    data = {
        "estimated_bytes": est.total_bytes,
        "measured_bytes": result["tensor_bytes"],
        "match": result["tensor_bytes"] == est.total_bytes,
        "device": result["device"],
        "engine": est.engine,
        "tensors": result["tensors"],
    }
    for key in ("allocated_bytes", "requested_bytes", "reserved_bytes"):
        if key in result:
            data[key] = result[key]
    return data


def raw_probe_lines(est: Estimate, result: dict[str, Any], units: Units) -> list[str]:
    lines = [
        f"Raw probe of {est.model.name} ({est.engine}) on {result['device']}: {result['tensors']:,} tensors",
        f"estimated      {total_text(est.total_bytes, units)}",
        f"tensor bytes   {total_text(result['tensor_bytes'], units)}",
    ]
    if "allocated_bytes" in result:
        lines += [
            f"requested      {total_text(result['requested_bytes'], units)}  (allocator, unrounded)",
            f"allocated      {total_text(result['allocated_bytes'], units)}  (rounded to 512-byte blocks)",
            f"reserved       {total_text(result['reserved_bytes'], units)}  (segments the caching allocator holds)",
        ]
    else:
        lines.append("(CPU: no allocator statistics; tensor bytes only)")
    return lines
