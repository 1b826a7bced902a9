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

from specdeck.core.servers.transport import Base, request_text
from specdeck.core.tune.replay.capture import complete, stop_of
from specdeck.core.tune.replay.session import Replayed, Request

PREFIX = "llamacpp:spec_decode_num_"


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
    from specdeck.core.servers.counters import parse_counters

    return parse_counters(request_text(base, "/metrics", api_key, timeout=10.0))


def counted_between(before: dict[str, float], after: dict[str, float]) -> Counted:
    """What the server counted between two readings of its /metrics."""
    def grown(name: str) -> int:
        return round(after.get(PREFIX + name, 0.0) - before.get(PREFIX + name, 0.0))

    per_pos: dict[int, int] = {}
    head = PREFIX + "accepted_tokens_per_pos_total#"
    for key, value in after.items():
        if key.startswith(head):
            per_pos[int(key[len(head):])] = round(value - before.get(key, 0.0))
    values = [per_pos.get(i, 0) for i in range(max(per_pos) + 1)] if per_pos else []
    return Counted(grown("drafts_total"), grown("draft_tokens_total"),
                   grown("accepted_tokens_total"), _trimmed(values))


@dataclass(frozen=True)
class ServerRun:
    """What a drafting server did with a list of requests."""

    counted: Counted
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
        timings = answer.get("timings") if isinstance(answer.get("timings"), dict) else {}
        decode_ms.append(float(timings.get("predicted_ms") or 0.0))
    return ServerRun(counted_between(before, counters(base, api_key)), own, decode_ms)
