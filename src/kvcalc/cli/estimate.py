"""``kvcalc estimate``: one model, one workload (or a request mix) -> its cache, group by group."""

from typing import TYPE_CHECKING, Annotated

import typer

from kvcalc.cli.knobs import engine_knobs
from kvcalc.cli.options import (
    OUTPUT_PANEL,
    WORKLOAD_PANEL,
    BatchOpt,
    DpOpt,
    EncoderTokensOpt,
    EngineOpt,
    ImagesOpt,
    ImageTokensOpt,
    JsonOpt,
    KDtypeOpt,
    KvDtypeOpt,
    ModelArg,
    PpOpt,
    QuantGroupOpt,
    ResidualOpt,
    RevisionOpt,
    StrictOpt,
    TokensOpt,
    TpOpt,
    UnitsName,
    UnitsOpt,
    VDtypeOpt,
    count,
    count_or_zero,
    json_or_drawing,
    print_json,
    print_view,
    say_fetching,
    serving_flags,
    units,
    warn,
    with_warnings,
)
from kvcalc.engines import DEFAULT_ENGINE
from kvcalc.errors import UsageError

if TYPE_CHECKING:
    from kvcalc.api import Layout, Model
    from kvcalc.calc.estimate import Estimate
    from kvcalc.calc.requests import RequestSummary
    from kvcalc.units import Units


# estimate's own options (the others are shared: kvcalc.cli.options).
PromptOpt = Annotated[
    str | None,
    typer.Option(
        "--prompt",
        metavar="P",
        help="Prompt tokens P; with --output, T = P + O (encoder-decoder: the encoder's, T = O).",
        rich_help_panel=WORKLOAD_PANEL,
    ),
]
OutputOpt = Annotated[
    str | None, typer.Option("--output", metavar="O", help="Generated tokens O.", rich_help_panel=WORKLOAD_PANEL)
]
ExplainOpt = Annotated[
    bool,
    typer.Option(
        "--explain",
        help="Show M = 2 x L x B x T x H_kv x d_h x s with this model's numbers substituted.",
        rich_help_panel=OUTPUT_PANEL,
    ),
]
LayersOpt = Annotated[
    int | None,
    typer.Option("--layers", metavar="L", min=1, help="By hand: number of layers (L).", rich_help_panel=WORKLOAD_PANEL),
]
HeadsOpt = Annotated[
    int | None,
    typer.Option(
        "--heads",
        metavar="H",
        min=1,
        help="By hand: query heads (to check GQA grouping).",
        rich_help_panel=WORKLOAD_PANEL,
    ),
]
KvHeadsOpt = Annotated[
    int | None,
    typer.Option(
        "--kv-heads",
        metavar="H_KV",
        min=1,
        help="By hand: KV heads (H_kv); default --heads.",
        rich_help_panel=WORKLOAD_PANEL,
    ),
]
HeadDimOpt = Annotated[
    int | None,
    typer.Option("--head-dim", metavar="D", min=1, help="By hand: head dim (d_h).", rich_help_panel=WORKLOAD_PANEL),
]
SharedPrefixOpt = Annotated[
    str | None,
    typer.Option(
        "--shared-prefix",
        metavar="P",
        help="The first P tokens of every sequence are shared, cached once (paged engines: whole blocks).",
        rich_help_panel=WORKLOAD_PANEL,
    ),
]
LengthsOpt = Annotated[
    str | None,
    typer.Option(
        "--lengths",
        metavar="FILE",
        help="A request mix, CSV (prompt,output or tokens columns) or JSONL: the total with every "
        "request resident, and per-request percentiles.",
        rich_help_panel=WORKLOAD_PANEL,
    ),
]
VsTheoreticalOpt = Annotated[
    bool,
    typer.Option(
        "--vs-theoretical",
        help="Show the engine's figure beside the theoretical one, and the gap.",
        rich_help_panel=OUTPUT_PANEL,
    ),
]


@engine_knobs()
def estimate(
    model: ModelArg = None,
    tokens: TokensOpt = None,
    batch: BatchOpt = "1",
    prompt: PromptOpt = None,
    output: OutputOpt = None,
    encoder_tokens: EncoderTokensOpt = None,
    images: ImagesOpt = None,
    image_tokens: ImageTokensOpt = None,
    kv_dtype: KvDtypeOpt = None,
    units_choice: UnitsOpt = UnitsName.both,
    explain: ExplainOpt = False,
    as_json: JsonOpt = False,
    revision: RevisionOpt = None,
    layers: LayersOpt = None,
    heads: HeadsOpt = None,
    kv_heads: KvHeadsOpt = None,
    head_dim: HeadDimOpt = None,
    engine: EngineOpt = DEFAULT_ENGINE,
    k_dtype: KDtypeOpt = None,
    v_dtype: VDtypeOpt = None,
    quant_group: QuantGroupOpt = None,
    residual_tokens: ResidualOpt = None,
    tp: TpOpt = 1,
    pp: PpOpt = 1,
    dp: DpOpt = 1,
    shared_prefix: SharedPrefixOpt = None,
    lengths: LengthsOpt = None,
    vs_theoretical: VsTheoreticalOpt = False,
    strict: StrictOpt = False,
    *,
    knobs: dict[str, int | bool],
) -> None:
    """Estimate the KV cache of MODEL for a workload of B sequences of T tokens.

    \b
    Examples:
      kvcalc estimate llama-3.1-8b --tokens 32k --batch 8
      kvcalc estimate llama-3.1-8b --tokens 2048 --explain
      kvcalc estimate qwen3-next-80b-a3b -t 256k --engine vllm --vs-theoretical
      kvcalc estimate --layers 32 --kv-heads 8 --head-dim 128 --tokens 4k
      kvcalc estimate -- vllm serve Qwen/Qwen3-32B --max-model-len 32768 -tp 2

    Each layer keeps what its kind needs: a sliding window at most W tokens, a chunked layer one
    chunk, Mamba and linear attention a fixed state, MLA one latent per token.

    After '--', an engine's own command line (vllm serve ..., llama-server ...) stands for its flags.
    """
    from kvcalc import api

    unit_choice = units(units_choice)
    json_or_drawing(as_json, ("--explain", explain))
    if lengths is not None:
        _refuse_with_lengths({"--tokens": tokens is not None, "--prompt": prompt is not None,
                              "--output": output is not None, "--batch": batch != "1", "--explain": explain,
                              "--vs-theoretical": vs_theoretical, "--dp": dp != 1, "--images": images is not None,
                              "--image-tokens": image_tokens is not None})  # fmt: skip
    if vs_theoretical and api.is_theoretical(engine):
        raise UsageError("--vs-theoretical sets an engine's figure beside the theoretical one: give --engine")
    opened = _open(model, revision, strict, layers, heads, kv_heads, head_dim)
    warn(opened.spec.warnings)
    engine_flags = serving_flags(engine, kv_dtype, k_dtype, v_dtype, quant_group, residual_tokens, knobs)
    prefix = count(shared_prefix, "--shared-prefix") or 0
    if lengths is not None:
        summary = api.estimate_requests(opened, lengths, tp=tp, pp=pp, shared_prefix=prefix, **engine_flags)
        _show_requests(summary, opened, unit_choice, as_json=as_json)
        return
    result = api.estimate(
        opened, layout=api.Layout(tp, pp, dp), **engine_flags, sequences=api.Sequences(
            tokens=count(tokens, "--tokens"), prompt=count(prompt, "--prompt"), output=count(output, "--output"),
            batch=count(batch, "--batch") or 1, encoder_tokens=count(encoder_tokens, "--encoder-tokens"),
            images=count_or_zero(images, "--images"), image_tokens=count(image_tokens, "--image-tokens"),
            shared_prefix=prefix),
    )  # fmt: skip
    theory = _theoretical(opened, result, prefix, api.Layout(tp, pp, dp)) if vs_theoretical else None
    _show(result, theory, opened, unit_choice, as_json=as_json, explain=explain)


def _refuse_with_lengths(ignored: dict[str, bool]) -> None:
    """--lengths gives each request its length: a workload flag given beside it would be ignored."""
    given = [flag for flag, present in ignored.items() if present]
    if given:
        raise UsageError(f"--lengths gives every request its own length; {', '.join(given)} would be ignored")


def _open(model: str | None, revision: str | None, strict: bool, layers: int | None, heads: int | None,
          kv_heads: int | None, head_dim: int | None) -> "Model":  # fmt: skip
    """The model named, or one described by hand (--layers/--kv-heads/--head-dim), opened."""
    from kvcalc import api

    by_hand = any(v is not None for v in (layers, heads, kv_heads, head_dim))
    if model is not None and by_hand:
        raise UsageError("give either MODEL or --layers/--kv-heads/--head-dim, not both")
    if model is None:
        if not by_hand:
            raise UsageError("give a MODEL (preset, config.json or repo id) or --layers/--kv-heads/--head-dim")
        if layers is None or head_dim is None:
            raise UsageError("describing a model by hand needs --layers and --head-dim")
        return api.open_model(api.model_from_geometry(layers=layers, heads=heads, kv_heads=kv_heads,
                                                      head_dim=head_dim))  # fmt: skip
    return api.open_model(model, revision=revision, on_fetch=say_fetching, strict=strict)


def _theoretical(opened: "Model", result: "Estimate", prefix: int, layout: "Layout") -> "Estimate":
    """--vs-theoretical: the same workload in the same formats under the theoretical engine."""
    from kvcalc import api

    w = result.workload
    same_formats = api.Serving(kv_dtype=w.kv_dtype, v_dtype=w.v_dtype, residual_tokens=w.residual_tokens or None)
    same_work = api.Sequences(
        tokens=w.tokens,
        batch=w.batch,
        encoder_tokens=w.encoder_tokens,
        images=w.images or None,
        image_tokens=w.image_tokens,
        shared_prefix=prefix,
    )
    return api.estimate(opened, sequences=same_work, serving=same_formats, layout=layout)


def _show_requests(summary: "RequestSummary", opened: "Model", unit_choice: "Units", *, as_json: bool) -> None:
    """A request mix's summary as JSON or tables."""
    if as_json:
        from kvcalc.views.json import lengths_json

        print_json(with_warnings(lengths_json(summary, list(summary.notes)), opened.spec.warnings))
        return
    from kvcalc.views.estimate import lengths_view

    print_view(lengths_view(summary, unit_choice))


def _show(result: "Estimate", theory: "Estimate | None", opened: "Model", unit_choice: "Units", *, as_json: bool,
          explain: bool) -> None:  # fmt: skip
    """The estimate as JSON (with the theoretical figure and the gap) or tables."""
    if as_json:
        from kvcalc.views.json import estimate_json

        data = estimate_json(result)
        data["notes"] = list(result.notes)
        if theory is not None:
            data["theoretical_total_bytes"] = theory.total_bytes
            data["difference_bytes"] = result.total_bytes - theory.total_bytes
        print_json(with_warnings(data, opened.spec.warnings))
        return
    from kvcalc.views.estimate import estimate_view

    print_view(estimate_view(result, unit_choice, theory=theory, explain=explain))
