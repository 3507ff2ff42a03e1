"""A GGUF file in a Hub repo as MODEL: its header read with ranged requests, never its tensor data.

MODEL names the file as ``org/name:path/to/file.gguf``, or by its Hub page or download URL
(``https://huggingface.co/org/name/blob/REV/file.gguf``, ``.../resolve/REV/file.gguf``). The
header is fetched in byte ranges through huggingface_hub's own machinery (``hf_hub_url`` for the
address, ``build_hf_headers`` for the token, its shared ``get_session()`` client, which follows
the Hub's redirect to its CDN, and ``hf_raise_for_status`` for the Hub's errors), the way
huggingface_hub itself reads safetensors headers (``HfApi.parse_safetensors_file_metadata``).
The ranges grow from 1 MiB, doubling, until kvcalc.inputs.gguf.parse_header has the whole header; at most
HEADER_LIMIT bytes are ever fetched from one file. huggingface_hub is imported only here, and
only when such a MODEL is read.

A split GGUF (``PREFIX-00001-of-0000N.gguf``, llama.cpp's gguf-split names) is given by its first
shard: its header holds the metadata, and the weights add up every shard's tensor infos, each
shard's header read with ranged requests too.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvcalc.errors import SourceError
from kvcalc.inputs.hub import _HUB_HOSTS, _hub_hosts, _is_offline, gguf_header_error

# The most bytes kvcalc fetches from one GGUF on the Hub: a header holds the metadata (a tokenizer
# of 10^5-10^6 strings takes a few MiB) and the tensor infos, never anywhere near this.
HEADER_LIMIT = 64 * 2**20
FIRST_RANGE = 2**20  # bytes of the first ranged request; each further one doubles, up to:
MAX_RANGE = 16 * 2**20

_REPO = r"[A-Za-z0-9][\w.\-]{0,95}/[A-Za-z0-9][\w.\-]{0,95}"
_COLON_FORM = re.compile(rf"^(?P<repo>{_REPO}):(?P<file>[^:]+\.gguf)$", re.IGNORECASE)
_SHARD = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


@dataclass(frozen=True)
class HubGguf:
    """A GGUF file in a Hub model repo: repo id, path inside the repo, revision named by MODEL."""

    repo_id: str
    filename: str
    revision: str | None = None

    @property
    def name(self) -> str:
        return f"{self.repo_id}:{self.filename}"


def parse_hub_gguf(model: str) -> HubGguf | None:
    """The Hub GGUF file MODEL names (``org/name:file.gguf`` or a /blob/ or /resolve/ URL of a
    .gguf file on the Hub), or None for any other MODEL text."""
    m = _COLON_FORM.match(model)
    if m is not None:
        filename = m["file"].strip("/")
        _check_filename(model, filename)
        return HubGguf(m["repo"], filename)
    if not model.lower().split("?", 1)[0].rstrip("/").endswith(".gguf"):
        return None
    return _parse_url(model)


def _parse_url(model: str) -> HubGguf | None:
    from urllib.parse import unquote, urlsplit

    lowered = model.lower()
    if "://" not in model and not any(lowered.startswith(f"{host}/") for host in _HUB_HOSTS):
        return None
    try:
        parts = urlsplit(model if "://" in model else f"https://{model}")
        host = (parts.hostname or "").lower()
    except ValueError:
        return None  # sources.parse_hub_url says what is wrong with it
    if parts.scheme.lower() not in ("http", "https") or host not in _hub_hosts():
        return None
    segments = [unquote(s) for s in parts.path.split("/") if s]
    if len(segments) < 5 or segments[2] not in ("blob", "resolve"):
        return None
    repo_id, rest = f"{segments[0]}/{segments[1]}", segments[3:]
    taken = 3 if rest[0] == "refs" and len(rest) >= 4 else 1  # refs/pr/N, as sources.parse_hub_url
    revision, inner = "/".join(rest[:taken]), rest[taken:]
    if not inner or not re.fullmatch(_REPO, repo_id):
        return None
    filename = "/".join(inner)
    _check_filename(model, filename)
    return HubGguf(repo_id, filename, revision)


def _check_filename(model: str, filename: str) -> None:
    if any(part in ("", ".", "..") for part in filename.split("/")):
        raise SourceError(f"MODEL {model}: {filename!r} is not a file path inside a Hub repo")


def shard_names(filename: str) -> list[str] | None:
    """Every shard's path of the split GGUF whose first shard is ``filename``; None when not split.
    A later shard is a SourceError naming the first."""
    folder, _, base = filename.rpartition("/")
    m = _SHARD.match(base)
    if m is None:
        return None
    number, count = int(m["no"]), int(m["count"])
    if number != 1:
        first = f"{m['prefix']}-{1:05d}-of-{m['count']}.gguf"
        raise SourceError(f"{base} is shard {number} of {count} of a split GGUF: give the first, {first}")
    prefix = f"{folder}/" if folder else ""
    return [f"{prefix}{m['prefix']}-{i:05d}-of-{m['count']}.gguf" for i in range(1, count + 1)]


# --- reading a header in ranges ----------------------------------------------------------------------


@dataclass(frozen=True)
class Fetched:
    """A header read from the Hub: the header, the bytes fetched for it, the file's size if known."""

    header: Any  # kvcalc.inputs.gguf.GgufHeader
    fetched: int
    size: int | None
    requests: int


class RangedReader:
    """A read-only stream over a Hub file that fetches byte ranges as they are read.

    Each ``read`` that finds its buffer empty makes one ranged GET of the next block (1 MiB, then
    doubling up to MAX_RANGE); ``read`` may return fewer bytes than asked, as kvcalc.inputs.gguf's reader
    allows. Past HEADER_LIMIT bytes fetched it raises a SourceError instead of fetching more. A
    server that ignores ``Range`` and answers 200 is read only as far as the block needs.
    """

    def __init__(self, url: str, headers: dict[str, str], label: str, timeout: float | None) -> None:
        self._url = url
        self._headers = headers
        self._label = label
        self._timeout = timeout
        self._offset = 0  # of the next byte to fetch
        self._block = FIRST_RANGE
        self._buffer = b""
        self.fetched = 0
        self.requests = 0
        self.size: int | None = None

    def read(self, count: int = -1) -> bytes:
        if not self._buffer:
            self._buffer = self._fetch()
        if count < 0:
            count = len(self._buffer)
        data, self._buffer = self._buffer[:count], self._buffer[count:]
        return data

    def _fetch(self) -> bytes:
        from huggingface_hub import get_session
        from huggingface_hub.utils import hf_raise_for_status  # type: ignore[attr-defined]  # exported lazily

        if self.size is not None and self._offset >= self.size:
            return b""
        if self.fetched >= HEADER_LIMIT:
            raise SourceError(
                f"{self._label}: the GGUF header runs past {HEADER_LIMIT // 2**20} MiB; kvcalc reads no more of it"
            )
        length = min(self._block, HEADER_LIMIT - self.fetched)
        self._block = min(2 * self._block, MAX_RANGE)
        first, last = self._offset, self._offset + length - 1
        headers = {**self._headers, "Range": f"bytes={first}-{last}"}
        self.requests += 1
        with get_session().stream("GET", self._url, headers=headers, timeout=self._timeout) as response:
            if response.status_code == 416:  # the range starts at or past the end of the file
                response.read()
                self.size = first
                return b""
            if response.status_code >= 400:
                response.read()  # hf_raise_for_status reads the Hub's error message from the body
                hf_raise_for_status(response)
            skip = 0
            if response.status_code == 206:
                start, self.size = _content_range(response.headers.get("Content-Range"), self._label)
                if start != first:
                    raise SourceError(f"{self._label}: the Hub answered bytes from {start:,} when asked for {first:,}")
            else:  # 200: the whole file from its start; keep only the block asked for
                skip = first
                declared = response.headers.get("Content-Length")
                self.size = int(declared) if declared and declared.isdigit() else None
            data = _read_range(response.iter_bytes(), skip, length)
        self.fetched += len(data)
        self._offset += len(data)
        if len(data) < length and self.size is None:
            self.size = self._offset
        return data


def _read_range(chunks: Any, skip: int, length: int) -> bytes:
    """``length`` bytes after the first ``skip`` of a response body, reading no further."""
    parts: list[bytes] = []
    have = 0
    for chunk in chunks:
        dropped = min(skip, len(chunk))
        skip -= dropped
        parts.append(chunk[dropped : dropped + length - have])
        have += len(parts[-1])
        if have >= length:
            break
    return b"".join(parts)


def _content_range(value: str | None, label: str) -> tuple[int, int | None]:
    """(first byte, file size or None) of a ``Content-Range: bytes A-B/SIZE`` header."""
    m = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+|\*)", (value or "").strip())
    if m is None:
        raise SourceError(f"{label}: the Hub answered a byte range without a valid Content-Range ({value!r})")
    return int(m[1]), None if m[3] == "*" else int(m[3])


_CACHE: dict[tuple[str, str, str | None], Fetched] = {}
_CACHE_LOCK = threading.Lock()


def fetch_header(gguf: HubGguf, filename: str, revision: str | None) -> Fetched:
    """The GGUF header of ``filename`` in ``gguf``'s repo at ``revision``, read in ranges (once per
    process: resolving MODEL and sizing its weights share it)."""
    from kvcalc.inputs.gguf import parse_header

    key = (gguf.repo_id, filename, revision)
    with _CACHE_LOCK:
        if key in _CACHE:
            return _CACHE[key]
    from huggingface_hub import constants, hf_hub_url
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]  # exported lazily

    label = f"{gguf.repo_id}:{filename}"
    try:
        url = hf_hub_url(gguf.repo_id, filename, revision=revision)
        reader = RangedReader(url, build_hf_headers(), label, float(constants.HF_HUB_DOWNLOAD_TIMEOUT))
        header = parse_header(reader, label)  # type: ignore[arg-type]  # read() is all it uses
    except SourceError:
        raise
    except Exception as exc:
        raise gguf_header_error(exc, gguf.repo_id, filename, revision) from None
    if reader.size is not None:  # the file's size, from the Hub's Content-Range: is the tensor data there
        from dataclasses import replace

        header = replace(header, file_size=reader.size)
    fetched = Fetched(header, reader.fetched, reader.size, reader.requests)
    with _CACHE_LOCK:
        _CACHE[key] = fetched
    return fetched


def _require_online(gguf: HubGguf) -> None:
    if _is_offline():
        raise SourceError(
            f"the GGUF header of {gguf.name} is read from the Hub, which HF_HUB_OFFLINE=1 forbids: "
            "go online, or download the file and give its local path"
        )


def _at(revision: str | None) -> str:
    return f" at revision {revision}" if revision else ""


def resolve_hub_gguf(
    gguf: HubGguf, *, revision: str | None, on_fetch: Callable[[str], None] | None
) -> tuple[dict[str, Any], list[str]]:
    """(config, notes) of a Hub GGUF, from its (first shard's) header."""
    from kvcalc.inputs.gguf import gguf_config

    shards = shard_names(gguf.filename)
    _require_online(gguf)
    if on_fetch is not None:
        on_fetch(f"fetching the GGUF header of {gguf.name}{_at(revision)} from the Hub (byte ranges)...")
    got = fetch_header(gguf, gguf.filename, revision)
    config, notes = gguf_config(got.header, gguf.name)
    of = f" of its {got.size:,}" if got.size is not None else ""
    split = f" (shard 1 of {len(shards)})" if shards else ""
    notes.append(
        f"GGUF header{split} read from the Hub in {got.requests} ranged request(s): {got.fetched:,} bytes fetched{of}"
    )
    return config, notes


def shard_headers(gguf: HubGguf, *, revision: str | None, on_fetch: Callable[[str], None] | None) -> list[Fetched]:
    """The header of every shard of a Hub GGUF (the file itself when it is not split), in order,
    each read in byte ranges; ``on_fetch`` is told first unless every one was read already."""
    shards = shard_names(gguf.filename) or [gguf.filename]
    _require_online(gguf)
    with _CACHE_LOCK:
        cached = all((gguf.repo_id, name, revision) in _CACHE for name in shards)
    if on_fetch is not None and not cached:
        what = f"the {len(shards)} shards' GGUF headers" if len(shards) > 1 else "the GGUF header"
        on_fetch(f"fetching {what} of {gguf.name}{_at(revision)} from the Hub (byte ranges)...")
    return [fetch_header(gguf, name, revision) for name in shards]


def hub_gguf_weights(gguf: HubGguf, *, revision: str | None, on_fetch: Callable[[str], None] | None) -> tuple[int, str]:
    """Bytes of a Hub GGUF's tensors from the tensor infos of every shard's header."""
    from kvcalc.inputs.gguf import loaded_tensor_bytes

    headers = shard_headers(gguf, revision=revision, on_fetch=on_fetch)
    shards = headers
    # loaded_tensor_bytes refuses implausible or truncated tensor data (gguf.check_tensor_data).
    total = loaded_tensor_bytes([h.header for h in headers], gguf.name)
    if total <= 0:
        raise SourceError(f"{gguf.name} holds no tensors: give --weights SIZE")
    fetched = sum(h.fetched for h in headers)
    where = f", {len(shards)} shards" if len(shards) > 1 else ""
    return total, f"GGUF tensor infos{where}, Hub header ranges ({fetched:,} bytes fetched)"
