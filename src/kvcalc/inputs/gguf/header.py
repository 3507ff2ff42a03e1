"""The GGUF header: its metadata and tensor infos, never the tensor data.

A small reader of kvcalc's own, in ``struct``, so that ``kvcalc estimate`` starts as fast with a
GGUF as with a preset (the ``gguf`` package imports numpy). The layout, from the GGUF spec
(ggml-org/ggml docs/gguf.md) and llama.cpp's ggml/src/gguf.cpp: magic ``GGUF``, a uint32
version (2 and 3 here: both use 64-bit counts; 1 used 32-bit ones and is long gone), uint64 tensor
count, uint64 metadata count, the metadata (key string, uint32 value type, value), then per
tensor its name, uint32 dimension count, uint64 dimensions, uint32 ggml type and uint64 offset.
Strings are a uint64 length and UTF-8 bytes; everything is little-endian.

Every function here is pure except ``read_header`` (and ``split_shards``, ``is_gguf``), which read files.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

from kvcalc.errors import SourceError

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
# Bounds no honest header comes near: a tokenizer holds ~10^6 strings, a chat template ~10^5 bytes.
_MAX_STRING = 64 * 2**20
_MAX_ARRAY = 2**26
_MAX_COUNT = 2**24  # tensors or metadata entries
_MAX_DIMS = 4  # GGML_MAX_DIMS

# (block size in elements, bytes per block) of every ggml type, by its id (enum ggml_type). Block
# sizes are type_traits' blck_size in ggml/src/ggml.c (ggml-org/llama.cpp @ 00bdaa105cb0), bytes
# per block its sizeof(block_*) (ggml/src/ggml-common.h); both as GGML_QUANT_SIZES of the gguf
# package 0.19.0 (gguf/constants.py) lists them. Ids 4, 5 and 31-33, 36-38 are removed types.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36), 10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8),
    28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17), 40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18),
    42: ("Q2_0", 64, 18),
}  # fmt: skip

# GGUF metadata value types: id -> struct format (scalars); 8 string, 9 array.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]
    ggml_type: int
    offset: int

    @property
    def type_name(self) -> str:
        return GGML_TYPES[self.ggml_type][0]

    @property
    def nbytes(self) -> int:
        """ggml_nbytes of the contiguous tensor: rows of dims[0] elements in whole blocks."""
        _, block, size = GGML_TYPES[self.ggml_type]
        count = 1
        for n in self.dims:
            count *= n
        return count // block * size


@dataclass(frozen=True)
class GgufHeader:
    version: int
    metadata: dict[str, Any]
    tensors: tuple[TensorInfo, ...]
    # Each key's GGUF value type: (type id, item type id of an array or None). What a writer needs
    # to give llama.cpp the file's own metadata back (llamacpp_probe.file_plan).
    value_types: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    # Where the tensor data begins (the header's end, padded to general.alignment; None when that
    # key is no power of two) and the file's size in bytes, when known: whether the data is there.
    data_offset: int | None = None
    file_size: int | None = None

    @property
    def tensor_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def data_end(self) -> int | None:
        """The byte just past the last tensor's data, as the tensor infos place it (None: no tensor,
        or no known data offset)."""
        if self.data_offset is None or not self.tensors:
            return None
        return self.data_offset + max(t.offset + t.nbytes for t in self.tensors)


_CHUNK = 2**20
_U64 = struct.Struct("<Q")


class _Cursor:
    """Reads the stream in 1 MiB chunks and parses from the buffer: a tokenizer's 10^5 strings
    are then 10^5 slices, not 10^5 read calls."""

    def __init__(self, stream: BinaryIO, label: str) -> None:
        self._stream = stream
        self._label = label
        self._buf = b""
        self._pos = 0
        self._base = 0  # the stream offset of self._buf[0]
        self.item_type = 0  # the item type of the last array read

    @property
    def offset(self) -> int:
        """Bytes of the stream parsed so far."""
        return self._base + self._pos

    def _fill(self, count: int) -> None:
        """Make at least ``count`` bytes available from the current position, or fail: truncated."""
        have = len(self._buf) - self._pos
        if have >= count:
            return
        parts = [self._buf[self._pos :]]
        while have < count:
            chunk = self._stream.read(max(_CHUNK, count - have))
            if not chunk:
                raise SourceError(f"{self._label}: truncated GGUF header (the file ends inside it)")
            parts.append(chunk)
            have += len(chunk)
        self._base += self._pos
        self._buf, self._pos = b"".join(parts), 0

    def take(self, count: int) -> bytes:
        self._fill(count)
        data = self._buf[self._pos : self._pos + count]
        self._pos += count
        return data

    def skip_strings(self, count: int, key: str) -> None:
        for _ in range(count):
            self._fill(8)
            (length,) = _U64.unpack_from(self._buf, self._pos)
            if length > _MAX_STRING:
                raise SourceError(f"{self._label}: GGUF key {key} holds a {length:,}-byte string")
            self._pos += 8
            self._fill(length)
            self._pos += length

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize("<" + fmt)
        self._fill(size)
        values = struct.unpack_from("<" + fmt, self._buf, self._pos)
        self._pos += size
        return values

    def u32(self) -> int:
        return int(self.unpack("I")[0])

    def u64(self) -> int:
        return int(self.unpack("Q")[0])

    def string(self, what: str) -> str:
        length = self.u64()
        if length > _MAX_STRING:
            raise SourceError(f"{self._label}: GGUF {what} declares a {length:,}-byte string; not a real header")
        raw = self.take(length)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise SourceError(f"{self._label}: GGUF {what} is not UTF-8") from None

    def value(self, kind: int, key: str, *, keep: bool = True) -> Any:
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])[0]
        if kind == _STRING:
            return self.string(f"value of {key}")
        if kind == _ARRAY:
            item = self.u32()
            self.item_type = item
            count = self.u64()
            if count > _MAX_ARRAY:
                raise SourceError(f"{self._label}: GGUF key {key} declares an array of {count:,} items")
            if item in _SCALARS:
                fmt = _SCALARS[item]
                data = self.take(count * struct.calcsize("<" + fmt))
                return list(struct.unpack(f"<{count}{fmt}", data)) if keep else count
            if item == _STRING:
                if not keep:  # a tokenizer's vocabulary: skipped, not decoded
                    self.skip_strings(count, key)
                    return count
                return [self.string(f"item of {key}") for _ in range(count)]
            raise SourceError(f"{self._label}: GGUF key {key} holds an array of value type {item}; kvcalc reads none")
        raise SourceError(f"{self._label}: GGUF key {key} has unknown value type {kind}")


def parse_header(stream: BinaryIO, label: str) -> GgufHeader:
    """The GGUF header at the start of ``stream``; one SourceError line for anything that is not one."""
    cur = _Cursor(stream, label)
    try:
        magic = cur.take(4)
    except SourceError:
        magic = b""
    if magic != MAGIC:
        raise SourceError(f"{label} is not a GGUF file (no 'GGUF' magic at its start)")
    version = cur.u32()
    if version not in SUPPORTED_VERSIONS:
        swapped = " (a big-endian GGUF?)" if version >= 2**16 else ""
        raise SourceError(f"{label}: GGUF version {version}{swapped} is not supported; kvcalc reads versions 2 and 3")
    n_tensors, n_kv = cur.u64(), cur.u64()
    if n_tensors > _MAX_COUNT or n_kv > _MAX_COUNT:
        raise SourceError(f"{label}: GGUF header declares {n_tensors:,} tensors and {n_kv:,} keys; not a real header")
    metadata: dict[str, Any] = {}
    types: dict[str, tuple[int, int | None]] = {}
    for _ in range(n_kv):
        key = cur.string("key")
        kind = cur.u32()
        # A tokenizer's vocabulary, merges and scores size nothing kvcalc reports: read past them.
        metadata[key] = cur.value(kind, key, keep=not key.startswith("tokenizer.ggml."))
        types[key] = (kind, cur.item_type if kind == _ARRAY else None)
    tensors: list[TensorInfo] = []
    for _ in range(n_tensors):
        name = cur.string("tensor name")
        n_dims = cur.u32()
        if n_dims > _MAX_DIMS:
            raise SourceError(f"{label}: GGUF tensor {name} has {n_dims} dimensions; ggml allows at most {_MAX_DIMS}")
        dims = tuple(int(d) for d in cur.unpack(f"{n_dims}Q"))
        ggml_type = cur.u32()
        offset = cur.u64()
        if ggml_type not in GGML_TYPES:
            raise SourceError(f"{label}: GGUF tensor {name} has unknown ggml type id {ggml_type}")
        block = GGML_TYPES[ggml_type][1]
        if dims and dims[0] % block:
            raise SourceError(
                f"{label}: GGUF tensor {name} has rows of {dims[0]} elements, not whole "
                f"{GGML_TYPES[ggml_type][0]} blocks of {block}"
            )
        tensors.append(TensorInfo(name, dims, ggml_type, offset))
    alignment = metadata.get("general.alignment", _ALIGNMENT)
    aligned = isinstance(alignment, int) and not isinstance(alignment, bool) and alignment > 0
    data_offset = -(-cur.offset // alignment) * alignment if aligned and not alignment & (alignment - 1) else None
    return GgufHeader(version, metadata, tuple(tensors), types, data_offset)


_ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT: the tensor data starts at a multiple of general.alignment


def read_header(path: Path) -> GgufHeader:
    """The header of the GGUF file at ``path`` (a regular file; only the header is read)."""
    from kvcalc.inputs.files import _open_regular

    label = str(path)
    try:
        fd = _open_regular(path, label)
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "rb", buffering=0) as stream:
            return replace(parse_header(stream, label), file_size=os.fstat(stream.fileno()).st_size)
    except OSError as exc:
        raise SourceError(f"cannot read the GGUF header of {path}: {exc.strerror or exc}") from None


def is_gguf(path: Path) -> bool:
    """Whether ``path`` names a GGUF: by its suffix, or by its first four bytes."""
    if path.suffix.lower() == ".gguf":
        return True
    try:
        with open(path, "rb") as stream:
            return stream.read(4) == MAGIC
    except OSError:
        return False


_SHARD = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


def shard_position(path: Path) -> tuple[int, int] | None:
    """(shard number, shard count) of a split GGUF's file name (llama.cpp's gguf-split names
    ``PREFIX-%05d-of-%05d.gguf``), or None."""
    m = _SHARD.match(path.name)
    return (int(m["no"]), int(m["count"])) if m else None


def split_shards(path: Path) -> list[Path]:
    """Every shard of the split GGUF whose first shard is ``path`` (just ``path`` when it is not
    split); a SourceError naming a shard that is not beside it."""
    position = shard_position(path)
    if position is None:
        return [path]
    m = _SHARD.match(path.name)
    assert m is not None
    count = position[1]
    shards = [path.with_name(f"{m['prefix']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    for shard in shards:
        if not shard.exists():
            raise SourceError(f"split GGUF shard {shard.name} is not beside {path.name}: give --weights SIZE")
    return shards
