"""Local stand-ins for vLLM and Ollama (they cannot run here: vLLM needs a GPU, Ollama is a
service binary), answering the way their sources do. Sources read:

- vLLM 0.33.0 (PyPI sdist, vllm/_version.py commit 4ba787ec9):
  GET /version -> {"version"} (entrypoints/serve/instrumentator/basic.py); GET /v1/models ->
  {"object": "list", "data": [ModelCard: id, object "model", owned_by "vllm", root,
  max_model_len, ...]} (entrypoints/serve/engine/protocol.py); streamed chat chunks
  {id, object "chat.completion.chunk", created, model, choices [{index, delta, logprobs,
  finish_reason, stop_reason}]}, the first delta {"role": "assistant", "content": ""}; with
  stream_options.include_usage a last chunk with choices [] and usage {prompt_tokens,
  completion_tokens, total_tokens} (+ metrics.speculative_decoding with
  --per-request-spec-decode-metrics: mean_acceptance_length, draft_acceptance_rate,
  acceptance_histogram, num_spec_steps, num_accepted_draft_tokens, num_draft_tokens,
  num_spec_tokens; generate/base/protocol.py, v1/metrics/stats.py); always data: [DONE]
  (chat_completion/serving.py). Prometheus counters vllm:spec_decode_num_drafts_total,
  ..._num_draft_tokens_total, ..._num_accepted_tokens_total, ..._per_pos_total{position},
  labels engine and model_name, with *_created gauges beside them (v1/spec_decode/metrics.py),
  registered only when the server runs with a speculative config (SpecDecodingProm.__init__
  returns early without one; the same at vllm-project/vllm 016a8587).
- Ollama fb30760996871fa9460115c753afd2c60d4ab0f7: GET /api/version -> {"version"};
  /api/tags and /api/ps -> {"models": [{name, model, ...}]}; POST /api/chat streams
  application/x-ndjson lines {model, created_at, message {role, content}, done}; the last has
  done true, done_reason "stop" | "length" and total_duration, load_duration,
  prompt_eval_count, prompt_eval_duration, eval_count, eval_duration in nanoseconds
  (api/types.go, server/routes.go). No draft acceptance anywhere.

- LM Studio (closed source): its official docs, lmstudio-ai/docs c6854fba, and the SDK's
  types in lmstudio-ai/lmstudio-js 6ec11db1. GET /api/v0/models -> {"object": "list",
  "data": [{id, object "model", type, publisher, arch, compatibility_type, quantization,
  state "loaded" | "not-loaded", max_context_length}]} (1_developer/2_rest/endpoints.mdx);
  GET /api/v1/models (0.4) -> {"models": [{type, publisher, key, display_name, ...,
  loaded_instances [{id, config}]}]} (2_rest/list.md); GET /v1/models -> data [{id, object,
  owned_by "organization_owner"}] (observed, JetBrains/koog #139); POST /v1/chat/completions
  streams chat.completion.chunk objects whose system_fingerprint is the model id, then with
  stream_options.include_usage a usage chunk (api-changelog.md, 0.3.18), then [DONE]
  (observed: lmstudio-bug-tracker #676); the request's "draft_model" loads a draft
  (api-changelog.md, 0.3.10); a missing API token answers 401 {"error": {"type":
  "invalid_request", "code": "invalid_api_key", "message": ...}} (observed, opencode-lmstudio
  #41); unknown routes answer 200 {"error": "Unexpected endpoint or method. (GET /x)"}
  (observed). Whether a stream carries `stats` with draft counts is not documented (0.3.x
  streams did not): ``stats_in_stream`` chooses, and the tests try both.

Unverified: real timing, tokenizers and samplers of all three.
"""

from __future__ import annotations

import http.server
import json
import threading
import time

WORDS = "The library opens at nine and closes at six in the evening .".split(" ")


def _words(n: int) -> list[str]:
    return [(" " if i else "") + WORDS[i % len(WORDS)] for i in range(n)]


class _Base(http.server.BaseHTTPRequestHandler):
    step_s = 0.003
    seen: list = []

    def log_message(self, *args):
        pass

    def _json(self, status, body, content_type="application/json"):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        type(self).seen.append((self.path, body))
        return body


class VllmHandler(_Base):
    model = "Qwen/Qwen2.5-32B-Instruct"
    speculative = False
    per_request_metrics = False
    counters = None  # dict, per server

    def do_GET(self):
        if self.path == "/version":
            return self._json(200, {"version": "0.33.0"})
        if self.path == "/v1/models":
            return self._json(200, {"object": "list", "data": [{
                "id": self.model, "object": "model", "created": int(time.time()),
                "owned_by": "vllm", "root": "/models/" + self.model, "parent": None,
                "max_model_len": 32768, "permission": []}]})
        if self.path == "/metrics":
            c = self.counters
            lines = ["# TYPE vllm:num_requests_running gauge",
                     f'vllm:num_requests_running{{engine="0",model_name="{self.model}"}} 0.0']
            for name, value in () if not self.speculative else (("num_drafts", c["drafts"]), ("num_draft_tokens", c["drafted"]),
                                ("num_accepted_tokens", c["accepted"])):
                lines += [f"# TYPE vllm:spec_decode_{name}_total counter",
                          f'vllm:spec_decode_{name}_total{{engine="0",model_name="{self.model}"}} '
                          f"{float(value)}",
                          f'vllm:spec_decode_{name}_created{{engine="0",model_name="{self.model}"}} '
                          "1.79547e+09"]
            for position, value in enumerate(c.get("positions", [0, 0, 0, 0])
                                             if self.speculative else ()):
                lines.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",'
                             f'model_name="{self.model}",position="{position}"}} {float(value)}')
            data = ("\n".join(lines) + "\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(data)
            return None
        return self._json(404, {"detail": "Not Found"})

    def do_POST(self):
        body = self._body()
        n = body.get("max_tokens") or 16
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.end_headers()
        base = {"id": "chatcmpl-1", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": self.model}

        def chunk(delta, reason=None, extra=None):
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
            if reason:
                choice["stop_reason"] = None
            data = {**base, "choices": [choice], **(extra or {})}
            self.wfile.write(b"data: " + json.dumps(data).encode() + b"\n\n")
            self.wfile.flush()

        chunk({"role": "assistant", "content": ""})
        words = _words(n)
        for i, word in enumerate(words):
            time.sleep(self.step_s)
            chunk({"content": word}, "length" if i == len(words) - 1 else None)
        drafted, accepted = (3 * n // 4, n // 2) if self.speculative else (0, 0)
        self.counters["drafted"] += drafted
        self.counters["accepted"] += accepted
        self.counters["drafts"] += drafted // 4
        # Four drafts a step, each step keeping a prefix: position i counts the steps that
        # kept more than i (vLLM's per-position counter; they add up to the accepted).
        steps, positions = drafted // 4, self.counters.setdefault("positions", [0, 0, 0, 0])
        for step in range(steps):
            kept = min(4, accepted // steps + (step < accepted % steps))
            for i in range(kept):
                positions[i] += 1
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {**base, "choices": [],
                     "usage": {"prompt_tokens": 30, "completion_tokens": n, "total_tokens": 30 + n}}
            if self.speculative and self.per_request_metrics:
                usage["metrics"] = {"speculative_decoding": {
                    "mean_acceptance_length": 1 + accepted / max(1, drafted // 4),
                    "draft_acceptance_rate": accepted / drafted, "acceptance_histogram": [1, 2],
                    "num_spec_steps": drafted // 4, "num_accepted_draft_tokens": accepted,
                    "num_draft_tokens": drafted, "num_spec_tokens": 4}}
            self.wfile.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


class OllamaHandler(_Base):
    model = "qwen2.5:32b"
    loaded = True
    extra_models: tuple = ()

    def do_GET(self):
        if self.path == "/api/version":
            return self._json(200, {"version": "0.13.0"})
        if self.path in ("/api/tags", "/api/ps"):
            names = [self.model] if self.path == "/api/ps" else [self.model, *self.extra_models]
            models = [] if self.path == "/api/ps" and not self.loaded else [
                {"name": name, "model": name, "size": 19851336960, "digest": "abc",
                 "details": {"family": "qwen2", "parameter_size": "32.8B",
                             "quantization_level": "Q4_K_M"}} for name in names]
            return self._json(200, {"models": models})
        return self._json(404, {"error": "not found"})

    def do_POST(self):
        body = self._body()
        if self.path != "/api/chat":
            return self._json(404, {"error": "not found"})
        if body.get("model") != self.model:
            return self._json(404, {"error": f"model '{body.get('model')}' not found"})
        n = (body.get("options") or {}).get("num_predict") or 16
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.end_headers()
        started = time.perf_counter()
        first = None
        for word in _words(n):
            time.sleep(self.step_s)
            first = first or time.perf_counter()
            line = {"model": self.model, "created_at": "2026-11-23T22:00:00Z",
                    "message": {"role": "assistant", "content": word}, "done": False}
            self.wfile.write(json.dumps(line).encode() + b"\n")
            self.wfile.flush()
        end = time.perf_counter()
        self.wfile.write(json.dumps({
            "model": self.model, "created_at": "2026-11-23T22:00:01Z",
            "message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "length",
            "total_duration": int((end - started) * 1e9), "load_duration": 1000,
            "prompt_eval_count": 30, "prompt_eval_duration": int((first - started) * 1e9),
            "eval_count": n, "eval_duration": int((end - first) * 1e9)}).encode() + b"\n")
        self.wfile.flush()
        return None


class LmStudioHandler(_Base):
    model = "qwen2.5-7b-instruct"
    models = ("qwen2.5-7b-instruct", "qwen2.5-0.5b-instruct")
    api_version = "v0"  # "v1": LM Studio 0.4's models list only
    stats_in_stream = False
    api_token: str | None = None

    def _authorized(self) -> bool:
        if self.api_token is None or self.headers.get("Authorization") == f"Bearer {self.api_token}":
            return True
        self._json(401, {"error": {
            "type": "invalid_request", "code": "invalid_api_key",
            "message": "An LM Studio API token is required to make requests to this server, "
                       "but none was provided using the Authorization header using the "
                       "'Bearer' scheme (i.e., 'Authorization: Bearer $LM_API_TOKEN')."}})
        return False

    def do_GET(self):
        if not self._authorized():
            return None
        if self.path == "/api/v0/models" and self.api_version == "v0":
            return self._json(200, {"object": "list", "data": [
                {"id": m, "object": "model", "type": "llm", "publisher": "lmstudio-community",
                 "arch": "qwen2", "compatibility_type": "gguf", "quantization": "Q4_K_M",
                 "state": "loaded" if m == self.model else "not-loaded",
                 "max_context_length": 32768} for m in self.models]})
        if self.path == "/api/v1/models":
            return self._json(200, {"models": [
                {"type": "llm", "publisher": "lmstudio-community", "key": m, "display_name": m,
                 "architecture": "qwen2", "quantization": {"name": "Q4_K_M", "bits_per_weight": 4},
                 "size_bytes": 4683073984, "params_string": "7B",
                 "loaded_instances": [{"id": m, "config": {"context_length": 4096}}]
                 if m == self.model else [], "max_context_length": 32768, "format": "gguf"}
                for m in self.models]})
        if self.path == "/v1/models":
            return self._json(200, {"data": [{"id": m, "object": "model",
                                              "owned_by": "organization_owner"}
                                             for m in self.models], "object": "list"})
        return self._json(200, {"error": f"Unexpected endpoint or method. (GET {self.path})"})

    def do_POST(self):
        if not self._authorized():
            return None
        body = self._body()
        if self.path != "/v1/chat/completions":
            return self._json(200, {"error": f"Unexpected endpoint or method. (POST {self.path})"})
        n = body.get("max_tokens") or 16
        draft = body.get("draft_model")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        base = {"id": "chatcmpl-lms1", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": body.get("model") or self.model,
                "system_fingerprint": body.get("model") or self.model}

        def send(data):
            self.wfile.write(b"data: " + json.dumps(data).encode() + b"\n\n")
            self.wfile.flush()

        words = _words(n)
        started = time.perf_counter()
        for i, word in enumerate(words):
            time.sleep(self.step_s / (2 if draft else 1))
            send({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": word},
                                       "logprobs": None, "finish_reason": None}]})
        last = {**base, "choices": [{"index": 0, "delta": {}, "logprobs": None,
                                     "finish_reason": "length"}]}
        if self.stats_in_stream:
            seconds = time.perf_counter() - started
            stats = {"tokens_per_second": n / seconds, "time_to_first_token": 0.05,
                     "generation_time": seconds, "stop_reason": "maxPredictedTokensReached"}
            if draft:
                stats.update({"draft_model": draft, "total_draft_tokens_count": n,
                              "accepted_draft_tokens_count": 3 * n // 4,
                              "rejected_draft_tokens_count": n // 4 - 1,
                              "ignored_draft_tokens_count": 1})
            last["stats"] = stats
        send(last)
        if (body.get("stream_options") or {}).get("include_usage"):
            send({**base, "choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": n,
                                                   "total_tokens": 30 + n}})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        return None


def start(handler_class, **attrs):
    extra = {"seen": []}
    if handler_class is VllmHandler:
        extra["counters"] = {"drafts": 0, "drafted": 0, "accepted": 0}
    handler = type(handler_class.__name__, (handler_class,), {**extra, **attrs})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}", handler
