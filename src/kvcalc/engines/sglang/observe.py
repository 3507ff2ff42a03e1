"""What a running SGLang server, or its start-up log, reveals about its token pool (``kvcalc check``).

Read in SGLang 0.5.23's source (the wheel's ``python/sglang/srt``; line numbers are that wheel's):

- ``GET /server_info`` (entrypoints/http_server.py 863-891; ``/get_server_info``, 853-860, is its
  deprecated spelling, tried when /server_info is a 404 as on older releases): the resolved server
  args flat (``ServerArgs.resolved_dict``, server_args.py 316-333: ``model_path``,
  ``context_length``, ``page_size``, ``kv_cache_dtype``, ``mem_fraction_static``, ``tp_size``,
  ``attn_dp_size``; ``enable_dp_attention`` reports attn_dp_size > 1), the scheduler's start-up info
  (scheduler.py 1937-1947: ``max_total_num_tokens``, ``max_req_input_len``), ``internal_states``
  (one dict per data-parallel rank, tokenizer_control_mixin.py 967-975) whose ``memory_usage``
  (scheduler_components/memory_usage.py 15-40) holds ``weight``, ``kvcache``, ``startup_available``
  in GB rounded to 3 places, ``token_capacity``, ``token_capacity_swa`` and ``graph`` (0.5.23: a GB
  figure per captured phase; older releases one figure), and ``version``.
- ``GET /v1/loads`` (entrypoints/v1_loads.py 101-150; absent from older releases): ``accelerator``
  (torch's device name), and per DP rank (managers/load_snapshot.py 196-223,
  scheduler_components/load_inquirer.py 142-243) ``num_running_reqs``, ``num_waiting_reqs``,
  ``num_used_tokens``, ``max_total_num_tokens``, ``token_usage`` (rounded to 4 places).
- ``GET /metrics`` only with ``--enable-metrics`` (observability/metrics_collector.py 364-451,
  1290-1348): ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``, ``sglang:token_usage``,
  ``sglang:num_used_tokens``, ``sglang:max_total_num_tokens``, ``sglang:context_len``.

SGLang's "GB" is GiB: memory_pool.py 116 ``GB = 1024 * 1024 * 1024``, and
``get_available_gpu_memory`` returns bytes / (1 << 30) (utils/common.py 576). The pool is per rank:
each GPU holds ``max_total_num_tokens`` tokens of its share of the layers' heads; with attention DP
each attention-DP group runs its own scheduler and pool of that size (the server's pool in all is
that times the groups). The server args map to kvcalc's settings as ``sglang serve``'s flags do
(commandline.py ``interpret``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvcalc.engines.commandline import SettingValue
from kvcalc.engines.observing import (
    Answer,
    Figure,
    Get,
    LogReader,
    MemoryTerm,
    Observation,
    Pool,
    PoolRules,
    Predicted,
    ServerReader,
    Usage,
    line_source,
    printed_bytes,
    prometheus,
)

ENGINE = "sglang"
ROCM_ENGINE = "sglang-rocm"
SOURCE = "SGLang 0.5.23 python/sglang/srt"

# --kv-cache-dtype as kvcalc's formats (commandline.py _KV_DTYPES); the block-scaled ones kvcalc does
# not model (mxfp8, nvfp4, fp4_mx_block16) are named instead.
_KV_DTYPES = {"fp8_e5m2": "fp8_e5m2", "fp8_e4m3": "fp8_e4m3", "bf16": "bf16", "bfloat16": "bf16"}
# torch dtypes SGLang logs ("Using KV cache dtype: torch.float8_e4m3fn") as kvcalc's formats.
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "f16", "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2",
                 "float8_e4m3fnuz": "fp8_e4m3", "float32": "f32"}  # fmt: skip

# Server args that change memory kvcalc does not model (commandline.py's unmodelled flags): named in
# a note when set.
_UNMODELLED: tuple[tuple[str, str], ...] = (
    ("max_total_tokens", "caps the token pool at that many tokens, below what the budget holds"),
    ("quantization", "changes the weights' size on the GPU from the checkpoint's"),
    ("speculative_algorithm", "adds a draft model whose weights and KV pool share the budget"),
    ("cpu_offload_gb", "keeps that many GB of weights in CPU memory"),
    ("enable_hierarchical_cache", "adds a host-memory KV tier beside the GPU pool"),
    ("enable_lora", "reserves GPU memory for LoRA adapters"),
)


@dataclass
class _Reading:
    """What a reader has gathered so far (figures in reading order)."""

    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)

    def add(self, name: str, value: Any, source: str) -> None:
        self.figures.append(Figure(name, value, source))


def _gib(value: float | str) -> int:
    """Bytes of a figure SGLang printed in its GB (GiB)."""
    return printed_bytes(str(value), "GiB")


# --- the server args as kvcalc's settings ----------------------------------------------------------


def read_args(args: Mapping[str, Any], source: str, into: _Reading) -> dict[str, SettingValue]:
    """kvcalc's settings from SGLang's resolved server args (``/server_info``, or the log's
    ``server_args=`` line), as commandline.py interprets the same flags."""
    settings: dict[str, SettingValue] = {}

    def take(key: str) -> Any:
        value = args.get(key)
        if value is not None:
            into.add(key, value, f"{source} {key}")
        return value

    model = take("model_path")
    if isinstance(model, str) and model:
        settings["model"] = model
    context = take("context_length")
    if isinstance(context, int) and not isinstance(context, bool):
        settings["max_model_len"] = settings["tokens"] = context
    for key, name in (("tp_size", "tp"), ("pp_size", "pp")):
        value = take(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 1:
            settings[name] = value
    _parallel(args, take, settings, into)
    share = take("mem_fraction_static")
    if isinstance(share, (int, float)) and not isinstance(share, bool):
        settings["utilization"] = float(share)
    cache = take("kv_cache_dtype")
    if isinstance(cache, str) and cache != "auto":
        if cache in _KV_DTYPES:
            settings["kv_dtype"] = _KV_DTYPES[cache]
        else:
            into.unread.append(f"{source} kv_cache_dtype {cache!r}: a KV cache format kvcalc does not model")
    page = take("page_size")
    if isinstance(page, int) and not isinstance(page, bool):
        settings["block_size"] = page
    running = take("max_running_requests")
    if isinstance(running, int) and not isinstance(running, bool):
        groups, dp = int(settings.get("dp_attention", 1)), int(settings.get("dp", 1))
        # kv_cache_configurator.py resolve_max_num_reqs: max(1, N // attn_dp_size) a group; every
        # data-parallel replica runs its own scheduler with the same N (commandline.py interpret).
        settings["batch"] = max(1, running // groups) * groups * dp
        into.notes.append(f"max_running_requests {running} read as --batch {settings['batch']}: the requests "
                          "resident at once")  # fmt: skip
    for key, why in _UNMODELLED:
        value = args.get(key)
        if value not in (None, False, 0, "", "none"):
            into.add(key, value, f"{source} {key}")
            into.notes.append(f"{key} {value}: {why}; kvcalc does not model it")
    return settings


def _parallel(
    args: Mapping[str, Any], take: Callable[[str], Any], settings: dict[str, SettingValue], into: _Reading
) -> None:
    """0.5.23's attn_dp_size, or an older release's --dp-size N --enable-dp-attention (the same
    attention-DP groups: parallel_hook.py handle_deprecated_dp_attention)."""
    dp = take("dp_size")
    groups = take("attn_dp_size")
    flag = args.get("enable_dp_attention")
    if isinstance(groups, int) and groups > 1:
        settings["dp_attention"] = groups
    elif flag is True and isinstance(dp, int) and dp > 1:
        into.add("enable_dp_attention", True, "server args enable_dp_attention")
        settings["dp_attention"] = dp
        into.notes.append(f"enable_dp_attention with dp_size {dp}: {dp} attention-DP groups (0.5.23's attn_dp_size)")
        return
    if isinstance(dp, int) and dp > 1:
        settings["dp"] = dp
    if "dp_attention" in settings:
        into.notes.append(f"{settings['dp_attention']} attention-DP groups: each holds its own pool of the size "
                          "read, per GPU")  # fmt: skip


# --- the server ------------------------------------------------------------------------------------


def _server_info(get: Get) -> tuple[dict[str, Any], str] | None:
    """/server_info's answer (or the deprecated /get_server_info's), and its path, when it is
    SGLang's: the resolved args beside the scheduler's max_total_num_tokens."""
    for path in ("/server_info", "/get_server_info"):
        answer = get(path)
        body = answer.json()
        if isinstance(body, dict) and "max_total_num_tokens" in body and "mem_fraction_static" in body:
            return body, path
        if answer.status != 404:
            return None
    return None


def _loads(get: Get) -> dict[str, Any] | None:
    body = get("/v1/loads").json()
    if isinstance(body, dict) and isinstance(body.get("loads"), list) and "accelerator" in body:
        return body
    return None


def _sglang_metrics(answer: Answer) -> list[tuple[str, dict[str, str], float]]:
    if not answer.ok:
        return []
    return [s for s in prometheus(answer.body) if s[0].startswith("sglang:")]


def identify(get: Get) -> bool:
    """SGLang's own answers: /server_info with max_total_num_tokens and mem_fraction_static, else
    /v1/loads' per-rank loads, else /metrics with ``sglang:`` samples."""
    if _server_info(get) is not None or _loads(get) is not None:
        return True
    return bool(_sglang_metrics(get("/metrics")))


def read_server(get: Get, origin: str) -> Observation:
    """Everything an SGLang server reveals: its args as settings, the token pool per rank, the
    memory terms of each rank's start-up, live usage, and the GPU's name."""
    into = _Reading()
    settings: dict[str, SettingValue] = {}
    pools: list[Pool] = []
    memory: list[MemoryTerm] = []
    release = None
    found = _server_info(get)
    if found is not None:
        info, path = found
        source = f"GET {path}"
        settings = read_args(info, source, into)
        version = info.get("version")
        if isinstance(version, str):
            release = version
            into.add("version", version, f"{source} version")
        pools, memory = _server_pools(info, source, into)
    else:
        into.missing.append("the server's settings and pool: /server_info did not answer (give MODEL and flags)")
    loads = _loads(get)
    gpu = None
    usage = None
    if loads is not None:
        gpu, usage = _read_loads(loads, into)
        if not pools:
            pools = _loads_pool(loads, into)
    else:
        usage = _read_metrics(get("/metrics"), into, settings, pools)
    if usage is None:
        into.notes.append("no live usage: /v1/loads is absent (a release before it) and /metrics is off "
                          "(SGLang's --enable-metrics)")  # fmt: skip
    if gpu is None:
        into.missing.append("the GPU: the server does not name it (/v1/loads absent): give --gpu")
    if "model" not in settings:
        into.missing.append("the model: give MODEL")
    if "tokens" not in settings:
        into.missing.append("the context length: the server serves the model's own (context_length None) and "
                            "says not which: give --tokens")  # fmt: skip
    engine = ROCM_ENGINE if gpu is not None and _is_rocm(gpu) else ENGINE
    return Observation(engine=engine, origin=origin, release=release, settings=settings, pools=tuple(pools),
                       memory=tuple(memory), usage=usage, figures=tuple(into.figures), gpu=gpu,
                       missing=tuple(into.missing), unread=tuple(into.unread), notes=tuple(into.notes))  # fmt: skip


def _is_rocm(gpu: str) -> bool:
    return bool(re.search(r"\bAMD\b|Instinct|\bMI\d{3}", gpu))


def _server_pools(info: Mapping[str, Any], source: str, into: _Reading) -> tuple[list[Pool], list[MemoryTerm]]:
    """The token pool (top-level max_total_num_tokens: the first DP rank's, data_parallel_controller.py
    821) and rank 0's memory_usage terms; ranks that differ are named."""
    count = info.get("max_total_num_tokens")
    states = [s for s in info.get("internal_states") or () if isinstance(s, dict)]
    usage = states[0].get("memory_usage") if states else None
    usage = usage if isinstance(usage, dict) else {}
    pools: list[Pool] = []
    memory: list[MemoryTerm] = []
    where = f"{source} internal_states[0].memory_usage"
    kv_bytes = None
    if isinstance(usage.get("kvcache"), (int, float)):
        into.add("memory_usage.kvcache", usage["kvcache"], f"{where} kvcache")
        kv_bytes = _gib(usage["kvcache"])
        memory.append(MemoryTerm("kv cache", kv_bytes, f"{where} kvcache"))
    if isinstance(count, int):
        into.add("max_total_num_tokens", count, f"{source} max_total_num_tokens")
        pools.append(Pool(count, "token", bytes=kv_bytes, source=f"{source} max_total_num_tokens"))
    else:
        into.unread.append(f"{source} max_total_num_tokens {count!r}: not a token count")
    swa = usage.get("token_capacity_swa")
    if isinstance(swa, int):
        into.add("memory_usage.token_capacity_swa", swa, f"{where} token_capacity_swa")
        pools.append(Pool(swa, "token", kind="swa", source=f"{where} token_capacity_swa"))
    for key, term in (("weight", "weights"), ("startup_available", "free")):
        if isinstance(usage.get(key), (int, float)):
            into.add(f"memory_usage.{key}", usage[key], f"{where} {key}")
            memory.append(MemoryTerm(term, _gib(usage[key]), f"{where} {key}"))
    graph = usage.get("graph")
    if isinstance(graph, dict):  # 0.5.23: one figure per captured phase (decode, prefill ...)
        phases = {k: v for k, v in graph.items() if isinstance(v, (int, float))}
        for phase, value in phases.items():
            into.add(f"memory_usage.graph.{phase}", value, f"{where} graph.{phase}")
        if phases:
            memory.append(MemoryTerm("cuda graphs", sum(_gib(v) for v in phases.values()), f"{where} graph"))
    elif isinstance(graph, (int, float)):
        into.add("memory_usage.graph", graph, f"{where} graph")
        memory.append(MemoryTerm("cuda graphs", _gib(graph), f"{where} graph"))
    capacities = {
        c
        for u in (s.get("memory_usage") for s in states)
        if isinstance(u, dict)
        if isinstance(c := u.get("token_capacity"), int)
    }
    if len(capacities) > 1:
        into.notes.append(f"the DP ranks' pools differ ({', '.join(f'{c:,}' for c in sorted(capacities))} tokens): "
                          "rank 0's is compared")  # fmt: skip
    if len(states) > 1:
        into.notes.append(f"{len(states)} DP ranks, each with its own pool of this size")
    if not usage and states:
        into.unread.append(f"{source} internal_states[0]: no memory_usage kvcalc can read")
    return pools, memory


def _read_loads(loads: Mapping[str, Any], into: _Reading) -> tuple[str | None, Usage | None]:
    gpu = loads.get("accelerator")
    gpu = gpu if isinstance(gpu, str) and gpu else None
    if gpu is not None:
        into.add("accelerator", gpu, "GET /v1/loads accelerator")
    ranks = [r for r in loads["loads"] if isinstance(r, dict)]
    if not ranks:
        return gpu, None
    sums: dict[str, int] = {}
    for key in ("num_running_reqs", "num_waiting_reqs", "num_used_tokens", "max_total_num_tokens"):
        values = [r.get(key) for r in ranks]
        if all(isinstance(v, int) for v in values):
            sums[key] = sum(int(v) for v in values if v is not None)
            for index, v in enumerate(values):
                into.add(f"{key}[dp {ranks[index].get('dp_rank', index)}]", v, f"GET /v1/loads loads[{index}] {key}")
    derived: tuple[str, ...] = ()
    fraction = ranks[0].get("token_usage") if len(ranks) == 1 else None
    if isinstance(fraction, (int, float)):
        into.add("token_usage", fraction, "GET /v1/loads loads[0] token_usage")
    elif sums.get("max_total_num_tokens") and "num_used_tokens" in sums:
        fraction = sums["num_used_tokens"] / sums["max_total_num_tokens"]
        derived = ("used_fraction",)
    usage = Usage(running=sums.get("num_running_reqs"), waiting=sums.get("num_waiting_reqs"),
                  used_fraction=float(fraction) if isinstance(fraction, (int, float)) else None,
                  used_units=sums.get("num_used_tokens"), used_tokens=sums.get("num_used_tokens"),
                  derived=derived, source="GET /v1/loads")  # fmt: skip
    return gpu, usage


def _loads_pool(loads: Mapping[str, Any], into: _Reading) -> list[Pool]:
    """The pool from /v1/loads when /server_info did not answer: rank 0's max_total_num_tokens."""
    first = next((r for r in loads["loads"] if isinstance(r, dict)), {})
    count = first.get("max_total_num_tokens")
    return (
        [Pool(count, "token", source="GET /v1/loads loads[0] max_total_num_tokens")] if isinstance(count, int) else []
    )


def _read_metrics(answer: Answer, into: _Reading, settings: dict[str, SettingValue], pools: list[Pool]) -> Usage | None:
    """Usage from /metrics (--enable-metrics) where /v1/loads is absent: the first sample of each."""
    samples = _sglang_metrics(answer)
    if not samples:
        return None
    first: dict[str, float] = {}
    for name, _labels, value in samples:
        first.setdefault(name, value)
    for name, value in first.items():
        if name in _METRICS:
            into.add(name, value, f"GET /metrics {name}")
    context = first.get("sglang:context_len")
    if "tokens" not in settings and context is not None:
        settings["max_model_len"] = settings["tokens"] = int(context)
    count = first.get("sglang:max_total_num_tokens")
    if not pools and count is not None:
        pools.append(Pool(int(count), "token", source="GET /metrics sglang:max_total_num_tokens"))

    def whole(name: str) -> int | None:
        value = first.get(name)
        return None if value is None else int(value)

    return Usage(running=whole("sglang:num_running_reqs"), waiting=whole("sglang:num_queue_reqs"),
                 used_fraction=first.get("sglang:token_usage"), used_units=whole("sglang:num_used_tokens"),
                 used_tokens=whole("sglang:num_used_tokens"), source="GET /metrics")  # fmt: skip


_METRICS = ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:num_used_tokens",
            "sglang:max_total_num_tokens", "sglang:context_len", "sglang:page_size")  # fmt: skip


SERVERS: tuple[ServerReader, ...] = (
    ServerReader(
        engine=ENGINE,
        paths=("/server_info", "/get_server_info", "/v1/loads", "/metrics"),
        identify=identify,
        read=read_server,
    ),
)


# --- the start-up log ------------------------------------------------------------------------------

# Each line as SGLang prints it (the pattern searched anywhere in the line, after any timestamp or
# "[2026-02-26 16:51:17 TP0] " prefix). "Load weight end": model_runner.py 1372-1378 (``elapsed=``
# and the quantization from 0.5.x; older releases "type=..., dtype=..., avail mem=..."). "KV Cache
# is allocated": memory_pool.py 2073-2099 (0.5.23: "dtype: ..., " before #tokens and a "Full" /
# "SWA" label for hybrid pools; older releases without; MLA pools "KV size", others "K size" and
# "V size"). "Memory pool end": kv_cache_configurator.py 498-501. "Capture ... graph end":
# cuda_graph_setup.py 695-699 and 788-792 (0.5.23: "Capture decode CUDA graph end. elapsed=..., mem
# usage=..., avail mem=..."; older: "Capture cuda graph end. Time elapsed: ... s. mem usage=... GB.
# avail mem=... GB."). "max_total_num_tokens=": scheduler.py 1268-1276. "server_args=": engine.py
# 311 (0.5.23 a dict, older releases ``ServerArgs(...)``).
_LOAD = re.compile(r"Load weight end\.")
_KV = re.compile(r"(?:\b(Full|SWA) )?KV Cache (?:is allocated|VA upper bound)\.")
_KV_FIELDS = re.compile(r"#tokens: (\d+), (?:K size: (\d+(?:\.\d+)?) GB, V size: (\d+(?:\.\d+)?) GB"
                        r"|KV size: (\d+(?:\.\d+)?) GB)")  # fmt: skip
_POOL_END = re.compile(r"Memory pool end\.")
_GRAPH = re.compile(r"Capture (?:(\w+(?: \w+)?) )?(?:cuda|CUDA|\w+) graph end\.")
_SCHEDULER = re.compile(r"\bmax_total_num_tokens=(\d+)")
_ARGS = re.compile(r"\bserver_args=(ServerArgs\(|\{)")
_DTYPE = re.compile(r"Using KV cache dtype: torch\.(\w+)")
_AVAIL = re.compile(r"avail(?:able_gpu_)?\s?mem=(\d+(?:\.\d+)?) GB")
_USAGE = re.compile(r"mem usage=(\d+(?:\.\d+)?) GB")
_RANK = re.compile(r"\[[^\]]*?\b((?:DP\d+ )?(?:PP\d+ )?TP\d+(?: EP\d+)?)\]")
_ROCM = re.compile(r"\bROCm\b|\brocm\d|\bMI3\d\dX?\b|AMD Instinct")
# One key=value of the args line: ServerArgs(key=value, ...) or {'key': value, ...}.
_ARG = re.compile(r"""['"]?(\w+)['"]?\s*[=:]\s*('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|\[[^\]]*\]|[^,()\[\]{}'"]+)""")
_SCHEDULER_FIELDS = ("chunked_prefill_size", "max_prefill_tokens", "max_running_requests", "context_len")


def claims(lines: Sequence[str]) -> bool:
    """An SGLang start-up log: its pool line, its scheduler line or its server_args dump."""
    return any(_KV.search(line) or _SCHEDULER.search(line) or _ARGS.search(line) for line in lines)


def _rank(line: str) -> str:
    found = _RANK.search(line)
    return found.group(1) if found else ""


def _literal(text: str) -> Any:
    """One printed Python value of the args line: an int, float, bool, None or string."""
    text = text.strip()
    if text in ("None", "null"):
        return None
    if text in ("True", "true", "False", "false"):
        return text in ("True", "true")
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_args_line(line: str) -> dict[str, Any]:
    """The key=value pairs of a ``server_args=`` line: 0.5.23's dict as a Python literal where it is
    one, else (``ServerArgs(...)``, or a cut line) each ``key=value`` / ``'key': value`` in turn."""
    found = _ARGS.search(line)
    if found is None:
        return {}
    if found.group(1) == "{":
        try:
            value = ast.literal_eval(line[found.start(1) :].strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            value = None
        if isinstance(value, dict):
            return {str(k): v for k, v in value.items()}
    return {m.group(1): _literal(m.group(2)) for m in _ARG.finditer(line, found.end())}


@dataclass
class _LogState:
    """The first rank's lines: the rank its pool line names, and what each line gave."""

    rank: str | None = None
    pools: list[Pool] = field(default_factory=list)
    memory: dict[str, MemoryTerm] = field(default_factory=dict)
    graphs: dict[str, tuple[int, int]] = field(default_factory=dict)  # capture name -> (bytes, line)
    counts: dict[str, set[int]] = field(default_factory=dict)  # pool kind -> #tokens every rank logged
    free: tuple[int, str] | None = None
    rocm: int | None = None

    def mine(self, line: str) -> bool:
        """True for a line of the rank the reader follows (the first pool line's; a line naming no
        rank counts as it)."""
        rank = _rank(line)
        return not rank or self.rank is None or rank == self.rank


def read_log(lines: Sequence[str], origin: str) -> Observation:
    """An SGLang start-up log: the token pool (per rank, as the first rank logged it), its bytes as
    printed, the memory terms, and the settings of its server_args line."""
    into = _Reading()
    state = _LogState()
    settings: dict[str, SettingValue] = {}
    scheduler: dict[str, Any] = {}
    for index, line in enumerate(lines):
        where = line_source(index)
        if state.rocm is None and _ROCM.search(line):
            state.rocm = index
        if _ARGS.search(line):
            if not settings:
                args = parse_args_line(line)
                if "model_path" in args:
                    settings = read_args(args, f"{where} server_args", into)
                else:
                    into.unread.append(f"{where}: a server_args line kvcalc could not read: {line.strip()[:120]}")
        elif _KV.search(line):
            _kv_line(line, index, state, into)
        elif _SCHEDULER.search(line):
            if state.mine(line) and not scheduler:
                scheduler = _scheduler_line(line, where, state, into)
        elif _LOAD.search(line):
            _memory_line(line, index, "weights", _USAGE, state, into)
        elif _GRAPH.search(line):
            _graph_line(line, index, state, into)
        elif _POOL_END.search(line):
            if state.mine(line):
                _free(line, index, state, into)
        elif (found := _DTYPE.search(line)) is not None:
            dtype = found.group(1)
            into.add("Using KV cache dtype", f"torch.{dtype}", where)
            if dtype in _TORCH_DTYPES and dtype not in ("bfloat16", "float16", "float32"):
                settings.setdefault("kv_dtype", _TORCH_DTYPES[dtype])
    return _log_observation(origin, settings, scheduler, state, into)


def _kv_line(line: str, index: int, state: _LogState, into: _Reading) -> None:
    where = line_source(index)
    label = _KV.search(line)
    fields = _KV_FIELDS.search(line)
    if label is None or fields is None:
        into.unread.append(f"{where}: a KV pool line kvcalc could not read: {line.strip()[:160]}")
        return
    kind = "swa" if label.group(1) == "SWA" else "kv"
    count = int(fields.group(1))
    dtype = re.search(r"dtype: (torch\.\w+)", line)
    state.counts.setdefault(kind, set()).add(count)
    if state.rank is None:
        state.rank = _rank(line)
    if not state.mine(line) or any(p.kind == kind for p in state.pools):
        return
    if dtype is not None:
        into.add(f"{kind} dtype", dtype.group(1), where)
    if fields.group(4) is not None:
        size = _gib(fields.group(4))
        into.add(f"{kind} #tokens", count, where)
        into.add(f"{kind} KV size GB", float(fields.group(4)), where)
    else:
        size = _gib(fields.group(2)) + _gib(fields.group(3))
        into.add(f"{kind} #tokens", count, where)
        into.add(f"{kind} K size GB", float(fields.group(2)), where)
        into.add(f"{kind} V size GB", float(fields.group(3)), where)
    state.pools.append(Pool(count, "token", kind=kind, bytes=size, source=where))
    previous = state.memory.get("kv cache")
    total = size + (previous.bytes if previous is not None else 0)
    state.memory["kv cache"] = MemoryTerm(
        "kv cache", total, where if previous is None else f"{previous.source}, {where}"
    )


def _memory_line(line: str, index: int, term: str, pattern: re.Pattern[str], state: _LogState, into: _Reading) -> None:
    where = line_source(index)
    found = pattern.search(line)
    if found is None:
        into.unread.append(f"{where}: a memory line kvcalc could not read: {line.strip()[:160]}")
        return
    if state.mine(line) and term not in state.memory:
        into.add(f"{term} GB", float(found.group(1)), where)
        state.memory[term] = MemoryTerm(term, _gib(found.group(1)), where)


def _graph_line(line: str, index: int, state: _LogState, into: _Reading) -> None:
    """One capture's memory (0.5.23 logs decode and prefill captures apart: they add up)."""
    where = line_source(index)
    usage = _USAGE.search(line)
    if usage is None:
        into.unread.append(f"{where}: a CUDA graph line kvcalc could not read: {line.strip()[:160]}")
        return
    capture = _GRAPH.search(line)
    name = (capture.group(1) if capture is not None else None) or "cuda"
    if state.mine(line) and name not in state.graphs:
        into.add(f"{name} graph mem usage GB", float(usage.group(1)), where)
        state.graphs[name] = (_gib(usage.group(1)), index)
        _free(line, index, state, into)


def _free(line: str, index: int, state: _LogState, into: _Reading) -> None:
    """The memory left free: the last "avail mem" the start-up printed (after the graphs, if captured)."""
    found = _AVAIL.search(line)
    if found is None:
        into.unread.append(f"{line_source(index)}: a memory line kvcalc could not read: {line.strip()[:160]}")
        return
    state.free = (_gib(found.group(1)), line_source(index))
    into.add("avail mem GB", float(found.group(1)), line_source(index))


def _scheduler_line(line: str, where: str, state: _LogState, into: _Reading) -> dict[str, Any]:
    """scheduler.py's summary: the pool, the caps it resolved, and the memory left free."""
    pool = _SCHEDULER.search(line)
    if pool is None:
        return {}
    found: dict[str, Any] = {"max_total_num_tokens": int(pool.group(1))}
    into.add("max_total_num_tokens", found["max_total_num_tokens"], where)
    for key in _SCHEDULER_FIELDS:
        match = re.search(rf"\b{key}=(-?\d+|None)", line)
        if match is not None:
            found[key] = _literal(match.group(1))
            into.add(key, found[key], where)
    free = _AVAIL.search(line)
    if free is not None:
        state.free = (_gib(free.group(1)), where)
        into.add("available_gpu_mem GB", float(free.group(1)), where)
    found["source"] = where
    return found


def _log_observation(
    origin: str, settings: dict[str, SettingValue], scheduler: Mapping[str, Any], state: _LogState, into: _Reading
) -> Observation:
    pools = list(state.pools)
    count = scheduler.get("max_total_num_tokens")
    kv = next((p for p in pools if p.kind == "kv"), None)
    if kv is None and isinstance(count, int):
        pools.insert(0, Pool(count, "token", source=str(scheduler["source"])))
    elif kv is not None and isinstance(count, int) and count != kv.count:
        into.notes.append(f"{scheduler['source']}: max_total_num_tokens {count:,} beside the pool's #tokens "
                          f"{kv.count:,} ({kv.source})")  # fmt: skip
    context = scheduler.get("context_len")
    if "tokens" not in settings and isinstance(context, int):
        settings["max_model_len"] = settings["tokens"] = context
        into.notes.append(f"the context, {context:,} tokens, from the scheduler's context_len ({scheduler['source']})")
    for kind, counts in state.counts.items():
        if len(counts) > 1:
            into.notes.append(f"the ranks' {kind} pools differ ({', '.join(f'{c:,}' for c in sorted(counts))} "
                              f"tokens): {state.rank or 'the first rank'}'s is compared")  # fmt: skip
    memory = list(state.memory.values())
    if state.graphs:
        lines = ", ".join(line_source(i) for _b, i in state.graphs.values())
        memory.append(MemoryTerm("cuda graphs", sum(b for b, _i in state.graphs.values()), lines))
    if state.free is not None:
        memory.append(MemoryTerm("free", state.free[0], state.free[1]))
    if not pools:
        into.missing.append("the pool: the log has no 'KV Cache is allocated' or 'max_total_num_tokens=' line")
    if "model" not in settings:
        into.missing.append("the model: the log has no server_args line; give MODEL")
    if "tokens" not in settings:
        into.missing.append("the context length: no context_length in server_args and no scheduler line "
                            "(max_total_num_tokens=..., context_len=...); give --tokens")  # fmt: skip
    if "utilization" not in settings:
        into.missing.append("mem_fraction_static: the log has no server_args line; give --utilization")
    into.missing.append("the GPU: SGLang's start-up log does not name it; give --gpu")
    engine = ENGINE
    if state.rocm is not None:
        engine = ROCM_ENGINE
        into.notes.append(f"ROCm named ({line_source(state.rocm)}): SGLang's ROCm rules (sglang-rocm)")
    if state.rank:
        into.notes.append(f"per GPU: {state.rank}'s lines are read")
    return Observation(engine=engine, origin=origin, settings=settings, pools=tuple(pools), memory=tuple(memory),
                       figures=tuple(into.figures), missing=tuple(into.missing), unread=tuple(into.unread),
                       notes=tuple(into.notes))  # fmt: skip


LOGS: tuple[LogReader, ...] = (LogReader(engine=ENGINE, claims=claims, read=read_log),)


# --- kvcalc's own pool for the comparison ----------------------------------------------------------


def predicted_pools(fit: Any) -> tuple[Predicted, ...]:
    """kvcalc's SGLang plan in SGLang's units, per GPU: max_total_num_tokens tokens of the token
    pool's cell (the bytes one token takes across the layers on one rank: capacity.py SGLangPlan
    full_cell, or swa_cell when every layer slides), and the SWA pool beside it for a hybrid model
    (the Mamba/linear state pool is not read from servers or logs yet, so not predicted). SGLang
    allocates one padded page more than each count (capacity.py pool_bytes); the counts are what it
    hands out and logs."""
    from kvcalc.engines.sglang.capacity import SGLangPlan

    plan = fit.plan
    if not isinstance(plan, SGLangPlan) or plan.refusal is not None:
        return ()
    found = [Predicted(plan.max_total_tokens, plan.full_cell or plan.swa_cell, kind="kv")]
    if plan.swa_tokens is not None and plan.full_cell and plan.swa_cell:
        found.append(Predicted(plan.swa_tokens, plan.swa_cell, kind="swa"))
    return tuple(found)


POOL_RULES: dict[str, PoolRules] = {
    ENGINE: PoolRules("budget", from_fit=predicted_pools),
    ROCM_ENGINE: PoolRules("budget", from_fit=predicted_pools),
}
