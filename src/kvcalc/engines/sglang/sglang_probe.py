"""Build SGLang's own KV-cache pools on the CPU for model configs and report what they hold.

This file stands alone: it imports only the standard library, and SGLang, torch and transformers
from the Python it runs in, so it runs in SGLang's own environment::

    /path/to/sglang-venv/bin/python sglang_probe.py request.json    # or: ... sglang_probe.py < request.json

No server starts and no weights exist. For each case the probe writes the config to a folder,
publishes SGLang's ServerArgs for it (``RuntimeContext.override_server_args``: page size, KV cache
dtype, the pool knobs), builds SGLang's ``ModelConfig``, the layer split
(``resolve_layer_indices``), the KV dtype (``configure_kv_cache_dtype``) and the
``KVCacheConfigurator`` as ``ModelRunner.init_kv_cache_configurator`` does, and runs its
``configure``: budget to pool sizes (the pool-size configurator, the Mamba split, max running
requests) and then ``_init_pools``, which picks the pool classes and allocates their buffers on
the CPU. The one step that needs a GPU is the free-memory reading in
``_profile_available_bytes``; the probe hands it the case's budget as the free memory, with no
memory taken before the model loaded (so SGLang's slack, that memory times 1 -
mem_fraction_static, is zero): the pool budget is exactly the case's ``budget`` bytes.

The model object SGLang would have loaded is a stand-in: the functions that read it here
(``resolve_layer_indices``, ``resolve_sliding_window_size``, ``configure_kv_cache_dtype``) take
``start_layer`` / ``end_layer`` (absent: every layer), the model class's own
``get_attention_sliding_window_size`` and ``quant_config``; the stand-in carries the hf config and
the model class's window method, read from SGLang's model registry.

Request: ``{"cases": [{"config": {...}, "budget": bytes, "page_size": int, "kv_cache_dtype": str,
"context_length": int|null, "swa_full_tokens_ratio": float|null, "mamba_full_memory_ratio":
float|null, "max_running_requests": int|null, "max_mamba_cache_size": int|null, "pools": bool}, ...]}``
(``pools`` false: the sizes only, without allocating the buffers, for budgets past this machine's
memory). Output:
one JSON object with ``sglang_version``, the sha256 of each source file whose rules kvcalc
reproduces, and one result per case (the sizes SGLang chose, each pool's class and buffers, or
``refused`` with SGLang's own message). A bad request is one ``sglang_probe: error:`` line on
stderr and exit status 2.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import io
import json
import logging
import os
import sys
import tempfile
import types
import warnings
from contextlib import redirect_stdout
from typing import Any

# The files whose lines kvcalc's SGLang rules cite (engines/sglang), hashed so a citation names
# the exact source: the wheel's _version.py records no commit.
CITED = (
    "srt/mem_cache/kv_cache_configurator.py",
    "srt/model_executor/pool_configurator.py",
    "srt/mem_cache/memory_pool.py",
    "srt/mem_cache/swa_memory_pool.py",
    "srt/configs/model_config.py",
    "srt/configs/mamba_utils.py",
    "srt/server_args.py",
)
_KV_DTYPES = ("auto", "bfloat16", "float16", "float32", "fp8_e4m3", "fp8_e5m2")
_MAX_BUDGET = 2**34  # the pools are really allocated: keep a case to CPU-sized memory
_MAX_SIZED_BUDGET = 2**50  # sizes only ("pools": false): any budget a GPU has


class ProbeError(Exception):
    """A request the probe cannot run; the message is one line for the user."""


class _TorchvisionStub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Some of SGLang's multimodal config modules import torchvision at module level; no build of
    it loads beside the CPU torch, and no pool code calls it. A stand-in module answers those
    imports and raises if anything is ever called."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> Any:
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: Any) -> None:
        return None


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Unusable(f"{self.__name__}.{name}")


class _Unusable:
    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, name: str) -> Any:
        return _Unusable(f"{self._name}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self._name}: torchvision is not installed (a stand-in answered the import)")

    def __mro_entries__(self, bases: Any) -> tuple[type, ...]:
        return (object,)


def _import_sglang() -> dict[str, Any]:
    """SGLang's modules the probe drives (torchvision stood in for when it is missing)."""
    if importlib.util.find_spec("torchvision") is None:
        # transformers decides torchvision is absent at import: let it look before the stand-in exists.
        importlib.import_module("transformers.utils.import_utils")
        sys.meta_path.insert(0, _TorchvisionStub())
    warnings.filterwarnings("ignore")
    names = {
        "context": "sglang.srt.runtime_context",
        "model_config": "sglang.srt.configs.model_config",
        "dtype": "sglang.srt.mem_cache.kv_cache_dtype",
        "configurator": "sglang.srt.mem_cache.kv_cache_configurator",
        "layers": "sglang.srt.model_executor.model_runner_components.layer_setup",
        "load": "sglang.srt.model_executor.model_runner_components.load_model_utils",
        "aux": "sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state",
        "spec": "sglang.srt.speculative.spec_info",
        "graphs": "sglang.srt.model_executor.cuda_graph_config",
        "registry": "sglang.srt.models.registry",
    }
    with redirect_stdout(io.StringIO()):
        return {key: importlib.import_module(name) for key, name in names.items()}


def _sglang_root() -> str:
    import sglang

    return str(os.path.dirname(sglang.__file__))


def file_hashes() -> dict[str, str]:
    root = _sglang_root()
    hashes = {}
    for relative in CITED:
        path = os.path.join(root, relative)
        if os.path.isfile(path):
            with open(path, "rb") as handle:
                hashes[relative] = hashlib.sha256(handle.read()).hexdigest()[:16]
    return hashes


def check_case(case: Any) -> dict[str, Any]:
    if not isinstance(case, dict) or not isinstance(case.get("config"), dict):
        raise ProbeError("each case must be an object with a 'config' object")
    budget = case.get("budget")
    most = _MAX_BUDGET if case.get("pools", True) else _MAX_SIZED_BUDGET
    if not isinstance(budget, int) or isinstance(budget, bool) or not 1 <= budget <= most:
        raise ProbeError(
            f"case 'budget' must be a whole number of bytes from 1 to {most} "
            f"({'with' if most == _MAX_BUDGET else 'without'} its pools allocated), got {budget!r}"
        )
    page = case.get("page_size", 1)
    if not isinstance(page, int) or isinstance(page, bool) or not 1 <= page <= 4096:
        raise ProbeError(f"case 'page_size' must be a whole number from 1 to 4096, got {page!r}")
    if case.get("kv_cache_dtype", "auto") not in _KV_DTYPES:
        raise ProbeError(f"case 'kv_cache_dtype' must be one of {', '.join(_KV_DTYPES)}")
    return case


def _architecture(config: dict[str, Any], registry: Any) -> str:
    """The architecture SGLang will pick: the config's own, or the transformers class for its
    model_type that SGLang's registry has (VLM first, as a checkpoint of a VLM names it)."""
    if config.get("architectures"):
        return str(config["architectures"][0])
    from transformers.models.auto import modeling_auto as auto

    model_type = config.get("model_type")
    supported = set(registry.ModelRegistry.get_supported_archs())
    for mapping in ("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
                    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"):  # fmt: skip
        name = getattr(auto, mapping, {}).get(model_type)
        if name in supported:
            return str(name)
    raise ProbeError(f"SGLang has no model class for model_type {model_type!r} (the config names no architectures)")


def _stand_in_model(arch: str, hf_config: Any, registry: Any) -> Any:
    """What ModelRunner's helpers read of the loaded model: its class's window method, bound to
    an object that carries only the config (the methods read ``self.config``)."""
    model = types.SimpleNamespace(config=hf_config)
    try:
        cls, _ = registry.ModelRegistry.resolve_model_cls([arch])
    except Exception:
        return model
    method = getattr(cls, "get_attention_sliding_window_size", None)
    if method is not None:
        holder = cls.__new__(cls)
        object.__setattr__(holder, "config", hf_config)
        model.get_attention_sliding_window_size = types.MethodType(method, holder)
    return model


def run_case(case: dict[str, Any], sg: dict[str, Any]) -> dict[str, Any]:
    import torch

    config = dict(case["config"])
    try:
        arch = _architecture(config, sg["registry"])
    except ProbeError as error:
        return {"unsupported": str(error)}
    config["architectures"] = [arch]
    page = int(case.get("page_size", 1))
    kv_dtype_name = case.get("kv_cache_dtype", "auto")
    graphs = sg["graphs"]
    knobs: dict[str, Any] = {
        "page_size": page, "kv_cache_dtype": kv_dtype_name, "device": "cpu", "mem_fraction_static": 0.9,
        "cuda_graph_config": graphs.CudaGraphConfig(decode=graphs.PhaseConfig(backend=graphs.Backend.DISABLED),
                                                    prefill=graphs.PhaseConfig(backend=graphs.Backend.DISABLED)),
    }  # fmt: skip
    for key in ("context_length", "swa_full_tokens_ratio", "mamba_full_memory_ratio", "max_running_requests",
                "max_mamba_cache_size", "attention_backend", "disable_radix_cache"):  # fmt: skip
        if case.get(key) is not None:
            knobs[key] = case[key]
    context = sg["context"]
    with tempfile.TemporaryDirectory(prefix="kvcalc-sglang-") as folder:
        with open(os.path.join(folder, "config.json"), "w") as handle:
            json.dump(config, handle)
        override = context.get_context().override_server_args(model_path=folder, **knobs)
        try:
            server_args = override.install()
            return _configure(server_args, sg, torch, arch, kv_dtype_name)
        except (ValueError, RuntimeError, AssertionError, NotImplementedError) as error:
            if "can't allocate memory" in str(error) or isinstance(error, MemoryError):
                # This machine's memory, not SGLang's judgement (req_to_token alone is
                # max_running_requests x context_len int32s).
                return {"architecture": arch, "error": f"out of memory here: {_one_line(error, 160)}"}
            # SGLang's own refusals (its pool sizing and builders raise these with a reason).
            return {"architecture": arch, "refused": f"{type(error).__name__}: {_one_line(error)}"}
        except Exception as error:
            if os.environ.get("KVCALC_DEBUG"):
                raise
            return {"architecture": arch, "error": f"{type(error).__name__}: {_one_line(error)}"}
        finally:
            override.restore()


def _configure(server_args: Any, sg: dict[str, Any], torch: Any, arch: str, kv_dtype_name: str) -> dict[str, Any]:
    context, kcc = sg["context"], sg["configurator"]
    model_config = sg["model_config"].ModelConfig.from_server_args(server_args)
    model = _stand_in_model(arch, model_config.hf_config, sg["registry"])
    spec = sg["spec"].SpeculativeAlgorithm.from_string(None)
    resolved, kv_dtype = sg["dtype"].configure_kv_cache_dtype(
        server_args_kv_cache_dtype=context.get_model().kv_cache_dtype, model=None, model_dtype=model_config.dtype,
        is_draft_worker=False, is_dflash=False, speculative_draft_attention_backend=None,
    )  # fmt: skip
    layer_info = sg["layers"].resolve_layer_indices(model=model, model_config=model_config, is_draft_worker=False)
    page = context.get_schedule().page_size
    try:
        window = sg["load"].resolve_sliding_window_size(model, model_config)
    except AttributeError:
        # The class's method reads a loaded submodule (Gemma 3's language_model); the pools use the
        # window only for hybrid SWA models, whose classes read it from the config.
        window = None
    device = str(_CASE[0].get("device", "cpu"))
    configurator = kcc.KVCacheConfigurator(
        device=device, gpu_id=0, attn_dp_size=1, pp_size=1, pp_group=None, model=model, model_config=model_config,
        server_args=server_args, kv_cache_dtype=kv_dtype, kv_cache_dtype_str=resolved, model_dtype=model_config.dtype,
        page_size=page, sliding_window_size=window, spec_algorithm=spec, is_draft_worker=False,
        post_capture_kv_active=False,
        spec_aux_config=sg["aux"].resolve_spec_aux_hidden_state_config(
            server_args=server_args, model_config=model_config, spec_algorithm=spec, is_draft_worker=False),
        is_hybrid_swa=model_config.is_hybrid_swa, is_hybrid_swa_compress=model_config.is_hybrid_swa_compress,
        use_mla_backend=model_config.attention_arch == sg["model_config"].AttentionArch.MLA, layer_info=layer_info,
        forward_stream=None, req_to_token_pool=None, token_to_kv_pool_allocator=None, memory_pool_config=None,
    )  # fmt: skip
    # One process, no process groups: the free-memory reading names the WORLD group's CPU group.
    context.get_parallel().override_permanently(world_group=types.SimpleNamespace(cpu_group=None))
    budget = _BUDGET[0]
    free_gb = budget / (1 << 30)
    with _patched(kcc, "get_available_gpu_memory", lambda *args, **kwargs: free_gb):
        if _CASE[0].get("pools", True):
            result = configurator.configure(pre_model_load_memory=0)
            pools = [_pool(result.token_to_kv_pool, torch), _pool(result.req_to_token_pool, torch)]
            allocator = type(result.token_to_kv_pool_allocator).__name__
        else:
            # Sizes only (configure's steps before _init_pools): budgets too large to allocate here.
            config = configurator._resolve_memory_pool_config(0)
            result = configurator._derive_pool_sizes(config=config)
            pools, allocator = [], None
    sizer = sg_pool_configurator(configurator)
    return {
        "architecture": arch,
        "model_dtype": str(model_config.dtype).removeprefix("torch."),
        "kv_cache_dtype": str(kv_dtype).removeprefix("torch."),
        "page_size": page,
        "context_len": int(model_config.context_len),
        "sliding_window_size": window,
        "is_hybrid_swa": bool(model_config.is_hybrid_swa),
        "mla": bool(configurator.use_mla_backend),
        "full_attention_layers": _ids(layer_info.full_attention_layer_ids),
        "swa_attention_layers": _ids(layer_info.swa_attention_layer_ids),
        "num_effective_layers": int(layer_info.num_effective_layers),
        "cell_size": sizer,
        "max_total_num_tokens": int(result.max_total_num_tokens),
        "full_max_total_num_tokens": _int(result.full_max_total_num_tokens),
        "swa_max_total_num_tokens": _int(result.swa_max_total_num_tokens),
        "max_running_requests": int(result.max_running_requests),
        "max_mamba_cache_size": _int(context.get_schedule().max_mamba_cache_size)
        if configurator.mambaish_config is not None
        else None,
        "allocator": allocator,
        "mamba": _mamba(configurator.mambaish_config),
        "pools": pools,
    }


_BUDGET = [0]
_CASE: list[dict[str, Any]] = [{}]


def sg_pool_configurator(configurator: Any) -> dict[str, Any]:
    """The per-token bytes SGLang's pool-size configurator divides the budget by."""
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator

    sizer = create_memory_pool_configurator(configurator)
    out: dict[str, Any] = {"configurator": type(sizer).__name__}
    for name in ("_cell_size", "_full_cell_bytes", "_swa_cell_bytes"):
        value = getattr(sizer, name, None)
        if callable(value):
            value = value()
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name.lstrip("_")] = value
    return out


class _patched:
    def __init__(self, module: Any, name: str, value: Any) -> None:
        self.module, self.name, self.value = module, name, value

    def __enter__(self) -> None:
        self.saved = getattr(self.module, self.name)
        setattr(self.module, self.name, self.value)

    def __exit__(self, *exc: Any) -> None:
        setattr(self.module, self.name, self.saved)


def _mamba(config: Any) -> dict[str, Any] | None:
    """SGLang's state geometry per request: shapes, dtypes, layers and mamba_cache_per_req."""
    if config is None:
        return None
    params = config.mamba2_cache_params
    return {
        "layers": [int(i) for i in params.layers],
        "conv_shapes": [list(map(int, shape)) for shape in params.shape.conv],
        "temporal_shape": list(map(int, params.shape.temporal)),
        "conv_dtype": str(params.dtype.conv).removeprefix("torch."),
        "temporal_dtype": str(params.dtype.temporal).removeprefix("torch."),
        "cache_per_req": int(params.mamba_cache_per_req),
    }


def _ids(ids: Any) -> list[int] | None:
    return None if ids is None else [int(i) for i in ids]


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _pool(pool: Any, torch: Any, depth: int = 0) -> dict[str, Any]:
    """A pool's class and its tensors, each storage counted once (K and V buffers may be views
    of one allocation), with its sub-pools (SWA and full, Mamba state) alike."""
    seen: set[int] = set()
    buffers = []
    subpools = []
    for name, value in sorted(vars(pool).items()):
        items = value if isinstance(value, (list, tuple)) else [value]
        for index, item in enumerate(items):
            if isinstance(item, torch.Tensor):
                if name.endswith("_ptrs") or name.endswith("_strides"):
                    continue  # tables of the buffers' addresses, not cache
                # A view (K and V of one allocation) counts once, by the tensor it views.
                base = item._base if item._base is not None else item
                if id(base) in seen:
                    continue
                seen.add(id(base))
                buffers.append({"name": name if len(items) == 1 else f"{name}[{index}]",
                                "shape": list(base.shape), "dtype": str(base.dtype).removeprefix("torch."),
                                "bytes": int(base.numel() * base.element_size())})  # fmt: skip
            elif depth < 3 and _is_pool(item) and item is not pool:
                subpools.append({"attribute": name, **_pool(item, torch, depth + 1)})
    return {"class": type(pool).__name__, "size": _int(getattr(pool, "size", None)), "buffers": buffers,
            "subpools": subpools}  # fmt: skip


def _is_pool(value: Any) -> bool:
    name = type(value).__name__
    return any(word in name for word in ("Pool", "Cache")) and hasattr(value, "__dict__")


def _one_line(text: object, limit: int = 400) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    line = " ".join(lines)
    line = "".join(ch if ch.isprintable() else "?" for ch in line)
    return line if len(line) <= limit else line[: limit - 3] + "..."


def main(argv: list[str]) -> int:
    try:
        source = argv[1] if len(argv) > 1 else "-"
        if source == "-":
            text = sys.stdin.read()
        else:
            with open(source) as handle:
                text = handle.read()
        try:
            request = json.loads(text)
        except ValueError as error:
            raise ProbeError(f"the request is not JSON: {error}") from None
        if not isinstance(request, dict) or not isinstance(request.get("cases"), list) or not request["cases"]:
            raise ProbeError("the request must be an object with a non-empty 'cases' list")
        cases = [check_case(case) for case in request["cases"]]
        logging.disable(logging.WARNING)
        sg = _import_sglang()
        from sglang.version import __version__

        results = []
        for case in cases:
            _BUDGET[0] = int(case["budget"])
            _CASE[0] = case
            with redirect_stdout(io.StringIO()):
                results.append(run_case(case, sg))
    except ProbeError as error:
        print(f"sglang_probe: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps({"sglang_version": __version__, "files": file_hashes(), "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
