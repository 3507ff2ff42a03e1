"""Measure a real KV cache with PyTorch (and transformers), on CPU or CUDA.

This file stands alone: it imports nothing from kvcalc, only the standard library, torch and
(for the model probe) transformers, so it can be copied to a GPU machine and run there::

    python probe.py request.json            # or: python -m kvcalc.probe < request.json

It reads a JSON request and prints a JSON result. ``kvcalc probe`` writes the request, runs the
same code in-process, and sets the result beside its estimate.

Request keys: ``mode`` ("model" or "raw"), ``device`` ("auto", "cpu", "cuda"), ``dtype``
("float32", "bfloat16", "float16"), ``seed``, ``max_bytes`` (refuse to allocate more).
Model mode: ``config`` (a Hugging Face config.json object), ``prompt_tokens``, ``decode_tokens``,
``batch``. Raw mode: ``tensors``, a list of ``{"name", "shape", "count"}`` to allocate.
No code from a model repo is ever run: configs are built through transformers' own classes.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

# Sizes the shrunk model keeps small; attention geometry (heads, KV heads, head dims, MLA and
# linear-attention dims, windows, chunks) is never touched.
_SMALL = {
    "vocab_size": 256,
    "intermediate_size": 64,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "intermediate_size_mlp": 64,
    "ffn_hidden_size": 64,
    "n_inner": 64,
}
_EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts")
_TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")
_DROP = ("quantization_config", "auto_map", "_name_or_path", "architectures")


class ProbeError(Exception):
    """A request the probe cannot run; the message is one line for the user."""


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ProbeError("the probe needs PyTorch: pip install 'kvcalc[probe]'") from None
    return torch


def _dtype(torch: Any, name: str) -> Any:
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if name not in table:
        raise ProbeError(f"the probe runs models in float32, bfloat16 or float16, not {name}")
    return table[name]


def _device(torch: Any, name: str) -> Any:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ProbeError("--device cuda was asked for but torch sees no CUDA device")
    if name not in ("cpu", "cuda"):
        raise ProbeError(f"unknown device {name!r}: choose auto, cpu or cuda")
    return torch.device(name)


def _free_bytes(torch: Any, device: Any) -> int:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        import psutil
    except ImportError:
        return 2**62  # cannot tell: do not refuse
    return int(psutil.virtual_memory().available)


def _guard(torch: Any, device: Any, needed: int, limit: int | None) -> None:
    free = _free_bytes(torch, device)
    ceiling = min(free * 8 // 10, limit) if limit else free * 8 // 10
    if needed > ceiling:
        raise ProbeError(
            f"the probe would allocate about {needed:,} bytes but only {ceiling:,} are safe to use on "
            f"{device.type}: try smaller --tokens or --batch"
        )


# --- model probe ---------------------------------------------------------------------------------


def _layer_kinds(text: Any) -> list[str]:
    """Each layer's kind as transformers derives it."""
    count = int(text.num_hidden_layers)
    kinds = getattr(text, "layer_types", None)
    if kinds:
        return [str(k) for k in kinds]
    blocks = getattr(text, "layers_block_type", None)  # Jamba-style hybrids
    if blocks:
        return [str(k) for k in blocks]
    return ["full_attention"] * count


def shrink_config(config: dict[str, Any], positions: int = 0) -> tuple[Any, list[int], list[str]]:
    """The text model's config, shrunk to one layer of each kind; the kept layer indices and every
    layer's kind in the full model."""
    try:
        from transformers import AutoConfig
    except ImportError:
        raise ProbeError("the model probe needs transformers: pip install 'kvcalc[probe]'") from None
    raw = {k: v for k, v in config.items() if k not in _DROP}
    model_type = raw.pop("model_type", None)
    if not isinstance(model_type, str):
        raise ProbeError("the config has no model_type")
    try:
        full = AutoConfig.for_model(model_type, **raw)
    except (ValueError, KeyError, TypeError) as exc:
        reason = str(exc).split(". Should contain")[0].splitlines()[0][:200]
        raise ProbeError(f"transformers cannot build a {model_type} config: {reason}") from None
    text = full.get_text_config(decoder=True)
    if getattr(text, "is_encoder_decoder", False):
        raise ProbeError("the probe measures decoder-only language models")
    layers = int(text.num_hidden_layers)
    kinds = _layer_kinds(text)
    keep: list[int] = []
    for index, kind in enumerate(kinds):
        if kind not in {kinds[i] for i in keep}:
            keep.append(index)
    shared = int(getattr(text, "num_kv_shared_layers", 0) or 0)
    if shared:
        raise ProbeError("the probe does not shrink KV-sharing models (num_kv_shared_layers)")

    data = text.to_dict()
    for key, value in list(data.items()):
        # Per-layer lists (layer_types, no_rope_layers, ...) follow the kept layers.
        if isinstance(value, list) and len(value) == layers and key not in ("eos_token_id",):
            data[key] = [value[i] for i in keep]
    data["num_hidden_layers"] = len(keep)
    if "attn_layer_period" in data and "attn_layer_offset" in data:
        # Jamba: rebuild the mamba/attention pattern for the kept layers (one of each kind).
        attention = [i for i, k in enumerate(kinds[j] for j in keep) if k in ("attention", "full_attention")]
        data["attn_layer_period"] = len(keep)
        data["attn_layer_offset"] = attention[0] if attention else len(keep)
        data["expert_layer_period"] = len(keep)
        data["expert_layer_offset"] = 0
    pure_mamba = "state_size" in data and "expand" in data  # MambaConfig: intermediate_size is the SSM width
    for key, value in _SMALL.items():
        if key == "intermediate_size" and pure_mamba:
            continue
        # None often means "derived from the width" (Falcon's ffn_hidden_size = 4 x hidden): pin it.
        if (isinstance(data.get(key), int) and data[key] > value) or (key in data and data[key] is None):
            data[key] = value
    for key in _EXPERT_COUNTS:
        if isinstance(data.get(key), int) and data[key] > 4:
            data[key] = 4
    for key in ("num_experts_per_tok", "experts_per_token"):
        if isinstance(data.get(key), int):
            data[key] = min(data[key], 2)
    for key in ("n_group", "topk_group"):
        if isinstance(data.get(key), int):
            data[key] = 1
    if isinstance(data.get("first_k_dense_replace"), int):
        data["first_k_dense_replace"] = len(keep)  # dense MLPs: experts do not shape the cache
    if "num_experts_per_tok" in data and data["num_experts_per_tok"] is None:
        data["num_experts_per_tok"] = 1
    if isinstance(data.get("kv_lora_rank"), int) and isinstance(data.get("num_attention_heads"), int):
        # An MLA layer caches one latent whatever its head count, but transformers decompresses
        # the whole latent for every head at every step: fewer heads keep the probe fast.
        data["num_attention_heads"] = min(data["num_attention_heads"], 8)
        data["num_key_value_heads"] = data["num_attention_heads"]
    mamba = any(k.startswith("mamba") or k in ("expand", "state_size") for k in data)
    explicit_heads = isinstance(data.get("head_dim"), int) or isinstance(data.get("kv_lora_rank"), int)
    heads = data.get("num_attention_heads")
    if not mamba and explicit_heads and isinstance(data.get("hidden_size"), int) and isinstance(heads, int):
        # Head dims are explicit, so the width is free; some configs still want it a multiple of heads.
        data["hidden_size"] = min(data["hidden_size"], heads * max(2, 256 // heads))
    vocab = data.get("vocab_size", _SMALL["vocab_size"])
    for key in _TOKEN_IDS:
        value = data.get(key)
        if isinstance(value, list):
            data[key] = [v for v in value if isinstance(v, int) and v < vocab] or None
        elif isinstance(value, int) and value >= vocab:
            data[key] = None
    for key in ("max_position_embeddings", "n_positions", "n_ctx"):
        # Learned position tables must reach the probe's length; positions do not shape the cache.
        if isinstance(data.get(key), int) and data[key] < positions:
            data[key] = positions
    data.pop("model_type", None)
    for key in _DROP:
        data.pop(key, None)
    try:
        small = AutoConfig.for_model(text.model_type, **data)
    except (ValueError, KeyError, TypeError) as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise ProbeError(f"transformers refused the shrunk {text.model_type} config: {reason}") from None
    return small, keep, kinds


def _tensors(obj: Any, torch: Any, prefix: str, out: list[tuple[str, Any]], depth: int = 0) -> None:
    if depth > 4:
        return
    if torch.is_tensor(obj):
        out.append((prefix, obj))
    elif isinstance(obj, dict):
        for key, value in obj.items():
            _tensors(value, torch, f"{prefix}.{key}", out, depth + 1)
    elif isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            _tensors(value, torch, f"{prefix}[{i}]", out, depth + 1)


def _layer_bytes(layer: Any, torch: Any) -> dict[str, Any]:
    """Bytes of every tensor a cache layer holds (each tensor once), and of their storages."""
    found: list[tuple[str, Any]] = []
    for name, value in vars(layer).items():
        if name.startswith("_"):
            continue  # bookkeeping scalars (window lengths as tensors and the like)
        _tensors(value, torch, name, found)
    seen: set[tuple[int, tuple[int, ...], tuple[int, ...]]] = set()
    storages: dict[int, int] = {}
    tensors = []
    total = 0
    for name, tensor in found:
        if tensor.dim() == 0:
            continue
        key = (tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()))
        if key in seen:
            continue
        seen.add(key)
        size = tensor.numel() * tensor.element_size()
        total += size
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        tensors.append({"name": name, "shape": list(tensor.shape), "dtype": str(tensor.dtype).replace("torch.", "")})
    return {"tensor_bytes": total, "storage_bytes": sum(storages.values()), "tensors": tensors}


def probe_model(request: dict[str, Any]) -> dict[str, Any]:
    torch = _torch()
    try:
        import transformers
        from transformers import AutoModelForCausalLM
    except ImportError:
        raise ProbeError("the model probe needs transformers: pip install 'kvcalc[probe]'") from None
    import warnings

    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning)
    device = _device(torch, request.get("device", "auto"))
    dtype = _dtype(torch, request.get("dtype", "float32"))
    substituted = None
    if device.type == "cpu" and dtype == torch.float16:
        # CPU float16 matmuls are slow reference kernels; bfloat16 stores the same 2 bytes per
        # element, so the cache it measures has the same size.
        dtype, substituted = torch.bfloat16, "float16 ran as bfloat16 on CPU (same 2-byte elements, faster kernels)"
    prompt = int(request["prompt_tokens"])
    decode = int(request.get("decode_tokens", 1))
    batch = int(request.get("batch", 1))
    if prompt < 1 or decode < 0 or batch < 1:
        raise ProbeError("the probe needs at least one prompt token and one sequence")
    torch.manual_seed(int(request.get("seed", 0)))
    config, keep, kinds = shrink_config(request["config"], positions=prompt + decode)
    _guard(torch, device, int(request.get("expected_bytes", 0)) * 2, request.get("max_bytes"))

    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=dtype)
    model.eval()
    vocab = int(config.vocab_size)
    heads = int(getattr(config, "num_attention_heads", 1) or 1)
    # Prefill in chunks so eager attention's score matrix (heads x chunk x T floats) stays small.
    chunk = max(1, min(prompt, (32 * 2**20) // max(1, heads * (prompt + decode) * 4 * batch)))
    is_cuda = device.type == "cuda"
    if is_cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    cache = None
    start = time.perf_counter()
    with torch.no_grad():
        for begin in range(0, prompt, chunk):
            ids = torch.randint(0, vocab, (batch, min(chunk, prompt - begin)), device=device)
            out = model(input_ids=ids, past_key_values=cache, use_cache=True)
            cache = out.past_key_values
        if is_cuda:
            torch.cuda.synchronize(device)
            prefill_peak = torch.cuda.max_memory_allocated(device) - base
        prefill_seconds = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(decode):
            ids = torch.randint(0, vocab, (batch, 1), device=device)
            out = model(input_ids=ids, past_key_values=cache, use_cache=True)
            cache = out.past_key_values
        if is_cuda:
            torch.cuda.synchronize(device)
        decode_seconds = time.perf_counter() - start

    assert cache is not None
    layers = []
    for index, layer in zip(keep, cache.layers, strict=True):
        measured = _layer_bytes(layer, torch)
        layers.append({"index": index, "kind": kinds[index], "class": type(layer).__name__, **measured})
    peak: dict[str, Any]
    if is_cuda:
        peak = {
            "kind": "cuda max_memory_allocated minus the model",
            "prefill_bytes": int(prefill_peak),
            "decode_bytes": int(torch.cuda.max_memory_allocated(device) - base),
        }
    else:
        # CPU has no allocator statistics: growing a layer by torch.cat holds the old and the new
        # tensor at once, so the largest transient is the biggest single cache tensor.
        biggest = 0
        for layer in cache.layers:
            found: list[tuple[str, Any]] = []
            _tensors({k: v for k, v in vars(layer).items() if not k.startswith("_")}, torch, "", found)
            for _name, tensor in found:
                biggest = max(biggest, tensor.numel() * tensor.element_size())
        peak = {"kind": "cpu: largest single cache tensor (torch.cat transient)", "transient_bytes": biggest}
    result = {
        "mode": "model",
        "device": str(device),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "dtype": str(dtype).replace("torch.", ""),
        "model_type": config.model_type,
        "batch": batch,
        "prompt_tokens": prompt,
        "decode_tokens": decode,
        "prefill_chunk": chunk,
        "layer_kinds": kinds,
        "layers": layers,
        "peak": peak,
        "prefill_seconds": prefill_seconds,
        "decode_seconds_per_token": decode_seconds / decode if decode else None,
        "timing_note": "timings of the shrunk model (one layer of each kind, tiny MLPs), not of the real one",
        "notes": [substituted] if substituted else [],
    }
    del model, cache, out
    if is_cuda:
        torch.cuda.empty_cache()
    return result


# --- raw probe -------------------------------------------------------------------------------------


def probe_raw(request: dict[str, Any]) -> dict[str, Any]:
    """Allocate the tensors the estimate describes and read what the allocator says."""
    torch = _torch()
    device = _device(torch, request.get("device", "auto"))
    name = request.get("dtype", "uint8")
    dtype = torch.uint8 if name == "uint8" else _dtype(torch, name)
    specs = request["tensors"]
    itemsize = torch.tensor([], dtype=dtype).element_size()
    needed = 0
    for spec in specs:
        numel = 1
        for d in spec["shape"]:
            numel *= int(d)
        needed += numel * itemsize * int(spec.get("count", 1))
    _guard(torch, device, needed, request.get("max_bytes"))
    is_cuda = device.type == "cuda"
    if is_cuda:
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        before_requested = torch.cuda.memory_stats(device).get("requested_bytes.all.current", 0)
        before_reserved = torch.cuda.memory_reserved(device)
    held = []
    tensor_bytes = 0
    for spec in specs:
        for _ in range(int(spec.get("count", 1))):
            tensor = torch.empty(tuple(int(d) for d in spec["shape"]), dtype=dtype, device=device)
            tensor_bytes += tensor.numel() * tensor.element_size()
            held.append(tensor)
    result: dict[str, Any] = {
        "mode": "raw",
        "device": str(device),
        "torch": torch.__version__,
        "dtype": str(dtype).replace("torch.", ""),
        "tensors": len(held),
        "tensor_bytes": tensor_bytes,
    }
    if is_cuda:
        torch.cuda.synchronize(device)
        stats = torch.cuda.memory_stats(device)
        result |= {
            "allocated_bytes": torch.cuda.memory_allocated(device) - before,
            "requested_bytes": stats.get("requested_bytes.all.current", 0) - before_requested,
            "reserved_bytes": torch.cuda.memory_reserved(device) - before_reserved,
        }
    del held
    if is_cuda:
        torch.cuda.empty_cache()
    return result


def run(request: dict[str, Any]) -> dict[str, Any]:
    mode = request.get("mode", "model")
    if mode == "model":
        return probe_model(request)
    if mode == "raw":
        return probe_raw(request)
    raise ProbeError(f"unknown probe mode {mode!r}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        text = open(args[0], encoding="utf-8").read() if args else sys.stdin.read()  # noqa: SIM115
        request = json.loads(text)
        print(json.dumps(run(request), indent=2))
    except (ProbeError, OSError, ValueError, KeyError) as exc:
        print(f"probe: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
