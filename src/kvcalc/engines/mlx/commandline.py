"""``mlx_lm.server`` and ``mlx_lm.generate`` read and written: every flag of mlx-lm 0.32.2's own
argument parsers (mlx_lm/server.py ``main``, mlx_lm/generate.py ``setup_arg_parser``), by what it
does to memory, under each spelling mlx-lm 0.32.2 answers to (its console scripts
``mlx_lm.server`` / ``mlx_lm.generate``, ``mlx_lm server`` and ``python -m mlx_lm server``
through mlx_lm/cli.py, and the deprecated ``python -m mlx_lm.server``, which still runs main()).

The terms that are not kvcalc's: neither program has a context flag (generate's prompt is text
kvcalc does not tokenize; a server request's context is its own prompt and max_tokens), the
server's concurrency is ``--decode-concurrency`` unless ``--kv-bits`` or ``--draft-model`` makes it
serve one request at a time, and generate's ``-m`` defaults to 100 generated tokens where kvcalc's
``--max-tokens`` defaults to 0."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation

from kvcalc.engines.commandline import (
    Arg,
    CommandLine,
    Reading,
    Settings,
    SettingValue,
    knob_args,
    plain_int,
    quiet,
    unmodelled,
)
from kvcalc.engines.mlx import MLXOptions
from kvcalc.errors import UsageError

VERSION = "mlx-lm 0.32.2"
SERVER_SOURCE = f"{VERSION} mlx_lm/server.py main()"
GENERATE_SOURCE = f"{VERSION} mlx_lm/generate.py setup_arg_parser()"

# generate.py DEFAULT_MAX_TOKENS and DEFAULT_MODEL; server.py --max-tokens, --decode-concurrency
# and --prompt-cache-size defaults (mlx-lm 0.32.2).
GENERATE_MAX_TOKENS = 100
GENERATE_MODEL = "mlx-community/Llama-3.2-3B-Instruct-4bit"
SERVER_MAX_TOKENS = 512
SERVER_DECODE_CONCURRENCY = 32
SERVER_PROMPT_CACHE_SIZE = 10

_SIZES = {"M": 10**6, "G": 10**9, "MB": 10**6, "GB": 10**9, "": 1}


def parse_size(text: str) -> int:
    """mlx_lm/utils.py ``_parse_size`` (0.32.2), --prompt-cache-bytes' type: leading digits and
    dots as a Decimal, then M/MB (10^6) or G/GB (10^9) in any case, or none: 70G = 70 x 10^9,
    1.5GB = 1,500,000,000; the product is cut to an integer. Any other suffix is refused (mlx-lm
    raises a KeyError there and stops with a traceback)."""
    split = 0
    for char in text:
        if not (char.isdigit() or char == "."):
            break
        split += 1
    scale = _SIZES.get(text[split:].strip().upper())
    if scale is None:
        raise UsageError("a size is digits then M, MB (10^6), G or GB (10^9), or none (bytes)")
    try:
        return int(Decimal(text[:split]) * scale)
    except InvalidOperation:
        raise ValueError(text) from None


# The knobs' flags (MLXOptions' engine_flag): each program has only some of them.
_KNOBS = {a.key: a for a in knob_args(MLXOptions)}

# Both parsers' flags that do not touch memory, or touch it as the notes of each say.
_WEIGHTS_ADAPTER = "the adapter's weights load with the model's (LoRA/DoRA layers added: tuner/utils.py load_adapters)"
_IMAGES = "each image's tokens join the prompt (as many as its processor makes) and the vision tower runs on it"
_SAVED_CACHE = "the saved cache it loads comes before the prompt, in the layout and format mlx_lm.cache_prompt saved"
# generate.py main and server.py _serve_single: make_prompt_cache(draft_model) beside the model's.
_DRAFT = "the draft model's weights load beside the model's, and its own cache grows beside the model's"
_PREFILL_BATCH = ("prompts are prefilled together, up to this many (BatchGenerator prefill_batch_size): a prefill "
                  "step's activations grow with it")  # fmt: skip

GENERATE_ARGS: tuple[Arg, ...] = (
    _KNOBS["max_kv_size"],
    _KNOBS["prefill_step_size"],
    _KNOBS["kv_bits"],
    _KNOBS["kv_group_size"],
    _KNOBS["quantized_kv_start"],
    _KNOBS["max_tokens"],  # -m, --max-tokens
    Arg(("--model",), "model"),
    quiet("--trust-remote-code", takes="flag"),  # the tokenizer's remote code
    unmodelled("--adapter-path", why=_WEIGHTS_ADAPTER),
    quiet("--extra-eos-token", nargs="+"),  # stop tokens
    # The prompt's words: their tokens are in the context, which kvcalc cannot count (a note).
    Arg(("--prompt", "-p"), "prompt"),
    quiet("--system-prompt"),
    quiet("--prefill-response"),
    unmodelled("--image", why=_IMAGES, nargs="+"),
    quiet("--temp"),
    quiet("--top-p"),
    quiet("--min-p"),
    quiet("--top-k"),
    quiet("--xtc-probability"),
    quiet("--xtc-threshold"),
    quiet("--min-tokens-to-keep"),
    quiet("--seed"),
    quiet("--ignore-chat-template", takes="flag"),
    quiet("--use-default-chat-template", takes="flag"),
    quiet("--chat-template-config"),
    quiet("--verbose"),  # type=str2bool: takes a value
    unmodelled("--prompt-cache-file", why=_SAVED_CACHE),
    # utils.py load: QuantizedLinear becomes QQLinear over the same weights (nvfp4/mxfp8 models):
    # the activations are quantized inside each matmul; no cache or weight bytes change.
    quiet("--quantize-activations", "-qa", takes="flag"),
    unmodelled("--draft-model", why=_DRAFT),
    quiet("--num-draft-tokens"),
)

SERVER_ARGS: tuple[Arg, ...] = (
    _KNOBS["prefill_step_size"],
    _KNOBS["kv_bits"],
    _KNOBS["kv_group_size"],
    _KNOBS["quantized_kv_start"],
    Arg(("--max-tokens",), "max_tokens", parse=plain_int),  # the server has no -m
    Arg(("--prompt-cache-bytes",), "prompt_cache_bytes", parse=parse_size),
    Arg(("--model",), "model"),
    # BatchGenerator(completion_batch_size=...): the requests decoded at once.
    Arg(("--decode-concurrency",), "batch", parse=plain_int),
    unmodelled("--prompt-concurrency", why=_PREFILL_BATCH),
    # LRUPromptCache(max_size): how many finished prompts' caches are kept (a warning unless
    # --prompt-cache-bytes bounds them: interpret).
    Arg(("--prompt-cache-size",), "prompt_cache_size", parse=plain_int),
    unmodelled("--adapter-path", why=_WEIGHTS_ADAPTER),
    quiet("--host"),
    quiet("--port"),
    quiet("--allowed-origins"),
    Arg(("--draft-model",), "draft_model", memory=_DRAFT),
    quiet("--num-draft-tokens"),
    quiet("--trust-remote-code", takes="flag"),
    quiet("--log-level"),
    quiet("--chat-template"),
    quiet("--use-default-chat-template", takes="flag"),
    quiet("--temp"),
    quiet("--top-p"),
    quiet("--top-k"),
    quiet("--min-p"),
    quiet("--chat-template-args"),
    # Pipelining instead of tensor parallelism across an mx.distributed group (mlx.launch over
    # several Macs, which this line does not say); on one Mac the group is 1 and nothing changes.
    quiet("--pipeline", takes="flag"),
)


class MlxGenerate(CommandLine):
    """``mlx_lm.generate``: one prompt, then up to ``-m`` tokens (default 100). Its prompt is text, so
    the context kvcalc sizes is ``--tokens`` given before ``--`` (the prompt's tokens + ``-m``)."""

    def interpret(self, reading: Reading) -> Settings:
        values = reading.values
        prompt = values.pop("prompt", None)
        _drop_unquantized(values, reading)
        settings = super().interpret(reading)
        if "max_tokens" not in settings:
            settings["max_tokens"] = GENERATE_MAX_TOKENS
            reading.notes.append(f"{self.program} generates up to -m {GENERATE_MAX_TOKENS} tokens by default "
                                 f"(DEFAULT_MAX_TOKENS): --max-tokens {GENERATE_MAX_TOKENS} applied")  # fmt: skip
        if "model" not in settings:
            reading.notes.append(f"{self.program} with no --model loads {GENERATE_MODEL} (DEFAULT_MODEL): give "
                                 "that model before '--' to size it")  # fmt: skip
        said = "the prompt it reads from stdin" if prompt == "-" else ("its --prompt text" if prompt else
                                                                         "its default prompt ('hello')")  # fmt: skip
        reading.notes.append(f"kvcalc does not count the tokens of {said} (chat template included): the context "
                             f"sized is --tokens given before '--', the prompt's tokens + the "
                             f"{settings['max_tokens']:,} generated")  # fmt: skip
        return settings


class MlxServer(CommandLine):
    """``mlx_lm.server``: no context flag (each request brings its prompt and max_tokens), up to
    ``--decode-concurrency`` requests decoded at once (32) unless ``--kv-bits`` or ``--draft-model``
    makes it serve one at a time (server.py _is_batchable, ModelProvider.is_batchable)."""

    def interpret(self, reading: Reading) -> Settings:
        values = reading.values
        cached = values.pop("prompt_cache_size", None)
        draft = values.pop("draft_model", None)
        _drop_unquantized(values, reading)
        settings = super().interpret(reading)
        single = "kv_bits" in settings or draft is not None
        if single:
            why = "--kv-bits" if "kv_bits" in settings else "--draft-model"
            ignored = f" (--decode-concurrency {settings['batch']} changes nothing)" if "batch" in settings else ""
            settings["batch"] = 1
            reading.notes.append(f"{self.program} with {why} serves one request at a time (server.py "
                                 f"_is_batchable): batch 1{ignored}")  # fmt: skip
        elif "batch" in settings:
            reading.notes.append(f"--decode-concurrency {settings['batch']}: up to that many requests are decoded "
                                 "at once in one batched cache (BatchKVCache, prompts left-padded to the batch's "
                                 "longest): kvcalc sizes that many sequences of --tokens, each grown as "
                                 "generate_step grows one")  # fmt: skip
        else:
            reading.notes.append(f"{self.program} decodes up to {SERVER_DECODE_CONCURRENCY} requests at once by "
                                 f"default (--decode-concurrency {SERVER_DECODE_CONCURRENCY}): give --batch before "
                                 "'--' for the requests you expect at once")  # fmt: skip
        if "max_tokens" in settings:
            reading.notes.append(f"--max-tokens {settings['max_tokens']:,} (a request's default cap) read as the "
                                 "tokens each sequence generates after its prompt")  # fmt: skip
        else:
            reading.notes.append(f"{self.program} has no context flag and caps a request at {SERVER_MAX_TOKENS} "
                                 "generated tokens unless it asks for its own max_tokens: the context sized is "
                                 "--tokens given before '--', prompt and generated alike")  # fmt: skip
        if cached and "prompt_cache_bytes" not in settings:
            # (Left at its default of 10, fit's own note says the same.)
            reading.warnings.append(f"{self.program} --prompt-cache-size {cached}: up to {cached} finished prompts' "
                                    "caches are kept beside the live ones, with no byte limit (no "
                                    "--prompt-cache-bytes); kvcalc does not model them")  # fmt: skip
        return settings

    def express(self, settings: Mapping[str, SettingValue]) -> tuple[dict[str, SettingValue], list[str]]:
        """fit's answer as an mlx_lm.server line: the model, ``--decode-concurrency`` the concurrency
        found, the knobs the server has; what it cannot say, in notes."""
        values, notes = super().express(settings)
        batch = settings.get("batch")
        if "kv_bits" in values and isinstance(batch, int) and batch > 1:
            values.pop("batch", None)
            notes.append(f"--kv-bits makes {self.program} serve one request at a time: {batch} requests at once "
                         "need the unquantized cache (or that many servers)")  # fmt: skip
        if "model" in values:
            notes.append("--model names the repository kvcalc read; mlx_lm.server loads its weights as stored: name "
                         "your MLX conversion of it (mlx-community's 4-bit ones) if that is what you run")  # fmt: skip
        tokens = settings.get("tokens")
        if isinstance(tokens, int):
            notes.append(f"{self.program} has no context flag: each request's prompt + max_tokens is its context "
                         f"({tokens:,} tokens in this answer; give --tokens {tokens} before '--' to read the line "
                         "back)")  # fmt: skip
        if "max_model_len" in settings:
            notes.append(f"{self.program} has no limit on a request's length but the model's own: "
                         f"max_model_len {settings['max_model_len']:,} is not in the line")  # fmt: skip
        for key, value in settings.items():
            if key in ("tp", "pp", "dp", "dp_attention") and isinstance(value, int) and value > 1:
                notes.append(f"{key} {value}: {self.program} shards over an mx.distributed group (mlx.launch "
                             "over several Macs; --pipeline splits layers), not a flag of its own")  # fmt: skip
        utilization = settings.get("utilization")
        if isinstance(utilization, float) and utilization != 1.0:
            notes.append(f"{self.program} wires up to Metal's recommendedMaxWorkingSetSize; no flag of its own sets "
                         f"a share of {utilization:g} (sudo sysctl iogpu.wired_limit_mb=N sets the limit)")  # fmt: skip
        if "kv_budget" in settings:
            notes.append(f"{self.program} has no KV budget flag: its caches grow with the requests")
        if "max_kv_size" in settings:
            notes.append(f"{self.program} ({VERSION}) has no --max-kv-size: its caches keep every token "
                         "(mlx_lm.generate has the rotating cache)")  # fmt: skip
        # (Without --prompt-cache-bytes, fit's own note says the finished prompts' caches have no room.)
        return values, notes


def _drop_unquantized(values: dict[str, SettingValue], reading: Reading) -> None:
    """--kv-group-size and --quantized-kv-start without --kv-bits: mlx-lm takes them and does nothing
    with them (generate.py maybe_quantize_kv_cache returns when kv_bits is None); kvcalc's own flags
    refuse them alone, so the reading drops them, in a note."""
    if "kv_bits" in values:
        return
    for key, flag in (("kv_group_size", "--kv-group-size"), ("quantized_kv_start", "--quantized-kv-start")):
        if key in values:
            reading.notes.append(f"{flag} {values.pop(key)} changes nothing without --kv-bits: not read")


GENERATE_PROGRAMS = (("mlx_lm.generate",), ("mlx_lm", "generate"), ("python", "-m", "mlx_lm", "generate"),
                     ("python", "-m", "mlx_lm.generate"))  # fmt: skip
SERVER_PROGRAMS = (("mlx_lm.server",), ("mlx_lm", "server"), ("python", "-m", "mlx_lm", "server"),
                   ("python", "-m", "mlx_lm.server"))  # fmt: skip

# The server first: fit's answer is written as an mlx_lm.server line. Both read their words as
# argparse does: a unique prefix of a long flag stands for it (allow_abbrev), ``-`` is a value
# (``--prompt -`` reads stdin), nargs="+" flags take every word up to the next flag.
READERS = (
    MlxServer(engine="mlx", programs=SERVER_PROGRAMS, args=SERVER_ARGS, source=SERVER_SOURCE, parser="argparse"),
    MlxGenerate(
        engine="mlx",
        programs=GENERATE_PROGRAMS,
        args=GENERATE_ARGS,
        source=GENERATE_SOURCE,
        writes=(),
        parser="argparse",
    ),
)
