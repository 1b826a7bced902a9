"""A server's Prometheus counters around one run: what they say it drafted.

vLLM reports no per-request acceptance unless asked at launch, and llama-server's timings say
nothing of verify steps, positions, or a run that drafted nothing (draft_n is left out then).
SpecDeck is a launched server's only client, so the counters' growth around a run is that
run's: parsed here (``parse_counters``), checked like any reading (``counted_draft``), and
set beside a request's own counts where both exist (``cross_check``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from specdeck.core.servers.readings import ServerReport, check_acceptance
from specdeck.core.servers.transport import Base, ServerError, request_text


def fetch_metrics(base: Base, api_key: str | None, timeout: float = 5.0) -> str:
    """The server's /metrics now, as Prometheus text (a ServerError when it cannot be read)."""
    return request_text(base, "/metrics", api_key, timeout=timeout)


def fetch_counters(base: Base, api_key: str | None, timeout: float = 5.0
                   ) -> dict[str, float]:
    """The server's /metrics now, parsed (a ServerError when it cannot be read)."""
    return parse_counters(fetch_metrics(base, api_key, timeout))


def read_counters(base: Base, api_key: str | None) -> dict[str, float]:
    """The server's /metrics now ({} when it cannot be read)."""
    try:
        return fetch_counters(base, api_key)
    except ServerError:
        return {}


def parse_series(text: str) -> list[tuple[str, str, float | None]]:
    """Prometheus text's samples, in order: (metric name, the text of its labels, its value;
    None when the value is no number). Comments and blank lines are left out; tokens are
    separated by spaces or tabs, a trailing timestamp ignored (the exposition format)."""
    out = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        try:
            value: float | None = float(match.group(3))
        except ValueError:
            value = None
        out.append((match.group(1), match.group(2) or "", value))
    return out


_SAMPLE = re.compile(r"([^\s{#]+)(?:\{(.*)\}\s*|\s+)(\S+)")
"""A sample's line: a name, its labels in braces (to the last brace: a label's value may hold
one), then its value."""


def parse_counters(text: str) -> dict[str, float]:
    """Prometheus text: metric name (labels dropped, values summed) -> value; a series with a
    ``position`` label is also kept as ``name#position`` (per-position acceptance). A value
    that is no number is left out."""
    out: dict[str, float] = {}
    for name, labels, value in parse_series(text):
        if value is None:
            continue
        out[name] = out.get(name, 0.0) + value
        position = _POSITION.search(labels)
        if position:
            key = f"{name}#{position.group(1)}"
            out[key] = out.get(key, 0.0) + value
    return out


_POSITION = re.compile(r'(?:^|,)\s*position="(\d{1,4})"')


def _delta(before: dict[str, float], after: dict[str, float], suffix: str
           ) -> tuple[float | None, str]:
    """How much the speculative counters ending in ``suffix`` grew around a run; a problem
    when a value is not finite or a counter went down (the server restarted or reset it)."""
    names = [n for n in after if n.endswith(suffix) and "spec_decode" in n and "per_pos" not in n
             and "#" not in n]
    if not names:
        return None, ""
    total = 0.0
    for name in names:
        old, new = before.get(name, 0.0), after[name]
        if not (math.isfinite(old) and math.isfinite(new)) or old < 0 or new < 0:
            return None, f"/metrics {name} is {new!r} (was {old!r}): not a counter's value"
        if new < old:
            return None, (f"/metrics {name} went down from {old:g} to {new:g} (the server "
                          "restarted or reset its counters)")
        total += new - old
    return total, ""


def cross_check(report: ServerReport, counted: CountedDraft) -> str:
    """A request's own counts beside the counters' growth around it: equal when the server
    ran nothing else meanwhile; otherwise the request's own are still this run's."""
    if counted.drafted is None:  # the totals failed their checks (the problem says why)
        return ""
    mine = (report.drafted, report.accepted)
    theirs = (counted.drafted, counted.accepted)
    if mine == theirs and (counted.steps is None or counted.steps == report.draft_steps):
        return "agrees with the Prometheus counters' growth around the run"
    steps = "" if counted.steps is None else f", {counted.steps} steps"
    return (f"differs from the Prometheus counters' growth around the run ({theirs[0]} "
            f"drafted, {theirs[1]} accepted{steps}; this request: {mine[0]}, {mine[1]}, "
            f"{report.draft_steps} steps): other requests on the server, or counters that "
            "lag; the request's own counts are used")


@dataclass(frozen=True)
class CountedDraft:
    """What the server's Prometheus counters say one run drafted (their growth around it)."""

    drafted: int | None = None
    accepted: int | None = None
    steps: int | None = None
    """Verify steps that carried a draft (``..._num_drafts_total``)."""
    accepted_by_position: tuple[int, ...] = ()
    """Drafts accepted at each position (``..._num_accepted_tokens_per_pos_total``)."""
    problem: str = ""


def counted_draft(before: dict[str, float], after: dict[str, float], tokens: int
                  ) -> CountedDraft:
    """The counters' growth around a run, checked like a reported count
    (core.servers.readings.check_acceptance): finite, counters that only grow, accepted <=
    drafted, at most the tokens the run made; the drafts at most one per token; the
    positions' accepted adding up to the accepted total and none above the drafts."""
    if not before and not after:
        return CountedDraft()
    if not before or not after:
        return CountedDraft(problem="/metrics could not be read on both sides of the run")
    drafted, problem = _delta(before, after, "num_draft_tokens_total")
    accepted, accepted_problem = _delta(before, after, "num_accepted_tokens_total")
    steps, steps_problem = _delta(before, after, "num_drafts_total")
    problem = problem or accepted_problem or steps_problem
    if not problem and drafted is None and accepted is None:
        return CountedDraft()
    problem = problem or check_acceptance(drafted, accepted, tokens,
                                          "/metrics spec_decode counters")
    if not problem and steps is not None and steps > max(tokens, 0):
        problem = f"/metrics spec_decode counters: {int(steps)} drafts for {tokens} tokens"
    if problem:
        return CountedDraft(problem=problem)
    by_position, position_problem = _by_position(before, after, accepted, steps)
    return CountedDraft(int(drafted), int(accepted), None if steps is None else int(steps),
                        by_position, position_problem)


def _by_position(before: dict[str, float], after: dict[str, float], accepted: float | None,
                 steps: float | None) -> tuple[tuple[int, ...], str]:
    """Accepted drafts per position from the ``..._per_pos_total{position=N}`` counters;
    () with a problem when they do not add up."""
    grown: dict[int, float] = {}
    for name, new in after.items():
        head, sep, position = name.partition("#")
        if not sep or "accepted_tokens_per_pos" not in head:
            continue
        old = before.get(name, 0.0)
        if not (math.isfinite(old) and math.isfinite(new)) or new < old:
            return (), f"/metrics {head} at position {position} is not a growing counter"
        grown[int(position)] = grown.get(int(position), 0.0) + (new - old)
    if not grown or steps == 0:
        return (), ""  # no draft: no position reached
    # Every position the server reports, zeros included: llama-server sizes its per-position
    # array to its k (server-context.cpp, n_accepted_per_pos.resize(common_speculative_n_max))
    # and exports it whole, so a run whose acceptance ended early still has its drafts
    # counted at the later positions, where it kept nothing.
    values = [grown.get(i, 0.0) for i in range(max(grown) + 1)]
    if accepted is not None and abs(sum(values) - accepted) > 0.5:
        return (), (f"/metrics accepted per position add up to {sum(values):g}, not the "
                    f"{accepted:g} accepted")
    if steps is not None and any(v > steps for v in values):
        return (), "/metrics accepted at a position more often than there were drafts"
    return tuple(int(v) for v in values), ""


def reached_positions(by_position: tuple[int, ...], drafts: int, drafted: int | None
                      ) -> tuple[int, ...]:
    """The drafts that reached each position, where the counts say it: only when every draft
    was as long as the positions reported (drafted = drafts x k); otherwise () (unknown: a
    shorter draft reached fewer positions, and the counters do not say which)."""
    if drafts and drafted == drafts * len(by_position):
        return tuple(drafts for _ in by_position)
    return ()
