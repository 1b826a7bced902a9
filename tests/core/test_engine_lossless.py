"""Greedy losslessness check: identical, prefix, float tie, or a real divergence."""

from __future__ import annotations

from specdeck.core.engines.base import GREEDY, NO_DRAFT, GenerationResult, GenerationStats
from specdeck.core.engines.lossless import OutputMatch, compare_greedy, compare_runs


def run(tokens, gaps=()) -> GenerationResult:
    stats = GenerationStats(prompt_tokens=3, new_tokens=len(tokens), prefill_s=0.1,
                            decode_s=1.0, steps=len(tokens), draft_steps=0, drafted=0,
                            accepted=0)
    return GenerationResult("", tuple(tokens), (1, 2, 3), stats, NO_DRAFT, GREEDY, "torch",
                            top2_gaps=tuple(gaps))


def test_identical_is_lossless_and_an_output_that_ends_early_is_not():
    """Both runs were asked for the same tokens: a shorter or empty output is not the
    reference's output, though it agrees as far as it goes (issue 26: "False identical")."""
    assert compare_greedy(run([5, 6, 7]), run([5, 6, 7])).lossless
    prefix = compare_greedy(run([5, 6, 7]), run([5, 6]))
    assert prefix.verdict is OutputMatch.PREFIX and not prefix.lossless and prefix.compared == 2
    assert (prefix.first_divergence, prefix.reference_token, prefix.candidate_token) == (2, 7, None)
    assert (prefix.reference_length, prefix.candidate_length) == (3, 2)
    empty = compare_runs(run([5, 6, 7]), run([]))[0]
    assert empty.verdict is OutputMatch.PREFIX and not empty.lossless and empty.first_divergence == 0
    longer = compare_greedy(run([5]), run([5, 6]))
    assert not longer.lossless and longer.candidate_token == 6


def test_a_divergence_at_an_exact_tie_is_reported_as_a_tie():
    comparison = compare_greedy(run([5, 6, 7], gaps=[2.0, 0.0, 1.0]), run([5, 9, 7]))
    assert comparison.verdict is OutputMatch.TIE
    assert (comparison.first_divergence, comparison.reference_token,
            comparison.candidate_token, comparison.gap) == (1, 6, 9, 0.0)
    assert not comparison.lossless


def test_a_clear_divergence_is_never_called_a_tie():
    comparison = compare_greedy(run([5, 6, 7], gaps=[2.0, 0.75, 1.0]),
                                run([5, 9, 7], gaps=[2.0, 0.5, 1.0]))
    assert comparison.verdict is OutputMatch.DIVERGED and comparison.gap == 0.5
    assert compare_greedy(run([5, 6]), run([5, 9])).verdict is OutputMatch.DIVERGED  # no gaps known
    loose = compare_greedy(run([5, 6], gaps=[1, 0.01]), run([5, 9]), tie_tolerance=0.02)
    assert loose.verdict is OutputMatch.TIE
