"""Ollama's command lines read and written: ``ollama serve`` with its environment
(``OLLAMA_NUM_PARALLEL=4 OLLAMA_KV_CACHE_TYPE=q8_0 ollama serve``), ``ollama run MODEL`` and
``ollama create NAME -f Modelfile`` (the Modelfile's FROM and PARAMETER lines), read from
github.com/ollama/ollama v0.32.15 (the newest release of kvcalc's default Ollama 0.32):
envconfig/config.go (every variable, ``AsMap``), cmd/cmd.go (each command's flags, cobra/pflag),
parser/parser.go (Modelfile instructions) and api/types.go (``Options``: the PARAMETER names).

Ollama reads its settings from the server's environment and from the model, not from flags:
``ollama serve`` takes none but -h, and ``ollama run`` and ``ollama create`` are clients that
read no memory setting from their environment (the server does).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from kvcalc.engines.commandline import (
    Arg,
    CommandLine,
    Reading,
    ReadText,
    Settings,
    SettingValue,
    knob_args,
    quiet,
    unmodelled,
)
from kvcalc.engines.ollama import OllamaOptions
from kvcalc.errors import UsageError

TAG = "v0.32.15"
SOURCE = f"ollama {TAG} envconfig/config.go, cmd/cmd.go"
MODELFILE_SOURCE = f"ollama {TAG} parser/parser.go, api/types.go"

_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")


def go_bool(text: str) -> bool | None:
    """Go's ``strconv.ParseBool``: 1/t/T/TRUE/true/True, 0/f/F/FALSE/false/False; None otherwise."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    return None


def flash_attention(text: str) -> int:
    """OLLAMA_FLASH_ATTENTION as envconfig.BoolWithDefault reads it: ParseBool's spellings, and any
    other (non-empty) value is true (``if err != nil { return true }``)."""
    return 0 if go_bool(text) is False else 1


# OLLAMA_KV_CACHE_TYPE (lowercased: llm/server.go ``strings.ToLower(envconfig.KvCacheType())``, passed
# to llama-server as --cache-type-k and --cache-type-v) as kvcalc's names; docs/faq.mdx names f16,
# q8_0 and q4_0, and llama-server's other cache types are kvcalc's under the same name.
_KV_TYPES = {"f16": "fp16", "f32": "fp32", "bf16": "bf16", "q8_0": "q8_0", "q4_0": "q4_0", "q4_1": "q4_1",
             "iq4_nl": "iq4_nl", "q5_0": "q5_0", "q5_1": "q5_1"}  # fmt: skip
_OLLAMA_KV = {v: k for k, v in _KV_TYPES.items()}


def _var(text: str) -> str:
    """envconfig.Var: the value stripped of spaces, then of quotes."""
    return text.strip().strip("\"'")


_WHY_OVERHEAD = "reserves that many bytes of each GPU (and lowers the total the default num_ctx tier reads)"
# Every variable of envconfig/config.go (AsMap, and UseAuth), by what it does to memory.
ENV: tuple[Arg, ...] = (
    Arg(("OLLAMA_NUM_PARALLEL",), "num_parallel"),
    Arg(("OLLAMA_CONTEXT_LENGTH",), "context_length"),
    Arg(("OLLAMA_KV_CACHE_TYPE",), "kv_cache_type"),
    *knob_args(OllamaOptions, flash_attention),
    unmodelled("OLLAMA_GPU_OVERHEAD", why=_WHY_OVERHEAD),
    unmodelled("OLLAMA_MAX_LOADED_MODELS", why="lets several models share the GPUs' memory"),
    unmodelled("OLLAMA_SCHED_SPREAD", why="spreads the model over every GPU, whatever --tp says"),
    unmodelled("OLLAMA_LLM_LIBRARY", why="chooses the backend library (cpu: no GPU memory at all)"),
    unmodelled("OLLAMA_IGPU_ENABLE", why="lets Ollama schedule on integrated GPUs (shared system memory)"),
    unmodelled("LLAMA_ARG_FIT", why="llama-server's fit of the memory options Ollama leaves unset (layers on GPU)"),
    unmodelled("LLAMA_ARG_FIT_TARGET", why="the free memory llama-server's fit leaves on each GPU"),
    quiet("OLLAMA_DEBUG"),
    quiet("OLLAMA_DEBUG_LOG_REQUESTS"),
    quiet("OLLAMA_GO_TEMPLATE"),
    quiet("OLLAMA_HOST"),
    quiet("OLLAMA_KEEP_ALIVE"),
    quiet("OLLAMA_LOAD_TIMEOUT"),
    quiet("OLLAMA_MAX_TRANSFER_STREAMS"),
    quiet("OLLAMA_MAX_QUEUE"),
    quiet("OLLAMA_MODELS"),
    quiet("OLLAMA_NO_CLOUD"),
    quiet("OLLAMA_NOHISTORY"),
    quiet("OLLAMA_NOPRUNE"),
    quiet("OLLAMA_ORIGINS"),
    quiet("OLLAMA_EDITOR"),
    quiet("OLLAMA_REMOTES"),
    quiet("OLLAMA_AUTH"),
    quiet("OLLAMA_VULKAN"),
    # Which GPUs Ollama sees: kvcalc's GPUs are the ones --gpu and --tp name.
    quiet("CUDA_VISIBLE_DEVICES"),
    quiet("HIP_VISIBLE_DEVICES"),
    quiet("ROCR_VISIBLE_DEVICES"),
    quiet("GGML_VK_VISIBLE_DEVICES"),
    quiet("GPU_DEVICE_ORDINAL"),
    quiet("HSA_OVERRIDE_GFX_VERSION"),
    quiet("HTTP_PROXY"),
    quiet("HTTPS_PROXY"),
    quiet("NO_PROXY"),
    quiet("http_proxy"),
    quiet("https_proxy"),
    quiet("no_proxy"),
)
# The variables only ``ollama serve`` reads for the model it loads; a client (run, create) passes
# them to no server.
_SERVER_ONLY = frozenset(s for a in ENV for s in a.spellings if a.key is not None or a.memory)

_HELP = quiet("-h", "--help", takes="flag")


class OllamaServe(CommandLine):
    """``ollama serve``: no flags but -h; OLLAMA_NUM_PARALLEL is --batch (the slots), num_ctx
    (OLLAMA_CONTEXT_LENGTH) --tokens per slot, OLLAMA_KV_CACHE_TYPE --kv-dtype. envconfig.Var
    strips spaces and quotes; an empty variable is an unset one (``env_text``)."""

    def interpret(self, reading: Reading) -> Settings:
        values = reading.values
        settings: Settings = {"engine": self.engine}
        parallel = _uint(values.pop("num_parallel", None), "OLLAMA_NUM_PARALLEL", 1, reading)
        if parallel is not None:
            if parallel == 0:
                reading.notes.append("OLLAMA_NUM_PARALLEL=0 is one slot (server/sched.go max(NumParallel, 1))")
            settings["batch"] = max(parallel, 1)
        context = _uint(values.pop("context_length", None), "OLLAMA_CONTEXT_LENGTH", 0, reading)
        if context == 0:
            reading.notes.append("OLLAMA_CONTEXT_LENGTH=0 is Ollama's default num_ctx (by total GPU memory)")
        elif context is not None:
            settings["tokens"] = context
        kv = values.pop("kv_cache_type", None)
        if isinstance(kv, str):
            found = _KV_TYPES.get(kv.lower())
            if found is None:
                raise UsageError(f"OLLAMA_KV_CACHE_TYPE={kv}: llama-server has no such cache type ("
                                 f"{', '.join(_KV_TYPES)})")  # fmt: skip
            settings["kv_dtype"] = found
        fa = reading.env.get("OLLAMA_FLASH_ATTENTION")
        if fa is not None and go_bool(fa) is None:
            reading.notes.append(f"OLLAMA_FLASH_ATTENTION={fa} is no boolean: Ollama reads it as on "
                                 "(envconfig.BoolWithDefault)")  # fmt: skip
        settings.update(values)
        return settings

    def express(self, settings: Mapping[str, SettingValue]) -> tuple[dict[str, SettingValue], list[str]]:
        values: dict[str, SettingValue] = {}
        notes: list[str] = []
        if "batch" in settings:
            values["num_parallel"] = settings["batch"]
        if "tokens" in settings:
            values["context_length"] = settings["tokens"]
            notes.append(f"or per model: PARAMETER num_ctx {settings['tokens']} in its Modelfile (ollama create)")
        kv, k, v = settings.get("kv_dtype"), settings.get("k_dtype"), settings.get("v_dtype")
        if kv is None and k is not None and k == v:
            kv = k
        elif k is not None or v is not None:
            notes.append("Ollama has one cache type for K and V (OLLAMA_KV_CACHE_TYPE): it cannot say "
                         f"K {k or kv}, V {v or kv}")  # fmt: skip
        if isinstance(kv, str) and kv in _OLLAMA_KV:
            values["kv_cache_type"] = _OLLAMA_KV[kv]
        fa = settings.get("flash_attention")
        if fa is not None:
            values["flash_attention"] = int(fa)
        elif "kv_cache_type" in values and values["kv_cache_type"] != "f16":
            # A quantized cache needs flash attention (llm/server.go up to v0.24; llama-server's V cache).
            values["flash_attention"] = 1
        model = settings.get("model")
        if model is not None:
            notes.append(f"then ollama run the model by its Ollama name, or ollama create one FROM {model}'s GGUF")
        share = settings.get("utilization")
        if isinstance(share, float) and share != 1.0:
            notes.append(f"Ollama has no share of GPU memory to set ({share:g}): it takes what is free, less "
                         "OLLAMA_GPU_OVERHEAD bytes per GPU")  # fmt: skip
        if "kv_budget" in settings:
            notes.append("Ollama has no KV cache budget to set: its cache is num_ctx x OLLAMA_NUM_PARALLEL cells")
        layout = [f"{key} {settings[key]}" for key in ("tp", "pp", "dp") if key in settings]
        if layout:
            notes.append(f"Ollama spreads a model's layers over the GPUs itself ({', '.join(layout)}): "
                         "OLLAMA_SCHED_SPREAD=1 uses every GPU")  # fmt: skip
        return values, notes


def _uint(text: SettingValue | None, name: str, default: int, reading: Reading) -> int | None:
    """envconfig.Uint: digits (strconv.ParseUint); another value is logged and the default used."""
    if text is None:
        return None
    if isinstance(text, str) and text.isascii() and text.isdigit():
        return int(text)
    reading.warnings.append(f"{name}={text} is no whole number: Ollama logs 'invalid environment variable' and "
                            f"uses its default {default}")  # fmt: skip
    return None


def pflag_bool(spelling: str, text: str) -> bool:
    """A switch's ``--flag=VALUE`` as pflag reads it (strconv.ParseBool), its error word for word."""
    parsed = go_bool(text)
    if parsed is None:
        raise UsageError(f'invalid argument "{text}" for "{spelling}" flag: strconv.ParseBool: parsing "{text}": '
                         "invalid syntax")  # fmt: skip
    return parsed


def _name_note(program: str, name: str) -> str:
    return (f"{program}: {name} is an Ollama model name kvcalc cannot open: give the model's config.json, Hub id, "
            "preset or GGUF as MODEL before '--'")  # fmt: skip


class OllamaRun(CommandLine):
    """``ollama run MODEL [PROMPT]``: the model by its Ollama name (kvcalc cannot open it), then
    the prompt's words; every flag quiet (none sets memory)."""

    def positional_settings(self, reading: Reading) -> None:
        words = [w for w in reading.positionals if w != "--"]
        if not words:
            raise UsageError(f"{self.program}: error: requires at least 1 arg(s), only received 0")
        reading.notes.append(_name_note(self.program, words[0]))


RUN_ARGS: tuple[Arg, ...] = (
    _HELP,
    quiet("--keepalive"),
    quiet("--verbose", takes="flag"),
    quiet("--insecure", takes="flag"),
    quiet("--nowordwrap", takes="flag"),
    quiet("--format"),
    quiet("--think", takes="optional"),
    quiet("--hidethinking", takes="flag"),
    quiet("--truncate", takes="flag"),
    quiet("--dimensions"),
)

CREATE_ARGS: tuple[Arg, ...] = (
    _HELP,
    Arg(("-f", "--file"), "file"),
    unmodelled("-q", "--quantize", why="quantizes the weights to that type"),
    unmodelled("--draft-quantize", why="quantizes the draft model's weights"),
    quiet("--experimental", takes="flag"),
)


class OllamaCreate(CommandLine):
    """``ollama create NAME [-f Modelfile]``: the Modelfile (default ./Modelfile) read through
    ``read_text``: FROM a local GGUF file or model folder is the model (relative to the
    Modelfile's folder), FROM an Ollama name is a note; PARAMETER num_ctx is --tokens."""

    def positional_settings(self, reading: Reading) -> None:
        words = [w for w in reading.positionals if w != "--"]
        if len(words) != 1:
            raise UsageError(f"{self.program}: error: accepts 1 arg(s), received {len(words)}")

    def after_words(self, reading: Reading, read_text: ReadText) -> None:
        """The Modelfile -f names, or ./Modelfile (cmd/cmd.go CreateHandler's default)."""
        given = reading.values.pop("file", None)
        path = given if isinstance(given, str) and given else "Modelfile"
        reading.values.update(read_modelfile(read_text(path), path, reading))


# api/types.go Options and Runner (v0.32.15), by their json names: what PARAMETER may name.
_QUIET_PARAMETERS = frozenset({
    "use_mmap", "num_thread", "num_keep", "seed", "num_predict", "top_k", "top_p", "min_p",
    "typical_p", "repeat_last_n", "temperature", "repeat_penalty", "presence_penalty", "frequency_penalty", "stop",
})  # fmt: skip
_INT_PARAMETERS = frozenset({"num_ctx", "num_batch", "num_gpu", "main_gpu", "num_thread", "draft_num_predict",
                             "num_keep", "seed", "num_predict", "top_k", "repeat_last_n"})  # fmt: skip
_UNMODELLED_PARAMETERS = {
    "num_batch": "llama-server -b and -ub (kvcalc takes Ollama's 512): they size the compute buffers and "
    "sliding-window layers' cells",
    "num_gpu": "llama-server -ngl: the layers on the GPU, the rest (and their cache) in host memory",
    "main_gpu": "llama-server --split-mode none --main-gpu: the whole model on that one GPU",
    # llm/llama_server.go appendDraftArgs: --spec-type and --spec-draft-n-max when the model has a
    # draft (DRAFT, or its own MTP layers) and draft_num_predict > 0; 0 turns drafting off.
    "draft_num_predict": "speculative drafting with a DRAFT model or the model's MTP layers, with the draft's "
    "own cache",
}
# parser/parser.go deprecatedParameters: Ollama says so and ignores them.
_DEPRECATED = frozenset({"penalize_newline", "low_vram", "f16_kv", "logits_all", "vocab_only", "use_mlock", "mirostat",
                         "mirostat_tau", "mirostat_eta"})  # fmt: skip
_INSTRUCTIONS = ("from", "license", "template", "system", "adapter", "draft", "renderer", "parser", "parameter",
                 "message", "requires")  # fmt: skip
# What a FROM path is, as far as its words say: Ollama stats it (a path that exists is a local model).
_PATH_STARTS = ("/", "./", "../", "~", "\\", ".")
_MODEL_FILES = (".gguf", ".bin", ".safetensors")


def read_modelfile(text: str, path: str, reading: Reading) -> Settings:
    """A Modelfile's settings (parser/parser.go ParseFile, Modelfile.CreateRequest): FROM and
    PARAMETER num_ctx; ADAPTER and DRAFT warned; an unknown instruction or parameter is
    Ollama's error."""
    settings: Settings = {}
    where = "ollama create"
    found_from = False
    for number, name, args in _instructions(text):
        if name not in _INSTRUCTIONS:
            raise UsageError(f"{where}: {path} (line {number}): command must be one of "
                             f"{', '.join(repr(i) for i in _INSTRUCTIONS)}")  # fmt: skip
        if name == "from":
            found_from = True
            model = _local_model(args, path)
            if model is None:
                reading.notes.append(_name_note(f"{where} FROM", args))
            else:
                settings["model"] = model
        elif name == "adapter":
            reading.warnings.append(f"{where} ADAPTER {args}: a LoRA adapter's weights (llama-server --lora); kvcalc "
                                    "does not model it")  # fmt: skip
        elif name == "draft":
            reading.warnings.append(f"{where} DRAFT {args}: a draft model's weights and cache (speculative decoding); "
                                    "kvcalc does not model it")  # fmt: skip
        elif name == "parameter":
            _parameter(args, number, path, settings, reading)
    if not found_from:
        raise UsageError(f"{where}: {path}: no FROM line")
    return settings


def _parameter(args: str, number: int, path: str, settings: Settings, reading: Reading) -> None:
    key, _, value = args.partition(" ")
    value = _unquote(value.strip())
    if key in _DEPRECATED:
        reading.notes.append(f"ollama create: warning: parameter {key} is deprecated (Ollama ignores it)")
        return
    known = key == "num_ctx" or key in _QUIET_PARAMETERS or key in _UNMODELLED_PARAMETERS
    if not known:
        raise UsageError(f"ollama create: {path} (line {number}): unknown parameter '{key}'")
    if key in _INT_PARAMETERS:
        try:
            number_value = int(value, 10)
        except ValueError:
            raise UsageError(f"ollama create: invalid int value [{value}]") from None
        if key == "num_ctx":
            settings["tokens"] = number_value
            return
    why = _UNMODELLED_PARAMETERS.get(key)
    if why is not None and not (key == "draft_num_predict" and value.strip() == "0"):
        reading.warnings.append(f"ollama create PARAMETER {key} {value}: {why}; kvcalc does not model it")


def _local_model(args: str, modelfile: str) -> str | None:
    """FROM's model as a local path (relative to the Modelfile's folder, as CreateRequest's
    expandPath), or None for an Ollama model name (``llama3.1:8b``, ``hf.co/user/repo:Q4_K_M``)."""
    if not (args.startswith(_PATH_STARTS) or args.lower().endswith(_MODEL_FILES)):
        return None
    if args.startswith(("/", "~", "\\")):
        return args
    return os.path.normpath(os.path.join(os.path.dirname(modelfile), args))


def _unquote(value: str) -> str:
    for quote in ('"""', '"'):
        if len(value) >= 2 * len(quote) and value.startswith(quote) and value.endswith(quote):
            return value[len(quote) : -len(quote)]
    return value


def _instructions(text: str) -> list[tuple[int, str, str]]:
    """The Modelfile's instructions (line, lowercased name, argument), comments skipped and a
    triple-quoted argument joined over its lines."""
    found: list[tuple[int, str, str]] = []
    lines = text.lstrip("\ufeff").splitlines()
    index = 0
    while index < len(lines):
        line = lines[index].strip()
        index += 1
        if not line or line.startswith("#"):
            continue
        name, _, args = line.partition(" ")
        if "\t" in name:
            name, _, rest = name.partition("\t")
            args = f"{rest} {args}".strip()
        args = args.strip()
        start = index
        for quote in ('"""', '"'):
            if args.startswith(quote) and (len(args) < 2 * len(quote) or not args.endswith(quote)):
                while index < len(lines) and not lines[index].rstrip().endswith(quote):
                    args += "\n" + lines[index]
                    index += 1
                if index < len(lines):
                    args += "\n" + lines[index].rstrip()
                    index += 1
                break
        found.append((start, name.lower(), args))
    return found


# The client commands (run, create): pflag's switches take ``--flag=false`` too, and the server's
# variables given to them are said for what they are: read by no server.
_ELSEWHERE = ("ollama serve", _SERVER_ONLY)
READERS = (
    OllamaServe(engine="ollama", programs=(("ollama", "serve"), ("ollama", "start")), args=(_HELP,), env=ENV,
                env_prefix="OLLAMA_", source=SOURCE, env_text=_var),
    OllamaRun(engine="ollama", programs=(("ollama", "run"),), args=RUN_ARGS, source=f"ollama {TAG} cmd/cmd.go",
              writes=(), flag_value=pflag_bool, env_elsewhere=_ELSEWHERE),
    OllamaCreate(engine="ollama", programs=(("ollama", "create"),), args=CREATE_ARGS,
                 source=f"ollama {TAG} cmd/cmd.go, parser/parser.go", writes=(), flag_value=pflag_bool,
                 env_elsewhere=_ELSEWHERE),
)  # fmt: skip
