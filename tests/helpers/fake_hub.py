"""A fake Hugging Face Hub on 127.0.0.1, for kvcalc's real huggingface_hub calls.

huggingface_hub talks HTTP to it: HEAD then GET on ``/<repo>/resolve/<revision>/<file>``, and it turns
the Hub's error replies (status plus ``X-Error-Code``) into its own errors. The server binds to
127.0.0.1 only, on a port the OS picks, and is shut down by the fixture's finalizer (or by a timer,
whichever comes first). Every error reply uses a status that huggingface_hub does not retry (401,
403, 404: its retry list is 408, 429 and 5xx), so no test waits for its back-off.

The fixtures (``hub``; ``ranged``, the same with byte ranges) are made available to every test by
tests/conftest.py. kvcalc must run in a fresh interpreter against them (tests.conftest
``run_subprocess``): huggingface_hub reads ``HF_ENDPOINT``, ``HF_HUB_OFFLINE`` and the cache paths
when it is imported.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.helpers.paths import FIXTURES

REPO = "org/name"  # the repo every helper here serves
COMMIT = "0123456789abcdef0123456789abcdef01234567"  # the commit each reply names (X-Repo-Commit)
CONFIG_PATH = f"/{REPO}/resolve/main/config.json"
GGUF_FILE = "model-F32.gguf"  # the file serve_gguf serves unless told another
SERVER_LIFETIME_S = 60.0  # a server whose finalizer never ran still goes away


@dataclass(frozen=True)
class Reply:
    """What the fake Hub answers for one path: a status, headers and a body (none for HEAD)."""

    status: int
    headers: dict[str, str]
    body: bytes = b""


@dataclass(frozen=True)
class Seen:
    """One request the fake Hub received."""

    method: str
    path: str
    headers: dict[str, str]  # lower-cased names


@dataclass
class FakeHub:
    """Answers each path with a fixed Reply (HEAD: the same without a body); records every request."""

    server: ThreadingHTTPServer
    replies: dict[str, Reply] = field(default_factory=dict)
    requests: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopped: bool = False

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def seen(self) -> list[tuple[str, str]]:
        with self.lock:
            return [(r.method, r.path) for r in self.requests]

    def stop(self) -> None:
        with self.lock:
            if self.stopped:
                return
            self.stopped = True
        self.server.shutdown()
        self.server.server_close()


class HubHandler(BaseHTTPRequestHandler):
    """Answers GET and HEAD from the FakeHub's replies (404 for a path it has none for)."""

    server_version = "FakeHub/1"
    timeout = 10  # a stuck client cannot hold a handler thread for long

    def _reply(self, *, with_body: bool) -> None:
        hub: FakeHub = self.server.hub  # type: ignore[attr-defined]
        path = self.path.split("?", 1)[0]
        with hub.lock:
            hub.requests.append(Seen(self.command, path, {k.lower(): v for k, v in self.headers.items()}))
        reply = hub.replies.get(path) or Reply(404, {"X-Error-Message": "no route in the fake Hub"})
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        if with_body:
            self.wfile.write(reply.body)

    def do_HEAD(self) -> None:
        self._reply(with_body=False)

    def do_GET(self) -> None:
        self._reply(with_body=True)

    def log_message(self, format: str, *args: object) -> None:  # keep pytest's output clean
        pass


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """A fake Hub on 127.0.0.1 and an online environment pointed at it, with an empty cache."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), HubHandler)
    server.daemon_threads = True
    assert server.server_address[0] == "127.0.0.1"
    fake = FakeHub(server)
    server.hub = fake  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    deadline = threading.Timer(SERVER_LIFETIME_S, fake.stop)
    deadline.daemon = True
    deadline.start()

    for name in list(os.environ):
        if name.startswith(("HF_", "HUGGINGFACE_", "HUGGING_FACE_")) or name == "TRANSFORMERS_OFFLINE":
            monkeypatch.delenv(name)
        elif name.lower() in {"http_proxy", "https_proxy", "all_proxy"}:
            monkeypatch.delenv(name)  # loopback must not go through a proxy
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("HF_ENDPOINT", fake.endpoint)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no stored token, nothing from ~/.cache
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    try:
        yield fake
    finally:
        deadline.cancel()
        fake.stop()
        thread.join(timeout=5)
        assert not thread.is_alive()


def serve_config(hub: FakeHub, path: str = CONFIG_PATH) -> str:
    """Serve the Llama-3.1-8B config.json the way the Hub serves a small (non-LFS) file; return its etag."""
    body = (FIXTURES / "Llama-3.1-8B.json").read_bytes()
    etag = hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()  # git's blob id, as the Hub uses
    headers = {
        "Content-Type": "text/plain; charset=utf-8",
        "ETag": f'"{etag}"',
        "X-Repo-Commit": COMMIT,
        "Accept-Ranges": "bytes",
    }
    hub.replies[path] = Reply(200, headers, body)
    return etag


def serve_error(hub: FakeHub, status: int, code: str, message: str, path: str = CONFIG_PATH) -> None:
    """Answer ``path`` as the Hub answers an error: ``status`` with its X-Error-Code and X-Error-Message."""
    headers = {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"}
    if code == "EntryNotFound":
        headers["X-Repo-Commit"] = COMMIT  # the repo and revision exist, only the file is missing
    hub.replies[path] = Reply(status, headers, b'{"error": "%s"}' % message.encode())


class RangeHandler(HubHandler):
    """The fake Hub's handler, but a GET with ``Range: bytes=A-B`` gets 206 and that slice."""

    def do_GET(self) -> None:
        fake: FakeHub = self.server.hub  # type: ignore[attr-defined]
        path = self.path.split("?", 1)[0]
        reply = fake.replies.get(path)
        match = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if reply is None or reply.status != 200 or match is None:
            super().do_GET()
            return
        with fake.lock:
            fake.requests.append(Seen(self.command, path, {k.lower(): v for k, v in self.headers.items()}))
        first, last = int(match[1]), min(int(match[2]), len(reply.body) - 1)
        part = reply.body[first : last + 1]
        self.send_response(206)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Range", f"bytes {first}-{last}/{len(reply.body)}")
        self.send_header("Content-Length", str(len(part)))
        self.end_headers()
        self.wfile.write(part)


@pytest.fixture
def ranged(hub: FakeHub) -> FakeHub:
    """The fake Hub of ``hub``, its handler also honouring ``Range`` as the Hub's CDN does (206 and the slice)."""
    hub.server.RequestHandlerClass = RangeHandler  # each new request gets the Range-aware handler
    return hub


def serve_gguf(fake: FakeHub, body: bytes, filename: str = GGUF_FILE, revision: str = "main") -> str:
    """Serve ``body`` as the Hub serves an LFS file (sha256 etag, byte ranges); return its path."""
    path = f"/{REPO}/resolve/{revision}/{filename}"
    headers = {
        "Content-Type": "application/octet-stream",
        "ETag": f'"{hashlib.sha256(body).hexdigest()}"',
        "X-Repo-Commit": COMMIT,
        "Accept-Ranges": "bytes",
    }
    fake.replies[path] = Reply(200, headers, body)
    return path
