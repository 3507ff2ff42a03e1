"""GGUF files for the tests, written with the gguf package (the one llama.cpp's converter uses).

Two writers: ``gguf_file`` takes plain Python values (the writer picks uint32, float32, string,
bool or an array) and zero-filled tensors of any ggml type; ``typed_gguf_file`` takes every key with
its GGUF value type, as convert_hf_to_gguf.py writes it (what the llama.cpp probe copies from a
user's file), and f32 tensors. gguf is imported when a file is written: a test that writes one is
skipped where gguf is not installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvcalc.api import Sequences, estimate

U32, F32 = "uint32", "float32"
# (key without the arch prefix, or a full general./tokenizer. key) -> (GGUF value type name, value)
Keys = dict[str, tuple[str, Any]]


def gguf_file(
    path: Path, arch: str, keys: dict[str, Any], tensors: tuple[tuple[str, tuple[int, ...], str], ...] = ()
) -> Path:
    """A GGUF of ``arch`` with ``keys`` (name without the arch prefix -> int, float, str, list) and
    zero-filled ``tensors`` (name, GGUF dims with the row length first, ggml type name)."""
    gguf: Any = pytest.importorskip("gguf")
    np: Any = pytest.importorskip("numpy")
    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in keys.items():
        full = key if key.startswith(("general.", "split.", "tokenizer.")) else f"{arch}.{key}"
        if isinstance(value, bool):
            writer.add_bool(full, value)
        elif isinstance(value, int):
            writer.add_uint32(full, value)
        elif isinstance(value, float):
            writer.add_float32(full, value)
        elif isinstance(value, str):
            writer.add_string(full, value)
        else:
            writer.add_array(full, value)
    for name, dims, kind in tensors:
        shape = tuple(reversed(dims))  # numpy's order: the row length last
        if kind in ("F32", "F16"):
            writer.add_tensor(name, np.zeros(shape, dtype=np.float32 if kind == "F32" else np.float16))
            continue
        qtype = gguf.GGMLQuantizationType[kind]
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        data = np.zeros((*shape[:-1], shape[-1] // block * size), dtype=np.uint8)  # the bytes of each row
        writer.add_tensor(name, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def attention(heads: int, kv: int, dim: int, layers: int, **more: Any) -> dict[str, Any]:
    """The attention keys of a ``layers``-layer model (plain values for ``gguf_file``): ``heads`` query
    heads, ``kv`` KV heads of ``dim`` dims, a context of 8192; ``more`` adds or overrides keys."""
    return {
        "block_count": layers, "context_length": 8192, "embedding_length": heads * dim,
        "attention.head_count": heads, "attention.head_count_kv": kv,
        "attention.key_length": dim, "attention.value_length": dim, **more,
    }  # fmt: skip


def total(path: Path, tokens: int, engine: str = "theoretical", encoder_tokens: int | None = None, **kw: Any) -> int:
    """kvcalc's estimate of the file at ``path`` in bytes, with an fp16 cache unless ``kw`` says otherwise
    (an encoder-decoder's ``encoder_tokens`` ride in the call's Sequences)."""
    if encoder_tokens is None:
        return estimate(str(path), tokens=tokens, kv_dtype="fp16", engine=engine, **kw).total_bytes
    sequences = Sequences(tokens=tokens, encoder_tokens=encoder_tokens)
    return estimate(str(path), sequences=sequences, kv_dtype="fp16", engine=engine, **kw).total_bytes


def typed_gguf_file(path: Path, arch: str, keys: Keys, tensors: dict[str, tuple[int, ...]] | None = None) -> Path:
    """The GGUF of ``keys``, each key with its GGUF value type, and f32 zero ``tensors`` of the given
    (ne0, ne1, ...) shapes, as llama.cpp prints them (none by default)."""
    gguf: Any = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(path), arch)
    for key, (kind, value) in keys.items():
        full = key if key.startswith(("general.", "tokenizer.")) else f"{arch}.{key}"
        if kind.startswith("array["):
            writer.add_key_value(full, value, gguf.GGUFValueType.ARRAY, gguf.GGUFValueType[kind[6:-1].upper()])
        else:
            writer.add_key_value(full, value, gguf.GGUFValueType[kind.upper()])
    if tensors:
        np: Any = pytest.importorskip("numpy")
        for name, shape in tensors.items():
            writer.add_tensor(name, np.zeros(tuple(reversed(shape)), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def tokenizer(model: str = "gpt2") -> Keys:
    """A tokenizer of six tokens (llama.cpp needs one to build the model; it sizes no cache)."""
    keys: Keys = {
        "tokenizer.ggml.model": ("string", model),
        "tokenizer.ggml.pre": ("string", "default"),
        "tokenizer.ggml.tokens": ("array[string]", ["<s>", "</s>", "a", "b", "ab", "c"]),
        "tokenizer.ggml.token_type": ("array[int32]", [3, 3, 1, 1, 1, 1]),
        "tokenizer.ggml.bos_token_id": ("uint32", 0),
        "tokenizer.ggml.eos_token_id": ("uint32", 1),
    }
    if model == "gpt2":
        keys["tokenizer.ggml.merges"] = ("array[string]", ["a b"])
    else:
        keys["tokenizer.ggml.scores"] = ("array[float32]", [0.0, 0.0, -1.0, -1.0, -2.0, -1.0])
    return keys


def general(name: str) -> Keys:
    """The general.* keys every converted file has: its name and file type 1 (mostly f16)."""
    return {"general.name": ("string", name), "general.file_type": (U32, 1)}
