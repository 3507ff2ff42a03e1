"""Request mixes: real prompt/output lengths instead of one T for every sequence.

The seed insists that evaluations state their length distributions; a total over a mix and its
percentiles say far more than one average length.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, replace

from .engines import Engine
from .errors import UsageError
from .estimator import Workload, estimate
from .spec import ModelSpec
from .units import MAX_COUNT


@dataclass(frozen=True)
class Request:
    prompt: int
    output: int

    @property
    def tokens(self) -> int:
        return self.prompt + self.output


# A token count has at most 16 digits (MAX_COUNT is 2**50); longer text is not a length.
_MAX_DIGITS = 16


def _count(value: object, where: str) -> int:
    if isinstance(value, bool):
        raise UsageError(f"{where}: lengths must be whole numbers, got {value!r}")
    if isinstance(value, str):
        value = value.strip()
        # ASCII digits only: str.isdigit() also accepts '²' and '①', which int() then refuses.
        if not (value.isascii() and value.isdecimal()) or len(value) > _MAX_DIGITS:
            raise UsageError(f"{where}: lengths must be whole numbers such as 512, got {value!r}")
        value = int(value)
    if not isinstance(value, int) or value < 0:
        raise UsageError(f"{where}: lengths must be non-negative whole numbers, got {value!r}")
    if value > MAX_COUNT:
        raise UsageError(f"{where}: a length of {value:,} tokens is implausibly large (at most {MAX_COUNT:,})")
    return value


def _request(fields: dict[str, object], where: str) -> Request:
    keys = {k.strip().lower(): v for k, v in fields.items() if isinstance(k, str)}
    if "tokens" in keys and "prompt" not in keys:
        request = Request(_count(keys["tokens"], where), 0)
    elif "prompt" in keys:
        request = Request(_count(keys["prompt"], where), _count(keys.get("output", 0), where))
    else:
        raise UsageError(f"{where}: needs a 'prompt' (and 'output') or a 'tokens' field")
    if request.tokens == 0:
        raise UsageError(f"{where}: a request of 0 tokens caches nothing")
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
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{name} line {number}: not JSON ({exc.msg})") from None
            except (ValueError, RecursionError):  # a 5,000-digit number; nesting past the stack
                raise UsageError(f"{name} line {number}: not a usable JSON request") from None
            if not isinstance(item, dict):
                raise UsageError(f"{name} line {number}: each line must be a JSON object")
            requests.append(_request(item, f"{name} line {number}"))
    else:
        # newline="": the csv module handles \r, \r\n and quoted newlines itself.
        reader = csv.DictReader(io.StringIO(text, newline=""))
        try:
            if not reader.fieldnames:
                raise UsageError(f"{name} is empty: give a CSV header (prompt,output) or JSON lines")
            for number, row in enumerate(reader, 2):
                requests.append(_request(dict(row), f"{name} line {number}"))
        except csv.Error as exc:
            raise UsageError(f"{name} line {reader.line_num}: not readable CSV ({exc})") from None
    if not requests:
        raise UsageError(f"{name} lists no requests")
    return requests


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
