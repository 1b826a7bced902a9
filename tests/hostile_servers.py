"""Servers on 127.0.0.1 that misbehave, one behaviour per class (issue 26): SpecDeck's server
client is tested against real sockets that trickle, flood, never finish, lie in their numbers,
nest JSON without end, answer 503/500/redirects/300 headers, and echo the key back.

``Llm`` is a well-behaved llama-server look-alike (``/props``, ``/slots``, ``/v1/models``, a
stream of ``max_tokens`` words ending in ``timings``), so that each hostile class changes one
thing. ``start(cls, **attrs)`` serves a class on a free port and returns (server, url,
handler class); ``serving(...)`` is the same as a context manager that shuts it down.
The benchmark ``benchmarks/bench_hostile_servers.py`` uses the same classes.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
import time

WORDS = "The library opens at nine and closes at six in the evening .".split(" ")


def words(n: int) -> list[str]:
    return [(" " if i else "") + WORDS[i % len(WORDS)] for i in range(n)]


class Hostile(http.server.BaseHTTPRequestHandler):
    """Plumbing: JSON answers, raw writes, SSE events; every request is recorded in ``seen``."""

    seen: list = []
    gap_s = 0.02
    """A trickle's or a keep-alive's pause."""

    def log_message(self, *args):
        pass

    def handle(self):
        with contextlib.suppress(OSError):  # the client hung up: that is the point, often
            super().handle()

    def do_GET(self):
        type(self).seen.append(("GET", self.path, dict(self.headers), None))
        self.get()

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0) or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        type(self).seen.append(("POST", self.path, dict(self.headers), body))
        self.post(body)

    def get(self):
        self.answer(404, {"error": "not found"})

    def post(self, body: dict):
        self.answer(404, {"error": "not found"})

    def answer(self, status: int, data, content_type: str = "application/json",
               headers: dict | None = None):
        raw = data if isinstance(data, bytes) else json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(raw)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(raw)

    def start_stream(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

    def event(self, data) -> None:
        raw = data if isinstance(data, (bytes, str)) else json.dumps(data)
        raw = raw.encode() if isinstance(raw, str) else raw
        self.wfile.write(b"data: " + raw + b"\n\n")
        self.wfile.flush()


class Llm(Hostile):
    """A well-behaved llama-server: what every hostile class below changes one thing of."""

    step_s = 0.002
    """Between two tokens (so the client's clock sees a decode rate)."""
    drafting = True

    def routes(self) -> dict:
        return {
            "/props": {"default_generation_settings": {"n_ctx": 4096}, "build_info": "b1-hostile",
                       "model_path": "/models/m.gguf"},
            "/slots": [{"id": 0, "speculative": self.drafting}],
            "/v1/models": {"object": "list", "data": [{"id": "m", "object": "model"}]},
            "/health": {"status": "ok"},
        }

    def get(self):
        path = self.path.split("?", 1)[0]
        found = self.routes().get(path)
        if found is None:
            return self.answer(404, {"error": {"code": 404, "message": "File Not Found"}})
        return self.answer(200, found)

    def post(self, body: dict):
        n = int(body.get("max_tokens") or 16)
        self.start_stream()
        texts = self.texts(n)
        for text in texts:
            time.sleep(self.step_s)
            self.event(self.chunk({"content": text}))
        self.event(self.final(len(texts)))
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def texts(self, n: int) -> list[str]:
        """The text of each chunk: one word a token."""
        return words(n)

    def chunk(self, delta, reason=None) -> dict:
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": reason}],
                "object": "chat.completion.chunk", "model": "m"}

    def timings(self, n: int) -> dict:
        timings = {"prompt_n": 30, "prompt_ms": 12.5, "predicted_n": n, "predicted_ms": 80.0,
                   "predicted_per_second": 200.0, "cache_n": 0}
        if self.drafting:
            timings.update(draft_n=n, draft_n_accepted=n // 2)
        return timings

    def final(self, n: int):
        return {**self.chunk({}, "length"), "timings": self.timings(n)}


# -- hangs -------------------------------------------------------------------------------------
class Trickle(Llm):
    """Everything, from the status line on, one byte every ``gap_s``: each read gets a byte
    in time, so only a total deadline ends it."""

    gap_s = 0.05
    from_status = True
    """False: the status line and headers come at once, then the body trickles."""
    gets = True
    """False: GET routes answer at once (a probe passes); only a generation trickles."""
    http10 = False
    """An HTTP/1.0 answer, which ends when the server closes (http.client lets go of the
    socket then: issue 43's probe that trickled for 9 minutes)."""

    def _trickle(self, raw: bytes) -> None:
        for i in range(len(raw)):
            self.wfile.write(raw[i:i + 1])
            self.wfile.flush()
            time.sleep(self.gap_s)

    def _send(self, content_type: str, body: bytes) -> None:
        head = (f"HTTP/1.{0 if self.http10 else 1} 200 OK\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        if self.from_status:
            self._trickle(head + body)
        else:
            self.wfile.write(head)
            self.wfile.flush()
            self._trickle(body)

    def get(self):
        if not self.gets:
            return super().get()
        found = self.routes().get(self.path.split("?", 1)[0], {"error": "not found"})
        self._send("application/json", json.dumps({**found, "pad": " " * 10_000}
                                                  if isinstance(found, dict) else found).encode())

    def post(self, body: dict):
        n = int(body.get("max_tokens") or 16)
        events = b"".join(b"data: " + json.dumps(self.chunk({"content": w})).encode() + b"\n\n"
                          for w in words(n) * 100)
        self._send("text/event-stream", events)


class KeepAlive(Llm):
    """A stream that sends ``tokens`` chunks (none by default), then ``: keep-alive`` comments
    for ever and never another token; ``bytewise``: one comment that never ends, a byte every
    ``gap_s`` (each read gets a byte, no line ever completes); ``empty``: ``data:`` events
    that carry no token instead (``empty`` is the event: an empty delta, a role alone, a
    usage-only chunk), every ``gap_s``."""

    tokens = 0
    bytewise = False
    empty: dict | None = None

    def post(self, body: dict):
        self.start_stream()
        for text in words(self.tokens):
            self.event(self.chunk({"content": text}))
        if self.bytewise:
            self.wfile.write(b":")
        while True:
            if self.empty is not None:
                self.event(self.empty)
            else:
                self.wfile.write(b"." if self.bytewise else b": keep-alive\n\n")
                self.wfile.flush()
            time.sleep(self.gap_s)


class Endless(Llm):
    """A stream of tokens that ignores max_tokens and never ends."""

    step_s = 0.0005

    def post(self, body: dict):
        self.start_stream()
        i = 0
        while True:
            time.sleep(self.step_s)
            self.event(self.chunk({"content": WORDS[i % len(WORDS)] + " "}))
            i += 1


class Flood(Llm):
    """A stream of 64 KB lines as fast as the socket takes them, never a token: comments by
    default (``line`` sets what each line is); every GET an endless JSON answer."""

    line = b":" + b"x" * (64 * 1024 - 2) + b"\n"

    def post(self, body: dict):
        self.start_stream()
        while True:
            self.wfile.write(self.line)

    def get(self):
        """A JSON answer that never ends: '[' and 64 KB of spaces, again and again."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"[")
        while True:
            self.wfile.write(b" " * (64 * 1024))


class HugeEvent(Llm):
    """One ``data:`` event of ``size`` bytes (a 50 MB event, in the issue), then a normal end."""

    size = 6 * 1024 * 1024

    def post(self, body: dict):
        self.start_stream()
        self.event(self.chunk({"content": "x" * self.size}))
        self.event(self.final(1))
        self.wfile.write(b"data: [DONE]\n\n")


# -- data lost on the way ------------------------------------------------------------------------
class NotJsonEvent(Llm):
    """A stream with one event that does not parse, in the middle of the words."""

    def post(self, body: dict):
        n = int(body.get("max_tokens") or 16)
        self.start_stream()
        for i, word in enumerate(words(n)):
            time.sleep(self.step_s)
            if i == n // 2:
                self.event('{"choices": [{"delta": {"content": "lost')
                continue
            self.event(self.chunk({"content": word}))
        self.event(self.final(n))
        self.wfile.write(b"data: [DONE]\n\n")


class Short(Llm):
    """Stops after ``tokens`` of the words (0: no text at all) and says it stopped."""

    tokens = 3

    def texts(self, n: int) -> list[str]:
        return words(n)[: self.tokens]

    def final(self, n: int):
        return {**self.chunk({}, "stop"), "timings": self.timings(max(n, 1))}


# -- made-up numbers -----------------------------------------------------------------------------
class Reports(Llm):
    """The final event's ``timings`` (and ``usage``) as given, raw JSON text allowed, so NaN,
    Infinity, 1e400 and 10^30 can be sent."""

    timings_json = '{"predicted_n": 16, "predicted_per_second": NaN}'
    usage_json: str | None = None

    def final(self, n: int):
        usage = f', "usage": {self.usage_json}' if self.usage_json else ""
        return (json.dumps(self.chunk({}, "length"))[:-1]
                + f', "timings": {self.timings_json}{usage}}}')


class DeepJson(Llm):
    """Every route answers JSON nested ``depth`` levels deep; a stream's last event too."""

    depth = 100_000

    def get(self):
        raw = ('{"a": ' * self.depth + "1" + "}" * self.depth).encode()
        self.answer(200, raw)

    def final(self, n: int):
        nested = '{"a": ' * self.depth + "1" + "}" * self.depth
        return json.dumps(self.chunk({}, "length"))[:-1] + f', "timings": {nested}}}'


class Counters(Llm):
    """vLLM-like: /version, /v1/models and Prometheus counters that go down after each read
    (``step`` per read, from ``start``); a stream without per-request draft counts."""

    start = 1000.0
    step = -50.0
    values: list = []

    def routes(self) -> dict:
        return {"/version": {"version": "0.33.0"},
                "/v1/models": {"object": "list", "data": [{"id": "m"}]}}

    def get(self):
        if self.path.split("?", 1)[0] != "/metrics":
            return super().get()
        value = self.start + self.step * len(type(self).values)
        type(self).values.append(value)
        text = (f"vllm:spec_decode_num_draft_tokens_total{{engine=\"0\"}} {value}\n"
                f"vllm:spec_decode_num_accepted_tokens_total{{engine=\"0\"}} {value / 2}\n")
        return self.answer(200, text.encode(), "text/plain; version=0.0.4")

    def timings(self, n: int) -> dict:
        return {}

    def final(self, n: int):
        return {**self.chunk({}, "length"),
                "usage": {"prompt_tokens": 30, "completion_tokens": n, "total_tokens": 30 + n}}


# -- statuses, headers, keys ---------------------------------------------------------------------
LOADING = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
"""llama-server's answer while it loads its model (tools/server/server.cpp)."""


class Status(Hostile):
    """Every route answers ``status`` with ``body`` and ``extra_headers`` (a redirect's
    Location)."""

    status = 503
    body = LOADING
    extra_headers: dict = {}

    def get(self):
        self.answer(self.status, self.body, headers=self.extra_headers)

    def post(self, body: dict):
        self.get()


class ManyHeaders(Hostile):
    """A 200 answer with ``count`` header lines (http.client reads at most 100)."""

    count = 300

    def get(self):
        self.send_response(200)
        for i in range(self.count):
            self.send_header(f"X-Filler-{i}", "x")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def post(self, body: dict):
        self.get()


class Echo(Hostile):
    """Refuses (``status``) with a body that repeats what it was sent: the Authorization and
    x-api-key headers and the path with its query string."""

    status = 401

    def _echo(self):
        said = (f"bad credentials: Authorization={self.headers.get('Authorization')} "
                f"x-api-key={self.headers.get('x-api-key')} path={self.path}")
        self.answer(self.status, {"error": {"message": said}})

    def get(self):
        self._echo()

    def post(self, body: dict):
        self._echo()


class EchoStream(Llm):
    """Generates normally, but reports an error mid-stream that repeats the key it was sent."""

    def post(self, body: dict):
        self.start_stream()
        self.event(self.chunk({"content": "Hello"}))
        self.event({"error": {"message": f"quota exceeded for key "
                              f"{self.headers.get('Authorization')} ({self.path})"}})


# -- serving -------------------------------------------------------------------------------------
class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False


def start(handler_class, **attrs):
    """Serve ``handler_class`` (with ``attrs`` set on a subclass) on 127.0.0.1; returns
    (server, base URL, the handler class in use, whose ``seen`` lists the requests)."""
    handler = type(handler_class.__name__, (handler_class,), {"seen": [], **attrs})
    if hasattr(handler_class, "values"):
        handler.values = []  # a fresh counter history per server
    server = _Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}", handler


@contextlib.contextmanager
def serving(handler_class, **attrs):
    server, url, handler = start(handler_class, **attrs)
    try:
        yield url, handler
    finally:
        server.shutdown()
        server.server_close()
