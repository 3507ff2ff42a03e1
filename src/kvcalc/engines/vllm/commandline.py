"""``vllm serve`` (and ``python -m vllm.entrypoints.openai.api_server``) read and written: the flags
of vLLM 0.33's ``vllm/engine/arg_utils.py`` (EngineArgs.add_cli_args) and
``vllm/entrypoints/openai/cli_args.py``, by what they do to memory."""

from __future__ import annotations

import re

from kvcalc.engines.commandline import Arg, CommandLine, Reading, Settings, knob_args, plain_float, plain_int, quiet
from kvcalc.engines.vllm import VLLMOptions
from kvcalc.errors import UsageError

SOURCE = "vLLM 0.33 vllm/engine/arg_utils.py, vllm/entrypoints/openai/cli_args.py"

_HUMAN = re.compile(r"^(\d+(?:\.\d+)?)([kKmMgGtT]?)$")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_readable_int(text: str) -> int:
    """vLLM's ``human_readable_int`` (vllm/engine/arg_utils.py): 25.6k = 25,600 (lowercase:
    decimal), 32K = 32,768 (uppercase: binary); a fraction only with a decimal suffix."""
    found = _HUMAN.match(text.strip())
    if found is None:
        raise ValueError(text)
    number, suffix = found.groups()
    if not suffix:
        return int(number)
    if suffix in _BINARY:
        if "." in number:
            raise UsageError(f"a binary suffix takes a whole number, got {text!r}")
        return int(number) * _BINARY[suffix]
    whole, _, fraction = number.partition(".")
    scale = _DECIMAL[suffix]
    return int(whole) * scale + (int(fraction) * scale // 10 ** len(fraction) if fraction else 0)


# vLLM's --kv-cache-dtype (CacheDType, vllm/config/cache.py) as kvcalc's formats.
_KV_DTYPES = {"auto": "auto", "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "fp8": "fp8",
              "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "fp8_inc": "fp8"}  # fmt: skip


def kv_cache_dtype(text: str) -> str:
    found = _KV_DTYPES.get(text)
    if found is None:
        raise UsageError(f"choose from {', '.join(_KV_DTYPES)}")
    return found


ARGS: tuple[Arg, ...] = (
    *knob_args(VLLMOptions, human_readable_int),
    Arg(("--max-model-len",), "tokens", parse=human_readable_int),
    Arg(("-tp", "--tensor-parallel-size"), "tp", parse=plain_int),
    Arg(("-pp", "--pipeline-parallel-size"), "pp", parse=plain_int),
    Arg(("-dp", "--data-parallel-size"), "dp", parse=plain_int),
    Arg(("--gpu-memory-utilization",), "utilization", parse=plain_float),
    Arg(("--kv-cache-memory-bytes",), "kv_budget", parse=human_readable_int),
    Arg(("--kv-cache-dtype",), "kv_dtype", parse=kv_cache_dtype),
    Arg(("--model",), "model"),
    Arg(("--config",), "config"),
    quiet("--host"),
    quiet("--port", "-p"),
    quiet("--served-model-name"),
    quiet("--trust-remote-code", takes="flag", negatable=True),
)


class VllmServe(CommandLine):
    """``vllm serve MODEL``: --max-model-len is both the context kvcalc sizes (--tokens) and the
    longest request fit considers (--max-model-len)."""

    def interpret(self, reading: Reading) -> Settings:
        settings = super().interpret(reading)
        if "tokens" in settings:
            settings["max_model_len"] = settings["tokens"]
        return settings


PROGRAMS = (("vllm", "serve"), ("python", "-m", "vllm.entrypoints.openai.api_server"))
READERS = (VllmServe(engine="vllm", programs=PROGRAMS, args=ARGS, source=SOURCE, positional="model"),)
