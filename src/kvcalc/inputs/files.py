"""Reading files: regular files only, never more than a limit, so a FIFO, ``/dev/zero`` or a
huge file given by mistake fails at once instead of blocking or filling memory. A file read as a
stream (a request mix) has no size limit: its reader holds a chunk at a time."""

from __future__ import annotations

import errno
import io
import os
import stat
import sys
from pathlib import Path
from typing import Any

from kvcalc.errors import SourceError

if sys.platform == "win32":
    from pathlib import WindowsPath as _SystemPath
else:
    from pathlib import PosixPath as _SystemPath


# The most kvcalc reads of each kind of file. Real configs and safetensors indexes are kilobytes
# to a few MiB; probe results can be longer, but nothing honest comes near these. Request mixes
# (--lengths) are streamed (open_regular_file), so their size is not limited.
CONFIG_LIMIT = 16 * 2**20  # config.json, model.safetensors.index.json
RESULT_LIMIT = 64 * 2**20  # probe result files (probe --from-result)
# The safetensors format's own cap on its JSON header (MAX_HEADER_SIZE in the safetensors library):
# a larger length prefix means the file is not safetensors, whatever its name.
SAFETENSORS_HEADER_LIMIT = 100_000_000
# 1 PiB: far beyond any checkpoint (2T parameters in fp32 are 8 TB); a larger metadata.total_size
# is a corrupt index, and would otherwise swallow any GPU budget silently.
MAX_WEIGHTS_BYTES = 2**50

# Opening a FIFO for reading blocks until a writer appears; O_NONBLOCK makes open() return at once
# (it changes nothing for regular files), so the type check after open() can refuse it. O_NOCTTY:
# a terminal opened by mistake must not become kvcalc's controlling terminal.
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)
_O_BINARY = getattr(os, "O_BINARY", 0)  # Windows: no newline translation


# --- reading files: regular files only, never more than a limit ---------------------------------------


def read_regular_file(path: Path, *, what: str, limit: int) -> bytes:
    """The bytes of ``path``, which must be a regular file (symlinks followed) of at most ``limit`` bytes.

    ``what`` names the file in messages ("MODEL", "--lengths", ...; "" for the bare path). A FIFO,
    device, socket or directory is refused before it is opened, a file over ``limit`` before it is
    read, and at most ``limit + 1`` bytes are ever read, so a file that grows meanwhile (or a /proc
    file whose size reads as 0) cannot exhaust memory either. Every failure is one SourceError.
    """
    label = f"{what} {path}" if what else str(path)
    info = _stat_regular(path, label)
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


def open_regular_file(path: Path, *, what: str) -> RegularFile:
    """``path`` open for reading a chunk at a time: a regular file (symlinks followed), checked as
    read_regular_file checks it but of any size. Opening and every read fail as one SourceError."""
    label = f"{what} {path}" if what else str(path)
    _stat_regular(path, label)
    try:
        fd = _open_regular(path, label)
    except OSError as exc:
        raise SourceError(f"cannot read {label}: {exc.strerror or exc}") from None
    return RegularFile(fd, label)


class RegularFile:
    """An open regular file read in chunks (``with`` closes it); a failed read is a SourceError."""

    def __init__(self, fd: int, label: str) -> None:
        self._fd = fd
        self._label = label

    def read(self, size: int, /) -> bytes:
        try:
            return os.read(self._fd, size)
        except OSError as exc:
            raise SourceError(f"cannot read {self._label}: {exc.strerror or exc}") from None

    def seek(self, offset: int, /) -> int:
        try:
            return os.lseek(self._fd, offset, os.SEEK_SET)
        except OSError as exc:
            raise SourceError(f"cannot read {self._label}: {exc.strerror or exc}") from None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> RegularFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _stat_regular(path: Path, label: str) -> os.stat_result:
    """``path``'s status, which must be a regular file's (symlinks followed); else one SourceError."""
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
    return info


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


def _link_target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:  # gone or replaced since it was seen
        return "a missing path"


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
