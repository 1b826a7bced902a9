"""Greedy losslessness check: identical, prefix, float tie, or a real divergence."""

from __future__ import annotations

from specdeck.core.engines.base import GREEDY, NO_DRAFT, GenerationResult, GenerationStats
from specdeck.core.engines.lossless import Verdict, compare_greedy


def run(tokens, gaps=()) -> GenerationResult:
    stats = GenerationStats(prompt_tokens=3, new_tokens=len(tokens), prefill_s=0.1,
                            decode_s=1.0, steps=len(tokens), draft_steps=0, drafted=0,
                            accepted=0)
    return GenerationResult("", tuple(tokens), (1, 2, 3), stats, NO_DRAFT, GREEDY, "torch",
                            top2_gaps=tuple(gaps))


def test_identical_and_prefix_are_lossless():
    assert compare_greedy(run([5, 6, 7]), run([5, 6, 7])).verdict is Verdict.IDENTICAL
    prefix = compare_greedy(run([5, 6, 7]), run([5, 6]))
    assert prefix.verdict is Verdict.PREFIX and prefix.lossless and prefix.compared == 2


def test_a_divergence_at_an_exact_tie_is_reported_as_a_tie():
    comparison = compare_greedy(run([5, 6, 7], gaps=[2.0, 0.0, 1.0]), run([5, 9, 7]))
    assert comparison.verdict is Verdict.TIE
    assert (comparison.first_divergence, comparison.reference_token,
            comparison.candidate_token, comparison.gap) == (1, 6, 9, 0.0)
    assert not comparison.lossless


def test_a_clear_divergence_is_never_called_a_tie():
    comparison = compare_greedy(run([5, 6, 7], gaps=[2.0, 0.75, 1.0]),
                                run([5, 9, 7], gaps=[2.0, 0.5, 1.0]))
    assert comparison.verdict is Verdict.DIVERGED and comparison.gap == 0.5
    assert compare_greedy(run([5, 6]), run([5, 9])).verdict is Verdict.DIVERGED  # no gaps known
    loose = compare_greedy(run([5, 6], gaps=[1, 0.01]), run([5, 9]), tie_tolerance=0.02)
    assert loose.verdict is Verdict.TIE
