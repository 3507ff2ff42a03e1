"""Start the real vLLM on a tiny random-weight model and report the KV cache it built.

This file stands alone: it imports only the standard library, and vLLM and transformers from
the Python it runs in, so it runs in vLLM's own environment (vLLM pins its own torch)::

    /path/to/vllm-venv/bin/python vllm_probe.py request.json    # or: ... vllm_probe.py < request.json

It reads a JSON request, saves a random-weight transformers model of the config's attention
geometry (every layer kept, since vLLM groups layers by count; vocabulary, MLP and expert sizes
shrunk, as they size no cache), starts ``vllm.LLM`` in this process with the request's
``max_model_len``, ``block_size``, ``max_num_batched_tokens`` and a fixed ``kv_cache_memory_bytes``,
and prints one JSON object: the KV cache config the engine core built (``num_blocks``, each group's
spec, block size and page bytes, the tensors), the scheduler settings it resolved, and the
capacity it logged ("KV cache size: N tokens", "Maximum concurrency ... Xx"). ``kvcalc probe
--engine vllm`` writes the request, runs this file with vLLM's Python under a time limit, and
compares the result with ``kvcalc fit --engine vllm`` for the same budget.

Request keys: ``config`` (a Hugging Face config.json object), ``max_model_len``,
``kv_cache_memory_bytes``, ``block_size`` (null: vLLM's default), ``max_num_batched_tokens`` (null:
vLLM's default), ``dtype`` ("auto", "bfloat16", "float16", "float32"), ``device`` ("auto", "cpu",
"cuda"; informational: vLLM runs on the platform it was built for), ``seed``. A bad request or a
failed start is one ``vllm_probe: error:`` line on stderr and exit status 2.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# Sizes that shape no KV cache, kept small so the random model is quick to save and load.
_SMALL = {
    "vocab_size": 512,
    "intermediate_size": 64,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "ffn_hidden_size": 64,
}
_EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts")
_DROP = ("quantization_config", "auto_map", "_name_or_path", "architectures", "transformers_version")
_TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id")
_DTYPES = ("auto", "bfloat16", "float16", "float32")
_MAX_TOKENS = 2**24
_MAX_BYTES = 2**44

# vLLM's capacity log: one line from 0.25 ("CPU KV cache size: N tokens, Maximum concurrency for M
# tokens per request: X.XXx"), two lines before ("GPU KV cache size: N tokens" and "Maximum
# concurrency for M tokens per request: X.XXx").
_SIZE_LINE = re.compile(r"(\w+) KV cache size: ([\d,]+) tokens")
_CONCURRENCY_LINE = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")


class ProbeError(Exception):
    """A request the probe cannot run; the message is one line for the user."""


def _one_line(text: object, limit: int = 300) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    line = "".join(ch if ch.isprintable() else "?" for ch in (lines[-1] if lines else ""))
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _count(request: dict[str, Any], key: str, low: int, high: int, *, optional: bool = False) -> int | None:
    value = request.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ProbeError(f"request key {key!r} must be a whole number from {low} to {high}, got {value!r}")
    return value


def check_request(request: Any) -> dict[str, Any]:
    """The request with every key checked before anything is built."""
    if not isinstance(request, dict):
        raise ProbeError("the request must be a JSON object")
    config = request.get("config")
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise ProbeError("request key 'config' must be a config.json object with a model_type")
    dtype = request.get("dtype", "auto")
    if dtype not in _DTYPES:
        raise ProbeError(f"request key 'dtype' must be one of {', '.join(_DTYPES)}, got {dtype!r}")
    return {
        "config": config,
        "max_model_len": _count(request, "max_model_len", 1, _MAX_TOKENS),
        "kv_cache_memory_bytes": _count(request, "kv_cache_memory_bytes", 1, _MAX_BYTES),
        "block_size": _count(request, "block_size", 1, 4096, optional=True),
        "max_num_batched_tokens": _count(request, "max_num_batched_tokens", 1, _MAX_TOKENS, optional=True),
        "dtype": dtype,
        "seed": _count(request, "seed", 0, 2**31, optional=True) or 0,
    }


def shrink(config: dict[str, Any]) -> dict[str, Any]:
    """The config with its cache-free sizes shrunk; layer counts, kinds, heads, head dims and
    windows untouched (vLLM's block and page arithmetic depends on every one of them)."""
    data = {k: v for k, v in config.items() if k not in _DROP}
    text = data.get("text_config")
    if isinstance(text, dict):
        raise ProbeError("the vLLM probe runs text-only language models (the config has a text_config)")
    for key, small in _SMALL.items():
        if isinstance(data.get(key), int) and data[key] > small:
            data[key] = small
    for key in _EXPERT_COUNTS:
        if isinstance(data.get(key), int) and data[key] > 4:
            data[key] = 4
    for key in ("num_experts_per_tok", "experts_per_token"):
        if isinstance(data.get(key), int):
            data[key] = min(data[key], 2)
    for key in ("n_group", "topk_group"):
        if isinstance(data.get(key), int):
            data[key] = 1
    vocab = data.get("vocab_size", _SMALL["vocab_size"])
    for key in _TOKEN_IDS:
        if isinstance(data.get(key), int) and data[key] >= vocab:
            data[key] = vocab - 1
        elif isinstance(data.get(key), list):
            data[key] = [v for v in data[key] if isinstance(v, int) and v < vocab] or vocab - 1
    return data


def save_model(config: dict[str, Any], folder: str, seed: int) -> str:
    """Save a random-weight model of ``config`` (shrunk) with transformers; its model_type."""
    import torch
    from transformers import AutoConfig

    auto_model: Any = importlib.import_module("transformers").AutoModelForCausalLM

    data = shrink(config)
    model_type = data.pop("model_type")
    dtype_name = data.pop("torch_dtype", None) or data.pop("dtype", None) or "bfloat16"
    try:
        built = AutoConfig.for_model(model_type, **data)
    except Exception as exc:  # ValueError, KeyError: the config is not one transformers can build
        raise ProbeError(f"transformers cannot build a {model_type} config: {_one_line(exc)}") from None
    torch.manual_seed(seed)
    dtype = getattr(torch, str(dtype_name), torch.bfloat16)
    model = auto_model.from_config(built, torch_dtype=dtype)
    model.save_pretrained(folder, safe_serialization=True)
    return str(model_type)


@contextmanager
def _captured_output() -> Iterator[list[str]]:
    """Everything written to file descriptors 1 and 2 meanwhile (vLLM's log, wherever its logging
    config sends it, and its worker's C++ messages), passed on to stderr afterwards; the list holds
    the text once the block ends."""
    text: list[str] = []
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 1)
        os.dup2(capture.fileno(), 2)
        try:
            yield text
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            capture.seek(0)
            text.append(capture.read().decode("utf-8", "replace"))
            sys.stderr.write(text[0])


def _spec(spec: Any) -> dict[str, Any]:
    """One KVCacheSpec as JSON: its class, block size, page bytes and window or chunk."""
    out: dict[str, Any] = {
        "type": type(spec).__name__,
        "block_size": int(spec.block_size),
        "page_size_bytes": int(spec.page_size_bytes),
    }
    for key in ("sliding_window", "attention_chunk_size", "num_kv_heads", "head_size"):
        value = getattr(spec, key, None)
        if isinstance(value, int):
            out[key] = value
    dtype = getattr(spec, "dtype", None)
    if dtype is not None:
        out["dtype"] = str(dtype).removeprefix("torch.")
    return out


def _capacity(lines: list[str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for line in lines:
        size = _SIZE_LINE.search(line)
        if size:
            found["logged_device"] = size.group(1)
            found["logged_tokens"] = int(size.group(2).replace(",", ""))
        concurrency = _CONCURRENCY_LINE.search(line)
        if concurrency:
            found["logged_max_model_len"] = int(concurrency.group(1).replace(",", ""))
            found["logged_concurrency"] = float(concurrency.group(2))
    return found


def _cpu_amx() -> bool:
    """Whether this is an x86 CPU with AMX tiles, as vllm/platforms/cpu.py asks it."""
    import platform

    import torch

    return platform.machine().lower() in ("x86_64", "amd64") and bool(torch.cpu._is_amx_tile_supported())


def start_engine(req: dict[str, Any], folder: str) -> dict[str, Any]:
    """Start vLLM in this process on the saved model and read what it built."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process
    vllm: Any = importlib.import_module("vllm")  # vLLM's own environment, not kvcalc's

    kwargs: dict[str, Any] = {
        "model": folder,
        "max_model_len": req["max_model_len"],
        "kv_cache_memory_bytes": req["kv_cache_memory_bytes"],
        "skip_tokenizer_init": True,
        "enforce_eager": True,
        "seed": req["seed"],
        "dtype": req["dtype"],
    }
    if req["block_size"] is not None:
        kwargs["block_size"] = req["block_size"]
    if req["max_num_batched_tokens"] is not None:
        kwargs["max_num_batched_tokens"] = req["max_num_batched_tokens"]
    with _captured_output() as output:
        llm = vllm.LLM(**kwargs)
    lines = [line for line in output[0].splitlines() if "KV cache size" in line or "Maximum concurrency" in line]
    engine = llm.llm_engine
    core = engine.engine_core.engine_core  # InprocClient -> EngineCore
    kv = core.scheduler.kv_cache_config
    config = engine.vllm_config
    result = {
        "vllm_version": vllm.__version__,
        "device": str(getattr(config.device_config, "device_type", "")),
        # vllm/platforms/cpu.py picks its AMX backends (other MLA blocks) on such a CPU.
        "cpu_amx": _cpu_amx(),
        "num_blocks": int(kv.num_blocks),
        "groups": [{"layers": len(g.layer_names), **_spec(g.kv_cache_spec)} for g in kv.kv_cache_groups],
        "tensor_bytes": sum(int(t.size) for t in kv.kv_cache_tensors),
        "block_size": int(config.cache_config.block_size),
        "max_num_batched_tokens": int(config.scheduler_config.max_num_batched_tokens),
        "max_model_len": int(config.model_config.max_model_len),
        "async_scheduling": bool(config.scheduler_config.async_scheduling),
        "max_concurrent_batches": int(getattr(config, "max_concurrent_batches", 1)),
        "kv_cache_size_tokens": getattr(config.cache_config, "kv_cache_size_tokens", None),
        "kv_cache_max_concurrency": getattr(config.cache_config, "kv_cache_max_concurrency", None),
        "model_dtype": str(config.model_config.dtype).removeprefix("torch."),
        "log_lines": [_one_line(line) for line in lines],
        **_capacity(lines),
    }
    return result


def run(request: Any) -> dict[str, Any]:
    req = check_request(request)
    with tempfile.TemporaryDirectory(prefix="kvcalc-vllm-") as folder:
        model_type = save_model(req["config"], folder, req["seed"])
        result = start_engine(req, folder)
    result["model_type"] = model_type
    return result


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        if args and args[0] != "-":
            with open(args[0]) as file:
                text = file.read()
        else:
            text = sys.stdin.read()
        try:
            request = json.loads(text)
        except ValueError as exc:
            raise ProbeError(f"the request is not JSON: {_one_line(exc)}") from None
        result = run(request)
    except ProbeError as exc:
        print(f"vllm_probe: error: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        print(f"vllm_probe: error: {_one_line(exc)} (run this file with vLLM's Python)", file=sys.stderr)
        return 2
    except Exception as exc:  # vLLM refused the model or the settings: its own reason, one line
        if os.environ.get("KVCALC_DEBUG") == "1":
            raise
        print(f"vllm_probe: error: vLLM failed: {type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
