"""LM Studio's command line read and written: ``lms load MODEL [--context-length N] [--parallel N]
...`` and ``lms server start``, every flag of lmstudio-ai/lms 0.3.43 (commit 07b7252:
src/subcommands/load.ts, loadSpeculativeDecoding.ts, server.ts, createClient.ts
addCreateClientOptions, logLevel.ts addLogLevelOptions; commander 14 parses them) and the docs'
3_cli/0_local-models/load.md (lmstudio-ai/docs @ c6854fb).

The terms that are not kvcalc's: LM Studio's context length is its llama.cpp runtime's whole
unified cache (a published 0.4.12 log reads "262144 cells ... 4/1 seqs" for a 262,144 context:
lmstudio-bug-tracker#1862), shared by ``--parallel`` predictions (Max Concurrent Predictions, 4
by default); kvcalc reads it as that many sequences of context / parallel tokens, the same cells.
The line does not say which runtime runs the model: LM Studio picks llama.cpp for a GGUF and MLX
for an MLX folder (lmstudio.ai/docs/app/runtimes/mlx); ``lms load`` is read as the llama.cpp runtime
(``lmstudio``), in a note. The cache types, Unified KV Cache and the batch sizes are load settings
with no ``lms load`` flag (the app's per-model load settings, lmstudio-js LLMLoadModelConfig)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping

from kvcalc.engines.base import pad
from kvcalc.engines.commandline import (
    Arg,
    CommandLine,
    Reading,
    Settings,
    SettingValue,
    quiet,
)
from kvcalc.engines.lmstudio import DEFAULT_CONTEXT_LENGTH, DEFAULT_PARALLEL
from kvcalc.errors import UsageError

VERSION = "lms 0.3.43"
COMMIT = "07b7252"
LOAD_SOURCE = f"lmstudio-ai/lms {VERSION[4:]} ({COMMIT}) src/subcommands/load.ts"
SERVER_SOURCE = f"lmstudio-ai/lms {VERSION[4:]} ({COMMIT}) src/subcommands/server.ts"

# llama.cpp pads its context to 256 cells (src/llama-context.cpp); kvcalc's lmstudio is llama-server's rules.
_CELL_PADDING = 256

_JS_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_JS_RADIX = re.compile(r"0([xX][0-9a-fA-F]+|[oO][0-7]+|[bB][01]+)")


def js_number(text: str) -> float:
    """JavaScript's unary ``+str`` (ECMAScript StringToNumber), as createRefinedNumberParser and
    gpuOptionParser read a value: white space trimmed, empty is 0, decimal with an exponent, 0x/0o/0b
    integers, Infinity; anything else NaN (a ValueError here)."""
    word = text.strip()
    if not word:
        return 0.0
    if _JS_RADIX.fullmatch(word):
        return float(int(word[2:], {"x": 16, "o": 8, "b": 2}[word[1].lower()]))
    if word.lstrip("+-") == "Infinity":
        return -math.inf if word.startswith("-") else math.inf
    if _JS_DECIMAL.fullmatch(word):
        return float(word)
    raise UsageError("Not a number")


def refined(*, integer: bool = True, minimum: float | None = None,
            maximum: float | None = None) -> Callable[[str], SettingValue]:  # fmt: skip
    """src/types/refinedNumber.ts createRefinedNumberParser: a number, finite, whole if asked, within
    its inclusive bounds; each refusal in its words."""

    def parse(text: str) -> SettingValue:
        number = js_number(text)
        if not math.isfinite(number):
            raise UsageError("Not a finite number")
        if integer and not number.is_integer():
            raise UsageError("Not an integer")
        if minimum is not None and number < minimum:
            raise UsageError(f"Number out of range, must be at least {minimum:g}")
        if maximum is not None and number > maximum:
            raise UsageError(f"Number out of range, must be at most {maximum:g}")
        return int(number) if integer else number

    return parse


def gpu_ratio(text: str) -> float:
    """load.ts gpuOptionParser: off = 0, max = 1 (any case), else a number from 0 to 1."""
    word = text.strip().lower()
    if word == "off":
        return 0.0
    if word == "max":
        return 1.0
    number = js_number(word)
    if math.isnan(number):
        raise UsageError("Not a number")
    if number < 0 or number > 1:
        raise UsageError("Number out of range, must be between 0 and 1")
    return number


def _log_level(text: str) -> str:
    """logLevel.ts: --log-level's choices."""
    if text not in ("debug", "info", "warn", "error", "none"):
        raise UsageError("Allowed choices are debug, info, warn, error, none.")
    return text


_PORT = refined(minimum=0, maximum=65535)
_PROBABILITY = refined(integer=False, minimum=0, maximum=1)
_DRAFT = "a draft model's weights load beside the model's, with a KV cache of its own (speculative decoding)"
_MTP = ("Draft MTP: the model's own multi-token-prediction layers draft, their weights loaded and their KV cache "
        "kept beside the model's")  # fmt: skip
# A quiet flag whose value lms checks has a key, so that its value is read and checked too; neither
# reader's interpret passes such keys on.
# addCreateClientOptions (hidden): which LM Studio instance, not what it loads.
_CLIENT = (quiet("--host"), Arg(("--port",), "port", parse=_PORT))
# addLogLevelOptions (hidden), and commander's own -h.
_LOGGING = (Arg(("--log-level",), "log_level", parse=_log_level), quiet("--quiet", takes="flag"),
            quiet("--verbose", takes="flag"), quiet("-h", "--help", takes="flag"))  # fmt: skip

LOAD_ARGS: tuple[Arg, ...] = (
    # load.ts: contextLength -> LLMLoadModelConfig.contextLength, parallel -> maxParallelPredictions
    # (LMStudioOptions.parallel, Max Concurrent Predictions); --gpu -> gpu.ratio (interpret).
    Arg(("-c", "--context-length"), "context", parse=refined(minimum=1)),
    Arg(("--parallel",), "parallel", parse=refined(minimum=1)),
    Arg(("--gpu",), "gpu_ratio", parse=gpu_ratio),
    Arg(("--ttl",), "ttl", parse=refined(minimum=1)),  # unloads an idle model: memory after, not while loaded
    Arg(("--speculative-draft-mtp",), "draft_mtp", takes="flag", memory=_MTP),
    Arg(("--no-speculative-draft-mtp",), "draft_mtp", takes="flag", constant=False),
    Arg(("--speculative-draft-simple",), "draft_simple", takes="flag"),
    Arg(("--speculative-draft-model",), "draft_model", memory=_DRAFT),
    # Each draft step's tokens: a few cells of the draft's own cache, warned with the draft itself.
    Arg(("--speculative-draft-max-tokens",), "draft_max", parse=refined(minimum=1)),
    Arg(("--speculative-draft-min-tokens",), "draft_min", parse=refined(minimum=0)),
    Arg(("--speculative-draft-min-continue-probability",), "draft_tuning", parse=_PROBABILITY),
    quiet("--exact", takes="flag"),  # the key is a model's path
    quiet("--local", takes="flag"),  # LM Link devices' models left out
    quiet("--identifier"),  # the API's name for the loaded model
    Arg(("--estimate-only",), "estimate_only", takes="flag"),  # loads nothing: a note
    quiet("-y", "--yes", takes="flag"),
    *_CLIENT,
    *_LOGGING,
)

SERVER_ARGS: tuple[Arg, ...] = (
    Arg(("-p", "--port"), "port", parse=_PORT),
    quiet("--bind"),
    quiet("--cors", takes="flag"),
    *_LOGGING,
)

# lmstudio-js LLMLoadModelConfig.ts llmLlamaCacheQuantizationTypes, by kvcalc's names.
_LMSTUDIO_KV = {"fp32": "f32", "fp16": "f16", "q8_0": "q8_0", "q4_0": "q4_0", "q4_1": "q4_1", "iq4_nl": "iq4_nl",
                "q5_0": "q5_0", "q5_1": "q5_1"}  # fmt: skip
_RUNTIME_NOTE = ("LM Studio runs a GGUF on its llama.cpp runtime and an MLX folder on its MLX runtime; the line does "
                 "not say which: read as lmstudio (llama.cpp runtime)")  # fmt: skip


class LmsLoad(CommandLine):
    """``lms load [MODEL]``: its context length is the whole unified cache of the llama.cpp runtime,
    shared by ``--parallel`` predictions (default 4): read as that many sequences (--batch) of
    context / parallel tokens; no context flag is LM Studio's 4,096 (lmstudio-ai/docs list.md)."""

    def _load(self, reading: Reading) -> tuple[Settings, int]:
        """What every ``lms load`` says alike, for either runtime: the model key, the engine and the
        predictions (LM Studio's default 4 where --parallel is not given, said in a note)."""
        values, notes = reading.values, reading.notes
        _check_drafting(values, self.program)
        settings: Settings = {"engine": self.engine}
        model = values.get("model")
        if isinstance(model, str):
            settings["model"] = model
        else:
            notes.append(f"{self.program} without a model key asks for one (-y: the last loaded): give MODEL before "
                         "'--'")  # fmt: skip
        parallel = values.get("parallel")
        if isinstance(parallel, int):
            settings["parallel"] = parallel
        else:
            notes.append(f"LM Studio's default Max Concurrent Predictions {DEFAULT_PARALLEL} applied "
                         "(lmstudio-ai/docs parallel-requests.md)")  # fmt: skip
        return settings, parallel if isinstance(parallel, int) else DEFAULT_PARALLEL

    def interpret(self, reading: Reading) -> Settings:
        values, notes = reading.values, reading.notes
        settings, slots = self._load(reading)
        model = settings.get("model")
        if isinstance(model, str):
            notes.append(f"{model} is LM Studio's model key (lms ls); kvcalc reads it as its own MODEL (a preset, a "
                         "Hub id, a GGUF or config path)")  # fmt: skip
        notes.append(_RUNTIME_NOTE)
        context = values.get("context")
        if not isinstance(context, int):
            context = DEFAULT_CONTEXT_LENGTH
            notes.append(f"LM Studio's default context length {DEFAULT_CONTEXT_LENGTH:,} applied (lmstudio-ai/docs "
                         "list.md), unless the model's own load settings in LM Studio say otherwise")  # fmt: skip
        settings["batch"] = slots
        settings["tokens"] = _per_prediction(context, slots, notes, reading.warnings)
        if slots > 1:
            notes.append(f"the context length {context:,} is one unified cache shared by {slots} predictions: read "
                         f"as {slots} sequences of {settings['tokens']:,} tokens (the same cells; one prediction "
                         "alone may use them all)")  # fmt: skip
        self._gpu(values.get("gpu_ratio"), reading)
        if values.get("estimate_only"):
            notes.append("--estimate-only: LM Studio prints its own estimate and loads nothing; kvcalc sizes the load "
                         "it estimates")  # fmt: skip
        return settings

    def _gpu(self, ratio: SettingValue | None, reading: Reading) -> None:
        if ratio is None:
            reading.notes.append("without --gpu LM Studio chooses the GPU offload itself (load.md); kvcalc counts "
                                 "every layer on the GPU (--gpu-layers N before '--' sizes a split)")  # fmt: skip
        elif ratio == 1.0:
            reading.notes.append("--gpu max: every layer on the GPU, as kvcalc counts them")
        else:
            shown = "off" if ratio == 0 else f"{ratio:g}"
            reading.warnings.append(
                f"{self.program} --gpu {shown}: LM Studio offloads that share of the model's layers to the GPU (off: "
                "none; its own rounding to layers), the rest and their KV cache stay in host memory; kvcalc counts "
                "every layer on the GPU (--gpu-layers N before '--' sizes a split); kvcalc does not model it"
            )

    def express(self, settings: Mapping[str, SettingValue]) -> tuple[dict[str, SettingValue], list[str]]:
        """fit's answer as an ``lms load`` line: --context-length the whole cache (tokens x batch),
        --parallel the concurrency found; notes for the load settings lms has no flag for."""
        values: dict[str, SettingValue] = {}
        notes: list[str] = []
        model = settings.get("model")
        if model is not None:
            values["model"] = model
            notes.append(f"{model}: give lms load the model key LM Studio lists for its GGUF (lms ls)")
        batch = settings.get("batch", 1)
        assert isinstance(batch, int)
        knob = settings.get("parallel")
        slots = max(batch, knob) if isinstance(knob, int) else batch
        tokens = settings.get("tokens")
        if isinstance(tokens, int) and tokens > 0:
            values["context"] = tokens * batch
        values["parallel"] = slots
        if slots > batch:
            notes.append(f"--parallel {slots} predictions share the {batch}-sequence context: read back as {slots} "
                         "sequences of fewer tokens, the same cells")  # fmt: skip
        notes += _unsaid(settings)
        return values, notes


def _unsaid(settings: Mapping[str, SettingValue]) -> list[str]:
    """What lms load has no flag for: the cache types, the load settings, the layout, a share or budget."""
    notes: list[str] = []
    both = settings.get("kv_dtype")
    k, v = settings.get("k_dtype", both), settings.get("v_dtype", both)
    if isinstance(k, str) or isinstance(v, str):
        named = {key: _LMSTUDIO_KV.get(str(d), str(d)) for key, d in (("K", k), ("V", v)) if isinstance(d, str)}
        said = ", ".join(f"{key} {name}" for key, name in named.items())
        notes.append(f"lms load has no cache-type flag: set {said} in the model's load settings in LM Studio (K/V "
                     "Cache Quantization Type; lmstudio-js LLMLoadModelConfig llamaKCacheQuantizationType, "
                     "llamaVCacheQuantizationType), and give the same --kv-dtype before '--' to read the line "
                     "back")  # fmt: skip
    for key, said in (("no_kv_unified", "Unified KV Cache off (useUnifiedKvCache false)"),
                      ("n_batch", "Evaluation Batch Size (evalBatchSize)"),
                      ("ubatch", "the physical batch size (physicalBatchSize)"),
                      ("no_kv_offload", "Offload KV Cache to GPU Memory off (offloadKVCacheToGpu false)")):  # fmt: skip
        value = settings.get(key)
        if value is not None and value is not False:
            shown = "" if value is True else f" {value}"
            notes.append(f"lms load has no flag for {said}{shown}: set it in the model's load settings in LM Studio")
    layers = settings.get("gpu_layers")
    if layers is not None:
        notes.append(f"lms load --gpu takes a share of the model's layers, not a count: --gpu-layers {layers} is "
                     f"--gpu {layers}/(the model's layers)")  # fmt: skip
    layout = [f"{key} {settings[key]}" for key in ("tp", "pp", "dp") if settings.get(key, 1) != 1]
    if layout:
        notes.append(f"LM Studio splits a model's layers over the GPUs it sees itself ({', '.join(layout)}): no "
                     "lms load flag says it")  # fmt: skip
    share = settings.get("utilization")
    if isinstance(share, float) and share != 1.0:
        notes.append(f"LM Studio has no share of GPU memory to set ({share:g}): --context-length fixes its cache")
    if "kv_budget" in settings:
        notes.append("LM Studio has no KV cache budget to set: --context-length fixes its cells")
    limit, tokens = settings.get("max_model_len"), settings.get("tokens")
    if isinstance(limit, int) and limit != tokens:
        notes.append(f"LM Studio has no request limit apart from its context length ({limit:,} not written)")
    return notes


def _per_prediction(context: int, slots: int, notes: list[str], warnings: list[str]) -> int:
    """Each prediction's tokens for a context of ``context`` cells over ``slots``: kvcalc's cells are
    pad(slots x tokens, 256) and llama.cpp's pad(context, 256), so the tokens whose cells are LM Studio's."""
    if context % slots == 0:
        return context // slots
    target = pad(context, _CELL_PADDING)
    for tokens in (context // slots, -(-context // slots)):
        if tokens > 0 and pad(tokens * slots, _CELL_PADDING) == target:
            notes.append(f"context length {context:,} over {slots} predictions: llama.cpp pads it to "
                         f"{target:,} cells; kvcalc reads {tokens:,} tokens each, whose {tokens * slots:,} pad "
                         "the same")  # fmt: skip
            return tokens
    tokens = context // slots or 1
    cells = pad(tokens * slots, _CELL_PADDING)
    warnings.append(f"context length {context:,} over {slots} predictions: no whole tokens each give llama.cpp's "
                    f"{target:,} cells; kvcalc reads {tokens:,} ({cells:,} cells)")  # fmt: skip
    return tokens


def _check_drafting(values: Mapping[str, SettingValue], program: str) -> None:
    """loadSpeculativeDecoding.ts resolveCliSpeculativeDecodingLoadConfig's refusals."""
    mtp, simple, model = values.get("draft_mtp"), values.get("draft_simple"), values.get("draft_model")
    tuning = any(k in values for k in ("draft_max", "draft_min", "draft_tuning"))
    refusal = None
    if mtp is True and simple is True:
        refusal = "--speculative-draft-mtp and --speculative-draft-simple cannot both be used."
    elif model == "":
        refusal = "--speculative-draft-model must not be empty."
    elif mtp is True and model is not None:
        refusal = "--speculative-draft-mtp cannot be combined with --speculative-draft-model."
    elif simple is not True and model is not None:
        refusal = "--speculative-draft-model requires --speculative-draft-simple."
    elif simple is True and model is None:
        refusal = "--speculative-draft-simple requires --speculative-draft-model."
    elif mtp is not True and simple is not True and tuning:
        refusal = "--speculative draft tuning flags require --speculative-draft-simple or --speculative-draft-mtp."
    else:
        low, high = values.get("draft_min"), values.get("draft_max")
        if isinstance(low, int) and isinstance(high, int) and low > high:
            refusal = "--speculative-draft-min-tokens must be less than or equal to --speculative-draft-max-tokens."
    if refusal is not None:
        raise UsageError(f"{program}: error: {refusal}")


class LmsLoadMLX(LmsLoad):
    """``lms load`` for LM Studio's MLX runtime (``lmstudio-mlx``): each prediction its own cache,
    the context length mlx-engine's max_kv_size (mlx_engine/generate.py load_model). ``read_command``
    reads an ``lms load`` line as the llama.cpp runtime (the first reader); this one writes fit's
    answer for lmstudio-mlx and reads where the caller names the MLX runtime."""

    def interpret(self, reading: Reading) -> Settings:
        values, notes = reading.values, reading.notes
        settings, slots = self._load(reading)
        settings["batch"] = slots
        context = values.get("context")
        if not isinstance(context, int):
            context = DEFAULT_CONTEXT_LENGTH
            notes.append(f"LM Studio's default context length {DEFAULT_CONTEXT_LENGTH:,} applied (mlx-engine "
                         "load_model's max_kv_size), unless the model's own load settings say otherwise")  # fmt: skip
        settings["tokens"] = context
        settings["max_kv_size"] = context
        notes.append("https://github.com/lmstudio-ai/lmstudio-bug-tracker/issues/2318 reports LM Studio 0.4.21's MLX "
                     "runtime (1.11.0) loading a context of its own whatever -c says")  # fmt: skip
        self._gpu(values.get("gpu_ratio"), reading)
        return settings

    def express(self, settings: Mapping[str, SettingValue]) -> tuple[dict[str, SettingValue], list[str]]:
        """fit's answer for the MLX runtime: --context-length each prediction's tokens (max_kv_size
        where given), --parallel the concurrency found."""
        values: dict[str, SettingValue] = {}
        notes: list[str] = []
        model = settings.get("model")
        if model is not None:
            values["model"] = model
            notes.append(f"{model}: give lms load the model key LM Studio lists for its MLX folder (lms ls)")
        context = settings.get("max_kv_size", settings.get("tokens"))
        if isinstance(context, int) and context > 0:
            values["context"] = context
        batch = settings.get("batch", 1)
        knob = settings.get("parallel")
        values["parallel"] = max(batch, knob) if isinstance(batch, int) and isinstance(knob, int) else batch
        said = [f"{key} {settings[key]}" for key in ("kv_bits", "kv_group_size", "quantized_kv_start", "kv_dtype")
                if key in settings]  # fmt: skip
        if said:
            notes.append(f"lms load has no flag for the MLX runtime's KV Cache Quantization ({', '.join(said)}): set "
                         "it in the model's load settings in LM Studio (lmstudio-js LLMLoadModelConfig "
                         "mlxKvCacheQuantization), and give the same before '--' to read the line back")  # fmt: skip
        notes += [n for n in _unsaid(settings) if "cache-type" not in n]
        notes.append("kvcalc reads an lms load line as the llama.cpp runtime (lmstudio): this one is for the MLX "
                     "runtime")  # fmt: skip
        return values, notes


class LmsServerStart(CommandLine):
    """``lms server start``: the HTTP server, which loads no model (``lms load`` does, or a request
    by JIT loading); its flags are quiet."""

    def interpret(self, reading: Reading) -> Settings:
        reading.notes.append(f"{self.program} loads no model: give MODEL before '--' (its load: lms load); "
                             f"{_RUNTIME_NOTE}")  # fmt: skip
        return {"engine": self.engine}


_LMS = ("lms",)
READERS = (
    LmsLoad(engine="lmstudio", programs=((*_LMS, "load"),), args=LOAD_ARGS, source=LOAD_SOURCE, positional="model"),
    LmsLoadMLX(engine="lmstudio-mlx", programs=((*_LMS, "load"),), args=LOAD_ARGS, source=LOAD_SOURCE,
               positional="model"),
    LmsServerStart(engine="lmstudio", programs=((*_LMS, "server", "start"),), args=SERVER_ARGS, source=SERVER_SOURCE,
                   writes=()),
)  # fmt: skip
