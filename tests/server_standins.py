"""Local stand-ins for vLLM, SGLang, Ollama and LM Studio (they cannot run here: vLLM and
SGLang need a GPU, Ollama is a service binary, LM Studio is closed), answering the way their
sources do. Sources read:

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
  The per-request metrics follow RequestSpecDecodeMetrics (observe(num_draft_tokens,
  num_accepted) per step: acceptance_histogram[num_accepted] += 1, length num_spec_tokens + 1;
  to_dict: mean_acceptance_length = 1 + accepted / num_spec_steps, and per_step_accepted /
  per_step_drafted in "detailed" mode), as in vLLM 0.33.0 and its copy in vLLM-Omni
  (vllm_omni, RequestSpecDecodeMetrics, read through the code index).
- SGLang 0.5.23 (PyPI wheel; its _version.py names no commit), and the metric names at
  sgl-project/sglang 00ae9c15 python/sglang/srt/metrics/collector.py: GET /v1/models ->
  ModelCards {id, object, created, owned_by "sglang", root, parent, max_model_len}
  (entrypoints/openai/protocol.py); GET /server_info and /get_server_info -> the resolved
  server arguments, flat (speculative_algorithm, speculative_draft_model_path,
  speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens,
  enable_metrics, ...) plus launch_command, kv_events, scheduler info, startup_time,
  internal_states, version, frontend (entrypoints/http_server.py server_info,
  utils/common.py build_server_info); GET /model_info and /get_model_info; no /version. The
  OpenAI-compatible stream: chunks with choices [{index, delta | text, logprobs,
  finish_reason, matched_stop}] and usage null; with return_spec_tokens_details and
  speculative decoding a chunk with choices [] and sglext {routed_experts,
  cached_tokens_details, spec_tokens_details: SpecTokensDetails {spec_accept_rate,
  spec_accept_length = completion_tokens / spec_verify_ct, spec_cap_length,
  spec_block_accept_length, spec_num_correct_drafts, spec_num_proposed_drafts = verify steps
  x (speculative_num_draft_tokens - 1), spec_verify_ct, spec_correct_drafts_histogram (entry
  j: steps that kept j drafts, grown as needed), spec_cap_lens_histogram}, input_ids,
  output_ids}; then the usage chunk and [DONE] (serving_chat.py, openai/utils.py,
  managers/tokenizer_manager.py, managers/schedule_batch.py). /metrics (--enable-metrics):
  sglang:spec_accept_length and sglang:spec_accept_rate are Gauges (labels model_name,
  engine_type, tp_rank, pp_rank, moe_ep_rank; set from the last logged decode batches, 0.0
  before any), sglang:spec_verify_calls_total a Counter (observability/metrics_collector.py).
- Ollama fb30760996871fa9460115c753afd2c60d4ab0f7: GET /api/version -> {"version"};
  /api/tags and /api/ps -> {"models": [{name, model, ...}]}; POST /api/chat streams
  application/x-ndjson lines {model, created_at, message {role, content}, done}; the last has
  done true, done_reason "stop" | "length" and total_duration, load_duration,
  prompt_eval_count, prompt_eval_duration, eval_count, eval_duration in nanoseconds
  (api/types.go, server/routes.go). No draft acceptance anywhere (llm/llama_server.go's
  llamaServerTimings keeps cache_n, prompt_n, prompt_ms, predicted_n, predicted_ms only).
  Drafting: options.draft_num_predict is a Runner option (default 4); routes.go
  modelOptions sets it to 0 when the model has no DRAFT layer and neither the Modelfile nor
  the request set it; appendDraftArgs drafts only with a draft type (DRAFT layer, or MTP
  layers: <arch>.nextn_predict_layers) and n > 0; sched.go needsReload reloads a runner whose
  Runner options differ; POST /api/generate with an empty prompt only loads (done_reason
  "load"); POST /api/show -> {modelfile (FROM, DRAFT, PARAMETER lines), parameters
  ("%-*s %#v", 30 wide), template, details, model_info, capabilities, modified_at}.

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
  (observed). A response's `stats` for speculative decoding has draft_model,
  total_draft_tokens_count, accepted_draft_tokens_count, rejected_draft_tokens_count,
  ignored_draft_tokens_count (api-changelog.md, 0.3.10, exact names); that accepted +
  rejected + ignored make the total is not documented, but every report seen does (a user's
  live /v1/chat/completions: 35 = 31 + 0 + 4, found through the code index). Whether a
  stream carries `stats` is not documented (0.3.x streams did not): ``stats_in_stream``
  chooses, and the tests try both.

Unverified: real timing, tokenizers and samplers of all four; SGLang's gauges' exact timing
(when the scheduler logs them) is modelled as an average over its last 40 decode steps.
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

    def _metrics(self, text: str, content_type: str) -> None:
        """Prometheus' text format, as prometheus_client serves it (no Content-Length)."""
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.end_headers()
        self.wfile.write(text.encode())

    def _body(self) -> dict:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        type(self).seen.append((self.path, body))
        return body


class VllmHandler(_Base):
    model = "Qwen/Qwen2.5-32B-Instruct"
    speculative = False
    per_request_metrics = False  # True / "summary", or "detailed" (per-step lists too)
    counters = None  # dict, per server
    skew = (0, 0)
    """Drafted and accepted the counters grow by beside each request (other traffic)."""
    metrics_override: dict = {}
    """Fields of metrics.speculative_decoding replaced (hostile readings)."""

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
            return self._metrics("\n".join(lines) + "\n", "text/plain; version=0.0.4")
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
        # Up to four drafts a step (the last step may draft fewer), each step keeping a
        # prefix of its drafts: vLLM's RequestSpecDecodeMetrics.observe(num_draft_tokens,
        # num_accepted) per step, and its counters grown by the same steps.
        proposed = [4] * (drafted // 4) + ([drafted % 4] if drafted % 4 else [])
        kept, left = [], accepted
        for d in proposed:
            kept.append(min(d, left))
            left -= kept[-1]
        self.counters["drafted"] += drafted + self.skew[0]
        self.counters["accepted"] += accepted + self.skew[1]
        self.counters["drafts"] += len(proposed)
        # Position i counts the steps that kept more than i (they add up to the accepted).
        positions = self.counters.setdefault("positions", [0, 0, 0, 0])
        positions[0] += self.skew[1]  # the other traffic's steps each kept one draft
        self.counters["drafts"] += self.skew[1]
        for k in kept:
            for i in range(k):
                positions[i] += 1
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {**base, "choices": [],
                     "usage": {"prompt_tokens": 30, "completion_tokens": n, "total_tokens": 30 + n}}
            if self.speculative and self.per_request_metrics:
                histogram = [0] * 5
                for k in kept:
                    histogram[k] += 1
                metrics = {
                    "mean_acceptance_length": 1.0 + accepted / len(kept) if kept else 1.0,
                    "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
                    "acceptance_histogram": histogram, "num_spec_steps": len(kept),
                    "num_accepted_draft_tokens": accepted, "num_draft_tokens": drafted,
                    "num_spec_tokens": 4}
                if self.per_request_metrics == "detailed":
                    metrics.update(per_step_accepted=kept, per_step_drafted=proposed)
                metrics.update(self.metrics_override)
                usage["metrics"] = {"speculative_decoding": metrics}
            self.wfile.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


class OllamaHandler(_Base):
    model = "qwen2.5:32b"
    loaded = True
    extra_models: tuple = ()
    draft_layer = False
    """The model has a DRAFT layer (Modelfile DRAFT; Model.DraftPath, server/images.go)."""
    mtp_layers = 0
    """<arch>.nextn_predict_layers in its GGUF (hasMTPDraft, llm/llama_server.go)."""
    params: dict = {}
    """The model's Modelfile PARAMETERs (Model.Options), e.g. {"draft_num_predict": 4}."""
    load_s = 0.02
    runner = None  # per server: {"options": the loaded Runner options, "loads": [...]}

    def _draft_n(self, request_options: dict) -> int:
        """routes.go modelOptions: DefaultOptions (4), the model's options, the request's;
        0 when neither set it and the model has no DRAFT layer."""
        n = 4
        for source in (self.params, request_options):
            if "draft_num_predict" in source:
                n = int(source["draft_num_predict"])
        if not self.draft_layer and "draft_num_predict" not in self.params \
                and "draft_num_predict" not in request_options:
            n = 0
        return n

    def _schedule(self, request_options: dict) -> tuple[bool, int]:
        """sched.go: a runner whose Runner options differ is reloaded (needsReload). Returns
        (whether llama-server drafts: appendDraftArgs needs a draft type and n > 0, the load
        duration in ns)."""
        n = self._draft_n(request_options)
        options = {"draft_num_predict": n}
        load_ns = 1000
        if self.runner.get("options") != options:
            time.sleep(self.load_s)
            self.runner["options"] = options
            self.runner["loads"].append((self.path, options))
            load_ns = int(self.load_s * 1e9)
        return (self.draft_layer or self.mtp_layers > 0) and n > 0, load_ns

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

    def _show(self, body: dict):
        """ShowResponse (api/types.go): parameters as routes.go GetModelInfo formats them
        ("%-*s %#v", 30), the Modelfile with FROM / DRAFT / PARAMETER lines (Model.String),
        model_info from the GGUF's KV."""
        if body.get("model") != self.model:
            return self._json(404, {"error": f"model '{body.get('model')}' not found"})
        lines = ["# Modelfile generated by \"ollama show\"",
                 "# To build a new Modelfile based on this, replace FROM with:",
                 f"# FROM {self.model}", "", "FROM /root/.ollama/models/blobs/sha256-1111"]
        if self.draft_layer:
            lines.append("DRAFT /root/.ollama/models/blobs/sha256-2222")
        lines += [f"PARAMETER {k} {v}" for k, v in self.params.items()]
        info = {"general.architecture": "qwen2", "qwen2.block_count": 64,
                "qwen2.context_length": 32768}
        if self.mtp_layers:
            info["qwen2.nextn_predict_layers"] = self.mtp_layers
        return self._json(200, {
            "modelfile": "\n".join(lines) + "\n",
            "parameters": "\n".join(f"{k:<30} {v}" for k, v in self.params.items()),
            "template": "{{ .Prompt }}", "details": {"format": "gguf", "family": "qwen2",
                                                     "parameter_size": "32.8B",
                                                     "quantization_level": "Q4_K_M"},
            "model_info": info, "capabilities": ["completion"],
            "modified_at": "2026-11-23T22:00:00Z"})

    def do_POST(self):
        body = self._body()
        if self.path == "/api/show":
            return self._show(body)
        if self.path not in ("/api/chat", "/api/generate"):
            return self._json(404, {"error": "not found"})
        if body.get("model") != self.model:
            return self._json(404, {"error": f"model '{body.get('model')}' not found"})
        options = body.get("options") or {}
        drafting, load_ns = self._schedule(options)
        if self.path == "/api/generate" and not body.get("prompt"):  # load only
            return self._json(200, {"model": self.model, "created_at": "2026-11-23T22:00:00Z",
                                    "response": "", "done": True, "done_reason": "load"})
        n = options.get("num_predict") or 16
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.end_headers()
        started = time.perf_counter()
        first = None

        def piece(text):
            if self.path == "/api/chat":
                return {"message": {"role": "assistant", "content": text}}
            return {"response": text}

        for word in _words(n):
            time.sleep(self.step_s / (2 if drafting else 1))
            first = first or time.perf_counter()
            line = {"model": self.model, "created_at": "2026-11-23T22:00:00Z", **piece(word),
                    "done": False}
            self.wfile.write(json.dumps(line).encode() + b"\n")
            self.wfile.flush()
        end = time.perf_counter()
        self.wfile.write(json.dumps({
            "model": self.model, "created_at": "2026-11-23T22:00:01Z", **piece(""),
            "done": True, "done_reason": "length",
            "total_duration": int((end - started) * 1e9), "load_duration": load_ns,
            "prompt_eval_count": 30, "prompt_eval_duration": int((first - started) * 1e9),
            "eval_count": n, "eval_duration": int((end - first) * 1e9)}).encode() + b"\n")
        self.wfile.flush()
        return None


class SglangHandler(_Base):
    """SGLang 0.5.23 as its sources answer (see the module's docstring for the files):
    /v1/models owned_by "sglang", /server_info (and the deprecated /get_server_info) with
    the resolved server arguments, the OpenAI-compatible stream with an sglext chunk when a
    request asks for return_spec_tokens_details and the server drafts, then the usage chunk
    and [DONE]; /metrics with the two acceptance gauges (set from the recent decode steps,
    as the scheduler's last logged batches set them) and spec_verify_calls_total."""

    model = "Qwen/Qwen2.5-7B-Instruct"
    algorithm: str | None = None  # --speculative-algorithm: None, "EAGLE3", "NGRAM", ...
    num_draft_tokens = 4  # --speculative-num-draft-tokens: the verify window (3 drafts + 1)
    enable_metrics = True
    kept_cycle = (2, 1, 3, 0)
    """Drafts each verify step keeps, in turn (at most num_draft_tokens - 1)."""
    log_window = 40
    """Decode steps the gauges average over (the scheduler logs every 40 decode batches)."""
    gauge_text: str | None = None
    """Replaces the two gauges' lines in /metrics (hostile readings)."""
    details_override: dict = {}
    state = None  # per server: gauges and recent steps

    def _server_args(self) -> dict:
        return {"model_path": self.model, "tokenizer_path": self.model,
                "served_model_name": self.model, "host": "127.0.0.1", "port": 30000,
                "speculative_algorithm": self.algorithm,
                "speculative_draft_model_path": "lmsys/EAGLE3-Qwen2.5-7B" if self.algorithm
                in ("EAGLE", "EAGLE3") else None,
                "speculative_num_steps": 3 if self.algorithm else None,
                "speculative_eagle_topk": 1 if self.algorithm else None,
                "speculative_num_draft_tokens": self.num_draft_tokens if self.algorithm
                else None,
                "enable_metrics": self.enable_metrics,
                "launch_command": "python -m sglang.launch_server --model-path " + self.model,
                "kv_events": None, "max_total_num_tokens": 400000, "max_req_input_len": 32762,
                "startup_time": 1795470000.0,
                "internal_states": [{"last_gen_throughput": 0.0, "memory_usage": {}}],
                "version": "0.5.23", "frontend": "python"}

    def do_GET(self):
        if self.path == "/v1/models":
            return self._json(200, {"object": "list", "data": [{
                "id": self.model, "object": "model", "created": int(time.time()),
                "owned_by": "sglang", "root": self.model, "parent": None,
                "max_model_len": 32768}]})
        if self.path in ("/server_info", "/get_server_info"):
            return self._json(200, self._server_args())
        if self.path in ("/model_info", "/get_model_info"):
            return self._json(200, {"model_path": self.model, "served_model_name": self.model,
                                    "tokenizer_path": self.model, "is_generation": True,
                                    "preferred_sampling_params": None, "weight_version": None,
                                    "model_type": "qwen2",
                                    "architectures": ["Qwen2ForCausalLM"]})
        if self.path == "/metrics" and self.enable_metrics:
            labels = (f'engine_type="unified",model_name="{self.model}",moe_ep_rank="0",'
                      'pp_rank="0",tp_rank="0"')
            st = self.state
            gauges = self.gauge_text if self.gauge_text is not None else (
                f"sglang:spec_accept_length{{{labels}}} {st['accept_length']}\n"
                f"sglang:spec_accept_rate{{{labels}}} {st['accept_rate']}\n")
            text = ("# HELP sglang:spec_accept_length Mean acceptance length of speculative "
                    "decoding (accepted drafts + bonus token per forward).\n"
                    "# TYPE sglang:spec_accept_length gauge\n"
                    "# TYPE sglang:spec_accept_rate gauge\n" + gauges +
                    "# TYPE sglang:spec_verify_calls_total counter\n"
                    f"sglang:spec_verify_calls_total{{{labels}}} {float(st['verify_calls'])}\n")
            return self._metrics(text, "text/plain; version=0.0.4; charset=utf-8")
        return self._json(404, {"detail": "Not Found"})

    def _steps(self, n: int) -> list[int]:
        """Drafts kept per verify step for n tokens: the first token comes from the prefill,
        each step then makes its kept drafts + 1."""
        kept, made, i = [], 1, 0
        while made < n:
            k = min(self.kept_cycle[i % len(self.kept_cycle)], self.num_draft_tokens - 1,
                    n - made - 1)
            kept.append(k)
            made += k + 1
            i += 1
        return kept

    def do_POST(self):
        body = self._body()
        chat = self.path == "/v1/chat/completions"
        if self.path not in ("/v1/chat/completions", "/v1/completions"):
            return self._json(404, {"detail": "Not Found"})
        n = body.get("max_tokens") or 16
        kept = self._steps(n) if self.algorithm else []
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        base = {"id": "7c1e2b", "object": "chat.completion.chunk" if chat else
                "text_completion", "created": int(time.time()), "model": body.get("model")
                or self.model}

        def send(data):
            self.wfile.write(b"data: " + json.dumps(data).encode() + b"\n\n")
            self.wfile.flush()

        def choice(text, reason=None):
            if chat:
                return {"index": 0, "delta": {"role": "assistant", "content": text},
                        "logprobs": None, "finish_reason": reason, "matched_stop": None}
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": reason,
                    "matched_stop": None}

        words = _words(n)
        for i, word in enumerate(words):
            time.sleep(self.step_s / (2 if self.algorithm else 1))
            send({**base, "choices": [choice(word, "length" if i == n - 1 else None)],
                  "usage": None})
        st = self.state
        if kept:
            st["verify_calls"] += len(kept)
            st["recent"] = (st.get("recent", []) + kept)[-self.log_window:]
            recent = st["recent"]
            st["accept_length"] = 1 + sum(recent) / len(recent)
            st["accept_rate"] = sum(recent) / (len(recent) * (self.num_draft_tokens - 1))
        if kept and body.get("return_spec_tokens_details"):
            histogram = [0] * (max(kept) + 1)
            for k in kept:
                histogram[k] += 1
            proposed = len(kept) * (self.num_draft_tokens - 1)
            details = {"spec_accept_rate": sum(kept) / proposed,
                       "spec_accept_length": n / len(kept), "spec_cap_length": 0.0,
                       "spec_block_accept_length": 0.0, "spec_num_correct_drafts": sum(kept),
                       "spec_num_proposed_drafts": proposed, "spec_verify_ct": len(kept),
                       "spec_correct_drafts_histogram": histogram, "spec_cap_lens_histogram": [],
                       **self.details_override}
            send({**base, "choices": [], "usage": None, "sglext": {
                "routed_experts": None, "cached_tokens_details": None,
                "spec_tokens_details": details, "input_ids": None, "output_ids": None}})
        if (body.get("stream_options") or {}).get("include_usage"):
            send({**base, "choices": [], "usage": {
                "prompt_tokens": 30, "total_tokens": 30 + n, "completion_tokens": n,
                "prompt_tokens_details": None, "reasoning_tokens": 0}})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        return None


class LmStudioHandler(_Base):
    model = "qwen2.5-7b-instruct"
    models = ("qwen2.5-7b-instruct", "qwen2.5-0.5b-instruct")
    api_version = "v0"  # "v1": LM Studio 0.4's models list only
    stats_in_stream = False
    api_token: str | None = None
    stats_override: dict = {}
    """Fields of a drafting response's stats replaced (hostile readings)."""

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
                              "ignored_draft_tokens_count": 1, **self.stats_override})
            last["stats"] = stats
        send(last)
        if (body.get("stream_options") or {}).get("include_usage"):
            send({**base, "choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": n,
                                                   "total_tokens": 30 + n}})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        return None


def serve_standins():
    """For a fixture (``yield from serve_standins()``): yields make(Handler, **attrs) ->
    (url, handler class); every server it started is shut at the end."""
    servers = []

    def make(kind, **attrs):
        server, url, handler = start(kind, **attrs)
        servers.append(server)
        return url, handler

    yield make
    for server in servers:
        server.shutdown()
        server.server_close()


def start(handler_class, **attrs):
    extra = {"seen": []}
    if handler_class is VllmHandler:
        extra["counters"] = {"drafts": 0, "drafted": 0, "accepted": 0}
    if handler_class is OllamaHandler:
        extra["runner"] = {"options": None, "loads": []}
    if handler_class is SglangHandler:
        extra["state"] = {"accept_length": 0.0, "accept_rate": 0.0, "verify_calls": 0}
    handler = type(handler_class.__name__, (handler_class,), {**extra, **attrs})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}", handler
