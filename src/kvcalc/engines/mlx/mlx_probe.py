"""Measure mlx-lm's own KV cache: build a random-weight model of a config, load it back the way
``mlx_lm.load`` does, run ``mlx_lm.generate.generate_step`` (prefill + decode) and print every
layer's cache bytes as JSON.

A standalone file: it runs with the Python of the environment that has mlx and mlx-lm (``pip
install "mlx[cpu]==0.32.4" mlx-lm==0.32.2`` on Linux; on a Mac ``mlx-lm`` alone), reads one JSON
request on stdin and prints one JSON line. kvcalc is not imported here.

Request (or ``{"cases": [request, ...]}``, answered as ``{"results": [...]}``): ``config`` (the
model's config.json; ``shrink``, default true, makes it tiny here and ``window`` shortens its
windows), ``tokens`` (the prompt length), ``decode`` (tokens generated after it), ``batch`` (1: one
sequence, as mlx_lm.generate runs), and mlx-lm's own knobs: ``max_kv_size``,
``prefill_step_size``, ``kv_bits``, ``kv_group_size``, ``quantized_kv_start``.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

_NAME = "mlx_probe"
_MAX_TOKENS = 1 << 20
# Sizes no cache depends on, shrunk so a tiny model builds and runs in seconds on a CPU.
_SMALL = {
    "vocab_size": 256,
    "intermediate_size": 64,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "ffn_hidden_size": 64,
    "expert_intermediate_size": 32,
}
_EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts")
_TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id")
_DROP = ("quantization_config", "quantization", "auto_map", "_name_or_path", "transformers_version")
_LAYERS = 8
_HIDDEN = 256


class ProbeError(Exception):
    """A request this probe refuses, or a model mlx-lm cannot build: one line."""


def _count(request: dict[str, Any], key: str, low: int, high: int, *, optional: bool = False) -> int | None:
    value = request.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ProbeError(f"{key} must be an integer in [{low}, {high}], got {value!r}")
    return value


def parse(request: Any) -> dict[str, Any]:
    if not isinstance(request, dict) or not isinstance(request.get("config"), dict):
        raise ProbeError("the request is a JSON object with a config object")
    return {
        "config": request["config"],
        "tokens": _count(request, "tokens", 1, _MAX_TOKENS),
        "decode": _count(request, "decode", 0, _MAX_TOKENS),
        "batch": _count(request, "batch", 1, 1),
        "max_kv_size": _count(request, "max_kv_size", 1, _MAX_TOKENS, optional=True),
        "prefill_step_size": _count(request, "prefill_step_size", 1, _MAX_TOKENS, optional=True),
        "kv_bits": _count(request, "kv_bits", 2, 8, optional=True),
        "kv_group_size": _count(request, "kv_group_size", 16, 256, optional=True),
        "quantized_kv_start": _count(request, "quantized_kv_start", 0, _MAX_TOKENS, optional=True),
        "seed": _count(request, "seed", 0, 2**31, optional=True) or 0,
        "window": _count(request, "window", 2, _MAX_TOKENS, optional=True),
        "shrink": bool(request.get("shrink", True)),
    }


def shrink(config: dict[str, Any], fields: set[str], window: int | None) -> dict[str, Any]:
    """The config as a tiny model: at most 8 layers (per-layer lists and patterns cut to match), a
    small vocabulary, MLP and expert count, and a hidden size of at most 256 where the model reads
    its head_dim from the config (so the heads and head dims, which size the cache, stay as they
    are). ``window``: sliding windows and attention chunks set to that many tokens, so short runs
    cross them. kvcalc estimates exactly this config."""
    data = {k: v for k, v in config.items() if k not in _DROP}
    text = data.get("text_config")
    if isinstance(text, dict):
        data["text_config"] = shrink(text, fields, window)
    layers = data.get("num_hidden_layers")
    if isinstance(layers, int) and layers > _LAYERS:
        keep = _LAYERS
        kinds = data.get("layer_types")
        if isinstance(kinds, list) and len(kinds) == layers:
            # End on the kind the model ends on (Gemma 4's last layer is a full one; transformers
            # makes it so whatever the list says, mlx-lm follows the list).
            keep = max((n for n in range(2, _LAYERS + 1) if kinds[n - 1] == kinds[-1]), default=_LAYERS)
        data["num_hidden_layers"] = keep
        _cut_lists(data, layers, keep)
        for key in ("full_attn_idxs", "attn_layer_indices"):
            if isinstance(data.get(key), list):
                data[key] = [i for i in data[key] if isinstance(i, int) and i < keep]
        for value in data.values():
            if isinstance(value, dict):  # Kimi-Linear's linear_attn_config: layer numbers from 1
                _cut_lists(value, layers, keep)
                for key, numbers in value.items():
                    if "layers" in key and isinstance(numbers, list) and all(isinstance(i, int) for i in numbers):
                        last = keep - 1 if 0 in numbers else keep
                        value[key] = [i for i in numbers if i <= last]
    for key, small in _SMALL.items():
        if isinstance(data.get(key), int) and data[key] > small:
            data[key] = small
    for key in _EXPERT_COUNTS:
        if isinstance(data.get(key), int) and data[key] > 4:
            data[key] = 4
    for key in ("num_experts_per_tok", "experts_per_token", "num_experts_per_token", "moe_topk"):
        if isinstance(data.get(key), int):
            data[key] = min(data[key], 2)
    for key in ("n_group", "topk_group"):
        if isinstance(data.get(key), int):
            data[key] = 1
    hidden, heads = data.get("hidden_size"), data.get("num_attention_heads")
    kv_heads = data.get("num_key_value_heads", heads)
    # A Mamba block's width is expand x hidden_size, tied to its head counts: such a hidden size stays.
    tied = any(key in data for key in ("mamba_expand", "expand"))
    if isinstance(hidden, int) and isinstance(heads, int) and heads and hidden > _HIDDEN and not tied:
        if isinstance(data.get("kv_lora_rank"), int):
            # MLA: the cache is the latent and the rope key (or K/V per head, which kvcalc reads from
            # the same config), so heads and hidden size shrink freely.
            data["hidden_size"] = _HIDDEN
            for key in ("num_attention_heads", "num_key_value_heads", "index_n_heads"):
                if isinstance(data.get(key), int):
                    data[key] = min(data[key], 4)
            if isinstance(data.get("q_lora_rank"), int):
                data["q_lora_rank"] = min(data["q_lora_rank"], 64)
        elif "head_dim" in fields:
            data.setdefault("head_dim", hidden // heads)
            data["hidden_size"] = _HIDDEN
        elif isinstance(kv_heads, int) and kv_heads and hidden % heads == 0 and heads % kv_heads == 0:
            # head_dim = hidden_size // num_attention_heads here: one query head per KV head keeps it.
            data["hidden_size"] = hidden // heads * kv_heads
            data["num_attention_heads"] = kv_heads
            # Widths the model ties to the hidden size (LFM2's block_dim and conv_dim) follow it.
            for key, value in list(data.items()):
                if key != "hidden_size" and value == hidden and not isinstance(value, bool):
                    data[key] = data["hidden_size"]
    if window is not None:
        for key in ("sliding_window", "attention_chunk_size", "attention_window_size"):
            if isinstance(data.get(key), int) and data[key] > window:
                data[key] = window
    vocab = data.get("vocab_size")
    if isinstance(vocab, int):
        for key in _TOKEN_IDS:
            if isinstance(data.get(key), int) and data[key] >= vocab:
                data[key] = vocab - 1
            elif isinstance(data.get(key), list):
                data[key] = [v for v in data[key] if isinstance(v, int) and v < vocab] or vocab - 1
    return data


# Values for fields a model's ModelArgs requires that no cache depends on, where a config (a kvcalc
# preset keeps only the fields that size the cache) leaves them out.
_FILL = {"rms_norm_eps": 1e-6, "layer_norm_eps": 1e-5, "layer_norm_epsilon": 1e-5, "norm_eps": 1e-6,
         "rope_theta": 10000.0, "max_position_embeddings": 1 << 20, "tie_word_embeddings": False,
         "rope_traditional": False, "rope_scaling": None, "attention_bias": False, "mlp_bias": False}  # fmt: skip


def fill_required(config: dict[str, Any], args_class: Any) -> list[str]:
    """Fill in the required ModelArgs fields the config leaves out: ``_FILL``'s, a vocabulary or an
    MLP width, and scalar multipliers (1.0) and flags (False); the names filled."""
    filled = []
    for name, param in inspect.signature(args_class).parameters.items():
        if param.default is not inspect.Parameter.empty or name in config:
            continue
        kind = str(param.annotation)
        if name in _FILL:
            value = _FILL[name]
        elif name == "vocab_size":
            value = _SMALL["vocab_size"]
        elif "intermediate" in name or name.endswith("ff_dim"):
            value = _SMALL["intermediate_size"]
        elif kind in ("float", "<class 'float'>"):
            value = 1.0
        elif kind in ("bool", "<class 'bool'>"):
            value = False
        else:
            continue
        config[name] = value
        filled.append(name)
    return filled


def _cut_lists(data: dict[str, Any], layers: int, keep: int) -> None:
    """Per-layer lists (and pattern strings) of ``layers`` entries cut to the first ``keep``."""
    for key, value in list(data.items()):
        pattern = isinstance(value, str) and key.endswith("pattern")
        if (isinstance(value, list) or pattern) and len(value) == layers:
            data[key] = value[:keep]


def _builds(config: dict[str, Any]) -> bool:
    from mlx_lm import utils

    try:
        utils._get_classes(config)
    except ValueError:
        return False
    return True


def _delegates(model_class: Any) -> bool:
    """Whether the model's make_cache is its language model's."""
    make_cache = getattr(model_class, "make_cache", None)
    return make_cache is not None and "language_model.make_cache" in inspect.getsource(make_cache)


def _has_experts(config: dict[str, Any]) -> bool:
    text = config.get("text_config")
    nested = isinstance(text, dict) and _has_experts(text)
    return nested or any(isinstance(config.get(k), int) and config[k] > 0 for k in _EXPERT_COUNTS)


def _file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _cache_parts(cache: Any) -> list[dict[str, Any]]:
    """Every array a layer's cache object holds, with its class, shape and dtype."""
    import mlx.core as mx

    parts: list[dict[str, Any]] = []

    def walk(owner: str, value: Any) -> None:
        if isinstance(value, mx.array):
            parts.append({"owner": owner, "shape": list(value.shape), "dtype": str(value.dtype).split(".")[-1],
                          "nbytes": int(value.nbytes)})  # fmt: skip
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(owner, item)

    def visit(obj: Any) -> None:
        name = type(obj).__name__
        if hasattr(obj, "caches"):  # CacheList
            for sub in obj.caches:
                visit(sub)
            return
        if hasattr(obj, "cache") and isinstance(obj.cache, list):  # ArraysCache
            walk(name, obj.cache)
            return
        walk(name, getattr(obj, "keys", None))
        walk(name, getattr(obj, "values", None))

    visit(cache)
    return parts


def _classes(cache: Any) -> str:
    if hasattr(cache, "caches"):
        return "+".join(_classes(c) for c in cache.caches)
    return type(cache).__name__


def measure(req: dict[str, Any]) -> dict[str, Any]:
    import mlx.core as mx
    import mlx_lm
    from mlx_lm import utils
    from mlx_lm.generate import generate_step

    config = dict(req["config"])
    mx.random.seed(req["seed"])
    notes: list[str] = []
    try:
        model_class, args_class = utils._get_classes(config)
        text = config.get("text_config")
        if isinstance(text, dict) and text.get("model_type") and _delegates(model_class) and _builds(text):
            # A multimodal wrapper whose make_cache is its language model's: that model alone,
            # with the same cache (no vision tower to build).
            model_class, args_class = utils._get_classes(text)
            notes.append(f"{config['model_type']}'s cache is its language model's: built {text['model_type']} alone")
            config = {**text, "torch_dtype": config.get("torch_dtype") or text.get("torch_dtype") or text.get("dtype")}
    except ValueError as exc:
        raise ProbeError(str(exc)) from None
    fields = set(inspect.signature(args_class).parameters)
    text_args = getattr(importlib.import_module(model_class.__module__), "TextArgs", None)
    if text_args is not None:
        fields |= set(inspect.signature(text_args).parameters)
    if req["shrink"]:
        config = shrink(config, fields, req["window"])
    # Mixture-of-experts layers run only in float32 on MLX's CPU back end (GatherMM).
    name = "float32" if _has_experts(config) else str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    for where in (config, config.get("text_config")):
        if isinstance(where, dict):  # the run dtype, where any reader of the config looks for it
            where["torch_dtype"] = name
            where.pop("dtype", None)
    dtype = getattr(mx, name, mx.bfloat16)
    filled = fill_required(config, args_class)
    if isinstance(config.get("text_config"), dict) and text_args is not None:
        filled += fill_required(config["text_config"], text_args)
    if filled:
        notes.append(f"filled in fields the config leaves out (no cache depends on them): {', '.join(filled)}")
    try:
        model = model_class(args_class.from_dict(config))
    except Exception as exc:  # TypeError for a missing field, ValueError, KeyError from a model's own checks
        raise ProbeError(f"mlx-lm cannot build this {config.get('model_type')} config: {exc}") from None
    model.set_dtype(dtype)
    with tempfile.TemporaryDirectory(prefix="kvcalc-mlx-") as folder:
        # The random model saved and loaded back through mlx-lm's own loader, as mlx_lm.load does.
        Path(folder, "config.json").write_text(json.dumps(config))
        model.save_weights(str(Path(folder, "model.safetensors")))
        try:
            model, _ = utils.load_model(Path(folder))
        except Exception as exc:  # a sanitize() that does not take back its own layout
            notes.append(f"built in memory: mlx_lm.utils.load_model refused the saved weights ({exc})")
    kwargs: dict[str, Any] = {"max_tokens": req["decode"]}
    for key in ("max_kv_size", "prefill_step_size", "kv_bits", "kv_group_size", "quantized_kv_start"):
        if req[key] is not None:
            kwargs[key] = req[key]
    vocab = int(config.get("vocab_size") or 32)
    prompt = [(7 * i + 3) % max(2, vocab - 1) + 1 for i in range(req["tokens"])]
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model, max_kv_size=kwargs.pop("max_kv_size", None))
    for _ in generate_step(mx.array(prompt, dtype=mx.uint32), model, prompt_cache=cache, **kwargs):
        pass
    layers = [{"class": _classes(c), "nbytes": int(c.nbytes), "parts": _cache_parts(c)} for c in cache]
    root = Path(mlx_lm.__file__).parent
    return {
        "mlx_version": getattr(mx, "__version__", "?"),
        "mlx_lm_version": getattr(mlx_lm, "__version__", "?"),
        "device": "gpu" if mx.default_device() == mx.gpu else "cpu",
        "module": model_class.__module__,
        "files": {name: _file_hash(root / name) for name in ("models/cache.py", "generate.py")},
        "dtype": str(dtype).split(".")[-1],
        "config": config,
        "layers": layers,
        "tensor_bytes": sum(layer["nbytes"] for layer in layers),
        "notes": notes,
    }


def measure_all(raw: Any) -> dict[str, Any]:
    """One request, or ``{"cases": [...]}``: every case in this one process (mlx-lm imported once),
    each case's refusal as its ``error``."""
    if isinstance(raw, dict) and isinstance(raw.get("cases"), list):
        results = []
        for case in raw["cases"]:
            try:
                results.append(measure(parse(case)))
            except ProbeError as exc:
                results.append({"error": str(exc)})
            except Exception as exc:  # mlx-lm's own failure for one case: the others still run
                results.append({"error": f"{type(exc).__name__}: {exc}"})
        return {"results": results}
    return measure(parse(raw))


def main() -> int:
    try:
        raw = json.loads(sys.stdin.read())
        result = measure_all(raw)
    except ProbeError as exc:
        print(f"{_NAME}: error: {exc}", file=sys.stderr)
        return 2
    except json.JSONDecodeError as exc:
        print(f"{_NAME}: error: the request is not JSON ({exc})", file=sys.stderr)
        return 2
    except Exception as exc:  # mlx-lm's own failure in its generate loop, as one line
        print(f"{_NAME}: error: mlx-lm failed: {type(exc).__name__}: {exc}".replace("\n", " "), file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
