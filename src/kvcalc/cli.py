"""The ``kvcalc`` command line: parse flags, call the core, hand the result to ``render``.

Errors become one line on stderr and a non-zero exit; ``KVCALC_DEBUG=1`` shows tracebacks.
"""

# No `from __future__ import annotations` here: typer would have to eval() every string
# annotation at start-up (~5 ms, benchmarks/startup.py); real annotations are read directly.
import json
import os
import re
import sys
from typing import Annotated, Any, NoReturn

import typer

from . import __version__
from .errors import KvcalcError, UsageError
from .units import Units, parse_count, parse_size

app = typer.Typer(
    name="kvcalc",
    help="How much memory the KV cache of a transformer LLM takes, why, and whether it fits.",
    context_settings={"help_option_names": ["-h", "--help"]},
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
presets_app = typer.Typer(
    help="List the bundled model presets, or show one.",
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(presets_app, name="presets")

# Every name --kv-dtype accepts, for help texts and completion (dtypes.py is cheap to import).
KV_DTYPE_NAMES = ("auto", "fp32", "fp16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", "int4", "int2",
                  "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")  # fmt: skip
KV_DTYPE_LIST = ", ".join(KV_DTYPE_NAMES[1:])


def _complete_engine(incomplete: str) -> list[str]:
    from .engines import ENGINE_NAMES

    return [name for name in ENGINE_NAMES if name.startswith(incomplete.lower())]


def _complete_gpu(incomplete: str) -> list[str]:
    from .gpus import GPUS

    return sorted(label for g in GPUS for label in (g.name, *g.aliases) if label.startswith(incomplete.lower()))


def _complete_dtype(incomplete: str) -> list[str]:
    # A list option (compare: fp16,fp8) completes its last item.
    head, _, last = incomplete.rpartition(",")
    prefix = f"{head}," if head else ""
    return [prefix + name for name in KV_DTYPE_NAMES if name.startswith(last.lower())]


TOKENS_HELP = (
    "Tokens cached per sequence (prompt + generated). Accepts 2048, 32k (= 32,768: k and m are "
    "binary, 1024 and 1024^2, as context lengths are quoted) and 1,000. Default 2048."
)


# Serving options shared by estimate, compare and fit.
EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        metavar="NAME",
        autocompletion=_complete_engine,
        help="Storage semantics: theoretical (what attention must keep), transformers (DynamicCache: sliding "
        "layers keep W-1), vllm (16-token blocks, sliding reservation), sglang (token pool), llama.cpp "
        "(cells padded to 256, SWA cells).",
    ),
]
KDtypeOpt = Annotated[
    str | None,
    typer.Option(
        "--k-dtype",
        metavar="DTYPE",
        autocompletion=_complete_dtype,
        help="K format on its own (llama.cpp -ctk): any --kv-dtype name (f16, q8_0, q4_0, ...).",
    ),
]
VDtypeOpt = Annotated[
    str | None,
    typer.Option(
        "--v-dtype", metavar="DTYPE", autocompletion=_complete_dtype, help="V format on its own (llama.cpp -ctv)."
    ),
]
QuantGroupOpt = Annotated[
    int,
    typer.Option("--quant-group", metavar="N", help="Group size of int8/int4/int2 KV: one fp16 scale and zero each."),
]
ResidualOpt = Annotated[
    int | None,
    typer.Option(
        "--residual-tokens",
        metavar="N",
        help="Newest tokens a quantized cache keeps in the model dtype (transformers QuantizedCache: "
        "residual_length 128, so at most 127; default 127 with --engine transformers, else 0).",
    ),
]
TpOpt = Annotated[int, typer.Option("--tp", metavar="N", help="Tensor-parallel ranks: KV heads split, MLA replicated.")]
PpOpt = Annotated[int, typer.Option("--pp", metavar="N", help="Pipeline-parallel stages: layers split (vLLM's way).")]
DpOpt = Annotated[
    int, typer.Option("--dp", metavar="N", help="Data-parallel replicas; the batch is split across them.")
]
PrefixOpt = Annotated[
    str | None,
    typer.Option(
        "--shared-prefix",
        metavar="P",
        help="The first P tokens of every sequence are identical and cached once (prefix caching; "
        "paged engines share whole blocks only).",
    ),
]
BlockOpt = Annotated[
    int | None,
    typer.Option("--block-size", metavar="N", help="vLLM block / SGLang page size in tokens (vLLM: 16, MLA 64)."),
]
BatchedOpt = Annotated[
    int | None,
    typer.Option("--max-batched-tokens", metavar="N", help="vLLM max_num_batched_tokens (default 8192)."),
]
UbatchOpt = Annotated[int | None, typer.Option("--ubatch", metavar="N", help="llama.cpp n_ubatch (default 512).")]
UnifiedOpt = Annotated[bool, typer.Option("--kv-unified", help="llama.cpp: one KV stream shared by all slots (-kvu).")]


def _version(value: bool) -> None:
    if value:
        _echo(f"kvcalc {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """How much memory the KV cache of a transformer LLM takes, why, and whether it fits."""


def _echo(text: str = "") -> None:
    """Results go to stdout as plain text: no markup, nothing to strip when piped."""
    from .console import out

    out(text)


def _print_json(data: Any) -> None:
    """JSON on stdout: ASCII-escaped, so any output encoding can carry it."""
    from .console import out

    out(json.dumps(data, indent=2))


def _echo_notes(notes: Any) -> None:
    """``note:`` lines; notes may quote config text, so control characters are neutralised."""
    from .console import clean

    for note in dict.fromkeys(notes):
        _echo(f"note: {clean(str(note))}")


def _complete_model(incomplete: str) -> list[str]:
    """Shell completion for MODEL: preset names and aliases."""
    from .presets import load_presets

    labels = [label for p in load_presets().values() for label in (p.name, *p.aliases)]
    return sorted(label for label in labels if label.startswith(incomplete.lower()))


def _units(value: str) -> Units:
    if value not in ("binary", "decimal", "both"):
        raise UsageError(f"--units must be binary, decimal or both, got {value!r}")
    return value  # type: ignore[return-value]  # narrowed by the check above


def _optional_count(value: str | None, what: str) -> int | None:
    return None if value is None else parse_count(value, what=what)


@app.command()
def estimate(
    model: Annotated[
        str | None,
        typer.Argument(
            metavar="MODEL",
            autocompletion=_complete_model,
            help="A bundled preset name (see 'kvcalc presets'), a config.json or a folder "
            "holding one, or a Hugging Face repo id (org/name). Omit it to describe a model "
            "by hand with --layers/--kv-heads/--head-dim.",
            show_default=False,
        ),
    ] = None,
    tokens: Annotated[str | None, typer.Option("--tokens", "-t", metavar="T", help=TOKENS_HELP)] = None,
    batch: Annotated[str, typer.Option("--batch", "-b", metavar="B", help="Sequences resident at once (B).")] = "1",
    prompt: Annotated[
        str | None,
        typer.Option(
            "--prompt",
            metavar="P",
            help="Prompt tokens P; with --output, T = P + O. For encoder-decoder models the "
            "prompt feeds the encoder and T = O.",
        ),
    ] = None,
    output: Annotated[str | None, typer.Option("--output", metavar="O", help="Generated tokens O.")] = None,
    encoder_tokens: Annotated[
        str | None,
        typer.Option(
            "--encoder-tokens",
            metavar="N",
            help="Encoder length cached by cross-attention (encoder-decoder models only). "
            "Default: the config's max_source_positions (Whisper: 1500), else the prompt.",
        ),
    ] = None,
    kv_dtype: Annotated[
        str | None,
        typer.Option(
            "--kv-dtype",
            metavar="DTYPE",
            autocompletion=_complete_dtype,
            help=f"Element format of the cache: {KV_DTYPE_LIST} (int: fp16 scale and zero per --quant-group; "
            "q*: llama.cpp blocks of 32), or auto: what the engine stores by default (the model's dtype; vLLM "
            "and SGLang run float32 checkpoints in 16 bits, llama.cpp uses f16).",
        ),
    ] = None,
    units: Annotated[
        str,
        typer.Option(
            "--units",
            metavar="binary|decimal|both",
            help="binary (KiB, MiB, GiB: powers of 2^10), decimal (kB, MB, GB: powers of 10^3) "
            "or both. Exact byte counts are always shown.",
        ),
    ] = "both",
    explain: Annotated[
        bool,
        typer.Option(
            "--explain",
            help="Show M = 2 x L x B x T x H_kv x d_h x s with this model's numbers substituted.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print plain JSON on stdout (integer byte counts).")] = False,
    revision: Annotated[
        str | None,
        typer.Option("--revision", metavar="REV", help="Hub revision (branch, tag or commit) for a repo id."),
    ] = None,
    layers: Annotated[int | None, typer.Option("--layers", metavar="L", help="By hand: number of layers (L).")] = None,
    heads: Annotated[
        int | None, typer.Option("--heads", metavar="H", help="By hand: query heads (to check GQA grouping).")
    ] = None,
    kv_heads: Annotated[
        int | None,
        typer.Option("--kv-heads", metavar="H_KV", help="By hand: KV heads (H_kv); default --heads."),
    ] = None,
    head_dim: Annotated[int | None, typer.Option("--head-dim", metavar="D", help="By hand: head dim (d_h).")] = None,
    engine: EngineOpt = "theoretical",
    k_dtype: KDtypeOpt = None,
    v_dtype: VDtypeOpt = None,
    quant_group: QuantGroupOpt = 64,
    residual_tokens: ResidualOpt = None,
    tp: TpOpt = 1,
    pp: PpOpt = 1,
    dp: DpOpt = 1,
    shared_prefix: PrefixOpt = None,
    block_size: BlockOpt = None,
    max_batched_tokens: BatchedOpt = None,
    ubatch: UbatchOpt = None,
    kv_unified: UnifiedOpt = False,
    lengths: Annotated[
        str | None,
        typer.Option(
            "--lengths",
            metavar="FILE",
            help='A request mix: CSV (prompt,output columns, or tokens) or JSONL ({"prompt": P, "output": O}). '
            "Prints the total with every request resident and per-request percentiles.",
        ),
    ] = None,
    vs_theoretical: Annotated[
        bool,
        typer.Option("--vs-theoretical", help="Show the engine's figure beside the theoretical one, and the gap."),
    ] = False,
) -> None:
    """Estimate the KV cache of MODEL for a workload of B sequences of T tokens.

    Sliding-window layers keep at most W tokens (the window: the newest query reads the W most
    recent positions, itself included, as in Mistral's rolling buffer); transformers' DynamicCache
    keeps W-1 between steps. Chunked layers keep at most one chunk. Linear-attention and Mamba
    layers keep a fixed state per sequence. MLA layers keep one latent per token.
    """
    from .api import load_model, model_from_geometry
    from .estimator import Workload
    from .estimator import estimate as estimate_spec
    from .render import estimate_json, estimate_table, explain_lines, summary_lines, vs_theoretical_lines

    unit_choice = _units(units)
    if explain and as_json:
        raise UsageError("--explain writes the derivation as text; --json gives the numbers: choose one")
    if lengths is not None:
        ignored = {
            "--tokens": tokens is not None,
            "--prompt": prompt is not None,
            "--output": output is not None,
            "--batch": batch != "1",
            "--explain": explain,
            "--vs-theoretical": vs_theoretical,
        }
        given = [flag for flag, present in ignored.items() if present]
        if given:
            raise UsageError(f"--lengths gives every request its own length; {', '.join(given)} would be ignored")
    by_hand = any(v is not None for v in (layers, heads, kv_heads, head_dim))
    if model is not None and by_hand:
        raise UsageError("give either MODEL or --layers/--kv-heads/--head-dim, not both")
    if model is None:
        if not by_hand:
            raise UsageError("give a MODEL (preset, config.json or repo id) or --layers/--kv-heads/--head-dim")
        if layers is None or head_dim is None:
            raise UsageError("describing a model by hand needs --layers and --head-dim")
        spec = model_from_geometry(layers=layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim)
    else:
        spec = load_model(model, revision=revision, on_fetch=_say_fetching)

    prompt_n = _optional_count(prompt, "--prompt")
    output_n = _optional_count(output, "--output")
    notes: list[str] = []
    enc = _optional_count(encoder_tokens, "--encoder-tokens")
    if enc is not None and not spec.is_encoder_decoder:
        raise UsageError(f"--encoder-tokens applies to encoder-decoder models; {spec.name} has no cross-attention")
    if tokens is not None and (prompt_n is not None or output_n is not None):
        raise UsageError("give either --tokens or --prompt/--output, not both")
    if prompt_n is not None or output_n is not None:
        p, o = prompt_n or 0, output_n or 0
        if spec.is_encoder_decoder:
            enc = enc or prompt_n
            if not o:
                raise UsageError("an encoder-decoder model caches generated tokens: give --output")
            t = o
        else:
            t = p + o
    elif tokens is not None:
        t = parse_count(tokens, what="--tokens")
    else:
        t = 2048
        if lengths is None:
            notes.append("--tokens not given: 2,048 tokens per sequence assumed")
    _positive(("--tp", tp), ("--pp", pp), ("--dp", dp))
    serving = _serving(
        spec,
        engine=engine,
        kv_dtype=kv_dtype,
        k_dtype=k_dtype,
        v_dtype=v_dtype,
        quant_group=quant_group,
        residual_tokens=residual_tokens,
        block_size=block_size,
        max_batched_tokens=max_batched_tokens,
        ubatch=ubatch,
        kv_unified=kv_unified,
    )
    notes += serving.notes
    workload = Workload(
        tokens=t,
        batch=parse_count(batch, what="--batch"),
        kv_dtype=serving.k_dtype,
        v_dtype=serving.v_dtype,
        encoder_tokens=enc,
        shared_prefix=_optional_count(shared_prefix, "--shared-prefix") or 0,
        residual_tokens=serving.residual_tokens,
        tp=tp,
        pp=pp,
        dp=dp,
    )
    if lengths is not None:
        _estimate_lengths(spec, workload, serving.engine, lengths, as_json=as_json, units=unit_choice, notes=notes)
        return
    result = estimate_spec(spec, workload, engine=serving.engine)
    theory = estimate_spec(spec, workload) if vs_theoretical else None
    all_notes = list(dict.fromkeys([*spec.notes, *notes, *result.notes]))

    if as_json:
        data = estimate_json(result)
        data["notes"] = all_notes
        if theory is not None:
            data["theoretical_total_bytes"] = theory.total_bytes
            data["difference_bytes"] = result.total_bytes - theory.total_bytes
        _print_json(data)
        return
    _echo(estimate_table(result))
    for line in summary_lines(result, unit_choice):
        _echo(line)
    if theory is not None:
        for line in vs_theoretical_lines(result, theory, unit_choice):
            _echo(line)
    if explain:
        _echo()
        for line in explain_lines(result, unit_choice):
            _echo(line)
    _echo_notes(all_notes)


def _positive(*flags: tuple[str, int | None]) -> None:
    for flag, value in flags:
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be a positive whole number, got {value}")


class _Serving:
    """The engine and formats the serving flags ask for, with the defaults noted."""

    def __init__(self, engine: Any, k_dtype: Any, v_dtype: Any, residual_tokens: int, notes: list[str]) -> None:
        self.engine = engine
        self.k_dtype = k_dtype
        self.v_dtype = v_dtype
        self.residual_tokens = residual_tokens
        self.notes = notes


def _serving(
    spec: Any,
    *,
    engine: str,
    kv_dtype: str | None,
    k_dtype: str | None = None,
    v_dtype: str | None = None,
    quant_group: int = 64,
    residual_tokens: int | None = None,
    block_size: int | None = None,
    max_batched_tokens: int | None = None,
    ubatch: int | None = None,
    kv_unified: bool = False,
) -> _Serving:
    from .dtypes import parse_kv_dtype
    from .engines import make_engine, uses_mla

    for flag, value in (("--block-size", block_size), ("--max-batched-tokens", max_batched_tokens),
                        ("--ubatch", ubatch), ("--quant-group", quant_group)):  # fmt: skip
        if value is not None and value <= 0:
            raise UsageError(f"{flag} must be positive, got {value}")
    chosen, notes = make_engine(
        engine,
        block_size=block_size,
        max_num_batched_tokens=max_batched_tokens,
        n_ubatch=ubatch,
        kv_unified=kv_unified,
        uses_mla=uses_mla(spec.caches),
    )
    base = parse_kv_dtype(kv_dtype, quant_group=quant_group) if kv_dtype is not None else None
    k = parse_kv_dtype(k_dtype, quant_group=quant_group) if k_dtype is not None else base
    v = parse_kv_dtype(v_dtype, quant_group=quant_group) if v_dtype is not None else k
    if residual_tokens is not None and residual_tokens < 0:
        raise UsageError(f"--residual-tokens must not be negative, got {residual_tokens}")
    residual = residual_tokens
    quantized = any(d is not None and not d.is_plain for d in (k, v))
    if residual is None:
        residual = 127 if chosen.name == "transformers" and quantized else 0
        if residual:
            notes.append("QuantizedCache keeps up to 127 newest tokens in the model dtype (residual_length 128)")
    return _Serving(chosen, k, v if v != k else None, residual, notes)


def _estimate_lengths(
    spec: Any, workload: Any, engine: Any, path: str, *, as_json: bool, units: Units, notes: list[str]
) -> None:
    from pathlib import Path

    from .render import lengths_json, lengths_lines
    from .sources import LENGTHS_LIMIT, read_regular_file
    from .workloads import parse_lengths, summarize_requests

    data = read_regular_file(Path(path), what="--lengths file", limit=LENGTHS_LIMIT)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"--lengths file {path} is not UTF-8 text") from None
    requests = parse_lengths(text, name=path)
    summary = summarize_requests(spec, workload, engine, requests)
    if as_json:
        _print_json(lengths_json(summary, [*spec.notes, *notes]))
        return
    for line in lengths_lines(summary, units):
        _echo(line)
    _echo_notes(dict.fromkeys([*spec.notes, *notes]))


def _split_list(text: str, what: str) -> list[str]:
    """``4k,32k`` -> ``["4k", "32k"]``; lists use commas, so counts in them take no thousands commas."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise UsageError(f"{what} needs a comma-separated list of values, got {text!r} (an empty item)")
    return items


@app.command()
def compare(
    models: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[MODEL]...",
            autocompletion=_complete_model,
            help="One model: its attention variants side by side. Several: the models side by side, "
            "smallest cache first. Presets, config.json paths and repo ids mix freely.",
            show_default=False,
        ),
    ] = None,
    tokens: Annotated[
        str | None,
        typer.Option(
            "--tokens",
            "-t",
            metavar="T[,T...]",
            help="Tokens per sequence, or a comma list (4k,32k,128k) for a sweep: one column per length. "
            "k = 1024. Default 2048.",
        ),
    ] = None,
    batch: Annotated[str, typer.Option("--batch", "-b", metavar="B", help="Sequences resident at once.")] = "1",
    kv_dtype: Annotated[
        str | None,
        typer.Option(
            "--kv-dtype",
            metavar="DTYPE[,DTYPE...]",
            autocompletion=_complete_dtype,
            help=f"One or more of {KV_DTYPE_LIST} (or auto); each multiplies the rows. Default: each model's "
            "own, as the engine stores it.",
        ),
    ] = None,
    kv_heads: Annotated[
        str | None,
        typer.Option(
            "--kv-heads",
            metavar="N[,N...]",
            help="Extra GQA variants to show (e.g. 32,8,4,1); each must divide the query heads. MHA, MQA "
            "and the model's own are always shown.",
        ),
    ] = None,
    latent_dim: Annotated[
        int | None,
        typer.Option("--latent-dim", metavar="D_C", help="Add an MLA variant caching a latent of D_C elements."),
    ] = None,
    rope_dim: Annotated[
        int | None,
        typer.Option("--rope-dim", metavar="D_R", help="The MLA variant's decoupled RoPE key dims (default 0)."),
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option(
            "--baseline",
            metavar="LABEL",
            help="Row the ratios divide by: a variant (MHA, GQA-8 or 8, MQA, MLA) or a model. "
            "Default: MHA for variants, the first model given for models.",
        ),
    ] = None,
    units: Annotated[
        str, typer.Option("--units", metavar="binary|decimal|both", help="Units for sizes, as in estimate.")
    ] = "both",
    chart: Annotated[
        bool, typer.Option("--chart", help="Also draw bytes against context length as text bars.")
    ] = False,
    plot: Annotated[
        str | None,
        typer.Option(
            "--plot",
            metavar="FILE",
            help="Also save a chart of bytes against context length as FILE.png or FILE.svg (needs "
            "matplotlib: pip install matplotlib, or '.[plot]' in a kvcalc checkout).",
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print plain JSON: an object with a rows list (integer bytes).")
    ] = False,
    revision: Annotated[
        str | None, typer.Option("--revision", metavar="REV", help="Hub revision for repo ids.")
    ] = None,
    layers: Annotated[int | None, typer.Option("--layers", metavar="L", help="By hand: number of layers.")] = None,
    heads: Annotated[int | None, typer.Option("--heads", metavar="H", help="By hand: query heads.")] = None,
    head_dim: Annotated[int | None, typer.Option("--head-dim", metavar="D", help="By hand: head dim.")] = None,
    engine: EngineOpt = "theoretical",
) -> None:
    """Compare MHA / GQA / MQA / MLA variants of one model, or several models, side by side.

    Same workload for every row; ratios are to the baseline at the same length (and the first
    dtype). Variants change a model's quality and need training: this compares memory only.
    """
    from collections import Counter

    from .api import load_model, model_from_geometry
    from .compare import attention_variants, candidate_for
    from .compare import compare as run_compare
    from .dtypes import parse_kv_dtype
    from .render import comparison_chart, comparison_json, comparison_table

    unit_choice = _units(units)
    names = models or []
    by_hand = any(v is not None for v in (layers, heads, head_dim))
    notes: list[str] = []
    if by_hand:
        if names:
            raise UsageError("give either MODEL or --layers/--heads/--head-dim, not both")
        if layers is None or heads is None or head_dim is None:
            raise UsageError("comparing by hand needs --layers, --heads and --head-dim")
        specs = [model_from_geometry(layers=layers, heads=heads, kv_heads=heads, head_dim=head_dim, name="custom")]
    elif not names:
        raise UsageError("give one MODEL (its variants), several (side by side), or --layers/--heads/--head-dim")
    else:
        repeated = [name for name, count in Counter(n.strip().lower() for n in names).items() if count > 1]
        if repeated:
            raise UsageError(f"{repeated[0]!r} is given more than once: each model is compared once")
        specs = [load_model(name, revision=revision, on_fetch=_say_fetching) for name in names]
        labels = [spec.name for spec in specs]
        if len(set(labels)) < len(labels):
            twice = next(label for label in labels if labels.count(label) > 1)
            raise UsageError(f"{twice} is given more than once (under two names): each model is compared once")
    if chart and as_json:
        raise UsageError("--chart draws text bars; --json gives the numbers: choose one")

    token_list = [parse_count(t, what="--tokens") for t in _split_list(tokens, "--tokens")] if tokens else [2048]
    if tokens is None:
        notes.append("--tokens not given: 2,048 tokens per sequence assumed")
    dtypes = [parse_kv_dtype(d) for d in _split_list(kv_dtype, "--kv-dtype")] if kv_dtype is not None else [None]
    if len(specs) == 1:
        extra = [parse_count(k, what="--kv-heads") for k in _split_list(kv_heads, "--kv-heads")] if kv_heads else []
        candidates, variant_notes = attention_variants(
            specs[0], kv_heads=extra, latent_dim=latent_dim, rope_dim=rope_dim, mark_own=not by_hand
        )
        mode = "variants"
        notes += variant_notes
    else:
        if kv_heads is not None or latent_dim is not None or rope_dim is not None:
            raise UsageError("--kv-heads, --latent-dim and --rope-dim compare variants of one model; give one MODEL")
        candidates = [candidate_for(spec) for spec in specs]
        mode = "models"
    from .engines import make_engine, uses_mla

    chosen, engine_notes = make_engine(engine, uses_mla=any(uses_mla(c.spec.caches) for c in candidates))
    notes += engine_notes
    result = run_compare(
        candidates,
        engine=chosen,
        mode=mode,
        tokens=token_list,
        dtypes=dtypes,
        batch=parse_count(batch, what="--batch"),
        baseline=baseline,
        notes=notes,
    )
    if plot is not None:
        from .charts import save_plot

        save_plot(result, plot)
    if as_json:
        _print_json(comparison_json(result))
        return
    _echo(comparison_table(result, unit_choice))
    if any(c.own for c in candidates) and mode == "variants":
        _echo("* the model's own attention")
    if chart:
        _echo()
        _echo(comparison_chart(result, unit_choice))
    _echo_notes(comparison_json(result)["notes"])
    if plot is not None:
        _echo(f"plot saved to {plot}")


@app.command()
def fit(
    model: Annotated[
        str | None,
        typer.Argument(metavar="MODEL", autocompletion=_complete_model, help="Preset, config.json or repo id."),
    ] = None,
    gpu: Annotated[
        str | None,
        typer.Option(
            "--gpu",
            metavar="NAME",
            autocompletion=_complete_gpu,
            help="GPU preset: h100-sxm, h100-pcie, h200, a100-40gb, a100-80gb, "
            "l4, l40s, rtx-4090, b200, mi300x (memory as the CUDA/ROCm runtime reports it).",
        ),
    ] = None,
    gpus: Annotated[
        int | None, typer.Option("--gpus", metavar="N", help="GPUs in all (default tp x pp x dp; alone, it sets --tp).")
    ] = None,
    gpu_memory: Annotated[
        str | None,
        typer.Option(
            "--gpu-memory",
            metavar="SIZE",
            help="Memory per GPU instead of a preset: 80GB = 80 x 10^9 bytes, 80GiB = 80 x 2^30.",
        ),
    ] = None,
    utilization: Annotated[
        float,
        typer.Option(
            "--utilization",
            metavar="U",
            help="Share of GPU memory the engine may use (vLLM gpu_memory_utilization: 0.9; 0.92 from vLLM 0.21).",
        ),
    ] = 0.9,
    weights: Annotated[
        str,
        typer.Option(
            "--weights",
            metavar="auto|SIZE",
            help="Model weights: auto reads model.safetensors.index.json "
            "beside a local config, the Hub's safetensors metadata for a repo id, or the preset's "
            "parameter count x dtype.",
        ),
    ] = "auto",
    overhead: Annotated[
        str,
        typer.Option(
            "--overhead",
            metavar="SIZE",
            help="Per-GPU allowance for peak activations and the runtime "
            "(CUDA context, cuBLAS/NCCL workspaces). vLLM measures this at start-up and logs the result "
            "as 'Available KV cache memory'; set it from your logs, or use --kv-budget.",
        ),
    ] = "2GiB",
    kv_budget_size: Annotated[
        str | None,
        typer.Option(
            "--kv-budget",
            metavar="SIZE",
            help="KV memory per GPU, skipping the derivation (vLLM logs it "
            "as 'Available KV cache memory' for each worker).",
        ),
    ] = None,
    tokens: Annotated[
        str | None, typer.Option("--tokens", "-t", metavar="T", help="Tokens per request (default 4096; k = 1024).")
    ] = None,
    batch: Annotated[
        str, typer.Option("--batch", "-b", metavar="B", help="Batch for the longest-context answer.")
    ] = "1",
    kv_dtype: Annotated[
        str | None,
        typer.Option(
            "--kv-dtype",
            metavar="DTYPE",
            autocompletion=_complete_dtype,
            help=f"KV format: {KV_DTYPE_LIST}, or auto (default: the engine's own choice for the model's dtype).",
        ),
    ] = None,
    engine: EngineOpt = "theoretical",
    k_dtype: KDtypeOpt = None,
    v_dtype: VDtypeOpt = None,
    quant_group: QuantGroupOpt = 64,
    residual_tokens: ResidualOpt = None,
    tp: Annotated[int | None, typer.Option("--tp", metavar="N", help="Tensor-parallel ranks.")] = None,
    pp: PpOpt = 1,
    dp: DpOpt = 1,
    block_size: BlockOpt = None,
    max_batched_tokens: BatchedOpt = None,
    ubatch: UbatchOpt = None,
    kv_unified: UnifiedOpt = False,
    max_model_len: Annotated[
        str | None, typer.Option("--max-model-len", metavar="N", help="Cap for the longest-context search.")
    ] = None,
    units: Annotated[str, typer.Option("--units", metavar="binary|decimal|both", help="Units for sizes.")] = "both",
    as_json: Annotated[bool, typer.Option("--json", help="Print plain JSON (integer bytes and counts).")] = False,
    revision: Annotated[str | None, typer.Option("--revision", metavar="REV", help="Hub revision.")] = None,
) -> None:
    """How many tokens, concurrent requests and how long a context fit on these GPUs.

    Budget per GPU = memory x utilization - weights / (tp x pp) - allowance, each line shown;
    vLLM answers follow vLLM's own block arithmetic ("GPU KV cache size", "Maximum concurrency").
    """
    from fractions import Fraction

    from .api import load_model
    from .estimator import Workload
    from .fit import fit as run_fit
    from .fit import kv_budget
    from .render import fit_json, fit_lines

    if model is None:
        raise UsageError("give a MODEL (preset, config.json or repo id)")
    unit_choice = _units(units)
    spec = load_model(model, revision=revision, on_fetch=_say_fetching)
    if not 0 < utilization <= 1:
        raise UsageError(f"--utilization must be in (0, 1], got {utilization}")
    _positive(("--pp", pp), ("--dp", dp), ("--tp", tp), ("--gpus", gpus))
    if tp is None:
        tp = gpus // (pp * dp) if gpus is not None else 1
        if tp < 1:
            raise UsageError(f"--gpus {gpus} is fewer than --pp {pp} x --dp {dp}")
    if gpus is not None and gpus != tp * pp * dp:
        raise UsageError(f"--gpus {gpus} does not equal --tp {tp} x --pp {pp} x --dp {dp}")
    serving = _serving(
        spec, engine=engine, kv_dtype=kv_dtype, k_dtype=k_dtype, v_dtype=v_dtype, quant_group=quant_group,
        residual_tokens=residual_tokens, block_size=block_size, max_batched_tokens=max_batched_tokens,
        ubatch=ubatch, kv_unified=kv_unified,
    )  # fmt: skip
    notes = list(serving.notes)
    t = parse_count(tokens, what="--tokens") if tokens is not None else 4096
    if tokens is None:
        notes.append("--tokens not given: requests of 4,096 tokens assumed")
    workload = Workload(
        tokens=t, batch=parse_count(batch, what="--batch"), kv_dtype=serving.k_dtype, v_dtype=serving.v_dtype,
        residual_tokens=serving.residual_tokens, tp=tp, pp=pp, dp=dp,
    )  # fmt: skip
    gpu_label = None
    if kv_budget_size is not None:
        if gpu is not None or gpu_memory is not None:
            raise UsageError("--kv-budget replaces --gpu/--gpu-memory: give one or the other")
        budget = _budget_from_size(kv_budget_size)
    else:
        gpu_bytes, gpu_label = _gpu_bytes(gpu, gpu_memory)
        if gpu is not None:
            from .gpus import find_gpu

            notes.append(f"{find_gpu(gpu).name} memory: {find_gpu(gpu).source}")
        weights_bytes, weights_label = _weights_bytes(model, spec, weights, revision)
        budget = kv_budget(
            gpu_bytes=gpu_bytes,
            utilization=Fraction(str(utilization)),
            weights_bytes=weights_bytes,
            overhead_bytes=parse_size(overhead, what="--overhead"),
            shards=tp * pp,
            weights_label=weights_label,
        )
    limit = parse_count(max_model_len, what="--max-model-len") if max_model_len is not None else None
    if limit is not None and t > limit:
        raise UsageError(f"--tokens {t:,} is longer than --max-model-len {limit:,}: an engine refuses such requests")
    result = run_fit(spec, workload, serving.engine, budget.kv_bytes, context_limit=limit)
    all_notes = list(dict.fromkeys([*spec.notes, *notes, *result.notes]))
    if as_json:
        _print_json(fit_json(result, budget, gpu_label, all_notes, workload))
        return
    for line in fit_lines(spec.name, result, budget, gpu_label, workload, unit_choice):
        _echo(line)
    _echo_notes(all_notes)


@app.command()
def probe(
    model: Annotated[
        str | None,
        typer.Argument(metavar="MODEL", autocompletion=_complete_model, help="Preset, config.json or repo id."),
    ] = None,
    device: Annotated[
        str, typer.Option("--device", metavar="auto|cpu|cuda", help="Where to build the cache (auto: CUDA if present).")
    ] = "auto",
    tokens: Annotated[
        str, typer.Option("--tokens", "-t", metavar="T", help="Tokens per sequence in all: prompt + decoded.")
    ] = "512",
    batch: Annotated[str, typer.Option("--batch", "-b", metavar="B", help="Sequences.")] = "1",
    decode: Annotated[
        int, typer.Option("--decode", metavar="N", help="Of the T tokens, how many are decoded one at a time.")
    ] = 2,
    kv_dtype: Annotated[
        str | None,
        typer.Option(
            "--kv-dtype",
            metavar="DTYPE",
            help="Model and cache dtype for the run: fp32, bf16, fp16 (default: the model's own, else fp32).",
        ),
    ] = None,
    raw: Annotated[
        bool,
        typer.Option(
            "--raw",
            help="Allocate the estimated tensors directly (only torch) and read the allocator's "
            "figures instead of running the model.",
        ),
    ] = False,
    engine: EngineOpt = "transformers",
    tolerance: Annotated[
        str,
        typer.Option(
            "--tolerance",
            metavar="BYTES|PCT",
            help="Allowed difference (0: exact tensor bytes, the default; 4096; 0.5%). Exit status 1 beyond it.",
        ),
    ] = "0",
    as_json: Annotated[bool, typer.Option("--json", help="Print plain JSON.")] = False,
    revision: Annotated[str | None, typer.Option("--revision", metavar="REV", help="Hub revision.")] = None,
    print_request: Annotated[
        bool,
        typer.Option(
            "--print-request",
            help="Print the probe's JSON request instead of running it (to run probe.py on another machine).",
        ),
    ] = False,
    from_result: Annotated[
        str | None,
        typer.Option(
            "--from-result",
            metavar="FILE",
            help="Compare a result probe.py printed elsewhere instead of running the probe here.",
        ),
    ] = None,
) -> None:
    """Measure a real KV cache with PyTorch and cross-check the estimate byte for byte.

    The model probe builds the model's transformers implementation from its config with random
    weights, shrunk to one layer of each kind (tiny vocab and MLPs, attention geometry exact),
    prefills and decodes, counts every cache tensor and scales by the real layer counts; the
    estimate uses transformers' semantics. No code from a model repo is run. The probe is one
    file, kvcalc/probe.py: copy it to a GPU box and run `python probe.py request.json`.
    """
    from .api import model_from_source
    from .crosscheck import check_model, model_request, parse_tolerance, raw_request, validate_result
    from .dtypes import FP32, parse_kv_dtype
    from .engines import make_engine, uses_mla
    from .estimator import Workload
    from .estimator import estimate as estimate_spec
    from .render import probe_json, probe_lines, raw_probe_json, raw_probe_lines
    from .sources import resolve

    if model is None:
        raise UsageError("give a MODEL (preset, config.json or repo id)")
    if not raw and engine != "transformers":
        raise UsageError("the model probe measures transformers' cache: --engine applies to --raw only")
    if decode < 0:
        raise UsageError(f"--decode must not be negative, got {decode}")
    if print_request and from_result is not None:
        raise UsageError("--print-request prints a request to run elsewhere; --from-result reads its answer: give one")
    source = resolve(model, revision=revision, on_fetch=_say_fetching)
    spec = model_from_source(source)
    chosen, notes = make_engine(engine if raw else "transformers", uses_mla=uses_mla(spec.caches))
    asked = parse_kv_dtype(kv_dtype) if kv_dtype is not None else None
    # The probe runs the model in its own dtype; a config without one builds in torch's float32.
    dtype = asked or (spec.dtype if spec.dtype and spec.dtype.is_plain else FP32)
    workload = Workload(tokens=parse_count(tokens, what="--tokens"), batch=parse_count(batch, what="--batch"),
                        kv_dtype=dtype)  # fmt: skip
    est = estimate_spec(spec, workload, engine=chosen)
    # Checked before the run, so a bad --tolerance fails in a second, not after minutes of probing.
    allowed = parse_tolerance(tolerance, est.total_bytes)
    if raw:
        request = raw_request(est, device=device, block_size=getattr(chosen, "block_size", None))
    else:
        if not isinstance(source.config, dict):
            raise UsageError("the model probe needs a JSON object config")
        request = model_request(source.config, est, decode=decode, device=device)
    if print_request:
        _print_json(request)
        return
    if from_result is not None:
        from pathlib import Path

        from .sources import RESULT_LIMIT, read_json_file

        loaded = read_json_file(Path(from_result), limit=RESULT_LIMIT)
        result = validate_result(loaded, request, where=from_result, model_types=(spec.model_type,))
    else:
        result = _run_probe(request, raw=raw, device=device, quiet=as_json)
    if raw:
        data = raw_probe_json(est, result)
        if as_json:
            _print_json(data)
        else:
            for line in raw_probe_lines(est, result, _units("both")):
                _echo(line)
        if abs(data["measured_bytes"] - data["estimated_bytes"]) > allowed:
            raise typer.Exit(1)
        return
    check = check_model(spec, est, result)
    all_notes = list(dict.fromkeys([*spec.notes, *notes, *est.notes, *check.notes, *result.get("notes", [])]))
    if as_json:
        _print_json(probe_json(check, result, allowed, all_notes))
    else:
        for line in probe_lines(spec.name, check, result, allowed):
            _echo(line)
        _echo_notes(all_notes)
    if not check.within(allowed):
        raise typer.Exit(1)


def _say_fetching(message: str) -> None:
    """Before a Hub download: a line on stderr when a person is watching, so a slow network is
    not silence."""
    if sys.stderr is not None and sys.stderr.isatty():
        from .console import err

        err(f"kvcalc: {message}")


def _run_probe(request: dict[str, Any], *, raw: bool, device: str, quiet: bool) -> dict[str, Any]:
    """Run the probe here, with a progress bar on stderr when it is a terminal."""
    from .probe import ProbeError, run

    show = not quiet and sys.stderr is not None and sys.stderr.isatty()
    try:
        if not show:
            return run(request)
        from .console import err

        what = "allocating the estimated tensors" if raw else "building a shrunk model and filling its cache"
        err(f"kvcalc probe: {what} on {device}...")
        with _ProbeProgress() as progress:
            return run(request, progress=progress)
    except ProbeError as exc:
        raise UsageError(str(exc)) from None


class _ProbeProgress:
    """A rich progress bar on stderr fed by the probe's (stage, done, total) callback; after the
    first prefill chunk it states the expected time of the whole run."""

    def __enter__(self) -> "_ProbeProgress":
        import time

        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        self._time = time.perf_counter
        self._start = self._time()
        self._told = False
        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed:,}/{task.total:,} tokens"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self._bar.__enter__()
        self._tasks: dict[str, Any] = {}
        return self

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage not in self._tasks:
            self._tasks[stage] = self._bar.add_task(stage, total=total)
        self._bar.update(self._tasks[stage], completed=done, total=total)
        if stage == "prefill" and not self._told and 0 < done < total:
            self._told = True
            expected = (self._time() - self._start) * total / done
            if expected > 10:
                self._bar.console.print(f"kvcalc probe: about {expected:,.0f} s to prefill {total:,} tokens")

    def __exit__(self, *exc: object) -> None:
        self._bar.__exit__(None, None, None)


def _budget_from_size(text: str) -> Any:
    from .fit import Budget, BudgetLine

    size = parse_size(text, what="--kv-budget")
    if size <= 0:
        raise UsageError(f"--kv-budget must be positive, got {text!r}")
    return Budget(size, (BudgetLine("KV cache budget per GPU (--kv-budget)", size),))


def _gpu_bytes(gpu: str | None, gpu_memory: str | None) -> tuple[int, str]:
    from .gpus import find_gpu

    if gpu is not None and gpu_memory is not None:
        raise UsageError("give --gpu or --gpu-memory, not both")
    if gpu_memory is not None:
        size = parse_size(gpu_memory, what="--gpu-memory")
        if size <= 0:
            raise UsageError(f"--gpu-memory must be positive, got {gpu_memory!r}")
        return size, f"{gpu_memory} per GPU"
    if gpu is None:
        raise UsageError("give --gpu NAME, --gpu-memory SIZE or --kv-budget SIZE")
    found = find_gpu(gpu)
    return found.runtime_bytes, f"{found.name}, {found.runtime_bytes:,} bytes as the CUDA/ROCm runtime reports them"


def _weights_bytes(model: str, spec: Any, weights: str, revision: str | None) -> tuple[int, str]:
    from .sources import weights_bytes

    if weights.strip().lower() != "auto":
        return parse_size(weights, what="--weights"), f"--weights {weights}"
    return weights_bytes(model, spec_dtype=spec.dtype, revision=revision)


def _preset_rows() -> list[dict[str, Any]]:
    from .configs import read_config
    from .dtypes import BF16
    from .estimator import Workload
    from .estimator import estimate as estimate_spec
    from .presets import load_presets
    from .render import preset_row

    rows = []
    for preset in load_presets().values():
        spec = read_config(preset.config, name=preset.name)
        per_token = estimate_spec(spec, Workload(tokens=1, kv_dtype=BF16)).per_token_bytes
        rows.append(preset_row(preset, spec, per_token))
    return rows


@presets_app.callback()
def presets(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the list as JSON.")] = False,
) -> None:
    """List the bundled presets: name, family, layers, KV heads, head dim, attention kind, and
    KV bytes per token at bf16."""
    if ctx.invoked_subcommand is not None:
        return
    from .render import presets_table

    rows = _preset_rows()
    if as_json:
        _print_json(rows)
        return
    _echo(presets_table(rows))


@presets_app.command("show")
def presets_show(
    name: Annotated[
        str,
        typer.Argument(metavar="NAME", autocompletion=_complete_model, help="Preset name or alias (case-insensitive)."),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print the preset as JSON.")] = False,
) -> None:
    """Show one preset: where it came from, its derived geometry and its config fields."""
    from .configs import read_config
    from .presets import get_preset

    preset = get_preset(name)
    row = next(r for r in _preset_rows() if r["name"] == preset.name)
    data = {**row, "config": preset.config, "notes": list(read_config(preset.config, name=preset.name).notes)}
    if as_json:
        _print_json(data)
        return
    import yaml

    for key in ("name", "aliases", "family", "hf_repo", "source", "parameters", "layers",
                "query_heads", "kv_heads", "head_dim", "latent_dim", "attention"):  # fmt: skip
        value = data[key]
        if value is None or value == []:
            continue
        _echo(f"{key:<20}{', '.join(value) if isinstance(value, list) else value}")
    _echo(f"{'bytes/token (bf16)':<20}{row['bytes_per_token_bf16']:,}")
    _echo("config:")
    _echo(yaml.safe_dump(preset.config, sort_keys=False).rstrip())


_LONG_WORD = re.compile(r"\S{81,}")
_MAX_MESSAGE = 400


def shorten(message: str) -> str:
    """An error message fit for one line: a 401-digit number or a megabyte string echoed from the
    input is cut to its ends, and the whole line to a few hundred characters."""

    def cut(match: re.Match[str]) -> str:
        word = match.group(0)
        return f"{word[:32]}...({len(word):,} characters)...{word[-12:]}"

    short = " ".join(_LONG_WORD.sub(cut, message).split())
    if len(short) > _MAX_MESSAGE:
        short = f"{short[: _MAX_MESSAGE - 40]}... ({len(short):,} characters in all)"
    return short


def _fail(message: str, code: int) -> NoReturn:
    from .console import clean, err

    err(f"kvcalc: error: {clean(shorten(message))}")
    raise SystemExit(code)


def _release_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turning every expected failure into one line on stderr.

    Exit status: 0 success, 1 a failure or a failed check (a probe mismatch), 2 a usage error,
    3 refused by ``--strict``-style checks (reserved), 130 interrupted (Ctrl-C).
    """
    from .console import OutputError

    debug = os.environ.get("KVCALC_DEBUG") == "1"
    try:
        # standalone_mode=False: typer *returns* the code of a typer.Exit (and turns Ctrl-C into
        # Exit(130)) instead of raising it, so the return value is the exit status.
        code = app(args=argv, prog_name="kvcalc", standalone_mode=False)
    except typer.Exit as exc:
        code = exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        code = 130
    except OutputError as exc:
        if exc.broken_pipe:
            _release_stdout()
            raise SystemExit(1) from None
        _release_stdout()
        _fail(str(exc), 1)
    except KvcalcError as exc:
        if debug:
            raise
        _fail(str(exc), exc.exit_code)
    except RecursionError:
        if debug:
            raise
        _fail("input is nested too deeply to read", 1)
    except Exception as exc:
        # Click's usage errors (bad option, missing argument); typer may vendor its own click,
        # so they are recognised by shape rather than by class.
        format_message = getattr(exc, "format_message", None)
        if debug or format_message is None:
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":
            ctx = getattr(exc, "ctx", None)
            _emit_help(ctx.get_help() if ctx is not None else str(format_message()))
            raise SystemExit(0) from None
        _fail(" ".join(str(format_message()).split()), int(getattr(exc, "exit_code", 2)))
    if code == 130:
        from .console import err

        err("kvcalc: aborted")
        raise SystemExit(130)
    if isinstance(code, int) and code:
        raise SystemExit(code)


def _emit_help(text: str) -> None:
    from .console import OutputError, out

    try:
        out(text.rstrip("\n"))
    except OutputError:
        _release_stdout()
