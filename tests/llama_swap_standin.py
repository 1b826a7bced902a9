"""A stand-in for llama-swap in front of real llama-servers.

llama-swap is a Go program that cannot be built here (its modules come from the network).
This stand-in does what SpecDeck relies on, following llama-swap's sources at 0bdb3720
(2026-08-22) route for route; the servers behind it are real llama-servers (the pinned build,
the demo GGUF) that it starts and stops as llama-swap does:

- ``GET /running``: ``{"running": [{"model", "state", "cmd", "proxy", "ttl", "name",
  "description"}]}`` (internal/server/api.go handleRunning; runningModel at line 313), state
  "ready" for a started model (internal/process/process.go line 16);
- ``GET /v1/models``: ``{"object": "list", "data": [{"id", "object": "model", "created",
  "owned_by": "llama-swap", "status": {"value": "loaded"|"unloaded"}}]}`` (handleListModels);
- ``/upstream/{model}/{path}``: starts the model (stopping the one running: one group, swap
  on), waits until its /health answers, then forwards the request (handleUpstream); an
  unknown model answers 404 "model not found";
- ``POST /v1/chat/completions`` and ``/v1/completions``: the same, by the body's "model"
  (a missing or unknown model answers 400 / 404), streamed back as the upstream sends it;
- ``GET /health``: 200 "OK" (handleHealth, api.go line 417).

Not followed (SpecDeck does not use them): macros, groups, TTLs, peers, the UI, /logs,
/metrics, API keys, and llama-swap's health-check timeout settings.
"""

from __future__ import annotations

import http.client
import http.server
import json
import shlex
import subprocess
import threading
import time
from pathlib import Path
from urllib.parse import unquote

from specdeck.core.servers.llama_server import free_port
from specdeck.core.servers.process import start_tied


class LlamaSwapStandin:
    def __init__(self, models: dict[str, str], log_dir: Path):
        self.models = models
        """name -> cmd, with ${PORT} as in llama-swap's config.yaml."""
        self.log_dir = log_dir
        self.current: tuple[str, subprocess.Popen, int] | None = None
        self.swaps: list[str] = []
        self._lock = threading.Lock()
        self._httpd = None

    # lifecycle ----------------------------------------------------------------------------
    def start(self) -> str:
        standin = self

        class Handler(_Handler):
            swap = standin

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        with self._lock:
            self._stop_current()

    def _stop_current(self) -> None:
        if self.current is not None:
            _name, process, _port = self.current
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
            self.current = None

    def ensure(self, model: str) -> int:
        """Swap to ``model`` (blocking until its server is healthy); its port."""
        with self._lock:
            if self.current is not None and self.current[0] == model:
                return self.current[2]
            self._stop_current()
            port = free_port()
            argv = shlex.split(self.models[model].replace("${PORT}", str(port)))
            log = open(self.log_dir / f"{model}-{len(self.swaps)}.log", "wb")  # noqa: SIM115
            # Tied to the test run: a killed run leaves no llama-server behind.
            process = start_tied(argv, stdout=log, stderr=subprocess.STDOUT)
            self.swaps.append(model)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if process.poll() is not None:
                    raise RuntimeError(f"{model} exited with {process.returncode}")
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                    conn.request("GET", "/health")
                    if conn.getresponse().status == 200:
                        break
                except OSError:
                    pass
                time.sleep(0.1)
            self.current = (model, process, port)
            return port


class _Handler(http.server.BaseHTTPRequestHandler):
    swap: LlamaSwapStandin

    def log_message(self, *args):
        pass

    def _json(self, status: int, data) -> None:
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _text(self, status: int, text: str) -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        swap = self.swap
        if self.path == "/health":
            return self._text(200, "OK")
        if self.path == "/running":
            running = []
            if swap.current is not None:
                name = swap.current[0]
                running.append({"model": name, "state": "ready", "cmd": swap.models[name],
                                "proxy": "http://127.0.0.1:${PORT}", "ttl": 0, "name": "",
                                "description": ""})
            return self._json(200, {"running": running})
        if self.path in ("/v1/models", "/models"):
            now = swap.current[0] if swap.current else None
            return self._json(200, {"object": "list", "data": [
                {"id": name, "object": "model", "created": int(time.time()),
                 "owned_by": "llama-swap", "status": {"value": "loaded" if name == now
                                                      else "unloaded"}}
                for name in sorted(swap.models)]})
        if self.path.startswith("/upstream/"):
            model, _, rest = self.path[len("/upstream/"):].partition("/")
            model = unquote(model)
            if model not in swap.models:
                return self._text(404, "model not found")
            return self._forward(model, "GET", "/" + rest, None)
        return self._text(404, "404 page not found")

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            model = json.loads(raw).get("model")
        except ValueError:
            model = None
        if not model:
            return self._text(400, "missing or invalid 'model' key")
        if model not in self.swap.models:
            return self._text(404, f"could not find suitable handler for {model}")
        return self._forward(model, "POST", self.path, raw)

    def _forward(self, model: str, method: str, path: str, body: bytes | None) -> None:
        port = self.swap.ensure(model)
        upstream = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        upstream.request(method, path, body=body, headers=headers)
        response = upstream.getresponse()
        self.send_response(response.status)
        self.send_header("Content-Type", response.getheader("Content-Type") or "text/plain")
        self.send_header("Connection", "close")
        self.end_headers()
        while True:
            chunk = response.read1(65536)
            if not chunk:
                break
            self.wfile.write(chunk)
            self.wfile.flush()
        upstream.close()
        self.close_connection = True
