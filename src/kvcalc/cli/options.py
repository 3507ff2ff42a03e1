"""Flags shared by the commands (one definition and one help text each), their completion, the
parsing of counts and sizes as users write them, and the output helpers every command uses."""

import sys
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvcalc.cli import knobs
from kvcalc.cli.commands import PANELS
from kvcalc.cli.knobs import command_knobs, knob_annotation
from kvcalc.defaults import DEFAULT_TOKENS
from kvcalc.engines import REGISTRY, every_knob
from kvcalc.errors import UsageError
from kvcalc.units import Units, parse_count, parse_size

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from kvcalc.views.console import Block

# The help panels (kvcalc.cli.commands.PANELS, in their order), and the engines' knobs'.
WORKLOAD_PANEL, HARDWARE_PANEL, ENGINE_PANEL, OUTPUT_PANEL = PANELS
KNOBS_PANEL = "Engine knobs (each for the engines that have it)"

# Every name --kv-dtype accepts, for help texts and completion (dtypes.py is cheap to import).
KV_DTYPE_NAMES = ("auto", "fp32", "fp16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", "int4", "int2",
                  "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")  # fmt: skip
KV_DTYPE_LIST = ", ".join(KV_DTYPE_NAMES[1:])


# --- completion --------------------------------------------------------------------------------------


def complete_model(incomplete: str) -> list[str]:
    """Shell completion for MODEL: preset names and aliases."""
    from kvcalc.inputs.presets import load_presets

    labels = [label for p in load_presets().values() for label in (p.name, *p.aliases)]
    return sorted(label for label in labels if label.startswith(incomplete.lower()))


def complete_engine(incomplete: str) -> list[str]:
    return [name for name in REGISTRY if name.startswith(incomplete.lower())]


def complete_gpu(incomplete: str) -> list[str]:
    from kvcalc.gpus import GPUS

    return sorted(label for g in GPUS for label in (g.name, *g.aliases) if label.startswith(incomplete.lower()))


def complete_dtype(incomplete: str) -> list[str]:
    # A list option (compare: fp16,fp8) completes its last item.
    head, _, last = incomplete.rpartition(",")
    prefix = f"{head}," if head else ""
    return [prefix + name for name in KV_DTYPE_NAMES if name.startswith(last.lower())]


# --- shared flags --------------------------------------------------------------------------------------

TOKENS_HELP = (
    f"Tokens per sequence, prompt + generated: 2048, 32k (k = 1024). Default {DEFAULT_TOKENS} or the engine's."
)
# The formats are named by completion (complete_dtype) and the README, not listed here.
KV_DTYPE_HELP = (
    "Cache format: fp16, bf16, fp8, int8/int4/int2 (per --quant-group), q8_0, q4_0, ... (llama.cpp "
    "blocks), or auto: the engine's default."
)
# Appended to the help of every flag that takes a SIZE (units.parse_size).
SIZE_HELP = knobs.SIZE_HELP
ENGINE_HELP = f"Whose storage rules: {', '.join(REGISTRY)}; NAME@VERSION for a release."

ModelArg = Annotated[
    str | None,
    typer.Argument(
        metavar="MODEL",
        autocompletion=complete_model,
        help="A preset ('kvcalc presets'), a config.json or its folder, a GGUF file, or a Hub repo id "
        "or URL (org/name, org/name:file.gguf).",
        show_default=False,
    ),
]
TokensOpt = Annotated[
    str | None, typer.Option("--tokens", "-t", metavar="T", help=TOKENS_HELP, rich_help_panel=WORKLOAD_PANEL)
]
BatchOpt = Annotated[
    str,
    typer.Option("--batch", "-b", metavar="B", help="Sequences resident at once.", rich_help_panel=WORKLOAD_PANEL),
]
KvDtypeOpt = Annotated[
    str | None,
    typer.Option(
        "--kv-dtype", metavar="DTYPE", autocompletion=complete_dtype, help=KV_DTYPE_HELP, rich_help_panel=ENGINE_PANEL
    ),
]


class UnitsName(StrEnum):
    """--units choices; typer checks them and lists them in --help."""

    binary = "binary"
    decimal = "decimal"
    both = "both"


UnitsOpt = Annotated[
    UnitsName,
    typer.Option(
        "--units",
        metavar="UNITS",
        help="Sizes in binary (GiB), decimal (GB) or both; exact bytes always.",
        rich_help_panel=OUTPUT_PANEL,
    ),
]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print plain JSON on stdout (integer byte counts).", rich_help_panel=OUTPUT_PANEL)
]
RevisionOpt = Annotated[
    str | None,
    typer.Option(
        "--revision",
        metavar="REV",
        help="Hub revision (branch, tag, commit).",
        rich_help_panel=WORKLOAD_PANEL,
    ),
]
EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine", metavar="NAME", autocompletion=complete_engine, help=ENGINE_HELP, rich_help_panel=ENGINE_PANEL
    ),
]
KDtypeOpt = Annotated[
    str | None,
    typer.Option(
        "--k-dtype",
        metavar="DTYPE",
        autocompletion=complete_dtype,
        help="K format on its own (llama.cpp -ctk).",
        rich_help_panel=ENGINE_PANEL,
    ),
]
VDtypeOpt = Annotated[
    str | None,
    typer.Option(
        "--v-dtype",
        metavar="DTYPE",
        autocompletion=complete_dtype,
        help="V format on its own (llama.cpp -ctv).",
        rich_help_panel=ENGINE_PANEL,
    ),
]
QuantGroupOpt = Annotated[
    int | None,
    typer.Option(
        "--quant-group",
        metavar="N",
        min=1,
        help="Group size of int8/int4/int2 KV (default 64).",
        rich_help_panel=ENGINE_PANEL,
    ),
]
ResidualOpt = Annotated[
    int | None,
    typer.Option(
        "--residual-tokens",
        metavar="N",
        min=0,
        help="Newest tokens a quantized cache keeps unquantized (default 127 in transformers, else 0).",
        rich_help_panel=ENGINE_PANEL,
    ),
]
TpOpt = Annotated[
    int,
    typer.Option(
        "--tp",
        metavar="N",
        min=1,
        help="Tensor-parallel GPUs: KV heads split.",
        rich_help_panel=HARDWARE_PANEL,
    ),
]
PpOpt = Annotated[
    int,
    typer.Option(
        "--pp",
        metavar="N",
        min=1,
        help="Pipeline stages: layers split.",
        rich_help_panel=HARDWARE_PANEL,
    ),
]
DpOpt = Annotated[
    int,
    typer.Option(
        "--dp",
        metavar="N",
        min=1,
        help="Data-parallel replicas, the batch split.",
        rich_help_panel=HARDWARE_PANEL,
    ),
]
DpAttentionOpt = Annotated[
    int,
    typer.Option(
        "--dp-attention",
        metavar="N",
        min=1,
        help="Attention data-parallel groups of the --tp GPUs, each caching its own requests (SGLang "
        "--enable-dp-attention --dp N).",
        rich_help_panel=HARDWARE_PANEL,
    ),
]
# probe's engine flags, by the names cli/probe.py imports, read from the engines' knobs (estimate,
# compare, fit and speed take every engine's through cli.knobs.engine_knobs).
_KNOBS = every_knob()
# Each knob's help panel, its engine's (probe shows them as the other commands do).
KNOB_PANELS = {knob.name: panel for knob, panel in command_knobs(runtime=True).items()}
BlockOpt = knob_annotation(_KNOBS["block_size"], KNOB_PANELS["block_size"])
BatchedOpt = knob_annotation(_KNOBS["max_batched_tokens"], KNOB_PANELS["max_batched_tokens"])
UbatchOpt = knob_annotation(_KNOBS["ubatch"], KNOB_PANELS["ubatch"])
UnifiedOpt = knob_annotation(_KNOBS["kv_unified"], KNOB_PANELS["kv_unified"])
NBatchOpt = knob_annotation(_KNOBS["n_batch"], KNOB_PANELS["n_batch"])
SwaFullOpt = knob_annotation(_KNOBS["swa_full"], KNOB_PANELS["swa_full"])
KvBitsOpt = knob_annotation(_KNOBS["kv_bits"], KNOB_PANELS["kv_bits"])
KvGroupSizeOpt = knob_annotation(_KNOBS["kv_group_size"], KNOB_PANELS["kv_group_size"])
QuantizedKvStartOpt = knob_annotation(_KNOBS["quantized_kv_start"], KNOB_PANELS["quantized_kv_start"])
MaxKvSizeOpt = knob_annotation(_KNOBS["max_kv_size"], KNOB_PANELS["max_kv_size"])
PrefillStepOpt = knob_annotation(_KNOBS["prefill_step_size"], KNOB_PANELS["prefill_step_size"])


EncoderTokensOpt = Annotated[
    str | None,
    typer.Option(
        "--encoder-tokens",
        metavar="N",
        help="Encoder tokens for cross-attention (default: max_source_positions, else the prompt).",
        rich_help_panel=WORKLOAD_PANEL,
    ),
]
ImagesOpt = Annotated[
    str | None,
    typer.Option(
        "--images",
        metavar="N",
        help="Images per sequence, for image cross-attention (Llama 3.2 Vision). Default 0: text only.",
        rich_help_panel=WORKLOAD_PANEL,
    ),
]
ImageTokensOpt = Annotated[
    str | None,
    typer.Option(
        "--image-tokens",
        metavar="N",
        help="Tokens one image puts in each image cross-attention layer (default: the model's tiling).",
        rich_help_panel=WORKLOAD_PANEL,
    ),
]


StrictOpt = Annotated[
    bool,
    typer.Option(
        "--strict",
        help="Refuse (exit 3) config fields kvcalc does not model, instead of warning.",
        rich_help_panel=WORKLOAD_PANEL,
    ),
]


def warn(warnings: Any) -> None:
    """``kvcalc: warning:`` lines on stderr: config fields that may make this estimate wrong."""
    from kvcalc.console import clean, err

    for warning in dict.fromkeys(warnings):
        err(f"kvcalc: warning: {clean(str(warning))}")


def with_warnings(data: dict[str, Any], warnings: Any) -> dict[str, Any]:
    """A JSON answer with the unmodelled config fields listed (``warnings``), so scripts see them,
    and the engine command line's unmodelled flags after them."""
    from kvcalc.cli.engine_line import LINE_WARNINGS

    data["warnings"] = list(dict.fromkeys([*warnings, *LINE_WARNINGS]))
    return data


def serving_flags(
    engine: str,
    kv_dtype: str | None,
    k_dtype: str | None,
    v_dtype: str | None,
    quant_group: int | None,
    residual_tokens: int | None,
    knobs: "Mapping[str, int | bool]",
) -> dict[str, Any]:
    """The engine and format flags as the API's ``serving``, with the engine knobs given (from
    ``cli.knobs.engine_knobs``) as its options: the engine refuses those it lacks."""
    from kvcalc.api import Serving

    return {"serving": Serving(engine, kv_dtype=kv_dtype, k_dtype=k_dtype, v_dtype=v_dtype, quant_group=quant_group,
                               residual_tokens=residual_tokens, options=dict(knobs))}  # fmt: skip


# --- values as users write them -------------------------------------------------------------------------


def units(value: UnitsName | str) -> Units:
    name = value.value if isinstance(value, UnitsName) else value
    if name not in ("binary", "decimal", "both"):
        raise UsageError(f"--units must be binary, decimal or both, got {name!r}")
    return name  # type: ignore[return-value]  # narrowed by the check above


def count(value: str | None, flag: str) -> int | None:
    return None if value is None else parse_count(value, what=flag)


def count_or_zero(value: str | None, flag: str) -> int | None:
    """A count that may be 0 (``--images 0``: a text-only prompt)."""
    return 0 if value is not None and value.strip() == "0" else count(value, flag)


def size(value: str | None, flag: str) -> int | None:
    return None if value is None else parse_size(value, what=flag)


def split_list(text: str, flag: str) -> list[str]:
    """``4k,32k`` -> ``["4k", "32k"]``; lists use commas, so counts in them take no thousands commas."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise UsageError(f"{flag} needs a comma-separated list of values, got {text!r} (an empty item)")
    return items


def refuse_together(*flags: tuple[str, bool], why: str) -> None:
    """Refuse flags that would be ignored together (a flag silently ignored is a wrong answer)."""
    given = [flag for flag, present in flags if present]
    if len(given) > 1:
        raise UsageError(f"{' and '.join(given)} cannot be used together: {why}")


# What each drawing flag gives in place of --json's numbers (json_or_drawing's refusal says it).
_DRAWS = {"--explain": "writes the derivation as text", "--chart": "draws text bars", "--plot": "saves a picture"}


def json_or_drawing(as_json: bool, *flags: tuple[str, object]) -> None:
    """--json gives the numbers, --explain, --chart and --plot draw them: every command refuses a
    drawing flag with --json in the same words (exit 2). ``flags``: (flag, its value) pairs."""
    given = [flag for flag, value in flags if value is not None and value is not False]
    if as_json and given:
        raise UsageError(f"{', '.join(f'{flag} {_DRAWS[flag]}' for flag in given)}; --json gives the numbers: "
                         "choose one")  # fmt: skip


# --- output ------------------------------------------------------------------------------------------------


def echo(text: str = "") -> None:
    """Results go to stdout as plain text: no markup, nothing to strip when piped."""
    from kvcalc.console import out

    out(text)


def print_json(data: Any) -> None:
    """JSON on stdout: ASCII-escaped, so any output encoding can carry it."""
    from kvcalc.console import out
    from kvcalc.views.json_text import dumps

    out(dumps(data))


def print_view(blocks: "Sequence[Block]") -> None:
    """A command's human output: its view's blocks drawn with rich (tables fitted to the
    terminal, colour only on one), in one write; control characters from configs neutralised."""
    from kvcalc.views.console import show as draw

    draw(blocks)


def say_fetching(message: str) -> None:
    """Before a Hub download: a line on stderr when a person is watching, so a slow network is
    not silence."""
    if sys.stderr is not None and sys.stderr.isatty():
        from kvcalc.console import err

        err(f"kvcalc: {message}")
