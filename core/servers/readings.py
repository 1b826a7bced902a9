"""Turn a streamed response into what the client measured and what the server reported.

Both are kept, side by side and labelled: the client's clock (time to first token, decode
rate from chunk arrival) is the same ruler for every kind of server; the server's own figures
(llama-server ``timings``, TabbyAPI ``usage``, LM Studio ``stats``, Ollama ``eval_*``, vLLM
``metrics.speculative_decoding``) are recorded with the names of the fields that were found,
because those names drift between versions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specdeck.core.servers.transport import StreamEvent


@dataclass(frozen=True)
class ServerReport:
    """What one run's response said about itself, and where each number came from."""

    kind: str
    fields: tuple[str, ...] = ()
    """Dotted names of the fields found, e.g. "timings.draft_n"."""
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    cached_prompt_tokens: int | None = None
    tokens_per_second: float | None = None
    """The server's own decode rate."""
    decode_ms: float | None = None
    prompt_ms: float | None = None
    drafted: int | None = None
    accepted: int | None = None
    finish_reason: str | None = None
    acceptance_source: str = ""
    """Which field the drafted/accepted counts came from; "" when none."""


@dataclass
class StreamReading:
    """Accumulates a stream: text per chunk with its arrival time, and the server's fields."""

    kind: str
    sent_at: float
    text_parts: list[str] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    """Arrival time of every chunk that carried text."""
    found: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None

    def add(self, event: StreamEvent) -> str:
        """Take one event; returns the text it added ("" for none)."""
        data = event.data if isinstance(event.data, dict) else {}
        text = _delta_text(data)
        if text:
            self.text_parts.append(text)
            self.arrivals.append(event.at)
        choices = data.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            reason = choices[0].get("finish_reason")
            if reason:
                self.finish_reason = str(reason)
        if data.get("done_reason"):  # Ollama
            self.finish_reason = str(data["done_reason"])
        for group in ("timings", "usage", "stats"):
            if isinstance(data.get(group), dict):
                _flatten(group, data[group], self.found)
        metrics = data.get("metrics")
        if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
            _flatten("metrics.speculative_decoding", metrics["speculative_decoding"], self.found)
        for key in ("eval_count", "eval_duration", "prompt_eval_count", "prompt_eval_duration"):
            if isinstance(data.get(key), (int, float)):
                self.found[key] = data[key]
        return text

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def report(self) -> ServerReport:
        f = self.found

        def number(*names: str) -> float | None:
            for name in names:
                value = f.get(name)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    return float(value)
            return None

        def count(*names: str) -> int | None:
            value = number(*names)
            return None if value is None else int(value)

        completion = count("timings.predicted_n", "usage.completion_tokens", "eval_count",
                           "stats.predicted_tokens_count")
        rate = number("timings.predicted_per_second", "usage.completion_tokens_per_sec",
                      "stats.tokens_per_second")
        decode_ms = number("timings.predicted_ms")
        if decode_ms is None and number("usage.completion_time") is not None:
            decode_ms = number("usage.completion_time") * 1000.0
        eval_ns = number("eval_duration")
        if eval_ns is not None and completion:
            decode_ms = eval_ns / 1e6
            rate = rate or completion / (eval_ns / 1e9) if eval_ns > 0 else rate
        prompt_ms = number("timings.prompt_ms")
        if prompt_ms is None and number("usage.prompt_time") is not None:
            prompt_ms = number("usage.prompt_time") * 1000.0
        drafted, accepted, source = _acceptance(f, number)
        return ServerReport(
            kind=self.kind,
            fields=tuple(sorted(f)),
            completion_tokens=completion,
            prompt_tokens=count("timings.prompt_n", "usage.prompt_tokens", "prompt_eval_count"),
            cached_prompt_tokens=count("timings.cache_n",
                                       "usage.prompt_tokens_details.cached_tokens"),
            tokens_per_second=rate,
            decode_ms=decode_ms,
            prompt_ms=prompt_ms,
            drafted=drafted,
            accepted=accepted,
            finish_reason=self.finish_reason,
            acceptance_source=source,
        )


def _acceptance(f: dict[str, Any], number) -> tuple[int | None, int | None, str]:
    if number("timings.draft_n") is not None:
        return (int(number("timings.draft_n")), int(number("timings.draft_n_accepted") or 0),
                "timings.draft_n")
    if number("stats.total_draft_tokens_count") is not None:
        return (int(number("stats.total_draft_tokens_count")),
                int(number("stats.accepted_draft_tokens_count") or 0),
                "stats.total_draft_tokens_count")
    # vLLM --per-request-spec-decode-metrics (vllm/v1/metrics/stats.py to_dict, 0.33.0): both
    # num_draft_tokens and num_accepted_draft_tokens contain "draft_tokens": exact names only.
    drafted_key = "metrics.speculative_decoding.num_draft_tokens"
    accepted_key = "metrics.speculative_decoding.num_accepted_draft_tokens"
    if number(drafted_key) is not None and number(accepted_key) is not None:
        return int(number(drafted_key)), int(number(accepted_key)), drafted_key
    return None, None, ""


def _flatten(prefix: str, data: dict[str, Any], out: dict[str, Any]) -> None:
    for key, value in data.items():
        name = f"{prefix}.{key}"
        if isinstance(value, dict):
            _flatten(name, value, out)
        else:
            out[name] = value


def _delta_text(data: dict[str, Any]) -> str:
    choices = data.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        choice = choices[0]
        delta = choice.get("delta")
        if isinstance(delta, dict) and isinstance(delta.get("content"), str):
            return delta["content"]
        if isinstance(choice.get("text"), str):
            return choice["text"]
        message = choice.get("message")
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            return message["content"]
    message = data.get("message")  # Ollama /api/chat
    if isinstance(message, dict) and isinstance(message.get("content"), str):
        return message["content"]
    if isinstance(data.get("response"), str):  # Ollama /api/generate
        return data["response"]
    return ""
