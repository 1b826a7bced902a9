"""Bench statistics and prompt suites."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specdeck.core.bench import stats
from specdeck.core.bench.suites import builtin_suites, load_suite, select_prompts
from specdeck.core.errors import InvalidInputError, NotFoundError


def test_leviathan_closed_form_for_iid_acceptance():
    alpha, k, c = 0.8, 4, 0.05
    cumulative = stats.iid_cumulative(alpha, k)
    expected_tokens = (1 - alpha ** (k + 1)) / (1 - alpha)
    assert stats.expected_tokens_per_step(cumulative, k) == pytest.approx(expected_tokens)
    assert stats.theoretical_speedup(cumulative, k, c) == pytest.approx(expected_tokens / (k * c + 1))


@given(alpha=st.floats(0.0, 0.99), k=st.integers(1, 8), c=st.floats(0.0, 1.0))
def test_speedup_matches_leviathan_everywhere(alpha, k, c):
    predicted = stats.theoretical_speedup(stats.iid_cumulative(alpha, k), k, c)
    assert predicted == pytest.approx((1 - alpha ** (k + 1)) / ((1 - alpha) * (k * c + 1)))


def test_best_k_moves_with_cost_and_acceptance():
    good = stats.iid_cumulative(0.9, 8)
    cheap_k, _ = stats.predict_best_k(good, draft_cost_ratio=0.02)
    dear_k, _ = stats.predict_best_k(good, draft_cost_ratio=0.3)
    assert cheap_k.k > dear_k.k
    poor_k, curve = stats.predict_best_k(stats.iid_cumulative(0.3, 8), draft_cost_ratio=0.1)
    assert poor_k.k == 1 and len(curve) == 8
    # A CPU whose verify forward costs twice a single-token forward halves the prediction.
    gpu = stats.theoretical_speedup(good, 4, 0.0, 1.0)
    cpu = stats.theoretical_speedup(good, 4, 0.0, lambda k: 2.0)
    assert cpu == pytest.approx(gpu / 2)


def test_measured_acceptance_is_extended_geometrically():
    assert stats.extend_cumulative([0.8, 0.64], 4) == pytest.approx([0.8, 0.64, 0.512, 0.4096])
    assert stats.extend_cumulative([0.5], 3) == pytest.approx([0.5, 0.25, 0.125])
    assert stats.extend_cumulative([], 2) == [0.0, 0.0]


def test_paired_ratio_summary():
    a = [10.0, 10.0, 12.0, 8.0, 11.0]
    b = [20.0, 19.0, 25.0, 15.0, 22.0]
    ratios = stats.paired_ratios(a, b)
    summary = stats.summarize_ratios(ratios)
    assert summary.median == pytest.approx(2.0)
    assert summary.minimum == pytest.approx(1.875) and summary.maximum == pytest.approx(25 / 12)
    assert summary.ci_low <= summary.median <= summary.ci_high
    assert summary.verdict == "faster"
    slower = stats.summarize_ratios([0.8, 0.85, 0.9, 0.82])
    assert slower.verdict == "slower"
    assert stats.summarize_ratios([0.9, 1.1, 1.0, 0.95, 1.05]).verdict == "no clear difference"


def test_first_divergence():
    assert stats.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert stats.first_divergence([1, 2, 3], [1, 9, 3]) == stats.Divergence(1, 2, 9)
    assert stats.first_divergence([1, 2, 3], [1, 2]) == stats.Divergence(2, 3, None)


def test_builtin_suites_cover_the_tags():
    suites = builtin_suites()
    assert set(suites) == {"code", "structured", "grounded", "chat", "prose"}
    snake = [p.id for p in suites["code"].prompts if p.id.startswith("snake-")]
    assert snake == ["snake-python", "snake-typescript", "snake-swift"]
    all_ids = [p.id for s in suites.values() for p in s.prompts]
    assert len(all_ids) == len(set(all_ids))
    assert [p.suite for p in select_prompts(["chat"])] == ["chat"] * len(suites["chat"].prompts)


def test_user_suites_in_three_formats(tmp_path):
    js = tmp_path / "mine.json"
    js.write_text(json.dumps({"name": "mine", "prompts": [{"prompt": "a", "tags": ["x"]}, "b"]}))
    suite = load_suite(js)
    assert [p.text for p in suite.prompts] == ["a", "b"] and suite.prompts[1].tags == ("mine",)
    jl = tmp_path / "lines.jsonl"
    jl.write_text('{"prompt": "one"}\n\n{"prompt": "two", "tags": "t"}\n')
    assert [p.tags for p in load_suite(jl).prompts] == [("lines",), ("t",)]
    txt = tmp_path / "plain.txt"
    txt.write_text("first prompt\nline two\n---\nsecond\n---\n")
    assert [p.text for p in load_suite(txt).prompts] == ["first prompt\nline two", "second"]
    assert [p.text for p in select_prompts([str(txt)])][1] == "second"


def test_bad_suites_are_clear_errors(tmp_path):
    with pytest.raises(NotFoundError, match="No prompt suite called 'nope'"):
        select_prompts(["nope"])
    empty = tmp_path / "e.json"
    empty.write_text('{"prompts": []}')
    with pytest.raises(InvalidInputError, match="no \"prompts\" list"):
        load_suite(empty)
    bad = tmp_path / "b.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"prompt": "broken\n')
    with pytest.raises(InvalidInputError, match=r"line 2 is not JSON \(unterminated string starting at column 12\)") as caught:
        load_suite(bad)
    assert "one JSON object per line" in caught.value.fix
    # A path that is not there is a missing file, not an unknown suite's name.
    for name, says in ((str(tmp_path / "mine.jsonl"), "does not exist"),
                       ("prompts.jsonl", "does not exist"), (str(tmp_path), "is a folder")):
        with pytest.raises(NotFoundError, match=f"Prompt file .* {says}") as caught:
            select_prompts([name])
        assert "suite file" in caught.value.fix


def test_too_few_pairs_give_no_interval_and_no_verdict():
    one = stats.summarize_ratios([1.06])
    assert not one.has_interval and one.verdict == "too few runs to tell"
    assert one.interval_text() == "no interval from 1 pair: run more repeats (at least 3 pairs)"
    three = stats.summarize_ratios([1.1, 1.2, 1.3])
    assert three.has_interval and three.interval_text().startswith("95% interval 1.")
    assert three.interval_text().endswith("x, 3 pairs")
