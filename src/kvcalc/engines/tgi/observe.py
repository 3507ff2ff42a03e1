"""What a TGI server or its start-up log reveals (huggingface/text-generation-inference, read at the
tags named below). kvcalc has no TGI rules (the package's docstring says why): the observation is
``modelled`` False, and ``check`` sets its pool, in tokens, beside the theoretical cache.

The server: ``GET /info`` (router/src/lib.rs ``Info``, filled in router/src/server.rs): model_id,
max_concurrent_requests, max_total_tokens (one request's prompt + generated tokens), the input limit
as ``max_input_length`` up to v2.0.4 and ``max_input_tokens`` from v2.1.0, and, up to v2.2.0 only,
model_dtype, max_batch_size and max_batch_total_tokens (the pool); ``router`` is the crate's name,
"text-generation-router" (``env!("CARGO_PKG_NAME")``), ``version`` its version. ``GET /metrics``
(Prometheus, on the API port in every release): ``tgi_batch_max_total_tokens``, the pool, set once
after warm-up from v2.3.1 and by the v3 back end only (backends/v3/src/lib.rs); the running batch's
``tgi_batch_current_size`` and ``tgi_batch_current_max_tokens`` (its blocks x block size:
``batch.max_tokens``, backends/v{2,3}/src/backend.rs) and ``tgi_queue_size`` (queue.rs).

The log: the router's "Setting max batch total tokens to N" (router/src/main.rs up to v2.0.4,
router/src/server.rs v2.1.0-v2.2.0, backends/v3/src/lib.rs and backends/v2/src/lib.rs from v2.3.0),
the smallest of the shards' ``num_blocks x BLOCK_SIZE`` (client/sharded_client.rs ``warmup``); the
first shard's "KV-cache blocks: N, size: S" (server flash_causal_lm.py ``warmup``, from v2.4.0); the
launcher's ``Args { ... }`` (one line, ``{:?}``, in v1.x; ``{:#?}`` over many lines in v2.x-v3.x,
launcher/src/main.rs) and its defaults' lines.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from kvcalc.dtypes import lookup_dtype
from kvcalc.engines.commandline import SettingValue
from kvcalc.engines.observing import (
    Figure,
    Get,
    LogReader,
    Observation,
    Pool,
    PoolRules,
    ServerReader,
    Usage,
    line_source,
    prometheus,
)

ENGINE = "tgi"
ROUTER = "text-generation-router"
NOT_MODELLED = "kvcalc has no TGI rules: its pool is set beside the theoretical cache"
# models/globals.py (v2.3.0-v3.3.7): the block size each attention back end pages its cache in.
BLOCK_SIZES = {"flashdecoding": 256, "flashinfer": 1, "flashdecoding-ipex": 64, "paged": 16}
_POOL_METRIC = "tgi_batch_max_total_tokens"
_GPU = "the GPU: TGI names none; give --gpu"
_MODEL = "the model: give MODEL"
_TERMS = "the memory terms: TGI states no weights, activation, CUDA graph or free bytes"


# --- the server ------------------------------------------------------------------------------------


def _info(get: Get) -> dict[str, object] | None:
    body = get("/info").json()
    return body if isinstance(body, dict) else None


def identify(get: Get) -> bool:
    """/info answers with TGI's router name and its per-request limit: no other engine's server has
    a ``router`` field (router/src/lib.rs Info, every release)."""
    info = _info(get)
    return info is not None and info.get("router") == ROUTER and "max_total_tokens" in info


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_server(get: Get, origin: str) -> Observation:
    info = _info(get) or {}
    figures: list[Figure] = []
    settings: dict[str, SettingValue] = {}
    missing: list[str] = [_GPU]
    notes: list[str] = [NOT_MODELLED]
    for key, value in info.items():
        if isinstance(value, (int, float, str, bool)) or value is None:
            figures.append(Figure(key, value, f"GET /info {key}"))
    model = info.get("model_id")
    if isinstance(model, str) and model:
        settings["model"] = model
    total = _int(info.get("max_total_tokens"))
    if total is not None:
        settings["max_model_len"] = total
        notes.append(f"max_total_tokens {total:,}: one request's prompt + generated tokens at most (TGI's "
                     "--max-total-tokens), read as max_model_len")  # fmt: skip
    batch = _int(info.get("max_batch_size"))
    if batch is not None:
        settings["batch"] = batch
    dtype = info.get("model_dtype")
    found = lookup_dtype(dtype) if isinstance(dtype, str) else None
    if found is not None:
        settings["kv_dtype"] = found.name
        notes.append(f"model_dtype {dtype}: TGI's cache takes the model's dtype unless --kv-cache-dtype says "
                     f"otherwise (read as --kv-dtype {found.name})")  # fmt: skip
    else:
        missing.append("the cache's dtype: /info has no model_dtype from v2.3.0: give --kv-dtype")
    missing.append("the shards (--num-shard): /info does not say them: give --tp")
    pools: list[Pool] = []
    pool = _int(info.get("max_batch_total_tokens"))
    if pool is not None:
        pools.append(Pool(pool, "token", source="GET /info max_batch_total_tokens"))
    metrics = get("/metrics")
    samples = {name: value for name, _labels, value in prometheus(metrics.body)} if metrics.ok else {}
    for name, value in samples.items():
        if name.startswith("tgi_batch_") or name == "tgi_queue_size":
            figures.append(Figure(name, value, f"GET /metrics {name}"))
    if not pools and _POOL_METRIC in samples:
        pools.append(Pool(int(samples[_POOL_METRIC]), "token", source=f"GET /metrics {_POOL_METRIC}"))
    if not pools:
        missing.append("the pool: /info lost max_batch_total_tokens in v2.3.0 and /metrics carries "
                       f"{_POOL_METRIC} from v2.3.1 (v3 back end only): give the start-up log, whose "
                       "'Setting max batch total tokens to N' states it")  # fmt: skip
    usage = _usage(samples, pools[0].count if pools else None)
    if usage is None:
        missing.append("live usage: /metrics did not answer with tgi_batch_current_size")
    if "model" not in settings:
        missing.append(_MODEL)
    missing.append(_TERMS)
    version = info.get("version")
    return Observation(
        engine=ENGINE,
        origin=origin,
        release=version if isinstance(version, str) else None,
        settings=settings,
        pools=tuple(pools),
        usage=usage,
        figures=tuple(figures),
        missing=tuple(missing),
        notes=tuple(notes),
        modelled=False,
    )


def _usage(samples: dict[str, float], pool: int | None) -> Usage | None:
    if "tgi_batch_current_size" not in samples:
        return None
    used = samples.get("tgi_batch_current_max_tokens")
    tokens = int(used) if used is not None else None
    share = tokens / pool if tokens is not None and pool else None
    return Usage(
        running=int(samples["tgi_batch_current_size"]),
        waiting=int(samples["tgi_queue_size"]) if "tgi_queue_size" in samples else None,
        used_tokens=tokens,
        used_fraction=share,
        derived=("used_fraction",) if share is not None else (),
        source="GET /metrics tgi_batch_current_size, tgi_queue_size, tgi_batch_current_max_tokens",
    )


SERVERS = (ServerReader(ENGINE, ("/info", "/metrics"), identify, read_server),)


# --- the start-up log --------------------------------------------------------------------------------

# tracing's targets: every TGI log line names the launcher or the router that printed it.
_TARGETS = re.compile(r"\btext_generation_(launcher|router)\b")
_SETTING = re.compile(r"Setting max batch total tokens to (\d+)\b")
_INFERRED = re.compile(r"Inferred max batch total tokens: (\d+)\b")
_BLOCKS = re.compile(r"KV-cache blocks: (\d+), size: (\d+)\b")
_GRAPHS = re.compile(r"(?:Using default cuda graphs|Cuda Graphs are enabled for sizes) \[([\d, ]*)\]")
_PREFIX = re.compile(r"Using prefix caching = (\w+)")
_ATTENTION = re.compile(r"Using Attention = ([\w-]+)")
_LAUNCHER_ATTENTION = re.compile(r"Using attention ([\w-]+) - Prefix caching (\w+)")
_CAPPED = re.compile(r"Model supports up to (\d+) but tgi will now set its default to (\d+) instead")
# backends/v3/src/main.rs (v3.0.0-v3.3.x): the limits the warm-up chose when none was given.
_DEFAULTED = re.compile(r"Maximum (input|total) tokens defaulted to (\d+)")
# launcher/src/main.rs: "Default `max_input_tokens` / `max_total_tokens` to N" in v2.0.x (the launcher
# picked them), "Default `max_batch_prefill_tokens` to N" v2.0.x-v3.3.x.
_LAUNCHER_DEFAULT = re.compile(r"Default `max_(input|total|batch_prefill)_tokens` to (\d+)")
_SHARDING = re.compile(r"Sharding model on (\d+) processes")
# A line that speaks of the pool: one that matches none of the above is named in ``unread``.
_POOLISH = re.compile(r"max batch total tokens|KV-cache blocks", re.IGNORECASE)
# docker compose's "service-1  | " before each line.
_COMPOSE = re.compile(r"^[\w.-]+\s+\| ?")


def claims(lines: Sequence[str]) -> bool:
    return any(_TARGETS.search(line) for line in lines)


def _args_text(lines: Sequence[str]) -> tuple[str, int] | None:
    """The launcher's Args dump as one line, and its line index: ``Args { a: 1, ... }`` on one line
    (v1.x ``{:?}``) or ``Args {`` then a field a line up to ``}`` (``{:#?}``)."""
    for index, line in enumerate(lines):
        at = line.find("Args {")
        if at < 0 or not _TARGETS.search(line):
            continue
        if line.rstrip().endswith("}"):
            return line[at:], index
        parts = [line[at:]]
        for following in lines[index + 1 : index + 400]:
            body = _COMPOSE.sub("", following).strip()
            parts.append(body)
            if body == "}":
                return " ".join(parts), index
        return None
    return None


_SOME = re.compile(r"Some\(\s*([^()]*?),?\s*\)")
_FIELD = re.compile(r'(\w+): ("(?:[^"\\]|\\.)*"|\[[^\]]*\]|[^,}]+)')


def parse_args(text: str) -> dict[str, str]:
    """The Args dump's fields as printed (``Some(x)`` unwrapped, quotes dropped; ``None`` kept)."""
    flat = _SOME.sub(r"\1", text.partition("{")[2])
    return {key: value.strip().strip('"') for key, value in _FIELD.findall(flat)}


def _args_settings(fields: dict[str, str], settings: dict[str, SettingValue], notes: list[str]) -> None:
    def number(key: str) -> int | None:
        value = fields.get(key, "")
        return int(value) if value.isdigit() else None

    if fields.get("model_id"):
        settings["model"] = fields["model_id"]
    if (shards := number("num_shard")) is not None:
        settings["tp"] = shards
    if (total := number("max_total_tokens")) is not None:
        settings["max_model_len"] = total
    if (batch := number("max_batch_size")) is not None:
        settings["batch"] = batch
    kv = fields.get("kv_cache_dtype", "None")
    found = lookup_dtype(kv.replace("fp8_", "float8_")) if kv != "None" else None
    if found is not None:
        settings["kv_dtype"] = found.name
    if (given := number("max_batch_total_tokens")) is not None:
        notes.append(f"--max-batch-total-tokens {given:,} given: TGI's flash models ignore it and size the pool "
                     "from free memory ('Inferred max batch total tokens'); others use it")  # fmt: skip


def read_log(lines: Sequence[str], origin: str) -> Observation:
    figures: list[Figure] = []
    settings: dict[str, SettingValue] = {}
    notes: list[str] = [NOT_MODELLED]
    unread: list[str] = []
    pools: list[Pool] = []
    blocks: tuple[int, int, int] | None = None
    args = _args_text(lines)
    if args is not None:
        fields = parse_args(args[0])
        source = f"{line_source(args[1])} Args"
        figures.extend(Figure(k, v, source) for k, v in fields.items() if v != "None")
        _args_settings(fields, settings, notes)
    for index, line in enumerate(lines):
        source = line_source(index)
        if match := _SETTING.search(line):
            pools = [Pool(int(match.group(1)), "token", source=source)]
            figures.append(Figure("max_batch_total_tokens", int(match.group(1)), source))
        elif match := _BLOCKS.search(line):
            blocks = (int(match.group(1)), int(match.group(2)), index)
            figures.append(Figure("kv_cache_blocks", blocks[0], source))
            figures.append(Figure("block_size", blocks[1], source))
        elif match := _INFERRED.search(line):
            figures.append(Figure("inferred_max_batch_total_tokens", int(match.group(1)), source))
        elif "Model does not support automatic max batch total tokens" in line:
            notes.append(f"{source}: this model does not size its pool from memory: the pool is --max-batch-"
                         "total-tokens or max(16000, max_total_tokens, max_batch_prefill_tokens)")  # fmt: skip
        elif _POOLISH.search(line):
            unread.append(f"{source}: {line.strip()}")
        _launcher_line(line, source, figures, settings)
    if blocks is not None:
        count, size, index = blocks
        if not pools:
            pools = [Pool(count, "block", unit_tokens=size, source=line_source(index))]
        elif pools[0].count != count * size:
            notes.append(f"the first shard's {count:,} blocks of {size} ({count * size:,} tokens) differ from the "
                         f"router's {pools[0].count:,}: the router takes the smallest shard's")  # fmt: skip
    missing = [_GPU]
    if not pools:
        missing.append("the pool: no 'Setting max batch total tokens to N' nor 'KV-cache blocks' line (the server "
                       "stopped before warm-up, or the log was cut)")  # fmt: skip
    if "kv_dtype" not in settings:
        missing.append("the cache's dtype: the log does not state it (the model's own unless --kv-cache-dtype): "
                       "give --kv-dtype")  # fmt: skip
    if "model" not in settings:
        missing.append(_MODEL)
    return Observation(
        engine=ENGINE,
        origin=origin,
        settings=settings,
        pools=tuple(pools),
        figures=tuple(figures),
        missing=tuple(missing),
        unread=tuple(unread),
        notes=tuple(notes),
        modelled=False,
    )


def _launcher_line(line: str, source: str, figures: list[Figure], settings: dict[str, SettingValue]) -> None:
    """The launcher's and the router's settings lines: each value a figure, the limits settings."""
    if match := _GRAPHS.search(line):
        figures.append(Figure("cuda_graphs", match.group(1).replace(" ", ""), source))
    elif match := _PREFIX.search(line):
        figures.append(Figure("prefix_caching", match.group(1), source))
    elif match := _ATTENTION.search(line):
        figures.append(Figure("attention", match.group(1), source))
        if match.group(1) in BLOCK_SIZES:
            figures.append(Figure("attention_block_size", BLOCK_SIZES[match.group(1)], source))
    elif match := _LAUNCHER_ATTENTION.search(line):
        figures.append(Figure("attention", match.group(1), source))
        figures.append(Figure("prefix_caching", match.group(2), source))
    elif match := _CAPPED.search(line):
        figures.append(Figure("model_max_total_tokens", int(match.group(1)), source))
        figures.append(Figure("default_max_total_tokens", int(match.group(2)), source))
    elif (match := _DEFAULTED.search(line)) or (match := _LAUNCHER_DEFAULT.search(line)):
        figures.append(Figure(f"max_{match.group(1)}_tokens", int(match.group(2)), source))
        if match.group(1) == "total":
            settings["max_model_len"] = int(match.group(2))
    elif (match := _SHARDING.search(line)) and "tp" not in settings:
        settings["tp"] = int(match.group(1))
        figures.append(Figure("num_shard", int(match.group(1)), source))


LOGS = (LogReader(ENGINE, claims, read_log),)

# kvcalc has no TGI rules: no prediction in TGI's units (``check`` sets the pool's tokens beside the
# theoretical bytes per token instead).
POOL_RULES: dict[str, PoolRules] = {}
