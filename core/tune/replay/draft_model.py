"""A draft model predicted from one teacher-forced pass over the target's output.

With greedy drafting and verification, the draft's token at a step's position i is its
argmax given the sequence so far and its own i earlier tokens. While those were right (the
only case in which token i can be accepted) that sequence is the target's own output, so the
draft's choice there is its argmax given the true prefix: what one pass of the draft over
prompt + output, position by position, gives (``TeacherForced``). From it, for every k at
once, the accepted length of every step; and from the probability of each choice among the
draft's top 10, llama-server's ``--spec-draft-p-min`` cut.

Two ways to run the pass:

- on a llama-server serving the draft GGUF (:func:`forced_on_server`): one request per
  output position, the prompt grown by one token each time from the same slot, so the server
  decodes only that token (its prompt cache keeps the rest), with ``n_probs`` 10 for the top
  10 and their probabilities (llama-server has no route that returns the prompt's logits);
- in process with PyTorch (:func:`forced_in_torch`): one forward of the draft over prompt +
  output.

Two loops consume it: llama-server's (:class:`DraftModel`, a drafter for
:class:`.session.Session`: common/speculative.cpp ``common_speculative_impl_draft_simple``,
greedy: up to ``n_max`` tokens, stopped before a token whose top-10 probability is below
``p_min``, dropped when shorter than ``n_min``) and SpecDeck's own PyTorch engine's
(:func:`torch_engine_counts`: core/engines/speculative.py, every token from a verification, k
adapted by ``DraftLength``).

What the pass cannot give: the draft's tokens after its first wrong one (they follow from a
prefix the target never wrote). Acceptance never needs them; the number of tokens drafted
does, where ``p_min`` could stop the draft there: it is then estimated from how often the
draft's probability passed ``p_min`` where it could be seen (``DraftModel.estimated``).

The draft's numbers are the drafting server's only where its cache was written by the same
batches: on a CPU the draft's logits after a prompt depend on how the prompt was split into
batches. The drafting server decodes each request's prompt whole (SpecDeck's runs send
``cache_prompt`` false), so the pass does too. A pass that let the slot keep the chat
template's opening its last request shared, and decoded the rest as a second batch, moved the
draft's lead over its second choice by a median of 0.09 nats (at most 0.85), flipped 18 to 28
near-tied choices of 1,056 (which ones depends on the batch the opening was decoded in) and
put the per-position counts up to 5.2% off at n_max 8, 12.5% at 16 (``bench_replay_draft``;
the whole-prompt pass: 0.0% at every n_max).

The drafting server writes its draft's cache of the output by each verification's batch of
d + 1 rows (tools/server/server-context.cpp:4075 ``common_speculative_process(spec,
batch.view)``; common/speculative.cpp:304 ``process`` copies the batch whole; the rejected
rows then dropped, server-context.cpp:4348, ``slot.mem`` holding both contexts, :1426), the
pass by one-row decodes; which rows share a batch follows from what was accepted before, so
it differs for every k. :class:`DraftOnServer` runs the loop with those batches, one setting
at a time: on this project's CPU it chose as the pass at every position for n_max 2 to 16
(batches of up to 17 rows), and the benchmark keeps checking it.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

from specdeck.core.errors import CancelledError
from specdeck.core.llama_flags import DRAFT_SIMPLE
from specdeck.core.servers.readings import answer_timings
from specdeck.core.servers.transport import BadAnswerError, Base
from specdeck.core.tune.replay.capture import complete
from specdeck.core.tune.replay.drafters import Drafter, with_defaults
from specdeck.core.tune.replay.session import Request

TOP_K = 10
"""llama-server's draft sampler keeps the top 10 (``common_speculative_impl_draft_simple``):
``p_min`` is tested on the first token's share of them."""
UNKNOWN = -1
"""A draft token after the first wrong one: never compared (acceptance ended before it)."""


@dataclass(frozen=True)
class TeacherForced:
    """The draft's choice at each output position of one request, given the true prefix."""

    argmax: tuple[int, ...]
    p: tuple[float, ...]
    """Its probability among the draft's top 10 (1.0 where only the argmax is known)."""
    gap: tuple[float, ...] = ()
    """Its lead over the draft's second choice, in nats (difference of log-probabilities):
    how near a tie it is; empty where the pass did not see the second."""

    def to_json(self) -> dict:
        out = {"argmax": list(self.argmax), "p": [round(x, 6) for x in self.p]}
        if self.gap:
            out["gap"] = [round(x, 6) for x in self.gap]
        return out

    @classmethod
    def from_json(cls, data: dict) -> TeacherForced:
        return cls(tuple(int(t) for t in data["argmax"]), tuple(float(x) for x in data["p"]),
                   tuple(float(x) for x in data.get("gap", ())))


def _top_share(logprobs: list[float]) -> float:
    """The first of ``logprobs`` (sorted, the top ones) as a share of all of them."""
    top = max(logprobs)
    total = sum(math.exp(lp - top) for lp in logprobs)
    return 1.0 / total


def _choice(answer: dict, n: int) -> list[tuple[int, float, float]]:
    """The first ``n`` generated tokens' (argmax, top-10 share, lead over the second) from a
    ``/completion`` answer with ``n_probs``."""
    probs = answer.get("completion_probabilities")
    if not isinstance(probs, list) or not probs:
        raise BadAnswerError("llama-server gave no completion_probabilities for n_probs.",
                             "Use a llama-server that answers n_probs on /completion.")
    out = []
    for entry in probs[:n]:
        top = entry.get("top_logprobs") if isinstance(entry, dict) else None
        if not isinstance(top, list) or not top:
            raise BadAnswerError("llama-server gave no top_logprobs.", "Check its version.")
        logprobs = [float(t["logprob"]) for t in top[:TOP_K]]
        gap = logprobs[0] - max(logprobs[1:]) if len(logprobs) > 1 else math.inf
        out.append((int(top[0]["id"]), _top_share(logprobs), gap))
    return out


def _ask(base: Base, tokens, n: int, api_key: str | None, whole: bool = False) -> dict:
    """``n`` greedy tokens after ``tokens`` from slot 0 of the draft's plain server, with
    ``n_probs``. The slot's cache keeps the longest prefix it shares with ``tokens`` and the
    server decodes the rest in one batch; ``whole``: none of it (``cache_prompt`` false,
    server-context.cpp:3518: the whole prompt is decoded), as the drafting server decodes a
    request's prompt, since every run SpecDeck measures sends ``cache_prompt`` false
    (core.servers.payload); the slot keeps it for the next request."""
    return complete(base, tuple(tokens), n, api_key=api_key, slot=0, reuse=not whole,
                    n_probs=TOP_K)


def forced_on_server(base: Base, request: Request, api_key: str | None = None,
                     cancel: threading.Event | None = None, run: int = 1,
                     decode_s: list[float] | None = None,
                     prompt_whole: bool = True) -> TeacherForced:
    """The teacher-forced pass of the draft a plain llama-server at ``base`` serves: its
    greedy token after prompt + output so far, for each output position, with ``n_probs``.
    The first request decodes the prompt whole, as the drafting server does; each later one
    the tokens its slot does not hold yet. ``prompt_whole`` False: the first request too
    keeps what the slot shares with the prompt (the chat template's opening, from the last
    request), as this pass did before it was found to flip near-tied choices; kept to
    measure that (``bench_replay_draft``).

    ``run`` 1: one request per position. ``run`` > 1: each request generates up to ``run``
    tokens, which give the forced choices up to and including the draft's first wrong one;
    the next request starts after it (the slot's cache then holds all but that token). Fewer
    requests where the draft is often right, wasted tokens where it is not
    (``bench_replay_draft`` measures both). ``decode_s`` collects what each one-token
    request took the server to decode its new token (``timings.prompt_ms``): one decode of
    the draft, for the cost model."""
    argmax, shares, gaps = [], [], []
    prompt, out = list(request.prompt), request.output
    j = 0
    while j < len(out):
        if cancel is not None and cancel.is_set():
            raise CancelledError("Teacher-forced pass cancelled.")
        n = max(1, min(run, len(out) - j))
        answer = _ask(base, prompt + list(out[:j]), n, api_key, whole=prompt_whole and j == 0)
        timings = answer_timings(answer)
        if decode_s is not None and n == 1 and timings.prompt_n == 1 \
                and timings.prompt_ms is not None:  # a time it did not give is no figure
            decode_s.append(timings.prompt_ms / 1000.0)
        for token, share, gap in _choice(answer, n):
            argmax.append(token)
            shares.append(share)
            gaps.append(gap)
            j += 1
            if token != out[j - 1]:
                break  # what the draft says next follows a prefix the target never wrote
    return TeacherForced(tuple(argmax), tuple(shares), tuple(gaps))


def forced_in_torch(model, request: Request, picker=None) -> TeacherForced:
    """The pass in process: one forward of ``model`` (a transformers causal LM) over prompt
    + output. ``picker`` (core.engines.sampling.TokenPicker, greedy) applies the engine's
    repetition penalty row by row as its draft would see it; None: raw logits."""
    import torch

    ids = list(request.prompt) + list(request.output[:-1])
    with torch.inference_mode():
        logits = model(torch.tensor([ids], device=model.device)).logits[0].float()
    rows = logits[len(request.prompt) - 1:]
    if picker is not None:
        rows = picker.fit_vocab(rows)
        if picker.spec.repetition_penalty != 1.0:
            rows = torch.stack([picker.process(rows[j:j + 1], (), seen=request.output[:j])[0]
                                for j in range(rows.shape[0])])
    top = torch.topk(rows, TOP_K, dim=-1).values
    shares = torch.softmax(top, dim=-1)[:, 0]
    return TeacherForced(tuple(int(t) for t in rows.argmax(dim=-1).tolist()),
                         tuple(float(p) for p in shares.tolist()),
                         tuple(float(g) for g in (top[:, 0] - top[:, 1]).tolist()))


class _DraftSimple(Drafter):
    """llama-server's draft-simple, greedy, for one sequence (common/speculative.cpp:350-472,
    ``common_speculative_impl_draft_simple::draft``): the draft's top token, step by step, up
    to ``n_max`` and the step's cut (server-context.cpp:3238 ``n_draft_max``, tested after
    each token, :440); stopped before a token whose share of the top 10 is under ``p_min``
    (:421); dropped whole when shorter than ``n_min`` (:468). Where the token at a position
    comes from is the subclass's (``_choice``)."""

    name = DRAFT_SIMPLE

    def __init__(self, n_max: int | None = None, n_min: int | None = None,
                 p_min: float | None = None) -> None:
        given = with_defaults(DRAFT_SIMPLE, n_max=n_max, n_min=n_min, p_min=p_min)
        self.n_max, self.n_min = int(given["n_max"]), int(given["n_min"])
        self.p_min = float(given["p_min"])
        self._output: tuple[int, ...] = ()
        self._prompt_len = 0

    @staticmethod
    def key(request: Request) -> tuple:
        return (request.prompt, request.output)

    def on_request(self, request) -> None:
        self._output = request.output
        self._prompt_len = len(request.prompt)

    def _choice(self, history: list[int], last: int,
                drafted: list[int]) -> tuple[int, float] | None:
        """The draft's token after history + last + ``drafted`` and its top-10 share; None
        where it is not known (never accepted: see ``_unseen``)."""
        raise NotImplementedError

    def _unseen(self, left: int) -> list[int]:
        return [UNKNOWN] * max(0, left)

    def draft(self, slot: int, history: list[int], last: int) -> list[int]:
        most = min(self.n_max, self.room)
        out: list[int] = []
        for i in range(most):
            choice = self._choice(history, last, out)
            if choice is None:
                out += self._unseen(most - i)
                break
            token, share = choice
            if share < self.p_min:
                break
            out.append(token)
        return out if len(out) >= self.n_min else []


class DraftModel(_DraftSimple):
    """llama-server's draft-simple, greedy, replayed from teacher-forced passes (one per
    request, keyed by the request's prompt and output)."""

    def __init__(self, forced: dict[tuple, TeacherForced], n_max: int | None = None,
                 n_min: int | None = None, p_min: float | None = None) -> None:
        super().__init__(n_max, n_min, p_min)
        self.forced = forced
        self._current: TeacherForced | None = None
        passed = [p >= self.p_min for f in forced.values() for p in f.p]
        self.pass_rate = sum(passed) / len(passed) if passed else 1.0
        self.estimated = 0
        """Drafts whose length past the first wrong token was estimated (p_min > 0)."""

    def on_request(self, request) -> None:
        self._current = self.forced.get(self.key(request))
        if self._current is None:
            raise KeyError("no teacher-forced pass for this request")
        super().on_request(request)

    def _choice(self, history: list[int], last: int,
                drafted: list[int]) -> tuple[int, float] | None:
        forced = self._current
        j = len(history) + 1 - self._prompt_len + len(drafted)  # the output position drafted
        if j >= len(forced.argmax):  # past the output's end (it ended there)
            return None
        if drafted and drafted[-1] != self._output[j - 1]:
            return None  # after the first wrong token: a prefix the target never wrote
        return forced.argmax[j], forced.p[j]

    def _unseen(self, left: int) -> list[int]:
        """The draft's tokens after its first wrong one: never accepted; as many as p_min
        would let through (all of them when it is 0, else an estimate)."""
        if left <= 0:
            return []
        if self.p_min > 0.0:
            self.estimated += 1
            left = round(sum(self.pass_rate ** (n + 1) for n in range(left)))
        return [UNKNOWN] * left


class DraftOnServer(_DraftSimple):
    """llama-server's draft-simple for one setting, run for real on a plain llama-server of
    the draft (``-np 1``, slot 0, as :func:`forced_on_server` uses it), its draft context
    written by the batches a drafting llama-server writes it with:

    - a request's prompt decoded whole (``begin``; the drafting server is sent
      ``cache_prompt`` false);
    - at a step, ``id_last`` and then each drafted token but the last decoded alone, each
      giving the next token (speculative.cpp:383, :446), then all of them dropped
      (server-context.cpp:3276);
    - after the verification, ``id_last`` and the whole draft decoded in one batch of d + 1
      rows (server-context.cpp:4075), the rejected ones then dropped (:4348): here a
      request that makes the slot's cache fall back to the step's start (one throw-away row
      after it) and one that decodes ``id_last`` + the draft from there;
    - a step without a draft decodes ``id_last`` alone, which its draft's first request did.

    Exact for that one setting where the two servers compute alike (same build and flags);
    a pass per setting, about (tokens drafted + 2 x verifications) requests, where the
    teacher-forced pass serves every setting at once. ``seen``: per request, the draft's
    choice at each output position it drafted while its draft was still the target's text,
    with its lead over its second choice (nats)."""

    def __init__(self, base: Base, n_max: int | None = None, n_min: int | None = None,
                 p_min: float | None = None, api_key: str | None = None,
                 cancel: threading.Event | None = None) -> None:
        super().__init__(n_max, n_min, p_min)
        self.base, self.api_key, self.cancel = base, api_key, cancel
        self.requests = 0
        self.seen: dict[tuple, dict[int, tuple[int, float]]] = {}
        self._seen: dict[int, tuple[int, float]] = {}
        self._step: tuple[list[int], list[int]] = ([], [])

    def _post(self, tokens: list[int], n: int = 1, whole: bool = False) -> dict:
        if self.cancel is not None and self.cancel.is_set():
            raise CancelledError("Draft replay cancelled.")
        self.requests += 1
        return _ask(self.base, tokens, n, self.api_key, whole)

    def on_request(self, request) -> None:
        super().on_request(request)
        self._seen = self.seen.setdefault(self.key(request), {})

    def begin(self, slot: int, prompt: list[int]) -> None:
        self._post(list(prompt), whole=True)

    def _choice(self, history: list[int], last: int,
                drafted: list[int]) -> tuple[int, float]:
        token, share, gap = _choice(self._post(history + [last] + drafted), 1)[0]
        t = len(history) + 1 - self._prompt_len
        j = t + len(drafted)
        if j < len(self._output) and tuple(drafted) == self._output[t:j]:
            self._seen[j] = (token, gap)
        return token, share

    def draft(self, slot: int, history: list[int], last: int) -> list[int]:
        out = super().draft(slot, history, last)
        self._step = (list(history), [last] + out)
        return out

    def accept(self, slot: int, n_accepted: int, other: bool) -> None:
        history, batch = self._step
        self._post(history + [0 if batch[0] != 0 else 1])  # the cache back to `history`
        self._post(history + batch)  # id_last + the draft: one batch of d + 1 rows


def torch_engine_counts(forced: TeacherForced, request: Request, k: int,
                        adaptive: bool = True, eos_ids: frozenset[int] = frozenset(),
                        stop_on_eos: bool = False) -> tuple[list[int], list[int], int, int]:
    """SpecDeck's PyTorch engine's loop (core/engines/speculative.py, ``Generation``) with a
    draft model, replayed: every token comes out of a verification (the first too); each asks
    the draft for min(allowed, tokens left - 1), ``allowed`` following ``DraftLength`` when
    ``adaptive``. Returns per-position drafted, per-position accepted, steps, draft steps."""
    from specdeck.core.engines.speculative import DraftLength, Tally

    out = request.output
    total = len(out)
    tally = Tally()
    length = DraftLength(k) if adaptive else None
    t = 0
    while t < total:
        allowed = length.allowed if length else k
        budget = (request.n_predict if request.n_predict >= 0 else total) - t
        room = max(0, min(allowed, budget - 1))
        accepted = 0
        while accepted < room and t + accepted < total \
                and forced.argmax[t + accepted] == out[t + accepted]:
            accepted += 1
        emitted = accepted + 1
        drafted = room
        if stop_on_eos:
            eos_at = next((i for i in range(min(emitted, total - t)) if out[t + i] in eos_ids),
                          None)
            if eos_at is not None:
                drafted, accepted = min(drafted, eos_at + 1), min(accepted, eos_at + 1)
                emitted = eos_at + 1
        tally.record(drafted, accepted)
        if length:
            length.update(drafted, accepted)
        t += emitted
    return tally.per_position_drafted, tally.per_position_accepted, tally.steps, \
        tally.draft_steps
