"""HTTP for server arms: JSON requests and server-sent event streams, with timeouts and
secrets kept out of every message.

The standard library's http.client is enough: one connection per request (a benchmark must
not share a socket between arms), a connect timeout, and a read timeout that bounds the
wait between two chunks of a stream. Credentials in a URL (``http://user:pass@host``,
``?token=...``) are sent as headers and never appear in an error or a log line.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from specdeck.core.errors import CancelledError, SpecDeckError
from specdeck.core.urls import redact_url

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 60.0
"""Longest wait for a response or between two chunks: a prefill of a long prompt on a
slow GPU fits; a server that stopped answering does not hang the run for longer."""
MAX_JSON_BYTES = 16 * 1024 * 1024
class ServerError(SpecDeckError):
    """A server could not be reached, refused, answered an error or stopped mid-stream."""


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
            raw = f"{parts.username}:{parts.password or ''}".encode()
            auth = "Basic " + base64.b64encode(raw).decode("ascii")
        prefix = parts.path.rstrip("/")
        if prefix.endswith("/v1"):  # users paste the OpenAI base URL; the routes add /v1
            prefix = prefix[: -len("/v1")]
        return cls(parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80),
                   prefix, parts.query, auth, redact_url(text).rstrip("/"))

    def connection(self, timeout: float) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def target(self, route: str) -> str:
        path = self.prefix + route
        return f"{path}?{self.query}" if self.query else path


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


def _open(base: Base, method: str, route: str, payload: Any, api_key: str | None,
          timeout: float, extra_headers: dict[str, str] | None = None):
    conn = base.connection(CONNECT_TIMEOUT_S)
    body = None if payload is None else json.dumps(payload).encode("utf-8")
    headers = _headers(base, api_key, body is not None)
    headers.update(extra_headers or {})
    where = f"{base.shown}{route}"
    try:
        conn.connect()
        conn.sock.settimeout(timeout)
        conn.request(method, base.target(route), body=body, headers=headers)
        response = conn.getresponse()
    except (socket.timeout, TimeoutError):
        conn.close()
        raise ServerError(f"{where} did not answer within {timeout:g} s.",
                          "Check that the server is running and not busy, then try again.") from None
    except ConnectionRefusedError:
        conn.close()
        raise ServerError(f"Nothing is listening at {base.shown}.",
                          "Start the server, or check the host and port.") from None
    except (OSError, http.client.HTTPException) as exc:
        conn.close()
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise ServerError(f"Cannot reach {base.shown}: {reason}.",
                          "Check the URL and that the server is running.") from None
    return conn, response


def _error_text(response, raw: bytes) -> str:
    try:
        data = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace").strip()[:300]
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        return str(error.get("message") or error)[:300]
    if error:
        return str(error)[:300]
    detail = data.get("detail") if isinstance(data, dict) else None  # FastAPI (TabbyAPI, vLLM)
    return str(detail or data)[:300]


def _raise_for_status(base: Base, route: str, response, raw: bytes) -> None:
    if response.status < 400:
        return
    message = _error_text(response, raw)
    where = f"{base.shown}{route}"
    if response.status in (401, 403):
        raise ServerError(f"{where} refused the request ({response.status}): {message}",
                          "Give the server's API key (an environment variable or the keyring).")
    if response.status == 404:
        raise ServerError(f"{where} does not exist on this server (404).",
                          "Check the URL, or pick the server's kind by hand.")
    raise ServerError(f"{where} answered {response.status}: {message}")


def request_json(base: Base, method: str, route: str, payload: Any = None,
                 api_key: str | None = None, timeout: float = 10.0) -> Any:
    """One request, its JSON answer (None for an empty body). Raises ServerError."""
    conn, response = _open(base, method, route, payload, api_key, timeout)
    try:
        raw = response.read(MAX_JSON_BYTES + 1)
    except (OSError, http.client.HTTPException):
        raise ServerError(f"{base.shown}{route} stopped answering mid-response.") from None
    finally:
        conn.close()
    _raise_for_status(base, route, response, raw)
    if len(raw) > MAX_JSON_BYTES:
        raise ServerError(f"{base.shown}{route} answered more than {MAX_JSON_BYTES >> 20} MiB.")
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


def request_text(base: Base, route: str, api_key: str | None = None, timeout: float = 10.0) -> str:
    conn, response = _open(base, "GET", route, None, api_key, timeout)
    try:
        raw = response.read(MAX_JSON_BYTES)
    finally:
        conn.close()
    _raise_for_status(base, route, response, raw)
    return raw.decode("utf-8", "replace")


@dataclass(frozen=True)
class StreamEvent:
    at: float
    """time.perf_counter() when the event's line arrived."""
    data: Any
    """The parsed JSON of a ``data:`` line (a dict for every server here)."""


def _says_finished(data: Any) -> bool:
    if not isinstance(data, dict):
        return False
    if data.get("done") is True:  # Ollama
        return True
    choices = data.get("choices")
    return bool(isinstance(choices, list) and choices and isinstance(choices[0], dict)
                and choices[0].get("finish_reason"))


def stream_sse(base: Base, route: str, payload: Any, api_key: str | None = None,
               cancel: threading.Event | None = None,
               read_timeout: float = READ_TIMEOUT_S,
               until_closed: bool = False) -> Iterator[StreamEvent]:
    """POST ``payload`` and yield each server-sent ``data:`` event as it arrives.

    Ends at ``data: [DONE]``, or when the server closes the stream after it said it finished
    (a finish_reason, Ollama's done). Raises ServerError when the stream ends before that (a
    server that died mid-answer must not pass for a short answer), when no chunk arrives
    within ``read_timeout`` or the connection breaks (``until_closed``: a stream that simply
    ends when the server closes it, as TabbyAPI's load progress does); CancelledError when
    ``cancel`` is set (the connection is closed, which stops the server's generation too).
    A server that answers plain JSON instead of a stream yields that one object.
    """
    conn, response = _open(base, "POST", route, payload, api_key, read_timeout)
    where = f"{base.shown}{route}"
    try:
        if response.status >= 400:
            _raise_for_status(base, route, response, response.read(MAX_JSON_BYTES))
        content_type = response.getheader("Content-Type", "")
        if "text/event-stream" not in content_type and "ndjson" not in content_type:
            raw = response.read(MAX_JSON_BYTES)
            at = time.perf_counter()
            try:
                yield StreamEvent(at, json.loads(raw))
            except ValueError:
                raise ServerError(f"{where} answered neither a stream nor JSON.") from None
            return
        ndjson = "ndjson" in content_type  # Ollama's native API streams JSON lines
        finished = False
        while True:
            if cancel is not None and cancel.is_set():
                raise CancelledError()
            try:
                line = response.readline(MAX_JSON_BYTES)
            except (socket.timeout, TimeoutError):
                raise ServerError(f"{where} sent nothing for {read_timeout:g} s mid-stream.",
                                  "The server may be stuck or overloaded; the run was stopped.") \
                    from None
            except (OSError, http.client.HTTPException):
                raise ServerError(f"{where} broke off the stream.",
                                  "The server may have crashed or restarted.") from None
            at = time.perf_counter()
            if not line:
                if finished or until_closed:
                    return
                raise ServerError(f"{where} ended the stream before the answer was complete.",
                                  "The server may have crashed or restarted; see its log.")
            text = line.decode("utf-8", "replace").strip()
            if ndjson and text:
                text = "data: " + text
            if not text.startswith("data:"):
                continue  # comments, event: and id: lines, keep-alives, blank separators
            body = text[5:].strip()
            if body == "[DONE]":
                return
            try:
                data = json.loads(body)
            except ValueError:
                continue
            if isinstance(data, dict) and "error" in data and not data.get("choices"):
                raise ServerError(f"{where} reported an error mid-stream: "
                                  f"{_error_text(response, body.encode())}")
            finished = finished or _says_finished(data)
            yield StreamEvent(at, data)
    finally:
        conn.close()
