"""GGUF files as MODEL: the header only (metadata and tensor infos), never the tensor data.

A small reader of kvcalc's own, in ``struct``, so that ``kvcalc estimate`` starts as fast with a
GGUF as with a preset (the ``gguf`` package imports numpy). The layout, from the GGUF spec
(ggml-org/ggml docs/gguf.md) and llama.cpp's ggml/src/gguf.cpp: magic ``GGUF``, a uint32
version (2 and 3 here: both use 64-bit counts; 1 used 32-bit ones and is long gone), uint64 tensor
count, uint64 metadata count, the metadata (key string, uint32 value type, value), then per
tensor its name, uint32 dimension count, uint64 dimensions, uint32 ggml type and uint64 offset.
Strings are a uint64 length and UTF-8 bytes; everything is little-endian.

``gguf_config`` turns the metadata into the Hugging Face style config dict ``read_config`` reads:
the inverse of ``llamacpp_probe.gguf_plan``, which writes what convert_hf_to_gguf.py writes.
Every function here is pure except ``read_header`` (and ``split_shards``), which read files.
"""

from __future__ import annotations

import math
import os
import re
import struct
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from .errors import SourceError

if TYPE_CHECKING:
    from .offload import LayerWeights

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
    from .sources import _open_regular

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


# --- metadata -> config -----------------------------------------------------------------------------------

# llama.cpp architecture -> the HF model_type whose rules kvcalc applies to it (the inverse of
# llamacpp_probe.ARCHITECTURES; Mistral and Mixtral convert to "llama" and read as Llama).
ARCH_TYPES: dict[str, str] = {
    "llama": "llama",
    "qwen2": "qwen2",
    "qwen2moe": "qwen2_moe",
    "qwen3": "qwen3",
    "qwen3moe": "qwen3_moe",
    "starcoder2": "starcoder2",
    "phi3": "phi3",
    "gemma2": "gemma2",
    "gemma3": "gemma3_text",
    "cohere2": "cohere2",
    "gpt-oss": "gpt_oss",
    "llama4": "llama4_text",
    "deepseek2": "deepseek_v3",
    # Plain attention, no window, head dim n_embd / n_head unless key_length says otherwise (the
    # converters: conversion/falcon.py @ 5535795b, gemma.py @ 2bbcf7fc, phi.py Phi2Model @ 051139f5,
    # gpt2.py @ 5535795b, starcoder.py @ 5535795b, command_r.py CommandR2Model @ 00487aad, olmo.py
    # Olmo2Model @ 051139f5 (OLMo 3: the window and its per-layer pattern), exaone.py ExaoneModel @
    # 051139f5, glm.py Glm4Model and Glm4MoeModel @ 7bca1fd9); tests/test_gguf_more.py.
    "falcon": "falcon",
    "gemma": "gemma",
    "phi2": "phi",
    "gpt2": "gpt2",
    "starcoder": "gpt_bigcode",
    "command-r": "cohere",
    "olmo2": "olmo2",
    "exaone": "exaone",
    "glm4": "glm4",
    "glm4moe": "glm4_moe",
    # Recurrent and hybrid architectures (ssm.* / shortconv.* keys; see _recurrent).
    "mamba": "mamba",
    "mamba2": "mamba2",
    "granitehybrid": "granitemoehybrid",
    "jamba": "jamba",
    "lfm2": "lfm2",
    "qwen3next": "qwen3_next",
    "nemotron_h": "nemotron_h",
    "falcon-h1": "falcon_h1",
    "gemma3n": "gemma3n_text",
    # More hybrids (see the recurrent section below): gated delta net + attention, MLA + Kimi Delta
    # Attention, short convs + MoE, Nemotron-H with MoE layers.
    "qwen35": "qwen3_5_text",
    "qwen35moe": "qwen3_5_moe_text",
    "kimi-linear": "kimi_linear",
    "lfm2moe": "lfm2_moe",
    "nemotron_h_moe": "nemotron_h",
    # Attention with per-layer geometry, mapped by their own functions (_PER_LAYER_ATTENTION below).
    "gemma4": "gemma4_text",
    "mimo2": "mimo_v2_flash",
    "deci": "nemotron-nas",
    # Plain attention in every layer, no window (their src/models/<arch>.cpp load_arch_hparams
    # @ 0c1e570 set no swa_type; create_memory gives them one llama_kv_cache with no layer filter),
    # written by TextModel's or LlamaModel's keys plus scales and expert widths: conversion/granite.py
    # GraniteModel / GraniteMoeModel, olmo.py OlmoModel / OlmoeModel / SeedOssModel, ernie.py
    # Ernie4_5Model / Ernie4_5MoeModel, llama.py SmolLM3Model, internlm.py
    # InternLM2Model, minicpm.py MiniCPMModel, stablelm.py StableLMModel, mistral3.py Mistral3Model
    # (Mistral-Small-3.1's "mistral" text config and "ministral3" alike; read as ministral3, which
    # has no config-class window default, as LlamaModel writes none); tests/test_gguf_attention.py.
    "arcee": "arcee",
    "granite": "granite",
    "granitemoe": "granitemoe",
    "olmo": "olmo",
    "olmoe": "olmoe",
    "seed_oss": "seed_oss",
    "ernie4_5": "ernie4_5",
    "ernie4_5-moe": "ernie4_5_moe",
    "smollm3": "smollm3",
    "internlm2": "internlm2",
    "minicpm": "minicpm",
    "stablelm": "stablelm",
    "mistral3": "ministral3",
    # EXAONE 4: a window only on 64-layer models (_exaone4_windows).
    "exaone4": "exaone4",
    # Sparse attention with an indexer key cache (_sparse_mla, _minimax_m3), and MiniMax-M2's plain GQA
    # (conversion/minimax.py MiniMaxM2Model @ 0c1e570; src/models/minimax-m2.cpp reads no window).
    "deepseek32": "deepseek_v32",
    "glm-dsa": "glm_moe_dsa",
    "minimax-m3": "minimax_m3_vl_text",
    "minimax-m2": "minimax_m2",
    # Encoder-decoder: the decoder's self-attention is cached, cross-attention is not (_t5).
    "t5": "t5",
    # DeepSeek-V4: a K=V window in every layer, compressed CSA / HCA layers (_deepseek4).
    "deepseek4": "deepseek_v4",
}

# src/models/llama4.cpp: chunked layers of 8192 tokens unless sliding_window is 0 (kept in step
# with engines.llamacpp.LLAMA4_CHUNK).
_LLAMA4_CHUNK = 8192

# Keys under <arch>. that are read, and those known to size no cache (weights, numerics, MoE).
_READ = (
    "block_count", "context_length", "embedding_length", "attention.head_count", "attention.head_count_kv",
    "attention.key_length", "attention.value_length", "attention.sliding_window",
    "attention.sliding_window_pattern", "attention.kv_lora_rank", "attention.key_length_mla",
    "attention.value_length_mla", "rope.dimension_count",
)  # fmt: skip
_NOT_SHAPING = frozenset({
    "attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon", "attention.q_lora_rank",
    "attention.clamp_kqv", "attention.max_alibi_bias", "attention.causal", "attention.scale",
    "attention.temperature_length", "attention.temperature_scale",
})  # fmt: skip
# Families whose sliding layers kvcalc derives by pattern (configs._layer_kinds): a window is required.
_SLIDING_FAMILIES = ("gemma2", "gemma3_text", "cohere2", "gpt_oss")
_FILE_DTYPES = {0: "float32", 1: "float16", 30: "bfloat16"}


def gguf_config(header: GgufHeader, label: str) -> tuple[dict[str, Any], list[str]]:
    """(config dict for ``read_config``, notes) of a GGUF's metadata.

    Every ``<arch>.attention.*``, ``<arch>.ssm.*``, ``<arch>.wkv.*``, ``<arch>.shortconv.*`` or
    window key the mapping does not read is copied into the config under its own GGUF name: each
    such name holds a word of kvcalc.guard's rule (attention, ssm, head, conv, sliding), so the
    guard names it in the spec's warnings (and --strict refuses it) like any unread config field.

    The config is read once here, so that a value kvcalc's config reader refuses (a KV-head count
    that divides no head count, an implausibly large dimension) is refused naming the GGUF key it
    came from (``llama.attention.head_count_kv``), not the config field it was mapped to."""
    config, notes = _mapped_config(header, label)
    from .configs import read_config
    from .errors import ConfigError

    try:
        read_config(config, name=label)
    except ConfigError as exc:
        raise SourceError(_in_gguf_terms(str(exc), header.metadata, label)) from None
    return config, notes


def _mapped_config(header: GgufHeader, label: str) -> tuple[dict[str, Any], list[str]]:
    """gguf_config's mapping, before the config is read."""
    meta = header.metadata
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise SourceError(f"{label}: GGUF has no general.architecture (a later shard of a split GGUF?)")
    if arch in _REFUSED:
        raise SourceError(f"{label}: GGUF architecture {arch!r} is not supported: {_REFUSED[arch]}")
    if arch not in ARCH_TYPES:
        known = ", ".join(sorted(ARCH_TYPES))
        raise SourceError(f"{label}: GGUF architecture {arch!r} is not supported (kvcalc reads {known})")
    model_type = ARCH_TYPES[arch]

    if meta.get(f"{arch}.block_count") is None:
        raise SourceError(f"{label}: GGUF has no {arch}.block_count")
    block_count = _count(meta.get(f"{arch}.block_count"), f"{arch}.block_count", label)
    nextn = nextn_layers(meta, label)
    layers = block_count - nextn  # the trunk: the layers a plain context runs and caches

    def get(key: str) -> Any:
        value = meta.get(f"{arch}.{key}")
        if nextn and isinstance(value, list) and len(value) == block_count:
            return value[:layers]  # a per-layer array lists the NextN layers too, after the trunk
        return value

    def need(key: str) -> Any:
        value = get(key)
        if value is None:
            raise SourceError(f"{label}: GGUF has no {arch}.{key}")
        return value

    notes = [f"read from the GGUF header: llama.cpp architecture '{arch}', read as {model_type}"]
    if nextn:
        notes.append(
            f"{arch}.nextn_predict_layers {nextn}: the last {nextn} of the {block_count} blocks are NextN (MTP) "
            "layers, which llama.cpp neither loads nor caches unless MTP drafting is on (--spec-type draft-mtp); "
            f"{layers} layers counted"
        )
    config: dict[str, Any] = {"model_type": model_type, "num_hidden_layers": layers}
    if arch in _SSM_ONLY:  # no attention: conversion/mamba.py writes head_count 0 ("unused")
        heads = 0
    elif arch in _PER_LAYER_ATTENTION:
        heads = 0  # head counts that may differ by layer: read by the architecture's own mapping
    else:
        heads = _uniform(need("attention.head_count"), f"{arch}.attention.head_count", layers, label)
        config["num_attention_heads"] = heads
    ctx = get("context_length")
    if ctx is not None:
        config["max_position_embeddings"] = _count(ctx, f"{arch}.context_length", label)
    if get("embedding_length") is not None:
        config["hidden_size"] = _count(get("embedding_length"), f"{arch}.embedding_length", label)

    if arch in _SSM_ONLY:
        _recurrent(config, need, arch, None, label)
    elif arch == "deepseek2":
        _mla(config, get, need, arch, label)
    elif arch in ("deepseek32", "glm-dsa"):
        _sparse_mla(config, get, need, arch, layers, label, notes)
    elif arch == "kimi-linear":
        _kimi_linear(config, get, need, arch, label)
    elif arch == "t5":
        _t5(config, get, arch, layers, heads, label)
    elif arch == "deepseek4":
        _deepseek4(config, get, need, arch, label)
    elif arch in _PER_LAYER_ATTENTION:
        _PER_LAYER_ATTENTION[arch](config, get, need, arch, config["num_hidden_layers"], label, notes)
    else:
        kv = get("attention.head_count_kv")
        if kv is None:
            kv = heads  # llama.cpp's default: n_head_kv = n_head
        if arch in _HYBRID:
            kv = _recurrent(config, need, arch, kv, label)
        elif arch in ("nemotron_h", "nemotron_h_moe"):
            kv = _nemotron_h(config, need, arch, kv, label)
        _kv_heads(config, kv, f"{arch}.attention.head_count_kv", layers, label)
        k_len = get("attention.key_length")
        v_len = get("attention.value_length")
        # llama.cpp (src/llama-model.cpp load_hparams): n_embd_head_k = key_length and n_embd_head_v =
        # value_length, each n_embd / n_head when absent.
        embd: int | None = config.get("hidden_size")
        default = embd // heads if embd is not None and embd % heads == 0 else None
        if (k_len is None or v_len is None) and default is None:
            raise SourceError(
                f"{label}: GGUF has no {arch}.attention.key_length/value_length and its embedding_length "
                f"({embd}) is no multiple of the {heads} heads"
            )
        head_dim = _count(k_len, f"{arch}.attention.key_length", label) if k_len is not None else default
        v_dim = _count(v_len, f"{arch}.attention.value_length", label) if v_len is not None else default
        config["head_dim"] = head_dim
        if arch == "starcoder":
            # GPTBigCodeConfig defaults to multi_query=True (one K/V head), which kvcalc's rule follows
            # whatever a KV-head count says; llama.cpp caches head_count_kv heads: say which applies.
            config["multi_query"] = config["num_key_value_heads"] == 1 and "per_layer_config" not in config
        if arch == "falcon" and 1 < config["num_key_value_heads"] < heads and "per_layer_config" not in config:
            # Grouped K/V heads exist only in Falcon's new_decoder_architecture (Falcon-40B/180B;
            # conversion/falcon.py writes its num_kv_heads), read by kvcalc from num_kv_heads.
            config["new_decoder_architecture"] = True
            config["num_kv_heads"] = config.pop("num_key_value_heads")
        if v_dim != head_dim:
            config["v_head_dim"] = v_dim
        _windows(config, get, arch, model_type, layers, label, notes)
        if arch in _GATED_DELTA_NET:
            _gated_delta_net(config, get, need, arch, label)
        elif arch == "falcon-h1":
            _falcon_h1(config, need, arch, label)
        elif arch == "gemma3n":
            _gemma3n(config, need, arch, layers, label)
        elif arch == "minimax-m3":
            _minimax_m3(config, get, need, arch, layers, label)

    tensors = {t.name: t for t in header.tensors}
    _widths(config, meta, arch, tensors)
    if arch in _SSM_ONLY:
        # MambaConfig's intermediate_size is the SSM's inner width (expand x hidden), which kvcalc's
        # mamba rules read as d_inner; the file's feed_forward_length is a placeholder 0.
        config["intermediate_size"] = need("ssm.inner_size")
    for name in ("token_embd.weight", "blk.0.attn_k.weight", "blk.0.attn_q.weight"):
        if name in tensors:
            kind = tensors[name].ggml_type
            if kind in _FILE_DTYPES:
                config["torch_dtype"] = _FILE_DTYPES[kind]
            else:
                notes.append(f"weights stored as {tensors[name].type_name} ({name}): no 16/32-bit model dtype")
            break
    read = {f"{arch}.{k}" for k in (*_READ, *_NOT_SHAPING)}
    if arch == "gemma3n":
        read.add(f"{arch}.attention.shared_kv_layers")
    read |= {f"{arch}.{k}" for k in _PER_LAYER_READ.get(arch, ())}
    if arch in _RECURRENT_KEYS:
        read |= {f"{arch}.{k}" for k in _RECURRENT_KEYS[arch]} | {f"{arch}.ssm.dt_b_c_rms"}
    if arch in _GATED_DELTA_NET:
        read |= {f"{arch}.{k}" for k in _GATED_DELTA_NET_LAYERS}
    prefixes = tuple(f"{arch}.{part}." for part in ("attention", "ssm", "wkv", "shortconv"))
    for key, value in meta.items():
        if key not in read and (key.startswith(prefixes) or "sliding_window" in key):
            config[key] = value
    return config, notes


# --- config fields back to the GGUF keys they were mapped from ----------------------------------------------

# Config field -> the GGUF keys (under <arch>.) the mapping above derives it from, for the fields of
# every architecture; _FIELD_KEYS_BY_ARCH first, for fields an architecture derives otherwise.
_FIELD_KEYS: dict[str, tuple[str, ...]] = {
    "num_hidden_layers": ("block_count",),
    "num_attention_heads": ("attention.head_count",),
    "num_key_value_heads": ("attention.head_count_kv",),
    "num_kv_heads": ("attention.head_count_kv",),
    "v_head_dim": ("attention.value_length",),
    "d_kv": ("attention.key_length",),
    "max_position_embeddings": ("context_length",),
    "hidden_size": ("embedding_length",),
    "sliding_window": ("attention.sliding_window",),
    "sliding_window_pattern": ("attention.sliding_window_pattern",),
    "layer_types": ("attention.sliding_window_pattern",),
    "kv_lora_rank": ("attention.kv_lora_rank",),
    "qk_rope_head_dim": ("rope.dimension_count",),
    "qk_nope_head_dim": ("attention.key_length", "rope.dimension_count"),
    "intermediate_size": ("feed_forward_length",),
    "vocab_size": ("vocab_size",),
    "num_experts": ("expert_count",),
    "num_experts_per_tok": ("expert_used_count",),
    "moe_intermediate_size": ("expert_feed_forward_length",),
    "shared_expert_intermediate_size": ("expert_shared_feed_forward_length",),
    "n_shared_experts": ("expert_shared_count",),
    "first_k_dense_replace": ("leading_dense_block_count",),
    "index_head_dim": ("attention.indexer.key_length",),
    "index_n_heads": ("attention.indexer.head_count",),
    "index_topk": ("attention.indexer.top_k",),
    "indexer_types": ("attention.indexer.types",),
    "index_topk_pattern": ("attention.indexer.types",),
    "compress_ratios": ("attention.compress_ratios",),
    "num_kv_shared_layers": ("attention.shared_kv_layers",),
    "full_attention_interval": ("full_attention_interval",),
    "num_decoder_layers": ("block_count",),
    "conv_kernel": ("ssm.conv_kernel",),
    "mamba_d_conv": ("ssm.conv_kernel",),
    "linear_conv_kernel_dim": ("ssm.conv_kernel",),
    "state_size": ("ssm.state_size",),
    "mamba_d_state": ("ssm.state_size",),
    "ssm_state_size": ("ssm.state_size",),
    "linear_key_head_dim": ("ssm.state_size",),
    "n_groups": ("ssm.group_count",),
    "mamba_n_groups": ("ssm.group_count",),
    "linear_num_key_heads": ("ssm.group_count",),
    "time_step_rank": ("ssm.time_step_rank",),
    "mamba_dt_rank": ("ssm.time_step_rank",),
    "num_heads": ("ssm.time_step_rank",),
    "mamba_n_heads": ("ssm.time_step_rank",),
    "mamba_num_heads": ("ssm.time_step_rank",),
    "linear_num_value_heads": ("ssm.time_step_rank",),
    "mamba_d_ssm": ("ssm.inner_size",),
    "mamba_expand": ("ssm.inner_size", "embedding_length"),
    "mamba_d_head": ("ssm.inner_size", "ssm.time_step_rank"),
    "mamba_head_dim": ("ssm.inner_size", "ssm.time_step_rank"),
    "linear_value_head_dim": ("ssm.inner_size", "ssm.time_step_rank"),
    "conv_L_cache": ("shortconv.l_cache",),
    "hybrid_override_pattern": ("attention.head_count_kv", "feed_forward_length"),
    "block_configs": ("attention.head_count", "attention.head_count_kv"),
    "swa_head_dim": ("attention.key_length_swa",),
    "swa_v_head_dim": ("attention.value_length_swa",),
    "swa_num_key_value_heads": ("attention.head_count_kv",),
    "swa_num_attention_heads": ("attention.head_count",),
    "hybrid_layer_pattern": ("attention.sliding_window_pattern",),
    "linear_attn_config": ("attention.head_count_kv", "kda.head_dim", "ssm.conv_kernel"),
}
_FIELD_KEYS_BY_ARCH: dict[str, dict[str, tuple[str, ...]]] = {
    "mamba": {"intermediate_size": ("ssm.inner_size",)},
    "mamba2": {"intermediate_size": ("ssm.inner_size",), "head_dim": ("ssm.inner_size", "ssm.time_step_rank")},
    "gemma4": {"head_dim": ("attention.key_length_swa",)},
    "minimax-m3": {"layer_types": ("leading_dense_block_count",)},
    "deci": {"num_attention_heads": ("attention.head_count",)},
    **{arch: {"layer_types": ("attention.head_count_kv",)} for arch in ("granitehybrid", "jamba", "lfm2", "lfm2moe")},
    **{arch: {"layer_types": ("attention.recurrent_layers",)} for arch in ("qwen3next", "qwen35", "qwen35moe")},
}
_CONFIG_FIELD = re.compile(r"config field '([^']+)'")
_PER_LAYER_FIELD = re.compile(r"per_layer_config\.(\d+)\.?(\w*)")


def _gguf_keys(name: str, meta: dict[str, Any]) -> str | None:
    """'GGUF key llama.attention.head_count_kv' for a config field the mapping wrote, or None."""
    arch = meta.get("general.architecture")
    layer = ""
    m = _PER_LAYER_FIELD.fullmatch(name)
    if m is not None:  # a per-layer override: the per-layer array of the same key
        layer, name = f"[{int(m[1])}]", m[2] or "num_key_value_heads"  # the item of that layer
    keys = _FIELD_KEYS_BY_ARCH.get(str(arch), {}).get(name) or _FIELD_KEYS.get(name)
    if name == "head_dim" and keys is None:
        # key_length, or llama.cpp's default n_embd / n_head when the file has none
        keys = (
            ("attention.key_length",)
            if f"{arch}.attention.key_length" in meta
            else ("embedding_length", "attention.head_count")
        )
    if name == "num_hidden_layers" and meta.get(f"{arch}.nextn_predict_layers"):
        keys = ("block_count", "nextn_predict_layers")  # the trunk: block_count less the NextN layers
    if keys is None:
        return None
    full = [f"{arch}.{k}" for k in keys]
    return (f"GGUF key {full[0]}" if len(full) == 1 else f"GGUF keys {' and '.join(full)}") + layer


def _in_gguf_terms(message: str, meta: dict[str, Any], label: str) -> str:
    """A config reader's message about a GGUF's mapped config, naming the GGUF keys instead of the
    config fields ("config field 'num_key_value_heads' (3) must divide ..." -> "GGUF key
    llama.attention.head_count_kv (3) must divide ..."); a field with no GGUF key of its own stays
    named, said to be kvcalc's reading of the metadata."""
    unmapped = False

    def field(m: re.Match[str]) -> str:
        nonlocal unmapped
        keys = _gguf_keys(m[1], meta)
        if keys is None:
            unmapped = True
            return m[0]
        return keys

    def passing(m: re.Match[str]) -> str:
        if m[1] == "head_dim":  # "... and no 'head_dim' is given": the key that would give it
            return f"{meta.get('general.architecture')}.attention.key_length"
        return re.sub(r"^GGUF keys? ", "", _gguf_keys(m[1], meta) or m[0])

    text = _CONFIG_FIELD.sub(field, message)
    text = re.sub(r"'(\w+)'", passing, text)  # fields the message names in passing
    if unmapped or "config" in text:
        return f"{label}: the GGUF metadata, as kvcalc maps it to a config, is refused: {text}"
    return f"{label}: {text}"


# GGUF keys (gguf-py constants Keys.LLM) -> the config keys kvcalc.dims reads for the runtime model
# (llama.cpp's compute buffer): widths of MLPs and experts, which size no cache.
_WIDTHS = {
    "feed_forward_length": "intermediate_size",
    "expert_count": "num_experts",
    "expert_used_count": "num_experts_per_tok",
    "expert_feed_forward_length": "moe_intermediate_size",
    "expert_shared_feed_forward_length": "shared_expert_intermediate_size",
    "expert_shared_count": "n_shared_experts",
    "leading_dense_block_count": "first_k_dense_replace",
}


def _widths(config: dict[str, Any], meta: dict[str, Any], arch: str, tensors: dict[str, TensorInfo]) -> None:
    """The vocabulary (``<arch>.vocab_size``, else the tokenizer's token count, else the rows of
    token_embd.weight) and the MLP and expert widths, where the file gives them as one number."""
    vocab = meta.get(f"{arch}.vocab_size")
    if vocab is None:
        tokens = meta.get("tokenizer.ggml.tokens")  # skipped while reading: its item count
        vocab = tokens if isinstance(tokens, int) else len(tokens) if isinstance(tokens, list) else None
    embd = tensors.get("token_embd.weight")
    if vocab is None and embd is not None and len(embd.dims) == 2:
        vocab = embd.dims[1]
    if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0:
        config["vocab_size"] = vocab
    for key, name in _WIDTHS.items():
        value = meta.get(f"{arch}.{key}")
        if isinstance(value, list) and value and len(set(value)) == 1:
            value = value[0]  # per layer, all alike
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            config[name] = value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _count(value: Any, key: str, label: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SourceError(f"{label}: GGUF key {key} is {_short(value)}; expected a positive integer")
    return value


def _uniform(value: Any, key: str, layers: int, label: str) -> int:
    """A scalar, or a per-layer array whose items are all the same."""
    if isinstance(value, list):
        if len(value) != layers or len(set(value)) != 1:
            raise SourceError(f"{label}: GGUF key {key} differs by layer ({_short(value)}); kvcalc cannot read it")
        value = value[0]
    return _count(value, key, label)


def _kv_heads(config: dict[str, Any], value: Any, key: str, layers: int, label: str) -> None:
    """head_count_kv: a scalar, or a per-layer array (positive counts map to per_layer_config)."""
    if not isinstance(value, list):
        config["num_key_value_heads"] = _count(value, key, label)
        return
    if len(value) != layers:
        raise SourceError(f"{label}: GGUF key {key} lists {len(value)} layers but the model has {layers}")
    counts = [_count(v, key, label) if v else 0 for v in value]
    if 0 in counts:  # a layer with no KV heads: recurrent or attention-free, which kvcalc cannot map here
        raise SourceError(f"{label}: GGUF key {key} gives some layers 0 KV heads (a hybrid model); not supported")
    config["num_key_value_heads"] = counts[0]
    differing = {f"{i:02d}": {"num_key_value_heads": n} for i, n in enumerate(counts) if n != counts[0]}
    if differing:
        config["per_layer_config"] = differing


# --- recurrent and hybrid architectures ------------------------------------------------------------------
#
# What convert_hf_to_gguf.py writes (ggml-org/llama.cpp conversion/, read at the commits named):
# - mamba (conversion/mamba.py MambaModel @ 32e9e044): embedding_length d_model, head_count 0,
#   ssm.conv_kernel d_conv, ssm.inner_size d_inner (asserted 2 x d_model), ssm.state_size d_state,
#   ssm.time_step_rank dt_rank.
# - mamba2 (conversion/mamba.py Mamba2Model @ 32e9e044): the same plus ssm.group_count n_groups;
#   ssm.time_step_rank is the number of SSM heads, d_inner / head_dim.
# - granitehybrid (conversion/granite.py GraniteHybridModel @ 010f22d8, GraniteMoeHybrid and Bamba):
#   ssm.conv_kernel mamba_d_conv, ssm.state_size mamba_d_state, ssm.group_count mamba_n_groups,
#   ssm.inner_size mamba_expand x hidden_size, ssm.time_step_rank mamba_n_heads, and
#   attention.head_count_kv per layer: the KV heads on attention layers, 0 on Mamba-2 layers.
# - jamba (conversion/jamba.py @ 7bca1fd9): Mamba-1 layers; ssm.inner_size mamba_expand x
#   hidden_size, ssm.conv_kernel, ssm.state_size, ssm.time_step_rank mamba_dt_rank, and the per-layer
#   head_count_kv (0 off the attention period).
# - lfm2 (conversion/lfm2.py LFM2Model @ 051139f5): shortconv.l_cache conv_L_cache and the
#   per-layer head_count_kv (0 on "conv" layers).
# llama.cpp 0c1e570 puts K/V exactly on the hybrids' layers of non-zero head_count_kv and recurrent
# state on the others (its context logs which layers each memory holds: tests/test_gguf_hybrid.py),
# f32 per sequence: n_embd_r = (d_conv - 1) x (d_inner + 2 x n_group x d_state) conv values (lfm2:
# (l_cache - 1) x n_embd) and n_embd_s = d_state x d_inner SSM values (src/llama-hparams.cpp).
# - lfm2moe (conversion/lfm2.py LFM2MoeModel @ 0c1e570): lfm2's keys (head_count_kv 0 off the
#   "full_attention" layers, shortconv.l_cache) plus expert widths; src/models/lfm2moe.cpp makes the
#   layers of head_count_kv 0 recurrent, sized as lfm2's.
# - nemotron_h_moe, qwen35, qwen35moe, kimi-linear: see _nemotron_h, _gated_delta_net, _kimi_linear.
_SSM_ONLY = ("mamba", "mamba2")
_GATED_DELTA_NET = ("qwen3next", "qwen35", "qwen35moe")
_GATED_DELTA_NET_LAYERS = ("attention.recurrent_layers", "full_attention_interval")
_HYBRID = ("granitehybrid", "jamba", "lfm2", "lfm2moe")
_SSM = ("ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.time_step_rank")
_RECURRENT_KEYS: dict[str, tuple[str, ...]] = {
    "mamba": _SSM,
    "mamba2": (*_SSM, "ssm.group_count"),
    "granitehybrid": (*_SSM, "ssm.group_count"),
    "jamba": _SSM,
    "lfm2": ("shortconv.l_cache",),
    "qwen3next": (*_SSM, "ssm.group_count"),
    "nemotron_h": (*_SSM, "ssm.group_count"),
    "falcon-h1": (*_SSM, "ssm.group_count"),
    "qwen35": (*_SSM, "ssm.group_count"),
    "qwen35moe": (*_SSM, "ssm.group_count"),
    "nemotron_h_moe": (*_SSM, "ssm.group_count"),
    "lfm2moe": ("shortconv.l_cache",),
    "kimi-linear": ("ssm.conv_kernel", "kda.head_dim"),
}
# The layer-type names each family's reader takes: (recurrent layer, attention layer).
_LAYER_NAMES = {"granitehybrid": ("mamba", "attention"), "jamba": ("mamba", "full_attention"),
                "lfm2": ("conv", "full_attention"), "lfm2moe": ("conv", "full_attention")}  # fmt: skip


def _recurrent(config: dict[str, Any], need: Any, arch: str, kv: Any, label: str) -> Any:
    """The SSM or short-conv geometry of ``arch`` as the HF fields its kvcalc family reads; for a
    hybrid, ``layer_types`` from the per-layer head_count_kv (0: a recurrent layer) and the KV heads
    of the attention layers, returned for _kv_heads."""
    values = {k: _count(need(k), f"{arch}.{k}", label) for k in _RECURRENT_KEYS[arch]}
    hidden = config.get("hidden_size")
    if hidden is None:
        raise SourceError(f"{label}: GGUF has no {arch}.embedding_length, which sizes its layers")
    inner, state = values.get("ssm.inner_size", 0), values.get("ssm.state_size", 0)
    if arch in _HYBRID:
        layers = config["num_hidden_layers"]
        if not isinstance(kv, list) or len(kv) != layers:
            raise SourceError(
                f"{label}: GGUF key {arch}.attention.head_count_kv must list the {layers} layers (0 on recurrent ones)"
            )
        counts = {_count(v, f"{arch}.attention.head_count_kv", label) for v in kv if v != 0}
        if len(counts) > 1:
            raise SourceError(
                f"{label}: GGUF key {arch}.attention.head_count_kv differs by attention layer; not supported"
            )
        recurrent_name, attention_name = _LAYER_NAMES[arch]
        config["layer_types"] = [recurrent_name if v == 0 else attention_name for v in kv]
        kv = counts.pop() if counts else 1  # no attention layer: the KV heads size nothing
    if arch in ("lfm2", "lfm2moe"):
        config["conv_L_cache"] = values["shortconv.l_cache"]
    elif arch in ("mamba", "jamba"):
        prefix = "mamba_" if arch == "jamba" else ""
        config[f"{prefix}d_conv" if arch == "jamba" else "conv_kernel"] = values["ssm.conv_kernel"]
        config[f"{prefix}d_state" if arch == "jamba" else "state_size"] = state
        config[f"{prefix}dt_rank" if arch == "jamba" else "time_step_rank"] = values["ssm.time_step_rank"]
        if arch == "jamba":
            config["mamba_expand"] = _ratio(inner, hidden, f"{arch}.ssm.inner_size", "embedding_length", label)
    else:  # Mamba-2: time_step_rank is the number of SSM heads
        heads = values["ssm.time_step_rank"]
        head_dim = _ratio(inner, heads, f"{arch}.ssm.inner_size", "ssm.time_step_rank (SSM heads)", label)
        if arch == "mamba2":
            config.update(state_size=state, n_groups=values["ssm.group_count"], num_heads=heads, head_dim=head_dim,
                          conv_kernel=values["ssm.conv_kernel"])  # fmt: skip
        else:
            config.update(
                mamba_d_state=state, mamba_n_groups=values["ssm.group_count"], mamba_n_heads=heads,
                mamba_d_head=head_dim, mamba_d_conv=values["ssm.conv_kernel"],
                mamba_expand=_ratio(inner, hidden, f"{arch}.ssm.inner_size", "embedding_length", label),
            )  # fmt: skip
    return kv


def _nemotron_h(config: dict[str, Any], need: Any, arch: str, kv: Any, label: str) -> int:
    """nemotron_h: NemotronHModel (conversion/nemotron.py @ 7bca1fd9, a GraniteHybridModel) writes the Mamba-2
    keys of granitehybrid, head_count_kv per layer (0 off the attention layers) and
    feed_forward_length per layer (0 off the MLP layers); llama.cpp keeps recurrent state on the
    layers with neither (tests/test_gguf_more.py: the layers of a real llama.cpp 0c1e570 run). Mapped
    back to NemotronHConfig's hybrid_override_pattern (M, *, -); the SSM head dim is ssm.inner_size /
    ssm.time_step_rank, the widths llama.cpp sizes its state from."""
    values = {k: _count(need(k), f"{arch}.{k}", label) for k in _RECURRENT_KEYS[arch]}
    layers = config["num_hidden_layers"]
    ff = need("feed_forward_length")
    if not isinstance(kv, list) or len(kv) != layers or not isinstance(ff, list) or len(ff) != layers:
        raise SourceError(
            f"{label}: GGUF keys {arch}.attention.head_count_kv and {arch}.feed_forward_length must list the "
            f"{layers} layers"
        )
    counts = {_count(v, f"{arch}.attention.head_count_kv", label) for v in kv if v != 0}
    if len(counts) > 1:
        raise SourceError(f"{label}: GGUF key {arch}.attention.head_count_kv differs by attention layer; not supported")
    # nemotron_h_moe: the same converter class (is_moe) writes the MoE width on its 'E' layers where
    # nemotron_h has '-' MLP layers; llama.cpp 0c1e570 loads both with llama_model_nemotron_h's
    # load_arch_hparams (src/models/nemotron-h-moe.cpp) and caches neither (create_memory's filters).
    mlp = "E" if arch == "nemotron_h_moe" else "-"
    config["hybrid_override_pattern"] = "".join("*" if k else mlp if f else "M" for k, f in zip(kv, ff, strict=True))
    heads = values["ssm.time_step_rank"]
    config.update(
        mamba_num_heads=heads,
        mamba_head_dim=_ratio(values["ssm.inner_size"], heads, f"{arch}.ssm.inner_size", "ssm.time_step_rank", label),
        n_groups=values["ssm.group_count"],
        ssm_state_size=values["ssm.state_size"],
        conv_kernel=values["ssm.conv_kernel"],
    )
    return counts.pop() if counts else 1


def _falcon_h1(config: dict[str, Any], need: Any, arch: str, label: str) -> None:
    """falcon-h1: FalconH1Model (conversion/falcon_h1.py @ 7bca1fd9, a Mamba2Model) writes the
    Mamba-2 keys (ssm.inner_size mamba_d_ssm, ssm.time_step_rank d_inner / head dim, the SSM heads)
    beside a scalar head_count_kv and key/value_length: attention and a Mamba-2 mixer in every
    layer, which llama.cpp 0c1e570 gives both K/V and recurrent state (tests/test_gguf_more.py)."""
    values = {k: _count(need(k), f"{arch}.{k}", label) for k in _RECURRENT_KEYS[arch]}
    inner, heads = values["ssm.inner_size"], values["ssm.time_step_rank"]
    config.update(
        mamba_d_ssm=inner,
        mamba_n_heads=heads,
        mamba_d_head=_ratio(inner, heads, f"{arch}.ssm.inner_size", "ssm.time_step_rank (SSM heads)", label),
        mamba_n_groups=values["ssm.group_count"],
        mamba_d_state=values["ssm.state_size"],
        mamba_d_conv=values["ssm.conv_kernel"],
    )


# src/llama-model.cpp (0c1e570) gives Gemma 3n K/V on its first 20 layers whatever
# attention.shared_kv_layers says (n_layer_kv_from_start = 20 is written into its loader; llama.cpp's
# own tests/test-llama-archs.cpp @ f840737d builds gemma3n with 22 layers, saying so); runs of 0c1e570 on
# files of 10, 30 and 35 layers cached min(layers, 20) (tests/test_gguf_more.py).
_GEMMA3N_KV_LAYERS = 20


def _gemma3n(config: dict[str, Any], need: Any, arch: str, layers: int, label: str) -> None:
    """gemma3n: conversion/gemma.py Gemma3NModel @ 2bbcf7fc writes Gemma3Model's keys, the per-layer
    sliding_window_pattern and attention.shared_kv_layers (num_kv_shared_layers: the last layers
    reuse earlier layers' K/V). Read as Gemma3nTextConfig; a file whose own layers with K/V are not
    the 20 llama.cpp caches is refused rather than estimated two ways."""
    shared = need("attention.shared_kv_layers")
    if isinstance(shared, float) and shared.is_integer():  # a float32 before llama.cpp PR #14450
        shared = int(shared)
    shared = _count(shared, f"{arch}.attention.shared_kv_layers", label)
    if layers - shared != min(layers, _GEMMA3N_KV_LAYERS):
        raise SourceError(
            f"{label}: GGUF gemma3n with {layers} layers and {arch}.attention.shared_kv_layers {shared}: llama.cpp "
            f"caches K/V on the first {_GEMMA3N_KV_LAYERS} layers whatever the file says; not supported"
        )
    config["num_kv_shared_layers"] = shared


def _t5(config: dict[str, Any], get: Any, arch: str, layers: int, heads: int, label: str) -> None:
    """t5 (conversion/t5.py T5Model @ 0c1e570: T5, MT5, UMT5): block_count num_layers (the encoder's),
    decoder_block_count num_decoder_layers when the config has it, head_count num_heads, key/value_length
    d_kv, no head_count_kv. Read as a T5Config. llama.cpp caches the decoder's self-attention K/V in one
    llama_kv_cache (src/llama-model.cpp create_memory, default branch) and recomputes cross-attention K/V
    from the encoder output at every decode (src/models/t5.cpp), which its llama.cpp rules follow."""
    decoder = get("decoder_block_count")
    if decoder is not None and _count(decoder, f"{arch}.decoder_block_count", label) != layers:
        # src/llama-kv-cache.cpp makes one K/V per hparams.n_layer_all (block_count) while src/models/t5.cpp
        # runs dec_n_layer decoder layers: fewer leave cache layers unused, more fail to load (a vector range
        # check in a real run, tests/test_gguf_t5_ds4.py).
        raise SourceError(
            f"{label}: GGUF t5 with {arch}.decoder_block_count {decoder} and block_count {layers}: llama.cpp sizes "
            "the decoder's KV cache by the encoder's block count; only equal counts are supported"
        )
    kv = get("attention.head_count_kv")
    kv = heads if kv is None else _uniform(kv, f"{arch}.attention.head_count_kv", layers, label)
    embd: int | None = config.get("hidden_size")
    dims = []
    for part in ("key_length", "value_length"):
        value = get(f"attention.{part}")
        if value is not None:
            dims.append(_count(value, f"{arch}.attention.{part}", label))
        elif embd is not None and embd % heads == 0:
            dims.append(embd // heads)  # llama.cpp's default: n_embd / n_head
        else:
            raise SourceError(f"{label}: GGUF has no {arch}.attention.{part} and no embedding_length / heads")
    if dims[0] != dims[1]:
        # src/models/t5.cpp: GGML_ASSERT(n_embd_head == hparams.n_embd_head_k()).
        raise SourceError(f"{label}: GGUF t5 with K and V head dims {dims[0]} and {dims[1]}: llama.cpp asserts equal")
    config.update(d_kv=dims[0], num_key_value_heads=kv, num_decoder_layers=layers, is_encoder_decoder=True)


# GGUF architectures kvcalc knows of and refuses, and why (one line each).
_REFUSED = {
    # src/llama-model.cpp create_memory @ 0c1e570 lists no t5encoder among the no-memory architectures
    # (BERT and the like): a real run allocates block_count layers x n_ctx cells (tests/test_gguf_t5_ds4.py).
    "t5encoder": "an encoder-only T5 caches nothing in transformers, yet llama.cpp 0c1e570 allocates a KV "
    "cache of block_count layers x n_ctx cells that its encoder graph never reads; kvcalc models neither",
}


# --- attention whose geometry differs by layer (gemma4, mimo2, deci) ----------------------------------------
#
# llama.cpp 0c1e570's common loader (src/llama-model.cpp llama_model_base::load_hparams) reads
# head_count and head_count_kv as a scalar or one value per layer (n_head_kv defaults to n_head),
# key_length / value_length (default n_embd / n_head of layer 0) and key_length_swa /
# value_length_swa (default: the former) for every architecture; a layer's K/V row is
# n_head_kv(il) x (is_swa(il) ? key_length_swa : key_length) (src/llama-hparams.cpp n_embd_k_gqa),
# and the window applies only where the architecture's load_arch_hparams sets swa_type.


def _head_dims(get: Any, arch: str, heads: int, config: dict[str, Any], label: str) -> tuple[int, int]:
    """(key_length, value_length) as llama.cpp reads them: n_embd / n_head when absent."""
    embd = config.get("hidden_size")
    dims = []
    for key in ("attention.key_length", "attention.value_length"):
        value = get(key)
        if value is None:
            if embd is None or embd % heads:
                raise SourceError(f"{label}: GGUF has no {arch}.{key}, nor an embedding_length ({embd}) giving it")
            value = embd // heads
        dims.append(_count(value, f"{arch}.{key}", label))
    return dims[0], dims[1]


def _or(value: Any, default: Any) -> Any:
    """``value``, or ``default`` where the key is absent (llama.cpp's optional get_key)."""
    return default if value is None else value


def _per_layer(value: Any, key: str, layers: int, label: str, *, zero: bool = False) -> list[int]:
    """A scalar or a per-layer array of counts as one count per layer (0 allowed with ``zero``)."""
    items = value if isinstance(value, list) else [value] * layers
    if len(items) != layers:
        raise SourceError(f"{label}: GGUF key {key} lists {len(items)} layers but the model has {layers}")
    return [0 if zero and v == 0 and not isinstance(v, bool) else _count(v, key, label) for v in items]


def _swa_layers(need: Any, arch: str, layers: int, label: str) -> list[bool]:
    """attention.sliding_window_pattern, one flag per layer (llama.cpp's get_arr into is_swa_impl)."""
    pattern = need("attention.sliding_window_pattern")
    if not isinstance(pattern, list) or len(pattern) != layers or any(p not in (0, 1) for p in pattern):
        raise SourceError(
            f"{label}: GGUF key {arch}.attention.sliding_window_pattern must flag each of the {layers} layers"
        )
    swa = [bool(p) for p in pattern]
    if not any(swa):  # create_memory: GGML_ASSERT(hparams.is_swa_any()) for a swa_type architecture
        raise SourceError(f"{label}: GGUF {arch} flags no sliding layer in its sliding_window_pattern; not supported")
    return swa


def _gemma4(config: dict[str, Any], get: Any, need: Any, arch: str, layers: int, label: str, notes: list[str]) -> None:
    """gemma4: conversion/gemma.py Gemma4Model @ 0c1e570 (on Gemma3Model's keys) writes key_length =
    value_length = global_head_dim (the full layers'), key_length_swa = value_length_swa = head_dim,
    head_count_kv per layer (num_key_value_heads on sliding layers, num_global_key_value_heads on
    full ones) when the config has both, else num_key_value_heads, sliding_window_pattern from
    layer_types, sliding_window and shared_kv_layers. src/models/gemma4.cpp load_arch_hparams
    (0c1e570) sets swa_type STANDARD, n_swa = sliding_window (required), is_swa from the pattern and
    n_layer_kv_from_start = layers - shared_kv_layers: later layers get no K/V
    (llama_hparams::has_kv) and reuse layer n_layer_kv_from_start - 2 (sliding) or - 1 (full)
    (create_memory's reuse callback). Mapped to Gemma4TextConfig with the full layers' geometry in
    per_layer_config, as transformers 5.24 saves it; kvcalc's gemma4 rule then applies exactly
    these dims and heads (it reads no global_head_dim once per_layer_config is given)."""
    heads = _uniform(need("attention.head_count"), f"{arch}.attention.head_count", layers, label)
    k_full, v_full = _head_dims(get, arch, heads, config, label)
    k_swa = _count(need("attention.key_length_swa"), f"{arch}.attention.key_length_swa", label)
    v_swa = _count(need("attention.value_length_swa"), f"{arch}.attention.value_length_swa", label)
    if (k_full, k_swa) != (v_full, v_swa):  # load_arch_tensors throws "Gemma 4 requires n_embd_head_k == ..."
        raise SourceError(f"{label}: GGUF gemma4 with K and V head dims that differ; llama.cpp refuses it")
    kv_key = f"{arch}.attention.head_count_kv"
    kv = _per_layer(_or(get("attention.head_count_kv"), heads), kv_key, layers, label)
    swa = _swa_layers(need, arch, layers, label)
    shared = _or(get("attention.shared_kv_layers"), 0)
    shared = _count(shared, f"{arch}.attention.shared_kv_layers", label) if shared else 0
    own = layers - shared
    shared_kinds = set(swa[own:])
    if own < 2 or (False in shared_kinds and swa[own - 1]) or (True in shared_kinds and not swa[own - 2]):
        # The reuse callback asserts n_layer_kv_from_start >= 2 and that layer own - 1 is full
        # (own - 2 sliding) for the full (sliding) layers that reuse it.
        raise SourceError(
            f"{label}: GGUF gemma4 whose {shared} KV-sharing layers do not follow a sliding and a full layer of "
            "their own; llama.cpp cannot build its cache"
        )
    if own == layers and swa[-1]:
        # Gemma4TextConfig (and kvcalc's gemma4 rule) makes the last layer full; llama.cpp keeps the file's flag.
        raise SourceError(f"{label}: GGUF gemma4 whose last layer is sliding; kvcalc's gemma4 rule makes it full")
    base_kv = kv[swa.index(True)]
    overrides: dict[str, dict[str, int]] = {}
    for i in range(own):
        dim, layer_kv = (k_swa if swa[i] else k_full), kv[i]
        if (layer_kv, dim) != (base_kv, k_swa):
            overrides[f"{i:02d}"] = {"head_dim": dim, "num_key_value_heads": layer_kv}
    config.update(
        num_attention_heads=heads, num_key_value_heads=base_kv, head_dim=k_swa,
        sliding_window=_count(need("attention.sliding_window"), f"{arch}.attention.sliding_window", label),
        layer_types=["sliding_attention" if s else "full_attention" for s in swa], num_kv_shared_layers=shared,
    )  # fmt: skip
    if overrides:
        config["per_layer_config"] = overrides


def _mimo2(config: dict[str, Any], get: Any, need: Any, arch: str, layers: int, label: str, notes: list[str]) -> None:
    """mimo2 (MiMo-V2-Flash, V2.5): conversion/mimo.py MimoV2Model @ 0c1e570 writes TextModel's keys
    (head_count num_attention_heads, key_length = value_length = head_dim), then value_length
    v_head_dim, head_count_kv per layer (swa_num_key_value_heads where hybrid_layer_pattern is 1,
    num_key_value_heads elsewhere), sliding_window and sliding_window_pattern = hybrid_layer_pattern
    (it asserts the swa head dims and query heads equal the full ones; a file may still carry
    key_length_swa, which llama.cpp reads), and its three MTP layers as nextn_predict_layers (the
    trunk is what gguf_config passes here). src/models/mimo2.cpp load_arch_hparams (0c1e570): swa_type
    STANDARD, n_swa = sliding_window, is_swa from the pattern. Mapped to MiMoV2FlashConfig's fields
    (hybrid_layer_pattern, swa_*), with the window as llama.cpp applies it: sliding_window, never
    sliding_window_size (which kvcalc, as transformers, would read as a window one token wider)."""
    heads = _uniform(need("attention.head_count"), f"{arch}.attention.head_count", layers, label)
    k_full, v_full = _head_dims(get, arch, heads, config, label)
    k_swa = _count(_or(get("attention.key_length_swa"), k_full), f"{arch}.attention.key_length_swa", label)
    v_swa = _count(_or(get("attention.value_length_swa"), v_full), f"{arch}.attention.value_length_swa", label)
    kv_key = f"{arch}.attention.head_count_kv"
    kv = _per_layer(_or(get("attention.head_count_kv"), heads), kv_key, layers, label)
    swa = _swa_layers(need, arch, layers, label)
    by_kind = [{n for n, s in zip(kv, swa, strict=True) if s == kind} for kind in (False, True)]
    if any(len(counts) > 1 for counts in by_kind):
        raise SourceError(f"{label}: GGUF key {kv_key} differs within full or sliding layers; not supported")
    full_kv, swa_kv = (min(c) if c else None for c in by_kind)
    config.update(
        num_attention_heads=heads, swa_num_attention_heads=heads, head_dim=k_full, v_head_dim=v_full,
        swa_head_dim=k_swa, swa_v_head_dim=v_swa, num_key_value_heads=full_kv or swa_kv,
        swa_num_key_value_heads=swa_kv, hybrid_layer_pattern=[int(s) for s in swa],
        sliding_window=_count(need("attention.sliding_window"), f"{arch}.attention.sliding_window", label),
    )  # fmt: skip


def _deci(config: dict[str, Any], get: Any, need: Any, arch: str, layers: int, label: str, notes: list[str]) -> None:
    """deci (DeciLM-7B, Llama-3.1/3.3 Nemotron 51B/49B/253B): conversion/deci.py DeciModel @ 0c1e570
    writes, for a config with block_configs, head_count and head_count_kv per layer (an attention
    block: num_attention_heads and num_attention_heads // n_heads_in_group; a linear-attention
    block: num_attention_heads and 0; a no-op block: 0 and 0) and key_length = value_length =
    hidden_size // num_attention_heads; for DeciLM-7B TextModel's keys and head_count_kv from
    num_key_value_heads_per_layer. llama.cpp 0c1e570 (src/models/deci.cpp) builds K/V only for
    head_count_kv > 0 and its cache gives a 0-KV-head layer K/V rows of 0 bytes
    (src/llama-kv-cache.cpp: n_embd_k_gqa = n_head_kv(il) x head dim). Mapped to the
    nemotron-nas block_configs kvcalc reads (no_op / replace_with_linear: no cache)."""
    head_key, kv_key = f"{arch}.attention.head_count", f"{arch}.attention.head_count_kv"
    head_arr = _per_layer(need("attention.head_count"), head_key, layers, label, zero=True)
    if head_arr[0] == 0:
        # load_hparams sizes every head by layer 0's head count (n_embd / n_head()), and sets all
        # head dims to 0 when it is 0.
        raise SourceError(f"{label}: GGUF deci whose first layer has no attention heads; not supported")
    kv = _per_layer(_or(get("attention.head_count_kv"), head_arr), kv_key, layers, label, zero=True)
    heads = head_arr[0]
    if any(h not in (0, heads) for h in head_arr) or any(k and not h for k, h in zip(kv, head_arr, strict=True)):
        raise SourceError(f"{label}: GGUF key {head_key} differs between attention layers; not supported")
    k_dim, v_dim = _head_dims(get, arch, heads, config, label)
    if k_dim != v_dim:
        raise SourceError(f"{label}: GGUF deci with K head dim {k_dim} and V head dim {v_dim}; not supported")
    blocks = []
    for i, (n, h) in enumerate(zip(kv, head_arr, strict=True)):
        if n and heads % n:
            raise SourceError(f"{label}: GGUF key {kv_key} gives layer {i} {n} KV heads, no divisor of {heads} heads")
        blocks.append(
            {"attention": {"n_heads_in_group": heads // n, "no_op": False, "replace_with_linear": False}}
            if n
            else {"attention": {"n_heads_in_group": None, "no_op": not h, "replace_with_linear": bool(h)}}
        )
    config.update(num_attention_heads=heads, head_dim=k_dim, block_configs=blocks)


_INDEXER_KEYS = ("attention.indexer.head_count", "attention.indexer.key_length", "attention.indexer.top_k")
_PER_LAYER_ATTENTION = {"gemma4": _gemma4, "mimo2": _mimo2, "deci": _deci}
# Keys under <arch>. these mappings read beyond _READ (the rest of attention.* goes to the guard).
_PER_LAYER_READ: dict[str, tuple[str, ...]] = {
    "gemma4": ("attention.key_length_swa", "attention.value_length_swa", "attention.shared_kv_layers"),
    # attention.value_scale scales V before it is cached: no size (MiMoV2FlashConfig attention_value_scale).
    "mimo2": ("attention.key_length_swa", "attention.value_length_swa", "attention.value_scale"),
    # The indexer keys _sparse_mla and _minimax_m3 read or set aside (queries, top-k: compute only).
    "deepseek32": _INDEXER_KEYS,
    "glm-dsa": (*_INDEXER_KEYS, "attention.indexer.types"),
    "minimax-m3": (*_INDEXER_KEYS, "attention.indexer.block_size", "attention.indexer.local_blocks"),
    # T5's relative-position buckets size a bias weight, no cache.
    "t5": ("attention.relative_buckets_count",),
    # _deepseek4 reads the ratios and the indexer's key length; the rest sizes weights or compute.
    "deepseek4": (
        *_INDEXER_KEYS,
        "attention.compress_ratios",
        "attention.compress_rope_freq_base",
        "attention.output_group_count",
        "attention.output_lora_rank",
    ),
}

# Plain attention architectures (ARCH_TYPES): llama.cpp 0c1e570 keeps every token in every layer.
_NO_WINDOW = frozenset({
    "arcee", "granite", "granitemoe", "olmo", "olmoe", "seed_oss", "ernie4_5", "ernie4_5-moe", "smollm3",
    "internlm2", "minicpm", "stablelm", "mistral3", "minimax-m2", "minimax-m3",
})  # fmt: skip
# src/models/exaone4.cpp load_arch_hparams @ 0c1e570: only a 64-layer model (EXAONE-4.0-32B) gets
# swa_type STANDARD, n_swa 4096 unless sliding_window says otherwise, and load_swa_pattern(ml, 4):
# the per-layer sliding_window_pattern array, else a scalar period (default 4), sliding where
# il % period < period - 1 (llama_hparams::set_swa_pattern), as kvcalc's sliding_window_pattern rule.
_EXAONE4_SWA_LAYERS = 64
_EXAONE4_WINDOW = 4096
_EXAONE4_PERIOD = 4


def _exaone4_windows(
    config: dict[str, Any], window: Any, pattern: Any, arch: str, layers: int, label: str, notes: list[str]
) -> None:
    """exaone4: conversion/exaone.py Exaone4Model @ 0c1e570 writes sliding_window and the per-layer
    pattern (from layer_types, or a "LLLG" / integer sliding_window_pattern) when the config has a
    window; llama.cpp applies it on 64-layer models only (see _EXAONE4_SWA_LAYERS)."""
    if layers != _EXAONE4_SWA_LAYERS:
        if window or pattern is not None:
            notes.append(
                f"{arch}.attention.sliding_window ignored: llama.cpp 0c1e570 gives exaone4 a window only with "
                f"{_EXAONE4_SWA_LAYERS} layers (src/models/exaone4.cpp), so every layer keeps the whole context"
            )
        return
    config["sliding_window"] = _count(_or(window, _EXAONE4_WINDOW), f"{arch}.attention.sliding_window", label)
    if isinstance(pattern, list):
        if len(pattern) != layers or any(p not in (0, 1) for p in pattern):
            raise SourceError(f"{label}: GGUF key {arch}.attention.sliding_window_pattern must flag {layers} layers")
        swa = [bool(p) for p in pattern]
        config["layer_types"] = ["sliding_attention" if s else "full_attention" for s in swa]
    else:
        period = _count(_or(pattern, _EXAONE4_PERIOD), f"{arch}.attention.sliding_window_pattern", label)
        swa = [i % period < period - 1 for i in range(layers)]
        config["sliding_window_pattern"] = period
    if not any(swa):  # create_memory: GGML_ASSERT(hparams.is_swa_any())
        raise SourceError(f"{label}: GGUF exaone4 whose sliding_window_pattern flags no sliding layer; not supported")


def _gated_delta_net(config: dict[str, Any], get: Any, need: Any, arch: str, label: str) -> None:
    """qwen3next: conversion/qwen.py Qwen3NextModel @ 03173d5e writes the gated delta net as
    ssm.conv_kernel linear_conv_kernel_dim, ssm.state_size linear_key_head_dim, ssm.group_count
    linear_num_key_heads, ssm.time_step_rank linear_num_value_heads, ssm.inner_size
    linear_value_head_dim x linear_num_value_heads, and full_attention_interval; head_count_kv
    is a scalar (the full-attention layers'). Mapped back to Qwen3NextConfig's fields, whose
    kvcalc rule puts the full layers every interval-th layer (tests/test_gguf_more.py checks the
    layers llama.cpp 0c1e570 places against a real run).

    qwen35 / qwen35moe (Qwen3_5TextModel / Qwen3_5MoeTextModel, subclasses of Qwen3NextModel in
    conversion/qwen.py of llama.cpp 0c1e570) write the same keys; that converter also writes
    attention.recurrent_layers (true on each "linear_attention" layer) when the HF config lists
    layer_types. The loaders of all three (src/models/qwen3next.cpp, qwen35.cpp, qwen35moe.cpp @
    0c1e570) take recurrent_layers when present, else full_attention_interval, else 4, and
    llama.cpp's state for these layers is n_embd_r = (d_conv - 1) x (d_inner + 2 x n_group x
    d_state), n_embd_s = d_state x d_inner (src/llama-hparams.cpp): Qwen3.5's conv over Q, K
    (linear_num_key_heads x linear_key_head_dim each) and V, and its value-heads x key-dim x
    value-dim delta-rule state, as kvcalc's qwen3_5 and qwen3_next rules size them
    (tests/test_gguf_hybrid2.py runs llama.cpp on qwen35 and qwen35moe files)."""
    values = {k: _count(need(k), f"{arch}.{k}", label) for k in _RECURRENT_KEYS[arch]}
    v_heads = values["ssm.time_step_rank"]
    config.update(
        linear_conv_kernel_dim=values["ssm.conv_kernel"],
        linear_key_head_dim=values["ssm.state_size"],
        linear_num_key_heads=values["ssm.group_count"],
        linear_num_value_heads=v_heads,
        linear_value_head_dim=_ratio(values["ssm.inner_size"], v_heads, f"{arch}.ssm.inner_size",
                                     "ssm.time_step_rank (value heads)", label),
    )  # fmt: skip
    recurrent = get("attention.recurrent_layers")
    if recurrent is not None:
        layers = config["num_hidden_layers"]
        flags = recurrent if isinstance(recurrent, list) else []
        if len(flags) != layers or any(not isinstance(v, bool) for v in flags):
            raise SourceError(
                f"{label}: GGUF key {arch}.attention.recurrent_layers must list the {layers} layers as booleans"
            )
        config["layer_types"] = ["linear_attention" if v else "full_attention" for v in flags]
    elif get("full_attention_interval") is not None:  # absent: 4 in llama.cpp, as in kvcalc's rules
        config["full_attention_interval"] = _count(
            get("full_attention_interval"), f"{arch}.full_attention_interval", label
        )


def _latent_mla(config: dict[str, Any], get: Any, need: Any, arch: str, label: str) -> None:
    """MLA written since llama.cpp's MLA rework (key_length_mla and value_length_mla present), whose
    cached latent (key_length) must be kv_lora_rank + rope dims, as kvcalc's latent cache is."""
    for key in ("attention.key_length_mla", "attention.value_length_mla"):
        need(key)
    _mla(config, get, need, arch, label)
    k_len = _count(need("attention.key_length"), f"{arch}.attention.key_length", label)
    if k_len != config["kv_lora_rank"] + config["qk_rope_head_dim"]:
        raise SourceError(
            f"{label}: GGUF key {arch}.attention.key_length ({k_len}) is not kv_lora_rank + rope dims "
            f"({config['kv_lora_rank']} + {config['qk_rope_head_dim']}), the latent llama.cpp caches; not supported"
        )


def _kimi_linear(config: dict[str, Any], get: Any, need: Any, arch: str, label: str) -> None:
    """kimi-linear: conversion/kimi_linear.py KimiLinearModel (llama.cpp 0c1e570) writes MLA as
    deepseek2 since the MLA rework (kv_lora_rank, rope.dimension_count qk_rope_head_dim, key_length
    kv_lora_rank + rope dims, key_length_mla, value_length_mla), head_count_kv per layer (1, MQA over
    the latent, on linear_attn_config's 1-based full_attn_layers; 0 on the others, the KDA layers),
    ssm.conv_kernel short_conv_kernel_size and kda.head_dim head_dim, but no KDA head count.
    src/models/kimi-linear.cpp @ 0c1e570 makes the layers of head_count_kv 0 recurrent and sizes
    their state by attention.head_count (src/llama-hparams.cpp: n_embd_r = 3 x (d_conv - 1) x n_head x
    kda_head_dim, n_embd_s = kda_head_dim^2 x n_head, f32), so linear_attn_config's num_heads is read
    back as head_count: the heads llama.cpp gives the state. Its MLA layers cache K only (is_mla: no
    V, src/llama-kv-cache.cpp), key_length x head_count_kv per token: kvcalc's latent + rope only when
    head_count_kv is 1 and key_length is kv_lora_rank + rope dims, which is refused otherwise."""
    layers = config["num_hidden_layers"]
    kv = need("attention.head_count_kv")
    if not isinstance(kv, list) or len(kv) != layers:
        raise SourceError(
            f"{label}: GGUF key {arch}.attention.head_count_kv must list the {layers} layers (0 on KDA layers)"
        )
    if any(isinstance(v, bool) or v not in (0, 1) for v in kv):
        raise SourceError(
            f"{label}: GGUF key {arch}.attention.head_count_kv is not 1 on every MLA layer: llama.cpp would cache "
            "that many latent copies; not supported"
        )
    _latent_mla(config, get, need, arch, label)  # kimi-linear.cpp requires the *_mla keys too
    values = {k: _count(need(k), f"{arch}.{k}", label) for k in _RECURRENT_KEYS[arch]}
    config["linear_attn_config"] = {
        "full_attn_layers": [i + 1 for i, v in enumerate(kv) if v],
        "kda_layers": [i + 1 for i, v in enumerate(kv) if not v],
        "num_heads": config["num_attention_heads"],
        "head_dim": values["kda.head_dim"],
        "short_conv_kernel_size": values["ssm.conv_kernel"],
    }
    # The file has no such key; llama.cpp's graph (src/models/kimi-linear.cpp @ 0c1e570) rotates no
    # MLA query or key (no ggml_rope call): Kimi's NoPE MLA, which the config says as mla_use_nope.
    config["mla_use_nope"] = True


def _ratio(value: int, by: int, key: str, other: str, label: str) -> int:
    if value % by:
        raise SourceError(f"{label}: GGUF key {key} ({value}) is no multiple of {other} ({by}); kvcalc cannot read it")
    return value // by


def _windows(
    config: dict[str, Any], get: Any, arch: str, model_type: str, layers: int, label: str, notes: list[str]
) -> None:
    window = get("attention.sliding_window")
    pattern = get("attention.sliding_window_pattern")
    if arch == "exaone4":
        _exaone4_windows(config, window, pattern, arch, layers, label, notes)
        return
    if arch in _NO_WINDOW and (window or pattern is not None):
        # Their converters write no window; a file that has one is run without it by llama.cpp.
        notes.append(
            f"{arch}.attention.sliding_window ignored: llama.cpp's {arch} sets no sliding-window type "
            f"(src/models/*.cpp @ 0c1e570), so every layer keeps the whole context"
        )
        return
    if arch == "llama4":
        # src/models/llama4.cpp: sliding_window 0 -> no chunks; otherwise 8192-token chunks on three
        # layers in four (its set_swa_pattern(4), as Llama4TextConfig's no_rope_layer_interval 4).
        if window == 0:
            return
        config["attention_chunk_size"] = _LLAMA4_CHUNK
        if window is not None and window != _LLAMA4_CHUNK:
            notes.append(f"{arch}.attention.sliding_window {window} ignored: llama.cpp chunks Llama 4 by 8192")
        return
    if window is None or window == 0:
        if model_type in _SLIDING_FAMILIES:  # kvcalc's rules for these need the window's size
            raise SourceError(f"{label}: GGUF has no {arch}.attention.sliding_window, which {arch} layers need")
        return  # the file carries no window: every layer keeps the whole context
    config["sliding_window"] = _count(window, f"{arch}.attention.sliding_window", label)
    if isinstance(pattern, list):  # per layer: true marks a sliding layer
        if len(pattern) != layers:
            raise SourceError(
                f"{label}: GGUF key {arch}.attention.sliding_window_pattern does not list {layers} layers"
            )
        config["layer_types"] = ["sliding_attention" if p else "full_attention" for p in pattern]
    elif pattern is not None:
        config["sliding_window_pattern"] = _count(pattern, f"{arch}.attention.sliding_window_pattern", label)
    elif model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        config["use_sliding_window"] = True  # every layer, as the file says; llama.cpp drops it anyway


def _mla(config: dict[str, Any], get: Any, need: Any, arch: str, label: str) -> None:
    """deepseek2: MLA. Converted files since llama.cpp's MLA rework write key_length =
    kv_lora_rank + rope dims (MQA over the latent) and the decompressed dims as *_mla; older ones
    write key_length = qk_nope + qk_rope and value_length = v_head_dim."""
    rank = _count(need("attention.kv_lora_rank"), f"{arch}.attention.kv_lora_rank", label)
    rope = _count(need("rope.dimension_count"), f"{arch}.rope.dimension_count", label)
    k_mla, v_mla = get("attention.key_length_mla"), get("attention.value_length_mla")
    k_len = k_mla if k_mla is not None else need("attention.key_length")
    v_len = v_mla if v_mla is not None else need("attention.value_length")
    k_len = _count(k_len, f"{arch}.attention.key_length{'_mla' if k_mla is not None else ''}", label)
    if k_len <= rope:
        raise SourceError(f"{label}: GGUF MLA key length {k_len} is not above the {rope} RoPE dims")
    config.update(
        kv_lora_rank=rank,
        qk_rope_head_dim=rope,
        qk_nope_head_dim=k_len - rope,
        v_head_dim=_count(v_len, f"{arch}.attention.value_length", label),
    )


def _sparse_mla(
    config: dict[str, Any], get: Any, need: Any, arch: str, layers: int, label: str, notes: list[str]
) -> None:
    """deepseek32 (DeepSeek-V3.2) and glm-dsa (GLM-5): conversion/deepseek.py DeepseekV32Model and
    conversion/glm.py GlmMoeDsaModel (llama.cpp 0c1e570), both DeepseekV2Model's MLA keys (head_count_kv
    1, key_length kv_lora_rank + rope dims, the decompressed dims as *_mla) plus attention.indexer.
    head_count / key_length / top_k (index_n_heads, index_head_dim, index_topk) and, for glm-dsa,
    attention.indexer.types (true on the "full" layers) when the config lists indexer_types. Both
    loaders require MLA (src/models/deepseek32.cpp, glm-dsa.cpp). create_memory (src/llama-model.cpp)
    builds a llama_kv_cache_dsa: the latent cache, K only, on the trunk layers, and an indexer key
    cache (src/llama-kv-cache-dsa.cpp) on every trunk layer for deepseek32 and on the is_indexer_full
    ones for glm-dsa, whose loader without indexer.types makes every layer full when context_length
    is under 1048576 (GLM-5, 5.1) and takes GLM-5.2's table otherwise. kvcalc's deepseek_v32 and
    glm_moe_dsa rules cache the same; tests/test_gguf_sparse.py runs llama.cpp on both."""
    kv = need("attention.head_count_kv")
    if kv != 1 or isinstance(kv, bool):
        raise SourceError(
            f"{label}: GGUF key {arch}.attention.head_count_kv is {_short(kv)}, not 1 (MQA over the latent): "
            "llama.cpp would cache that many latent copies; not supported"
        )
    _latent_mla(config, get, need, arch, label)  # both converters postdate the MLA rework
    for key, name in (("key_length", "index_head_dim"), ("head_count", "index_n_heads"), ("top_k", "index_topk")):
        config[name] = _count(need(f"attention.indexer.{key}"), f"{arch}.attention.indexer.{key}", label)
    if arch != "glm-dsa":
        return
    types = get("attention.indexer.types")
    if types is None:
        ctx = _count(need("context_length"), f"{arch}.context_length", label)
        if ctx < _GLM_DSA_PRE_5_2_CTX:
            full = [True] * layers
        else:
            # GLM_5_2_DEFAULT_INDEXER_TYPES (src/models/glm-dsa.cpp): layers 0 and 1, then every 4th from
            # layer 2, full, for its 78 entries; the rest of the LLAMA_MAX_LAYERS array is 0 (shared).
            full = [i < _GLM_5_2_LAYERS and (i < 2 or (i - 2) % 4 == 0) for i in range(layers)]
            notes.append(
                f"no {arch}.attention.indexer.types and context_length {ctx:,} >= {_GLM_DSA_PRE_5_2_CTX:,}: "
                "llama.cpp takes GLM-5.2's indexer layout (src/models/glm-dsa.cpp)"
            )
    elif isinstance(types, list) and len(types) == layers and all(v in (0, 1) for v in types):
        full = [bool(v) for v in types]
    elif isinstance(types, bool):  # llama.cpp's get_key_or_arr gives a scalar to every layer
        full = [types] * layers
    else:
        raise SourceError(f"{label}: GGUF key {arch}.attention.indexer.types must list the {layers} layers as booleans")
    config["indexer_types"] = ["full" if f else "shared" for f in full]
    # The same layout as GlmMoeDsaConfig's index_topk_pattern letters, which vLLM reads instead of the
    # list (families/glm_moe_dsa.py): with both given, no engine derives another layout.
    config["index_topk_pattern"] = "".join("F" if f else "S" for f in full)


def _deepseek4(config: dict[str, Any], get: Any, need: Any, arch: str, label: str) -> None:
    """deepseek4 (DeepSeek-V4): conversion/deepseek.py DeepseekV4Model @ 0c1e570 writes TextModel's
    head_count, head_count_kv (num_key_value_heads, 1) and key_length = value_length = head_dim, plus
    sliding_window, indexer.key_length (index_head_dim) and compress_ratios (one per block: 0, 4 for
    CSA or 128 for HCA). src/llama-kv-cache-dsv4.cpp caches one key_length row per token per layer
    (K only, dsv4_make_k_only) and hard-codes the ratios 4 and 128, so the config's rates are those.
    kvcalc's deepseek_v4 rules read the rest; tests/test_gguf_deepseek4.py runs llama.cpp on a file."""
    kv = need("attention.head_count_kv")
    if kv != 1 or isinstance(kv, bool):
        # The K row llama.cpp caches is n_head_kv x key_length; DeepSeek-V4 has one shared K=V head.
        raise SourceError(f"{label}: GGUF key {arch}.attention.head_count_kv is {_short(kv)}, not 1: not supported")
    k_len = _count(need("attention.key_length"), f"{arch}.attention.key_length", label)
    if get("attention.value_length") not in (None, k_len):
        raise SourceError(f"{label}: GGUF {arch} with value_length unlike key_length {k_len}: not supported")
    ratios = need("attention.compress_ratios")
    if not isinstance(ratios, list) or len(ratios) < config["num_hidden_layers"]:
        raise SourceError(f"{label}: GGUF key {arch}.attention.compress_ratios must list a ratio for every block")
    config.update(
        num_key_value_heads=1,
        head_dim=k_len,
        sliding_window=_count(need("attention.sliding_window"), f"{arch}.attention.sliding_window", label),
        compress_ratios=ratios,
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
    )
    if 4 in ratios[: config["num_hidden_layers"]]:
        key = f"{arch}.attention.indexer.key_length"
        config["index_head_dim"] = _count(need("attention.indexer.key_length"), key, label)
    rope = get("rope.dimension_count")
    if rope is not None:
        config["qk_rope_head_dim"] = rope


# src/models/glm-dsa.cpp load_arch_hparams @ 0c1e570: n_ctx_train < 1048576 is GLM-5 or 5.1 (every
# layer full); its GLM_5_2_DEFAULT_INDEXER_TYPES table lists 78 layers.
_GLM_DSA_PRE_5_2_CTX = 1048576
_GLM_5_2_LAYERS = 78


def _minimax_m3(config: dict[str, Any], get: Any, need: Any, arch: str, layers: int, label: str) -> None:
    """minimax-m3: conversion/minimax.py MiniMaxM3Model (llama.cpp 0c1e570), a MiniMaxM2Model: TextModel's
    GQA keys (head_count_kv, key_length = value_length = head_dim), attention.indexer.key_length
    sparse_index_dim (head_count, top_k, block_size and local_blocks choose blocks, no cache) and
    leading_dense_block_count, the leading zeros of moe_layer_freq. create_memory (src/llama-model.cpp)
    builds a llama_kv_cache_msa whose indexer cache holds the layers il >= n_layer_dense_lead: llama.cpp
    makes the MoE layers the sparse ones, so the config's sparse_attention_freq is read back as that
    split (the released checkpoint's two lists agree)."""
    if "per_layer_config" in config or "v_head_dim" in config:
        raise SourceError(
            f"{label}: GGUF {arch} with KV heads or a value length that differ from the rest: kvcalc's "
            "minimax_m3 rules have one K/V geometry; not supported"
        )
    dense = get("leading_dense_block_count")
    if dense is None:
        dense = 0  # llama.cpp's n_layer_dense_lead default: every layer sparse
    elif isinstance(dense, bool) or not isinstance(dense, int) or dense < 0:
        raise SourceError(f"{label}: GGUF key {arch}.leading_dense_block_count is {_short(dense)}")
    key = f"{arch}.attention.indexer.key_length"
    config["index_head_dim"] = _count(need("attention.indexer.key_length"), key, label)
    config["layer_types"] = ["full_attention" if i < dense else "minimax_m3_sparse" for i in range(layers)]


# --- NextN (MTP) layers ---------------------------------------------------------------------------------------
#
# Converters that keep a model's multi-token-prediction layers (conversion/glm.py Glm4MoeModel, qwen.py's
# MTP mixin, deepseek.py, mimo.py, ...) count them in block_count and write nextn_predict_layers. llama.cpp
# 0c1e570 runs the first n_layer() = block_count - nextn_predict_layers blocks (src/llama-hparams.cpp
# n_layer()); a plain context's memory filters the rest out (src/llama-model.cpp create_memory: "filter
# = il < n_layer()" for attention-only models, the same bound in the hybrids' filter_attn/filter_recr), and
# the architectures below create every tensor of those blocks with TENSOR_SKIP unless the model is loaded
# for MTP drafting (llama_model_params.load_mtp, set by --spec-type draft-mtp): llama-model-loader.cpp
# create_tensor then logs "model has unused tensor ... -- ignoring" and takes its bytes off the model
# buffer. Checked on a real llama.cpp 0c1e570 load (tests/test_gguf_nextn.py): "layer 2: filtered".
# An architecture not listed here, or a file that holds only NextN blocks (a drafter), is refused.
_SKIPS_NEXTN = frozenset({
    "deepseek2", "glm4", "glm4moe", "qwen3next", "qwen35", "qwen35moe", "mimo2", "exaone4", "nemotron_h",
    "nemotron_h_moe", "deepseek32", "glm-dsa",
})  # fmt: skip


def nextn_layers(meta: dict[str, Any], label: str) -> int:
    """How many of a GGUF's last blocks are NextN (MTP) layers that a plain llama.cpp context skips."""
    arch = meta.get("general.architecture")
    value = meta.get(f"{arch}.nextn_predict_layers")
    if value is None or value == 0:
        return 0
    key = f"{arch}.nextn_predict_layers"
    count = _count(value, key, label)
    blocks = meta.get(f"{arch}.block_count")
    if not isinstance(blocks, int) or isinstance(blocks, bool) or count >= blocks:
        raise SourceError(f"{label}: GGUF key {key} is {count}, not fewer than the {blocks} blocks: a drafter "
                          "file holding only NextN layers is not supported")  # fmt: skip
    if arch not in _SKIPS_NEXTN:
        raise SourceError(f"{label}: GGUF {arch} with {key} {count}: whether llama.cpp loads and caches the NextN "
                          "layers of this architecture is not known to kvcalc; not supported")  # fmt: skip
    return count


def _loaded_blocks(meta: dict[str, Any], label: str) -> int | None:
    """The blocks whose tensors llama.cpp loads (all but the NextN ones), or None to load all."""
    nextn = nextn_layers(meta, label)
    if not nextn:
        return None
    return int(meta[f"{meta['general.architecture']}.block_count"]) - nextn


def loaded_tensor_bytes(headers: list[GgufHeader], label: str) -> int:
    """Bytes of the tensors llama.cpp loads from these shards (the first one first): every tensor
    but those of skipped NextN blocks."""
    return sum(t.nbytes for t in _loaded(headers, label))


def loaded_parameters(headers: list[GgufHeader], label: str) -> int:
    """Elements of the tensors llama.cpp loads (the parameters, whatever their quantization)."""
    return sum(math.prod(t.dims) for t in _loaded(headers, label))


def stored_split(headers: list[GgufHeader], label: str) -> tuple[int, int]:
    """(input embedding bytes, routed experts' bytes) of the loaded tensors: token_embd, and the
    stacked expert tensors (llama.cpp's ``blk.N.ffn_{gate,up,down,gate_up}_exps``)."""
    embedding = experts = 0
    for t in _loaded(headers, label):
        if t.name == "token_embd.weight":
            embedding += t.nbytes
        elif _EXPERTS.match(t.name):
            experts += t.nbytes
    return embedding, experts


_EXPERTS = re.compile(r"^blk\.\d+\.ffn_(gate|up|down|gate_up)_exps\.")


def check_tensor_data(headers: list[GgufHeader], label: str) -> None:
    """Refuse tensor infos no real file holds, before any weights are sized from them: tensors
    adding up to more than sources.MAX_WEIGHTS_BYTES (a 2^62 x 2^62 tensor), or tensor data that
    runs past the end of its file (a truncated download; llama.cpp's loader refuses it: "tensor
    data is not within the file bounds"). Every path from tensor infos to weights (the total, the
    parameters, the embedding and expert split, the split by layer) goes through here."""
    from .sources import MAX_WEIGHTS_BYTES

    total = sum(t.nbytes for header in headers for t in header.tensors)
    if total > MAX_WEIGHTS_BYTES:
        raise SourceError(
            f"{label}: tensor infos add up to {total:,} bytes, implausibly large (over {MAX_WEIGHTS_BYTES:,})"
        )
    for i, header in enumerate(headers):
        end = header.data_end
        if end is not None and header.file_size is not None and end > header.file_size:
            shard = f" (shard {i + 1} of {len(headers)})" if len(headers) > 1 else ""
            raise SourceError(
                f"{label}{shard} is truncated: its tensor data ends at byte {end:,}, but the file has "
                f"{header.file_size:,} bytes (an incomplete download?)"
            )


def _loaded(headers: list[GgufHeader], label: str) -> list[TensorInfo]:
    check_tensor_data(headers, label)
    trunk = _loaded_blocks(headers[0].metadata, label)
    kept = []
    for header in headers:
        for t in header.tensors:
            m = _BLOCK.match(t.name)
            if trunk is None or m is None or int(m[1]) < trunk:
                kept.append(t)
    return kept


# --- weights by llama.cpp layer (for the GPU/CPU split) ------------------------------------------------------

_BLOCK = re.compile(r"^blk\.(\d+)\.")


def layer_weights(path: Path) -> LayerWeights:
    """A GGUF's tensor bytes by llama.cpp layer (kvcalc.offload.LayerWeights), from the tensor infos of
    every shard: ``blk.N.*`` is layer N; ``output.*`` and ``output_norm.*`` the output layer, which
    holds a copy of ``token_embd.weight`` when the file has no ``output.weight`` (the architectures'
    load_tensors create the head as a TENSOR_DUPLICATED token embedding, and src/llama-model-loader.cpp
    create_tensor places such a tensor as LLM_TENSOR_OUTPUT, with the output layer); every
    other tensor (token embeddings, their norm) is the input layer, which stays on the CPU."""
    shards = split_shards(path)
    first = read_header(path)
    return headers_layer_weights([first if shard == path else read_header(shard) for shard in shards], str(path))


def headers_layer_weights(headers: list[GgufHeader], label: str) -> LayerWeights:
    """``layer_weights`` from the headers of every shard, the first one first (a local file's or
    a Hub file's, read in byte ranges)."""
    from .offload import LayerWeights

    check_tensor_data(headers, label)
    first = headers[0]
    path = label
    tensors = [t for header in headers for t in header.tensors]
    arch = first.metadata.get("general.architecture")
    layers = first.metadata.get(f"{arch}.block_count")
    if isinstance(layers, bool) or not isinstance(layers, int) or layers <= 0:
        raise SourceError(f"{path}: GGUF has no {arch}.block_count")
    trunk = _loaded_blocks(first.metadata, path)
    per_layer = [0] * layers
    input_bytes = output_bytes = 0
    names = {t.name for t in tensors}
    for t in tensors:
        m = _BLOCK.match(t.name)
        if m is not None:
            index = int(m[1])
            if index >= layers:
                raise SourceError(f"{path}: GGUF tensor {t.name} is past the {layers} layers of {arch}.block_count")
            if trunk is None or index < trunk:  # a NextN block's tensors are not loaded (TENSOR_SKIP)
                per_layer[index] += t.nbytes
        elif t.name.startswith(("output.", "output_norm.")):
            output_bytes += t.nbytes
        else:
            input_bytes += t.nbytes
            if t.name == "token_embd.weight" and "output.weight" not in names:
                output_bytes += t.nbytes  # the tied head: a copy with the output layer
    return LayerWeights(input_bytes, tuple(per_layer), output_bytes, nextn=0 if trunk is None else layers - trunk)
