"""Request traces with arrival times (``kvcalc simulate --lengths``): kvcalc's own form and the
public traces people have, each told by its header (CSV) or its first line's keys (JSON lines).

- kvcalc's own: CSV ``arrival,prompt,output`` with a header, or JSON lines ``{"arrival": s,
  "prompt": n, "output": m}``; ``arrival`` in seconds.
- Azure LLM inference traces 2023 and 2024 (Azure/AzurePublicDataset,
  AzureLLMInferenceDataset2023.md and AzureLLMInferenceDataset2024.md: "TIMESTAMP | Invocation
  time", "ContextTokens", "GeneratedTokens"): CSV, TIMESTAMP a date and time of day
  (``2023-11-16 18:15:46.6805900``, an offset such as ``+00:00`` allowed).
- BurstGPT (HPMLL/BurstGPT README.md: ``Timestamp,Model,Request tokens,Response tokens,Total
  tokens,Log Type``, Timestamp in seconds; "failure that `Response tokens` are 0s", which its
  ``BurstGPT_without_fails`` files leave out).
- Mooncake (kvcache-ai/Mooncake FAST25-release/README.md: JSON lines of ``timestamp``,
  ``input_length``, ``output_length``, ``hash_ids``; the timestamp in milliseconds since the first
  request and each hash id one 512-token block of the prompt, as ai-dynamo's data_generator
  README, which replays them, states).

Every trace's arrivals become seconds from its first (earliest) request. A file of none of these
forms reads as None: it is a request mix without arrivals (``calc.requests``). Parsing only: the
bytes come from a stream the API opens.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from kvcalc.errors import SourceError

# A line longer than this is no request (calc/requests.py's limit for the same files).
MAX_LINE = 2**20
_CHUNK = 2**20
# Mooncake's hash ids each name one block of this many prompt tokens (ai-dynamo data_generator README).
MOONCAKE_BLOCK_TOKENS = 512


class ByteStream(Protocol):
    def read(self, size: int, /) -> bytes: ...


@dataclass(frozen=True)
class Trace:
    """A trace read: ``requests`` (arrival seconds from the first request, prompt tokens, output
    tokens) in file order, the ``form`` it was read as, and every note on what it held that the
    load does not take."""

    requests: tuple[tuple[float, int, int], ...]
    form: str
    notes: tuple[str, ...] = ()


# CSV headers (lower-cased, stripped) of each form, and the columns of arrival, prompt, output.
_KVCALC_CSV = ("arrival", "prompt", "output")
_AZURE = ("timestamp", "contexttokens", "generatedtokens")
_BURSTGPT = ("timestamp", "model", "request tokens", "response tokens", "total tokens", "log type")
_KVCALC_JSON = frozenset(_KVCALC_CSV)
_MOONCAKE = frozenset(("timestamp", "input_length", "output_length"))

_DATETIME = re.compile(
    r"\s*(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\s*(?:(Z)|([+-])(\d{2}):?(\d{2}))?\s*"
)


def read_trace(stream: ByteStream, *, name: str, limit: int | None = None) -> Trace | None:
    """The trace in ``stream`` (its first ``limit`` requests, None: all), or None when its header
    or first line's keys are none of the forms with arrival times. Every failure is one SourceError
    naming ``name`` and the line."""
    lines = _lines(stream, name)
    found = next(((n, text) for n, text in lines if text.strip()), None)
    if found is None:
        return None
    number, line = found
    if line.lstrip().startswith("{"):
        first = _object(line, name, number)
        keys = frozenset(first)
        if keys >= _MOONCAKE:
            return _mooncake(first, number, lines, name, limit)
        if keys >= _KVCALC_JSON:
            return _kvcalc_json(first, number, lines, name, limit)
        return None
    header = tuple(h.strip().lower() for h in next(csv.reader([line])))
    if sorted(header) == sorted(_KVCALC_CSV):
        return _kvcalc_csv(header, lines, name, limit)
    if header == _AZURE:
        return _azure(lines, name, limit)
    if header == _BURSTGPT:
        return _burstgpt(lines, name, limit)
    return None


# --- the forms ------------------------------------------------------------------------------------


def _kvcalc_csv(header: tuple[str, ...], lines: Iterator[tuple[int, str]], name: str, limit: int | None) -> Trace:
    at = [header.index(c) for c in _KVCALC_CSV]
    rows = []
    for number, row in _rows(lines, name, len(header), limit):
        where = f"{name} line {number}"
        rows.append((_seconds(row[at[0]], where), _tokens(row[at[1]], "prompt", where, 1),
                     _tokens(row[at[2]], "output", where, 1)))  # fmt: skip
    return _trace(rows, "kvcalc CSV (arrival,prompt,output; seconds)", name, [])


def _kvcalc_json(first: dict[str, object], number: int, lines: Iterator[tuple[int, str]], name: str,
                 limit: int | None) -> Trace:  # fmt: skip
    rows = []
    for number_, item in _objects(first, number, lines, name, limit):
        where = f"{name} line {number_}"
        for key in _KVCALC_CSV:
            if key not in item:
                raise SourceError(f"{where}: no {key!r} (kvcalc's trace lines hold arrival, prompt, output)")
        rows.append((_seconds(item["arrival"], where), _tokens(item["prompt"], "prompt", where, 1),
                     _tokens(item["output"], "output", where, 1)))  # fmt: skip
    return _trace(rows, "kvcalc JSON lines (arrival, prompt, output; seconds)", name, [])


def _azure(lines: Iterator[tuple[int, str]], name: str, limit: int | None) -> Trace:
    rows: list[tuple[int, int, int]] = []  # nanoseconds, prompt, output
    empty = 0
    for number, row in _rows(lines, name, 3, limit):
        where = f"{name} line {number}"
        ns = _datetime_ns(row[0], where)
        prompt, output = _tokens(row[1], "ContextTokens", where, 0), _tokens(row[2], "GeneratedTokens", where, 0)
        if prompt == 0 or output == 0:
            empty += 1
            continue
        rows.append((ns, prompt, output))
    start = min((ns for ns, _, _ in rows), default=0)  # exact in ints, then seconds
    shifted = [((ns - start) / 1e9, p, o) for ns, p, o in rows]
    notes = []
    if empty:
        notes.append(f"{empty:,} row(s) of 0 ContextTokens or 0 GeneratedTokens left out: a request of no tokens "
                     "has nothing to run (the dataset's schema gives no other meaning)")  # fmt: skip
    return _trace(shifted, "Azure LLM inference trace (TIMESTAMP,ContextTokens,GeneratedTokens)", name, notes,
                  shifted_already=True)  # fmt: skip


def _burstgpt(lines: Iterator[tuple[int, str]], name: str, limit: int | None) -> Trace:
    rows = []
    failed = 0
    models: set[str] = set()
    for number, row in _rows(lines, name, 6, limit):
        where = f"{name} line {number}"
        arrival = _seconds(row[0], where)
        prompt = _tokens(row[2], "Request tokens", where, 0)
        output = _tokens(row[3], "Response tokens", where, 0)
        if output == 0:  # BurstGPT's failures
            failed += 1
            continue
        if prompt == 0:
            raise SourceError(f"{where}: Request tokens 0 with a response: not a request BurstGPT describes")
        models.add(row[1].strip())
        rows.append((arrival, prompt, output))
    notes = []
    if failed:
        notes.append(f"{failed:,} failed request(s) left out (Response tokens 0: BurstGPT's failures, which its "
                     "BurstGPT_without_fails files leave out too)")  # fmt: skip
    if len(models) > 1:
        notes.append(f"the trace's models {', '.join(sorted(models))} all replayed on this one model")
    return _trace(rows, "BurstGPT (Timestamp in seconds, Request tokens, Response tokens)", name, notes)


def _mooncake(first: dict[str, object], number: int, lines: Iterator[tuple[int, str]], name: str,
              limit: int | None) -> Trace:  # fmt: skip
    rows = []
    empty = 0
    seen: set[object] = set()
    blocks = repeated = 0
    for number_, item in _objects(first, number, lines, name, limit):
        where = f"{name} line {number_}"
        for key in _MOONCAKE:
            if key not in item:
                raise SourceError(f"{where}: no {key!r} (Mooncake's trace lines hold timestamp, input_length, "
                                  "output_length, hash_ids)")  # fmt: skip
        arrival = _seconds(item["timestamp"], where) / 1000  # milliseconds
        prompt = _tokens(item["input_length"], "input_length", where, 0)
        output = _tokens(item["output_length"], "output_length", where, 0)
        hashes = item.get("hash_ids", [])
        if not isinstance(hashes, list):
            raise SourceError(f"{where}: hash_ids is not a list")
        if not all(isinstance(h, int | str) and not isinstance(h, bool) for h in hashes):
            raise SourceError(f"{where}: hash_ids holds something other than block hashes (numbers)")
        blocks += len(hashes)
        repeated += sum(1 for h in hashes if h in seen)
        seen.update(hashes)
        if prompt == 0 or output == 0:
            empty += 1
            continue
        rows.append((arrival, prompt, output))
    notes = []
    if repeated:
        notes.append(f"hash_ids: {repeated:,} of the trace's {blocks:,} prompt blocks ({MOONCAKE_BLOCK_TOKENS} "
                     "tokens each) repeat an earlier request's, prefix sharing kvcalc's load cannot express "
                     "(it shares one fixed prefix, --shared-prefix): the run shares none of them, so its "
                     "prefill and pool use are those without those cache hits")  # fmt: skip
    if empty:
        notes.append(f"{empty:,} request(s) of 0 input_length or 0 output_length left out: nothing to run")
    return _trace(rows, "Mooncake trace (timestamp in ms, input_length, output_length)", name, notes)


# --- shared pieces ------------------------------------------------------------------------------


def _trace(rows: list[tuple[float, int, int]], form: str, name: str, notes: list[str],
           shifted_already: bool = False) -> Trace:  # fmt: skip
    if not rows:
        raise SourceError(f"{name} holds no request to run ({form})")
    start = 0.0 if shifted_already else min(r[0] for r in rows)
    requests = tuple((t - start, p, o) for t, p, o in rows)
    last = max(t for t, _, _ in requests)
    said = [f"arrivals replayed from the trace, read as {form}: {len(requests):,} request(s) over {last:,.3f} s "
            "from the first"]  # fmt: skip
    return Trace(requests, form, tuple(said + notes))


def _lines(stream: ByteStream, name: str) -> Iterator[tuple[int, str]]:
    """The stream's lines, numbered from 1, decoded as UTF-8 (a BOM dropped), a chunk at a time."""
    tail = b""
    number = 0
    first = True
    while chunk := stream.read(_CHUNK):
        if first and chunk.startswith(b"\xef\xbb\xbf"):
            chunk = chunk[3:]
        first = False
        *whole, tail = (tail + chunk).split(b"\n")
        for raw in whole:
            number += 1
            yield number, _decode(raw, name, number)
        if len(tail) > MAX_LINE:
            raise SourceError(f"{name} line {number + 1} is over {MAX_LINE:,} bytes: not a request")
    if tail:
        yield number + 1, _decode(tail, name, number + 1)


def _decode(raw: bytes, name: str, number: int) -> str:
    try:
        return raw.decode().rstrip("\r")
    except UnicodeDecodeError:
        raise SourceError(f"{name} line {number}: not UTF-8 text") from None


def _rows(
    lines: Iterator[tuple[int, str]], name: str, width: int, limit: int | None
) -> Iterator[tuple[int, list[str]]]:
    taken = 0
    for number, line in lines:
        if limit is not None and taken >= limit:
            return
        if not line.strip():
            continue
        try:
            row = next(csv.reader([line]))
        except csv.Error as exc:
            raise SourceError(f"{name} line {number}: not readable CSV ({exc})") from None
        if len(row) != width:
            raise SourceError(f"{name} line {number}: {len(row)} values under a header of {width} columns")
        taken += 1
        yield number, row


def _objects(first: dict[str, object], number: int, lines: Iterator[tuple[int, str]], name: str,
             limit: int | None) -> Iterator[tuple[int, dict[str, object]]]:  # fmt: skip
    if limit is not None and limit < 1:
        return
    yield number, first
    taken = 1
    for number_, line in lines:
        if limit is not None and taken >= limit:
            return
        if line.strip():
            taken += 1
            yield number_, _object(line, name, number_)


def _object(line: str, name: str, number: int) -> dict[str, object]:
    try:
        item = json.loads(line)
    except ValueError:
        raise SourceError(f"{name} line {number}: not a JSON object") from None
    if not isinstance(item, dict):
        raise SourceError(f"{name} line {number}: not a JSON object")
    return item


def _seconds(value: object, where: str) -> float:
    """A time given as a number (a string of one in CSV): finite and not negative."""
    try:
        got = float(value) if isinstance(value, str | int | float) and not isinstance(value, bool) else math.nan
    except ValueError:
        got = math.nan
    if not math.isfinite(got) or got < 0:
        raise SourceError(f"{where}: time {str(value)[:40]!r} is not a number of seconds (or ms) from 0 up")
    return got


def _tokens(value: object, what: str, where: str, minimum: int) -> int:
    if isinstance(value, str):
        text = value.strip()
        number = int(text) if text.isdigit() else -1
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        number = -1
    if number < minimum:
        raise SourceError(f"{where}: {what} {str(value)[:40]!r} is not a count of tokens ({minimum} or more)")
    return number


def _datetime_ns(text: str, where: str) -> int:
    """``YYYY-MM-DD HH:MM:SS[.fraction][offset]`` as nanoseconds since 0001-01-01 UTC, exactly (Azure's
    traces give seven fractional digits, 100 ns, past what datetime keeps)."""
    import datetime

    found = _DATETIME.fullmatch(text)
    if found is None:
        raise SourceError(f"{where}: TIMESTAMP {text[:40]!r} is not a date and time (2023-11-16 18:15:46.68)")
    year, month, day, hour, minute, second = (int(found[i]) for i in range(1, 7))
    try:
        days = datetime.date(year, month, day).toordinal()
    except ValueError:
        raise SourceError(f"{where}: TIMESTAMP {text[:40]!r} is not a date") from None
    seconds = days * 86400 + hour * 3600 + minute * 60 + second
    if found[9]:
        offset = (int(found[10]) * 3600 + int(found[11]) * 60) * (1 if found[9] == "+" else -1)
        seconds -= offset
    fraction = int((found[7] or "").ljust(9, "0"))
    return seconds * 10**9 + fraction
