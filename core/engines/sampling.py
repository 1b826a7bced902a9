"""Choosing tokens from logits, and accepting draft tokens without changing the output.

Greedy (the A/B default): the target's argmax at every position; a draft token is accepted
while it equals that argmax, so the output is the target's own greedy output.

Sampled: the draft token x, drawn from the drafter's distribution q, is kept with probability
min(1, p(x) / q(x)); on the first rejection the replacement is drawn from max(0, p - q),
normalised (Leviathan et al. 2023, Chen et al. 2023). The output then has exactly the
target's sampling distribution. A deterministic drafter (n-gram lookup) is the case q = one
hot at x: keep x with probability p(x), else draw from p with x removed.

The repetition penalty (CTRL / transformers style) depends on the tokens so far, so row i of
a verify batch is penalised with the history plus the first i draft tokens.

Imports torch; only the PyTorch engine uses this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from specdeck.core.engines.base import SamplingSpec


@dataclass
class StepOutcome:
    """The outcome of verifying one step's draft."""

    accepted: int
    """Leading draft tokens the target kept."""
    next_token: int
    """The target's own token after them (correction or bonus)."""
    top2_gaps: list[float]
    """Greedy only: top-1 minus top-2 processed logit for each emitted position."""


class TokenPicker:
    """Processes logits with one request's sampling settings and picks tokens."""

    def __init__(
        self,
        spec: SamplingSpec,
        vocab_size: int,
        device: torch.device,
        history: Sequence[int] = (),
    ):
        self.spec = spec
        self.vocab_size = vocab_size
        self.device = device
        self._penalise = spec.repetition_penalty != 1.0
        self._seen = torch.zeros(vocab_size, dtype=torch.bool, device=device)
        self.observe(history)
        self._generator = torch.Generator(device="cpu")
        if spec.seed is not None:
            self._generator.manual_seed(spec.seed)
        else:
            self._generator.seed()

    @property
    def greedy(self) -> bool:
        return self.spec.greedy

    def observe(self, ids: Sequence[int]) -> None:
        """Tokens that joined the sequence (they count for the repetition penalty)."""
        if self._penalise and ids:
            index = torch.tensor([i for i in ids if 0 <= i < self.vocab_size], dtype=torch.long)
            self._seen[index.to(self.device)] = True

    # logits processing -------------------------------------------------------------
    def fit_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits over exactly ``vocab_size`` ids (a draft's vocab may be padded or shorter)."""
        width = logits.shape[-1]
        if width == self.vocab_size:
            return logits
        if width > self.vocab_size:
            return logits[..., : self.vocab_size]
        pad = logits.new_full((*logits.shape[:-1], self.vocab_size - width), float("-inf"))
        return torch.cat([logits, pad], dim=-1)

    def process(
        self, logits: torch.Tensor, drafts: Sequence[int] = (), seen: Sequence[int] = ()
    ) -> torch.Tensor:
        """Rows [m, V] -> processed float32 logits. Row i sees the history, ``seen`` and
        drafts[:i] (a verify batch); a draft model decoding ahead passes its tokens as ``seen``."""
        rows = self.fit_vocab(logits).float()
        if self._penalise:
            rows = self._apply_repetition_penalty(rows, drafts, seen)
        if self.greedy:
            return rows
        rows = rows / self.spec.temperature
        if self.spec.top_k > 0 and self.spec.top_k < rows.shape[-1]:
            kth = torch.topk(rows, self.spec.top_k, dim=-1).values[..., -1:]
            rows = rows.masked_fill(rows < kth, float("-inf"))
        if self.spec.top_p < 1.0:
            rows = _top_p_filter(rows, self.spec.top_p)
        return rows

    def _apply_repetition_penalty(
        self, rows: torch.Tensor, drafts: Sequence[int], extra: Sequence[int]
    ) -> torch.Tensor:
        seen = self._seen.expand(rows.shape[0], -1).clone()
        for token in extra:
            if 0 <= token < self.vocab_size:
                seen[:, token] = True
        for i in range(1, rows.shape[0]):
            for token in drafts[:i]:
                if 0 <= token < self.vocab_size:
                    seen[i, token] = True
        p = self.spec.repetition_penalty
        penalised = torch.where(rows > 0, rows / p, rows * p)
        return torch.where(seen, penalised, rows)

    # picking -----------------------------------------------------------------------
    def probabilities(self, processed: torch.Tensor) -> torch.Tensor:
        return torch.softmax(processed, dim=-1)

    def sample(self, probs: torch.Tensor) -> int:
        return int(torch.multinomial(probs.cpu(), 1, generator=self._generator).item())

    def pick(self, processed_row: torch.Tensor) -> tuple[int, torch.Tensor | None]:
        """One token from one processed row, and (sampled only) its distribution."""
        if self.greedy:
            return int(processed_row.argmax().item()), None
        probs = self.probabilities(processed_row)
        return self.sample(probs), probs

    def verify(
        self,
        processed: torch.Tensor,
        drafts: Sequence[int],
        draft_probs: Sequence[torch.Tensor] | None,
    ) -> StepOutcome:
        """Which drafts the target keeps, given its processed rows [len(drafts) + 1, V]."""
        if self.greedy:
            return _verify_greedy(processed, drafts)
        return self._verify_sampled(processed, drafts, draft_probs)

    def _verify_sampled(
        self,
        processed: torch.Tensor,
        drafts: Sequence[int],
        draft_probs: Sequence[torch.Tensor] | None,
    ) -> StepOutcome:
        probs = self.probabilities(processed).cpu()
        for i, token in enumerate(drafts):
            p = probs[i]
            q = draft_probs[i].cpu() if draft_probs is not None else None
            q_token = float(q[token]) if q is not None else 1.0
            ratio = float(p[token]) / q_token if q_token > 0 else 0.0
            if float(torch.rand((), generator=self._generator)) < min(1.0, ratio):
                continue
            if q is not None:
                residual = (p - q).clamp(min=0.0)
            else:
                residual = p.clone()
                residual[token] = 0.0
            if float(residual.sum()) <= 0.0:  # p == q up to rounding: any draw from p is exact
                residual = p
            return StepOutcome(i, self.sample(residual / residual.sum()), [])
        return StepOutcome(len(drafts), self.sample(probs[len(drafts)]), [])


def _verify_greedy(processed: torch.Tensor, drafts: Sequence[int]) -> StepOutcome:
    top2 = torch.topk(processed, 2, dim=-1)
    choices = top2.indices[:, 0].tolist()
    accepted = 0
    for token, choice in zip(drafts, choices):
        if token != choice:
            break
        accepted += 1
    gaps = (top2.values[: accepted + 1, 0] - top2.values[: accepted + 1, 1]).tolist()
    return StepOutcome(accepted, choices[accepted], gaps)


def _top_p_filter(rows: torch.Tensor, top_p: float) -> torch.Tensor:
    sorted_logits, order = torch.sort(rows, dim=-1, descending=True)
    cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
    # Drop a token when the tokens before it already reach top_p (the first always stays).
    drop_sorted = (cumulative - torch.softmax(sorted_logits, dim=-1)) >= top_p
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return rows.masked_fill(drop, float("-inf"))
