"""Request mixes: real prompt/output lengths instead of one T for every sequence.

The seed insists that evaluations state their length distributions; a total over a mix and its
percentiles say far more than one average length.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, replace

from kvcalc.calc.estimate import Workload, estimate
from kvcalc.engines import Engine
from kvcalc.errors import SourceError
from kvcalc.spec import ModelSpec
from kvcalc.units import MAX_COUNT


@dataclass(frozen=True)
class Request:
    prompt: int
    output: int

    @property
    def tokens(self) -> int:
        return self.prompt + self.output


# A token count has at most 16 digits (MAX_COUNT is 2**50); longer text is not a length.
_MAX_DIGITS = 16
# The most requests one mix may list: a million take a few seconds and ~200 MB; more is refused
# as soon as the count passes it, before the rest of the file is parsed (sources.LENGTHS_LIMIT
# bounds the file's bytes first).
MAX_REQUESTS = 1_000_000
# The fields a request is read from; any other is refused (a misspelt 'output' would read as 0).
FIELDS = ("prompt", "output", "tokens")


def _count(value: object, where: str) -> int:
    if isinstance(value, bool):
        raise SourceError(f"{where}: lengths must be whole numbers, got {value!r}")
    if isinstance(value, str):
        value = value.strip()
        # ASCII digits only: str.isdigit() also accepts '²' and '①', which int() then refuses.
        if not (value.isascii() and value.isdecimal()) or len(value) > _MAX_DIGITS:
            raise SourceError(f"{where}: lengths must be whole numbers such as 512, got {value!r}")
        value = int(value)
    if not isinstance(value, int) or value < 0:
        raise SourceError(f"{where}: lengths must be non-negative whole numbers, got {value!r}")
    if value > MAX_COUNT:
        raise SourceError(f"{where}: a length of {value:,} tokens is implausibly large (at most {MAX_COUNT:,})")
    return value


def _keys(names: list[str], where: str) -> list[str]:
    """The field names as kvcalc reads them (trimmed, lower case), each once and each one it reads."""
    keys = [name.strip().lower() for name in names]
    twice = next((k for n, k in enumerate(keys) if k in keys[:n]), None)
    if twice is not None:
        raise SourceError(f"{where}: the field {twice!r} is given twice")
    unknown = [name for name, k in zip(names, keys, strict=True) if k not in FIELDS]
    if unknown:
        raise SourceError(f"{where}: field {unknown[0]!r} is not one kvcalc reads (prompt, output, tokens)")
    return keys


def _request(fields: dict[str, object], where: str) -> Request:
    keys = dict(zip(_keys([str(k) for k in fields], where), fields.values(), strict=True))
    if "tokens" in keys and "prompt" not in keys:
        request = Request(_count(keys["tokens"], where), 0)
    elif "prompt" in keys:
        request = Request(_count(keys["prompt"], where), _count(keys.get("output", 0), where))
    else:
        raise SourceError(f"{where}: needs a 'prompt' (and 'output') or a 'tokens' field")
    if request.tokens == 0:
        raise SourceError(f"{where}: a request of 0 tokens caches nothing")
    return request


def parse_lengths(text: str, *, name: str) -> list[Request]:
    """CSV with a header (prompt,output or tokens) or JSON lines with the same keys.

    A leading byte-order mark (Excel's "CSV UTF-8") is not part of the header."""
    text = text.removeprefix("\ufeff")
    stripped = text.lstrip()
    requests: list[Request] = []
    if stripped.startswith("{"):
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            if len(requests) == MAX_REQUESTS:
                raise SourceError(f"{name} lists more than {MAX_REQUESTS:,} requests, the most kvcalc reads")
            try:
                item = json.loads(line, object_pairs_hook=_pairs)
            except json.JSONDecodeError as exc:
                raise SourceError(f"{name} line {number}: not JSON ({exc.msg})") from None
            except _Twice as exc:
                raise SourceError(f"{name} line {number}: {exc}") from None
            except (ValueError, RecursionError):  # a 5,000-digit number; nesting past the stack
                raise SourceError(f"{name} line {number}: not a usable JSON request") from None
            if not isinstance(item, dict):
                raise SourceError(f"{name} line {number}: each line must be a JSON object")
            requests.append(_request(item, f"{name} line {number}"))
    else:
        # newline="": the csv module handles \r, \r\n and quoted newlines itself.
        reader = csv.DictReader(io.StringIO(text, newline=""))
        try:
            if not reader.fieldnames:
                raise SourceError(f"{name} is empty: give a CSV header (prompt,output) or JSON lines")
            _keys(list(reader.fieldnames), f"{name} line 1")  # before any row: DictReader keeps one of a pair
            for number, row in enumerate(reader, 2):
                if len(requests) == MAX_REQUESTS:
                    raise SourceError(f"{name} lists more than {MAX_REQUESTS:,} requests, the most kvcalc reads")
                if None in row:
                    raise SourceError(f"{name} line {number}: more values than the header has columns")
                requests.append(_request(dict(row), f"{name} line {number}"))
        except csv.Error as exc:
            raise SourceError(f"{name} line {reader.line_num}: not readable CSV ({exc})") from None
    if not requests:
        raise SourceError(f"{name} lists no requests")
    return requests


class _Twice(ValueError):
    """A JSON object that names a key twice."""


def _pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """A JSON object whose keys are each given once (json keeps the last of a pair silently)."""
    keys = [key for key, _ in pairs]
    twice = next((k for n, k in enumerate(keys) if k in keys[:n]), None)
    if twice is not None:
        raise _Twice(f"the field {twice!r} is given twice")
    return dict(pairs)


@dataclass(frozen=True)
class RequestSummary:
    requests: tuple[Request, ...]
    per_request_bytes: tuple[int, ...]
    total_bytes: int
    engine: str
    notes: tuple[str, ...] = ()

    def percentile(self, values: tuple[int, ...], q: int) -> int:
        """Nearest-rank percentile: the smallest value with at least q% of values at or below it."""
        ordered = sorted(values)
        rank = max(1, -(-q * len(ordered) // 100))
        return ordered[rank - 1]


def summarize_requests(spec: ModelSpec, workload: Workload, engine: Engine, requests: list[Request]) -> RequestSummary:
    """Each request's own cache (batch 1), and the total with all of them resident at once."""
    sizes = []
    cache: dict[int, int] = {}
    for r in requests:
        if r.tokens not in cache:
            one = replace(workload, tokens=r.tokens, batch=1, dp=1, shared_prefix=min(workload.shared_prefix, r.tokens))
            cache[r.tokens] = estimate(spec, one, engine=engine).total_bytes
        sizes.append(cache[r.tokens])
    return RequestSummary(tuple(requests), tuple(sizes), sum(sizes), engine.name)
