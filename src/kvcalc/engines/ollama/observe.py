"""What a running Ollama server, or its log, reveals about its KV pool (github.com/ollama/ollama, read
at v0.32.15 b7871fc unless a line names another tag).

The server: ``GET /api/version`` (``{"version": "0.32.15"}``: server/routes.go, every release) and
``GET /api/ps`` (server/routes.go PsHandler; api/types.go ProcessModelResponse): each loaded model's
name, ``size`` and ``size_vram`` (bytes) and, from v0.10.0 (ollama/ollama #11331),
``context_length``: num_ctx per slot, not the whole pool (v0.32.15 llm/llama_server.go
``ContextLength() { return s.options.NumCtx }`` while the launch line says ``-c NumCtx*numParallel``;
v0.10.0 .. v0.11.4 server/routes.go ``v.Options.NumCtx / v.numParallel``). The slots
(OLLAMA_NUM_PARALLEL), the cache type and flash attention are not revealed, nor any live request.
``POST /api/show`` would name the model's GGUF keys but is a POST: never sent.

The log: Ollama's own lines (log/slog text), in each release's spelling: ``Listening on ... (version
X)``, ``server config env="map[OLLAMA_NUM_PARALLEL:4 ...]"``, the runner's launch line (``starting
llama server`` with ``--ctx-size NumCtx*numParallel --parallel N`` to v0.11.4, ``starting runner``
with none from v0.11.5, ``starting llama-server`` with ``-c N -np P`` from v0.30.0), the runner's
``load request="{... Parallel:P ... KvSize:N KvCacheType:T ...}"`` (v0.11.5 .. v0.29), the ``kv
cache`` bytes per device (ml/backend.go, v0.11.5 .. v0.29) and the memory estimate (``offload to
cuda`` in llm/memory.go to v0.10, ``offload library=cuda`` in llm/server.go v0.11). The embedded
llama.cpp lines (``llama_kv_cache ...``) are llama.cpp's reader's to read, not this one's.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

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
    line_source,
    printed_bytes,
)
from kvcalc.engines.ollama import DEFAULT_VERSION, OLLAMA_VERSIONS
from kvcalc.errors import KvcalcError

if TYPE_CHECKING:
    from kvcalc.calc.estimate import Estimate
    from kvcalc.engines.commandline import Settings

TAG = "v0.32.15"
Release = tuple[int, int, int]
# ProcessModelResponse.context_length from v0.10.0 (API/CLI context enhancements, ollama/ollama #11331).
CONTEXT_IN_PS = (0, 10, 0)
# The runner's launch line carried --ctx-size and --parallel up to v0.11.4 (llm/server.go
# NewLlamaServer); from v0.11.5 the runner takes them in its load request; from v0.30.0 llama-server's.
LLAMA_SERVER = (0, 30, 0)

_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")


def release_of(text: str) -> Release | None:
    """An Ollama version as /api/version and its log print it ("0.32.15", "0.5.4-0-g2ddc32d-dirty")."""
    match = _VERSION.match(text.strip().removeprefix("v"))
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def engine_for(release: Release | None, notes: list[str]) -> str:
    """``ollama@X.Y.Z`` for a release kvcalc models (its rules differ by release), else ``ollama`` with
    a note that the default release's rules stand in."""
    if release is None:
        notes.append(f"the Ollama release is not known: kvcalc compares with ollama@{DEFAULT_VERSION}'s rules")
        return "ollama"
    tag = ".".join(map(str, release))
    if f"{release[0]}.{release[1]}" in OLLAMA_VERSIONS:
        return f"ollama@{tag}"
    notes.append(f"Ollama {tag} is not a release kvcalc models ({OLLAMA_VERSIONS[0]} .. {OLLAMA_VERSIONS[-1]}): "
                 f"compared with ollama@{DEFAULT_VERSION}'s rules, which may differ")  # fmt: skip
    return "ollama"


# --- the server ---------------------------------------------------------------------------------------


def _version(get: Get) -> str | None:
    body = get("/api/version").json()
    if isinstance(body, dict) and set(body) == {"version"} and isinstance(body["version"], str):
        return body["version"]
    return None


def identify(get: Get) -> bool:
    """Ollama's ``/api/version`` (``{"version": ...}`` alone) and ``/api/ps`` (``{"models": [...]}``)."""
    if _version(get) is None:
        return False
    body = get("/api/ps").json()
    return isinstance(body, dict) and isinstance(body.get("models"), list)


_PS_FIELDS = ("name", "model", "size", "size_vram", "context_length", "expires_at", "digest")
_DETAILS = ("format", "family", "parameter_size", "quantization_level")


def read_server(get: Get, origin: str) -> Observation:
    notes: list[str] = []
    missing: list[str] = []
    figures: list[Figure] = []
    version = _version(get)
    if version is not None:
        figures.append(Figure("version", version, "GET /api/version version"))
    release = release_of(version) if version else None
    engine = engine_for(release, notes)
    answer: Answer = get("/api/ps")
    body = answer.json()
    models = body.get("models") if isinstance(body, dict) else None
    if not isinstance(models, list):
        return Observation(engine=engine, origin=origin, release=version, figures=tuple(figures), notes=tuple(notes),
                           unread=(f"GET /api/ps: no list of models (HTTP {answer.status})",),
                           missing=("the loaded model and its num_ctx: GET /api/ps did not answer",))  # fmt: skip
    settings: Settings = {}
    memory: list[MemoryTerm] = []
    unread: list[str] = []
    if not models:
        missing.append("a loaded model: GET /api/ps lists none (ollama run MODEL loads one; then check again)")
    else:
        if len(models) > 1:
            names = ", ".join(str(m.get("name")) for m in models if isinstance(m, dict))
            notes.append(f"{len(models)} models are loaded ({names}): kvcalc reads the first GET /api/ps lists "
                         "(the one that stays loaded longest), and the others share the GPUs")  # fmt: skip
        _read_loaded(models[0], release, settings, figures, memory, notes, missing, unread)
    missing.append("OLLAMA_NUM_PARALLEL (the slots, each of num_ctx cells): not revealed; give --batch or the ollama "
                   "serve line")  # fmt: skip
    missing.append("OLLAMA_KV_CACHE_TYPE and OLLAMA_FLASH_ATTENTION: not revealed; give --kv-dtype and "
                   "--flash-attention, or the ollama serve line")  # fmt: skip
    missing.append("the GPU: not revealed; give --gpu")
    notes.append("Ollama exports no running or waiting requests and no KV usage: GET /api/ps lists the loaded "
                 "models only")  # fmt: skip
    return Observation(engine=engine, origin=origin, release=version, settings=settings, memory=tuple(memory),
                       figures=tuple(figures), missing=tuple(missing), unread=tuple(unread),
                       notes=tuple(notes))  # fmt: skip


def _read_loaded(entry: object, release: Release | None, settings: Settings, figures: list[Figure],
                 memory: list[MemoryTerm], notes: list[str], missing: list[str],
                 unread: list[str]) -> None:  # fmt: skip
    """One /api/ps model: its figures, num_ctx (``tokens``) and its sizes."""
    if not isinstance(entry, dict):
        unread.append(f"GET /api/ps models[0]: not an object ({entry!r:.60})")
        return
    for key in _PS_FIELDS:
        if key in entry:
            figures.append(Figure(key, _scalar(entry[key]), f"GET /api/ps models[0].{key}"))
    details = entry.get("details")
    if isinstance(details, dict):
        for key in _DETAILS:
            if key in details:
                figures.append(Figure(key, _scalar(details[key]), f"GET /api/ps models[0].details.{key}"))
    name = entry.get("name")
    missing.append(f"the model: {name} is Ollama's name for it, which kvcalc cannot open; give MODEL (its GGUF, "
                   "Hub id or preset). POST /api/show (not sent: kvcalc makes GET requests only) would give its "
                   "GGUF keys")  # fmt: skip
    context = entry.get("context_length")
    if isinstance(context, int) and not isinstance(context, bool) and context > 0:
        settings["tokens"] = context
        notes.append(f"context_length {context:,} is num_ctx per slot (llm/llama_server.go ContextLength, {TAG}); the "
                     "pool is num_ctx x OLLAMA_NUM_PARALLEL cells, padded by the bundled llama.cpp")  # fmt: skip
    elif release is not None and release < CONTEXT_IN_PS:
        missing.append("num_ctx: GET /api/ps names it from Ollama 0.10.0; give --tokens")
    else:
        missing.append("num_ctx: GET /api/ps gives no context_length; give --tokens")
    for key in ("size", "size_vram"):
        value = entry.get(key)
        if not (isinstance(value, int) and not isinstance(value, bool)):
            unread.append(f"GET /api/ps models[0].{key}: not a byte count ({value!r:.40})")
    notes.append("size and size_vram are everything the model holds (weights, KV cache, compute buffers), in all and "
                 "on the GPUs: from v0.30 the sums of llama-server's 'buffer size' lines (llm/llama_server.go "
                 "MemorySize), before that Ollama's own estimate; they are not the KV cache alone")  # fmt: skip


def _scalar(value: object) -> int | float | str | bool | None:
    if value is None or isinstance(value, (int, float, str, bool)):
        return value
    return str(value)


# --- the log ------------------------------------------------------------------------------------------

# server/routes.go Serve: slog.Info(fmt.Sprintf("Listening on %s (version %s)", ln.Addr(), version.Version)).
_LISTENING = re.compile(r'msg="Listening on \S+ \(version ([^)\s]+)\)"')
# server/routes.go Serve: slog.Info("server config", "env", envconfig.Values()) (a Go map printed).
_CONFIG = re.compile(r'msg="server config" env="map\[(.*)\]"')
_ENV_ITEM = re.compile(r"(OLLAMA_[A-Z_]+):([^\s\]]*)")
# llm/server.go "starting llama server" (v0.5 .. v0.11.4), "starting runner" (v0.11.5 .. v0.29),
# llm/llama_server.go "starting llama-server" (v0.30 ..): slog.Info(msg, "cmd", cmd).
_LAUNCH = re.compile(r'msg="starting (llama server|runner|llama-server)" cmd="(.*)"')
# runner/llamarunner and runner/ollamarunner runner.go: slog.Info("load", "request", req) (v0.11.5 .. v0.29).
_LOAD = re.compile(r'msg=load request="\{(.*)\}"')
_LOAD_FIELD = re.compile(r"\b(Operation|Parallel|BatchSize|FlashAttention|KvSize|KvCacheType):(\S*)")
# ml/backend.go BackendMemory.Log: "kv cache" device=CUDA0 size="1.0 GiB" (format.HumanBytes2, v0.11.5 .. v0.29).
_KV_DEVICE = re.compile(r'msg="kv cache" device=(\S+) size="([\d.]+) ([KMGT]i?B|B)"')
# llm/memory.go MemoryEstimate.log (to v0.10: msg="offload to cuda"), llm/server.go (v0.11: msg=offload library=cuda).
_OFFLOAD = re.compile(r'msg=(?:"offload to [^"]+"|offload)\s')
_MEMORY_FIELD = re.compile(r'memory\.(required\.kv|required\.full|weights\.total|graph\.full|available)="?\[?([\d.]+) '
                           r'([KMGT]i?B|B)')  # fmt: skip
_OFFLOAD_TERMS = {"required.kv": "kv cache", "weights.total": "weights", "graph.full": "activation peak"}
# Any line of Ollama's own that names the pool: it must parse, or it is named in unread.
_POOLISH = re.compile(r"msg=(?:\"starting (?:llama server|runner|llama-server)\"|load request|\"kv cache\"|"
                      r"\"offload to |offload )")  # fmt: skip


def claims(lines: Sequence[str]) -> bool:
    """Ollama's own banner, its server config, its runner's launch or load lines or its memory estimate."""
    return any(_LISTENING.search(line) or _CONFIG.search(line) or _LAUNCH.search(line) or _LOAD.search(line)
               or (_OFFLOAD.search(line) and "memory.required" in line) for line in lines)  # fmt: skip


class _LogState:
    """What the lines said so far; the later line of each kind wins (a reload replaces a load)."""

    def __init__(self) -> None:
        self.version: str | None = None
        self.env: dict[str, tuple[str, int]] = {}
        self.launch: tuple[dict[str, str], int, str] | None = None
        self.launch_settings: Settings = {}
        self.load: tuple[dict[str, str], int] | None = None
        self.kv_devices: dict[str, tuple[int, int]] = {}
        self.figures: list[Figure] = []
        self.memory: dict[str, MemoryTerm] = {}
        self.notes: list[str] = []
        self.unread: list[str] = []


def read_log(lines: Sequence[str], origin: str) -> Observation:
    state = _LogState()
    for index, line in enumerate(lines):
        _read_line(line, index, state)
    release = release_of(state.version) if state.version else None
    notes = state.notes
    engine = engine_for(release, notes)
    settings, pools, missing = _settings_and_pool(state, release)
    observation = Observation(engine=engine, origin=origin, release=state.version, settings=settings, pools=pools,
                              memory=tuple(state.memory.values()), figures=tuple(state.figures),
                              missing=tuple(missing), unread=tuple(state.unread), notes=tuple(notes))  # fmt: skip
    return _with_llama_cpp_lines(observation, lines, origin)


def _with_llama_cpp_lines(observation: Observation, lines: Sequence[str], origin: str) -> Observation:
    """The bundled llama.cpp's own cache lines, where the log holds them (Ollama runs its runner at
    verbosity 4): the cells it allocated (padded) and their bytes replace the context Ollama asked
    for, and its unread lines join Ollama's."""
    from dataclasses import replace

    from kvcalc.engines.llamacpp.observe import LOGS as LLAMA_CPP_LOGS

    embedded = LLAMA_CPP_LOGS[0].read(lines, origin)
    if not embedded.pools:
        return observation
    asked = observation.pool()
    asked_for = f" (Ollama asked for {asked.count:,})" if asked is not None else ""
    note = f"the pools are the bundled llama.cpp's own llama_kv_cache lines: the cells it allocated{asked_for}"
    notes = (*(n for n in observation.notes if "llama_kv_cache lines" not in n), note)
    memory = (*observation.memory, *(t for t in embedded.memory if observation.term(t.name) is None))
    return replace(observation, pools=embedded.pools, memory=memory, figures=(*observation.figures,
                   *embedded.figures), unread=(*observation.unread, *embedded.unread), notes=notes)  # fmt: skip


def _read_line(line: str, index: int, state: _LogState) -> None:
    where = line_source(index)
    if match := _LISTENING.search(line):
        state.version = match.group(1)
        state.figures.append(Figure("version", match.group(1), where))
    elif match := _CONFIG.search(line):
        for key, value in _ENV_ITEM.findall(match.group(1)):
            state.env[key] = (value, index)
            if key in _ENV_READ:
                state.figures.append(Figure(key, value, f"{where} server config"))
    elif match := _LAUNCH.search(line):
        _read_launch(match.group(1), match.group(2), index, state)
    elif match := _LOAD.search(line):
        fields = dict(_LOAD_FIELD.findall(match.group(1)))
        if "KvSize" not in fields or not fields["KvSize"].isdigit():
            state.unread.append(f"{where}: a load request without a KvSize kvcalc reads: {line.strip()[:160]}")
            return
        state.load = (fields, index)
    elif match := _KV_DEVICE.search(line):
        state.kv_devices[match.group(1)] = (printed_bytes(match.group(2), match.group(3)), index)
        state.figures.append(Figure(f"kv cache {match.group(1)}", f"{match.group(2)} {match.group(3)}", where))
    elif _OFFLOAD.search(line) and "memory." in line:
        _read_offload(line, index, state)
    elif _POOLISH.search(line):
        state.unread.append(f"{where}: {line.strip()[:160]}")


_ENV_READ = ("OLLAMA_NUM_PARALLEL", "OLLAMA_CONTEXT_LENGTH", "OLLAMA_KV_CACHE_TYPE", "OLLAMA_FLASH_ATTENTION")


def _read_launch(kind: str, cmd: str, index: int, state: _LogState) -> None:
    """The runner's launch words: their flags (the runner's own to v0.29; llama-server's read by its
    command-line reader from v0.30)."""
    where = line_source(index)
    try:
        words = shlex.split(cmd)
    except ValueError:
        state.unread.append(f"{where}: the {kind} line's cmd does not split into words: {cmd[:120]}")
        return
    flags: dict[str, str] = {}
    for i, word in enumerate(words):
        if word.startswith("-"):
            following = words[i + 1] if i + 1 < len(words) else ""
            flags[word] = following if following and not following.startswith("--") else ""
    state.launch = (flags, index, kind)
    state.launch_settings = {}
    if kind == "llama-server":
        state.launch_settings = _llama_server_settings(words, where, state)
    for flag in _LAUNCH_FIGURES:
        if flag in flags:
            state.figures.append(Figure(flag, flags[flag], f"{where} cmd"))


_LAUNCH_FIGURES = ("--model", "--ctx-size", "-c", "--parallel", "-np", "--batch-size", "-b", "--kv-cache-type",
                   "--cache-type-k")  # fmt: skip
# The llama-server line's settings that are Ollama's too: the rest (its batch sizes) Ollama sets itself.
_OLLAMA_SETTINGS = ("tokens", "batch", "kv_dtype", "k_dtype", "v_dtype")


def _llama_server_settings(words: list[str], where: str, state: _LogState) -> Settings:
    from kvcalc.engines.commandline import read_command

    def no_files(path: str) -> str:
        raise KvcalcError(f"the launch line reads {path}")

    try:
        command = read_command(words, no_files)
    except KvcalcError as exc:
        state.unread.append(f"{where}: llama-server's line, which kvcalc's reader refused: {exc}")
        return {}
    state.notes.extend(f"{where}: {text}" for text in (*command.warnings, *command.notes))
    return {k: v for k, v in command.settings.items() if k in _OLLAMA_SETTINGS}


def _read_offload(line: str, index: int, state: _LogState) -> None:
    where = line_source(index)
    fields = {name: (number, unit) for name, number, unit in _MEMORY_FIELD.findall(line)}
    if "required.kv" not in fields:
        state.unread.append(f"{where}: an offload line without memory.required.kv: {line.strip()[:160]}")
        return
    for name, (number, unit) in fields.items():
        state.figures.append(Figure(f"memory.{name}", f"{number} {unit}", where))
        term = _OFFLOAD_TERMS.get(name)
        if term is not None:
            state.memory[term] = MemoryTerm(term, printed_bytes(number, unit), where)
    state.notes.append(f"{where}: Ollama's memory estimate (memory.*), made before loading and rounded to a tenth: "
                       "not what llama.cpp allocated")  # fmt: skip


def _settings_and_pool(state: _LogState, release: Release | None) -> tuple[Settings, tuple[Pool, ...], list[str]]:
    """num_ctx and the slots from the launch line or load request (what the runner was given), else
    from the server config; the pool of num_ctx x slots cells as Ollama asked llama.cpp for it."""
    settings: Settings = {}
    missing: list[str] = []
    notes = state.notes
    cells: int | None = None
    parallel: int | None = None
    source = ""
    if state.load is not None:
        fields, index = state.load
        source = f"{line_source(index)} load request KvSize"
        cells = int(fields["KvSize"])
        parallel = _int(fields.get("Parallel"))
        kv = fields.get("KvCacheType", "")
        if kv:
            _kv_dtype(kv, settings, source, notes)
        fa = fields.get("FlashAttention", "")
        if fa in ("true", "Enabled"):
            settings["flash_attention"] = 1
        elif fa in ("false", "Disabled"):
            settings["flash_attention"] = 0
    elif state.launch is not None:
        flags, index, kind = state.launch
        source = f"{line_source(index)} cmd"
        if kind == "llama-server":
            settings.update(state.launch_settings)
            parallel = _int(flags.get("-np", flags.get("--parallel")))
            cells = _int(flags.get("-c", flags.get("--ctx-size")))
        else:
            cells = _int(flags.get("--ctx-size"))
            parallel = _int(flags.get("--parallel"))
            if "--flash-attn" in flags:
                settings["flash_attention"] = 1
            if "--kv-cache-type" in flags:
                _kv_dtype(flags["--kv-cache-type"], settings, source, notes)
    if parallel is None:
        parallel = _int(state.env.get("OLLAMA_NUM_PARALLEL", ("", 0))[0]) or None
        if parallel is not None:
            notes.append(f"the slots are the server config's OLLAMA_NUM_PARALLEL {parallel}; Ollama runs some "
                         "architectures with one whatever it says (server/sched.go)")  # fmt: skip
    if "kv_dtype" not in settings and "k_dtype" not in settings:
        kv = state.env.get("OLLAMA_KV_CACHE_TYPE", ("", 0))[0]
        if kv:
            _kv_dtype(kv, settings, "server config", notes)
    pools: tuple[Pool, ...] = ()
    if cells is not None and parallel:
        settings["batch"] = parallel
        settings.setdefault("tokens", cells // parallel)
        pools = (Pool(cells, "cell", kind="kv", bytes=_kv_bytes(state), source=source),)
        notes.append(f"{cells:,} cells is the context Ollama gave its runner (num_ctx x {parallel} slots); the bundled "
                     "llama.cpp pads it (to 256 cells from Ollama 0.13 or with flash attention, else 32): its "
                     "llama_kv_cache lines, which llama.cpp's reader reads, state the cells allocated")  # fmt: skip
        if cells % parallel:
            notes.append(f"{cells:,} cells are not a whole number of tokens for each of {parallel} slots")
    else:
        context = _int(state.env.get("OLLAMA_CONTEXT_LENGTH", ("", 0))[0])
        if context:
            settings["tokens"] = context
        missing.append("the runner's context and slots: the log has no launch line with them (--ctx-size / -c, "
                       "--parallel / -np) nor a load request (KvSize); give --tokens and --batch")  # fmt: skip
    if release is None:
        missing.append("the Ollama release: the log has no 'Listening on ... (version X)' line; give --engine "
                       "ollama@X.Y")  # fmt: skip
    missing.append("the model: give MODEL (its GGUF or Hub id); Ollama's log names it by blob path only")
    return settings, pools, missing


def _kv_bytes(state: _LogState) -> int | None:
    """The ``kv cache`` lines' bytes over every device (rounded to a tenth of their unit)."""
    if not state.kv_devices:
        return None
    if len(state.kv_devices) > 1:
        state.notes.append(f"the KV bytes are the sum over {len(state.kv_devices)} devices' 'kv cache' lines")
    return sum(b for b, _ in state.kv_devices.values())


# OLLAMA_KV_CACHE_TYPE's names as kvcalc's (docs/faq.md: f16, q8_0, q4_0).
_KV_NAMES = {"f16": "fp16", "q8_0": "q8_0", "q4_0": "q4_0"}


def _kv_dtype(text: str, settings: Settings, source: str, notes: list[str]) -> None:
    name = _KV_NAMES.get(text.lower())
    if name is None:
        notes.append(f"{source}: cache type {text} is not one of Ollama's (f16, q8_0, q4_0): not read")
        return
    settings["kv_dtype"] = name


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


# --- the prediction -----------------------------------------------------------------------------------


def predicted_cells(estimate: Estimate) -> tuple[Predicted, ...]:
    """llama.cpp's cells as kvcalc's estimate lays them out, per pool kind, over the whole model (all
    its devices, as Ollama's KvSize and 'kv cache' lines count them): ``kv`` (full attention's cells,
    each the K and V rows of every such layer), ``swa`` (sliding layers' cells), ``recurrent``
    (states, one a sequence). A kind whose bytes are no whole number per cell is left out rather than rounded."""
    found: dict[str, tuple[int, int]] = {}
    for g in estimate.groups:
        cache = g.cache
        if cache.is_state:
            kind = "recurrent"
        elif cache.tokens != "decoder" or not cache.caches_tokens:
            continue
        else:
            kind = "swa" if cache.token_bound is not None else "kv"
        # A state layer keeps one state per sequence of the batch (its group has no cells).
        cells = estimate.workload.batch if cache.is_state else g.slots
        count, total = found.get(kind, (0, 0))
        found[kind] = (max(count, cells), total + g.bytes)
    return tuple(Predicted(count, total // count, kind=kind) for kind, (count, total) in found.items()
                 if count and total % count == 0)  # fmt: skip


SERVERS = (ServerReader("ollama", ("/api/version", "/api/ps"), identify, read_server),)
LOGS = (LogReader("ollama", claims, read_log),)
POOL_RULES: dict[str, PoolRules] = {"ollama": PoolRules("context", from_estimate=predicted_cells)}
