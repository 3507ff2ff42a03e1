"""What a running llama-server, or a llama.cpp program's start-up log, reveals about its KV cache.

Read at llama.cpp 0c1e570 (llama-cpp-python 0.3.36's vendor/llama.cpp), each figure citing its file:

- ``GET /props`` (tools/server/server-context.cpp ``get_res_props``): ``total_slots``
  (params.n_parallel), ``default_generation_settings.n_ctx`` (``n_ctx_slot()``: llama_n_ctx_seq,
  capped by --kv-unified-per-slot and n_ctx_train), ``model_path``, ``build_info``
  ("b11312-0c1e570": common/build-info.cpp.in ``llama_build_info``). A router's bare /props
  (server-models.cpp ``get_router_props``) has ``role: router`` and an n_ctx of 0.
- ``GET /slots`` (server-context.cpp ``server_slot::to_json``, on unless --no-slots): per slot
  ``id``, ``n_ctx``, ``is_processing``, ``n_prompt_tokens`` (prompt.tokens.size(): the tokens the
  slot's cells hold, generated ones included, line 510).
- ``GET /v1/models`` (``get_res_model_info``): ``meta`` n_ctx (the slot's), n_ctx_train, n_params, size.
- ``GET /metrics`` only with --metrics (server-task.cpp ``to_metrics``): llamacpp:requests_processing,
  requests_deferred, n_tokens_max; no cache usage (removed by PR #13660).

The pool itself (cells, K/V types) is in no endpoint: only in the log. llama_n_ctx_seq is n_ctx
with a unified cache and pad(n_ctx / n_seq_max, 256) without (src/llama-context.cpp), so a
server's per-slot n_ctx is its whole cache when unified (no -np, or -kvu) and one slot's share
otherwise; no endpoint says which.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvcalc.engines.llamacpp import releases as rel
from kvcalc.engines.llamacpp.commandline import AUTO_SLOTS, CACHE_TYPES
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
from kvcalc.kinds.base import Kind

if TYPE_CHECKING:
    from kvcalc.calc.estimate import Estimate
    from kvcalc.engines.commandline import SettingValue

SOURCE = "llama.cpp 0c1e570 (llama-cpp-python 0.3.36's vendor/llama.cpp)"
POOL_MISSING = "the cache's cells and K/V types: only in the server's log; give --log FILE or kvcalc flags"
MIB_NOTE = ("llama.cpp prints MiB to two decimals (%.2f, src/llama-kv-cache.cpp): each pool's bytes are the "
            "printed figure, within 0.005 MiB (5,243 B) of the true size")  # fmt: skip

# --- the log's lines, every spelling ----------------------------------------------------------------

# "build: 8164 (b68d75165) with ..." (common/common.cpp, b4905 through b8193 logs), "main: build = 1234
# (abcdef0)" (examples' print_build_info, 2023-24), "build 11312 (0c1e57098)" (0c1e570's
# common_params_print_info, at trace verbosity), "version: ... (build 11312, commit 0c1e570)".
_BUILD = re.compile(r"\bbuild(?::|\s*=)?\s*(\d+) \(([0-9a-f]+)\)|\(build (\d+), commit ([0-9a-f]+)\)")
# src/llama-context.cpp (llama_context, 2025-) or llama_new_context_with_model (before): one value a line.
_CTX = re.compile(r"\bllama_(?:context|new_context_with_model):\s+(n_seq_max|n_ctx|n_ctx_per_seq|n_ctx_seq|n_batch|"
                  r"n_ubatch|flash_attn|kv_unified)\s*=\s*(\S+)")  # fmt: skip
# "init: kv_size = 2048, offload = 1, type_k = 'f16', ..." (b4905 llama_kv_cache_init), "llama_kv_cache_unified:
# kv_size = 16384, type_k = 'f16', type_v = 'f16', n_layer = 61, ..." (b5331).
_KV_INIT = re.compile(r"\bkv_size = (\d+),.*?type_k = '(\w+)', type_v = '(\w+)', n_layer = (\d+)")
# "llama_kv_cache_init:      CUDA0 KV buffer size =   510.00 MiB" (every build; per device).
# "llama_memory_recurrent:  CUDA0 RS buffer size" (src/llama-memory-recurrent.cpp line 124), "llama_context:
# CUDA_Host  output buffer size" (src/llama-context.cpp line 381): read as figures.
_KV_BUFFER = re.compile(r"\s(\S+)\s+(KV|RS|output) buffer size =\s*([\d.]+) MiB")
# "llama_new_context_with_model: KV self size  = 9760.00 MiB, K (f16): 5856.00 MiB, V (f16): 3904.00 MiB"
# (before 2025-05: llama_context / llama_kv_cache_unified printed it too, b4905 and b5331).
_KV_SELF = re.compile(r"KV self size\s*=\s*([\d.]+) MiB, K \((\w+)\):\s*([\d.]+) MiB, V \((\w+)\):\s*([\d.]+) MiB")
# "llama_kv_cache_unified: size = X MiB (N cells, L layers, S seqs), K (f16): ..." (2025), "llama_kv_cache: size =
# 3072.00 MiB (131072 cells,  12 layers,  1/1 seqs), K (f16): ..." (b8164-: n_seq_max/n_stream, cells per stream;
# src/llama-kv-cache.cpp line 301 at 0c1e570).
_KV_SIZE = re.compile(r"\bllama_kv_cache(?:_unified)?: size =\s*([\d.]+) MiB \(\s*(\d+) cells,\s*(\d+) layers,"
                      r"\s*(\d+)(?:/(\d+))? seqs\)"
                      r"(?:, K \((\w+)\):\s*([\d.]+) MiB, V \((\w+)\):\s*([\d.]+) MiB)?")  # fmt: skip
# "llama_kv_cache_unified_iswa: creating non-SWA KV cache, size = N cells" (2025), llama_kv_cache_iswa (b8164-;
# src/llama-kv-cache-iswa.cpp lines 83 and 100 at 0c1e570).
_ISWA = re.compile(r"\bllama_kv_cache(?:_unified)?_iswa: creating\s+(non-SWA|SWA) KV cache, size = (\d+) cells")
# "llama_kv_cache_recurrent: size = X MiB (N cells, L layers, S seqs), R (f32): ..., S (f32): ..." (2025), and
# llama_memory_recurrent's (src/llama-memory-recurrent.cpp line 133 at 0c1e570: "S seqs R rs_seq", a P part).
_RECURRENT = re.compile(
    r"\bllama_(?:memory_recurrent|kv_cache_recurrent): size =\s*([\d.]+) MiB \(\s*(\d+) cells,\s*"
    r"(\d+) layers,\s*(\d+) seqs(?:\s+(\d+) rs_seq)?\)"
)
# "load_tensors:        CUDA0 model buffer size =  1234.56 MiB" (src/llama-model.cpp line 1930), "llama_context:
# CUDA0 compute buffer size = ..." (src/llama-context.cpp line 740; llama_new_context_with_model before).
_MODEL_BUFFER = re.compile(r"\s(\S+) model buffer size =\s*([\d.]+) MiB")
_COMPUTE_BUFFER = re.compile(r"\s(\S+) compute buffer size =\s*([\d.]+) MiB")
# llama-server: "srv    load_model: initializing slots, n_slots = 4" (b8193), "initializing, n_slots = 4,
# n_ctx_slot = 8192, kv_unified = 'true'" (0c1e570 server-context.cpp line 1231); "slot   init: id  0 | task -1 |
# new slot, n_ctx = 8192" (SLT_INF before, SLT_TRC at 0c1e570: line 1281; older "new slot n_ctx_slot = N").
_SLOTS = re.compile(r"\bload_model: initializing(?: slots)?, n_slots = (\d+)(?:, n_ctx_slot = (\d+), kv_unified = "
                    r"'(\w+)')?")  # fmt: skip
# "srv    load_model: loading model '/models/x.gguf'" (server-context.cpp line 1023).
_MODEL = re.compile(r"load_model: loading model '([^']+)'")
_NEW_SLOT = re.compile(r"new slot,? n_ctx(?:_slot)? = (\d+)")
_AUTO = re.compile(r"n_parallel is set to auto, using n_parallel = (\d+) and kv_unified = (\w+)")
# "llama_kv_cache_iswa: using full-size SWA cache (ref: ...)" (src/llama-kv-cache-iswa.cpp line 77): --swa-full.
_SWA_FULL = re.compile(r"_iswa: using full-size SWA cache")
# Lines that look like a cache or memory line of llama.cpp: one none of the above reads is named.
_LOOKS = re.compile(r"KV buffer size|KV self size|RS buffer size|model buffer size|compute buffer size|"
                    r"llama_(?:kv_cache\w*|memory_recurrent): size =|creating .*KV cache|\bkv_size =")  # fmt: skip
_BANNER = re.compile(r"\bllama_(?:context|new_context_with_model|kv_cache\w*|memory_recurrent|model_load\w*):|"
                     r"\bprint_info: |\bllm_load_print_meta: |\bsrv\s+load_model: ")  # fmt: skip

# The step of llama.cpp's printed sizes (%.2f MiB): a byte count agrees when it rounds to the figure.
MIB_STEP = 10_486  # 0.01 MiB = 10,485.76 B, rounded up


def _dtype(name: str) -> str:
    return CACHE_TYPES.get(name, name)


@dataclass
class _Log:
    """What a log said, gathered line by line."""

    figures: list[Figure] = field(default_factory=list)
    pools: list[Pool] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ctx: dict[str, str] = field(default_factory=dict)
    types: tuple[str, str] | None = None
    build: int | None = None
    commit: str | None = None
    server: bool = False
    slots: int | None = None
    slot_ctx: int | None = None
    swa_full: bool = False
    model: str | None = None
    unified: bool | None = None
    kv_init: tuple[int, int] | None = None  # (kv_size, line)
    pending: tuple[str, int, int] | None = None  # an iSWA "creating" line's (kind, cells, line) awaiting its size
    weights: dict[str, int] = field(default_factory=dict)
    compute: dict[str, int] = field(default_factory=dict)

    def figure(self, name: str, value: int | float | str | bool | None, index: int) -> None:
        self.figures.append(Figure(name, value, line_source(index)))


# Colour codes whose escape character was lost on the way (a log pasted into a GitHub issue keeps "[32mI [0m").
_BARE_COLOUR = re.compile(r"\[[0-9;]{1,8}m")


# Ollama's own log lines (Go's slog: "time=... level=INFO source=server.go:123 msg=..."): its runner prints
# llama.cpp's lines too, but the log is Ollama's, read by its own reader (Ollama's rules apply).
_OLLAMA = re.compile(r"\blevel=\w+ source=\S+\.go:\d+ ")


def _claims(lines: Sequence[str]) -> bool:
    if any(_OLLAMA.search(line) for line in lines):
        return False
    return any(_BANNER.search(_BARE_COLOUR.sub("", line)) for line in lines)


def _read_line(log: _Log, index: int, line: str) -> bool:
    """Reads one line into ``log``; whether any spelling matched."""
    if (m := _BUILD.search(line)) and log.build is None:
        log.build, log.commit = int(m.group(1) or m.group(3)), m.group(2) or m.group(4)
        log.figure("build", log.build, index)
        return True
    if m := _CTX.search(line):
        log.ctx[m.group(1)] = m.group(2)
        log.figure(m.group(1), m.group(2), index)
        return True
    if _SWA_FULL.search(line):
        log.swa_full = True
        log.figure("swa_full", True, index)
        return True
    if m := _ISWA.search(line):
        _unsized(log)
        kind = "kv" if m.group(1) == "non-SWA" else "swa"
        log.pending = (kind, int(m.group(2)), index)
        log.figure(f"{kind} cells (iSWA)", int(m.group(2)), index)
        return True
    if m := _KV_SIZE.search(line):
        _size_line(log, index, m)
        return True
    if m := _RECURRENT.search(line):
        cells, size = int(m.group(2)), printed_bytes(m.group(1), "MiB")
        log.pools.append(
            Pool(cells, "cell", kind="recurrent", bytes=size, source=line_source(index), bytes_step=MIB_STEP)
        )
        log.figure("recurrent size MiB", float(m.group(1)), index)
        log.figure("recurrent cells", cells, index)
        log.figure("recurrent layers", int(m.group(3)), index)
        log.notes.append(f"recurrent state: {cells:,} cells, one per sequence (llama_memory_recurrent's mem_size)")
        if int(m.group(5) or 0):
            log.notes.append(f"n_rs_seq {m.group(5)}: each recurrent cell keeps 1 + {m.group(5)} states (rollback "
                             "snapshots, src/llama-memory-recurrent.cpp line 101); kvcalc models one")  # fmt: skip
        return True
    if m := _KV_INIT.search(line):
        log.kv_init = (int(m.group(1)), index)
        log.types = (m.group(2), m.group(3))
        log.figure("kv_size", int(m.group(1)), index)
        return True
    if m := _KV_SELF.search(line):
        _self_line(log, index, m)
        return True
    if m := _KV_BUFFER.search(line):
        log.figure(f"{m.group(1)} {m.group(2)} buffer MiB", float(m.group(3)), index)
        return True
    for pattern, table, what in ((_MODEL_BUFFER, log.weights, "model"), (_COMPUTE_BUFFER, log.compute, "compute")):
        if m := pattern.search(line):
            table[m.group(1)] = table.get(m.group(1), 0) + printed_bytes(m.group(2), "MiB")
            log.figure(f"{m.group(1)} {what} buffer MiB", float(m.group(2)), index)
            return True
    return _server_line(log, index, line)


def _size_line(log: _Log, index: int, m: re.Match[str]) -> None:
    """One cache's "size = X MiB (N cells, L layers, S/T seqs)": cells per stream, bytes for all."""
    kind, log.pending = (log.pending or ("kv", 0, 0))[0], None
    per_stream, streams = int(m.group(2)), int(m.group(5) or 1)
    size = printed_bytes(m.group(1), "MiB")
    if m.group(6):
        log.types = (m.group(6), m.group(8))
    for name, value in (("size MiB", float(m.group(1))), ("cells", per_stream), ("layers", int(m.group(3))),
                        ("n_seq_max", int(m.group(4))), ("streams", streams)):  # fmt: skip
        log.figure(f"{kind} {name}", value, index)
    if any(p.kind == kind for p in log.pools):
        log.notes.append(f"a second {kind} cache at {line_source(index)} (a draft model's context?): the first is "
                         "the one compared")  # fmt: skip
        return
    if streams > 1:
        log.notes.append(f"{kind}: {per_stream:,} cells in each of {streams} streams (one per sequence): "
                         f"{per_stream * streams:,} cells")  # fmt: skip
    log.pools.append(Pool(per_stream * streams, "cell", kind=kind, bytes=size, source=line_source(index),
                          bytes_step=MIB_STEP))  # fmt: skip


def _unsized(log: _Log) -> None:
    """An iSWA "creating ... size = N cells" line whose size line never came: its cells, no bytes."""
    if log.pending is not None:
        kind, cells, index = log.pending
        log.pending = None
        if not any(p.kind == kind for p in log.pools):
            log.pools.append(Pool(cells, "cell", kind=kind, source=line_source(index)))
            log.notes.append(f"{kind}: {cells:,} cells ({line_source(index)}) with no size line after: bytes unread")


def _self_line(log: _Log, index: int, m: re.Match[str]) -> None:
    """The old total: "KV self size = X MiB, K (f16): A MiB, V (f16): B MiB", its cells from kv_size."""
    log.types = (m.group(2), m.group(4))
    log.figure("KV self size MiB", float(m.group(1)), index)
    if log.pools:
        return
    if log.kv_init is not None:
        cells = log.kv_init[0]
    elif "n_ctx" in log.ctx:
        cells = int(log.ctx["n_ctx"])
        log.notes.append(f"this build prints no kv_size: the cache's cells are its n_ctx, {cells:,}")
    else:
        log.unread.append(f"{line_source(index)}: {m.group(0)!r}: no kv_size or n_ctx before it gives its cells")
        return
    log.pools.append(Pool(cells, "cell", bytes=printed_bytes(m.group(1), "MiB"), source=line_source(index),
                          bytes_step=MIB_STEP))  # fmt: skip


def _server_line(log: _Log, index: int, line: str) -> bool:
    if m := _SLOTS.search(line):
        log.server, log.slots = True, int(m.group(1))
        log.figure("n_slots", log.slots, index)
        if m.group(3):
            log.unified, log.slot_ctx = m.group(3) == "true", int(m.group(2))
            log.figure("n_ctx_slot", log.slot_ctx, index)
        return True
    if m := _MODEL.search(line):
        log.server, log.model = True, m.group(1)
        log.figure("model", log.model, index)
        return True
    if m := _AUTO.search(line):
        log.server, log.slots, log.unified = True, int(m.group(1)), m.group(2) == "true"
        log.figure("n_parallel (auto)", log.slots, index)
        return True
    if m := _NEW_SLOT.search(line):
        log.server = True
        if not any(f.name == "slot n_ctx" for f in log.figures):
            log.figure("slot n_ctx", int(m.group(1)), index)
        return True
    return False


def _read_log(lines: Sequence[str], origin: str) -> Observation:
    log = _Log()
    for index, raw in enumerate(lines):
        line = _BARE_COLOUR.sub("", raw)
        if not _read_line(log, index, line) and _LOOKS.search(line):
            log.unread.append(f"{line_source(index)}: {line.strip()!r}")
    _unsized(log)
    if not any(p.kind == "kv" for p in log.pools) and log.kv_init is not None:
        cells, index = log.kv_init
        log.pools.append(Pool(cells, "cell", source=line_source(index)))
        log.notes.append(f"kv: kv_size {cells:,} cells ({line_source(index)}) with no size line after: bytes unread")
    return _log_observation(log, origin)


def _log_observation(log: _Log, origin: str) -> Observation:
    settings: dict[str, SettingValue] = {}
    missing: list[str] = ["the GPU: give --gpu"]
    if log.model:
        settings["model"] = log.model
    else:
        missing.append("the model: give MODEL")
    unified = log.unified if log.unified is not None else _truthy(log.ctx.get("kv_unified"))
    n_ctx, n_seq = _int(log.ctx.get("n_ctx")), _int(log.ctx.get("n_seq_max")) or log.slots
    per_seq = _int(log.ctx.get("n_ctx_per_seq"))
    if n_ctx and not n_seq and per_seq and not unified and n_ctx % per_seq == 0:
        n_seq = n_ctx // per_seq
        log.notes.append(f"sequences: n_ctx / n_ctx_per_seq = {n_seq} (the log has no n_seq_max line)")
    engine = "llama-server" if log.server and unified else "llama.cpp"
    if n_ctx and n_seq:
        settings["batch"], settings["tokens"] = n_seq, n_ctx // n_seq
        if n_ctx % n_seq:
            log.notes.append(f"n_ctx {n_ctx:,} over {n_seq} sequences leaves {n_ctx % n_seq} cells over")
    elif log.slot_ctx and log.slots:
        # 0c1e570's slot line alone (its default verbosity): n_ctx_slot is the whole cache when unified.
        settings["batch"], settings["tokens"] = log.slots, log.slot_ctx // log.slots if unified else log.slot_ctx
        log.notes.append(f"context from the slot line: {log.slots} slots, n_ctx_slot {log.slot_ctx:,} "
                         f"({'one unified cache of it' if unified else 'each its own'})")  # fmt: skip
    else:
        missing.append("the context and sequences (no n_ctx / n_seq_max lines): give --tokens and --batch")
    if engine == "llama.cpp" and unified:
        settings["kv_unified"] = True
    if log.types:
        settings["k_dtype"], settings["v_dtype"] = _dtype(log.types[0]), _dtype(log.types[1])
    # As commandline.py: only a batch size that is not llama.cpp's default (common/common.h) is a setting.
    for key, knob, default in (("n_ubatch", "ubatch", 512), ("n_batch", "n_batch", 2048)):
        if (value := _int(log.ctx.get(key))) is not None and value != default:
            settings[knob] = value
    if log.swa_full:
        settings["swa_full"] = True
    if log.build is not None:
        engine = f"{engine}@b{log.build}"
    else:
        missing.append(f"the llama.cpp build (no 'build: N' line): kvcalc applies b{rel.CURRENT}'s rules")
    if not log.pools:
        missing.append("the cache's size lines (llama_kv_cache: size = ...): none read; llama.cpp 0c1e570 prints "
                       "them only at -lv 4 (common/log.cpp logs libllama's INFO at trace level)")  # fmt: skip
    log.notes.append(MIB_NOTE)
    return Observation(
        engine=engine, origin=origin, release=f"b{log.build} ({log.commit})" if log.build else None,
        settings=settings, pools=tuple(log.pools), memory=_memory(log), figures=tuple(log.figures),
        missing=tuple(missing), unread=tuple(log.unread), notes=tuple(log.notes),
    )  # fmt: skip


def _memory(log: _Log) -> tuple[MemoryTerm, ...]:
    """Weights and the compute buffers (the activation peak) on the devices, CPU buffers left out
    unless the log has no device ones (a CPU run)."""
    terms = []
    for name, table in (("weights", log.weights), ("activation peak", log.compute)):
        device = {k: v for k, v in table.items() if not re.search(r"CPU|Host", k)} or table
        if device:
            where = ", ".join(sorted(device))
            terms.append(MemoryTerm(name, sum(device.values()), f"log: {where} buffers (MiB to 2 decimals)"))
            if len(device) > 1:
                log.notes.append(f"{name}: the sum over {where}; llama.cpp splits layers across them")
    return tuple(terms)


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def _truthy(text: str | None) -> bool:
    return text in ("true", "1")


# --- llama-server's endpoints -----------------------------------------------------------------------


def _identify(get: Get) -> bool:
    props = get("/props").json()
    if not isinstance(props, dict) or "default_generation_settings" not in props:
        return False
    return "total_slots" in props or props.get("role") == "router" or str(props.get("build_info", "")).startswith("b")


_BUILD_INFO = re.compile(r"^b(\d+)-([0-9a-f]+)")


def _read_server(get: Get, origin: str) -> Observation:
    props: dict[str, Any] = get("/props").json() or {}
    figures: list[Figure] = []
    notes: list[str] = []
    missing: list[str] = [POOL_MISSING, "the GPU: give --gpu"]
    settings: dict[str, SettingValue] = {}

    def fig(name: str, value: Any, where: str) -> None:
        figures.append(Figure(name, value, where))

    for key in ("total_slots", "model_path", "build_info", "role"):
        if key in props:
            fig(key, props[key], f"GET /props {key}")
    generation = props.get("default_generation_settings") or {}
    n_ctx = generation.get("n_ctx") if isinstance(generation, dict) else None
    if n_ctx is None and "n_ctx" in props:  # early 2024 builds answered n_ctx at the top
        n_ctx, where = props["n_ctx"], "GET /props n_ctx"
    else:
        where = "GET /props default_generation_settings.n_ctx"
    if n_ctx is not None:
        fig("n_ctx (per slot)", n_ctx, where)
    build = None
    if m := _BUILD_INFO.match(str(props.get("build_info", ""))):
        build = int(m.group(1))
    slots = props.get("total_slots")
    if props.get("role") == "router":
        notes.append("a llama-server router: each model runs in its own server; ask one with ?model= (its /props)")
        missing.append("the model's server: a router's /props has no context (n_ctx 0)")
    model_path = props.get("model_path")
    if isinstance(model_path, str) and model_path not in ("", "none"):
        settings["model"] = model_path
    else:
        missing.append("the model: give MODEL")
    models = _models(get("/v1/models"), fig)
    usage = _usage(get("/slots"), get("/metrics"), fig, notes)
    engine = "llama-server"
    if isinstance(n_ctx, int) and n_ctx > 0 and isinstance(slots, int) and slots > 0:
        engine = _server_settings(settings, n_ctx, slots, build, models, notes, missing)
    elif props.get("role") != "router":
        missing.append("the context and slots (/props has no n_ctx or total_slots): give --tokens and --batch")
    if build is not None:
        engine = f"{engine}@b{build}"
    else:
        missing.append(f"the llama.cpp build (/props has no build_info): kvcalc applies b{rel.CURRENT}'s rules")
    if usage is not None and usage.used_tokens is not None and "tokens" in settings:
        cells = _context_cells(settings)
        usage = Usage(usage.running, usage.waiting, usage.used_tokens / cells, None, usage.used_tokens,
                      derived=(*usage.derived, "used_fraction"), source=usage.source)  # fmt: skip
    return Observation(
        engine=engine, origin=origin, release=str(props["build_info"]) if "build_info" in props else None,
        settings=settings, usage=usage, figures=tuple(figures), missing=tuple(missing), notes=tuple(notes),
    )  # fmt: skip


def _context_cells(settings: Mapping[str, SettingValue]) -> int:
    tokens, batch = settings["tokens"], settings.get("batch", 1)
    assert isinstance(tokens, int) and isinstance(batch, int)
    return tokens * batch


def _server_settings(settings: dict[str, SettingValue], n_ctx: int, slots: int, build: int | None,
                     models: Mapping[str, Any], notes: list[str], missing: list[str]) -> str:  # fmt: skip
    """tokens and batch from the per-slot n_ctx and total_slots, and the engine they imply. From
    the streams (b5913) llama_n_ctx_seq is the whole cache when unified, a slot's share when not;
    no endpoint says which: a plain server (4 slots: -np auto) is unified, another count is -np P."""
    settings["batch"] = slots
    if n_ctx == models.get("n_ctx_train"):
        notes.append(f"each slot's n_ctx equals the model's training context ({n_ctx:,}): llama-server caps it "
                     "there (n_ctx_slot), so the cache may be larger")  # fmt: skip
    if build is not None and build <= rel.UNIFIED_UNTIL:
        settings["tokens"] = n_ctx
        notes.append(f"llama.cpp b{build} keeps one cache of n_ctx = {n_ctx:,} x {slots} slots cells")
        return "llama.cpp"
    if slots == AUTO_SLOTS:
        settings["tokens"] = max(n_ctx // slots, 1)
        notes.append(f"4 slots: taken as llama-server's default (no -np), one unified cache of the slot's n_ctx, "
                     f"{n_ctx:,} cells (llama_n_ctx_seq is n_ctx when unified, src/llama-context.cpp): "
                     f"{settings['tokens']:,} tokens a slot")  # fmt: skip
        missing.append("whether the 4 slots share one cache (taken: unified, no -np; -np 4 without -kvu gives "
                       "each its own n_ctx): give the command line or the log")  # fmt: skip
        return "llama-server"
    settings["tokens"] = n_ctx
    notes.append(f"{slots} slots (-np {slots}): taken as separate streams of {n_ctx:,} cells each, "
                 f"{n_ctx * slots:,} in all (n_ctx x total_slots)")  # fmt: skip
    missing.append(f"whether the {slots} slots share one cache (-kvu: {n_ctx:,} cells in all, taken: not): "
                   "give the command line or the log")  # fmt: skip
    return "llama.cpp"


def _models(answer: Answer, fig: Any) -> dict[str, Any]:
    body = answer.json()
    data = body.get("data") if isinstance(body, dict) else None
    meta = data[0].get("meta") if isinstance(data, list) and data and isinstance(data[0], dict) else None
    if not isinstance(meta, dict):
        return {}
    for key in ("n_ctx", "n_ctx_train", "n_params", "size", "ftype"):
        if key in meta:
            fig(key, meta[key], f"GET /v1/models data[0].meta.{key}")
    return meta


def _usage(slots: Answer, metrics: Answer, fig: Any, notes: list[str]) -> Usage | None:
    """Busy slots and the tokens each slot's cells hold (/slots), the deferred requests (/metrics)."""
    running = waiting = used = None
    sources: list[str] = []
    derived: tuple[str, ...] = ()
    body = slots.json()
    if isinstance(body, list):
        running = sum(1 for s in body if isinstance(s, dict) and s.get("is_processing"))
        used = sum(int(s.get("n_prompt_tokens", 0)) for s in body if isinstance(s, dict))
        fig("slots processing", running, "GET /slots is_processing")
        fig("tokens held", used, "GET /slots n_prompt_tokens (summed)")
        derived, sources = ("used_tokens",), ["GET /slots"]
        notes.append("tokens held: each slot's n_prompt_tokens (its prompt and generated tokens, which stay "
                     "cached after the request ends), summed")  # fmt: skip
    else:
        notes.append(f"GET /slots: {slots.status or slots.body} (--no-slots?): no per-slot usage")
    if metrics.ok:
        for name, _labels, value in prometheus(metrics.body):
            if name in ("llamacpp:requests_processing", "llamacpp:requests_deferred", "llamacpp:n_tokens_max"):
                fig(name, value, f"GET /metrics {name}")
                if name == "llamacpp:requests_deferred":
                    waiting = int(value)
                elif name == "llamacpp:requests_processing" and running is None:
                    running = int(value)
        sources.append("GET /metrics")
    if not sources:
        return None
    return Usage(running=running, waiting=waiting, used_tokens=used, derived=derived, source=", ".join(sources))


# --- kvcalc's own pool -----------------------------------------------------------------------------


def _from_estimate(estimate: Estimate) -> tuple[Predicted, ...]:
    """The cells of each pool kind as kvcalc's llama.cpp rules lay them out: a group's ``slots`` are
    its cells for the whole batch (pad(n_ctx, 256) full, pad(min(.., W + n_ubatch), 256) sliding,
    per stream x streams: rules.py ``batch_slots``); the bytes all its layers' rows together. A
    recurrent group holds one cell per sequence (llama_memory_recurrent's mem_size = n_seq_max)."""
    kinds: dict[str, tuple[int, int]] = {}
    for g in estimate.groups:
        if g.state_bytes and not g.bytes_per_token:
            name, cells = "recurrent", estimate.workload.batch
        else:
            name, cells = ("swa" if g.kind in (Kind.SLIDING, Kind.CHUNKED) else "kv"), g.slots
        if name in kinds and kinds[name][0] != cells:
            name = f"{name} ({g.kind})"
        count, size = kinds.get(name, (cells, 0))
        kinds[name] = (count, size + g.bytes)
    return tuple(Predicted(count, size // count if count else 0, kind=name) for name, (count, size) in kinds.items())


SERVERS = (ServerReader("llama-server", ("/props", "/slots", "/v1/models", "/metrics"), _identify, _read_server),)
LOGS = (LogReader("llama.cpp", _claims, _read_log),)
POOL_RULES = {"llama.cpp": PoolRules("context", from_estimate=_from_estimate),
              "llama-server": PoolRules("context", from_estimate=_from_estimate)}  # fmt: skip
