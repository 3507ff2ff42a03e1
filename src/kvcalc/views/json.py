"""Every ``--json`` answer as a plain dict: integer byte counts, no markup.

This module never imports rich, not even lazily: ``kvcalc ... --json`` starts without it
(tests/test_views.py checks ``sys.modules``). Types are imported for annotations only.
"""

from __future__ import annotations

from math import gcd
from typing import TYPE_CHECKING, Any

from kvcalc.views.labels import attention_kind

if TYPE_CHECKING:
    from kvcalc.api import OffloadReport, SpeedReport
    from kvcalc.calc.compare import Comparison
    from kvcalc.calc.estimate import Estimate, Workload
    from kvcalc.calc.fit import Budget, Fit, Verdict
    from kvcalc.calc.requests import RequestSummary
    from kvcalc.calc.speed import Step
    from kvcalc.engines.commandline import WrittenCommand
    from kvcalc.engines.knobs import EnginePlugin, Knob
    from kvcalc.gpus import GPU
    from kvcalc.inputs.presets import Preset
    from kvcalc.spec import ModelSpec


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
            "dtype": g.dtype_label,
            "bytes": g.bytes,
        }
        if g.padding:  # empty layer slots of the engine's pool, each costing as a layer of this kind
            entry["padding"] = True
        if g.v_dtype is not None:
            entry |= {"k_dtype": g.dtype.name, "v_dtype": g.v_dtype.name}
        if g.state_parts:  # as the engine stores them, per sequence and GPU
            names = c.state_part_names
            entry["state_parts"] = [
                {"part": name, "elements": elements, "dtype": part.name}
                for name, (elements, part) in zip(names, g.state_parts, strict=True)
            ]
        groups.append(entry)
    return {
        "model": est.model.name,
        "model_type": est.model.model_type,
        "attention": attention_kind(est.model),
        "engine": est.engine,
        "batch": w.batch,
        "tokens": w.tokens,
        "encoder_tokens": (w.encoder_tokens or est.model.encoder_tokens) if est.model.is_encoder_decoder else None,
        **_images_json(est),
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


def _images_json(est: Estimate) -> dict[str, Any]:
    """Images per sequence and the tokens each puts in every image cross-attention layer (Llama 3.2
    Vision); None for a model without image cross-attention."""
    w, spec = est.workload, est.model
    if not spec.has_image_cross_attention:
        return {"images": None, "image_tokens_per_image": None}
    return {"images": w.images, "image_tokens_per_image": w.image_tokens or spec.image_tokens}


def lengths_json(summary: RequestSummary, notes: list[str]) -> dict[str, Any]:
    """A request mix: the total with every request resident, per-request percentiles."""
    quantiles = {f"p{q}": q for q in (50, 90, 99)} | {"max": 100}
    return {
        "engine": summary.engine,
        "requests": summary.requests,
        "total_bytes": summary.total_bytes,
        **({} if summary.per_gpu_bytes is None else {"per_gpu_bytes": summary.per_gpu_bytes, "gpus": summary.gpus}),
        "tokens": {key: summary.tokens_percentile(q) for key, q in quantiles.items()},
        "bytes_per_request": {key: summary.bytes_percentile(q) for key, q in quantiles.items()},
        "notes": notes,
    }


def preset_row(preset: Preset, spec: ModelSpec, bf16_per_token: int) -> dict[str, Any]:
    """One preset as a JSON-ready summary row (``kvcalc presets`` draws its table from these)."""
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
        "weights_bytes": preset.weights.bytes if preset.weights is not None else None,
        "weights_format": preset.weights.format if preset.weights is not None else None,
        "weights_source": preset.weights.source if preset.weights is not None else None,
        "source": preset.source,
    }


def comparison_notes(comp: Comparison) -> list[str]:
    """The comparison's notes, then each model's, once each (the table prints the same list)."""
    notes = list(comp.notes)
    for r in comp.rows:
        for note in (*r.candidate.spec.notes, *r.notes):
            if "keep at most" not in note:  # windows show in the numbers; one note per length is noise
                notes.append(f"{r.candidate.spec.name}: {note}")
    return list(dict.fromkeys(notes))


def comparison_json(comp: Comparison) -> dict[str, Any]:
    rows = []
    kinds: dict[int, str] = {}  # one label per candidate, not per row
    for r in comp.rows:
        c = r.candidate
        kind = kinds.get(id(c))
        if kind is None:
            kind = kinds[id(c)] = attention_kind(c.spec)
        # The ratio as Fraction gives it: int / int rounds correctly, and the gcd reduces it.
        common = gcd(r.total_bytes, r.baseline_bytes)
        rows.append(
            {
                "label": c.label,
                "model": c.spec.name,
                "own": c.own,
                "attention": kind,
                "kv_heads": c.kv_heads,
                "latent_dim": c.latent_dim,
                "elements_per_token_per_layer": c.elements_per_token,
                "kv_dtype": r.kv_dtype.name,
                "tokens": r.tokens,
                "batch": comp.batch,
                "per_token_bytes": r.per_token_bytes,
                "total_bytes": r.total_bytes,
                "ratio": r.total_bytes / r.baseline_bytes,
                "ratio_exact": f"{r.total_bytes // common}/{r.baseline_bytes // common}",
            }
        )
    return {
        "mode": comp.mode,
        "baseline": comp.baseline,
        "batch": comp.batch,
        "tokens": list(comp.tokens),
        "kv_dtypes": [d.name for d in comp.dtypes],
        "rows": rows,
        "notes": comparison_notes(comp),
    }


def verdict_json(verdict: Verdict | None) -> dict[str, Any] | None:
    if verdict is None:
        return None
    first = verdict.first_remedy
    return {
        "fits": verdict.fits,
        "reason": verdict.reason,
        "needed_bytes": verdict.needed_bytes,
        "headroom_bytes": verdict.headroom_bytes,
        "first_remedy": None if first is None else first.change,
        "remedies": [{"change": r.change, "fits": r.fits, "figure": r.figure} for r in verdict.remedies],
    }


def fit_json(
    result: Fit,
    budget: Budget,
    gpu_label: str | None,
    notes: list[str],
    workload: Workload,
    *,
    verdict: Verdict | None = None,
    context_limit: int | None = None,
    dp_attention: int = 1,
    command: WrittenCommand | None = None,
) -> dict[str, Any]:
    from kvcalc.engines import PLAN_JSON_KEYS

    plan = result.plan
    return {
        "engine": result.engine,
        "gpu": gpu_label,
        # Attention-DP: the workload is the KV's (groups of tp / dp_attention GPUs).
        "tp": workload.tp * dp_attention,
        "pp": workload.pp,
        "dp": workload.dp // dp_attention,
        "dp_attention": dp_attention,
        "budget": [
            {
                "label": line.label,
                "bytes": line.bytes,
                "detail": line.detail or None,
                "low": line.low,
                "high": line.high,
            }
            for line in budget.lines
        ],
        "kv_budget_bytes": result.kv_budget,
        "kv_budget_range": None if budget.kv_low is None else [budget.kv_low, budget.kv_high],
        "tokens": result.tokens,
        "batch": result.batch,
        "images": workload.images,
        "max_tokens": result.max_tokens,
        "max_concurrency": result.max_concurrency,
        "max_concurrency_exact": float(result.max_concurrency_exact)
        if result.max_concurrency_exact is not None
        else None,
        "max_context": result.max_context,
        "context_limit": context_limit,
        "verdict": verdict_json(verdict),
        "max_concurrency_capped": result.max_concurrency_capped,
        "max_context_capped": result.max_context_capped,
        "fits": result.fits,
        # One key per engine with a capacity plan, null but the plan's own (which describes itself).
        **dict.fromkeys(PLAN_JSON_KEYS),
        **(plan.json_fields() if plan is not None else {}),
        # The engine's own command line for this answer (null: an engine kvcalc writes none for).
        "command": None
        if command is None
        else {"argv": list(command.argv), "text": command.text, "notes": list(command.notes)},
        "notes": notes,
    }


def offload_json(report: OffloadReport) -> dict[str, Any]:
    return {
        "model": report.model.name,
        "gpu": report.gpu_label,
        "gpu_layers": report.gpu_layers,
        "auto": report.auto,
        "layers": report.n_layer,
        "tokens": report.workload.tokens,
        "batch": report.workload.batch,
        "devices": [
            {
                "device": d.name,
                "weights_bytes": d.weights,
                "kv_cache_bytes": d.kv_cache,
                "compute_bytes": d.compute,
                "total_bytes": d.total,
            }
            for d in report.devices
        ],
        "gpu_bytes_available": report.gpu_bytes,
        "fits": report.fits,
        "notes": list(report.notes),
    }


def _step_json(step: Step) -> dict[str, Any]:
    return {
        "weight_bytes": step.weight_bytes,
        "kv_bytes": step.kv_bytes,
        "flops": step.flops,
        "attention_flops": step.attention_flops,
        "memory_seconds": step.memory_s,
        "compute_seconds": step.compute_s,
        "seconds": step.seconds,
        "bound_by": step.bound_by,
    }


def speed_json(report: SpeedReport) -> dict[str, Any]:
    """``kvcalc speed --json``: bytes and FLOPs are integers (per GPU); times in seconds."""
    s = report.result
    hw, w, d = s.hardware, s.weights, s.decode
    return {
        "model": report.model.name,
        "engine": report.engine,
        "kv_dtype": report.kv_dtype.name,
        "kind": "bound" if hw.is_bound else "estimate",
        "hardware": {
            "label": hw.label, "bandwidth_bytes_per_s": hw.bandwidth, "flops_per_s": hw.flops,
            "compute_dtype": hw.compute_dtype, "bandwidth_efficiency": float(hw.bandwidth_efficiency),
            "flops_efficiency": float(hw.flops_efficiency),
        },
        "tp": s.tp,
        "batch": s.batch,
        "prompt_tokens": s.prompt,
        "output_tokens": s.output,
        "weights": {
            "bytes": w.total_bytes, "source": report.weights_label, "embedding_bytes": w.embedding_bytes,
            "expert_bytes": w.expert_bytes, "experts": w.experts, "experts_per_token": w.top_k,
            "parameters_per_token": w.params_per_token,
        },
        "prefill": {**_step_json(s.prefill), "ttft_seconds": s.prefill.seconds, "ttft_mean_seconds": s.ttft_mean_s},
        "decode": {
            "first": _step_json(d.first), "last": _step_json(d.last), "tpot_mean_seconds": d.mean_s,
            "steps": d.steps, "steps_evaluated": d.sampled, "memory_bound_steps": d.memory_bound_steps,
        },
        "compute_bound_from_prompt": s.compute_bound_prompt,
        "kv_read_overtakes_weights_at": s.kv_overtakes_at,
        "sweep": [
            {
                "batch": r.batch, "ttft_seconds": r.prefill.seconds, "ttft_mean_seconds": r.ttft_mean_s,
                "tpot_mean_seconds": r.decode.mean_s,
                "output_tokens_per_s": r.throughput, "first_step_kv_bytes": r.decode.first.kv_bytes,
                "fits": r.fits,
            }
            for r in s.sweep
        ],
        "estimate": _estimate_json(report),
        "notes": list(report.notes),
    }  # fmt: skip


def _estimate_json(report: SpeedReport) -> dict[str, Any] | None:
    """The estimate under the bound's field names, with ``low`` / ``high`` and its terms."""
    est = report.estimate
    if est is None:
        return None

    def figures(p: Any) -> dict[str, Any]:
        return {"batch": p.batch, "ttft_seconds": p.ttft_s, "ttft_mean_seconds": p.ttft_mean_s,
                "tpot_mean_seconds": p.tpot_mean_s, "e2e_seconds": p.e2e_s,
                "output_tokens_per_s": p.output_tokens_per_s, "low": dict(p.low), "high": dict(p.high)}  # fmt: skip

    def terms(t: Any) -> dict[str, Any]:
        return {"tokens": t.tokens, "memory_seconds": t.memory_s, "matmul_seconds": t.gemm_s,
                "attention_seconds": t.attention_s, "kernels_seconds": t.kernels_s,
                "communication_seconds": t.communication_s, "routing_seconds": t.routing_s,
                "engine_seconds": t.overhead_s, "seconds": t.seconds}  # fmt: skip

    o, lay, dev = est.overhead, est.setting.layout, est.setting.device
    return {
        **figures(est.at),
        "compute_dtype": dev.compute_dtype, "cuda_graphs": est.setting.graphs,
        "layout": {"tp": lay.tp, "pp": lay.pp, "ep": lay.ep, "dp_attention": lay.dp_attention},
        "prefill_passes": est.prefill_passes, "prefill": terms(est.prefill), "decode_first": terms(est.decode),
        "engine_costs": {"engine": o.engine, "step_seconds": o.step_s, "layer_graphs_seconds": o.layer_graphs_s,
                         "layer_eager_seconds": o.layer_eager_s, "request_seconds": o.request_s,
                         "prefill_chunk": o.prefill_chunk, "source": o.source},
        "sweep": [figures(p) for p in est.sweep],
    }  # fmt: skip


def gpu_row(gpu: GPU) -> dict[str, Any]:
    """One GPU preset as a JSON-ready row (``kvcalc gpus`` draws its table from these)."""
    p = gpu.peaks
    link = p.link if p is not None else None
    return {
        "name": gpu.name,
        "aliases": list(gpu.aliases),
        "runtime_bytes": gpu.runtime_bytes,
        "unified_bytes": gpu.unified_bytes,
        "smi_mib": gpu.smi_mib,
        "bandwidth": p.bandwidth if p is not None else None,
        "bf16_flops": p.bf16 if p is not None else None,
        "fp8_flops": p.fp8 if p is not None else None,
        "fp4_flops": p.fp4 if p is not None else None,
        "int8_ops": p.int8 if p is not None else None,
        "arch": p.arch if p is not None else None,
        "memory_kind": p.memory_kind if p is not None else None,
        "link": None if link is None else {"kind": link.kind, "bandwidth": link.bandwidth, "label": link.label,
                                           "source": link.source},
        "source": gpu.source,
        "peaks_source": p.source if p is not None else None,
    }  # fmt: skip


def engine_row(plugin: EnginePlugin) -> dict[str, Any]:
    """One engine as ``kvcalc engines --json`` lists it: name, aliases, releases and summary."""
    return {"name": plugin.name, "aliases": list(plugin.aliases), "versions": list(plugin.versions),
            "default_version": plugin.default_version, "summary": plugin.summary,
            "knobs": [k.name for k in plugin.options.knobs()]}  # fmt: skip


def knob_row(knob: Knob) -> dict[str, Any]:
    """One knob as ``kvcalc engines NAME --json`` shows it: its API name, kvcalc's flag, the
    engine's own flag, its default, bounds and help."""
    return {"name": knob.name, "flag": knob.flag, "engine_flag": knob.engine_flag, "kind": knob.kind,
            "default": knob.default, "minimum": None if knob.is_flag else knob.minimum,
            "maximum": None if knob.is_flag else knob.maximum, "applies_to_estimate": knob.sizes_cache,
            "simulate_only": knob.simulate_only, "help": knob.help}  # fmt: skip
