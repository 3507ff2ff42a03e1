"""``kvcalc compare``: attention variants of one model, or several models, side by side."""

from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvcalc.cli.knobs import engine_knobs
from kvcalc.cli.options import (
    ENGINE_PANEL,
    OUTPUT_PANEL,
    WORKLOAD_PANEL,
    BatchOpt,
    EngineOpt,
    JsonOpt,
    RevisionOpt,
    StrictOpt,
    UnitsName,
    UnitsOpt,
    complete_dtype,
    complete_model,
    count,
    json_or_drawing,
    print_json,
    print_view,
    say_fetching,
    split_list,
    units,
    warn,
    with_warnings,
)
from kvcalc.defaults import DEFAULT_TOKENS
from kvcalc.engines import DEFAULT_ENGINE
from kvcalc.errors import UsageError

if TYPE_CHECKING:
    from kvcalc.calc.compare import Comparison
    from kvcalc.units import Units


# compare's own options (the others are shared: kvcalc.cli.options).
ModelsArg = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="[MODEL]...",
        autocompletion=complete_model,
        help="One model: its attention variants side by side. Several: the models side by side, "
        "smallest cache first. Presets, config.json paths and repo ids mix freely.",
        show_default=False,
    ),
]
TokenListOpt = Annotated[
    str | None,
    typer.Option(
        "--tokens",
        "-t",
        metavar="T[,T...]",
        help="Tokens per sequence, or a comma list (4k,32k,128k) for a sweep: one column per length. "
        f"k = 1024. Default {DEFAULT_TOKENS}.",
        rich_help_panel=WORKLOAD_PANEL,
    ),
]
KvDtypeListOpt = Annotated[
    str | None,
    typer.Option(
        "--kv-dtype",
        metavar="DTYPE[,DTYPE...]",
        autocompletion=complete_dtype,
        help="One or more --kv-dtype names (fp16, bf16, fp8, int4, q8_0, ...; auto: each model's own as "
        "the engine stores it); each multiplies the rows.",
        rich_help_panel=ENGINE_PANEL,
    ),
]
KvHeadsListOpt = Annotated[
    str | None,
    typer.Option(
        "--kv-heads",
        metavar="N[,N...]",
        help="Extra GQA variants to show (e.g. 32,8,4,1); each must divide the query heads. MHA, MQA "
        "and the model's own are always shown.",
        rich_help_panel=WORKLOAD_PANEL,
    ),
]
LatentDimOpt = Annotated[
    int | None,
    typer.Option(
        "--latent-dim",
        metavar="D_C",
        help="Add an MLA variant caching a latent of D_C elements.",
        rich_help_panel=WORKLOAD_PANEL,
    ),
]
RopeDimOpt = Annotated[
    int | None,
    typer.Option(
        "--rope-dim",
        metavar="D_R",
        help="The MLA variant's decoupled RoPE key dims (default 0).",
        rich_help_panel=WORKLOAD_PANEL,
    ),
]
BaselineOpt = Annotated[
    str | None,
    typer.Option(
        "--baseline",
        metavar="LABEL",
        help="Row the ratios divide by: a variant (MHA, GQA-8 or 8, MQA, MLA) or a model. "
        "Default: MHA for variants, the first model given for models.",
        rich_help_panel=OUTPUT_PANEL,
    ),
]
ChartOpt = Annotated[
    bool,
    typer.Option("--chart", help="Also draw bytes against context length as text bars.", rich_help_panel=OUTPUT_PANEL),
]
PlotOpt = Annotated[
    str | None,
    typer.Option(
        "--plot",
        metavar="FILE",
        help="Also save a chart of bytes against context length as FILE.png or FILE.svg (needs "
        "matplotlib: pip install matplotlib, or '.[plot]' in a kvcalc checkout).",
        rich_help_panel=OUTPUT_PANEL,
    ),
]
LayersOpt = Annotated[
    int | None,
    typer.Option("--layers", metavar="L", min=1, help="By hand: number of layers.", rich_help_panel=WORKLOAD_PANEL),
]
HeadsOpt = Annotated[
    int | None,
    typer.Option("--heads", metavar="H", min=1, help="By hand: query heads.", rich_help_panel=WORKLOAD_PANEL),
]
HeadDimOpt = Annotated[
    int | None,
    typer.Option("--head-dim", metavar="D", min=1, help="By hand: head dim.", rich_help_panel=WORKLOAD_PANEL),
]


@engine_knobs()
def compare(
    models: ModelsArg = None,
    tokens: TokenListOpt = None,
    batch: BatchOpt = "1",
    kv_dtype: KvDtypeListOpt = None,
    kv_heads: KvHeadsListOpt = None,
    latent_dim: LatentDimOpt = None,
    rope_dim: RopeDimOpt = None,
    baseline: BaselineOpt = None,
    units_choice: UnitsOpt = UnitsName.both,
    chart: ChartOpt = False,
    plot: PlotOpt = None,
    as_json: JsonOpt = False,
    revision: RevisionOpt = None,
    layers: LayersOpt = None,
    heads: HeadsOpt = None,
    head_dim: HeadDimOpt = None,
    engine: EngineOpt = DEFAULT_ENGINE,
    strict: StrictOpt = False,
    *,
    knobs: dict[str, int | bool],
) -> None:
    """Compare MHA / GQA / MQA / MLA variants of one model, or several models, side by side.

    \b
    Examples:
      kvcalc compare llama-3.1-8b
      kvcalc compare llama-3.1-8b --kv-heads 4 --latent-dim 512 --rope-dim 64
      kvcalc compare llama-3.1-8b mistral-7b-v0.1 gpt-oss-20b --tokens 4k,32k,128k
      kvcalc compare --layers 32 --heads 32 --head-dim 128 --tokens 32k --chart

    Same workload for every row; ratios are to the baseline at the same length (and the first
    dtype). Variants change a model's quality and need training: this compares memory only.
    """
    from kvcalc import api

    unit_choice = units(units_choice)
    json_or_drawing(as_json, ("--chart", chart), ("--plot", plot))
    by_hand = any(v is not None for v in (layers, heads, head_dim))
    targets = _targets(models or [], layers, heads, head_dim)
    token_list = [count(t, "--tokens") or 0 for t in split_list(tokens, "--tokens")] if tokens is not None else None
    extra = [count(k, "--kv-heads") or 0 for k in split_list(kv_heads, "--kv-heads")] if kv_heads else []
    result = api.compare(
        targets, tokens=token_list, kv_dtypes=split_list(kv_dtype, "--kv-dtype") if kv_dtype is not None else None,
        batch=count(batch, "--batch") or 1, kv_heads=extra, latent_dim=latent_dim, rope_dim=rope_dim,
        baseline=baseline, serving=api.Serving(engine, options=knobs), mark_own=not by_hand, revision=revision,
        on_fetch=say_fetching, strict=strict,
    )  # fmt: skip
    _show(result, unit_choice, as_json=as_json, chart=chart, plot=plot)


def _targets(names: list[str], layers: int | None, heads: int | None, head_dim: int | None) -> list[Any]:
    """What to compare: the models named, or one described by hand (--layers/--heads/--head-dim)."""
    from kvcalc import api

    if any(v is not None for v in (layers, heads, head_dim)):
        if names:
            raise UsageError("give either MODEL or --layers/--heads/--head-dim, not both")
        if layers is None or heads is None or head_dim is None:
            raise UsageError("comparing by hand needs --layers, --heads and --head-dim")
        return [api.model_from_geometry(layers=layers, heads=heads, kv_heads=heads, head_dim=head_dim)]
    if not names:
        raise UsageError("give one MODEL (its variants), several (side by side), or --layers/--heads/--head-dim")
    lowered = [n.strip().lower() for n in names]
    twice = next((n for n in names if lowered.count(n.strip().lower()) > 1), None)
    if twice is not None:
        raise UsageError(f"{twice!r} is given more than once: each model is compared once")
    return list(names)


def _show(result: "Comparison", unit_choice: "Units", *, as_json: bool, chart: bool, plot: str | None) -> None:
    """The comparison as JSON or tables (with text bars, and the plot saved first)."""
    warnings = [w for row in result.rows for w in row.candidate.spec.warnings]
    warn(warnings)
    if plot is not None:
        from kvcalc.charts import save_plot

        save_plot(result, plot)
    if as_json:
        from kvcalc.views.json import comparison_json

        print_json(with_warnings(comparison_json(result), warnings))
        return
    from kvcalc.views.compare import comparison_view

    print_view(comparison_view(result, unit_choice, chart=chart, plot=plot))
