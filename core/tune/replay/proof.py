"""A replay held against the server's own counters: the same requests sent to a drafting
llama-server, its ``/metrics`` read before and after.

``spec_decode_num_drafts_total`` (verifications), ``..._num_draft_tokens_total`` and
``..._num_accepted_tokens_per_pos_total{position}`` are server-wide counters: the difference
over the requests is what they drafted and accepted. The drafting server's own outputs come
back too, so a difference can be told apart: an output that changed (the target's choice
moved with the verification's batch shape) against a replay that drafted otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdeck.core.servers.counters import counted_draft, fetch_counters
from specdeck.core.servers.readings import answer_timings
from specdeck.core.servers.transport import Base
from specdeck.core.tune.replay.capture import complete, stop_of
from specdeck.core.tune.replay.session import Replayed, Request


@dataclass(frozen=True)
class Counted:
    """Verifications, draft tokens, accepted tokens, accepted per position (trailing zeros
    dropped)."""

    drafts: int
    drafted: int
    accepted: int
    per_pos: tuple[int, ...]

    @classmethod
    def of(cls, replayed: Replayed) -> Counted:
        return cls(replayed.drafts, replayed.drafted, replayed.accepted,
                   _trimmed(replayed.per_pos))

    def to_json(self) -> dict:
        return {"drafts": self.drafts, "drafted": self.drafted, "accepted": self.accepted,
                "per_pos": list(self.per_pos)}


def _trimmed(values) -> tuple[int, ...]:
    out = [int(v) for v in values]
    while out and out[-1] == 0:
        out.pop()
    return tuple(out)


def counters(base: Base, api_key: str | None = None) -> dict[str, float]:
    """The server's /metrics now (core.servers.counters)."""
    return fetch_counters(base, api_key, timeout=10.0)


def counted_between(before: dict[str, float], after: dict[str, float],
                    tokens: int) -> Counted | None:
    """What the server counted between two readings of its /metrics, over requests that
    made ``tokens`` output tokens, read and checked as any run's counters are
    (core.servers.counters.counted_draft); None when they fail the checks (a counter that
    went down, more accepted than drafted): such counts cannot equal a replay's."""
    counted = counted_draft(before, after, tokens)
    if counted.problem:
        return None
    return Counted(counted.steps or 0, counted.drafted or 0, counted.accepted or 0,
                   _trimmed(counted.accepted_by_position))


@dataclass(frozen=True)
class ServerRun:
    """What a drafting server did with a list of requests."""

    counted: Counted | None
    """None: the server's counters failed their checks (core.servers.counters)."""
    own: list[Request]
    """Its outputs, as requests."""
    decode_ms: list[float]
    """Each request's generation time (llama-server's ``timings.predicted_ms``)."""


def run_on_server(base: Base, requests: list[Request], api_key: str | None = None
                  ) -> ServerRun:
    """Send ``requests`` (their prompt ids, greedy, their ``n_predict``, stopping at the end
    of generation where theirs did) to the drafting server at ``base``, in order: what it
    counted, its own outputs and its timings."""
    before = counters(base, api_key)
    own, decode_ms = [], []
    for r in requests:
        answer = complete(base, r.prompt, r.n_predict, stop_on_eos=r.ended, api_key=api_key)
        tokens = tuple(int(t) for t in answer.get("tokens") or ())
        own.append(Request(r.prompt, tokens, r.n_predict, stop_of(str(answer.get("stop_type")))))
        decode_ms.append(answer_timings(answer).predicted_ms or 0.0)
    made = sum(len(r.output) for r in own)
    return ServerRun(counted_between(before, counters(base, api_key), made), own, decode_ms)
