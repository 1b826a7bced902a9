"""A local stand-in for TabbyAPI's HTTP API, for what cannot run here (TabbyAPI needs an
NVIDIA GPU). Every response follows TabbyAPI's source, read at two commits:

- main e632af41eba68abeadc3437c62674360f2f8cbf1 (ExLlamaV3 only), and
- exl2-checkpoint 79126f904c2e00aece026b36bb70bbb87e4892b2 (the last ExLlamaV2 branch).

What it mirrors, with the file each rule comes from:
- auth (common/auth.py): API routes read ``x-api-key`` first, then ``Authorization: Bearer``;
  a missing key is 401 {"detail": "Please provide an API key"}, a wrong one 401
  {"detail": "Invalid API key"}; the check runs before the model-loaded check.
- GET /v1/model (endpoints/core/types/model.py, ModelCard): owned_by "tabbyAPI", id the
  model folder's name, parameters with a nested draft ModelCard when a draft is loaded
  (exl2-checkpoint's ExLlamaV2 backend fills it; main's ExLlamaV3 does not); 503
  {"detail": "No models are currently loaded."} without a model.
- POST /v1/chat/completions, streamed (endpoints/OAI/utils/chat_completion.py): SSE events
  with one ``data:`` line each; chunks {"id", "object": "chat.completion.chunk", "created",
  "choices": [{"index": 0, "delta": {"content": ...}, "finish_reason": null}], "model"}
  (exl2-checkpoint: {"id", "choices", "model_name"}); keep-alive ``: ping`` comments (main).
  With stream_options.include_usage the last content chunk holds its finish_reason back and
  a usage chunk follows: choices [{"index": 0, "delta": {}, "finish_reason": ...}] and
  ``usage`` = UsageStats (endpoints/OAI/types/common.py: prompt_tokens, prompt_time,
  prompt_tokens_per_sec, completion_tokens, completion_time, completion_tokens_per_sec,
  total_tokens, total_time; a rate is the string "Indeterminate" when its time is 0, times
  rounded to 2 decimals, endpoints/OAI/utils/common_.py get_usage_stats); then
  ``data: [DONE]``. There is no ``seed`` request field (pydantic drops it).
- No draft acceptance anywhere over HTTP. The ExLlamaV3 backend logs it, per request, after
  the stream has ended (backends/exllamav3/model.py ``generate_gen``, ``finally``:
  ``log_metrics`` of common/gen_logging.py, main e632af41, the lines added in ddd2c409
  "Logging: Add draft metrics"): "Metrics (ID: <request id>): N tokens generated in T
  seconds (Queue: ..., Process: ..., Generate: ... T/s, Context: ... tokens, Draft: A / T
  tokens accepted (R%)) ", A = draft_accept, T = draft_accept + draft_reject; the request id
  is the chunks' id without "chatcmpl-" (endpoints/OAI/utils/chat_completion.py). Printed
  through Rich (common/logger.py): "<time> INFO:     <line>", wrapped at
  TABBY_LOG_CONSOLE_WIDTH columns, else at 80 when the output is not a terminal.
  exl2-checkpoint's ExLlamaV2 backend passes no draft counts: its lines have no Draft part.
  Only tests/tabby_app.py (a launched TabbyAPI) prints these lines.
- admin routes (common/auth.py, endpoints/core/router.py): /v1/model/load and
  /v1/model/unload read ``x-admin-key``, then ``Authorization: Bearer``; the API key is not
  enough (401 {"detail": "Please provide an admin key"} / "Invalid admin key").
- POST /v1/model/unload (endpoints/core/router.py): 200 with body null; 503 without a model.
- POST /v1/model/load (endpoints/core/utils/model.py stream_model_load, types/model.py
  ModelLoadRequest / DraftModelLoadRequest): 400 {"detail": "Could not find the model path
  for load. Check model name or config.yml?"} for an unknown model; otherwise an SSE stream
  of ModelLoadResponse {"model_type", "module", "modules", "status"}: a "processing" event
  per module (module != 0) and a "finished" event after the last, the draft before the
  model, and the stream then just closes (no [DONE]); a load while a model is loaded
  replaces it. main's ExLlamaV3 model card never reports the draft.

What stays unverified: the real server's token timing (the stand-in streams a fixed text at
a fixed pace) and TabbyAPI's own tokenizer and sampler.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
import uuid

TEXT = ("def add(a: int, b: int) -> int:\n    return a + b\n\n"
        "print(add(2, 3))\n").split(" ")


class TabbyHandler(http.server.BaseHTTPRequestHandler):
    api_key = "tabby-api-key"
    admin_key = "tabby-admin-key"
    model_name = "Qwen2.5-32B-Instruct-exl2-4.0bpw"
    draft_name: str | None = None
    branch = "main"  # or "exl2-checkpoint"
    step_s = 0.004
    step_by_draft: dict = {}
    """Seconds per token while a draft is loaded, by draft name (default step_s): how fast a
    real TabbyAPI would be is not this stand-in's to say, so tests choose (both ways)."""
    usage_seen: list = []
    models = ("Qwen2.5-32B-Instruct-exl2-4.0bpw", "Qwen2.5-0.5B-exl2-4.0bpw",
              "Qwen2.5-1.5B-exl2-4.0bpw")
    admin_calls: list = []
    log_metrics = False
    """Print TabbyAPI's metrics line per request on stdout (a launched stand-in)."""
    draft_log: tuple[float, int] | None = None
    """(share of draft tokens accepted, draft tokens per step) for the Draft part of the
    metrics line; None: no Draft part (no drafter, or exl2-checkpoint)."""

    def log_message(self, *args):
        pass

    def _print_metrics(self, request_id: str, tokens: int, seconds: float) -> None:
        """common/gen_logging.py log_metrics, through common/logger.py's Rich console."""
        import datetime
        import os
        import textwrap

        rate = round(tokens / seconds, 2) if seconds else "Indeterminate"
        parts = ["Queue: 0.0 s", "Process: 0 cached tokens and 30 new tokens at "
                 "Indeterminate T/s", f"Generate: {rate} T/s", "Context: 30 tokens"]
        if self.draft_log is not None:
            share, _k = self.draft_log
            total = tokens  # a draft token proposed per token made: accepted <= tokens made
            accept = round(total * share)
            rate = accept / total if total > 0 else 0.0
            parts.append(f"Draft: {accept} / {total} tokens accepted ({rate * 100:.2f}%)")
        line = (f"{datetime.datetime.now():%Y-%m-%d %H:%M:%S.%f}"[:-3] + " INFO:     "
                f"Metrics (ID: {request_id}): {tokens} tokens generated in "
                f"{round(seconds, 2)} seconds (" + ", ".join(parts) + ") ")
        width = int(os.environ.get("TABBY_LOG_CONSOLE_WIDTH") or 80)
        print("\n".join(textwrap.wrap(line, width, break_long_words=False,
                                      break_on_hyphens=False)), flush=True)

    # common/auth.py -------------------------------------------------------------------------
    def _authorized(self, admin: bool = False) -> bool:
        key = self.headers.get("x-admin-key" if admin else "x-api-key")
        if key is None:
            auth = self.headers.get("Authorization")
            if auth is not None:
                parts = auth.split(" ")
                key = parts[1] if len(parts) == 2 and parts[0].lower() == "bearer" else ""
        what = "admin key" if admin else "API key"
        if key is None:
            self._json(401, {"detail": f"Please provide an {what}"})
            return False
        # The admin key passes as an API key too; the API key never as an admin key.
        if key != self.admin_key and (admin or key != self.api_key):
            self._json(401, {"detail": f"Invalid {what}"})
            return False
        return True

    def _json(self, status: int, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            return self._json(200, {"status": "healthy", "issues": []})
        if not self._authorized():
            return None
        if self.path == "/v1/model":
            if not self.model_name:
                return self._json(503, {"detail": "No models are currently loaded."})
            return self._json(200, self._card())
        if self.path == "/v1/models":
            return self._json(200, {"object": "list", "data": [self._card()]})
        return self._json(404, {"detail": "Not Found"})

    def _card(self) -> dict:
        draft = None
        if self.draft_name and self.branch == "exl2-checkpoint":
            draft = {"id": self.draft_name, "object": "model", "created": int(time.time()),
                     "owned_by": "tabbyAPI", "logging": None,
                     "parameters": {"max_seq_len": 16384, "rope_scale": 1.0, "rope_alpha": 1.0,
                                    "cache_mode": "FP16"}}
        return {"id": self.model_name, "object": "model", "created": int(time.time()),
                "owned_by": "tabbyAPI", "logging": None,
                "parameters": {"max_seq_len": 16384, "cache_size": 16384, "cache_mode": "FP16",
                               "rope_scale": 1.0, "rope_alpha": 1.0, "max_batch_size": 1,
                               "chunk_size": 2048, "prompt_template": "chatml",
                               "prompt_template_content": None, "use_vision": False,
                               "draft": draft}}

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path in ("/v1/model/load", "/v1/model/unload"):
            if not self._authorized(admin=True):
                return None
            return self._unload() if self.path.endswith("unload") else self._load(body)
        if not self._authorized():
            return None
        if self.path != "/v1/chat/completions":
            return self._json(404, {"detail": "Not Found"})
        if not self.model_name:
            return self._json(503, {"detail": "No models are currently loaded."})
        max_tokens = body.get("max_tokens") or 16
        pieces = [(" " if i else "") + TEXT[i % len(TEXT)] for i in range(max_tokens)]
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.end_headers()
        cid = f"chatcmpl-{uuid.uuid4().hex}"
        started = time.perf_counter()
        first = None
        for i, piece in enumerate(pieces):
            time.sleep(self.step_by_draft.get(type(self).draft_name, self.step_s))
            first = first or time.perf_counter()
            last = i == len(pieces) - 1
            reason = "length" if last and not include_usage else None
            self._event(self._chunk(cid, {"content": piece}, reason))
            if i == 2 and self.branch == "main":
                self.wfile.write(b": ping\r\n\r\n")
        if include_usage:
            gen = round(time.perf_counter() - first, 2)
            prompt = round(first - started, 2)
            usage = {"prompt_tokens": 30, "prompt_time": prompt,
                     "prompt_tokens_per_sec": "Indeterminate" if prompt == 0 else 30 / prompt,
                     "completion_tokens": len(pieces), "completion_time": gen,
                     "completion_tokens_per_sec": "Indeterminate" if gen == 0 else len(pieces) / gen,
                     "total_tokens": 30 + len(pieces), "total_time": round(prompt + gen, 2)}
            type(self).usage_seen.append(usage)
            chunk = self._chunk(cid, {}, "length")
            chunk["usage"] = usage
            self._event(chunk)
        self.wfile.write(b"data: [DONE]\r\n\r\n")
        self.wfile.flush()
        if self.log_metrics:  # after the stream, as TabbyAPI's ``finally`` does
            self._print_metrics(cid.removeprefix("chatcmpl-"), len(pieces),
                                time.perf_counter() - (first or started))

    def _unload(self):
        cls = type(self)
        if not cls.model_name:
            return self._json(503, {"detail": "No models are currently loaded."})
        cls.admin_calls.append(("unload", cls.model_name, cls.draft_name))
        cls.model_name, cls.draft_name = "", None
        return self._json(200, None)

    def _load(self, body: dict):
        cls = type(self)
        name = body.get("model_name")
        draft = (body.get("draft_model") or {}).get("draft_model_name")
        if not name:
            return self._json(400, {"detail": "A model name was not provided for load."})
        if name not in self.models or (draft and draft not in self.models):
            return self._json(400, {"detail": "Could not find the model path for load. Check "
                                              "model name or config.yml?"})
        cls.admin_calls.append(("load", name, draft))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.end_headers()
        for kind, modules in ((("draft", 3),) if draft else ()) + (("model", 5),):
            for module in range(1, modules + 1):
                event = {"model_type": kind, "module": module, "modules": modules,
                         "status": "processing"}
                self._event(event)
                if module == modules:
                    self._event({**event, "status": "finished"})
        cls.model_name, cls.draft_name = name, draft
        self.wfile.flush()
        self.close_connection = True
        return None

    def _chunk(self, cid: str, delta: dict, reason) -> dict:
        choice = {"index": 0, "delta": delta, "finish_reason": reason}
        if self.branch == "exl2-checkpoint":
            return {"id": cid, "choices": [choice], "model_name": self.model_name}
        return {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()),
                "choices": [choice], "model": self.model_name}

    def _event(self, data: dict) -> None:
        self.wfile.write(b"data: " + json.dumps(data).encode() + b"\r\n\r\n")
        self.wfile.flush()


def start_tabby(**attrs) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = type("Tabby", (TabbyHandler,), {"usage_seen": [], "admin_calls": [], **attrs})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}"
