"""Weight sizes: model.safetensors.index.json, safetensors headers (local or on the Hub), GGUF
tensor data."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvcalc.errors import SourceError
from kvcalc.inputs.files import MAX_WEIGHTS_BYTES, SAFETENSORS_HEADER_LIMIT, _open_regular, read_json_file
from kvcalc.inputs.hub import _is_offline, _merge_revision, parse_hub_url, weights_error
from kvcalc.inputs.source import _find_preset, _hub_gguf, _local_path, gguf_weights_bytes, is_gguf_file

# --- weights ----------------------------------------------------------------------------------------

# Bytes per element of safetensors dtypes (the header's "dtype" strings).
_SAFETENSORS_BYTES = {
    "F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1,
}  # fmt: skip


def weights_bytes(
    model: str,
    *,
    spec_dtype: Any,
    revision: str | None = None,
    on_fetch: Callable[[str], None] | None = None,
) -> tuple[int, str]:
    """Bytes of the model's weights, and where the figure came from.

    A local GGUF: the bytes its tensor infos give, over every shard of a split GGUF. A local
    config: ``model.safetensors.index.json`` beside it (``metadata.total_size``) or a single
    ``model.safetensors`` (its header's tensor extents). A GGUF in a Hub repo: every shard's
    tensor infos, read in byte ranges (kvcalc.inputs.gguf.hub). A Hub repo (id or URL):
    huggingface_hub's safetensors metadata (parameter counts per dtype). A preset: its checkpoint's
    bytes as the preset records them (less what engines do not load). ``on_fetch`` is called right
    before the Hub is asked, as in resolve().
    """
    path = _local_path(model)
    if path is not None and path.is_file() and is_gguf_file(path):
        return gguf_weights_bytes(path)
    if path is not None:
        folder = path if path.is_dir() else path.parent
        index = folder / "model.safetensors.index.json"
        if os.path.lexists(index):
            return _index_total_size(index), f"{index.name}: metadata.total_size"
        single = folder / "model.safetensors"
        if os.path.lexists(single):
            return _safetensors_file_bytes(single), f"{single.name} header"
        where = _folder_name(folder)
        raise SourceError(f"no model.safetensors(.index.json) in the folder {where}: give --weights SIZE")
    hub_gguf = _hub_gguf(model)
    if hub_gguf is not None:
        from kvcalc.inputs.gguf.hub import hub_gguf_weights

        at = _merge_revision(model, hub_gguf.revision, revision)
        return hub_gguf_weights(hub_gguf, revision=at, on_fetch=on_fetch)
    hub = parse_hub_url(model)
    if hub is not None:
        repo_id, url_revision = hub
        return _hub_weights_bytes(repo_id, _merge_revision(model, url_revision, revision), on_fetch)
    preset = _find_preset(model)
    if preset is not None:
        if preset.weights is None:
            raise SourceError(f"preset {preset.name} has no weights figure: give --weights SIZE")
        w = preset.weights
        unloaded = f", less {w.unloaded_bytes:,} B not loaded" if w.unloaded_bytes else ""
        return w.loaded_bytes, f"{w.format} checkpoint, {w.parameters:,} parameters{unloaded}, preset"
    return _hub_weights_bytes(model, revision, on_fetch)


def _folder_name(folder: Path) -> str:
    """A folder as a message names it: its absolute path (``.`` names nothing), with "the current
    folder" said when it is that one."""
    absolute = Path(os.path.abspath(folder))
    here = " (the current folder)" if absolute == Path(os.path.abspath(os.curdir)) else ""
    return f"{absolute}{here}"


def _kind(value: Any) -> str:
    """How a JSON value reads in a message: 'a list', 'a string', 'null'..."""
    if value is None:
        return "null"
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list"}
    return names.get(type(value), "an object" if isinstance(value, dict) else type(value).__name__)


def _short(value: Any) -> str:
    """A JSON value for a one-line message: repr (so newlines stay escaped), cut to 60 characters."""
    if _is_int(value) and value.bit_length() > 64:  # thousands of digits would drown the message
        return f"a {value.bit_length():,}-bit integer"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _index_total_size(index: Path) -> int:
    """metadata.total_size of a safetensors index, checked to be a plausible number of bytes."""
    data = read_json_file(index, what="weights index")
    if not isinstance(data, dict):
        raise SourceError(f"{index} is {_kind(data)}, not a JSON object")
    if "metadata" not in data:
        raise SourceError(f"{index} has no metadata.total_size: give --weights SIZE")
    metadata = data["metadata"]
    if not isinstance(metadata, dict):
        raise SourceError(f"{index}: metadata is {_kind(metadata)}, not an object")
    total = metadata.get("total_size")
    if total is None:
        raise SourceError(f"{index} has no metadata.total_size: give --weights SIZE")
    if not _is_int(total):
        raise SourceError(f"{index}: metadata.total_size is {_short(total)}, not a whole number of bytes")
    if total <= 0:
        raise SourceError(f"{index}: metadata.total_size must be positive, got {_short(total)}")
    if total > MAX_WEIGHTS_BYTES:
        raise SourceError(
            f"{index}: metadata.total_size {_short(total)} is implausibly large (over {MAX_WEIGHTS_BYTES:,} bytes)"
        )
    return int(total)


def _safetensors_file_bytes(path: Path) -> int:
    """The end of the last tensor's data in a single ``model.safetensors``, from its header.

    The file: an 8-byte little-endian header length, that many bytes of JSON header, then the
    tensor data, which each header entry locates by ``data_offsets`` [begin, end].
    """
    import struct

    label = str(path)
    try:
        fd = _open_regular(path, label)
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        size = os.fstat(fd).st_size
        prefix = _read_up_to(fd, 8)
        if len(prefix) < 8:
            raise SourceError(f"{path} is {size:,} bytes: too short to be a safetensors file")
        (length,) = struct.unpack("<Q", prefix)
        if length > SAFETENSORS_HEADER_LIMIT:
            raise SourceError(
                f"{path} declares a {length:,}-byte safetensors header; the format allows at most "
                f"{SAFETENSORS_HEADER_LIMIT:,}"
            )
        if 8 + length > size:
            raise SourceError(f"{path} declares a {length:,}-byte safetensors header but is only {size:,} bytes long")
        raw = _read_up_to(fd, length)
        if len(raw) < length:
            raise SourceError(f"{path} ended inside its safetensors header (it shrank while kvcalc read it)")
    except OSError as exc:
        raise SourceError(f"cannot read the safetensors header of {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return _safetensors_extent(_parse_header(raw, path), path=path, data_bytes=size - 8 - length)


def _read_up_to(fd: int, count: int) -> bytes:
    chunks: list[bytes] = []
    while count > 0:
        chunk = os.read(fd, min(count, 2**20))
        if not chunk:
            break
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def _parse_header(raw: bytes, path: Path) -> Any:
    import json

    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise SourceError(f"{path}: the safetensors header is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise SourceError(f"{path}: the safetensors header is not valid JSON ({exc.msg} at byte {exc.pos})") from None
    except RecursionError:
        raise SourceError(f"{path}: the safetensors header is nested too deeply") from None
    except ValueError as exc:  # an integer literal too long to convert
        raise SourceError(f"{path}: the safetensors header cannot be read: {exc}") from None


def _safetensors_extent(header: Any, *, path: Path | str, data_bytes: int | None = None) -> int:
    """Bytes of tensor data a parsed safetensors header describes: its largest ``data_offsets`` end.

    Every entry must be a valid tensor ({"dtype": str, "shape": [ints >= 0], "data_offsets":
    [begin, end]} with 0 <= begin <= end, and end within ``data_bytes`` when that is known), and
    ``__metadata__`` an object of strings, as the safetensors library itself requires; anything else
    is a SourceError naming ``path`` and the tensor. Without the checks a negative offset once
    *raised* the KV budget, and a malformed entry ended in a traceback.
    """
    if not isinstance(header, dict):
        raise SourceError(f"{path}: the safetensors header is {_kind(header)}, not a JSON object")
    end_max = 0
    for name, entry in header.items():
        if name == "__metadata__":
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                raise SourceError(f"{path}: the safetensors __metadata__ must be an object of strings")
            continue
        tensor = f"{path}: tensor {_short(name)}"
        if not isinstance(entry, dict):
            raise SourceError(f"{tensor} is {_kind(entry)}, not an object")
        if not isinstance(entry.get("dtype"), str):
            raise SourceError(f"{tensor} has no dtype string")
        shape = entry.get("shape")
        if not isinstance(shape, list) or not all(_is_int(n) and n >= 0 for n in shape):
            raise SourceError(f"{tensor} has shape {_short(shape)}; expected a list of whole numbers >= 0")
        offsets = entry.get("data_offsets")
        if offsets is None:
            raise SourceError(f"{tensor} has no data_offsets")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_int(n) for n in offsets):
            raise SourceError(f"{tensor} has data_offsets {_short(offsets)}; expected [begin, end], two whole numbers")
        begin, end = offsets
        if not 0 <= begin <= end:
            raise SourceError(f"{tensor} has data_offsets [{_short(begin)}, {_short(end)}]; expected 0 <= begin <= end")
        if data_bytes is not None and end > data_bytes:
            at = f"byte {end:,}" if end.bit_length() <= 64 else f"a {end.bit_length():,}-bit offset"
            raise SourceError(f"{tensor} ends at {at} of the data, but the file holds {data_bytes:,} bytes of data")
        end_max = max(end_max, end)
    return end_max


def _hub_weights_bytes(
    repo_id: str, revision: str | None, on_fetch: Callable[[str], None] | None = None
) -> tuple[int, str]:
    from huggingface_hub import get_safetensors_metadata
    from huggingface_hub.utils import (  # type: ignore[attr-defined]  # exported lazily, unseen by mypy
        are_progress_bars_disabled,
        disable_progress_bars,
        enable_progress_bars,
    )

    if on_fetch is not None and not _is_offline():
        at = f" at revision {revision}" if revision else ""
        on_fetch(f"fetching the safetensors headers of {repo_id}{at} from the Hub...")
    # Reading shard headers draws a progress bar on stderr; kvcalc's stderr is for errors only.
    was_disabled = are_progress_bars_disabled()
    disable_progress_bars()
    try:
        meta = get_safetensors_metadata(repo_id, revision=revision)
    except Exception as exc:
        raise weights_error(exc, repo_id, revision) from None
    finally:
        if not was_disabled:
            enable_progress_bars()
    total = 0
    for dtype, count in meta.parameter_count.items():
        if dtype not in _SAFETENSORS_BYTES:
            raise SourceError(f"{repo_id} stores weights as {dtype}, which kvcalc cannot size: give --weights SIZE")
        total += count * _SAFETENSORS_BYTES[dtype]
    return total, "Hub safetensors metadata"
