"""Turn a streamed response into what the client measured and what the server reported.

Both are kept, side by side and labelled: the client's clock (time to first token, decode
rate from chunk arrival) is the same ruler for every kind of server; the server's own figures
(llama-server ``timings``, TabbyAPI ``usage``, LM Studio ``stats``, Ollama ``eval_*``, vLLM
``metrics.speculative_decoding``, SGLang ``sglext.spec_tokens_details``) are recorded with the names of the fields that were found,
because those names drift between versions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specdeck.core.servers.transport import StreamEvent

MAX_COUNT = 100_000_000
"""More tokens than any one request holds: a count above it is not a count."""
MAX_TOKENS_PER_SECOND = 1_000_000.0
MAX_MILLISECONDS = 1e9
"""Eleven days: longer than any one request takes."""
MAX_DRAFT_PER_TOKEN = 256
"""Drafted tokens per generated token: a verify step drafts at most its k (llama-server's
--draft-max, vLLM's num_speculative_tokens), and each step makes at least one token."""
SILENT_TOKENS = 16
"""Tokens a run may count without showing them as text (an end-of-sequence token, special
tokens a server leaves out of the text)."""
MAX_HISTOGRAM = 1024
"""Entries kept of a per-request acceptance histogram or per-step list: one entry per draft
length (vLLM, SGLang) is a few dozen; a longer list is not read."""


@dataclass(frozen=True)
class ServerReport:
    """What one run's response said about itself, and where each number came from. Every
    figure here passed its checks (finite, non-negative, accepted <= drafted, counts consistent
    with the tokens received): one that failed is None, with why in ``problems``."""

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
    problems: tuple[str, ...] = ()
    """Every reported figure that failed its checks, as "field is value: why"."""
    completion_problem: str = ""
    """Why the server's token count is not usable ("" when it is, or when none was sent)."""
    acceptance_problem: str = ""
    """Why the server's draft counts are not usable ("" when they are, or none were sent)."""
    draft_steps: int | None = None
    """Verify steps that carried a draft, as this request's own report counts them (vLLM's
    ``num_spec_steps``, SGLang's ``spec_verify_ct``); None when the response has none."""
    accepted_by_position: tuple[int, ...] = ()
    """Drafts accepted at each position of a step, from the request's own histogram or
    per-step lists (a step that keeps j drafts accepts positions 0..j-1)."""
    drafted_by_position: tuple[int, ...] = ()
    """Drafts proposed at each position, beside ``accepted_by_position``."""
    mean_acceptance_length: float | None = None
    """A mean acceptance length exactly as the response gave it (never computed here)."""
    mean_acceptance_source: str = ""
    """The field it came from, and what that server means by it."""
    rejected: int | None = None
    """LM Studio's rejected_draft_tokens_count, kept as reported."""
    ignored: int | None = None
    """LM Studio's ignored_draft_tokens_count, kept as reported."""
    draft_model: str | None = None
    """The draft the server says it drafted with (LM Studio's stats.draft_model)."""


class _Checker:
    """Reads the server's fields, keeping only values that pass their checks."""

    def __init__(self, found: dict[str, Any]):
        self.found = found
        self.problems: list[str] = []

    def fail(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)

    def number(self, *names: str, most: float = math.inf) -> float | None:
        """The first of ``names`` the server sent: None when absent, or (with a problem)
        when it is not a finite number from 0 to ``most``."""
        for name in names:
            if name not in self.found:
                continue
            value = self.found[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                self.fail(f"{name} is {_shown(value)}: not a number")
                return None
            finite = isinstance(value, int) or math.isfinite(value)  # a huge int: no float
            if not finite or value < 0 or value > most:
                why = "not a finite number" if not finite else \
                    "negative" if value < 0 else "implausibly large"
                self.fail(f"{name} is {_shown(value)}: {why}")
                return None
            return float(value)
        return None

    def count(self, *names: str) -> int | None:
        value = self.number(*names, most=MAX_COUNT)
        if value is None:
            return None
        if value != int(value):
            self.fail(f"{_which(self.found, names)} is {_shown(value)}: a count is a whole number")
            return None
        return int(value)


@dataclass(frozen=True)
class Timings:
    """llama-server's ``timings`` in an answer that was not streamed (the replay's capture,
    proof and teacher-forced pass), each figure checked as a streamed run's are (a finite
    number from 0 to ``MAX_MILLISECONDS``, a count a whole number): None when absent or when
    it failed, with why in ``problems``."""

    prompt_n: int | None = None
    prompt_ms: float | None = None
    predicted_ms: float | None = None
    problems: tuple[str, ...] = ()
    drafted: int | None = None
    """``draft_n``: tokens drafted for the answer (None: not sent, or it failed its checks,
    :func:`check_acceptance`, as a streamed run's counts are)."""
    accepted: int | None = None
    """``draft_n_accepted`` (0 where ``draft_n`` came without it), None beside no drafted."""


def answer_timings(answer: Any) -> Timings:
    """The checked :class:`Timings` of one llama-server answer (its final event, or a
    ``/completion`` answer)."""
    timings = answer.get("timings") if isinstance(answer, dict) else None
    found = {f"timings.{name}": value for name, value in timings.items()
             if isinstance(name, str)} if isinstance(timings, dict) else {}
    check = _Checker(found)
    prompt_n = check.count("timings.prompt_n")
    prompt_ms = check.number("timings.prompt_ms", most=MAX_MILLISECONDS)
    predicted_ms = check.number("timings.predicted_ms", most=MAX_MILLISECONDS)
    drafted = accepted = None
    if "timings.draft_n" in found:
        raw_drafted, raw_accepted, source = _acceptance(found)
        tokens = found.get("timings.predicted_n")
        problem = check_acceptance(raw_drafted, raw_accepted,
                                   tokens if type(tokens) is int else None, source)
        if problem:
            check.fail(problem)
        else:
            drafted, accepted = int(raw_drafted), int(raw_accepted)
    return Timings(prompt_n, prompt_ms, predicted_ms, tuple(check.problems), drafted, accepted)


def _shown_name(value: Any) -> str | None:
    return value[:200] if isinstance(value, str) and value else None


def _which(found: dict[str, Any], names: tuple[str, ...]) -> str:
    return next((n for n in names if n in found), names[0])


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"


def check_acceptance(drafted: float | None, accepted: float | None, tokens: int | None,
                     source: str) -> str:
    """Why draft counts are not usable, or "" when they are: finite, non-negative whole
    numbers, accepted <= drafted, accepted <= the tokens the run made (an accepted draft
    token is an output token), drafted within what that many verify steps can draft."""
    for name, value in (("drafted", drafted), ("accepted", accepted)):
        if value is None:
            return f"{source}: no {name} count"
        if not math.isfinite(value) or value < 0 or value != int(value) or value > MAX_COUNT:
            return f"{source}: {name} count {_shown(value)} is not a count"
    if accepted > drafted:
        return f"{source}: {int(accepted)} accepted of {int(drafted)} drafted (more than drafted)"
    if tokens is not None and accepted > tokens:
        return f"{source}: {int(accepted)} accepted draft tokens, but the run made {tokens} tokens"
    if tokens is not None and drafted > MAX_DRAFT_PER_TOKEN * max(tokens, 1):
        return f"{source}: {int(drafted)} drafted for {tokens} tokens (more than any k drafts)"
    return ""


def check_positions(accepted: Sequence[int], drafted: Sequence[int] = (),
                    k: int | None = None) -> str:
    """Why per-position acceptance counts are impossible ("" when they are not): a draft
    token is accepted at position i only when every earlier one of its step was, so the
    accepted counts never rise with the position (llama.cpp's and vLLM's per-position
    counters count over all drafts); none is above the drafts that reached its position; and
    none is past the most tokens a step drafts (``k``, where SpecDeck set it). A server that
    reports otherwise counts something else, or is broken: its positions are not tabled."""
    if not accepted:
        return ""
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in accepted):
        return "accepted per position: not counts"
    if k is not None and len(accepted) > k and any(accepted[k:]):
        return (f"accepted per position: drafts accepted at position {len(accepted)} of steps "
                f"that draft at most {k}")
    rising = next((i for i in range(1, len(accepted)) if accepted[i] > accepted[i - 1]), None)
    if rising is not None:
        return (f"accepted per position rises from {accepted[rising - 1]} at position "
                f"{rising} to {accepted[rising]} at {rising + 1}: a draft token is accepted "
                "only after every earlier one of its step")
    if drafted and any(a > d for a, d in zip(accepted, drafted)):
        return "accepted per position: more accepted than drafted at a position"
    return ""


@dataclass
class StreamReading:
    """Accumulates a stream: text per chunk with its arrival time, and the server's fields."""

    kind: str
    sent_at: float
    max_tokens: int | None = None
    """The request's max new tokens: text past it is not kept (``overran`` says so)."""
    text_parts: list[str] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    """Arrival time of every chunk that carried text."""
    found: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None
    lost: list[str] = field(default_factory=list)
    """Events whose data could not be used (not JSON): the run lost data."""
    overran: bool = False
    """The server sent text past ``max_tokens`` (it ignored the request's limit)."""

    def add(self, event: StreamEvent) -> str:
        """Take one event; returns the text it added ("" for none)."""
        if event.lost:
            self.lost.append(event.lost)
            return ""
        data = event.data if isinstance(event.data, dict) else {}
        text = _delta_text(data)
        if text and self.max_tokens is not None and len(self.arrivals) >= self.max_tokens:
            self.overran = True  # every text chunk holds a token at least: this one is extra
            return ""
        if text:
            self.text_parts.append(text)
            self.arrivals.append(event.at)
        choices = data.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            reason = choices[0].get("finish_reason")
            if isinstance(reason, str) and reason:
                self.finish_reason = reason[:40]
        if isinstance(data.get("done_reason"), str) and data["done_reason"]:  # Ollama
            self.finish_reason = data["done_reason"][:40]
        for group in ("timings", "usage", "stats"):
            if isinstance(data.get(group), dict):
                _flatten(group, data[group], self.found)
        metrics = data.get("metrics")
        if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
            _flatten("metrics.speculative_decoding", metrics["speculative_decoding"], self.found,
                     lists=True)
        sglext = data.get("sglext")  # SGLang: response-level extensions, choices [] beside them
        if isinstance(sglext, dict) and isinstance(sglext.get("spec_tokens_details"), dict):
            _flatten("sglext.spec_tokens_details", sglext["spec_tokens_details"], self.found,
                     lists=True)
        for key in ("eval_count", "eval_duration", "prompt_eval_count", "prompt_eval_duration"):
            if key in data:
                self.found[key] = data[key]
        return text

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def report(self) -> ServerReport:
        """The server's figures, each checked: finite, non-negative, plausible, and the token
        count consistent with the text received (at least one token per text chunk, at most
        the request's max new tokens and the text's bytes plus a few silent tokens)."""
        check = _Checker(self.found)
        chunks = len(self.arrivals)
        completion_names = ("timings.predicted_n", "usage.completion_tokens", "eval_count",
                            "stats.predicted_tokens_count")
        completion = check.count(*completion_names)
        completion_problem = next((p for p in check.problems
                                   if p.startswith(completion_names)), "")
        if self.overran:
            # What it counted includes text SpecDeck did not keep: the kept chunks count.
            check.fail(f"the server kept streaming past the {self.max_tokens} tokens asked for; "
                       f"SpecDeck stopped reading at {self.max_tokens}")
            completion = None
        if completion is not None:
            name = _which(self.found, completion_names)
            most = len(self.text.encode("utf-8")) + SILENT_TOKENS
            if self.max_tokens is not None:
                most = min(most, self.max_tokens)
            if completion < chunks:
                completion_problem = (f"{name} is {completion}, but {chunks} chunks of text "
                                      "arrived (each holds a token at least)")
            elif completion > most:
                completion_problem = (f"{name} is {completion}, more than the "
                                      + (f"{self.max_tokens} asked for" if self.max_tokens
                                         is not None and most == self.max_tokens else
                                         f"{len(self.text)} characters received can hold"))
            if completion_problem:
                check.fail(completion_problem)
                completion = None
        rate = check.number("timings.predicted_per_second", "usage.completion_tokens_per_sec",
                            "stats.tokens_per_second", most=MAX_TOKENS_PER_SECOND)
        decode_ms = check.number("timings.predicted_ms", most=MAX_MILLISECONDS)
        seconds = check.number("usage.completion_time", most=MAX_MILLISECONDS / 1000)
        if decode_ms is None and seconds is not None:
            decode_ms = seconds * 1000.0
        eval_ns = check.number("eval_duration", most=MAX_MILLISECONDS * 1e6)
        if eval_ns is not None and completion:
            decode_ms = eval_ns / 1e6
            if rate is None and eval_ns > 0:
                rate = completion / (eval_ns / 1e9)
                if rate > MAX_TOKENS_PER_SECOND:
                    check.fail(f"eval_duration is {eval_ns:g} ns for {completion} tokens: "
                               "implausibly fast")
                    rate = None
        prompt_ms = check.number("timings.prompt_ms", most=MAX_MILLISECONDS)
        prompt_seconds = check.number("usage.prompt_time", most=MAX_MILLISECONDS / 1000)
        if prompt_ms is None and prompt_seconds is not None:
            prompt_ms = prompt_seconds * 1000.0
        prompt = check.count("timings.prompt_n", "usage.prompt_tokens", "prompt_eval_count")
        cached = check.count("timings.cache_n", "usage.prompt_tokens_details.cached_tokens")
        if cached is not None and prompt is not None and cached > prompt:
            check.fail(f"{cached} cached prompt tokens of {prompt}: more than the prompt")
            cached = None
        drafted, accepted, source = _acceptance(self.found)
        acceptance_problem = ""
        detail = _Detail()
        if source:
            tokens = completion if completion is not None else (None if completion_problem
                                                               else chunks)
            acceptance_problem = check_acceptance(drafted, accepted, tokens, source)
            if not acceptance_problem:
                detail = _detail(self.found, source, int(drafted), int(accepted), tokens)
                acceptance_problem = detail.problem
            if acceptance_problem:
                check.fail(acceptance_problem)
                drafted = accepted = None
                detail = _Detail()
        mean, mean_source = _reported_mean(self.found, check)
        return ServerReport(
            kind=self.kind,
            fields=tuple(sorted(self.found)),
            completion_tokens=completion,
            prompt_tokens=prompt,
            cached_prompt_tokens=cached,
            tokens_per_second=rate,
            decode_ms=decode_ms,
            prompt_ms=prompt_ms,
            drafted=None if drafted is None else int(drafted),
            accepted=None if accepted is None else int(accepted),
            finish_reason=self.finish_reason,
            acceptance_source=source,
            problems=tuple(check.problems),
            completion_problem=completion_problem,
            acceptance_problem=acceptance_problem,
            draft_steps=detail.steps,
            accepted_by_position=detail.accepted_by_position,
            drafted_by_position=detail.drafted_by_position,
            mean_acceptance_length=mean,
            mean_acceptance_source=mean_source,
            rejected=detail.rejected,
            ignored=detail.ignored,
            draft_model=_shown_name(self.found.get("stats.draft_model")),
        )


def _acceptance(f: dict[str, Any]) -> tuple[float | None, float | None, str]:
    """(drafted, accepted, the field they came from), unchecked: check_acceptance checks."""
    def value(name: str) -> float | None:
        v = f.get(name)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return None if v is None else math.nan
        try:
            return float(v)
        except OverflowError:  # an integer past any float: no count
            return math.inf

    if "timings.draft_n" in f:
        accepted = value("timings.draft_n_accepted")
        return value("timings.draft_n"), 0.0 if accepted is None else accepted, "timings.draft_n"
    if "stats.total_draft_tokens_count" in f:
        accepted = value("stats.accepted_draft_tokens_count")
        return (value("stats.total_draft_tokens_count"), 0.0 if accepted is None else accepted,
                "stats.total_draft_tokens_count")
    # vLLM --per-request-spec-decode-metrics (vllm/v1/metrics/stats.py to_dict, 0.33.0): both
    # num_draft_tokens and num_accepted_draft_tokens contain "draft_tokens": exact names only.
    drafted_key = "metrics.speculative_decoding.num_draft_tokens"
    accepted_key = "metrics.speculative_decoding.num_accepted_draft_tokens"
    if drafted_key in f and accepted_key in f:
        return value(drafted_key), value(accepted_key), drafted_key
    # SGLang with return_spec_tokens_details (entrypoints/openai/protocol.py SpecTokensDetails,
    # 0.5.23): proposed = verify steps x (speculative_num_draft_tokens - 1), correct = accepted.
    if SGLANG_DRAFTED in f and SGLANG_ACCEPTED in f:
        return value(SGLANG_DRAFTED), value(SGLANG_ACCEPTED), SGLANG_DRAFTED
    return None, None, ""


VLLM_SPEC = "metrics.speculative_decoding."
SGLANG_SPEC = "sglext.spec_tokens_details."
SGLANG_DRAFTED = SGLANG_SPEC + "spec_num_proposed_drafts"
SGLANG_ACCEPTED = SGLANG_SPEC + "spec_num_correct_drafts"
LMSTUDIO_TOTAL = "stats.total_draft_tokens_count"


@dataclass(frozen=True)
class _Detail:
    """A request's draft report beyond its totals (steps, positions, LM Studio's split)."""

    steps: int | None = None
    accepted_by_position: tuple[int, ...] = ()
    drafted_by_position: tuple[int, ...] = ()
    rejected: int | None = None
    ignored: int | None = None
    problem: str = ""


def _detail(f: dict[str, Any], source: str, drafted: int, accepted: int,
            tokens: int | None) -> _Detail:
    """Steps and positions from the request's own report, checked against its totals."""
    if source == LMSTUDIO_TOTAL:
        return _lmstudio_split(f, drafted, accepted)
    if source.startswith(VLLM_SPEC):
        return _steps_and_positions(
            f, source, drafted, accepted, tokens, steps_key=VLLM_SPEC + "num_spec_steps",
            histogram_key=VLLM_SPEC + "acceptance_histogram",
            per_step=(VLLM_SPEC + "per_step_accepted", VLLM_SPEC + "per_step_drafted"))
    if source == SGLANG_DRAFTED:
        return _steps_and_positions(
            f, source, drafted, accepted, tokens, steps_key=SGLANG_SPEC + "spec_verify_ct",
            histogram_key=SGLANG_SPEC + "spec_correct_drafts_histogram", per_step=None)
    return _Detail()


def _lmstudio_split(f: dict[str, Any], drafted: int, accepted: int) -> _Detail:
    """LM Studio's four counters (API changelog 0.3.10): accepted + rejected + ignored must
    make the total, or none of them is used."""
    parts = {}
    for name in ("rejected", "ignored"):
        key = f"stats.{name}_draft_tokens_count"
        if key in f:
            value = f[key]
            if isinstance(value, bool) or not isinstance(value, int) or not \
                    0 <= value <= MAX_COUNT:
                return _Detail(problem=f"{key} is {_shown(value)}: not a count")
            parts[name] = value
    if len(parts) == 2 and accepted + parts["rejected"] + parts["ignored"] != drafted:
        return _Detail(problem=(
            f"stats: {accepted} accepted + {parts['rejected']} rejected + {parts['ignored']} "
            f"ignored draft tokens = {accepted + parts['rejected'] + parts['ignored']}, not "
            f"the {drafted} of total_draft_tokens_count"))
    return _Detail(rejected=parts.get("rejected"), ignored=parts.get("ignored"))


def _count_list(f: dict[str, Any], key: str) -> tuple[list[int] | None, str]:
    value = f.get(key)
    if value is None:
        return None, ""
    if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int)
                                          or not 0 <= v <= MAX_COUNT for v in value):
        return None, f"{key} is {_shown(value)}: not a list of counts"
    return value, ""


def _steps_and_positions(f: dict[str, Any], source: str, drafted: int, accepted: int,
                         tokens: int | None, steps_key: str, histogram_key: str,
                         per_step: tuple[str, str] | None) -> _Detail:
    """Verify steps and acceptance by position from a request's histogram (entry j: the steps
    that kept j drafts, so position i was accepted by the steps that kept more than i) or its
    per-step lists, checked: the histogram counts the steps and adds up to the accepted."""
    steps = None
    if steps_key in f:
        value = f[steps_key]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
            return _Detail(problem=f"{steps_key} is {_shown(value)}: not a count")
        steps = value
        if tokens is not None and steps > max(tokens, 0):
            return _Detail(problem=f"{steps_key} is {steps}: more verify steps than the "
                                   f"{tokens} tokens the run made")
        if drafted and not steps:
            return _Detail(problem=f"{source}: {drafted} drafted in {steps_key} 0 steps")
    if per_step is not None:
        kept, problem = _count_list(f, per_step[0])
        proposed, problem2 = _count_list(f, per_step[1])
        if problem or problem2:
            return _Detail(problem=problem or problem2)
        if kept is not None and proposed is not None:
            if len(kept) != len(proposed) or sum(kept) != accepted or sum(proposed) != drafted \
                    or any(a > d for a, d in zip(kept, proposed)) or \
                    (steps is not None and len(kept) != steps):
                return _Detail(problem=f"{per_step[0]} / {per_step[1]} do not add up to the "
                                       f"{accepted} accepted of {drafted} drafted")
            width = max(proposed, default=0)
            return _Detail(len(kept), tuple(sum(1 for a in kept if a > i) for i in range(width)),
                           tuple(sum(1 for d in proposed if d > i) for i in range(width)))
    histogram, problem = _count_list(f, histogram_key)
    if problem:
        return _Detail(problem=problem)
    if histogram is None or steps is None:
        return _Detail(steps=steps)
    if sum(histogram) != steps or sum(j * n for j, n in enumerate(histogram)) != accepted:
        return _Detail(problem=(f"{histogram_key} {_shown(histogram)} does not count the "
                                f"{steps} steps and {accepted} accepted drafts"))
    if not steps or drafted % steps:
        return _Detail(steps=steps)  # steps drafted unequal lengths: positions' drafts unknown
    k = drafted // steps
    if len(histogram) > k + 1 and any(histogram[k + 1:]):
        return _Detail(problem=f"{histogram_key}: a step kept more than the {k} it drafted")
    by_position = tuple(sum(histogram[j] for j in range(i + 1, len(histogram)))
                        for i in range(k))
    return _Detail(steps, by_position, tuple(steps for _ in range(k)))


MEAN_FIELDS = (
    (VLLM_SPEC + "mean_acceptance_length",
     "1 + accepted / verify steps, this request (vLLM per-request metrics)"),
    (SGLANG_SPEC + "spec_accept_length",
     "completion tokens / verify steps, this request (SGLang)"),
)
"""Means of acceptance length a response can carry, and what each server means by it."""


def _reported_mean(f: dict[str, Any], check: _Checker) -> tuple[float | None, str]:
    for name, meaning in MEAN_FIELDS:
        if name in f:
            value = check.number(name, most=MAX_DRAFT_PER_TOKEN + 1)
            return (None, "") if value is None else (value, f"{name}: {meaning}")
    return None, ""


MAX_FLATTEN_DEPTH = 4
"""The server's figures sit a level or two down (timings.draft_n, usage.prompt_tokens_details
.cached_tokens): deeper nesting is not read."""


def _flatten(prefix: str, data: dict[str, Any], out: dict[str, Any], depth: int = 1,
             lists: bool = False) -> None:
    """Dotted names -> values; lists only with ``lists`` (a per-request histogram) and only
    up to MAX_HISTOGRAM entries: the other figures SpecDeck reads are never lists."""
    for key, value in data.items():
        name = f"{prefix}.{key}"
        if isinstance(value, dict):
            if depth < MAX_FLATTEN_DEPTH:
                _flatten(name, value, out, depth + 1, lists)
        elif not isinstance(value, list):
            out[name] = value
        elif lists and len(value) <= MAX_HISTOGRAM:
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
