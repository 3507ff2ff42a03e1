"""``llama-server`` and ``llama-cli`` read and written: every flag that common/arg.cpp's
``common_params_parser_init`` gives LLAMA_EXAMPLE_SERVER (tools/server/server.cpp) and
LLAMA_EXAMPLE_CLI (tools/cli/cli.cpp) at llama.cpp 0c1e570 (the copy vendored in llama-cpp-python
0.3.36, whose rules kvcalc's llama.cpp engine follows), with the LLAMA_ARG_* environment variables
its ``set_env`` names, each classified by what it does to memory.

llama.cpp reads its command line its own way (common/arg.cpp ``common_params_parse_ex``): every word
must be a spelling of the table (no ``--flag=value``, no positional words; ``_`` in a ``--`` word reads
as ``-``), a flag that takes a value takes the next word whatever it is, an integer is read by
``std::stoi`` (``-c 32k`` is 32), the environment first and the words after it (a later word wins).
``-c`` is the cells of every slot together: ``-np P`` slots of ``-c / P`` tokens each.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kvcalc.engines.base import pad
from kvcalc.engines.commandline import (
    TOKENS_FROM_MODEL,
    Arg,
    CommandLine,
    Reading,
    ReadText,
    Settings,
    SettingValue,
    Takes,
    WrittenCommand,
    as_text,
)
from kvcalc.errors import UsageError

SOURCE = "llama.cpp 0c1e570 common/arg.cpp (llama-cpp-python 0.3.36's vendor/llama.cpp)"
# llama.cpp pads n_ctx to a multiple of 256 cells (src/llama-context.cpp: GGML_PAD(n_ctx, 256)).
CELL_PADDING = 256
# tools/server/server.cpp: n_parallel auto (-1, any negative) is 4 slots sharing one unified cache.
AUTO_SLOTS = 4
# common/common.h: fit_params_min_ctx, the least context --fit lowers an unset -c to.
FIT_MIN_CTX = 4096

_INT = re.compile(r"^\s*([+-]?\d+)")
_FLOAT = re.compile(r"^\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)")


def stoi(text: str) -> int:
    """An integer as ``std::stoi`` reads it: leading spaces, a sign and digits; what follows the
    digits is ignored (``32k`` is 32), no digits or a value past int32 is an error."""
    found = _INT.match(text)
    if found is None:
        raise ValueError(text)
    value = int(found.group(1))
    if not -(2**31) <= value < 2**31:
        raise ValueError(text)
    return value


def _stof(text: str) -> float:
    found = _FLOAT.match(text)
    if found is None:
        raise ValueError(text)
    return float(found.group(1))


# common/arg.cpp kv_cache_types (ggml_type_name spellings) -> kvcalc's dtype names.
CACHE_TYPES = {"f32": "fp32", "f16": "fp16", "bf16": "bf16", "q8_0": "q8_0", "q4_0": "q4_0", "q4_1": "q4_1",
               "iq4_nl": "iq4_nl", "q5_0": "q5_0", "q5_1": "q5_1"}  # fmt: skip
_GGML_NAMES = {v: k for k, v in CACHE_TYPES.items()}
_TRUTHY = ("on", "enabled", "true", "1")  # common_arg_utils::is_truthy
_FALSEY = ("off", "disabled", "false", "0")  # common_arg_utils::is_falsey


def cache_type(text: str) -> str:
    """kv_cache_type_from_str: one of kv_cache_types by its exact ggml name."""
    if text not in CACHE_TYPES:
        raise UsageError(f"Unsupported cache type: {text} (allowed: {', '.join(CACHE_TYPES)})")
    return CACHE_TYPES[text]


def on_off(text: str) -> str:
    if text in _TRUTHY:
        return "on"
    if text in _FALSEY:
        return "off"
    raise UsageError(f"unknown value '{text}': on or off")


def on_off_auto(text: str) -> str:
    """-fa: is_truthy, is_falsey or is_autoy (auto, -1)."""
    return "auto" if text in ("auto", "-1") else on_off(text)


def gpu_layers(text: str) -> int:
    """-ngl: auto (-1), all (-2) or std::stoi's count; -1 is auto and any value <= -2 all."""
    if text in ("auto", "all"):
        return -1 if text == "auto" else -2
    return stoi(text)


def tensor_split(text: str) -> str:
    """-ts: proportions split on runs of ',' and '/', each read by std::stof, as kvcalc's A,B."""
    return ",".join(f"{_stof(part):g}" for part in re.split(r"[,/]+", text))


def split_mode(text: str) -> str:
    if text not in ("none", "layer", "row", "tensor"):
        raise UsageError("invalid value: none, layer, row or tensor")
    return text


# Why a flag changes memory kvcalc does not model (the warning's reason).
_CHECKPOINTS = "each slot keeps up to N context checkpoints (copies of its SWA or recurrent state) in host memory"
_CACHE_RAM = "a prompt cache of up to N MiB of KV state in host memory (default 8192)"
_MMPROJ = "a multimodal projector's weights and compute buffer load beside the model"
_LORA = "LoRA adapters' weights load beside the model"
_CONTROL = "control vectors add a tensor per layer beside the model"
_ON_CPU = "it keeps some of the model's weights in CPU memory"
_RPC = "RPC servers hold some of the model's layers and their cache"
_DEVICES = "it chooses the devices that hold the weights and cache"
_METADATA = "it overrides the model's GGUF metadata, which can change its shape"
_DOCKER = "a Docker Hub model kvcalc does not read (give kvcalc its GGUF)"
_ROUTER = "router mode runs one llama-server per model loaded, each with its own weights and cache"
_EMBEDDING = "an embeddings-only server: llama.cpp sets n_batch = n_ubatch (tools/server/server.cpp)"
_DRAFT = "a speculative-decoding draft model's weights and KV cache load beside the model"
_PRESET = "a built-in preset: its own model (downloaded), context, slots and batch sizes (common/arg.cpp)"


@dataclass(frozen=True)
class _F:
    """One common_arg: its spellings, its handler's kind (f: none, b: bool with negations ``neg``,
    i: std::stoi, v: a string, 2: two strings), its LLAMA_ARG_* variable, the programs it is in
    (S: llama-server, C: llama-cli), and what it means to kvcalc (key, parse, memory)."""

    spellings: str
    kind: str
    env: str = ""
    neg: str = ""
    on: str = "SC"
    key: str | None = None
    parse: Callable[[str], SettingValue] | None = None
    memory: str = ""

    def reader(self) -> Callable[[str], SettingValue]:
        return self.parse or (stoi if self.kind == "i" else as_text)


# common_params_parser_init at 0c1e570, in its order (llama-server and llama-cli's flags only).
FLAGS: tuple[_F, ...] = (
    _F("-h --help --usage", "f"),
    _F("--version", "f"),
    _F("-cl --cache-list", "f"),
    _F("--completion-bash", "f"),
    _F("--server-base", "v", on="C"),
    _F("--verbose-prompt", "f", on="C"),
    _F("--display-prompt", "b", neg="--no-display-prompt", on="C"),
    _F("-co --color", "v", on="C"),
    _F("-t --threads", "i", env="LLAMA_ARG_THREADS"),
    _F("-tb --threads-batch", "i"),
    _F("-C --cpu-mask", "v"),
    _F("-Cr --cpu-range", "v"),
    _F("--cpu-strict", "v"),
    _F("--prio", "i"),
    _F("--poll", "v"),
    _F("-Cb --cpu-mask-batch", "v"),
    _F("-Crb --cpu-range-batch", "v"),
    _F("--cpu-strict-batch", "i"),
    _F("--prio-batch", "i"),
    _F("--poll-batch", "i"),
    _F("-lcs --lookup-cache-static", "v", on="S"),
    _F("-lcd --lookup-cache-dynamic", "v", on="S"),
    _F("-c --ctx-size", "i", env="LLAMA_ARG_CTX_SIZE", key="ctx", parse=stoi),
    _F("--kv-unified-per-slot", "i", env="LLAMA_ARG_KV_UNIFIED_PER_SLOT", on="S", key="per_slot", parse=stoi),
    _F("-n --predict --n-predict", "i", env="LLAMA_ARG_N_PREDICT"),
    _F("-b --batch-size", "i", env="LLAMA_ARG_BATCH", key="n_batch", parse=stoi),
    _F("-ub --ubatch-size", "i", env="LLAMA_ARG_UBATCH", key="ubatch", parse=stoi),
    _F("--keep", "i"),
    _F("--swa-full", "f", env="LLAMA_ARG_SWA_FULL", key="swa_full"),
    _F("-ctxcp --ctx-checkpoints --swa-checkpoints", "i", env="LLAMA_ARG_CTX_CHECKPOINTS", memory=_CHECKPOINTS),
    _F("-cms --checkpoint-min-step", "i", env="LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT", on="S"),
    _F("-cram --cache-ram", "i", env="LLAMA_ARG_CACHE_RAM", memory=_CACHE_RAM),
    _F("-kvu --kv-unified", "b", env="LLAMA_ARG_KV_UNIFIED", neg="-no-kvu --no-kv-unified", on="S", key="kv_unified"),
    _F("--cache-idle-slots", "b", env="LLAMA_ARG_CACHE_IDLE_SLOTS", neg="--no-cache-idle-slots", on="S"),
    _F("--context-shift", "b", env="LLAMA_ARG_CONTEXT_SHIFT", neg="--no-context-shift"),
    _F("-fa --flash-attn", "v", env="LLAMA_ARG_FLASH_ATTN", key="flash_attn", parse=on_off_auto),
    _F("-p --prompt", "v", on="C"),
    _F("-sys --system-prompt", "v", on="C"),
    _F("--perf", "b", env="LLAMA_ARG_PERF", neg="--no-perf"),
    _F("--show-timings", "b", env="LLAMA_ARG_SHOW_TIMINGS", neg="--no-show-timings", on="C"),
    _F("-f --file", "v", on="C"),
    _F("-sysf --system-prompt-file", "v", on="C"),
    _F("-bf --binary-file", "v", on="C"),
    _F("-e --escape", "b", neg="--no-escape"),
    _F("-r --reverse-prompt", "v"),
    _F("-sp --special", "f"),
    _F("-st --single-turn", "f", on="C"),
    _F("-mli --multiline-input", "f", on="C"),
    _F("--warmup", "b", neg="--no-warmup"),
    _F("--spm-infill", "f", on="S"),
    _F("--samplers", "v"),
    _F("-s --seed", "v"),
    _F("--sampler-seq --sampling-seq", "v"),
    _F("--ignore-eos", "f"),
    _F("--temp --temperature", "v", env="LLAMA_ARG_TEMPERATURE"),
    _F("--top-k", "i", env="LLAMA_ARG_TOP_K"),
    _F("--top-p", "v", env="LLAMA_ARG_TOP_P"),
    _F("--min-p", "v", env="LLAMA_ARG_MIN_P"),
    _F("--top-nsigma --top-n-sigma", "v"),
    _F("--xtc-probability", "v"),
    _F("--xtc-threshold", "v"),
    _F("--typical --typical-p", "v"),
    _F("--repeat-last-n", "i"),
    _F("--repeat-penalty", "v", env="LLAMA_ARG_REPEAT_PENALTY"),
    _F("--presence-penalty", "v", env="LLAMA_ARG_PRESENCE_PENALTY"),
    _F("--frequency-penalty", "v", env="LLAMA_ARG_FREQUENCY_PENALTY"),
    _F("--dry-multiplier", "v"),
    _F("--dry-base", "v"),
    _F("--dry-allowed-length", "i"),
    _F("--dry-penalty-last-n", "i"),
    _F("--dry-sequence-breaker", "v"),
    _F("--adaptive-target", "v"),
    _F("--adaptive-decay", "v"),
    _F("--dynatemp-range", "v"),
    _F("--dynatemp-exp", "v"),
    _F("--mirostat", "i"),
    _F("--mirostat-lr", "v"),
    _F("--mirostat-ent", "v"),
    _F("-l --logit-bias", "v"),
    _F("--grammar", "v"),
    _F("--grammar-file", "v"),
    _F("-j --json-schema", "v"),
    _F("-jf --json-schema-file", "v"),
    _F("-bs --backend-sampling", "f", env="LLAMA_ARG_BACKEND_SAMPLING"),
    _F("--pooling", "v", env="LLAMA_ARG_POOLING", on="S"),
    _F("--rope-scaling", "v", env="LLAMA_ARG_ROPE_SCALING_TYPE"),
    _F("--rope-scale", "v", env="LLAMA_ARG_ROPE_SCALE"),
    _F("--rope-freq-base", "v", env="LLAMA_ARG_ROPE_FREQ_BASE"),
    _F("--rope-freq-scale", "v", env="LLAMA_ARG_ROPE_FREQ_SCALE"),
    _F("--yarn-orig-ctx", "i", env="LLAMA_ARG_YARN_ORIG_CTX"),
    _F("--yarn-ext-factor", "v", env="LLAMA_ARG_YARN_EXT_FACTOR"),
    _F("--yarn-attn-factor", "v", env="LLAMA_ARG_YARN_ATTN_FACTOR"),
    _F("--yarn-beta-slow", "v", env="LLAMA_ARG_YARN_BETA_SLOW"),
    _F("--yarn-beta-fast", "v", env="LLAMA_ARG_YARN_BETA_FAST"),
    _F("-kvo --kv-offload", "b", env="LLAMA_ARG_KV_OFFLOAD", neg="-nkvo --no-kv-offload", key="kv_offload"),
    _F("--repack", "b", env="LLAMA_ARG_REPACK", neg="-nr --no-repack"),
    _F("--no-host", "f", env="LLAMA_ARG_NO_HOST"),
    _F("-ctk --cache-type-k", "v", env="LLAMA_ARG_CACHE_TYPE_K", key="k_dtype", parse=cache_type),
    _F("-ctv --cache-type-v", "v", env="LLAMA_ARG_CACHE_TYPE_V", key="v_dtype", parse=cache_type),
    _F("-dt --defrag-thold", "v", env="LLAMA_ARG_DEFRAG_THOLD"),
    _F("-np --parallel", "i", env="LLAMA_ARG_N_PARALLEL", on="S", key="parallel", parse=stoi),
    _F("-np --parallel", "i", env="LLAMA_ARG_N_PARALLEL", on="C", key="parallel", parse=stoi),
    _F("-cb --cont-batching", "b", env="LLAMA_ARG_CONT_BATCHING", neg="-nocb --no-cont-batching", on="S"),
    _F("-mm --mmproj", "v", env="LLAMA_ARG_MMPROJ", memory=_MMPROJ),
    _F("-mmu --mmproj-url", "v", env="LLAMA_ARG_MMPROJ_URL", memory=_MMPROJ),
    _F("--mmproj-auto", "b", env="LLAMA_ARG_MMPROJ_AUTO", neg="--no-mmproj --no-mmproj-auto", key="mmproj_auto"),
    _F("--mmproj-offload", "b", env="LLAMA_ARG_MMPROJ_OFFLOAD", neg="--no-mmproj-offload"),
    _F("-mmdev --mmproj-device", "v", env="MTMD_BACKEND_DEVICE"),
    _F("--image --audio --video", "v", on="C"),
    _F("--image-min-tokens", "i", env="LLAMA_ARG_IMAGE_MIN_TOKENS"),
    _F("--image-max-tokens", "i", env="LLAMA_ARG_IMAGE_MAX_TOKENS"),
    _F("--mtmd-batch-max-tokens", "i", env="LLAMA_ARG_MTMD_BATCH_MAX_TOKENS", on="S"),
    _F("--video-fps", "v", env="LLAMA_ARG_VIDEO_FPS"),
    _F("--video-timestamp-interval", "i", env="LLAMA_ARG_VIDEO_TIMESTAMP_INTERVAL"),
    _F("--video-ffmpeg-dir", "v", env="LLAMA_ARG_VIDEO_FFMPEG_DIR"),
    _F("--rpc", "v", env="LLAMA_ARG_RPC", memory=_RPC),
    _F("-lm --load-mode", "v", env="LLAMA_ARG_LOAD_MODE"),
    _F("-lzm --lazy-mode", "v", env="LLAMA_ARG_LAZY_MODE"),
    _F("--numa", "v", env="LLAMA_ARG_NUMA"),
    _F("-dev --device", "v", env="LLAMA_ARG_DEVICE", memory=_DEVICES),
    _F("--list-devices", "f"),
    _F("-ot --override-tensor", "v", env="LLAMA_ARG_OVERRIDE_TENSOR", memory=_ON_CPU),
    _F("-cmoe --cpu-moe", "f", env="LLAMA_ARG_CPU_MOE", memory=_ON_CPU),
    _F("-ncmoe --n-cpu-moe", "i", env="LLAMA_ARG_N_CPU_MOE", memory=_ON_CPU),
    _F("-ncffn --n-cpu-ffn", "i", env="LLAMA_ARG_N_CPU_FFN", memory=_ON_CPU),
    _F("-ngl --gpu-layers --n-gpu-layers", "v", env="LLAMA_ARG_N_GPU_LAYERS", key="gpu_layers", parse=gpu_layers),
    _F("-sm --split-mode", "v", env="LLAMA_ARG_SPLIT_MODE", key="split_mode", parse=split_mode),
    _F("-ts --tensor-split", "v", env="LLAMA_ARG_TENSOR_SPLIT", key="tensor_split", parse=tensor_split),
    _F("-mg --main-gpu", "i", env="LLAMA_ARG_MAIN_GPU"),
    _F("-fit --fit", "v", env="LLAMA_ARG_FIT", key="fit", parse=on_off),
    _F("-fitt --fit-target", "v", env="LLAMA_ARG_FIT_TARGET"),
    _F("-fitc --fit-ctx", "i", env="LLAMA_ARG_FIT_CTX"),
    _F("--check-tensors", "f"),
    _F("--override-kv", "v", memory=_METADATA),
    _F("--op-offload", "b", neg="--no-op-offload"),
    _F("--lora", "v", memory=_LORA),
    _F("--lora-scaled", "v", memory=_LORA),
    _F("--control-vector", "v", memory=_CONTROL),
    _F("--control-vector-scaled", "v", memory=_CONTROL),
    _F("--control-vector-layer-range", "2"),
    _F("-a --alias", "v", env="LLAMA_ARG_ALIAS", on="S"),
    _F("--tags", "v", env="LLAMA_ARG_TAGS", on="S"),
    _F("-m --model", "v", env="LLAMA_ARG_MODEL", key="model"),
    _F("-mu --model-url", "v", env="LLAMA_ARG_MODEL_URL", key="model_url"),
    _F("-dr --docker-repo", "v", env="LLAMA_ARG_DOCKER_REPO", memory=_DOCKER),
    _F("-hf -hfr --hf-repo", "v", env="LLAMA_ARG_HF_REPO", key="hf_repo"),
    _F("-hff --hf-file", "v", env="LLAMA_ARG_HF_FILE", key="hf_file"),
    _F("-hft --hf-token", "v", env="HF_TOKEN"),
    _F("-o --output --output-file", "v", on="C"),
    _F("--embd-normalize", "i", on="S"),
    _F("--host", "v", env="LLAMA_ARG_HOST", on="S"),
    _F("--port", "i", env="LLAMA_ARG_PORT", on="S"),
    _F("--reuse-port", "f", env="LLAMA_ARG_REUSE_PORT", on="S"),
    _F("--path", "v", env="LLAMA_ARG_STATIC_PATH", on="S"),
    _F("--cors-origins", "v", env="LLAMA_ARG_CORS_ORIGINS", on="S"),
    _F("--cors-methods", "v", env="LLAMA_ARG_CORS_METHODS", on="S"),
    _F("--cors-headers", "v", env="LLAMA_ARG_CORS_HEADERS", on="S"),
    _F("--cors-credentials", "b", env="LLAMA_ARG_CORS_CREDENTIALS", neg="--no-cors-credentials", on="S"),
    _F("--api-prefix", "v", env="LLAMA_ARG_API_PREFIX", on="S"),
    _F("--ui-config --webui-config", "v", env="LLAMA_ARG_UI_CONFIG", on="S"),
    _F("--ui-config-file --webui-config-file", "v", env="LLAMA_ARG_UI_CONFIG_FILE", on="S"),
    _F(
        "--ui-mcp-proxy --webui-mcp-proxy",
        "b",
        env="LLAMA_ARG_UI_MCP_PROXY",
        neg="--no-ui-mcp-proxy --no-webui-mcp-proxy",
        on="S",
    ),
    _F("--tools", "v", env="LLAMA_ARG_TOOLS", on="S"),
    _F("--tools-runtime", "v", env="LLAMA_ARG_TOOLS_RUNTIME", on="S"),
    _F("--mcp-servers-config", "v", env="LLAMA_ARG_MCP_SERVERS_CONFIG", on="S"),
    _F("--mcp-servers-json", "v", env="LLAMA_ARG_MCP_SERVERS_JSON", on="S"),
    _F("-ag --agent", "b", env="LLAMA_ARG_AGENT", neg="-no-ag --no-agent", on="S"),
    _F("--ui --webui", "b", env="LLAMA_ARG_UI", neg="--no-ui --no-webui", on="S"),
    _F("--embedding --embeddings", "f", env="LLAMA_ARG_EMBEDDINGS", on="S", memory=_EMBEDDING),
    _F("--rerank --reranking", "f", env="LLAMA_ARG_RERANKING", on="S"),
    _F("--api-key", "v", env="LLAMA_API_KEY", on="S"),
    _F("--api-key-file", "v", env="LLAMA_ARG_API_KEY_FILE", on="S"),
    _F("--ssl-key-file", "v", env="LLAMA_ARG_SSL_KEY_FILE", on="S"),
    _F("--ssl-cert-file", "v", env="LLAMA_ARG_SSL_CERT_FILE", on="S"),
    _F("--chat-template-kwargs", "v", env="LLAMA_ARG_CHAT_TEMPLATE_KWARGS"),
    _F("-to --timeout", "i", env="LLAMA_ARG_TIMEOUT", on="S"),
    _F("--sse-ping-interval", "i", env="LLAMA_ARG_SSE_PING_INTERVAL", on="S"),
    _F("--threads-http", "i", env="LLAMA_ARG_THREADS_HTTP", on="S"),
    _F("--cache-prompt", "b", env="LLAMA_ARG_CACHE_PROMPT", neg="--no-cache-prompt", on="S"),
    _F("--cache-reuse", "i", env="LLAMA_ARG_CACHE_REUSE", on="S"),
    _F("--metrics", "f", env="LLAMA_ARG_ENDPOINT_METRICS", on="S"),
    _F("--props", "f", env="LLAMA_ARG_ENDPOINT_PROPS", on="S"),
    _F("--slots", "b", env="LLAMA_ARG_ENDPOINT_SLOTS", neg="--no-slots", on="S"),
    _F("--slot-save-path", "v", on="S"),
    _F("--models-dir", "v", env="LLAMA_ARG_MODELS_DIR", on="S", memory=_ROUTER),
    _F("--models-preset", "v", env="LLAMA_ARG_MODELS_PRESET", on="S", memory=_ROUTER),
    _F("--models-max", "i", env="LLAMA_ARG_MODELS_MAX", on="S", memory=_ROUTER),
    _F("--models-autoload", "b", env="LLAMA_ARG_MODELS_AUTOLOAD", neg="--no-models-autoload", on="S"),
    _F("--jinja", "b", env="LLAMA_ARG_JINJA", neg="--no-jinja"),
    _F("--reasoning-format", "v", env="LLAMA_ARG_THINK"),
    _F("-rea --reasoning", "v", env="LLAMA_ARG_REASONING"),
    _F("--reasoning-effort", "v", env="LLAMA_ARG_REASONING_EFFORT"),
    _F("--reasoning-budget", "i", env="LLAMA_ARG_THINK_BUDGET"),
    _F("--reasoning-budget-message", "v", env="LLAMA_ARG_THINK_BUDGET_MESSAGE"),
    _F("--reasoning-preserve", "b", env="LLAMA_ARG_REASONING_PRESERVE", neg="--no-reasoning-preserve"),
    _F("--chat-template", "v", env="LLAMA_ARG_CHAT_TEMPLATE"),
    _F("--chat-template-file", "v", env="LLAMA_ARG_CHAT_TEMPLATE_FILE"),
    _F("--skip-chat-parsing", "b", env="LLAMA_ARG_SKIP_CHAT_PARSING", neg="--no-skip-chat-parsing"),
    _F("--prefill-assistant", "b", env="LLAMA_ARG_PREFILL_ASSISTANT", neg="--no-prefill-assistant", on="S"),
    _F("-sps --slot-prompt-similarity", "v", on="S"),
    _F("--lora-init-without-apply", "f", on="S"),
    _F("--sleep-idle-seconds", "i", on="S"),
    _F("--simple-io", "f", on="C"),
    _F("--log-disable", "f"),
    _F("--log-file", "v", env="LLAMA_ARG_LOG_FILE"),
    _F("--log-jsonl", "b", env="LLAMA_ARG_LOG_JSONL", neg="--no-log-jsonl"),
    _F("--log-prompts-dir", "v"),
    _F("--log-colors", "v", env="LLAMA_ARG_LOG_COLORS"),
    _F("-v --verbose --log-verbose", "f"),
    _F("--offline", "f", env="LLAMA_ARG_OFFLINE"),
    _F("-lv --verbosity --log-verbosity", "i", env="LLAMA_ARG_LOG_VERBOSITY"),
    _F("--log-prefix", "b", env="LLAMA_ARG_LOG_PREFIX", neg="--no-log-prefix"),
    _F("--log-timestamps", "b", env="LLAMA_ARG_LOG_TIMESTAMPS", neg="--no-log-timestamps"),
    _F("--spec-draft-hf -hfd -hfrd --hf-repo-draft", "v", env="LLAMA_ARG_SPEC_DRAFT_HF_REPO", memory=_DRAFT),
    _F("--spec-draft-threads -td --threads-draft", "i"),
    _F("--spec-draft-threads-batch -tbd --threads-batch-draft", "i"),
    _F("--spec-draft-cpu-mask -Cd --cpu-mask-draft", "v"),
    _F("--spec-draft-cpu-range -Crd --cpu-range-draft", "v"),
    _F("--spec-draft-cpu-strict --cpu-strict-draft", "i"),
    _F("--spec-draft-prio --prio-draft", "i"),
    _F("--spec-draft-poll --poll-draft", "i"),
    _F("--spec-draft-cpu-mask-batch -Cbd --cpu-mask-batch-draft", "v"),
    _F("--spec-draft-cpu-strict-batch --cpu-strict-batch-draft", "i"),
    _F("--spec-draft-prio-batch --prio-batch-draft", "i"),
    _F("--spec-draft-poll-batch --poll-batch-draft", "i"),
    _F("--spec-draft-type-k -ctkd --cache-type-k-draft", "v", env="LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K", memory=_DRAFT),
    _F("--spec-draft-type-v -ctvd --cache-type-v-draft", "v", env="LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V", memory=_DRAFT),
    _F("--spec-draft-override-tensor -otd --override-tensor-draft", "v", memory=_DRAFT),
    _F("--spec-draft-cpu-moe -cmoed --cpu-moe-draft", "f", env="LLAMA_ARG_SPEC_DRAFT_CPU_MOE", memory=_DRAFT),
    _F(
        "--spec-draft-n-cpu-moe --spec-draft-ncmoe -ncmoed --n-cpu-moe-draft",
        "i",
        env="LLAMA_ARG_SPEC_DRAFT_N_CPU_MOE",
        memory=_DRAFT,
    ),
    _F("--spec-draft-n-max", "i", env="LLAMA_ARG_SPEC_DRAFT_N_MAX"),
    _F("--spec-draft-n-min", "i", env="LLAMA_ARG_SPEC_DRAFT_N_MIN"),
    _F("--spec-synth-len", "v", env="LLAMA_ARG_SPEC_SYNTH_LEN"),
    _F("--spec-synth-rates", "v", env="LLAMA_ARG_SPEC_SYNTH_RATES"),
    _F("--spec-draft-p-split --draft-p-split", "v", env="LLAMA_ARG_SPEC_DRAFT_P_SPLIT"),
    _F("--spec-draft-p-min --draft-p-min", "v", env="LLAMA_ARG_SPEC_DRAFT_P_MIN"),
    _F(
        "--spec-draft-backend-sampling",
        "b",
        env="LLAMA_ARG_SPEC_DRAFT_BACKEND_SAMPLING",
        neg="--no-spec-draft-backend-sampling",
    ),
    _F("--spec-draft-device -devd --device-draft", "v", memory=_DRAFT),
    _F(
        "--spec-draft-ngl -ngld --gpu-layers-draft --n-gpu-layers-draft",
        "v",
        env="LLAMA_ARG_N_GPU_LAYERS_DRAFT",
        memory=_DRAFT,
    ),
    _F("--spec-draft-model -md --model-draft", "v", env="LLAMA_ARG_SPEC_DRAFT_MODEL", memory=_DRAFT),
    _F("--spec-type", "v", env="LLAMA_ARG_SPEC_TYPE"),
    _F("--spec-ngram-mod-n-min", "i"),
    _F("--spec-ngram-mod-n-max", "i"),
    _F("--spec-ngram-mod-n-match", "i"),
    _F("--spec-ngram-simple-size-n", "i"),
    _F("--spec-ngram-simple-size-m", "i"),
    _F("--spec-ngram-simple-min-hits", "i"),
    _F("--spec-ngram-map-k-size-n", "i"),
    _F("--spec-ngram-map-k-size-m", "i"),
    _F("--spec-ngram-map-k-min-hits", "i"),
    _F("--spec-ngram-map-k4v-size-n", "i"),
    _F("--spec-ngram-map-k4v-size-m", "i"),
    _F("--spec-ngram-map-k4v-min-hits", "i"),
    _F("--draft --draft-n --draft-max", "v", env="LLAMA_ARG_DRAFT_MAX"),
    _F("--draft-min --draft-n-min", "v", env="LLAMA_ARG_DRAFT_MIN"),
    _F("--spec-ngram-size-n", "v", on="S"),
    _F("--spec-ngram-size-m", "v", on="S"),
    _F("--spec-ngram-min-hits", "v", on="S"),
    _F("--embd-gemma-default", "f", on="S", memory=_PRESET),
    _F("--fim-qwen-1.5b-default", "f", on="S", memory=_PRESET),
    _F("--fim-qwen-3b-default", "f", on="S", memory=_PRESET),
    _F("--fim-qwen-7b-default", "f", on="S", memory=_PRESET),
    _F("--fim-qwen-7b-spec", "f", on="S", memory=_PRESET),
    _F("--fim-qwen-14b-spec", "f", on="S", memory=_PRESET),
    _F("--fim-qwen-30b-default", "f", on="S", memory=_PRESET),
    _F("--gpt-oss-20b-default", "f", memory=_PRESET),
    _F("--gpt-oss-120b-default", "f", memory=_PRESET),
    _F("--vision-gemma-4b-default", "f", memory=_PRESET),
    _F("--vision-gemma-12b-default", "f", memory=_PRESET),
    _F("--spec-default", "f"),
)

# The words a written line uses for each value, in its order.
_WRITTEN = (("model", "-m"), ("hf_repo", "-hf"), ("hf_file", "-hff"), ("ctx", "-c"), ("parallel", "-np"),
            ("kv_unified", "-kvu"), ("k_dtype", "-ctk"), ("v_dtype", "-ctv"), ("gpu_layers", "-ngl"),
            ("tensor_split", "-ts"), ("kv_offload", "-nkvo"), ("ubatch", "-ub"), ("n_batch", "-b"),
            ("swa_full", "--swa-full"))  # fmt: skip
_TWO_VALUES = ("--control-vector-layer-range",)


def _args(program: str) -> tuple[tuple[Arg, ...], tuple[Arg, ...]]:
    """A program's flags (a negation is its own Arg, setting False) and environment variables."""
    args: list[Arg] = []
    env: list[Arg] = []
    for flag in FLAGS:
        if program not in flag.on:
            continue
        takes: Takes = "flag" if flag.kind in "fb" else "value"
        args.append(Arg(tuple(flag.spellings.split()), flag.key, takes, flag.reader(), flag.memory))
        if flag.neg:
            args.append(Arg(tuple(flag.neg.split()), flag.key, "flag", memory=flag.memory, constant=False))
        if flag.env:
            if flag.kind == "b":
                env.append(Arg((flag.env,), flag.key, "value", _bool, flag.memory))
            else:
                env.append(Arg((flag.env,), flag.key, takes, flag.reader(), flag.memory))
            if flag.neg:
                no = flag.env.replace("LLAMA_ARG_", "LLAMA_ARG_NO_")
                env.append(Arg((no,), flag.key, "flag", memory=flag.memory, constant=False))
    return tuple(args), tuple(env)


def _bool(text: str) -> bool:
    """parse_bool_value: is_truthy or is_falsey, else an error."""
    if text in _TRUTHY:
        return True
    if text in _FALSEY:
        return False
    raise UsageError("invalid boolean value")


class LlamaCppLine(CommandLine):
    """One llama.cpp program's command line. ``-c`` is every slot's cells: a llama-server whose
    slots share one unified cache (no ``-np``: 4 slots; ``-np P -kvu``) is kvcalc's ``llama-server``
    engine, one with ``-np P`` and separate streams is ``llama.cpp``, each slot c / P tokens;
    llama-cli is ``llama.cpp``, one sequence unless ``-np``."""

    server: bool = True

    def __init__(self, *, engine: str, program: str) -> None:
        args, env = _args("S" if self.server else "C")
        super().__init__(engine=engine, programs=((program,), (f"{program}.exe",)), args=args, source=SOURCE, env=env,
                         env_prefix="LLAMA_ARG_")  # fmt: skip

    def _read_env(self, reading: Reading) -> None:
        """common_params_parse_ex's environment pass: a flag's variable applies when truthy, a bool's
        is parse_bool_value, LLAMA_ARG_NO_X turns X off whatever its value."""
        for name, text in reading.env.items():
            arg = self._env.get(name)
            if arg is None:
                if name.startswith(self.env_prefix):
                    reading.warnings.append(f"{name} is no {self.program} variable ({self.source}): not read")
                continue
            if arg.takes == "flag" and arg.constant is True and text not in _TRUTHY:
                continue
            self._apply(arg, name, None if arg.takes == "flag" else text, reading, f'environment variable "{name}"')

    def _read_words(self, words: list[str], reading: Reading, read_text: ReadText) -> None:
        """common_params_parse_ex's words: each one a spelling, a value the next word."""
        index = 0
        while index < len(words):
            word = words[index]
            index += 1
            spelling = word.replace("_", "-") if word.startswith("--") else word
            arg = self.arg(spelling)
            if arg is None:
                raise UsageError(f"{self.program}: error: invalid argument: {word} (its flags as read from "
                                 f"{self.source})")  # fmt: skip
            if arg.takes == "flag":
                self._apply(arg, spelling, None, reading, f'argument "{spelling}"')
                continue
            count = 2 if spelling in _TWO_VALUES else 1
            if index + count > len(words):
                raise UsageError(f'{self.program}: error while handling argument "{spelling}": expected value '
                                 "for argument")  # fmt: skip
            text = words[index]
            index += count
            self._apply(arg, spelling, text, reading, f'argument "{spelling}"')

    def _apply(self, arg: Arg, spelling: str, text: str | None, reading: Reading, what: str) -> None:
        """A value read (parsed as llama.cpp does even where kvcalc keeps none of it)."""
        if arg.memory:
            shown = spelling if text is None else f"{spelling} {text}"
            reading.warnings.append(f"{self.program} {shown}: {arg.memory}; kvcalc does not model it")
        try:
            if text is None:
                value: SettingValue = arg.constant
            else:
                value = arg.parse(text)
        except (ValueError, UsageError) as exc:
            detail = str(exc) if isinstance(exc, UsageError) else f"invalid value {text!r}"
            raise UsageError(f"{self.program}: error while handling {what}: {detail}") from None
        if arg.parse is stoi and text is not None and str(value) != text.strip():
            reading.notes.append(f"{self.program} reads {spelling} {text} as {value} (std::stoi stops at the "
                                 "first character that is no digit)")  # fmt: skip
        if arg.key is not None:
            reading.values[arg.key] = value

    def interpret(self, reading: Reading) -> Settings:
        values, notes = reading.values, reading.notes
        settings: Settings = {}
        model = _model(values, notes)
        if model is not None:
            settings["model"] = model
        slots, unified = self._slots(values, notes)
        batch = slots or AUTO_SLOTS
        # kvcalc's llama-server engine is llama-server's unified cache (4 slots, or -np B -kvu).
        settings["engine"] = "llama-server" if self.server and unified else "llama.cpp"
        settings["batch"] = batch
        ctx = self._context(values, batch, notes)
        if ctx:
            settings["tokens"] = _per_slot(ctx, batch, notes, reading.warnings)
        else:  # the model's training context over the slots, resolved by the caller that opens it
            settings[TOKENS_FROM_MODEL] = batch
        _cache_types(values, settings, self.program)
        _placement(values, settings, notes, reading.warnings, self.program)
        for knob, default in (("ubatch", 512), ("n_batch", 2048)):
            if knob in values and values[knob] != default:
                settings[knob] = values[knob]
        if values.get("swa_full"):
            settings["swa_full"] = True
        return settings

    def _slots(self, values: Mapping[str, SettingValue], notes: list[str]) -> tuple[int | None, bool]:
        """The slots (None: llama-server's auto, 4 unified) and whether they share one stream."""
        parallel = values.get("parallel")
        unified = bool(values.get("kv_unified", False))
        if parallel == 0:
            raise UsageError(f'{self.program}: error while handling argument "-np": invalid value for n_parallel')
        if isinstance(parallel, int) and parallel > 0:
            return parallel, unified
        if values.get("kv_unified") is False:
            notes.append("llama-server with -np auto makes 4 unified slots whatever -no-kvu says "
                         "(tools/server/server.cpp)")  # fmt: skip
        notes.append("llama-server without -np runs 4 slots sharing one unified cache (tools/server/server.cpp): "
                     "kvcalc's llama-server engine, batch 4")  # fmt: skip
        return None, True

    def _context(self, values: Mapping[str, SettingValue], batch: int, notes: list[str]) -> int:
        """-c, or --kv-unified-per-slot x slots where -c is not given; 0 is the model's context."""
        ctx = values.get("ctx")
        per_slot = values.get("per_slot")
        if isinstance(per_slot, int) and per_slot > 0:
            if ctx is None:
                notes.append(f"--kv-unified-per-slot {per_slot}: llama-server sizes the cache to {batch} slots x "
                             f"{per_slot} = {batch * per_slot:,} cells (tools/server/server.cpp)")  # fmt: skip
                return batch * per_slot
            notes.append(f"--kv-unified-per-slot {per_slot} caps each request's context; -c sizes the cache")
        if not isinstance(ctx, int) or ctx <= 0:
            if isinstance(ctx, int) and ctx < 0:
                raise UsageError(f'{self.program}: error while handling argument "-c": a context of {ctx} cells')
            given = "-c 0" if ctx == 0 else "-c not given"
            notes.append(f"{given}: llama.cpp sizes the cache to the model's training context (n_ctx_train)")
            if ctx is None and values.get("fit") != "off":
                notes.append(f"llama.cpp's --fit (on by default) may lower an unset -c to fit device memory, not "
                             f"below {FIT_MIN_CTX:,} (--fit-ctx; common/common.h)")  # fmt: skip
            return 0
        return ctx

    def express(self, settings: Mapping[str, SettingValue]) -> tuple[dict[str, SettingValue], list[str]]:
        """fit's answer as this program's values: -c is tokens x batch, -np the batch (none for
        kvcalc's llama-server at its 4 slots; -kvu for another batch of it), the cache types, the
        layer split and the knobs; notes for what llama.cpp has no flag for."""
        values: dict[str, SettingValue] = {}
        notes: list[str] = []
        model = settings.get("model")
        if isinstance(model, str):
            repo, colon, file = model.partition(":")
            if colon and "/" in repo and not repo.startswith((".", "/")) and file.lower().endswith(".gguf"):
                values["hf_repo"], values["hf_file"] = repo, file
            else:
                values["model"] = model
                if not model.lower().endswith(".gguf"):
                    notes.append(f"llama.cpp runs a GGUF: convert {model} (convert_hf_to_gguf.py) and give its file "
                                 "to -m")  # fmt: skip
        batch = settings.get("batch", 1)
        assert isinstance(batch, int)
        tokens = settings.get("tokens")
        if isinstance(tokens, int) and tokens > 0:
            values["ctx"] = tokens * batch
        if not self.server or self.engine != "llama-server" or batch != AUTO_SLOTS:
            values["parallel"] = batch
        if self.server and (settings.get("kv_unified") or (self.engine == "llama-server" and batch != AUTO_SLOTS)):
            values["kv_unified"] = True
            if self.engine != "llama-server":
                notes.append("llama-server -np B -kvu reads back as kvcalc's llama-server engine: the same cache")
        self._express_types(settings, values, notes)
        for key in ("gpu_layers", "ubatch", "n_batch"):
            if key in settings:
                values[key] = settings[key]
        split = settings.get("tensor_split")
        if split is not None:
            values["tensor_split"] = ",".join(f"{s:g}" for s in split) if isinstance(split, (list, tuple)) else split
        if settings.get("no_kv_offload"):
            values["kv_offload"] = False
        if settings.get("swa_full"):
            values["swa_full"] = True
        for key, flag in (("tp", "--tp"), ("pp", "--pp"), ("dp", "--dp")):
            count = settings.get(key, 1)
            if isinstance(count, int) and count > 1:
                notes.append(f"{flag} {count}: llama.cpp splits layers across the GPUs it sees (-sm layer); "
                             "no llama-server flag says it")  # fmt: skip
        # llama.cpp takes whatever memory is free (kvcalc's share 1 for it): another share or a
        # KV budget has no flag.
        if settings.get("utilization", 1.0) != 1.0 or "kv_budget" in settings:
            notes.append("llama.cpp takes no share of GPU memory nor KV budget: -c fixes its cells, so this line "
                         "reads back with all of the memory")  # fmt: skip
        limit = settings.get("max_model_len")
        if isinstance(limit, int) and isinstance(tokens, int) and limit != tokens:
            notes.append(f"each slot holds {tokens:,} tokens: llama.cpp has no separate request limit "
                         f"({limit:,})")  # fmt: skip
        return values, notes

    def _express_types(self, settings: Mapping[str, SettingValue], values: dict[str, SettingValue],
                       notes: list[str]) -> None:  # fmt: skip
        both = settings.get("kv_dtype")
        for key in ("k_dtype", "v_dtype"):
            dtype = settings.get(key, both)
            if not isinstance(dtype, str) or dtype == "auto":
                continue
            if dtype not in _GGML_NAMES:
                notes.append(f"llama.cpp has no {dtype} cache type ({', '.join(CACHE_TYPES)})")
                continue
            values[key] = _GGML_NAMES[dtype]
        if values.get("v_dtype") not in (None, "f32", "f16", "bf16"):
            notes.append("a quantized V cache needs flash attention: -fa auto (the default) turns it on")

    def write(self, settings: Mapping[str, SettingValue]) -> WrittenCommand:
        values, notes = self.express(settings)
        argv = [self.programs[0][0]]
        for key, word in _WRITTEN:
            if key not in values:
                continue
            value = values[key]
            if isinstance(value, bool):
                if value is (key != "kv_offload"):
                    argv.append(word)
                continue
            argv += [word, str(value)]
        return WrittenCommand(tuple(argv), tuple(notes))


class LlamaServerLine(LlamaCppLine):
    server = True


class LlamaCliLine(LlamaCppLine):
    """llama-cli (tools/cli/cli.cpp): -np defaults to 1 sequence (common/common.h n_parallel), and
    it has no -kvu."""

    server = False

    def _slots(self, values: Mapping[str, SettingValue], notes: list[str]) -> tuple[int | None, bool]:
        parallel = values.get("parallel", 1)
        assert isinstance(parallel, int)
        if parallel < 0:
            raise UsageError(f'{self.program}: error while handling argument "-np": {parallel} sequences')
        return max(parallel, 1), False


def _model(values: Mapping[str, SettingValue], notes: list[str]) -> str | None:
    """-hf REPO[:QUANT] with -hff FILE as kvcalc's REPO:FILE, else -m, else -mu's URL."""
    repo = values.get("hf_repo")
    if isinstance(repo, str) and repo:
        name, _, quant = repo.partition(":")
        file = values.get("hf_file")
        if "model" in values:
            notes.append(f"-hf {repo} and -m {values['model']}: llama.cpp loads the -hf download")
        if values.get("mmproj_auto") is not False:
            notes.append(f"-hf {repo}: llama.cpp also loads the repo's multimodal projector if it has one "
                         "(--mmproj-auto, on by default), weights kvcalc does not count")  # fmt: skip
        if isinstance(file, str) and file:
            return f"{name}:{file}"
        notes.append(f"-hf {repo}: llama.cpp downloads the repo's {quant or 'Q4_K_M'} GGUF (the file its quant "
                     f"tag names); kvcalc reads {name} itself: give -hff FILE (kvcalc: {name}:FILE.gguf) to read "
                     "that file's header")  # fmt: skip
        return name
    for key in ("model", "model_url"):
        found = values.get(key)
        if isinstance(found, str) and found:
            return found
    return None


def _per_slot(ctx: int, slots: int, notes: list[str], warnings: list[str]) -> int:
    """Each slot's tokens for -c ctx over ``slots`` slots: kvcalc's n_ctx is pad(slots x tokens,
    256) and llama.cpp's pad(ctx, 256), so the tokens whose n_ctx is llama.cpp's."""
    if ctx % slots == 0:
        return ctx // slots
    target = pad(ctx, CELL_PADDING)
    for tokens in (ctx // slots, -(-ctx // slots)):
        if tokens > 0 and pad(tokens * slots, CELL_PADDING) == target:
            notes.append(f"-c {ctx:,} over {slots} slots: llama.cpp pads it to {target:,} cells; kvcalc reads "
                         f"{tokens:,} tokens a slot, whose {tokens * slots:,} pad to the same {target:,}")  # fmt: skip
            return tokens
    tokens = ctx // slots or 1
    warnings.append(f"-c {ctx:,} over {slots} slots: no whole tokens a slot give llama.cpp's {target:,} cells; "
                    f"kvcalc reads {tokens:,} ({pad(tokens * slots, CELL_PADDING):,} cells)")  # fmt: skip
    return tokens


def _cache_types(values: Mapping[str, SettingValue], settings: Settings, program: str) -> None:
    """-ctk/-ctv as kvcalc's formats (one kv_dtype when both are given alike). A quantized V needs
    flash attention: -fa auto (the default) turns it on, -fa off is refused (src/llama-context.cpp
    llama_init_from_model: 'quantized V cache requires flash_attn to be enabled')."""
    k, v = values.get("k_dtype"), values.get("v_dtype")
    if isinstance(v, str) and v not in ("fp32", "fp16", "bf16") and values.get("flash_attn") == "off":
        raise UsageError(f"{program}: error: quantized V cache requires flash_attn to be enabled "
                         f"(-ctv {_GGML_NAMES[v]} -fa off; src/llama-context.cpp)")  # fmt: skip
    if k is not None and k == v:
        settings["kv_dtype"] = k
        return
    if k is not None:
        settings["k_dtype"] = k
    if v is not None:
        settings["v_dtype"] = v


def _placement(values: Mapping[str, SettingValue], settings: Settings, notes: list[str], warnings: list[str],
               program: str) -> None:  # fmt: skip
    """-ngl, -ts, -nkvo, -sm and -fa off: where the layers and their cache go."""
    layers = values.get("gpu_layers")
    if isinstance(layers, int):
        if layers == -1:
            settings["gpu_layers"] = "auto"
            notes.append("-ngl auto: kvcalc puts the most layers that fit each GPU; llama.cpp's --fit chooses "
                         "its own (src/llama.cpp llama_params_fit)")  # fmt: skip
        elif layers <= -2:
            notes.append("-ngl all: every layer on the GPUs, as kvcalc assumes without --gpu-layers")
        else:
            settings["gpu_layers"] = layers
    if "tensor_split" in values:
        settings["tensor_split"] = values["tensor_split"]
    if values.get("kv_offload") is False:
        settings["no_kv_offload"] = True
    mode = values.get("split_mode")
    if mode is not None and mode != "layer":
        warnings.append(f"{program} -sm {mode}: llama.cpp places the weights and cache by its {mode} split; kvcalc "
                        "models -sm layer (the default); kvcalc does not model it")  # fmt: skip
    if values.get("flash_attn") == "off":
        warnings.append(f"{program} -fa off: without flash attention the compute buffer holds the KQ scores; "
                        "kvcalc's assumes flash attention; kvcalc does not model it")  # fmt: skip


READERS = (
    LlamaServerLine(engine="llama-server", program="llama-server"),
    LlamaServerLine(engine="llama.cpp", program="llama-server"),
    LlamaCliLine(engine="llama.cpp", program="llama-cli"),
)
