"""MODEL text -> raw config dict: a preset name, a local config.json (or folder), a Hub repo id or URL.

Configs are parsed as plain JSON and presets with ``yaml.safe_load``: no code from a model repo
is ever run. huggingface_hub is imported only when a repo id has to be fetched. Every file kvcalc
reads is checked to be a regular file of bounded size first, so a FIFO, ``/dev/zero`` or a huge
file given by mistake fails at once instead of blocking or filling memory.
"""

from __future__ import annotations

import errno
import io
import os
import re
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from .errors import KvcalcError, SourceError
from .presets import Preset, find_preset, get_preset

if sys.platform == "win32":
    from pathlib import WindowsPath as _SystemPath
else:
    from pathlib import PosixPath as _SystemPath

_REPO_ID_RE = re.compile(r"^[A-Za-z0-9][\w.\-]{0,95}/[A-Za-z0-9][\w.\-]{0,95}$")

# The most kvcalc reads of each kind of file. Real configs and safetensors indexes are kilobytes
# to a few MiB; probe results and request mixes can be longer, but nothing honest comes near these.
CONFIG_LIMIT = 16 * 2**20  # config.json, model.safetensors.index.json
RESULT_LIMIT = 64 * 2**20  # probe result files (probe --from-result)
LENGTHS_LIMIT = 64 * 2**20  # request-mix files (--lengths): a million requests take ~15-40 MB
# The safetensors format's own cap on its JSON header (MAX_HEADER_SIZE in the safetensors library):
# a larger length prefix means the file is not safetensors, whatever its name.
SAFETENSORS_HEADER_LIMIT = 100_000_000
# 1 PiB: far beyond any checkpoint (2T parameters in fp32 are 8 TB); a larger metadata.total_size
# is a corrupt index, and would otherwise swallow any GPU budget silently.
MAX_WEIGHTS_BYTES = 2**50
# Seconds huggingface_hub waits for the Hub's answer to its metadata request (its own default is
# 10 s, followed by a second round of 5 retries over 23 s when no copy is cached). HF_HUB_ETAG_TIMEOUT,
# when set, wins.
HUB_ETAG_TIMEOUT = 5.0

# Opening a FIFO for reading blocks until a writer appears; O_NONBLOCK makes open() return at once
# (it changes nothing for regular files), so the type check after open() can refuse it. O_NOCTTY:
# a terminal opened by mistake must not become kvcalc's controlling terminal.
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)
_O_BINARY = getattr(os, "O_BINARY", 0)  # Windows: no newline translation


@dataclass(frozen=True)
class Source:
    """A resolved MODEL: the raw config, where it came from, and anything the user should know about
    how it was resolved (``notes``, shown with the model's own notes)."""

    config: Any
    label: str
    kind: Literal["preset", "file", "hub"]
    preset: Preset | None = None
    notes: tuple[str, ...] = ()
    # The Hub revision the config was read at (a URL's /tree/REV or --revision), so the weights
    # are read at the same one.
    revision: str | None = None


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
    if hub_gguf is not None:  # org/name:file.gguf, or a Hub URL of a .gguf file (kvcalc.gguf_hub)
        from .gguf_hub import resolve_hub_gguf

        at = _merge_revision(model, hub_gguf.revision, revision)
        config, notes = resolve_hub_gguf(hub_gguf, revision=at, on_fetch=on_fetch)
        return Source(config, model, "hub", notes=tuple(notes), revision=at)
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
    """kvcalc.gguf_hub.HubGguf for a GGUF file in a Hub repo, else None (nothing imported unless
    MODEL mentions .gguf)."""
    if ".gguf" not in model.lower():
        return None
    from .gguf_hub import parse_hub_gguf

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


def _link_target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:  # gone or replaced since it was seen
        return "a missing path"


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


def _link_problem(path: Path) -> str | None:
    """'is a symlink loop' or 'is a broken symlink to X' for a symlink that leads to no file; None
    for anything else (a plain file, a working link, a path that is not there at all)."""
    if not os.path.islink(path):
        return None
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symlink loop"
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return f"is a broken symlink to {_link_target(path)}"
    except ValueError:
        return None
    return None


def _no_config_json(folder: Path) -> str:
    """Why a folder without config.json cannot be MODEL, naming the GGUF files it holds instead."""
    from .gguf import shard_position

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
    from .presets import presets_dir

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
    from .gguf import is_gguf

    return is_gguf(path)


def _from_gguf(path: Path) -> Source:
    """A GGUF file: its header's metadata as a config (kvcalc.gguf), never its tensor data."""
    from .gguf import gguf_config, read_header, shard_position

    position = shard_position(path)
    if position is not None and position[0] != 1:
        first = path.name.replace(f"-{position[0]:05d}-of-", f"-{1:05d}-of-")
        raise SourceError(f"{path} is shard {position[0]} of {position[1]} of a split GGUF: give the first, {first}")
    config, notes = gguf_config(read_header(path), str(path))
    return Source(config, str(path), "file", notes=tuple(notes))


def gguf_weights_bytes(path: Path) -> tuple[int, str]:
    """Bytes of a GGUF's tensors from the tensor infos of its header (of every shard of a split
    GGUF, which must lie beside its first shard)."""
    from .gguf import loaded_tensor_bytes, read_header, split_shards

    shards = split_shards(path)
    # loaded_tensor_bytes refuses implausible or truncated tensor data (gguf.check_tensor_data).
    total = loaded_tensor_bytes([read_header(shard) for shard in shards], str(path))
    if total <= 0:
        raise SourceError(f"{path} holds no tensors: give --weights SIZE")
    where = f", {len(shards)} shards" if len(shards) > 1 else ""
    return total, f"GGUF tensor infos{where}"


# --- reading files: regular files only, never more than a limit ---------------------------------------


def read_regular_file(path: Path, *, what: str, limit: int) -> bytes:
    """The bytes of ``path``, which must be a regular file (symlinks followed) of at most ``limit`` bytes.

    ``what`` names the file in messages ("MODEL", "--lengths", ...; "" for the bare path). A FIFO,
    device, socket or directory is refused before it is opened, a file over ``limit`` before it is
    read, and at most ``limit + 1`` bytes are ever read, so a file that grows meanwhile (or a /proc
    file whose size reads as 0) cannot exhaust memory either. Every failure is one SourceError.
    """
    label = f"{what} {path}" if what else str(path)
    try:
        info = os.stat(path)
    except OSError as exc:
        problem = _link_problem(path)
        if problem is not None:
            raise SourceError(f"{label} {problem}") from None
        raise SourceError(f"cannot read {label}: {exc.strerror or exc}") from None
    except ValueError:  # an embedded NUL byte
        raise SourceError(f"cannot read {label}: not a valid path") from None
    _require_regular(info, label)
    if info.st_size > limit:
        raise SourceError(f"{label} is {info.st_size:,} bytes; kvcalc reads at most {_size_text(limit)} for it")
    limited = _LimitedPath(path)
    limited._cap, limited._label = limit + 1, label
    try:
        data = limited.read_bytes()
    except OSError as exc:
        raise SourceError(f"cannot read {label}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise SourceError(f"{label} grew past {_size_text(limit)} while kvcalc read it")
    return data


def _require_regular(info: os.stat_result, label: str) -> None:
    if stat.S_ISREG(info.st_mode):
        return
    mode = info.st_mode
    kind = (
        "a directory" if stat.S_ISDIR(mode)
        else "a FIFO" if stat.S_ISFIFO(mode)
        else "a character device" if stat.S_ISCHR(mode)
        else "a block device" if stat.S_ISBLK(mode)
        else "a socket" if stat.S_ISSOCK(mode)
        else "of an unknown kind"
    )  # fmt: skip
    raise SourceError(f"{label} is not a regular file ({kind})")


def _size_text(size: int) -> str:
    return f"{size // 2**20} MiB" if size % 2**20 == 0 else f"{size:,} bytes"


def _open_regular(path: Path, label: str) -> int:
    """A read-only descriptor of ``path``, checked to be a regular file before and after opening.

    The check before keeps devices from being opened at all; the one after, on the descriptor,
    catches a path swapped meanwhile, and O_NONBLOCK keeps open() from waiting for a writer should
    that path now be a FIFO (it changes nothing for regular files).
    """
    _require_regular(os.stat(path), label)
    fd = os.open(path, os.O_RDONLY | _O_NONBLOCK | _O_NOCTTY | _O_BINARY)
    try:
        _require_regular(os.fstat(fd), label)
    except BaseException:
        os.close(fd)
        raise
    return fd


class _CappedReader(io.RawIOBase):
    """A file descriptor that reads as if the file ended after ``cap`` bytes."""

    def __init__(self, fd: int, cap: int) -> None:
        super().__init__()
        self._fd = fd
        self._left = cap

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._left <= 0:
            return 0
        view = memoryview(buffer).cast("B")
        data = os.read(self._fd, min(len(view), self._left))
        view[: len(data)] = data
        self._left -= len(data)
        return len(data)

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


class _LimitedPath(_SystemPath):
    """A path whose ``read_bytes`` stops after ``_cap`` bytes and refuses anything but a regular file.

    The read still goes through Path.read_bytes (which opens the file with ``self.open``, overridden
    here): that is the one entry point tests replace to simulate a failing read.
    """

    _cap: int
    _label: str

    def open(self, *args: Any, **kwargs: Any) -> Any:
        return _CappedReader(_open_regular(self, self._label), self._cap)


def read_json_file(path: Path, *, limit: int = CONFIG_LIMIT, what: str = "") -> Any:
    """Parse a JSON file, turning every way it can be unreadable into a one-line SourceError.

    The file must be a regular file of at most ``limit`` bytes (see read_regular_file), and
    ``what`` names it when it is not.
    """
    import json

    data = read_regular_file(path, what=what, limit=limit)
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
    except ValueError as exc:  # an integer literal longer than Python will convert (4,300 digits)
        why = "a number in it has thousands of digits" if "digits" in str(exc) else str(exc)
        raise SourceError(f"{path} is not a usable JSON config: {why}") from None


# --- Hub URLs -----------------------------------------------------------------------------------------

_HUB_HOSTS = frozenset({"huggingface.co", "www.huggingface.co", "hf.co", "www.hf.co"})
# First path segments of Hub URLs that are not model repos: other kinds of repo, and site pages.
_OTHER_REPO_KINDS = {"datasets": "a dataset", "spaces": "a Space", "buckets": "a storage bucket"}
_SITE_PAGES = frozenset(
    {"api", "blog", "chat", "collections", "docs", "enterprise", "join", "learn", "login", "models",
     "new", "organizations", "papers", "posts", "pricing", "search", "settings", "tasks"}
)  # fmt: skip
_URL_FORMS = "https://huggingface.co/ORG/NAME, optionally /tree/REVISION or /blob/REVISION/config.json"


def _hub_hosts() -> frozenset[str]:
    """huggingface.co and its aliases, plus the host of HF_ENDPOINT (a private Hub, a mirror)."""
    from urllib.parse import urlsplit

    endpoint = os.environ.get("HF_ENDPOINT", "")
    try:
        host = urlsplit(endpoint).hostname if endpoint else None
    except ValueError:
        host = None
    return _HUB_HOSTS | ({host.lower()} if host else set())


def parse_hub_url(model: str) -> tuple[str, str | None] | None:
    """(repo id, revision or None) for a Hugging Face model repo URL; None when MODEL is no URL.

    Accepts ``https://huggingface.co/ORG/NAME`` and its ``/tree/REV``, ``/blob/REV/config.json``
    and ``/resolve/REV/config.json`` forms, on huggingface.co or hf.co (or HF_ENDPOINT's host),
    with or without the scheme and a trailing slash. Any other URL is a SourceError.
    """
    from urllib.parse import unquote, urlsplit

    lowered = model.lower()
    bare_hub = any(lowered == host or lowered.startswith(f"{host}/") for host in _HUB_HOSTS)
    if "://" not in model and not bare_hub:
        return None
    try:
        parts = urlsplit(model if "://" in model else f"https://{model}")
        host = (parts.hostname or "").lower()
        parts.port  # noqa: B018  (raises ValueError for a port out of range)
    except ValueError:
        raise SourceError(f"MODEL {model} is not a valid URL") from None
    if parts.scheme.lower() not in ("http", "https") or host not in _hub_hosts():
        raise SourceError(f"MODEL {model} is not a Hugging Face URL: kvcalc reads model repos given as {_URL_FORMS}")
    # Split before unquoting: a revision such as refs/pr/1 arrives as one segment, refs%2Fpr%2F1.
    segments = [unquote(s) for s in parts.path.split("/") if s]
    if segments and segments[0] in _OTHER_REPO_KINDS:
        raise SourceError(
            f"MODEL {model} is {_OTHER_REPO_KINDS[segments[0]]}, not a model: "
            f"kvcalc reads only model repos ({_URL_FORMS})"
        )
    if len(segments) < 2 or segments[0] in _SITE_PAGES:
        raise SourceError(f"MODEL {model} is not a model repo URL: give {_URL_FORMS}")
    repo_id, rest = f"{segments[0]}/{segments[1]}", segments[2:]
    if not rest:
        return repo_id, None
    view, rest = rest[0], rest[1:]
    if view not in ("tree", "blob", "resolve") or not rest:
        raise SourceError(f"MODEL {model} is a page of Hub repo {repo_id}, not the repo: give {_URL_FORMS}")
    # A pull request's revision is refs/pr/N; the Hub writes it unescaped in some links.
    taken = 3 if rest[0] == "refs" and len(rest) >= 3 else 1
    revision, inner = "/".join(rest[:taken]), rest[taken:]
    if view == "tree" and inner:
        raise SourceError(
            f"MODEL {model} is the folder {'/'.join(inner)} of Hub repo {repo_id}: "
            "kvcalc reads the repo's top-level config.json"
        )
    if view != "tree" and inner != ["config.json"]:
        raise SourceError(
            f"MODEL {model} is the file {'/'.join(inner) or '(none)'} of Hub repo {repo_id}, "
            "not its top-level config.json"
        )
    return repo_id, revision


def _merge_revision(model: str, from_url: str | None, given: str | None) -> str | None:
    if from_url is not None and given is not None and from_url != given:
        raise SourceError(f"MODEL {model} names revision {from_url!r} but --revision is {given!r}: give one of them")
    return from_url if from_url is not None else given


# --- the Hub ----------------------------------------------------------------------------------------


def fetch_hub_config(
    repo_id: str, *, revision: str | None = None, on_fetch: Callable[[str], None] | None = None
) -> Any:
    """Download (or read from the local cache) a repo's config.json with huggingface_hub.

    huggingface_hub honours ``HF_TOKEN``, ``HF_HOME`` / ``HF_HUB_CACHE``, ``HF_HUB_OFFLINE`` and
    ``HF_HUB_ETAG_TIMEOUT``; each way the fetch fails becomes one line that says what to do. An
    unreachable Hub fails after one attempt of at most HUB_ETAG_TIMEOUT seconds.
    """
    import logging

    from huggingface_hub import hf_hub_download

    at = f" at revision {revision}" if revision else ""
    if on_fetch is not None and _will_fetch(repo_id, revision, "config.json"):
        on_fetch(f"fetching config.json of {repo_id}{at} from the Hub...")
    timeout = _etag_timeout()
    # huggingface_hub logs each retry as a warning; kvcalc reports the outcome in one line.
    hub_logger = logging.getLogger("huggingface_hub")
    previous_level = hub_logger.level
    hub_logger.setLevel(logging.ERROR)
    try:
        with _single_attempt():
            local = hf_hub_download(repo_id, "config.json", revision=revision, etag_timeout=timeout)
    except Exception as exc:
        raise _hub_error(exc, repo_id, revision, timeout=timeout, hint=_preset_hint(repo_id)) from None
    finally:
        hub_logger.setLevel(previous_level)
    try:
        return read_json_file(Path(str(local)))
    except SourceError as exc:  # name the repo, not the cache path
        raise SourceError(f"config.json of Hub repo {repo_id}: {exc}") from None


def _etag_timeout() -> float:
    from huggingface_hub import constants

    if os.environ.get("HF_HUB_ETAG_TIMEOUT"):  # the user's choice, as huggingface_hub parsed it
        return float(constants.HF_HUB_ETAG_TIMEOUT)
    return HUB_ETAG_TIMEOUT


def _is_offline() -> bool:
    from huggingface_hub import constants

    check = getattr(constants, "is_offline_mode", None)
    return bool(check()) if callable(check) else bool(getattr(constants, "HF_HUB_OFFLINE", False))


def _will_fetch(repo_id: str, revision: str | None, filename: str) -> bool:
    """Whether huggingface_hub is about to use the network: online, unless the revision is a commit
    hash whose file is already cached (huggingface_hub then returns the cached copy unasked)."""
    if _is_offline():
        return False
    if revision is not None and re.fullmatch(r"[0-9a-f]{40}", revision):
        from huggingface_hub import try_to_load_from_cache

        try:
            return not isinstance(try_to_load_from_cache(repo_id, filename, revision=revision), str)
        except Exception:  # an invalid repo id: hf_hub_download will say so
            return True
    return True


_RETRY_SWITCHES = ("_DEFAULT_RETRY_ON_EXCEPTIONS", "_DEFAULT_RETRY_ON_STATUS_CODES")


@contextmanager
def _single_attempt() -> Iterator[None]:
    """Make hf_hub_download give up after its first metadata request when no copy is cached.

    When that request fails with a network error, a timeout or a 5xx and the file is not cached,
    huggingface_hub 1.x-2.x tries again with a 60 s timeout and 5 retries backing off 1+2+4+8+8 s:
    23 silent seconds with no network, minutes against a Hub that never answers. Which errors
    earn that second round is decided by these two module attributes (and nothing else reads them
    in file_download), so kvcalc empties them for the duration of its call. A version without
    them keeps its own behaviour. The lock keeps concurrent kvcalc calls from restoring them early.
    """
    from huggingface_hub import file_download

    if not all(hasattr(file_download, name) for name in _RETRY_SWITCHES):
        yield
        return
    with _RETRY_LOCK:
        saved = {name: getattr(file_download, name) for name in _RETRY_SWITCHES}
        try:
            for name in _RETRY_SWITCHES:
                setattr(file_download, name, ())
            yield
        finally:
            for name, value in saved.items():
                setattr(file_download, name, value)


_RETRY_LOCK = threading.Lock()


def _preset_hint(repo_id: str) -> str:
    """'; the bundled preset X describes REPO: kvcalc estimate X' when a preset has that hf_repo."""
    from .presets import load_presets

    try:
        presets = load_presets()
    except KvcalcError:  # a broken installation must not hide the Hub error
        return ""
    key = repo_id.lower()  # the Hub treats repo ids case-insensitively
    for preset in presets.values():
        if preset.hf_repo.lower() == key:
            return f"; the bundled preset {preset.name} describes {preset.hf_repo}: kvcalc estimate {preset.name}"
    return ""


def _is_timeout(exc: BaseException | None) -> bool:
    # httpx's TimeoutException (huggingface_hub 1.x-2.x) or requests' Timeout (0.x), by name:
    # neither library is imported here just to classify an error.
    return exc is not None and any(cls.__name__ in ("TimeoutException", "Timeout") for cls in type(exc).__mro__)


def repo_refusal(exc: BaseException, repo_id: str, revision: str | None) -> SourceError | None:
    """The refusals every Hub read shares, in one line each: a gated or missing repo, a missing
    revision, a malformed id, refused (401) or denied (403) credentials; None for anything else."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        HFValidationError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    at = f" at revision {revision!r}" if revision else ""
    if isinstance(exc, GatedRepoError):
        return SourceError(f"Hub repo {repo_id} is gated: accept its terms on the Hub, then set HF_TOKEN")
    if isinstance(exc, RepositoryNotFoundError):
        return SourceError(f"Hub repo {repo_id} not found (if it is private, set HF_TOKEN to a token that can read it)")
    if isinstance(exc, RevisionNotFoundError):
        return SourceError(f"Hub repo {repo_id} has no revision {revision or 'main'!r}")
    if isinstance(exc, HFValidationError):
        return SourceError(f"{repo_id!r} is not a valid Hugging Face repo id")
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else None
        if status == 401:
            return SourceError(f"the Hub refused the credentials for {repo_id}: check HF_TOKEN")
        if status == 403:
            return SourceError(f"the Hub denied access to {repo_id}{at} (HTTP 403): check HF_TOKEN's permissions")
    return None


def _hub_error(
    exc: BaseException, repo_id: str, revision: str | None, *, timeout: float | None = None, hint: str = ""
) -> SourceError:
    """One line that says what went wrong with the Hub and what to do about it.

    ``hint`` (a bundled preset for the repo) is added where the Hub could not be asked at all.
    """
    from huggingface_hub.errors import EntryNotFoundError, FileMetadataError, HfHubHTTPError, LocalEntryNotFoundError

    at = f" at revision {revision!r}" if revision else ""
    if isinstance(exc, LocalEntryNotFoundError):
        # Not cached, and the Hub did not serve it. When a server did answer, its answer is the
        # cause and says more than "offline"; a connection failure (or offline mode) means unreachable.
        cause = exc.__cause__
        if isinstance(cause, HfHubHTTPError | EntryNotFoundError):
            return _hub_error(cause, repo_id, revision, timeout=timeout, hint=hint)
        if isinstance(cause, FileMetadataError):  # a server answered, but not as a Hub does
            return SourceError(
                f"the Hub did not answer like a Hugging Face Hub for {repo_id}{at} "
                f"({cause.__class__.__name__}); check HF_ENDPOINT"
            )
        if _is_timeout(cause):
            waited = f" within {timeout:g} s (HF_HUB_ETAG_TIMEOUT)" if timeout is not None else ""
            return SourceError(
                f"Hub repo {repo_id}{at} is not in the local Hugging Face cache and the Hub did not answer"
                f"{waited}; try again later, or pass a local config.json{hint}"
            )
        return SourceError(
            f"Hub repo {repo_id}{at} is not in the local Hugging Face cache and the Hub cannot be "
            f"reached (offline or HF_HUB_OFFLINE=1); fetch it once online or pass a local config.json{hint}"
        )
    refused = repo_refusal(exc, repo_id, revision)
    if refused is not None:
        return refused
    if isinstance(exc, EntryNotFoundError):
        return SourceError(f"Hub repo {repo_id}{at} has no config.json")
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else None
        down = hint if status is not None and status >= 500 else ""  # the Hub is down: the preset still works
        return SourceError(f"could not fetch config.json of {repo_id}: the Hub answered HTTP {status}{down}")
    detail = " ".join(str(exc).split())  # hub messages span lines; kvcalc prints one
    return SourceError(f"could not fetch config.json of {repo_id}: {exc.__class__.__name__}: {detail}")


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
    tensor infos, read in byte ranges (kvcalc.gguf_hub). A Hub repo (id or URL):
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
        raise SourceError(f"no model.safetensors(.index.json) beside {path}: give --weights SIZE")
    hub_gguf = _hub_gguf(model)
    if hub_gguf is not None:
        from .gguf_hub import hub_gguf_weights

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
