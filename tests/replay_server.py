"""A local HTTP server on 127.0.0.1 that replays recorded responses (real llama-server
captures in tests/data/servers), and can stall, break off or refuse: the server arms' client
is tested against real sockets, not mocks."""

from __future__ import annotations

import http.server
import threading

import pytest

from specdeck.core.servers.transport import Base


class Replay(http.server.BaseHTTPRequestHandler):
    body = b""
    content_type = "text/event-stream"
    stall_after: int | None = None
    """Hold the stream after this many lines, until the test ends (``stalled`` is set then)."""
    status = 200
    seen: list = []
    routes: dict | None = None
    """GET path -> (status, content type, body); with routes, other GETs answer 404."""

    def log_message(self, *args):  # keep pytest's output clean
        pass

    def do_GET(self):
        type(self).seen.append((self.path, dict(self.headers), b""))
        if self.routes is not None:
            status, content_type, body = self.routes.get(
                self.path, (404, "application/json", b'{"error": "not found"}'))
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self._answer()

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        type(self).seen.append((self.path, dict(self.headers), self.rfile.read(length)))
        self._answer()

    def _answer(self):
        self.send_response(self.status)
        self.send_header("Content-Type", self.content_type)
        self.end_headers()
        lines = self.body.splitlines(keepends=True)
        for i, line in enumerate(lines):
            if self.stall_after is not None and i == self.stall_after:
                type(self).stalled.set()
                type(self).released.wait(60)
                return
            self.wfile.write(line)
            self.wfile.flush()


@pytest.fixture
def replay():
    servers = []

    def start(**attrs):
        handler = type("Handler", (Replay,), {**attrs, "seen": [],
                                              "stalled": threading.Event(),
                                              "released": threading.Event()})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return Base.parse(f"http://127.0.0.1:{server.server_port}"), handler

    yield start
    for server in servers:
        server.RequestHandlerClass.released.set()
        server.shutdown()
        server.server_close()


