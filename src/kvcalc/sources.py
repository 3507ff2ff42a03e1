"""MODEL text -> raw config dict: a preset name, a local config.json (or folder), or a Hub repo id.

Configs are parsed as plain JSON and presets with ``yaml.safe_load``: no code from a model repo
is ever run. huggingface_hub is imported only when a repo id has to be fetched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .errors import SourceError
from .presets import Preset, find_preset, get_preset

_REPO_ID_RE = re.compile(r"^[A-Za-z0-9][\w.\-]{0,95}/[A-Za-z0-9][\w.\-]{0,95}$")


@dataclass(frozen=True)
class Source:
    """A resolved MODEL: the raw config and where it came from."""

    config: Any
    label: str
    kind: Literal["preset", "file", "hub"]
    preset: Preset | None = None


def resolve(model: str, *, revision: str | None = None) -> Source:
    """Find what MODEL names: an existing path first, then a preset, then a Hub repo id."""
    path = Path(model).expanduser()
    if path.exists():
        return _from_path(path)
    preset = find_preset(model)
    if preset is not None:
        return Source(preset.config, preset.name, "preset", preset)
    if _looks_like_path(model):
        raise SourceError(f"no such file or directory: {model}")
    if _REPO_ID_RE.match(model):
        return Source(fetch_hub_config(model, revision=revision), model, "hub")
    get_preset(model)  # raises with the closest preset names
    raise AssertionError("unreachable")


def _looks_like_path(model: str) -> bool:
    return model.endswith(".json") or model.startswith(("/", "./", "../", "~")) or model.count("/") > 1 or "\\" in model


def _from_path(path: Path) -> Source:
    if path.is_dir():
        config_path = path / "config.json"
        if not config_path.is_file():
            raise SourceError(f"directory {path} has no config.json")
        path = config_path
    return Source(read_json_file(path), str(path), "file")


def read_json_file(path: Path) -> Any:
    """Parse a JSON file, turning every way it can be unreadable into a one-line SourceError."""
    import json

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from None
    if b"\x00" in data:
        raise SourceError(f"{path} is a binary file, not a JSON config")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SourceError(f"{path} is not UTF-8 text, not a JSON config") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise SourceError(f"{path} is nested too deeply to be a model config") from None
    except ValueError as exc:  # e.g. an integer literal longer than Python will convert
        raise SourceError(f"{path} is not a usable JSON config: {exc}") from None


def fetch_hub_config(repo_id: str, *, revision: str | None = None) -> Any:
    """Download (or read from the local cache) a repo's config.json with huggingface_hub.

    huggingface_hub honours ``HF_TOKEN``, ``HF_HOME`` / ``HF_HUB_CACHE`` and ``HF_HUB_OFFLINE``;
    each way the fetch fails becomes one line that says what to do.
    """
    import logging

    from huggingface_hub import hf_hub_download

    # huggingface_hub logs each retry as a warning; kvcalc reports the outcome in one line.
    hub_logger = logging.getLogger("huggingface_hub")
    previous_level = hub_logger.level
    hub_logger.setLevel(logging.ERROR)
    try:
        local = hf_hub_download(repo_id, "config.json", revision=revision)
    except Exception as exc:
        raise _hub_error(exc, repo_id, revision) from None
    finally:
        hub_logger.setLevel(previous_level)
    try:
        return read_json_file(Path(str(local)))
    except SourceError as exc:  # name the repo, not the cache path
        raise SourceError(f"config.json of Hub repo {repo_id}: {exc}") from None


def _hub_error(exc: BaseException, repo_id: str, revision: str | None) -> SourceError:
    """One line that says what went wrong with the Hub and what to do about it."""
    from huggingface_hub.errors import (
        EntryNotFoundError,
        FileMetadataError,
        GatedRepoError,
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    at = f" at revision {revision!r}" if revision else ""
    if isinstance(exc, LocalEntryNotFoundError):
        # Not cached, and the Hub did not serve it. When a server did answer, its answer is the
        # cause and says more than "offline"; a connection failure (or offline mode) means unreachable.
        cause = exc.__cause__
        if isinstance(cause, HfHubHTTPError | EntryNotFoundError):
            return _hub_error(cause, repo_id, revision)
        if isinstance(cause, FileMetadataError):  # a server answered, but not as a Hub does
            return SourceError(
                f"the Hub did not answer like a Hugging Face Hub for {repo_id}{at} "
                f"({cause.__class__.__name__}); check HF_ENDPOINT"
            )
        return SourceError(
            f"Hub repo {repo_id}{at} is not in the local Hugging Face cache and the Hub cannot be "
            "reached (offline or HF_HUB_OFFLINE=1); fetch it once online or pass a local config.json"
        )
    if isinstance(exc, GatedRepoError):
        return SourceError(f"Hub repo {repo_id} is gated: accept its terms on the Hub, then set HF_TOKEN")
    if isinstance(exc, RepositoryNotFoundError):
        return SourceError(f"Hub repo {repo_id} not found (if it is private, set HF_TOKEN to a token that can read it)")
    if isinstance(exc, RevisionNotFoundError):
        return SourceError(f"Hub repo {repo_id} has no revision {revision or 'main'!r}")
    if isinstance(exc, EntryNotFoundError):
        return SourceError(f"Hub repo {repo_id}{at} has no config.json")
    if isinstance(exc, HFValidationError):
        return SourceError(f"{repo_id!r} is not a valid Hugging Face repo id")
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else None
        if status == 401:
            return SourceError(f"the Hub refused the credentials for {repo_id}: check HF_TOKEN")
        if status == 403:
            return SourceError(f"the Hub denied access to {repo_id}{at} (HTTP 403): check HF_TOKEN's permissions")
        return SourceError(f"could not fetch config.json of {repo_id}: the Hub answered HTTP {status}")
    detail = " ".join(str(exc).split())  # hub messages span lines; kvcalc prints one
    return SourceError(f"could not fetch config.json of {repo_id}: {exc.__class__.__name__}: {detail}")


# Bytes per element of safetensors dtypes (the header's "dtype" strings).
_SAFETENSORS_BYTES = {
    "F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1,
}  # fmt: skip


def weights_bytes(model: str, *, spec_dtype: Any, revision: str | None = None) -> tuple[int, str]:
    """Bytes of the model's weights, and where the figure came from.

    A local config: ``model.safetensors.index.json`` beside it (``metadata.total_size``) or a
    single ``model.safetensors`` (its header's tensor extents). A Hub repo: huggingface_hub's
    safetensors metadata (parameter counts per dtype). A preset: parameters x its dtype.
    """
    path = Path(model).expanduser()
    if path.exists():
        folder = path if path.is_dir() else path.parent
        index = folder / "model.safetensors.index.json"
        if index.is_file():
            data = read_json_file(index)
            total = data.get("metadata", {}).get("total_size") if isinstance(data, dict) else None
            if isinstance(total, int) and not isinstance(total, bool) and total > 0:
                return total, f"{index.name}: metadata.total_size"
            raise SourceError(f"{index} has no positive metadata.total_size")
        single = folder / "model.safetensors"
        if single.is_file():
            return _safetensors_file_bytes(single), f"{single.name} header"
        raise SourceError(f"no model.safetensors(.index.json) beside {path}: give --weights SIZE")
    preset = find_preset(model)
    if preset is not None:
        if preset.parameters is None:
            raise SourceError(f"preset {preset.name} has no parameter count: give --weights SIZE")
        size = 2 if spec_dtype is None else spec_dtype.bytes_per_element
        name = "fp16" if spec_dtype is None else spec_dtype.name
        return preset.parameters * size, f"{preset.parameters:,} parameters x {size} B ({name}), preset"
    return _hub_weights_bytes(model, revision)


def _safetensors_file_bytes(path: Path) -> int:
    import json
    import struct

    try:
        with path.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > 100_000_000:
                raise SourceError(f"{path} has an implausible header length")
            header = json.loads(handle.read(length))
    except (OSError, struct.error, ValueError) as exc:
        raise SourceError(f"cannot read the safetensors header of {path}: {exc}") from None
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__" and isinstance(t, dict)]
    return max(ends, default=0)


def _hub_weights_bytes(repo_id: str, revision: str | None) -> tuple[int, str]:
    from huggingface_hub import get_safetensors_metadata
    from huggingface_hub.utils import (  # type: ignore[attr-defined]  # exported lazily, unseen by mypy
        are_progress_bars_disabled,
        disable_progress_bars,
        enable_progress_bars,
    )

    # Reading shard headers draws a progress bar on stderr; kvcalc's stderr is for errors only.
    was_disabled = are_progress_bars_disabled()
    disable_progress_bars()
    try:
        meta = get_safetensors_metadata(repo_id, revision=revision)
    except Exception as exc:
        raise _weights_error(exc, repo_id, revision) from None
    finally:
        if not was_disabled:
            enable_progress_bars()
    total = 0
    for dtype, count in meta.parameter_count.items():
        if dtype not in _SAFETENSORS_BYTES:
            raise SourceError(f"{repo_id} stores weights as {dtype}, which kvcalc cannot size: give --weights SIZE")
        total += count * _SAFETENSORS_BYTES[dtype]
    return total, "Hub safetensors metadata"


def _weights_error(exc: BaseException, repo_id: str, revision: str | None) -> SourceError:
    """Like _hub_error, but about the safetensors weights, and always naming the way out."""
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        NotASafetensorsRepoError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        SafetensorsParsingError,
    )

    way_out = "give --weights SIZE"
    if isinstance(exc, GatedRepoError | RepositoryNotFoundError):
        return SourceError(f"{_hub_error(exc, repo_id, revision)}; or {way_out}")
    if isinstance(exc, NotASafetensorsRepoError):
        return SourceError(f"Hub repo {repo_id} has no safetensors weights to size: {way_out}")
    if isinstance(exc, SafetensorsParsingError):
        return SourceError(f"the safetensors headers of Hub repo {repo_id} cannot be parsed: {way_out}")
    if isinstance(exc, OfflineModeIsEnabled) or isinstance(getattr(exc, "__cause__", None), OfflineModeIsEnabled):
        return SourceError(f"the weights of Hub repo {repo_id} cannot be sized offline (HF_HUB_OFFLINE=1): {way_out}")
    if isinstance(exc, EntryNotFoundError):
        return SourceError(f"Hub repo {repo_id} lacks a safetensors file its index names: {way_out}")
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else None
        return SourceError(f"the Hub answered HTTP {status} for the weights of {repo_id}: {way_out}")
    detail = " ".join(str(exc).split())
    return SourceError(
        f"could not size the weights of Hub repo {repo_id} ({exc.__class__.__name__}: {detail}): {way_out}"
    )
