"""MODEL text -> a Source: a preset name, a local config.json (or folder), a GGUF file, a Hub repo
id or URL, or a GGUF in a Hub repo; the Source knows its format.

Configs are parsed as plain JSON and presets with ``yaml.safe_load``: no code from a model repo
is ever run. huggingface_hub is imported only when a repo id has to be fetched.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from kvcalc.errors import KvcalcError, SourceError
from kvcalc.inputs.files import _link_problem, _link_target, read_json_file
from kvcalc.inputs.hub import _REPO_ID_RE, _merge_revision, fetch_hub_config, parse_hub_url
from kvcalc.inputs.presets import Preset, find_preset, get_preset

if TYPE_CHECKING:
    from kvcalc.inputs.gguf.header import GgufHeader


@dataclass(frozen=True)
class Source:
    """A resolved MODEL: the raw config, where it came from, and anything the user should know about
    how it was resolved (``notes``, shown with the model's own notes)."""

    config: Any
    label: str
    # Where it came from: a bundled preset, a local file or folder, or the Hub.
    kind: Literal["preset", "file", "hub"]
    preset: Preset | None = None
    notes: tuple[str, ...] = ()
    # The Hub revision the config was read at (a URL's /tree/REV or --revision), so the weights
    # are read at the same one.
    revision: str | None = None
    # What it is: a Hugging Face config (a preset is one) or a GGUF file's header, local or on the
    # Hub (``config`` is then the header mapped to a config, and ``label`` the file).
    format: Literal["hf", "gguf"] = "hf"

    @property
    def is_gguf(self) -> bool:
        return self.format == "gguf"


def resolve(model: str, *, revision: str | None = None, on_fetch: Callable[[str], None] | None = None) -> Source:
    """Find what MODEL names: an existing path first, then a Hub URL, a preset, a Hub repo id.

    ``on_fetch`` is called with a short message right before anything is fetched from the network
    (the CLI prints it on stderr, so a slow Hub is not a silent wait).
    """
    path = _local_path(model)
    if path is not None:
        source = _from_path(path)
        if _REPO_ID_RE.match(model) and not model.endswith((".json", ".gguf")):
            # "org/name" is also a Hub repo id: say which one was read, and how to get the other.
            kind = "folder" if path.is_dir() else "file"
            note = (
                f"MODEL {model} is the local {kind} ./{model}, read instead of the Hub repo {model} "
                f"(write ./{model} to mean the {kind}, or https://huggingface.co/{model} for the Hub repo)"
            )
            source = replace(source, notes=(*source.notes, note))
        elif not _looks_like_path(model) and _find_preset(model) is not None:
            # A bare name that is both a file or folder here and a bundled preset: the path wins,
            # as it always has, and a note says so and how to get the preset.
            kind = "folder" if path.is_dir() else "file"
            note = (
                f"MODEL {model} is the local {kind} ./{model}, read instead of the bundled preset {model} "
                f"(run from another folder, or rename the {kind}, to use the preset)"
            )
            source = replace(source, notes=(*source.notes, note))
        return source
    hub_gguf = _hub_gguf(model)
    if hub_gguf is not None:  # org/name:file.gguf, or a Hub URL of a .gguf file (kvcalc.inputs.gguf.hub)
        from kvcalc.inputs.gguf.hub import resolve_hub_gguf

        at = _merge_revision(model, hub_gguf.revision, revision)
        config, notes = resolve_hub_gguf(hub_gguf, revision=at, on_fetch=on_fetch)
        return Source(config, model, "hub", notes=tuple(notes), revision=at, format="gguf")
    hub = parse_hub_url(model)
    if hub is not None:
        repo_id, url_revision = hub
        revision = _merge_revision(model, url_revision, revision)
        return Source(
            fetch_hub_config(repo_id, revision=revision, on_fetch=on_fetch), repo_id, "hub", revision=revision
        )
    preset = _find_preset(model)
    if preset is not None:
        return Source(preset.config, preset.name, "preset", preset)
    if _looks_like_path(model):
        raise SourceError(f"no such file or directory: {model}")
    if _REPO_ID_RE.match(model):
        return Source(fetch_hub_config(model, revision=revision, on_fetch=on_fetch), model, "hub")
    try:
        get_preset(model)  # raises with the closest preset names
    except OSError:  # see _find_preset
        raise SourceError(f"unknown preset {model!r}; 'kvcalc presets' lists them") from None
    raise AssertionError("unreachable")


def _hub_gguf(model: str) -> Any:
    """kvcalc.inputs.gguf.hub.HubGguf for a GGUF file in a Hub repo, else None (nothing imported unless
    MODEL mentions .gguf)."""
    if ".gguf" not in model.lower():
        return None
    from kvcalc.inputs.gguf.hub import parse_hub_gguf

    return parse_hub_gguf(model)


def _find_preset(model: str) -> Preset | None:
    """find_preset for any MODEL text: in a checkout a preset is looked up as a file, and a name
    longer than a file name may be raises OSError (ENAMETOOLONG); no preset has such a name."""
    try:
        return find_preset(model)
    except OSError:
        return None


def _looks_like_path(model: str) -> bool:
    return model.endswith(".json") or model.startswith(("/", "./", "../", "~")) or model.count("/") > 1 or "\\" in model


def _local_path(model: str) -> Path | None:
    """The existing file or folder MODEL names, or None when there is nothing at that path.

    A symlink loop or a dangling symlink is an error here: Path.exists() is False for both, which
    once sent them on to be looked up as Hub repo ids.
    """
    try:
        path = Path(model).expanduser()
    except RuntimeError:  # "~someone/..." for a user this system does not know
        return None
    try:
        os.stat(path)
    except ValueError:  # an embedded NUL byte: not a path any system can have
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            where = "is" if os.path.islink(path) else "goes through"
            raise SourceError(f"MODEL {model} {where} a symlink loop") from None
        if os.path.islink(path):  # the link is there, what it points to is not
            raise SourceError(f"MODEL {model} is a broken symlink to {_link_target(path)}") from None
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG):
            return None
        raise SourceError(f"cannot read MODEL {model}: {exc.strerror or exc}") from None
    return path


def _from_path(path: Path) -> Source:
    if path.is_file() and is_gguf_file(path):
        return _from_gguf(path)
    if path.is_dir():
        config_path = path / "config.json"
        if not os.path.lexists(config_path):
            raise SourceError(_no_config_json(path))
        problem = _link_problem(config_path)
        if problem is not None:
            # e.g. a Hugging Face cache snapshot whose blob was deleted
            raise SourceError(f"{config_path} {problem}")
        path = config_path
    elif path.suffix.lower() in (".yaml", ".yml"):
        raise SourceError(_yaml_refusal(path))
    return Source(read_json_file(path, what="MODEL"), str(path), "file")


def _no_config_json(folder: Path) -> str:
    """Why a folder without config.json cannot be MODEL, naming the GGUF files it holds instead."""
    from kvcalc.inputs.gguf import shard_position

    try:
        names = sorted(e.name for e in os.scandir(folder) if e.name.lower().endswith(".gguf") and e.is_file())
    except OSError:
        names = []
    if not names:
        return f"directory {folder} has no config.json"
    # A split GGUF is given by its first shard; later shards are no model of their own.
    models = [n for n in names if (shard_position(Path(n)) or (1, 1))[0] == 1] or names
    if len(models) == 1:
        position = shard_position(Path(models[0]))
        what = f"a GGUF split into {position[1]} shards" if position else "a GGUF file"
        give = "its first shard" if position else "the file itself"
        return f"directory {folder} holds no config.json but {what}: give {give}, {folder / models[0]}"
    shown = ", ".join(models[:3]) + (f" and {len(models) - 3} more" if len(models) > 3 else "")
    return (
        f"directory {folder} holds no config.json but {len(models)} GGUF files ({shown}): give one of them "
        "as MODEL (for a split GGUF, its first shard, NAME-00001-of-N.gguf)"
    )


def _yaml_refusal(path: Path) -> str:
    """Why a .yaml / .yml file cannot be MODEL: a bundled preset's own file is given by its name."""
    from kvcalc.inputs.presets import presets_dir

    try:
        real = path.resolve()  # a link to a preset file is that file
        bundled = real.parent == presets_dir().resolve() and real.suffix == ".yaml"
        preset = _find_preset(real.stem) if bundled else None
    except (KvcalcError, OSError, RuntimeError):
        preset = None
    if preset is not None:
        return f"{path} is a kvcalc preset file (YAML), not a config.json: give its name, {preset.name}"
    return (
        f"{path} is a YAML file: kvcalc reads a model's config.json (JSON), not YAML; "
        "a bundled preset is given by its name ('kvcalc presets' lists them)"
    )


def is_gguf_file(path: Path) -> bool:
    """Whether the existing file ``path`` is a GGUF (by its .gguf suffix or its magic)."""
    from kvcalc.inputs.gguf import is_gguf

    return is_gguf(path)


def _from_gguf(path: Path) -> Source:
    """A GGUF file: its header's metadata as a config (kvcalc.inputs.gguf), never its tensor data."""
    from kvcalc.inputs.gguf import gguf_config, read_header, shard_position

    position = shard_position(path)
    if position is not None and position[0] != 1:
        first = path.name.replace(f"-{position[0]:05d}-of-", f"-{1:05d}-of-")
        raise SourceError(f"{path} is shard {position[0]} of {position[1]} of a split GGUF: give the first, {first}")
    config, notes = gguf_config(read_header(path), str(path))
    return Source(config, str(path), "file", notes=tuple(notes), format="gguf")


def gguf_weights_bytes(path: Path) -> tuple[int, str]:
    """Bytes of a GGUF's tensors from the tensor infos of its header (of every shard of a split
    GGUF, which must lie beside its first shard)."""
    from kvcalc.inputs.gguf import loaded_tensor_bytes, read_header, split_shards

    shards = split_shards(path)
    # loaded_tensor_bytes refuses implausible or truncated tensor data (gguf.check_tensor_data).
    total = loaded_tensor_bytes([read_header(shard) for shard in shards], str(path))
    if total <= 0:
        raise SourceError(f"{path} holds no tensors: give --weights SIZE")
    where = f", {len(shards)} shards" if len(shards) > 1 else ""
    return total, f"GGUF tensor infos{where}"


def gguf_headers(source: Source, on_fetch: Callable[[str], None] | None = None) -> list[GgufHeader] | None:
    """The headers of every shard of a GGUF source (local, or a Hub file read in byte ranges and
    cached as resolving MODEL read it), the first one first; None for any other source."""
    if not source.is_gguf:
        return None
    if source.kind == "file":
        from kvcalc.inputs.gguf import read_header, split_shards

        return [read_header(shard) for shard in split_shards(Path(source.label))]
    from kvcalc.inputs.gguf.hub import parse_hub_gguf, shard_headers

    hub_gguf = parse_hub_gguf(source.label)
    assert hub_gguf is not None, "a Hub source of GGUF format names its file"
    return [f.header for f in shard_headers(hub_gguf, revision=source.revision, on_fetch=on_fetch)]
