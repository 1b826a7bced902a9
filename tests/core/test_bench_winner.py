"""One rule names the winner: a plain A/B (CLI and page), a sweep, a grid and the tuner.

The rule (core.bench.winner): the highest median paired speed-up among settings whose output
did not change and that were fully measured, and only if it beats decoding without a draft.
The real-run tests use tiny real models on the parameter clock (tiny_models), where longer
n-gram drafts on the cycling model are faster; one arm's output is then changed so that the
fastest setting must be refused everywhere alike (the CLI against the A/B page:
tests/gui/test_bench_apply_winner.py).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from specdeck.core.bench import winner
from specdeck.core.bench.grid import ALL, Cell, Figure, GridResult, GridRow
from specdeck.core.bench.plan import Arm
from specdeck.core.bench.runner import run_plan
from specdeck.core.bench.summary import summarize
from specdeck.core.bench.sweep import best_row, setting_rows
from specdeck.core.engines.base import DrafterKind, DrafterSpec
from tiny_models import changed_fastest, cycling_llama, parameter_clock, tiny_plan

pytest.importorskip("torch")
pytest.importorskip("transformers")


def S(speedup, diverged=0, complete=True):
    return winner.Standing(speedup, diverged, complete)


@pytest.mark.parametrize("standings, expected", [
    ({"a": S(1.3), "b": S(1.5)}, "b"),
    ({"a": S(1.3), "b": S(1.5, diverged=1)}, "a"),             # changed output never wins
    ({"a": S(1.3), "b": S(1.5, complete=False)}, "a"),         # dropped early: not comparable
    ({"a": S(1.3), "b": S(None)}, "a"),                        # unmeasured
    ({"a": S(1.3), "b": S(float("nan"))}, "a"),                # not a number
    ({"a": S(1.3), "b": S(float("inf"))}, "a"),
    ({"a": S(1.0), "b": S(0.9)}, None),                        # must beat no draft
    ({"a": S(1.2), "b": S(1.2)}, "a"),                         # a tie: the earlier one
    ({"a": S(2.0, diverged=3), "b": S(0.99)}, None),
    ({}, None),
])
def test_the_rule(standings, expected):
    assert winner.pick(standings, standings.__getitem__) == expected


def test_an_arm_that_did_not_draft_never_wins():
    from specdeck.core.bench.stats import summarize_ratios
    from specdeck.core.bench.lossless import LosslessCheck
    from specdeck.core.bench.summary import Comparison

    idle = Comparison("B", "B", summarize_ratios([1.3, 1.2, 1.25]), {}, LosslessCheck(True), None,
                      "", not_drafting="it drafted nothing in 3 runs")
    assert winner.comparison_standing(idle).excluded_because.startswith("it did not draft: it "
                                                                          "drafted")
    assert winner.pick([idle], winner.comparison_standing) is None


def test_an_arm_nobody_can_tell_drafted_never_wins():
    """Issue 44: a llama-server without --metrics that drafted nothing reports no draft_n, and
    its 1.38x won as a drafting result."""
    from specdeck.core.bench.stats import summarize_ratios
    from specdeck.core.bench.lossless import LosslessCheck
    from specdeck.core.bench.summary import Comparison

    unknown = Comparison("B", "B", summarize_ratios([1.38, 1.3, 1.4]), {}, LosslessCheck(True),
                         None, "", drafting_unknown="start llama-server with --metrics")
    why = winner.comparison_standing(unknown).excluded_because
    assert why.startswith("SpecDeck cannot tell whether it drafted") and "--metrics" in why
    assert winner.pick([unknown], winner.comparison_standing) is None


def test_exactly_no_drafts_speed_never_beats_it():
    """Every threshold against no drafting is core.bench.winner's: the tune's verdict, a
    ratio's verdict, predictions and the theory's best k disagreed at exactly 1.0."""
    from specdeck.core.bench.stats import summarize_ratios

    assert not winner.beats_no_draft(1.0) and winner.beats_no_draft(1.01)
    assert not winner.beats_no_draft(None) and not winner.beats_no_draft(float("nan"))
    flat = summarize_ratios([1.0] * 6)
    assert (flat.ci_low, flat.ci_high) == (1.0, 1.0)
    assert not winner.clearly_faster(flat) and not winner.clearly_slower(flat)
    assert flat.verdict == "no clear difference"
    assert winner.clearly_faster(summarize_ratios([1.1] * 6)) and not winner.clearly_faster(None)


def test_the_one_constructor_reads_every_fact():
    def built(**facts):
        base = dict(diverged=0, unchecked="", sampled=False, complete=True, not_drafting="",
                    drafting_unknown="")
        return winner.standing(summarize_ratios([1.2, 1.3, 1.25]), **{**base, **facts})

    from specdeck.core.bench.stats import summarize_ratios

    assert built().speedup == 1.25 and built().excluded_because is None
    assert "changed in 2" in built(diverged=2).excluded_because
    assert built(diverged=2, sampled=True).excluded_because is None  # outputs differ by design
    assert "every prompt" in built(complete=False).excluded_because
    assert built(complete=False).not_a_result is None  # still the setting's own figure
    assert built(not_drafting="none in 4 runs").excluded_because == \
        "it did not draft: none in 4 runs"
    assert built(drafting_unknown="add --metrics").excluded_because.startswith(
        "SpecDeck cannot tell whether it drafted")
    assert built(not_usable="bad counts").excluded_because == "not usable: bad counts"
    lost = "not checked: every paired run lost data (3: an event that was not JSON)"
    assert built(unchecked=lost).not_a_result == f"its output was never checked ({lost})"
    assert built(unchecked=lost, sampled=True).excluded_because is None  # nothing to check
    assert built().shown_unchanged and not built(sampled=True).shown_unchanged
    assert not built(unchecked=lost).shown_unchanged and not built(diverged=1).shown_unchanged
    with pytest.raises(TypeError):  # no fact may be left out
        winner.standing(1.2, diverged=0, sampled=False, complete=True, not_drafting="")


def test_every_exclusion_says_why():
    assert winner.Standing(1.5).excluded_because is None
    assert "changed in 2" in winner.Standing(1.5, diverged=2).excluded_because
    assert "every prompt" in winner.Standing(1.5, complete=False).excluded_because
    assert "no paired runs" in winner.Standing(None).excluded_because


@pytest.fixture(scope="module")
def cycle(tmp_path_factory) -> Path:
    return cycling_llama(tmp_path_factory.mktemp("winner") / "cycle")


def ngram(k: int) -> DrafterSpec:
    # Matches of 2+ tokens only, so every k drafts the cycle right (see test_bench_core).
    return DrafterSpec(DrafterKind.NGRAM, num_draft_tokens=k, ngram_short=0)


def test_a_faster_setting_whose_output_changed_loses_everywhere(cycle, monkeypatch):
    parameter_clock(monkeypatch)
    plan = tiny_plan(cycle, (Arm("A"), Arm("k8", ngram(8)), Arm("k2", ngram(2))),
                     max_prompts=2, repeats=1, max_new_tokens=30, warmup=0)
    changed_run, fastest, expected = changed_fastest(run_plan(plan))
    assert (fastest, expected) == ("k8", "k2")
    summary = summarize(changed_run)
    assert summary.comparison("k8").lossless.diverged == 2
    assert winner.best_arm(summary) == "k2"
    rows = setting_rows(changed_run, summary)
    assert best_row(rows).arm == "k2"  # sweeps and the page's Apply
    # A grid row carries the same figures: the same answer.
    grid_rows = tuple(
        GridRow(Cell(changed_run.plan.arm(c.arm), c.arm),
                {ALL: Figure(summary.arm(c.arm).tokens_per_second, c.speedup)},
                c.lossless.verdict, diverged=c.lossless.diverged)
        for c in summary.comparisons)
    grid = GridResult((), grid_rows, {}, (changed_run,))
    assert grid.best.cell.arm.name == "k2"
    dropped = replace(grid_rows[1], dropped_in_round=1)
    assert GridResult((), (grid_rows[0], dropped), {}, ()).best is None


def test_the_tuner_never_answers_a_k_whose_output_changed(cycle, monkeypatch):
    from specdeck.core.bench import tuner

    parameter_clock(monkeypatch)
    real = tuner.summarize

    def summarize_with_k8_changed(run):
        summary = real(run)
        return replace(summary, comparisons=tuple(
            replace(c, lossless=replace(c.lossless, divergences=(
                *c.lossless.divergences, _divergence())))
            if c.arm == "k8" else c for c in summary.comparisons))

    monkeypatch.setattr(tuner, "summarize", summarize_with_k8_changed)
    base = tiny_plan(cycle, (Arm("A"),), max_prompts=2, repeats=1, max_new_tokens=30, warmup=0)
    result = tuner.tune_k(base, ngram(8), k_max=8)
    # k8 was measured among the fastest (the parameter clock favours long right drafts)...
    assert result.measured[8] == pytest.approx(max(result.measured.values()))
    assert result.best_k not in (0, 8)  # ...yet another k is answered
    assert any("k=8 cannot be chosen" in n for n in result.notes)


def _divergence():
    from specdeck.core.bench.lossless import DivergenceReport

    return DivergenceReport("p", 0, 3, 1, 2, False, None, "", "", "")
