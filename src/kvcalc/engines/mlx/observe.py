"""What ``mlx_lm.server`` reveals (mlx-lm 0.32.2, mlx_lm/server.py): little, and this says so.

Its GET routes (``APIHandler.do_GET``) are paths starting with /v1/models and /health, nothing else:
``/v1/models`` lists the Hugging Face cache's repositories that look like MLX models, then
``--model`` resolved to an absolute path when it is a local folder, each entry only ``id``,
``object``, ``created`` (``handle_models_request``); ``/health`` is ``{"status": "ok"}``, or 503
``unavailable`` once the generation thread died (``handle_health_check``); any other path is 404
with the plain text ``Not Found`` under a JSON content type. So the server names its model at best:
no context (it has no context flag: each request brings its prompt and max_tokens), no concurrency
(--decode-concurrency), no cache size, no version, no usage. Recorded answers:
tests/fixtures/servers/mlx-lm-0.32.2/.

Its log prints, before each request, the prompt cache it keeps of finished prompts
(``ResponseGenerator._log_cache_stats``: "Prompt Cache: N sequences, X.XX GB", then one line per
cache type): the LRU store of --prompt-cache-size / --prompt-cache-bytes, not a pool.

No ``POOL_RULES``: mlx-lm allocates no pool to compare with. Its cache grows with each request
(KVCache steps of 256 tokens, models/cache.py) and lives only while the request does, so kvcalc's
estimate at --tokens and --batch is itself the answer, and no server figure stands beside it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from kvcalc.engines.commandline import SettingValue
from kvcalc.engines.observing import (
    Answer,
    Figure,
    Get,
    LogReader,
    Observation,
    ServerReader,
    line_source,
    printed_bytes,
)

ENGINE = "mlx"
SOURCE = "mlx-lm 0.32.2 mlx_lm/server.py"
_ENTRY_KEYS = {"id", "object", "created"}
MISSING = (
    "the context: mlx_lm.server has no context flag and its GETs say nothing of a request's length: give --tokens",
    "the requests at once: its GETs do not say --decode-concurrency (32 by default): give --batch",
    "the cache's size and usage: mlx_lm.server exports neither (no /metrics; the cache grows per request)",
    "the machine: give --gpu",
)
NOTE = ("mlx_lm.server answers GET /v1/models and /health only: kvcalc's estimate at the --tokens and --batch "
        "given is the figure, with no server pool beside it")  # fmt: skip
_MODEL = "the model: give MODEL"


def _loads(answer: Answer) -> object:
    try:
        return json.loads(answer.body)
    except ValueError:
        return None


def _models(answer: Answer) -> list[dict[str, object]] | None:
    """/v1/models' entries when the body has mlx_lm.server's shape (an empty body counts: no Hub
    cache folder), else None."""
    if answer.status != 200:
        return None
    if not answer.body.strip():
        return []
    body = _loads(answer)
    if not isinstance(body, dict) or body.get("object") != "list" or not isinstance(body.get("data"), list):
        return None
    entries: list[dict[str, object]] = [e for e in body["data"] if isinstance(e, dict)]
    if len(entries) != len(body["data"]) or not all(set(e) <= _ENTRY_KEYS and "id" in e for e in entries):
        return None  # vLLM's, SGLang's, llama-server's and Ollama's entries carry owned_by and more
    return entries


def identify(get: Get) -> bool:
    """All three of mlx_lm.server's marks: /health's body {"status": "ok"|"unavailable"}, /metrics a
    404 whose body is the plain text "Not Found" (FastAPI servers answer {"detail": "Not Found"},
    llama-server a JSON error, Ollama "404 page not found", TGI an empty body), and /v1/models with
    entries of id, object and created only."""
    health = get("/health")
    if health.status not in (200, 503) or _loads(health) not in ({"status": "ok"}, {"status": "unavailable"}):
        return False
    metrics = get("/metrics")
    if metrics.status != 404 or metrics.body.strip() != "Not Found":
        return False
    return _models(get("/v1/models")) is not None


def read_server(get: Get, origin: str) -> Observation:
    models = get("/v1/models")
    entries = _models(models) or []
    figures = [Figure("model", str(e.get("id")), f"GET /v1/models data[{i}].id") for i, e in enumerate(entries)]
    health = get("/health")
    figures.append(Figure("health", health.body.strip(), "GET /health"))
    settings: dict[str, SettingValue] = {}
    notes = [NOTE]
    missing = list(MISSING)
    # server.py appends --model last, resolved, when it is a local folder; cached repositories come first.
    local = entries[-1].get("id") if entries else None
    if isinstance(local, str) and local.startswith("/"):
        settings["model"] = local
        notes.append(f"the model is --model's folder {local} (the last /v1/models entry, an absolute path)")
    else:
        missing.insert(0, _MODEL)
        if not models.body.strip():
            notes.append("GET /v1/models answered 200 with an empty body: mlx_lm.server found no Hugging Face cache "
                         "folder (scan_cache_dir raised after the headers went out)")  # fmt: skip
        elif entries:
            ids = ", ".join(str(e.get("id")) for e in entries)
            notes.append(f"GET /v1/models lists the Hub cache's MLX models ({ids}), not which one --model "
                         "loaded (a repository id is not marked)")  # fmt: skip
    if health.status == 503:
        notes.append("GET /health answered 503 'unavailable': the server's generation thread died")
    notes.append("mlx_lm.server's GETs name no mlx-lm version")
    return Observation(
        engine=ENGINE,
        origin=origin,
        settings=settings,
        figures=tuple(figures),
        missing=tuple(missing),
        notes=tuple(notes),
    )


SERVERS = (ServerReader(ENGINE, ("/health", "/metrics", "/v1/models"), identify, read_server),)


# --- the log ---------------------------------------------------------------------------------------

_BANNER = re.compile(r"mlx_lm\.server is not recommended for production|mlx_lm/server\.py")
_HTTPD = re.compile(r"Starting httpd at (\S+) on port (\d+)")
# server.py _log_cache_stats: f"Prompt Cache: {n_sequences} sequences, {n_bytes / 1e9:.2f} GB", then
# f"- {cache_type}: {n_sequences} sequences, {n_bytes / 1e9:.2f} GB" per type.
_CACHE = re.compile(r"Prompt Cache: (\d+) sequences, (\d+\.\d+) GB\s*$")
_CACHE_TYPE = re.compile(r" - - (\w+): (\d+) sequences, (\d+\.\d+) GB\s*$")


def claims(lines: Sequence[str]) -> bool:
    return any(_BANNER.search(line) for line in lines)


def read_log(lines: Sequence[str], origin: str) -> Observation:
    figures: list[Figure] = []
    unread: list[str] = []
    last: tuple[int, int, int] | None = None  # sequences, bytes, line index
    for index, line in enumerate(lines):
        source = line_source(index)
        if match := _HTTPD.search(line):
            figures.append(Figure("host", match.group(1), source))
            figures.append(Figure("port", int(match.group(2)), source))
        elif match := _CACHE.search(line):
            last = (int(match.group(1)), printed_bytes(match.group(2), "GB"), index)
        elif match := _CACHE_TYPE.search(line):
            figures.append(Figure(f"prompt_cache_{match.group(1)}_sequences", int(match.group(2)), source))
        elif "Prompt Cache:" in line or " sequences, " in line:
            unread.append(f"{source}: {line.strip()}")
    notes = [NOTE]
    if last is not None:
        sequences, size, index = last
        figures.append(Figure("prompt_cache_sequences", sequences, line_source(index)))
        figures.append(Figure("prompt_cache_bytes", size, line_source(index)))
        notes.append(f"{line_source(index)}: the prompt cache held {sequences} finished prompts' caches, about "
                     f"{size:,} bytes (printed to 0.01 GB): the store --prompt-cache-size / --prompt-cache-bytes "
                     "bound, kept beside the live requests' caches, not a pool")  # fmt: skip
    return Observation(
        engine=ENGINE,
        origin=origin,
        figures=tuple(figures),
        missing=(_MODEL, *MISSING),
        unread=tuple(unread),
        notes=tuple(notes),
    )


LOGS = (LogReader(ENGINE, claims, read_log),)
