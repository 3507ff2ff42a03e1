"""A running server and a start-up log as inputs: bounded, read-only GET requests on one address
(each path asked once), and a log read whole from a file or standard input, within a limit.

``kvcalc check`` never posts, never asks for a completion, and never follows a redirect to another
host: what it sends is a handful of GETs an operator's dashboard would send.
"""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlsplit

from kvcalc.errors import SourceError, UsageError
from kvcalc.inputs.files import read_regular_file

# A server's answer is a page of metrics or JSON; more than this is not an answer to read.
ANSWER_LIMIT = 8 * 2**20
LOG_LIMIT = 256 * 2**20
DEFAULT_TIMEOUT_S = 5.0


def server_address(target: str) -> str | None:
    """``http://HOST:PORT`` for a target that is a server's address (a URL, or ``HOST:PORT``),
    without a trailing slash or path; None for anything else (a log file)."""
    text = target.strip()
    if "://" not in text:
        host, colon, port = text.rpartition(":")
        if not colon or not port.isdigit() or not host or "/" in host:
            return None
        text = f"http://{text}"
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{target}: give the server as http://HOST:PORT", param="target")
    if parts.query or parts.fragment or parts.path.strip("/"):
        raise UsageError(f"{target}: give the server's address alone (http://HOST:PORT), without a path: "
                         "kvcalc asks its own paths (/metrics, /v1/models ...)", param="target")  # fmt: skip
    return f"{parts.scheme}://{parts.netloc}"


# A server's answer to one GET: its HTTP status (0 when none came: refused, timed out, not HTTP;
# the text then says why) and its body as text.
Reply = tuple[int, str]


class ServerGet:
    """GET requests on one server, each path asked at most once (the readers share the answers),
    each bounded by ``timeout`` seconds and ``ANSWER_LIMIT`` bytes. ``asked`` lists the paths in
    order, for the report."""

    def __init__(self, address: str, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.address = address
        self.timeout = timeout
        self.asked: list[str] = []
        self._answers: dict[str, Reply] = {}

    def __call__(self, path: str) -> Reply:
        if path not in self._answers:
            self.asked.append(path)
            self._answers[path] = self._get(path)
        return self._answers[path]

    def fresh(self, path: str) -> Reply:
        """The path asked again (a sample of live usage)."""
        self._answers.pop(path, None)
        return self(path)

    def _get(self, path: str) -> Reply:
        import urllib.error
        import urllib.request

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            """A redirect is answered as its own status: a check stays on the address it was given."""

            def redirect_request(self, *args: object, **kwargs: object) -> None:
                return None

        request = urllib.request.Request(self.address + path, method="GET",
                                         headers={"Accept": "application/json, text/plain"})  # fmt: skip
        opener = urllib.request.build_opener(NoRedirect)
        try:
            with opener.open(request, timeout=self.timeout) as reply:
                return reply.status, _text(reply.read(ANSWER_LIMIT + 1))
        except urllib.error.HTTPError as exc:
            return exc.code, _text(exc.read(ANSWER_LIMIT + 1)) if exc.fp is not None else ""
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            return 0, str(reason)


def _text(body: bytes) -> str:
    if len(body) > ANSWER_LIMIT:
        return ""  # not an answer a reader could use: too long to be one
    return body.decode("utf-8", errors="replace")


def read_log(target: str) -> tuple[str, str]:
    """A start-up log's text and its name: ``-`` reads standard input, anything else a regular file
    (bounded: ``LOG_LIMIT``)."""
    if target == "-":
        data = sys.stdin.buffer.read(LOG_LIMIT + 1)
        if len(data) > LOG_LIMIT:
            raise SourceError(f"standard input: a log over {LOG_LIMIT // 2**20} MiB; give its start-up part")
        return data.decode("utf-8", errors="replace"), "standard input"
    path = Path(target)
    if not path.exists():
        raise SourceError(f"{target}: no such file, and not a server address (http://HOST:PORT)")
    data = read_regular_file(path, what="log", limit=LOG_LIMIT)
    return data.decode("utf-8", errors="replace"), target
