"""HTTP for server arms: JSON requests and server-sent event streams, bounded in time and size,
with secrets kept out of every message.

A server is untrusted input (docs/servers.md, "Keys and failures"). The standard library's
http.client is enough: one connection per request (a benchmark must not share a socket between
arms), and around it the bounds a server cannot talk its way past:

- one watchdog per request, whatever the path (a probe's GET, a JSON or text request, a
  stream): it holds the request's total deadline (connect, headers, body, every event of a
  stream) and, for a stream, the longest wait for the next event, and shuts the socket when
  either runs out, so a server that trickles a byte every few seconds, or sends
  ``: keep-alive`` comments for ever, cannot hold a run or a probe. A per-read timeout is
  not a deadline (every trickled byte resets it) and a comment is not progress: only an
  event that brings a token (``carries_token``) restarts a stream's ``READ_TIMEOUT_S``;
- a bound on bytes: a JSON answer, one stream event and a whole stream each have a most;
- JSON nested deeper than ``MAX_JSON_DEPTH`` is refused (Python's parser, and everything
  after it that walks the data, would raise RecursionError);
- credentials in a URL (``http://user:pass@host``, ``?api-key=...``) are sent (decoded) and
  never shown; whatever the server sends back has the secrets of the request masked
  (a server that echoes the key or the Authorization header in its error).

Redirects are not followed (the key would go along to wherever they point): they are
reported with their target.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from specdeck.core.errors import CancelledError, SpecDeckError
from specdeck.core.printable import printable
from specdeck.core.units import KiB, MiB, format_bytes
from specdeck.core.urls import mask_secrets, redact_url, secret_forms, url_secrets

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 60.0
"""Longest wait for progress: before a response (a prefill of a long prompt on a slow GPU
fits) or between two tokens of a stream (keep-alive comments, partial lines and events with
no token do not count)."""
REQUEST_TIMEOUT_S = 10.0
"""Default total deadline of one JSON request, from connecting to the last byte."""
STREAM_TIMEOUT_S = 3600.0
"""Default total deadline of a stream; a generation passes its own (core.servers.engine)."""
MAX_JSON_BYTES = 16 * MiB
MAX_EVENT_BYTES = 4 * MiB
"""One server-sent event (a line): a server's events are a few hundred bytes."""
MAX_STREAM_BYTES = 64 * MiB
"""A whole stream, comments and all: 2,048 tokens of llama-server's events are ~1 MiB."""
MAX_JSON_DEPTH = 64
"""No server's answer nests deeper than a handful of levels."""
READ_CHUNK = 64 * KiB
WATCH_POLL_S = 0.1
"""How often a watchdog looks at a cancel event while a read blocks."""


class ServerError(SpecDeckError):
    """A server could not be reached, refused, answered an error or stopped mid-stream."""


class BadAnswerError(ServerError):
    """The server answered, but not with anything usable: an HTTP answer SpecDeck cannot
    read, one cut off or closed before it began, or one beyond a size bound."""


class HttpStatusError(ServerError):
    """The server answered, with a status that is not success."""

    def __init__(self, status: int, message: str, what: str, fix: str = "",
                 location: str | None = None):
        super().__init__(what, fix)
        self.status = status
        self.message = message
        """The server's own message (masked, at most 300 characters)."""
        self.location = location
        """Where a redirect points (redacted)."""


@dataclass(frozen=True)
class Base:
    """A server's base URL, split once: where to connect and what to send."""

    scheme: str
    host: str
    port: int
    prefix: str
    """Path before the API routes ("" or e.g. "/proxy"), without a trailing slash."""
    query: str
    basic_auth: str | None
    shown: str
    """The URL as it may be shown (redacted)."""
    secrets: tuple[str, ...] = ()
    """What in the URL is secret (password, key-looking query values, the Basic header):
    masked in everything the server sends back."""

    @classmethod
    def parse(cls, url: str) -> Base:
        text = url.strip()
        if "://" not in text:
            text = "http://" + text
        try:
            parts = urlsplit(text)
            port = parts.port
        except ValueError as exc:
            raise ServerError(f"{redact_url(url)} is not a valid server URL ({exc}).",
                              "Write it as http://HOST:PORT, e.g. http://127.0.0.1:8080.") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ServerError(f"{redact_url(url)} is not an http(s) server URL.",
                              "Write it as http://HOST:PORT, e.g. http://127.0.0.1:8080.")
        auth = None
        if parts.username is not None:
            # A URL percent-encodes what it cannot hold (p%40ss is "p@ss"): send it decoded.
            raw = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            auth = "Basic " + base64.b64encode(raw).decode("ascii")
        prefix = parts.path.rstrip("/")
        if prefix.endswith("/v1"):  # users paste the OpenAI base URL; the routes add /v1
            prefix = prefix[: -len("/v1")]
        secrets = url_secrets(text) + ((auth,) if auth else ())
        return cls(parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80),
                   prefix, parts.query, auth, redact_url(text).rstrip("/"), secrets)

    def connection(self, timeout: float) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def target(self, route: str) -> str:
        path = self.prefix + route
        return f"{path}?{self.query}" if self.query else path

    def shown_at(self, route: str) -> str:
        """Where ``route`` is, as it may be shown: the redacted query after the route."""
        head, _, query = self.shown.partition("?")
        return f"{head.rstrip('/')}{route}" + (f"?{query}" if query else "")

    def masks(self, api_key: str | None) -> tuple[str, ...]:
        """Every form of this request's secrets a server could echo back."""
        return secret_forms((*self.secrets, api_key))


def _headers(base: Base, api_key: str | None, body: bool) -> dict[str, str]:
    headers = {"Accept": "application/json, text/event-stream", "User-Agent": "SpecDeck"}
    if body:
        headers["Content-Type"] = "application/json"
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
        headers["x-api-key"] = api_key  # TabbyAPI reads either; others ignore it
    elif base.basic_auth:
        headers["Authorization"] = base.basic_auth
    return headers


class _Watchdog:
    """A request's total deadline, its deadline for progress (``quiet``: the longest wait for
    the next piece of progress, which the reader marks with ``progress()``), and the user's
    cancel: when any comes, the socket is shut, which ends any read blocked on it (a header
    trickled byte by byte, a chunk-size line, a body, a comment line) however http.client
    reads it."""

    def __init__(self, seconds: float, cancel: threading.Event | None = None,
                 quiet: float | None = None):
        self.seconds = seconds
        self.ends = time.monotonic() + seconds
        self.cancel = cancel
        self.quiet = quiet
        self._progress_by = self.ends if quiet is None else time.monotonic() + quiet
        self.expired = False
        self.starved = False
        """The progress deadline ran out (before the total one)."""
        self._conn: http.client.HTTPConnection | None = None
        self._sock: socket.socket | None = None
        self._fired = False
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def remaining(self) -> float:
        return self.ends - time.monotonic()

    def progress(self) -> None:
        """Progress arrived: the next is due within ``quiet`` from now."""
        if self.quiet is not None:
            self._progress_by = time.monotonic() + self.quiet

    def watch(self, conn: http.client.HTTPConnection) -> None:
        self._conn = conn
        self._thread = threading.Thread(target=self._run, name="specdeck-http-deadline",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            left = self.remaining()
            if left <= 0:
                self.expired = True
                break
            wait = self._progress_by - time.monotonic()
            if wait <= 0:
                self.starved = True
                break
            step = min(left, wait)
            step = step if self.cancel is None else min(step, WATCH_POLL_S)
            if self._done.wait(step):
                return
            if self.cancel is not None and self.cancel.is_set():
                break
        with self._lock:
            self._fired = True
            sock = self._sock or (self._conn.sock if self._conn is not None else None)
        _shut(sock)

    def hold(self, sock: socket.socket) -> None:
        """The connected socket, kept here: http.client lets go of it (``conn.sock`` becomes
        None) as soon as the response is one that ends when the server closes (HTTP/1.0,
        ``Connection: close``, a stream without a length), and a watchdog that looked for it
        there could then shut nothing while the response's reads went on for ever."""
        with self._lock:
            self._sock = sock
            fired = self._fired
        if fired:
            _shut(sock)

    def stop(self) -> None:
        self._done.set()

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()


def _shut(sock: socket.socket | None) -> None:
    """Shut ``sock`` down, which ends any read blocked on it (closing it would not)."""
    if sock is not None:
        try:  # the plain socket's shutdown: an SSL socket's would drop its state mid-read
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except OSError:
            pass


class _Exchange:
    """One request on its own connection: the response, read within the watchdog's bounds,
    and every message about it worded the same way."""

    def __init__(self, base: Base, method: str, route: str, payload: Any, api_key: str | None,
                 timeout: float, idle: float, cancel: threading.Event | None = None,
                 extra_headers: dict[str, str] | None = None, stream: bool = False):
        self.base = base
        self.route = route
        self.where = base.shown_at(route)
        self.masks = base.masks(api_key)
        self.idle = max(0.001, min(idle, timeout))
        self.events = 0
        """A stream's events so far (how a silence is worded)."""
        # A stream's progress is its events: ``idle`` is then a deadline the watchdog holds,
        # not only a per-read timeout (which every trickled byte or comment would reset).
        self.watchdog = _Watchdog(timeout, cancel, quiet=self.idle if stream else None)
        self.conn = base.connection(min(CONNECT_TIMEOUT_S, max(timeout, 0.001)))
        body = None if payload is None else json.dumps(payload).encode("utf-8")
        headers = _headers(base, api_key, body is not None)
        headers.update(extra_headers or {})
        self.watchdog.watch(self.conn)
        self.connected = False
        try:
            self.conn.connect()
            self.connected = True
            self.watchdog.hold(self.conn.sock)
            self.conn.sock.settimeout(max(0.001, min(self.idle, self.watchdog.remaining())))
            self.conn.request(method, base.target(route), body=body, headers=headers)
            self.response = self.conn.getresponse()
        except Exception as exc:
            error = self.failure(exc, before_answer=True)
            self.close()
            raise error from None

    def close(self) -> None:
        self.watchdog.stop()
        self.conn.close()

    def shown(self, text: str, limit: int = 300) -> str:
        """Server text as it may be shown: secrets masked, control characters escaped, cut."""
        text = printable(mask_secrets(text, self.masks)).strip()
        return text if len(text) <= limit else text[:limit] + "…"

    def failure(self, exc: BaseException, before_answer: bool = False) -> BaseException:
        """The error to raise for ``exc``, said for what really happened."""
        if self.watchdog.cancelled:
            return CancelledError()
        if self.watchdog.expired:
            return ServerError(
                f"{self.where} did not finish answering within {self.watchdog.seconds:g} s.",
                "The server is too slow or stuck (a trickle of bytes, or keep-alives without an "
                "answer); check it, then try again.")
        if self.watchdog.starved:
            return self.silence()
        if isinstance(exc, (socket.timeout, TimeoutError)):
            if not self.connected:
                return ServerError(f"{self.base.shown} did not accept a connection within "
                                   f"{self.conn.timeout:g} s.",
                                   "Check the host and port, and that the server is running.")
            if before_answer:
                return ServerError(f"{self.where} did not answer within {self.idle:g} s.",
                                   "Check that the server is running and not busy, then try "
                                   "again.")
            return ServerError(f"{self.where} went silent mid-answer.",
                               "The server may be stuck or overloaded.")
        if isinstance(exc, ConnectionRefusedError):
            return ServerError(f"Nothing is listening at {self.base.shown}.",
                               "Start the server, or check the host and port.")
        if isinstance(exc, http.client.RemoteDisconnected):
            return BadAnswerError(f"{self.where} closed the connection without answering.",
                                  "The server may have crashed or restarted, or it is not an "
                                  "HTTP server.")
        if isinstance(exc, http.client.HTTPException) and not isinstance(
                exc, http.client.IncompleteRead):
            detail = self.shown(str(exc) or type(exc).__name__, 120)
            return BadAnswerError(f"{self.where} sent an HTTP answer SpecDeck cannot read "
                                  f"({detail}).",
                                  "Check that the URL is the LLM server's own address, not a "
                                  "proxy or another service in front of it.")
        if isinstance(exc, (OSError, http.client.HTTPException)):
            if before_answer:
                reason = getattr(exc, "strerror", None) or type(exc).__name__
                return ServerError(f"Cannot reach {self.base.shown}: {reason}.",
                                   "Check the URL and that the server is running.")
            return BadAnswerError(f"{self.where} broke off its answer.",
                                  "The server may have crashed or restarted.")
        if isinstance(exc, SpecDeckError):
            return exc
        return exc

    def silence(self) -> ServerError:
        """The error for a stream that sent no token within ``idle`` (only keep-alive
        comments, events without a token, a trickle of bytes that never made an event, or
        nothing at all)."""
        when = "mid-stream" if self.events else "after the request"
        return ServerError(f"{self.where} sent no token for {self.idle:g} s {when} (only "
                           "keep-alive comments, events with no token in them, a trickle of "
                           "bytes or nothing at all): SpecDeck stopped waiting.",
                           "The server may be stuck or overloaded; check its log, then try "
                           "again.")

    def read_body(self, limit: int = MAX_JSON_BYTES) -> bytes:
        """The whole body, at most ``limit`` bytes (more is an error), within the deadline."""
        parts: list[bytes] = []
        size = 0
        try:
            while True:
                chunk = self.response.read1(READ_CHUNK)
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    raise BadAnswerError(f"{self.where} answered more than {format_bytes(limit)}.",
                                         "That is not an answer an LLM server gives; check the "
                                         "URL.")
                parts.append(chunk)
        except ServerError:
            raise
        except Exception as exc:
            raise self.failure(exc) from None
        if self.watchdog.expired or self.watchdog.cancelled:
            raise self.failure(TimeoutError())
        if not self.response.chunked and (self.response.length or 0) > 0:
            raise BadAnswerError(f"{self.where} broke off its answer.",
                                 "The server may have crashed or restarted.")
        return b"".join(parts)

    def check_status(self, raw: bytes) -> None:
        """Raise HttpStatusError unless the answer is a success (2xx), saying what it was:
        the status, the server's own message, where a redirect points."""
        status = self.response.status
        if 200 <= status < 300:
            return
        message = self.shown(_error_text(raw, self.masks))
        said = f": {message}" if message else " with no message"
        where = self.where
        if 300 <= status < 400:
            location = self.response.getheader("Location")
            target = redact_url(self.shown(location, 200)) if location else None
            raise HttpStatusError(
                status, message,
                f"{where} redirects ({status}) to {target}." if target else
                f"{where} answered {status} (a redirect) without saying where to.",
                "Use the address it redirects to as the server URL (SpecDeck does not follow "
                "redirects: the API key would go along)." if target else
                "Check the URL: it is not the LLM server's own address.", location=target)
        if status in (401, 403):
            raise HttpStatusError(status, message, f"{where} refused the request ({status}){said}",
                                  "Give the server's API key (an environment variable or the "
                                  "keyring).")
        if status == 404:
            raise HttpStatusError(status, message,
                                  f"{where} does not exist on this server (404).",
                                  "Check the URL, or pick the server's kind by hand.")
        if status == 503:
            raise HttpStatusError(status, message, f"{where} answered 503 (unavailable){said}",
                                  "The server is busy or still loading its model (llama-server "
                                  "answers 503 until its model is loaded): wait until it is "
                                  "ready, then try again.")
        if status >= 500:
            raise HttpStatusError(status, message, f"{where} answered {status}{said}",
                                  "The server failed on this request; its own log says why.")
        raise HttpStatusError(status, message, f"{where} answered {status}{said}")

    def json(self, raw: bytes) -> Any:
        """``raw`` as JSON, with the request's secrets masked in every string; ValueError when
        it is not JSON (or nests deeper than MAX_JSON_DEPTH)."""
        return parse_json(raw, self.masks)


def parse_json(raw: bytes | str, masks: tuple[str, ...] = ()) -> Any:
    """JSON from a server: ValueError when it is not JSON or nests deeper than MAX_JSON_DEPTH
    (the parser's own recursion limit is a RecursionError, and everything that walks the
    data after it would hit one too); the strings in it with ``masks`` masked."""
    try:
        data = json.loads(raw)
    except RecursionError:
        raise ValueError(f"JSON nested more than {MAX_JSON_DEPTH} levels deep") from None
    depth = _depth(data)
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"JSON nested more than {MAX_JSON_DEPTH} levels deep")
    return _masked(data, masks) if masks else data


def _depth(data: Any) -> int:
    """How deep ``data`` nests (walked without recursion), stopping past MAX_JSON_DEPTH."""
    deepest = 0
    todo = [(data, 1)]
    while todo:
        item, depth = todo.pop()
        if not isinstance(item, (dict, list)):
            continue
        deepest = max(deepest, depth)
        if depth > MAX_JSON_DEPTH:
            return depth
        todo.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def _masked(data: Any, masks: tuple[str, ...]) -> Any:
    if isinstance(data, str):
        return mask_secrets(data, masks)
    if isinstance(data, list):
        return [_masked(v, masks) for v in data]
    if isinstance(data, dict):
        return {mask_secrets(k, masks): _masked(v, masks) for k, v in data.items()}
    return data


def _error_text(raw: bytes | str, masks: tuple[str, ...] = ()) -> str:
    """The server's own message in an error body (OpenAI's error.message, FastAPI's detail),
    or the body's text."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    try:
        data = parse_json(text[:MAX_JSON_BYTES])
    except ValueError:
        return mask_secrets(text.strip()[:1000], masks)
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        found = error.get("message") or error
    elif error:
        found = error
    else:
        detail = data.get("detail") if isinstance(data, dict) else None  # FastAPI
        found = detail or data
    return mask_secrets(str(found)[:1000], masks)


def request_json(base: Base, method: str, route: str, payload: Any = None,
                 api_key: str | None = None, timeout: float = REQUEST_TIMEOUT_S) -> Any:
    """One request, its JSON answer (None for an empty body; the text when it is not JSON).
    ``timeout`` bounds the whole request. Raises ServerError."""
    call = _Exchange(base, method, route, payload, api_key, timeout, timeout)
    try:
        raw = call.read_body()
        call.check_status(raw)
    finally:
        call.close()
    if not raw.strip():
        return None
    try:
        return call.json(raw)
    except ValueError:
        return mask_secrets(raw.decode("utf-8", "replace"), call.masks)


def request_text(base: Base, route: str, api_key: str | None = None,
                 timeout: float = REQUEST_TIMEOUT_S) -> str:
    """GET ``route`` as text (Prometheus metrics, health). ``timeout`` bounds the whole
    request. Raises ServerError."""
    call = _Exchange(base, "GET", route, None, api_key, timeout, timeout)
    try:
        raw = call.read_body()
        call.check_status(raw)
    finally:
        call.close()
    return mask_secrets(raw.decode("utf-8", "replace"), call.masks)


@dataclass(frozen=True)
class StreamEvent:
    at: float
    """time.perf_counter() when the event's line arrived."""
    data: Any
    """The parsed JSON of a ``data:`` line (a dict for every server here); None when lost."""
    lost: str = ""
    """Why this event's data could not be used (not JSON, nested too deep): the run that
    contains it lost data and is marked so."""


def _says_finished(data: Any) -> bool:
    if not isinstance(data, dict):
        return False
    if data.get("done") is True:  # Ollama
        return True
    choices = data.get("choices")
    return bool(isinstance(choices, list) and choices and isinstance(choices[0], dict)
                and choices[0].get("finish_reason"))


_TOKEN_FIELDS = ("content", "reasoning_content", "reasoning", "text", "response")
"""Where a chunk carries generated text: an OpenAI delta's (content, a reasoning model's
reasoning_content or reasoning), a completion choice's text, llama.cpp /completion's content,
Ollama's response."""


def carries_token(data: Any) -> bool:
    """Whether a stream's event brings a token (or says the answer finished): the progress
    that restarts a generation's READ_TIMEOUT_S. An event with an empty delta, a role alone
    or only usage brings none, so a server that sends such events every second cannot hold a
    run past that deadline, no more than one that sends keep-alive comments."""
    if not isinstance(data, dict):
        return False
    if _says_finished(data) or data.get("stop") is True:  # llama.cpp /completion's last
        return True
    parts = [data, data.get("message")]  # Ollama's chat: message.content
    choices = data.get("choices")
    if isinstance(choices, list):
        for choice in choices:
            if isinstance(choice, dict):
                parts += [choice, choice.get("delta"), choice.get("message")]
    for part in parts:
        if not isinstance(part, dict):
            continue
        if any(isinstance(part.get(f), str) and part[f] for f in _TOKEN_FIELDS):
            return True
        if any(isinstance(part.get(f), list) and part[f] for f in ("tokens", "tool_calls")):
            return True
    return False


def stream_sse(base: Base, route: str, payload: Any, api_key: str | None = None,
               cancel: threading.Event | None = None,
               read_timeout: float | None = None,
               until_closed: bool = False,
               timeout: float = STREAM_TIMEOUT_S,
               max_bytes: int = MAX_STREAM_BYTES,
               progress: Callable[[Any], bool] = carries_token) -> Iterator[StreamEvent]:
    """POST ``payload`` and yield each server-sent ``data:`` event as it arrives.

    Ends at ``data: [DONE]``, or when the server closes the stream after it said it finished
    (a finish_reason, Ollama's done). Raises ServerError when the stream ends before that (a
    server that died mid-answer must not pass for a short answer), when no token arrives
    within ``read_timeout`` (READ_TIMEOUT_S when None; only an event that ``progress`` says
    is progress restarts it: by default one that carries a token, :func:`carries_token`;
    keep-alive comments, a trickle of bytes and events with nothing in them are not; a
    stream of another kind, TabbyAPI's load progress, passes its own), the whole stream
    takes longer than ``timeout`` or sends more
    than ``max_bytes`` (comments and keep-alives count), one event is larger than
    MAX_EVENT_BYTES, or the connection breaks (``until_closed``: a stream that simply ends
    when the server closes it, as TabbyAPI's load progress does); CancelledError when
    ``cancel`` is set (the connection is closed, which stops the server's generation too).
    An event that is not JSON is yielded with ``lost`` saying so. A server that answers
    plain JSON instead of a stream yields that one object.
    """
    read_timeout = READ_TIMEOUT_S if read_timeout is None else read_timeout
    call = _Exchange(base, "POST", route, payload, api_key, timeout, read_timeout, cancel,
                     stream=True)
    where = call.where
    try:
        if not 200 <= call.response.status < 300:
            call.check_status(call.read_body())
        content_type = call.response.getheader("Content-Type", "")
        if "text/event-stream" not in content_type and "ndjson" not in content_type:
            raw = call.read_body()
            at = time.perf_counter()
            try:
                yield StreamEvent(at, call.json(raw))
            except ValueError:
                raise ServerError(f"{where} answered neither a stream nor JSON.") from None
            return
        ndjson = "ndjson" in content_type  # Ollama's native API streams JSON lines
        finished = False
        received = 0
        while True:
            if cancel is not None and cancel.is_set():
                raise CancelledError()
            try:
                line = call.response.readline(MAX_EVENT_BYTES + 1)
            except (socket.timeout, TimeoutError) as exc:
                if call.watchdog.expired or call.watchdog.cancelled:
                    raise call.failure(exc) from None
                raise call.silence() from None
            except (OSError, http.client.HTTPException) as exc:
                raise call.failure(exc) from None
            at = time.perf_counter()
            if call.watchdog.expired or call.watchdog.cancelled or call.watchdog.starved:
                raise call.failure(TimeoutError())
            received += len(line)
            if received > max_bytes:
                raise ServerError(f"{where} sent more than {format_bytes(max_bytes)} without "
                                  "finishing its answer; SpecDeck stopped reading.",
                                  "The server ignores the request's limits; check it.")
            if not line:
                if finished or until_closed:
                    return
                raise ServerError(f"{where} ended the stream before the answer was complete.",
                                  "The server may have crashed or restarted; see its log.")
            if len(line) > MAX_EVENT_BYTES:
                raise ServerError(f"{where} sent one event of more than "
                                  f"{format_bytes(MAX_EVENT_BYTES)}; SpecDeck stopped reading "
                                  "(a server's events are a few hundred bytes).",
                                  "The server is not answering as an LLM server does; check it.")
            text = line.decode("utf-8", "replace").strip()
            if ndjson and text:
                text = "data: " + text
            if not text.startswith("data:"):
                continue  # comments, event: and id: lines, keep-alives, blank separators
            body = text[5:].strip()
            if body == "[DONE]":
                return
            call.events += 1
            try:
                data = call.json(body)
            except ValueError as exc:
                yield StreamEvent(at, None, lost=f"an event that is not usable JSON "
                                  f"({len(body)} bytes: {exc})")
                continue
            if progress(data):
                call.watchdog.progress()
            if isinstance(data, dict) and "error" in data and not data.get("choices"):
                raise ServerError(f"{where} reported an error mid-stream: "
                                  f"{call.shown(_error_text(body, call.masks))}")
            finished = finished or _says_finished(data)
            yield StreamEvent(at, data)
    finally:
        call.close()
