"""Request mixes: real prompt/output lengths instead of one T for every sequence.

The seed insists that evaluations state their length distributions; a total over a mix and its
percentiles say far more than one average length.

A mix is read in one pass and kept as counts: how many requests have each total length, and the
prompt and output sums. Its percentiles (nearest rank) are exact from those counts, each distinct
length is sized once, and memory grows with the distinct lengths, never with the requests.

The file is read in chunks of whole lines. A chunk whose lines are all plain numbers (CSV
``512,128``, JSON ``{"prompt": 512, "output": 128}`` as json.dumps writes it) is converted in bulk;
any other goes through the csv or json module line by line, so every message and line number is
what reading the whole text gave. A CSV chunk with a quote in it hands the rest of the file to the
csv module (a quoted field may hold a line break: lines are no longer independent).
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import math
import re
from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from itertools import accumulate, chain
from operator import add, itemgetter
from typing import TYPE_CHECKING, Protocol

from kvcalc.calc.estimate import Plan, Workload, compile_plan
from kvcalc.checks import MAX_COUNT, count
from kvcalc.errors import SourceError, UsageError
from kvcalc.spec import ModelSpec

if TYPE_CHECKING:
    from kvcalc.calc.contracts import StorageRules


@dataclass(frozen=True)
class Request:
    """One request: ``prompt`` tokens and ``output`` generated tokens (each zero or more, at least
    one token in all)."""

    prompt: int
    output: int

    def __post_init__(self) -> None:
        prompt, output = self.prompt, self.output
        if not (type(prompt) is int and type(output) is int and 0 <= prompt <= MAX_COUNT and 0 <= output <= MAX_COUNT):
            count(prompt, "prompt", minimum=0)
            count(output, "output", minimum=0)
        if not self.prompt and not self.output:
            raise UsageError("a request of 0 tokens caches nothing: give prompt or output", param=("prompt", "output"))

    @property
    def tokens(self) -> int:
        return self.prompt + self.output


# A token count has at most 16 digits (MAX_COUNT is 2**50); longer text is not a length.
_MAX_DIGITS = 16
# The fields a request is read from; any other is refused (a misspelt 'output' would read as 0).
FIELDS = ("prompt", "output", "tokens")
# No cap on requests or on the file's size: a mix is streamed, so memory does not grow with either
# (time does, ~0.5 s per million CSV rows). What grows is the distinct lengths, bounded here: a
# million is every length from 1 to 1,000,000 tokens, more than any real trace holds. At the bound
# kvcalc peaks at ~205 MB (the counts ~100 MB, the sized lengths ~100 MB) and makes a million
# estimates (~30 s); one past it is refused after ~0.5 s and ~115 MB (benchmarks/lengths.py
# --distinct measures the bound).
MAX_LENGTHS = 1_000_000
# The bytes read at a time. One chunk's rows (~28,000 short ones) are what reading holds beyond the
# counts: ~6 MB of lists and ints, ~13 MB of peak RSS (1 MiB chunks: ~50 MB, and no faster).
CHUNK_BYTES = 2**18
# The longest line read, in characters (its line break included). A request is a few numbers and
# the csv module refuses a field past 131,072 characters anyway; this keeps a file without line
# breaks from being gathered into memory before either can look at it.
MAX_LINE = 2**20
# Rows read one by one (through the csv or json module) are handed on in batches of this many.
_BATCH = 10_000
# The most digit strings whose ints are kept while reading (~7 MB): more than a trace's distinct
# prompt and output lengths.
_MAX_CACHED = 2**16

# Whole lines of plain numbers, which int() reads exactly as _count would: 15 digits at most (so
# below MAX_COUNT, 2**50, a 16-digit number), no sign, no space; \r\n as csv reads it. Possessive
# (no backtracking to remember): 5x faster on a chunk.
_PAIR_LINES = re.compile(rb"(?:[0-9]{1,15}+,[0-9]{1,15}+\r?+\n)++")
_ONE_LINES = re.compile(rb"(?:[0-9]{1,15}+\r?+\n)++")
_PLAIN_HEADER = re.compile(rb"([A-Za-z]+(?:,[A-Za-z]+)?)\r?\n")
# JSON lines as json.dumps writes them (spaces allowed around every token, numbers without a
# leading zero as JSON has them), and the translation that leaves their digits alone.
_JSON_FIELD = rb'\x20*+"%s"\x20*+:\x20*+(?:0|[1-9][0-9]{0,14}+)\x20*+'
_JSON_PAIRS = re.compile(rb"(?:\x20*+\{%s,%s\}\x20*+\r?+\n)++" % (_JSON_FIELD % b"prompt", _JSON_FIELD % b"output"))
_JSON_TOKENS = re.compile(rb"(?:\x20*+\{%s\}\x20*+\r?+\n)++" % (_JSON_FIELD % b"tokens"))
_DIGITS_ONLY = bytes(c if 48 <= c <= 57 else 32 for c in range(256))  # ord("0") .. ord("9")
# The headers read in bulk, as their keys: (two columns?, index of the prompt in a row's pair).
_BULK_LAYOUTS = {("prompt", "output"): (True, 0), ("output", "prompt"): (True, 1), ("prompt",): (False, 0),
                 ("tokens",): (False, 0)}  # fmt: skip
# The line breaks of str.splitlines (JSON lines are numbered as it numbers them).
_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"


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
        prompt, output = _count(keys["tokens"], where), 0
    elif "prompt" in keys:
        prompt, output = _count(keys["prompt"], where), _count(keys.get("output", 0), where)
    else:
        raise SourceError(f"{where}: needs a 'prompt' (and 'output') or a 'tokens' field")
    if prompt + output == 0:  # said with its line, before Request refuses it
        raise SourceError(f"{where}: a request of 0 tokens caches nothing")
    return Request(prompt, output)


class _Twice(ValueError):
    """A JSON object that names a key twice."""


def _pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """A JSON object whose keys are each given once (json keeps the last of a pair silently)."""
    keys = [key for key, _ in pairs]
    twice = next((k for n, k in enumerate(keys) if k in keys[:n]), None)
    if twice is not None:
        raise _Twice(f"the field {twice!r} is given twice")
    return dict(pairs)


# --- reading a mix --------------------------------------------------------------------------------


class ByteStream(Protocol):
    """What a mix is read from: an open binary file (inputs.files.open_regular_file), a BytesIO."""

    def read(self, size: int, /) -> bytes: ...

    def seek(self, offset: int, /) -> int: ...


@dataclass(frozen=True)
class Mix:
    """A request mix as counts: ``counts`` maps a total length (prompt + output tokens) to how many
    requests have it; the prompt and output sums give the means."""

    counts: Mapping[int, int]
    requests: int
    prompt_tokens: int
    output_tokens: int


# Rows as read: their prompts, their outputs (None: all 0) and their totals, in file order.
_Batch = tuple[list[int], list[int] | None, list[int]]


def parse_lengths(source: str | bytes | ByteStream, *, name: str) -> Mix:
    """CSV with a header (prompt,output or tokens) or JSON lines with the same keys, in one pass.

    A leading byte-order mark (Excel's "CSV UTF-8") is not part of the header. ``name`` names the
    source in messages. More than MAX_LENGTHS distinct lengths are refused as soon as they are read.
    """
    counts: Counter[int] = Counter()
    sums = [0, 0, 0]  # requests, prompt tokens, output tokens

    def take(batch: _Batch) -> None:
        prompts, outputs, totals = batch
        counts.update(totals)
        if len(counts) > MAX_LENGTHS:
            raise SourceError(
                f"{name} holds more than {MAX_LENGTHS:,} distinct request lengths (prompt + output), "
                "the most kvcalc sizes"
            )
        sums[0] += len(totals)
        sums[1] += sum(prompts)
        sums[2] += sum(outputs) if outputs is not None else 0

    _read(source, name, take)
    return Mix(counts, sums[0], sums[1], sums[2])


def parse_requests(source: str | bytes | ByteStream, *, name: str) -> list[Request]:
    """Every request of a mix, in file order (as parse_lengths reads it, but holding each one)."""
    requests: list[Request] = []

    def take(batch: _Batch) -> None:
        prompts, outputs, _ = batch
        requests.extend(map(Request, prompts, outputs if outputs is not None else [0] * len(prompts)))

    _read(source, name, take)
    return requests


def mix_of(requests: Iterable[Request]) -> Mix:
    """The counts of requests already in memory."""
    counts: Counter[int] = Counter()
    prompt = output = 0
    for r in requests:
        counts[r.tokens] += 1
        prompt += r.prompt
        output += r.output
    return Mix(counts, sum(counts.values()), prompt, output)


def _read(source: str | bytes | ByteStream, name: str, take: Callable[[_Batch], None]) -> None:
    if isinstance(source, str):
        source = source.encode("utf-8", "surrogatepass")  # a lone surrogate: not UTF-8, refused as such
    chunks = _Chunks(io.BytesIO(source) if isinstance(source, bytes) else source, name)
    try:
        rows = 0
        for batch in _batches(chunks, name):
            take(batch)
            rows += len(batch[2])
            del batch  # not held while the next one is read
        if not rows:
            raise SourceError(f"{name} lists no requests")
    except SourceError:
        chunks.drain()  # a file that is not UTF-8 is refused as such, wherever else it is wrong first
        raise


class _Chunks:
    """The stream's bytes, CHUNK_BYTES at a time, each checked to be UTF-8 as it is read."""

    def __init__(self, stream: ByteStream, name: str) -> None:
        self._stream = stream
        self._name = name
        self._decoder = codecs.getincrementaldecoder("utf-8")()

    def read(self) -> bytes:
        """The next chunk; b"" at the end."""
        chunk = self._stream.read(CHUNK_BYTES)
        try:
            if not chunk:
                self._decoder.decode(b"", final=True)
            elif self._decoder.getstate()[0] or not chunk.isascii():  # ASCII needs no decoding
                self._decoder.decode(chunk)
        except UnicodeDecodeError:
            raise SourceError(f"{self._name} is not UTF-8 text") from None
        return chunk

    def rest(self) -> Iterator[bytes]:
        while chunk := self.read():
            yield chunk

    def first(self) -> bytes:
        """The first chunk, a byte-order mark removed: empty only for an empty file (or one that is
        only the mark)."""
        chunk = self.read()
        while len(chunk) <= len(codecs.BOM_UTF8) and (more := self.read()):
            chunk += more
        return chunk.removeprefix(codecs.BOM_UTF8)

    def restart(self) -> bytes:
        """The first chunk again."""
        self._stream.seek(0)
        self._decoder.reset()
        return self.first()

    def drain(self) -> None:
        for _ in self.rest():
            pass


def _batches(chunks: _Chunks, name: str) -> Iterator[_Batch]:
    first = chunks.first()
    # JSON lines if the first character that is not white space is '{'; usually in the first chunk.
    decoder = codecs.getincrementaldecoder("utf-8")()
    text = decoder.decode(first).lstrip()
    if not text and first:
        while not text and (more := chunks.read()):
            text = decoder.decode(more).lstrip()
        first = chunks.restart()  # white space only so far: start again from the top
    if text.startswith("{"):
        yield from _jsonl_batches(chunks, first, name)
    else:
        yield from _csv_batches(chunks, first, name)


def _decoded(raw: Iterable[bytes]) -> Iterator[str]:
    """Text of chunks already checked to be UTF-8 (a character may straddle two of them)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    for chunk in raw:
        yield decoder.decode(chunk)
    yield decoder.decode(b"", final=True)


def _too_long(name: str, number: int) -> SourceError:
    return SourceError(f"{name} line {number}: longer than {MAX_LINE:,} characters, not a request")


class _Batcher:
    """Requests read one by one (the slow path), gathered into batches of _BATCH."""

    def __init__(self) -> None:
        self.prompts: list[int] = []
        self.outputs: list[int] = []
        self.totals: list[int] = []

    def add(self, request: Request) -> _Batch | None:
        """Add a request; the batch when it is full."""
        self.prompts.append(request.prompt)
        self.outputs.append(request.output)
        self.totals.append(request.tokens)
        return self.take() if len(self.totals) == _BATCH else None

    def take(self) -> _Batch:
        batch = (self.prompts, self.outputs, self.totals)
        self.prompts, self.outputs, self.totals = [], [], []
        return batch


def _json_rows(lines: Iterable[str], name: str, before: int) -> Generator[_Batch, None, int]:
    """Rows through the json module, numbered from ``before`` + 1; returns the lines read by the end."""
    batch = _Batcher()
    number = before
    for number, cut in enumerate(lines, before + 1):
        line = cut.rstrip(_BREAKS)  # a line ends in one line break (\r\n is one)
        if not line.strip():
            continue
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
        if full := batch.add(_request(item, f"{name} line {number}")):
            yield full
    if batch.totals:
        yield batch.take()
    return number


def _jsonl_batches(chunks: _Chunks, first: bytes, name: str) -> Generator[_Batch, None, None]:
    """JSON lines: chunks of whole lines all {"prompt": P, "output": O} (or all {"tokens": T}) in
    bulk, any other chunk line by line. Lines never span chunks (a chunk ends at \n), so each chunk
    is read alone, its lines numbered on from the chunk before."""
    lines = 0
    ints = _Ints()
    data = first
    while True:
        more = chunks.read()
        cut = len(data) if not more else data.rfind(b"\n") + 1  # at the end: the last line, unbroken
        block, data = data[:cut], data[cut:]
        if block:
            whole = block if block.endswith(b"\n") else block + b"\n"
            two = _JSON_PAIRS.fullmatch(whole) is not None
            batch = None
            if two or _JSON_TOKENS.fullmatch(whole):
                batch = _bulk(whole.translate(_DIGITS_ONLY).split(), two, 0, ints)
            if batch is not None:
                yield batch
                lines += whole.count(b"\n")
                del batch  # not held while the next one is read
            else:
                lines = yield from _json_rows(_json_lines([block.decode()], name, lines), name, lines)
        if not more:
            return
        if len(data) > MAX_LINE:  # a line too long to be a request: refused by _json_lines
            rest = _decoded(chain([data, more], chunks.rest()))
            yield from _json_rows(_json_lines(rest, name, lines), name, lines)
            return
        data += more


def _json_lines(pieces: Iterable[str], name: str, before: int) -> Iterator[str]:
    """The lines of the whole text as str.splitlines(keepends=True) cuts it, piece by piece;
    ``before`` lines were read before the first piece."""

    def cut(text: str) -> tuple[list[str], str]:
        lines = text.splitlines(keepends=True)
        # The last line may go on in the next piece (a \r there may be the first half of \r\n).
        last = lines[-1][-1] if lines else ""
        return (lines[:-1], lines[-1]) if lines and (last not in _BREAKS or last == "\r") else (lines, "")

    return _lines(pieces, name, before, cut)


def _csv_lines(pieces: Iterable[str], name: str, before: int) -> Iterator[str]:
    """The lines of the whole text as io.StringIO(text, newline="") cuts it (at \\n, \\r\\n and a
    lone \\r, each kept), piece by piece; ``before`` lines were read before the first piece."""

    def cut(text: str) -> tuple[list[str], str]:
        lines = io.StringIO(text, newline="").readlines()
        return (lines[:-1], lines[-1]) if lines and not lines[-1].endswith("\n") else (lines, "")

    return _lines(pieces, name, before, cut)


def _lines(pieces: Iterable[str], name: str, before: int, cut: Callable[[str], tuple[list[str], str]]) -> Iterator[str]:
    """Whole lines of the text the pieces make, each at most MAX_LINE long: ``cut`` splits a
    text into its complete lines and the unfinished rest, which waits for the next piece."""
    tail = ""
    number = before
    for piece in pieces:
        lines, tail = cut(tail + piece)
        for line in lines:
            number += 1
            if len(line) > MAX_LINE:
                raise _too_long(name, number)
            yield line
        if len(tail) > MAX_LINE:
            raise _too_long(name, number + 1)
    if tail:
        yield tail


def _csv_rows(
    lines: Iterable[str], name: str, names: list[str] | None, rows: int, before: int
) -> Generator[_Batch, None, tuple[int, int]]:
    """Rows through the csv module: the header first when ``names`` is None, else rows under that
    header after ``rows`` rows on ``before`` lines. Returns the rows and the lines read by the end."""
    # newline="" lines: the csv module handles \r, \r\n and quoted newlines itself.
    reader = csv.DictReader(lines, fieldnames=names)
    batch = _Batcher()
    number = rows + 1
    try:
        if names is None:
            if not reader.fieldnames:
                raise SourceError(f"{name} is empty: give a CSV header (prompt,output) or JSON lines")
            _keys(list(reader.fieldnames), f"{name} line 1")  # before any row: DictReader keeps one of a pair
        for number, row in enumerate(reader, rows + 2):
            if None in row:
                raise SourceError(f"{name} line {number}: more values than the header has columns")
            if full := batch.add(_request(dict(row), f"{name} line {number}")):
                yield full
    except csv.Error as exc:
        raise SourceError(f"{name} line {before + reader.line_num}: not readable CSV ({exc})") from None
    if batch.totals:
        yield batch.take()
    return number - 1, before + reader.line_num


class _Ints(dict[bytes, int]):
    """Digit strings to ints, each string converted once: a lookup is twice as fast as int(), and
    equal lengths share one int. At most _MAX_CACHED strings are kept; past twice that many misses
    (a file of that many distinct numbers) int() converts every string instead."""

    def __init__(self) -> None:
        super().__init__()
        self.misses = 0

    def __missing__(self, key: bytes) -> int:
        self.misses += 1
        value = int(key)
        if len(self) < _MAX_CACHED:
            self[key] = value
        return value

    def convert(self, digits: list[bytes]) -> list[int]:
        return list(map(int if self.misses > 2 * _MAX_CACHED else self.__getitem__, digits))


def _bulk(digits: list[bytes], two: bool, prompt_at: int, ints: _Ints) -> _Batch | None:
    """Rows of plain numbers (one or two a row, in order) as a batch; None if one is 0 tokens."""
    numbers = ints.convert(digits)
    prompts = numbers[prompt_at::2] if two else numbers
    outputs = numbers[1 - prompt_at :: 2] if two else None
    totals = list(map(add, prompts, outputs)) if outputs is not None else prompts
    return (prompts, outputs, totals) if 0 not in totals else None


def _csv_batches(chunks: _Chunks, first: bytes, name: str) -> Generator[_Batch, None, None]:
    header = _PLAIN_HEADER.match(first)
    names = header[1].decode().split(",") if header else []
    layout = _BULK_LAYOUTS.get(tuple(_keys(names, f"{name} line 1"))) if header else None
    if header is None or layout is None:  # anything but a plain header: the csv module reads it all
        yield from _csv_rows(_csv_lines(_decoded(chain([first], chunks.rest())), name, 0), name, None, 0, 0)
        return
    two, prompt_at = layout
    lines_pattern = _PAIR_LINES if two else _ONE_LINES
    rows, lines = 0, 1  # read so far: rows of requests, lines of the file
    ints = _Ints()
    data = first[header.end() :]
    while True:
        more = chunks.read()
        cut = len(data) if not more else data.rfind(b"\n") + 1  # at the end: the last line, unbroken
        block, data = data[:cut], data[cut:]
        if block:
            whole = block if block.endswith(b"\n") else block + b"\n"
            batch = None
            if lines_pattern.fullmatch(whole):
                batch = _bulk(whole.replace(b",", b"\n").split() if two else whole.split(), two, prompt_at, ints)
            if batch is not None:
                yield batch
                rows += len(batch[2])
                lines += whole.count(b"\n")
                block = b""
                del batch  # not held while the next one is read
            if block and b'"' in block:  # a quoted field may span lines: the csv module reads the rest
                rest = _decoded(chain([block, data, more], chunks.rest()))
                yield from _csv_rows(_csv_lines(rest, name, lines), name, names, rows, lines)
                return
            if block:  # these lines alone, row by row
                rows, lines = yield from _csv_rows(_csv_lines([block.decode()], name, lines), name, names, rows, lines)
        if not more:
            return
        if len(data) > MAX_LINE:  # a line too long to be a request: the csv path refuses it
            rest = _decoded(chain([data, more], chunks.rest()))
            yield from _csv_rows(_csv_lines(rest, name, lines), name, names, rows, lines)
            return
        data += more


# --- sizing a mix -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestSummary:
    """A request mix sized: ``lengths`` holds (tokens, requests of that length, bytes of one such
    request) for each distinct length, shortest first; ``total_bytes`` has every request resident."""

    lengths: tuple[tuple[int, int, int], ...]
    requests: int
    prompt_tokens: int
    output_tokens: int
    total_bytes: int
    engine: str
    notes: tuple[str, ...] = ()
    # With tp x pp > 1: every request resident, the bytes on the most loaded GPU (None: one GPU).
    per_gpu_bytes: int | None = None
    gpus: int = 1

    def tokens_percentile(self, q: float) -> int:
        """Nearest rank: the smallest length with at least q% of the requests at or below it
        (``q`` in [0, 100]; 0 is the shortest)."""
        return self.lengths[bisect_left(self._tokens_ranks, self._rank(q))][0]

    def bytes_percentile(self, q: float) -> int:
        """Nearest rank over each request's bytes (ordered by bytes: they need not grow with tokens)."""
        values, ranks = self._bytes_ranks
        return values[bisect_left(ranks, self._rank(q))]

    def _rank(self, q: float) -> int:
        if isinstance(q, bool) or not isinstance(q, int | float) or not 0 <= q <= 100:  # NaN too
            raise UsageError(f"a percentile must be a number from 0 to 100, got {q!r:.40}", param="q")
        if not self.requests:
            raise UsageError("a mix of no requests has no percentiles", param="q")
        if isinstance(q, float):
            from fractions import Fraction

            rank = math.ceil(Fraction(str(q)) * self.requests / 100)  # exactly: 99.9% of 1,000 is 999
        else:
            rank = -(-q * self.requests // 100)
        return max(1, rank)

    # Requests up to and including each length (8 bytes each: a million lengths take 8 MB).
    @cached_property
    def _tokens_ranks(self) -> array[int]:
        return array("q", accumulate(n for _, n, _ in self.lengths))

    @cached_property
    def _bytes_ranks(self) -> tuple[list[int], array[int]]:
        ordered = sorted(self.lengths, key=itemgetter(2))
        return [size for _, _, size in ordered], array("q", accumulate(n for _, n, _ in ordered))


def request_bytes(plan: Plan, prefix: int, tokens: int) -> int:
    """The cache of one request of ``tokens`` tokens: batch 1, one replica, the shared prefix cut to it."""
    return plan.total_bytes(tokens, 1, min(prefix, tokens))


def summarize_requests(
    spec: ModelSpec, workload: Workload, engine: StorageRules, mix: Mix | Iterable[Request]
) -> RequestSummary:
    """Each distinct length's cache (one request of it), and the total with every request resident."""
    if not isinstance(mix, Mix):
        mix = mix_of(mix)
    counts = mix.counts
    engine.check_shared_prefix(workload.shared_prefix)
    # One plan for every length the mix holds.
    plan = compile_plan(spec, replace(workload, tokens=1, batch=1, dp=1, shared_prefix=0), engine)
    prefix = workload.shared_prefix
    lengths = tuple((t, counts[t], request_bytes(plan, prefix, t)) for t in sorted(counts))
    total = sum(n * size for _, n, size in lengths)
    gpus = workload.tp * workload.pp
    per_gpu = None
    if gpus > 1:  # each stage's GPU holds its layers' share of every request: summed stage by stage
        stages = [0] * len(plan.stages)
        for t, n, _ in lengths:
            for i, size in enumerate(plan.stage_bytes(t, 1, min(prefix, t))):
                stages[i] += n * size
        per_gpu = max(stages)
    return RequestSummary(lengths, mix.requests, mix.prompt_tokens, mix.output_tokens, total, engine.name,
                          per_gpu_bytes=per_gpu, gpus=gpus)  # fmt: skip
