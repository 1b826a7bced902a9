"""The speculative decoding loop of the PyTorch engine, and its drafters.

One step: the drafter proposes up to k tokens; the target reads its last token plus the
drafts in ONE forward; the longest prefix of drafts the target agrees with is kept, plus the
target's own next token; the target's KV cache (and the draft model's) is cropped back to
the kept tokens. Without a drafter the same loop is plain greedy decoding, one token per
forward, so the baseline arm runs exactly the code the speculative arms run.

Invariant between steps: the target's cache holds every token of the sequence but the last.
The prompt's prefill therefore covers prompt[:-1] and every emitted token comes out of a
verify step, which keeps the accounting exact: new_tokens == steps + accepted (base.py).

Imports torch; only the PyTorch engine uses this module.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
from specdeck.core.engines.base import (
    DrafterKind,
    EventCallback,
    GenerationEvent,
    GenerationStats,
    StopReason,
)
from specdeck.core.engines.detok import StreamDecoder
from specdeck.core.engines.ngram import PromptLookup
from specdeck.core.engines.sampling import TokenPicker
from specdeck.core.errors import CancelledError

PREFILL_CHUNK = 512
"""Prompt tokens per prefill forward: bounds attention memory and lets cancel act between."""


def cache_argument(model: torch.nn.Module) -> str:
    """The forward's KV-cache keyword: ``cache`` since transformers 5.2x, which deprecates
    ``past_key_values`` (gone in 5.40); older 5.x releases take only ``past_key_values``."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class KVModel:
    """A causal LM with its own KV cache: feed tokens, read logits, roll back."""

    def __init__(self, model: torch.nn.Module, device: torch.device):
        self.model = model
        self.device = device
        self.cache = None
        self._cache_arg = cache_argument(model)

    def reset(self) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache(config=self.model.config)

    @property
    def length(self) -> int:
        return self.cache.get_seq_length() if self.cache is not None else 0

    def feed(self, ids: Sequence[int], all_logits: bool = True) -> torch.Tensor:
        """Logits [len(ids), V] (or [1, V] for the last token only)."""
        x = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
        out = self.model(
            input_ids=x,
            **{self._cache_arg: self.cache},
            use_cache=True,
            logits_to_keep=0 if all_logits else 1,
        )
        return out.logits[0]

    def prefill(self, ids: Sequence[int], cancel: threading.Event | None = None) -> None:
        for start in range(0, len(ids), PREFILL_CHUNK):
            if cancel is not None and cancel.is_set():
                raise CancelledError("Generation cancelled during the prompt's prefill.")
            self.feed(ids[start : start + PREFILL_CHUNK], all_logits=False)

    def rollback(self, tokens: int) -> None:
        """Drop the last ``tokens`` positions (transformers 5: crop takes a negative count)."""
        if tokens > 0:
            self.cache.crop(-tokens)

    def release(self) -> None:
        self.cache = None


@dataclass
class Draft:
    tokens: list[int]
    probs: list[torch.Tensor] | None = None
    """Sampled drafting only: the drafter's distribution for each token."""


class Drafter(Protocol):
    kind: DrafterKind

    def start(self, prompt_ids: Sequence[int], cancel: threading.Event | None) -> None:
        """A new sequence begins (prefill a draft model here)."""

    def propose(self, seq: Sequence[int], max_tokens: int, picker: TokenPicker) -> Draft: ...

    def commit(self, seq: Sequence[int]) -> None:
        """The sequence after a verify step; drop whatever the target rejected."""


class NgramDrafter:
    """Prompt lookup over prompt + output (see ngram.py)."""

    kind = DrafterKind.NGRAM

    def __init__(self, ngram_max: int, ngram_min: int, short_tokens: int):
        self.lookup = PromptLookup(ngram_max, ngram_min, short_tokens)

    def start(self, prompt_ids: Sequence[int], cancel: threading.Event | None) -> None:
        self.lookup.reset(prompt_ids)

    def propose(self, seq: Sequence[int], max_tokens: int, picker: TokenPicker) -> Draft:
        return Draft(self.lookup.propose(max_tokens))

    def commit(self, seq: Sequence[int]) -> None:
        self.lookup.extend(seq[len(self.lookup.ids) :])


class ModelDrafter:
    """A smaller model of the same tokenizer, decoding ahead with its own KV cache."""

    kind = DrafterKind.MODEL

    def __init__(self, kv: KVModel):
        self.kv = kv
        self._cached: list[int] = []
        """Exactly the tokens the draft cache holds."""

    def start(self, prompt_ids: Sequence[int], cancel: threading.Event | None) -> None:
        self.kv.reset()
        self._cached = list(prompt_ids[:-1])
        self.kv.prefill(self._cached, cancel)

    def propose(self, seq: Sequence[int], max_tokens: int, picker: TokenPicker) -> Draft:
        if max_tokens <= 0:
            return Draft([])
        unseen = list(seq[len(self._cached) :])
        row = self.kv.feed(unseen, all_logits=False)
        self._cached.extend(unseen)
        tokens: list[int] = []
        probs: list[torch.Tensor] = []
        for i in range(max_tokens):
            token, dist = picker.pick(picker.process(row, (), seen=tokens)[-1])
            tokens.append(token)
            if dist is not None:
                probs.append(dist)
            if i + 1 < max_tokens:
                row = self.kv.feed([token], all_logits=False)
                self._cached.append(token)
        return Draft(tokens, probs if not picker.greedy else None)

    def commit(self, seq: Sequence[int]) -> None:
        keep = 0
        limit = min(len(self._cached), len(seq))
        while keep < limit and self._cached[keep] == seq[keep]:
            keep += 1
        self.kv.rollback(len(self._cached) - keep)
        del self._cached[keep:]


class DraftLength:
    """How many tokens to ask the drafter for next, from how its last draft fared.

    A draft the target kept whole allows 2 more next time (up to k); a draft rejected from
    its first token halves the allowance (down to 1); a partly kept draft changes nothing
    (in copied text the source usually goes on after a one-word edit). Copy runs keep the
    verify batch wide; where guesses keep missing it narrows, so a lookup that matched by
    chance costs one extra row instead of k (on a CPU each row costs ~7% of a forward).
    Measured on the demo model: at k = 8 this beat fixed k on input-grounded prompts
    (2.45x vs 2.32x geometric mean) and was as fast where nothing is copied.
    """

    def __init__(self, k_max: int):
        self.k_max = k_max
        self.allowed = k_max

    def update(self, drafted: int, accepted: int) -> None:
        if not drafted:
            return
        if accepted == drafted:
            self.allowed = min(self.k_max, self.allowed + 2)
        elif accepted == 0:
            self.allowed = max(1, self.allowed // 2)


@dataclass
class Tally:
    """Running counts of one generation (see base.GenerationStats for definitions)."""

    steps: int = 0
    draft_steps: int = 0
    drafted: int = 0
    accepted: int = 0
    per_position_drafted: list[int] = field(default_factory=list)
    per_position_accepted: list[int] = field(default_factory=list)

    def record(self, drafted: int, accepted: int) -> None:
        self.steps += 1
        if drafted:
            self.draft_steps += 1
        self.drafted += drafted
        self.accepted += accepted
        while len(self.per_position_drafted) < drafted:
            self.per_position_drafted.append(0)
            self.per_position_accepted.append(0)
        for i in range(drafted):
            self.per_position_drafted[i] += 1
            if i < accepted:
                self.per_position_accepted[i] += 1


@dataclass
class RunOutput:
    token_ids: list[int]
    from_draft: list[bool]
    top2_gaps: list[float]
    text: str
    stats: GenerationStats


@dataclass
class RunSettings:
    max_new_tokens: int
    num_draft_tokens: int
    eos_token_ids: frozenset[int]
    stop_on_eos: bool
    adaptive_draft_length: bool = True


MemoryProbe = Callable[[], None]


class Generation:
    """One run of the loop and its state; see the module docstring for the invariant."""

    def __init__(
        self,
        target: KVModel,
        drafter: Drafter | None,
        picker: TokenPicker,
        prompt_ids: Sequence[int],
        settings: RunSettings,
        stream: StreamDecoder,
        on_event: EventCallback | None,
        cancel: threading.Event | None,
        sample_memory: MemoryProbe | None,
    ):
        self.target = target
        self.drafter = drafter
        self.picker = picker
        self.prompt_ids = list(prompt_ids)
        self.settings = settings
        self.stream = stream
        self.on_event = on_event
        self.cancel = cancel
        self.sample_memory = sample_memory
        self.seq = list(prompt_ids)
        self.out: list[int] = []
        self.from_draft: list[bool] = []
        self.gaps: list[float] = []
        self.tally = Tally()
        self.length = (
            DraftLength(settings.num_draft_tokens) if settings.adaptive_draft_length else None
        )
        self.reason = StopReason.MAX_NEW_TOKENS
        self.started = self.decode_start = time.perf_counter()
        self.first_token_at: float | None = None

    def run(self) -> RunOutput:
        """Generate from the prompt; returns what was produced, cut short on cancel."""
        with torch.inference_mode():
            return self._run()

    def _run(self) -> RunOutput:
        self._prefill()
        while self._should_continue():
            self._step()
        finished = time.perf_counter()
        tail = self.stream.flush()
        if tail:
            self._emit(tail, [], 0, 0, finished)
        return RunOutput(self.out, self.from_draft, self.gaps, self.stream.text,
                         self._stats(finished))

    def _prefill(self) -> None:
        try:
            self.target.reset()
            self.target.prefill(self.prompt_ids[:-1], self.cancel)
            if self.drafter is not None:
                self.drafter.start(self.prompt_ids, self.cancel)
        except CancelledError:
            self.reason = StopReason.CANCELLED
        self.decode_start = time.perf_counter()

    def _should_continue(self) -> bool:
        if self.reason is not StopReason.MAX_NEW_TOKENS:
            return False
        if self.cancel is not None and self.cancel.is_set():
            self.reason = StopReason.CANCELLED
            return False
        return len(self.out) < self.settings.max_new_tokens

    def _draft(self) -> Draft:
        budget = self.settings.max_new_tokens - len(self.out)
        allowed = self.length.allowed if self.length else self.settings.num_draft_tokens
        room = min(allowed, budget - 1)  # the target's own token needs the last slot
        if self.drafter is None or room <= 0:
            return Draft([])
        return self.drafter.propose(self.seq, room, self.picker)

    def _step(self) -> None:
        draft = self._draft()
        drafts = draft.tokens
        processed = self.picker.process(self.target.feed([self.seq[-1], *drafts]), drafts)
        verdict = self.picker.verify(processed, drafts, draft.probs)
        self.target.rollback(len(drafts) - verdict.accepted)
        emitted = [*drafts[: verdict.accepted], verdict.next_token]
        drafted, accepted = len(drafts), verdict.accepted
        eos_at = self._eos_position(emitted)
        if eos_at is not None:
            # Drafts after the EOS were never needed: count only what was verified up to it.
            # A draft at the EOS position that the target replaced counts as rejected;
            # ExLlamaV2 stops before comparing that one, so its rejected count can be 1 lower.
            emitted = emitted[: eos_at + 1]
            drafted, accepted = min(drafted, eos_at + 1), min(accepted, eos_at + 1)
            self.reason = StopReason.EOS
        self.seq.extend(emitted)
        self.out.extend(emitted)
        self.from_draft.extend(j < verdict.accepted for j in range(len(emitted)))
        self.gaps.extend(verdict.top2_gaps[: len(emitted)])
        self.picker.observe(emitted)
        if self.drafter is not None:
            self.drafter.commit(self.seq)
        self.tally.record(drafted, accepted)
        if self.length:
            self.length.update(drafted, accepted)
        now = time.perf_counter()
        if self.first_token_at is None:
            self.first_token_at = now
        if self.sample_memory is not None:
            self.sample_memory()
        # Decode the accepted drafts and the target's own token separately, so the GUI can
        # highlight exactly the text that came from drafts.
        kept_drafts = min(verdict.accepted, len(emitted))
        draft_text = self.stream.push(emitted[:kept_drafts]) if kept_drafts else ""
        text = draft_text + self.stream.push(emitted[kept_drafts:])
        self._emit(text, emitted, drafted, accepted, now, len(draft_text))

    def _eos_position(self, emitted: list[int]) -> int | None:
        if not self.settings.stop_on_eos:
            return None
        for j, token in enumerate(emitted):
            if token in self.settings.eos_token_ids:
                return j
        return None

    def _emit(self, text: str, emitted: list[int], drafted: int, accepted: int,
              now: float, draft_chars: int = 0) -> None:
        if self.on_event is None:
            return
        self.on_event(
            GenerationEvent(
                text=text,
                token_ids=tuple(emitted),
                from_draft=tuple(self.from_draft[len(self.from_draft) - len(emitted) :]),
                step=self.tally.steps,
                drafted=drafted,
                accepted=accepted,
                new_tokens=len(self.out),
                total_drafted=self.tally.drafted,
                total_accepted=self.tally.accepted,
                elapsed_s=now - self.decode_start,
                draft_chars=draft_chars,
            )
        )

    def _stats(self, finished: float) -> GenerationStats:
        tally = self.tally
        return GenerationStats(
            prompt_tokens=len(self.prompt_ids),
            new_tokens=len(self.out),
            prefill_s=self.decode_start - self.started,
            decode_s=finished - self.decode_start,
            steps=tally.steps,
            draft_steps=tally.draft_steps,
            drafted=tally.drafted,
            accepted=tally.accepted,
            per_position_drafted=tuple(tally.per_position_drafted),
            per_position_accepted=tuple(tally.per_position_accepted),
            stop_reason=self.reason,
            time_to_first_token_s=(
                self.first_token_at - self.started if self.first_token_at else None
            ),
        )
