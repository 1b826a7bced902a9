"""The request each server kind is sent for one generation: its route and its JSON body.

Every kind streams, with the sampling and token limit of the plan; each says greedy, "do not
stop at EOS" and "no cached prompt" its own way, and a few take drafting per request
(LM Studio's draft model, Ollama's draft_num_predict, SGLang's per-request drafting counts).

A replay (core.tune.replay) speaks llama-server's own routes instead, in token ids: its chat
template (``template_body``), its tokenizer (``tokenize_body``) and a greedy ``/completion``
of ids (``completion_body``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specdeck.core.engines.base import GenerationRequest
from specdeck.core.errors import InvalidInputError
from specdeck.core.servers.kinds import ServerKind


def request_body(request: GenerationRequest, kind: ServerKind, model: str | None, arm,
                 ollama_options: dict[str, int]) -> tuple[str, dict[str, Any]]:
    """The route and body for ``request`` on a ``kind`` server serving ``arm`` (the plan's
    arm: its name and its per-request draft model), naming ``model`` when given."""
    s = request.sampling
    body: dict[str, Any] = {"stream": True, "temperature": s.temperature,
                            "seed": 0 if s.seed is None else s.seed}
    if s.top_p < 1.0:
        body["top_p"] = s.top_p
    if model:
        body["model"] = model
    if kind is ServerKind.OLLAMA:
        if not model:
            raise InvalidInputError(
                f"Arm {arm.name}: Ollama needs the model's name in every request.",
                "Give it after the URL: http://127.0.0.1:11434#qwen2.5:32b")
        options = {"temperature": s.temperature, "seed": body["seed"],
                   "num_predict": request.max_new_tokens, **ollama_options}
        if s.greedy:
            options["top_k"] = 1
        body = {"model": model, "stream": True, "options": options}
        if request.apply_chat_template:
            body["messages"] = user_message(request.prompt)
            return "/api/chat", body
        body["prompt"], body["raw"] = request.prompt, True
        return "/api/generate", body
    body["max_tokens"] = request.max_new_tokens
    body["stream_options"] = {"include_usage": True}
    if kind in (ServerKind.LLAMA_SERVER, ServerKind.LLAMA_SWAP):
        body["cache_prompt"] = False  # no arm gets a cheaper prefill from a cached prompt
        if s.greedy:
            body["top_k"] = 1
        if not request.stop_on_eos:
            body["ignore_eos"] = True
    elif kind is ServerKind.TABBYAPI:
        if s.greedy:
            body["top_k"] = 1
        if not request.stop_on_eos:
            body["ban_eos_token"] = True
    elif kind in (ServerKind.VLLM, ServerKind.SGLANG):
        if s.greedy:
            body["top_k"] = 1
        if not request.stop_on_eos:
            body["ignore_eos"] = True
        if kind is ServerKind.SGLANG:
            # Per request, exact: a chunk with sglext.spec_tokens_details (SGLang 0.5.23).
            body["return_spec_tokens_details"] = True
    chat = request.apply_chat_template
    if chat:
        body["messages"] = user_message(request.prompt)
    else:
        body["prompt"] = request.prompt
    if kind is ServerKind.LMSTUDIO and arm.server.draft_model:
        # Per request (LM Studio's API changelog, 0.3.10): it loads the draft itself.
        body["draft_model"] = arm.server.draft_model
    # LM Studio: its OpenAI-compatible routes, whose stream carries usage with
    # include_usage (0.3.18); its own /api/v0 stream carries neither usage nor stats.
    return ("/v1/chat/completions" if chat else "/v1/completions"), body


def user_message(text: str) -> list[dict[str, str]]:
    """A chat of one user message: how every chat request sends a prompt."""
    return [{"role": "user", "content": text}]


def template_body(text: str) -> dict[str, Any]:
    """llama-server's ``POST /apply-template``: ``text`` as one user message, through the
    model's chat template (the prompt a chat completion would decode)."""
    return {"messages": user_message(text)}


def tokenize_body(text: str) -> dict[str, Any]:
    """llama-server's ``POST /tokenize``: special tokens added and parsed, as a chat
    completion tokenizes its templated prompt."""
    return {"content": text, "add_special": True, "parse_special": True}


def completion_body(prompt: Sequence[int], max_new: int, *, stop_on_eos: bool = False,
                    stream: bool = False, slot: int | None = None, reuse: bool = True,
                    n_probs: int = 0) -> dict[str, Any]:
    """llama-server's ``POST /completion`` of ``prompt`` token ids: greedy (``top_k`` 1,
    seed 0), up to ``max_new`` tokens, the ids it generated returned (``return_tokens``).
    No cached prefix, unless ``slot`` names the slot whose prompt cache the request reuses
    (a teacher-forced pass grows one prompt a token at a time; ``reuse`` False: the prompt
    is decoded whole in that slot, as a run without one decodes it, and the slot keeps it);
    ``n_probs``: the top tokens and their probabilities at each position."""
    body: dict[str, Any] = {"prompt": list(prompt), "n_predict": max_new,
                            "temperature": 0.0, "top_k": 1, "seed": 0,
                            "return_tokens": True,
                            "cache_prompt": slot is not None and reuse,
                            "stream": stream, "ignore_eos": not stop_on_eos}
    if slot is not None:
        body["id_slot"] = slot
    if n_probs:
        body["n_probs"] = n_probs
    return body
