"""A fake inference server on 127.0.0.1 for ``kvcalc check``: it answers GET requests with fixed
bodies written from an engine's cited source (SGLang's /server_info, Ollama's /api/ps ...) and
records every request, so a test can also hold kvcalc to read-only GETs.

Binds 127.0.0.1 only, on a port the OS picks; the context manager shuts it down, and a timer does
if a test never returns.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvcalc.engines.observing import Answer

SERVER_LIFETIME_S = 60.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a real server a test starts, or a
    closed port a test needs)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Route:
    """One path's answer: status, body (a str, or any JSON value) and content type."""

    body: Any
    status: int = 200
    content_type: str = ""

    def encoded(self) -> tuple[bytes, str]:
        if isinstance(self.body, str):
            return self.body.encode(), self.content_type or "text/plain; version=0.0.4"
        return json.dumps(self.body).encode(), self.content_type or "application/json"


@dataclass
class FakeServer:
    """The server's address and the requests it received (method, path)."""

    url: str
    routes: dict[str, Route]
    seen: list[tuple[str, str]] = field(default_factory=list)


@contextmanager
def fake_server(routes: Mapping[str, Route | Any]) -> Iterator[FakeServer]:
    """Serve ``routes`` (path -> Route, or a bare body answered 200); any other path is a 404 with a
    JSON error body, as most engines' servers answer."""
    table = {path: r if isinstance(r, Route) else Route(r) for path, r in routes.items()}
    state: FakeServer

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, with_body: bool) -> None:
            state.seen.append((self.command, self.path))
            route = table.get(self.path.split("?", 1)[0], Route({"detail": "Not Found"}, status=404))
            body, kind = route.encoded()
            self.send_response(route.status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if with_body:
                self.wfile.write(body)

        def do_GET(self) -> None:
            self._answer(True)

        def do_HEAD(self) -> None:
            self._answer(False)

        def do_POST(self) -> None:  # recorded, so a test can refuse any
            state.seen.append(("POST", self.path))
            self.send_response(405)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state = FakeServer(f"http://127.0.0.1:{server.server_address[1]}", table)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    timer = threading.Timer(SERVER_LIFETIME_S, server.shutdown)
    timer.daemon = True
    timer.start()
    try:
        yield state
    finally:
        timer.cancel()
        server.shutdown()
        server.server_close()


def recorded_routes(folder: Path, metrics: str | None = "metrics-idle.txt") -> dict[str, Route]:
    """A real server's answers as recorded under tests/fixtures/servers/<engine>/<case>/: every path
    in its endpoints.json ({path: {status, body}}), and /metrics from the file named."""
    recorded = json.loads((folder / "endpoints.json").read_text())
    routes = {path: Route(answer["body"], answer["status"], "application/json") for path, answer in recorded.items()}
    if metrics is not None:
        routes["/metrics"] = Route((folder / metrics).read_text())
    return routes


def http_getter(url: str) -> Callable[[str], Answer]:
    """A reader's ``get`` on a server, through kvcalc's own bounded GETs (kvcalc.inputs.server)."""
    from kvcalc.engines.observing import Answer
    from kvcalc.inputs.server import ServerGet

    server = ServerGet(url)
    return lambda path: Answer(*server.fresh(path))
