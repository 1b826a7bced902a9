"""One run of a llama-server without drafting, kept as token ids: what a replay needs.

A prompt goes through the server's own chat template (``POST /apply-template``) and tokenizer
(``POST /tokenize``, special tokens added and parsed as a chat completion does), then to
``POST /completion`` as token ids with ``return_tokens``, greedy (``top_k`` 1), with no cached
prefix. So the ids are exactly those the server decodes, and a drafting server sent the same
ids decodes the same request. It is streamed: each token's arrival time says what each step
of the generation cost (:mod:`.costs`); the answer's ``timings`` are kept too.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from specdeck.core.errors import CancelledError
from specdeck.core.servers.payload import completion_body, template_body, tokenize_body
from specdeck.core.servers.readings import answer_timings
from specdeck.core.servers.transport import BadAnswerError, Base, request_json, stream_sse
from specdeck.core.tune.replay.session import Request

CAPTURE_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Captured:
    """One prompt's plain run."""

    prompt_id: str
    request: Request
    stop: str
    """llama-server's ``stop_type``: "limit", "eos" or "word"."""
    prompt_ms: float = 0.0
    predicted_ms: float = 0.0
    timings: dict = field(default_factory=dict, compare=False)
    arrivals: tuple[float, ...] = ()
    """Seconds from the request to each output token's arrival."""

    def to_json(self) -> dict:
        return {"prompt_id": self.prompt_id, "prompt": list(self.request.prompt),
                "output": list(self.request.output), "n_predict": self.request.n_predict,
                "stop": self.stop, "prompt_ms": self.prompt_ms,
                "predicted_ms": self.predicted_ms,
                "arrivals": [round(a, 6) for a in self.arrivals]}

    @classmethod
    def from_json(cls, data: dict) -> Captured:
        return cls(str(data["prompt_id"]),
                   Request(tuple(int(t) for t in data["prompt"]),
                           tuple(int(t) for t in data["output"]), int(data["n_predict"]),
                           stop_of(data["stop"])),
                   str(data["stop"]), float(data.get("prompt_ms", 0.0)),
                   float(data.get("predicted_ms", 0.0)),
                   arrivals=tuple(float(a) for a in data.get("arrivals", ())))


def stop_of(stop_type: str) -> str:
    """A request's end from llama-server's ``stop_type`` ("none" while unfinished: a limit)."""
    return stop_type if stop_type in ("eos", "word") else "limit"


def _ints(value, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(t, int) and t >= 0 for t in value):
        raise BadAnswerError(f"llama-server's {what} is not a list of token ids.",
                             "Use a llama-server that answers /tokenize and return_tokens.")
    return tuple(value)


def prompt_tokens(base: Base, text: str, chat: bool = True,
                  api_key: str | None = None) -> tuple[int, ...]:
    """The ids the server decodes for ``text`` sent as one user message (``chat``) or as is."""
    if chat:
        answer = request_json(base, "POST", "/apply-template", template_body(text), api_key)
        if not isinstance(answer, dict) or not isinstance(answer.get("prompt"), str):
            raise BadAnswerError("llama-server's /apply-template gave no prompt.",
                                 "Use a llama-server with a chat template, or plain prompts.")
        text = answer["prompt"]
    answer = request_json(base, "POST", "/tokenize", tokenize_body(text), api_key)
    return _ints(answer.get("tokens") if isinstance(answer, dict) else None, "/tokenize")


def complete(base: Base, prompt: tuple[int, ...], max_new: int, stop_on_eos: bool = False,
             api_key: str | None = None, slot: int | None = None, reuse: bool = True,
             n_probs: int = 0) -> dict:
    """One greedy ``/completion`` of ``prompt`` ids (core.servers.payload.completion_body:
    ``slot``, ``reuse``, ``n_probs``); the server's answer."""
    body = completion_body(prompt, max_new, stop_on_eos=stop_on_eos, slot=slot, reuse=reuse,
                           n_probs=n_probs)
    answer = request_json(base, "POST", "/completion", body, api_key,
                          timeout=CAPTURE_TIMEOUT_S)
    if not isinstance(answer, dict):
        raise BadAnswerError("llama-server's /completion answered no JSON object.",
                             "Check its log.")
    return answer


@dataclass(frozen=True)
class Streamed:
    """One streamed ``/completion``: the tokens, when each arrived, the final answer."""

    tokens: tuple[int, ...]
    arrivals: tuple[float, ...]
    """Seconds from sending the request to each token's arrival."""
    final: dict

    @property
    def stop(self) -> str:
        return stop_of(str(self.final.get("stop_type", "")))

    @property
    def span_s(self) -> float:
        """From the first token's arrival to the last's: what SpecDeck's decode rate divides
        (core.servers.engine: the rate between the first and the last token)."""
        return self.arrivals[-1] - self.arrivals[0] if len(self.arrivals) > 1 else 0.0


def stream_complete(base: Base, prompt: tuple[int, ...], max_new: int,
                    stop_on_eos: bool = False, api_key: str | None = None,
                    cancel: threading.Event | None = None) -> Streamed:
    """One greedy ``/completion`` of ``prompt`` ids, streamed (each event carries its tokens)."""
    body = completion_body(prompt, max_new, stop_on_eos=stop_on_eos, stream=True)
    tokens: list[int] = []
    arrivals: list[float] = []
    final: dict = {}
    sent = time.perf_counter()
    for event in stream_sse(base, "/completion", body, api_key, cancel, until_closed=True,
                            timeout=CAPTURE_TIMEOUT_S):
        data = event.data
        if not isinstance(data, dict):
            raise BadAnswerError("llama-server's /completion stream sent an unusable event.",
                                 event.lost or "Check its log.")
        new = _ints(data.get("tokens", []), "/completion tokens")
        tokens += new
        arrivals += [event.at - sent] * len(new)
        if data.get("stop") is True:
            final = data
            break
    return Streamed(tuple(tokens), tuple(arrivals), final)


def capture(base: Base, prompts: list[tuple[str, str]], max_new: int, chat: bool = True,
            stop_on_eos: bool = False, api_key: str | None = None,
            cancel: threading.Event | None = None, progress=None) -> list[Captured]:
    """The plain run of each (prompt_id, text), in order, on the server at ``base`` (which
    must not draft: its output is the target's own)."""
    out: list[Captured] = []
    for i, (prompt_id, text) in enumerate(prompts):
        if cancel is not None and cancel.is_set():
            raise CancelledError("Capture cancelled.")
        ids = prompt_tokens(base, text, chat, api_key)
        run = stream_complete(base, ids, max_new, stop_on_eos, api_key, cancel)
        timings = run.final.get("timings") if isinstance(run.final.get("timings"), dict) \
            else {}
        checked = answer_timings(run.final)
        out.append(Captured(prompt_id, Request(ids, run.tokens, max_new, run.stop), run.stop,
                            checked.prompt_ms or 0.0, checked.predicted_ms or 0.0, timings,
                            run.arrivals))
        if progress is not None:
            progress(i + 1, len(prompts))
    return out
