"""Is a speculative run's greedy output the target's own? Token by token, ties told apart.

With greedy sampling, speculation must not change a single token. In float32 on CPU it does not
(tests/core/test_engine_lossless.py checks it on real tiny models). In bfloat16 the target's
top two logits are sometimes exactly equal, and a different batch shape (1 row vs 1 + k rows)
then flips the argmax: a float tie, not a bug in the speculative loop. Engines that know the
top-1/top-2 gap of every emitted token report it (``GenerationResult.top2_gaps``); a divergence
where that gap is within ``tie_tolerance`` is classified as a tie. Nothing is hidden: a tie is
still reported as a divergence, with its position.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from specdeck.core.engines.base import GenerationResult


class OutputMatch(str, enum.Enum):
    IDENTICAL = "identical"
    PREFIX = "prefix"
    """Equal as far as the shorter run went, and then one of them ended. Not lossless: two
    runs asked for the same tokens must give the same output, and an empty or cut-short
    output is not the reference's (a run cancelled midway is left out before comparing)."""
    TIE = "tie"
    """First divergence at a float tie of the target's top two logits."""
    DIVERGED = "diverged"


@dataclass(frozen=True)
class TokenComparison:
    verdict: OutputMatch
    compared: int
    """Tokens compared: the shorter run's length."""
    first_divergence: int | None = None
    """Index into the generated tokens (characters for a text comparison), when they differ;
    for PREFIX, where the shorter one ended."""
    reference_token: int | None = None
    candidate_token: int | None = None
    gap: float | None = None
    """The smaller known top-1/top-2 gap at the divergence."""
    reference_length: int = 0
    """Tokens (characters) each run produced."""
    candidate_length: int = 0

    @property
    def lossless(self) -> bool:
        return self.verdict is OutputMatch.IDENTICAL


def compare_greedy(
    reference: GenerationResult, candidate: GenerationResult, tie_tolerance: float = 0.0
) -> TokenComparison:
    """Compare a candidate run (e.g. with a drafter) with the reference (no drafter)."""
    return compare_tokens(reference.token_ids, candidate.token_ids,
                          (reference.top2_gaps, candidate.top2_gaps), tie_tolerance)


def compare_tokens(ref: Sequence[int], cand: Sequence[int],
                   gaps: Sequence[Sequence[float]] = (), tie_tolerance: float = 0.0) -> TokenComparison:
    """The check on bare token ids (a loop outside the engines, e.g. the GPU kit's bare
    ExLlamaV2 loop); ``gaps``: each run's top-2 logit gaps where known."""
    compared = min(len(ref), len(cand))
    for i in range(compared):
        if ref[i] != cand[i]:
            known = [g[i] for g in gaps if i < len(g)]
            gap = min(known) if known else None
            tie = gap is not None and gap <= tie_tolerance
            return TokenComparison(
                OutputMatch.TIE if tie else OutputMatch.DIVERGED, compared, i, ref[i], cand[i], gap,
                len(ref), len(cand))
    return _ended(compared, ref, cand)


def _ended(compared: int, ref: Sequence, cand: Sequence) -> TokenComparison:
    """Equal up to the shorter one: identical when both ended there, else PREFIX."""
    if len(ref) == len(cand):
        return TokenComparison(OutputMatch.IDENTICAL, compared, reference_length=len(ref),
                               candidate_length=len(cand))
    ref_token = ref[compared] if compared < len(ref) and not isinstance(ref, str) else None
    cand_token = cand[compared] if compared < len(cand) and not isinstance(cand, str) else None
    return TokenComparison(OutputMatch.PREFIX, compared, compared, ref_token, cand_token,
                           reference_length=len(ref), candidate_length=len(cand))


def compare_text(reference: GenerationResult, candidate: GenerationResult) -> TokenComparison:
    """The same check on the generated text, for runs without token ids (server arms: the
    server tokenizes). Positions are characters; no tie detection (no logits)."""
    ref, cand = reference.text, candidate.text
    compared = min(len(ref), len(cand))
    for i in range(compared):
        if ref[i] != cand[i]:
            return TokenComparison(OutputMatch.DIVERGED, compared, i, reference_length=len(ref),
                                   candidate_length=len(cand))
    return _ended(compared, ref, cand)


def compare_runs(reference: GenerationResult, candidate: GenerationResult,
                 tie_tolerance: float = 0.0) -> tuple[TokenComparison, str]:
    """Token by token where both runs have token ids, else character by character.
    Returns the comparison and its unit ("token" or "character")."""
    if reference.token_ids or candidate.token_ids:  # an empty output has no ids, but is one
        return compare_greedy(reference, candidate, tie_tolerance), "token"
    return compare_text(reference, candidate), "character"
