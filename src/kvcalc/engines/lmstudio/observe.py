"""What a running LM Studio server reveals about its KV pool. LM Studio is closed source: its answers
are read from its documentation, lmstudio-ai/docs @ c6854fb (2026-04-29):

- ``GET /api/v1/models`` (LM Studio 0.4.0 on; 1_developer/2_rest/list.md): every model, each with
  ``key``, ``format`` ("gguf" | "mlx"), ``architecture``, ``quantization``, ``size_bytes``,
  ``max_context_length`` and ``loaded_instances``, each loaded one with its ``config``:
  ``context_length``, ``eval_batch_size``, ``parallel`` (Max Concurrent Predictions),
  ``flash_attention``, ``num_experts``, ``offload_kv_cache_to_gpu``.
- ``GET /api/v0/models`` (LM Studio 0.3.6 on; 1_developer/2_rest/endpoints.mdx): every model with
  ``state`` ("loaded" | "not-loaded"), ``compatibility_type``, ``arch`` and the model's
  ``max_context_length``; not the context it was loaded with.

Neither says the K/V cache types, whether the KV cache is unified (``useUnifiedKvCache``), the GPU, or
any live request. No log reader: LM Studio's published logs (lmstudio-bug-tracker#1862, in
tests/fixtures/logs/lmstudio) show its llama.cpp runtime's own lines (``llama_kv_cache: ...``), which
llama.cpp's reader reads, and no line of LM Studio's own that would tell its log from llama-server's.
"""

from __future__ import annotations

from typing import Any

from kvcalc.engines.commandline import Settings
from kvcalc.engines.lmstudio import DEFAULT_PARALLEL
from kvcalc.engines.lmstudio.commandline import _per_prediction
from kvcalc.engines.observing import Figure, Get, LogReader, Observation, Pool, PoolRules, ServerReader
from kvcalc.engines.ollama.observe import predicted_cells

DOCS = "lmstudio-ai/docs @ c6854fb"
_CONFIG = ("context_length", "eval_batch_size", "parallel", "flash_attention", "num_experts", "offload_kv_cache_to_gpu")
_MODEL = ("key", "format", "architecture", "params_string", "size_bytes", "max_context_length")


def _v1(get: Get) -> list[dict[str, Any]] | None:
    """/api/v1/models' models, when each has LM Studio's own ``loaded_instances`` list."""
    body = get("/api/v1/models").json()
    models = body.get("models") if isinstance(body, dict) else None
    if not isinstance(models, list) or not models:
        return None
    if all(isinstance(m, dict) and isinstance(m.get("loaded_instances"), list) and "key" in m for m in models):
        return models
    return None


def _v0(get: Get) -> list[dict[str, Any]] | None:
    """/api/v0/models' models, when each has LM Studio's ``compatibility_type`` and ``state``."""
    body = get("/api/v0/models").json()
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list) or not data:
        return None
    if all(isinstance(m, dict) and "compatibility_type" in m and "state" in m for m in data):
        return data
    return None


def identify(get: Get) -> bool:
    """LM Studio's v1 model list (``loaded_instances``) or, before 0.4, its v0 one (``compatibility_type``)."""
    return _v1(get) is not None or _v0(get) is not None


def read_server(get: Get, origin: str) -> Observation:
    notes = [f"LM Studio is closed source: its answers are read as its documentation describes them ({DOCS})",
             "LM Studio's REST API exports no running or waiting requests and no KV usage"]  # fmt: skip
    missing = ["the K and V cache types: not revealed; give --kv-dtype (LM Studio's default f16)", "the GPU: not "
               "revealed; give --gpu"]  # fmt: skip
    models = _v1(get)
    if models is not None:
        return _read_v1(models, origin, notes, missing)
    return _read_v0(_v0(get) or [], origin, notes, missing)


def _read_v1(models: list[dict[str, Any]], origin: str, notes: list[str], missing: list[str]) -> Observation:
    loaded = [(i, m) for i, m in enumerate(models) if m["loaded_instances"]]
    figures: list[Figure] = []
    settings: Settings = {}
    pools: tuple[Pool, ...] = ()
    engine = "lmstudio"
    if not loaded:
        missing.insert(0, "a loaded model: GET /api/v1/models lists none loaded (lms load MODEL); then check again")
        return Observation(engine=engine, origin=origin, missing=tuple(missing), notes=tuple(notes))
    count = sum(len(m["loaded_instances"]) for _, m in loaded)
    if count > 1:
        notes.append(f"{count} model instances are loaded: kvcalc reads the first, and the others share the memory")
    index, model = loaded[0]
    where = f"GET /api/v1/models models[{index}]"
    for key in _MODEL:
        if key in model:
            figures.append(Figure(key, _scalar(model[key]), f"{where}.{key}"))
    instance = model["loaded_instances"][0]
    config = instance.get("config") if isinstance(instance, dict) else None
    config = config if isinstance(config, dict) else {}
    for key in _CONFIG:
        if key in config:
            figures.append(Figure(key, _scalar(config[key]), f"{where}.loaded_instances[0].config.{key}"))
    missing.append(f"the model: {model['key']} is LM Studio's model key, which kvcalc cannot open; give MODEL (its "
                   "GGUF, Hub id or preset)")  # fmt: skip
    context = _count(config.get("context_length"))
    parallel = _count(config.get("parallel"))
    if parallel is None:
        parallel = DEFAULT_PARALLEL
        notes.append(f"no parallel in the loaded instance's config: LM Studio's default Max Concurrent Predictions "
                     f"{DEFAULT_PARALLEL} assumed")  # fmt: skip
    if model.get("format") == "mlx":
        engine = "lmstudio-mlx"
        if context is not None:
            settings.update(tokens=context, max_kv_size=context, batch=parallel, parallel=parallel)
        notes.append("an MLX model runs on LM Studio's MLX runtime (mlx-engine): its context length is each "
                     "prediction's max_kv_size, not a pool of cells")  # fmt: skip
    elif context is not None:
        settings.update(batch=parallel, tokens=_per_prediction(context, parallel, notes, notes), parallel=parallel)
        pools = (Pool(context, "cell", kind="kv", source=f"{where}.loaded_instances[0].config.context_length"),)
        notes.append(f"the context length {context:,} is one unified KV cache of that many cells for the {parallel} "
                     "predictions (LM Studio's default Unified KV Cache; the API does not say whether it is on), "
                     "padded by llama.cpp to 256")  # fmt: skip
        missing.append("Unified KV Cache: not revealed; kvcalc takes LM Studio's default (on); give --no-kv-unified "
                       "if it is off (each prediction then holds the whole context)")  # fmt: skip
        batch = _count(config.get("eval_batch_size"))
        if batch is not None:
            settings["n_batch"] = batch
    if context is None:
        missing.insert(0, "the context length: the loaded instance's config gives none; give --tokens")
    if config.get("offload_kv_cache_to_gpu") is False:
        notes.append("offload_kv_cache_to_gpu is false: the KV cache is in host memory, not on the GPU")
    return Observation(engine=engine, origin=origin, settings=settings, pools=pools, figures=tuple(figures),
                       missing=tuple(missing), notes=tuple(notes))  # fmt: skip


def _read_v0(data: list[dict[str, Any]], origin: str, notes: list[str], missing: list[str]) -> Observation:
    figures: list[Figure] = []
    engine = "lmstudio"
    loaded = [(i, m) for i, m in enumerate(data) if m.get("state") == "loaded"]
    if not loaded:
        missing.insert(0, "a loaded model: GET /api/v0/models lists none with state loaded (lms load MODEL)")
    else:
        index, model = loaded[0]
        where = f"GET /api/v0/models data[{index}]"
        for key in ("id", "arch", "compatibility_type", "quantization", "state", "max_context_length"):
            if key in model:
                figures.append(Figure(key, _scalar(model[key]), f"{where}.{key}"))
        if model.get("compatibility_type") == "mlx":
            engine = "lmstudio-mlx"
        missing.insert(
            0,
            "the context length it was loaded with: GET /api/v0/models gives the model's "
            "max_context_length only (LM Studio 0.4's GET /api/v1/models gives it); give --tokens",
        )
        missing.append("Max Concurrent Predictions: not revealed before LM Studio 0.4; give --parallel")
        missing.append(f"the model: {model.get('id')} is LM Studio's model key; give MODEL")
    return Observation(engine=engine, origin=origin, figures=tuple(figures), missing=tuple(missing),
                       notes=tuple(notes))  # fmt: skip


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _scalar(value: object) -> int | float | str | bool | None:
    if value is None or isinstance(value, (int, float, str, bool)):
        return value
    return str(value)


SERVERS = (ServerReader("lmstudio", ("/api/v1/models", "/api/v0/models"), identify, read_server),)
# No reader of LM Studio's logs: see the module's docstring.
LOGS: tuple[LogReader, ...] = ()
POOL_RULES: dict[str, PoolRules] = {"lmstudio": PoolRules("context", from_estimate=predicted_cells)}
