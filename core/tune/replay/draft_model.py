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
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

from specdeck.core.errors import CancelledError
from specdeck.core.llama_flags import DRAFT_SIMPLE
from specdeck.core.servers.transport import BadAnswerError, Base
from specdeck.core.tune.replay.capture import complete
from specdeck.core.tune.replay.drafters import Drafter
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

    def to_json(self) -> dict:
        return {"argmax": list(self.argmax), "p": [round(x, 6) for x in self.p]}

    @classmethod
    def from_json(cls, data: dict) -> TeacherForced:
        return cls(tuple(int(t) for t in data["argmax"]), tuple(float(x) for x in data["p"]))


def _top_share(logprobs: list[float]) -> float:
    """The first of ``logprobs`` (sorted, the top ones) as a share of all of them."""
    top = max(logprobs)
    total = sum(math.exp(lp - top) for lp in logprobs)
    return 1.0 / total


def forced_on_server(base: Base, request: Request, api_key: str | None = None,
                     cancel: threading.Event | None = None, run: int = 1,
                     decode_s: list[float] | None = None) -> TeacherForced:
    """The teacher-forced pass of the draft a plain llama-server at ``base`` serves: its
    greedy token after prompt + output so far, for each output position, with ``n_probs``.

    ``run`` 1: one request per position. ``run`` > 1: each request generates up to ``run``
    tokens, which give the forced choices up to and including the draft's first wrong one;
    the next request starts after it (the slot's cache then holds all but that token). Fewer
    requests where the draft is often right, wasted tokens where it is not
    (``bench_replay_draft`` measures both). ``decode_s`` collects what each one-token
    request took the server to decode its new token (``timings.prompt_ms``): one decode of
    the draft, for the cost model."""
    argmax, shares = [], []
    prompt, out = list(request.prompt), request.output
    j = 0
    while j < len(out):
        if cancel is not None and cancel.is_set():
            raise CancelledError("Teacher-forced pass cancelled.")
        n = max(1, min(run, len(out) - j))
        answer = complete(base, tuple(prompt + list(out[:j])), n, api_key=api_key, slot=0,
                          n_probs=TOP_K)
        timings = answer.get("timings")
        if decode_s is not None and n == 1 and isinstance(timings, dict) \
                and timings.get("prompt_n") == 1:
            decode_s.append(float(timings.get("prompt_ms") or 0.0) / 1000.0)
        probs = answer.get("completion_probabilities")
        if not isinstance(probs, list) or not probs:
            raise BadAnswerError("llama-server gave no completion_probabilities for n_probs.",
                                 "Use a llama-server that answers n_probs on /completion.")
        for entry in probs[:n]:
            top = entry.get("top_logprobs") if isinstance(entry, dict) else None
            if not isinstance(top, list) or not top:
                raise BadAnswerError("llama-server gave no top_logprobs.", "Check its version.")
            token = int(top[0]["id"])
            argmax.append(token)
            shares.append(_top_share([float(t["logprob"]) for t in top[:TOP_K]]))
            j += 1
            if token != out[j - 1]:
                break  # what the draft says next follows a prefix the target never wrote
    return TeacherForced(tuple(argmax), tuple(shares))


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
                         tuple(float(p) for p in shares.tolist()))


class DraftModel(Drafter):
    """llama-server's draft-simple, greedy, replayed from teacher-forced passes (one per
    request, keyed by the request's prompt and output)."""

    name = DRAFT_SIMPLE

    def __init__(self, forced: dict[tuple, TeacherForced], n_max: int = 3, n_min: int = 0,
                 p_min: float = 0.0) -> None:
        self.forced = forced
        self.n_max, self.n_min, self.p_min = n_max, n_min, p_min
        self._current: TeacherForced | None = None
        self._output: tuple[int, ...] = ()
        self._prompt_len = 0
        passed = [p >= p_min for f in forced.values() for p in f.p]
        self.pass_rate = sum(passed) / len(passed) if passed else 1.0
        self.estimated = 0
        """Drafts whose length past the first wrong token was estimated (p_min > 0)."""

    @staticmethod
    def key(request: Request) -> tuple:
        return (request.prompt, request.output)

    def on_request(self, request) -> None:
        self._current = self.forced.get(self.key(request))
        if self._current is None:
            raise KeyError("no teacher-forced pass for this request")
        self._output = request.output
        self._prompt_len = len(request.prompt)

    def _unseen(self, left: int) -> list[int]:
        """The draft's tokens after its first wrong one: never accepted; as many as p_min
        would let through (all of them when it is 0, else an estimate)."""
        if left <= 0:
            return []
        if self.p_min > 0.0:
            self.estimated += 1
            left = round(sum(self.pass_rate ** (n + 1) for n in range(left)))
        return [UNKNOWN] * left

    def draft(self, slot: int, history: list[int], last: int) -> list[int]:
        forced, output = self._current, self._output
        t = len(history) + 1 - self._prompt_len  # output tokens known, `last` included
        most = min(self.n_max, self.room)
        out: list[int] = []
        for i in range(most):
            j = t + i
            if j >= len(forced.argmax):  # past the output's end (it ended there)
                out += self._unseen(most - i)
                break
            if forced.p[j] < self.p_min:
                break
            out.append(forced.argmax[j])
            if forced.argmax[j] != output[j]:
                out += self._unseen(most - i - 1)
                break
        return out if len(out) >= self.n_min else []


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
