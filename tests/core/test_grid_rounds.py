"""Successive halving's rounds (core.bench.halving.plan_rounds): what each round runs, and
what the search costs against running every setting on the full plan."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import pytest
from specdeck.core.bench.budget import COST_MARGIN, Fitted, RoundCosts, fit_rounds, projected_s
from specdeck.core.bench.halving import interleaved_ids, plan_rounds
from specdeck.core.bench.plan import Arm, BenchPlan
from specdeck.core.bench.runner import choose_prompts


def _plan(suites, repeats):
    return BenchPlan(engine="server", model="m", arms=(Arm("A"),), suites=suites,
                     repeats=repeats, warmup=1)


def _cost(rounds, n_cells, n_prompts) -> int:
    """Prompt-runs of the search: every round's cells (halved each round) times its runs."""
    total, cells = 0, n_cells
    for plan in rounds:
        prompts = len(plan.prompt_ids) if plan.prompt_ids else n_prompts
        total += cells * prompts * plan.repeats
        cells = max(1, math.ceil(cells / 2))
    return total


def _size(plan, n_prompts) -> int:
    return (len(plan.prompt_ids) if plan.prompt_ids else n_prompts) * plan.repeats


def test_rounds_double_the_prompt_runs_until_one_setting_is_left():
    base = _plan(("grounded",), repeats=3)
    prompts = choose_prompts(base)
    n = len(prompts)
    rounds = plan_rounds(base, prompts, n_cells=16)
    assert len(rounds) == 4  # 16 -> 8 -> 4 -> 2 -> 1
    sizes = [_size(r, n) for r in rounds]
    assert sizes[:2] == [1, 2] and rounds[0].repeats == rounds[1].repeats == 1
    assert all(later >= 2 * earlier or later == n * base.repeats or later >= n
               for earlier, later in zip(sizes, sizes[1:]))
    assert sizes[-1] >= n  # the last round runs every prompt
    assert all(r.warmup <= 1 for r in rounds)
    assert all(_size(r, n) <= n * base.repeats for r in rounds)


@pytest.mark.parametrize("suite, repeats, share", [
    ("code", 2, 1 / 2), ("code", 3, 1 / 3), ("grounded", 3, 1 / 3), ("structured", 3, 0.4),
    ("structured", 4, 1 / 3)])
def test_search_costs_a_fixed_share_of_the_exhaustive_grid(suite, repeats, share):
    """In prompt-runs, whatever the scores: never more than half the settings go on
    (survivors) and each round doubles its runs, so 16 settings cost 4 rounds of 16
    prompt-runs: a third of the grid when it runs each setting 12 times or more (the
    structured suite has 3 prompts: 3 repeats are 9 runs)."""
    base = _plan((suite,), repeats=repeats)
    prompts = choose_prompts(base)
    n_cells = 16
    exhaustive = n_cells * len(prompts) * repeats
    assert _cost(plan_rounds(base, prompts, n_cells), n_cells, len(prompts)) <= share * exhaustive


def test_one_repeat_plans_end_on_every_prompt_once():
    base = _plan(("grounded", "code"), repeats=1)
    prompts = choose_prompts(base)
    rounds = plan_rounds(base, prompts, n_cells=8)
    assert [len(r.prompt_ids) for r in rounds[:-1]] == [2, 4]
    assert _size(rounds[-1], len(prompts)) == len(prompts)
    assert plan_rounds(base, prompts, n_cells=2) == [base]


def test_the_first_round_runs_one_prompt_of_each_suite_where_the_plan_has_room():
    """A first round on one prompt judges every setting on one suite's text (an n-gram drafter
    that shines on grounded answers and fails on code goes on): where the plan holds enough
    prompt-runs to double one prompt of each suite every round, round 1 runs that; a plan too
    small for it starts from one prompt, as a single suite does."""
    suites = ("grounded", "code", "structured")
    roomy = _plan(suites, repeats=4)  # 11 prompts x 4: rounds of 3, 6, then whole repeats
    prompts = choose_prompts(roomy)
    rounds = plan_rounds(roomy, prompts, n_cells=11)
    first = [p.suite for p in choose_prompts(rounds[0])]
    assert sorted(first) == sorted(suites) and rounds[0].repeats == 1
    assert [_size(r, len(prompts)) for r in rounds] == [3, 6, 11, 22]
    small = _plan(suites, repeats=1)  # 11 prompt-runs: 3 x 8 does not fit 4 rounds
    assert _size(plan_rounds(small, prompts, n_cells=11)[0], len(prompts)) == 1


# Sizing the rounds to a deadline (core.bench.budget.fit_rounds, RoundCosts, run_grid) --------
def _costs(per_run: dict[str, float], fixed: float = 0.0) -> RoundCosts:
    """Costs as RoundCosts.add records them: seconds per measured run and warm-up."""
    costs = RoundCosts()
    for name, seconds in per_run.items():
        costs.fixed[name] = [fixed]
        costs.warmups[name] = [seconds / 4]
        costs.measured[name] = [seconds]
    return costs


def test_plan_cost_counts_both_arms_warmups_and_prompts():
    base = _plan(("grounded", "code"), repeats=2)
    costs = _costs({"s": 1.0}, fixed=3.0)
    n = len(choose_prompts(base))
    assert RoundCosts().plan_s("s", base) == 0.0
    assert costs.plan_s("s", base) == pytest.approx(3.0 + 2 * (1 * 0.25 + n * 2 * 1.0))


def test_rounds_that_fit_are_kept_as_planned():
    base = _plan(("grounded", "code"), repeats=1)
    prompts = choose_prompts(base)
    left = plan_rounds(base, prompts, n_cells=8)[1:]
    ranked = ["a", "b", "c", "d"]
    costs = _costs(dict.fromkeys(ranked, 1.0))
    need = projected_s(left, ranked, costs)
    fitted = fit_rounds(left, ranked, costs, need * COST_MARGIN + 0.01, interleaved_ids(prompts))
    assert fitted == Fitted(tuple(left), 4)


def test_a_round_run_side_by_side_is_priced_with_one_reference():
    """Where the engine keeps every server of a round up, its settings share one plan and one
    reference's runs: 4 settings cost 5 arms' runs and one start, not 8 arms' and 4 starts;
    so a budget that fits that keeps every setting."""
    base = _plan(("grounded", "code"), repeats=1)
    prompts = choose_prompts(base)
    left = plan_rounds(base, prompts, n_cells=8)[1:]
    ranked = ["a", "b", "c", "d"]
    costs = _costs(dict.fromkeys(ranked, 1.0), fixed=2.0)
    plan = left[0]
    one_arm = costs.runs_s("a", plan)
    assert costs.shared_s(ranked, plan) == pytest.approx(2.0 + 5 * one_arm)
    assert sum(costs.plan_s(n, plan) for n in ranked) == pytest.approx(4 * 2.0 + 8 * one_arm)
    apart = projected_s(left, ranked, costs)
    side_by_side = projected_s(left, ranked, costs, together=lambda n: True)
    assert side_by_side < 0.75 * apart
    budget = side_by_side * COST_MARGIN + 0.01
    assert fit_rounds(left, ranked, costs, budget, interleaved_ids(prompts),
                      together=lambda n: True) == Fitted(tuple(left), 4)
    assert fit_rounds(left, ranked, costs, budget, interleaved_ids(prompts)).keep < 4


def test_a_short_budget_keeps_the_best_then_shortens_the_last_round():
    base = _plan(("grounded", "code"), repeats=1)
    prompts = choose_prompts(base)
    order = interleaved_ids(prompts)
    left = plan_rounds(base, prompts, n_cells=8)[1:]
    ranked = ["best", "second", "third", "fourth"]
    costs = _costs({"best": 1.0, "second": 1.0, "third": 1.0, "fourth": 1.0})
    two = projected_s(left, ranked[:2], costs) * COST_MARGIN
    fitted = fit_rounds(left, ranked, costs, two + 0.01, order)
    assert fitted == Fitted(tuple(left), 2)  # the best two, every round
    alone = costs.plan_s("best", base) * COST_MARGIN
    assert fit_rounds(left, ranked, costs, alone + 0.01, order) == Fitted((base,), 1)
    # Not even the best on every prompt: it alone, on the first prompts of each suite in turn.
    fitted = fit_rounds(left, ranked, costs, alone / 2, order)
    final = fitted.rounds[0]
    assert fitted.keep == 1 and len(fitted.rounds) == 1
    assert 0 < len(final.prompt_ids) < len(prompts) and final.repeats == 1
    assert list(final.prompt_ids) == order[:len(final.prompt_ids)]
    assert {p.suite for p in choose_prompts(final)} == {"grounded", "code"}
    assert costs.plan_s("best", final) * COST_MARGIN <= alone / 2
    assert fit_rounds(left, ranked, costs, 0.1, order) is None
    # A shorter last round adds nothing unless it runs more prompts than the round before.
    size = len(final.prompt_ids)
    assert fit_rounds(left, ranked, costs, alone / 2, order, ran=size - 1) == fitted
    assert fit_rounds(left, ranked, costs, alone / 2, order, ran=size) is None


def test_a_repeated_last_round_first_runs_every_prompt_once():
    base = _plan(("grounded", "code"), repeats=3)
    prompts = choose_prompts(base)
    costs = _costs({"best": 1.0})
    once = replace(base, prompt_ids=tuple(interleaved_ids(prompts)), max_prompts=None, repeats=1)
    seconds = costs.plan_s("best", once) * COST_MARGIN + 0.01
    assert costs.plan_s("best", base) * COST_MARGIN > seconds
    fitted = fit_rounds([base], ["best"], costs, seconds, interleaved_ids(prompts))
    assert fitted is not None and fitted.keep == 1 and len(fitted.rounds) == 1
    (final,) = fitted.rounds
    assert final.repeats == 1 and choose_prompts(final) == prompts


def test_repeats_are_cut_before_settings():
    """A round with repeats that does not fit runs its prompts fewer times first: every
    setting still in the search stays, each judged on fewer pairs, before the best few go on
    alone (a noisy early round must not decide more than it has to)."""
    base = _plan(("grounded", "code"), repeats=4)
    prompts = choose_prompts(base)
    ranked = ["a", "b"]
    costs = _costs(dict.fromkeys(ranked, 1.0))
    halved = replace(base, repeats=2)
    seconds = projected_s([halved], ranked, costs) * COST_MARGIN + 0.01
    assert projected_s([base], ranked, costs) * COST_MARGIN > seconds
    assert fit_rounds([base], ranked, costs, seconds, interleaved_ids(prompts)) == \
        Fitted((halved,), 2)
    once = replace(base, repeats=1)
    seconds = projected_s([once], ranked, costs) * COST_MARGIN + 0.01
    assert fit_rounds([base], ranked, costs, seconds, interleaved_ids(prompts)) == \
        Fitted((once,), 2)
    # Not even one run of each prompt for both: the best alone, once.
    seconds = projected_s([once], ranked[:1], costs) * COST_MARGIN + 0.01
    assert fit_rounds([base], ranked, costs, seconds, interleaved_ids(prompts)) == \
        Fitted((once,), 1)


def test_a_slow_setting_costs_more_than_a_fast_one():
    """Each setting is projected from its own runs: a draft model's server is dearer than an
    n-gram flag, and the budget keeps the settings that fit, best first."""
    base = _plan(("code",), repeats=1)
    prompts = choose_prompts(base)
    left = [base]
    costs = _costs({"cheap": 1.0, "dear": 10.0})
    cheap, dear = costs.plan_s("cheap", base), costs.plan_s("dear", base)
    assert dear > 5 * cheap
    both = projected_s(left, ["dear", "cheap"], costs)
    assert both == pytest.approx(cheap + dear)
    # Time for the dearer setting alone, not both: the best (ranked first) is kept.
    fitted = fit_rounds(left, ["dear", "cheap"], costs, (dear + cheap / 2) * COST_MARGIN,
                        interleaved_ids(prompts))
    assert fitted == Fitted((base,), 1)


@pytest.fixture(scope="module")
def cycle_model(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tiny_models import cycling_llama

    return cycling_llama(tmp_path_factory.mktemp("grid-cycle") / "cycle")


def _ngram_grid(model, n_cells: int):
    from specdeck.core.bench.grid import Cell
    from specdeck.core.engines.base import DrafterKind, DrafterSpec
    from tiny_models import tiny_plan

    base = tiny_plan(model, (Arm("A"),), suites=("code",), max_prompts=4, repeats=1,
                     max_new_tokens=8)
    cells = [Cell(Arm(f"k{k}", DrafterSpec(DrafterKind.NGRAM, num_draft_tokens=k)), f"k={k}")
             for k in range(1, n_cells + 1)]
    return base, cells


def test_a_deadline_cuts_the_search_short_of_the_free_one(cycle_model, monkeypatch):
    """On a real (tiny) model: the search run without a deadline, then with the time of its
    first round and a third of the rest. It runs fewer plans, ends sooner, says why in its
    notes (rounds sized, or the budget ran out when even a shorter last round did not fit),
    and its finalists ran the same rounds. The search's clock and the engine's count only the
    models' forwards (``forward_clock``), so another program on the machine cannot move the
    deadline; the planner's arithmetic is tested exactly above."""
    from specdeck.core.bench import grid
    from specdeck.core.bench.grid import run_grid
    from specdeck.core.bench.runner import PlanStarted
    from specdeck.core.engines import create_engine
    from tiny_models import forward_clock

    now = forward_clock(monkeypatch, lambda model, ids: 1e-3)
    clock = type("Clock", (), {"monotonic": staticmethod(lambda: now[0])})
    monkeypatch.setattr(grid, "time", clock)
    base, cells = _ngram_grid(cycle_model, 4)
    engine = create_engine("torch")
    starts: list[float] = []

    def watch(event) -> None:
        if isinstance(event, PlanStarted):
            starts.append(now[0])

    try:
        started = now[0]
        free = run_grid(base, base.arms[0], cells, engine, watch, halving=True)
        whole = now[0] - started
        first_round = starts[len(cells)] - started  # the first plan of round 2 began
        assert not any("sized" in n or "ran out" in n for n in free.notes)

        started = now[0]
        deadline = started + first_round + (whole - first_round) / 3
        tight = run_grid(base, base.arms[0], cells, engine, halving=True, deadline=deadline)
        took = now[0] - started
    finally:
        engine.unload()
    assert any("sized to the time left" in n or "budget ran out" in n for n in tight.notes), \
        tight.notes
    assert len(tight.runs) < len(free.runs) and took < whole
    finalists = [r for r in tight.rows if r.dropped_in_round is None]
    assert finalists
    if not any("ran out" in n for n in tight.notes):  # cut between rounds, never inside one
        assert all(len(r.round_scores) == len(finalists[0].round_scores) for r in finalists)


@pytest.mark.parametrize("again", [False, True])
def test_a_pair_another_program_disturbed_is_run_again(cycle_model, monkeypatch, again):
    """Real (tiny) runs on a clock that counts forwards; the third setting's reference runs
    twenty times slower once (as when other programs take the cores mid-run), so its paired
    ratio would win the round by far. The round's reference runs show it: that setting is
    run again, its figure is the undisturbed one, and a note says so. Where the re-run is
    disturbed too (``again``), the row says so, so the tune's history does not learn from
    it."""
    from specdeck.core.bench.grid import run_grid
    from specdeck.core.bench.runner import PlanStarted, RunFinished, RunStarted
    from specdeck.core.engines import create_engine
    from tiny_models import forward_clock

    slow = {"now": False, "plans": 0, "done": 0}
    forward_clock(monkeypatch, lambda model, ids: 1e-3 * (20 if slow["now"] else 1))
    # plan 3 is the third setting's in round 1; plan 5 its re-run
    plans = (3, 5) if again else (3,)

    def disturb(event) -> None:
        if isinstance(event, PlanStarted):
            slow["plans"] += 1
        elif isinstance(event, RunStarted):
            slow["now"] = (slow["plans"] in plans and slow["done"] < slow["plans"]
                           and not event.slot.warmup and event.slot.arm.name == "A")
        elif isinstance(event, RunFinished) and slow["now"]:
            slow["now"], slow["done"] = False, slow["plans"]

    base, cells = _ngram_grid(cycle_model, 4)
    engine = create_engine("torch")
    try:
        result = run_grid(base, base.arms[0], cells, engine, disturb, halving=True)
    finally:
        engine.unload()
    assert slow["done"] == plans[-1]
    third = next(r for r in result.rows if r.cell.label == "k=3")
    note = next(n for n in result.notes if n.startswith("Round 1"))
    assert third.disturbed is again
    assert not any(r.disturbed for r in result.rows if r is not third)
    if again:
        assert "still disturbed: k=3" in note
        return
    others = [r.round_scores[0] for r in result.rows if r is not third]
    assert third.round_scores[0] < 2 * max(others)  # not the twentyfold of the disturbed pair
    assert "k=3" in note and "undisturbed" in note and "k=1" not in note
    assert len(result.runs) == 4 + 2  # the disturbed run was replaced, not added
    assert all(max(r.result.stats.tokens_per_second for r in run.counted("A"))
               < 2 * min(r.result.stats.tokens_per_second for r in run.counted("A"))
               for run in result.runs)


def test_a_setting_that_goes_on_is_judged_on_every_round_it_ran(cycle_model):
    """A finalist's figures pool its pairs over every round, not the last round's alone: on a
    real (tiny) model, a finalist's score is the median of every paired ratio of every run it
    was in (1 prompt in round 1, 4 in round 2), and the rows dropped after round 1 keep their
    one pair. Each round's own score is still on record."""
    import statistics

    from specdeck.core.bench.grid import run_grid
    from specdeck.core.bench.summary import pairs
    from specdeck.core.engines import create_engine

    base, cells = _ngram_grid(cycle_model, 4)
    engine = create_engine("torch")
    try:
        result = run_grid(base, base.arms[0], cells, engine, halving=True)
    finally:
        engine.unload()
    finalists = [r for r in result.rows if r.dropped_in_round is None]
    assert len(finalists) == 2
    for row in result.rows:
        name = row.cell.arm.name
        ratios = [b.result.stats.tokens_per_second / a.result.stats.tokens_per_second
                  for run in result.runs if name in {arm.name for arm in run.plan.arms}
                  for a, b in pairs(run, name)]
        assert row.by_suite["all"].speedup.n == len(ratios) == (5 if row in finalists else 1)
        assert row.score == pytest.approx(statistics.median(ratios))
        assert len(row.round_scores) == (2 if row in finalists else 1)
    # What the prediction history records of each: a finalist was measured on every prompt
    # the search ran, a setting dropped after round 1 on that round's prompt only.
    from specdeck.core.bench.runner import choose_prompts
    from specdeck.core.tune.run import on_every_prompt

    every = [p.id for p in choose_prompts(base)]
    assert len(every) == 4
    for row in result.rows:
        assert on_every_prompt(result, row.cell.arm.name, every) == (row in finalists)
    # A search that never reached the last round measured nothing on every prompt.
    first_round = replace(result, runs=result.runs[:1])
    assert not any(on_every_prompt(first_round, r.cell.arm.name, every) for r in result.rows)
    # The JSON says for every row why it went no further and why it could not win.
    for row, shown in zip(result.rows, result.to_json()["rows"], strict=True):
        assert shown["diverged_runs"] == row.diverged
        if row in finalists:
            assert shown["dropped_why"] is None
        else:
            assert shown["dropped_why"] == row.dropped_why != ""
            assert shown["cannot_win_because"] is not None


def test_the_tune_pages_figures_are_the_ones_the_search_judges(cycle_model):
    """The Tune page's reducer (core.tune.live), fed the events of a real (tiny) search,
    shows each setting's figures pooled over every round it ran: the same pairs and median
    the search's rows (and so its cuts and its finalist) are decided by, not the last
    round's alone."""
    from specdeck.core.bench.grid import run_grid
    from specdeck.core.engines import create_engine
    from specdeck.core.tune.candidates import Candidate
    from specdeck.core.tune.live import CellSoFar, TuneLive
    from specdeck.core.tune.run import Phase

    base, cells = _ngram_grid(cycle_model, 4)
    live = TuneLive()
    live.apply(Phase("search", "4 settings"))
    for cell in cells:
        live.cells[cell.arm.name] = CellSoFar(cell.label, Candidate("ngram"))
    engine = create_engine("torch")
    try:
        result = run_grid(base, base.arms[0], cells, engine, live.apply, halving=True)
    finally:
        engine.unload()
    for row in result.rows:
        shown = live.cells[row.cell.arm.name]
        assert shown.rounds == len(row.round_scores)
        assert shown.figures.pairs == row.by_suite["all"].speedup.n
        assert shown.figures.median_speedup == pytest.approx(row.score)
    # The best so far is the search's best: a setting dropped after a lucky first pair is
    # not it, on the page as in the search.
    dropped = {r.cell.label for r in result.rows if r.dropped_in_round is not None}
    assert dropped and all(live.cells[r.cell.arm.name].dropped == (r.cell.label in dropped)
                           for r in result.rows)
    if result.best is None:
        assert live.best is None
        assert live.best_text(final=True) == ("In the search, no setting beat decoding "
                                              "without a draft")
        assert live.best_text(final=True, cancelled=True).startswith("Before the cancel")
    else:
        assert live.best.label == result.best.cell.label
        assert f"over {live.best.rounds} rounds" in live.best_text()
        # Once the tune is over, its leader is no longer "so far".
        assert live.best_text(final=True).startswith(f"Best in the search: {live.best.label}:")
        assert live.best_text(final=True, cancelled=True).startswith(
            f"Best before the cancel: {live.best.label}:")


def test_the_note_says_the_repeats_were_cut_when_one_setting_goes_straight_to_the_last():
    """Repeats are cut before settings, so a fit that keeps the best alone on the last round
    also ran it fewer times than planned: the note says both."""
    from specdeck.core.bench.budget import sized_note

    base = _plan(("grounded", "code"), repeats=4)
    prompts = choose_prompts(base)
    left = plan_rounds(base, prompts, n_cells=32)[1:]
    assert left[-1].repeats > 1
    ranked = ["a", "b", "c", "d"]
    costs = _costs(dict.fromkeys(ranked, 1.0))
    once = replace(left[-1], repeats=1)
    seconds = costs.plan_s("a", once) * COST_MARGIN + 0.01
    fitted = fit_rounds(left, ranked, costs, seconds, interleaved_ids(prompts))
    assert fitted == Fitted((once,), 1)
    note = sized_note(1, len(ranked), left, fitted)
    assert "fewer times (1 at most, of the 4 planned)" in note
    assert "went straight to the last round" in note and "best 1 of the 4" in note


def test_settings_the_budget_never_reached_are_named_as_not_measured(cycle_model):
    """A deadline already past: nothing runs, and the notes name every setting as not
    measured (a user's report once listed only the settings that ran, so the others looked
    as if they had never been candidates)."""
    from specdeck.core.bench.grid import run_grid
    from specdeck.core.bench.tables import grid_table
    from specdeck.core.engines import create_engine

    base, cells = _ngram_grid(cycle_model, 4)
    engine = create_engine("torch")
    try:
        result = run_grid(base, base.arms[0], cells, engine, halving=True,
                          deadline=time.monotonic() - 1)
    finally:
        engine.unload()
    assert result.rows == () and result.runs == ()
    [never] = [n for n in result.notes if n.startswith("Not measured")]
    assert "the time budget ran out" in never
    assert all(c.label in never for c in cells)
    assert any("no setting was dropped" in n for n in result.notes)
    assert "rows marked 'dropped'" not in grid_table(result)


@pytest.fixture(scope="module")
def useless_pair(tmp_path_factory):
    """A random target and a smaller random draft: the draft is almost never accepted."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tiny_models import random_llama

    root = tmp_path_factory.mktemp("grid-useless")
    return (random_llama(root / "target", seed=0),
            random_llama(root / "draft", seed=1, hidden=32, layers=1))


def _model_grid(target, draft, n_cells: int):
    from specdeck.core.bench.grid import Cell
    from specdeck.core.engines.base import DrafterKind, DrafterSpec
    from tiny_models import tiny_plan

    base = tiny_plan(target, (Arm("A"),), suites=("code",), max_prompts=4, repeats=1,
                     max_new_tokens=8)
    cells = [Cell(Arm(f"k{k}", DrafterSpec(DrafterKind.MODEL, draft, num_draft_tokens=k)),
                  f"k={k}") for k in range(1, n_cells + 1)]
    return base, cells


def test_a_search_whose_settings_left_are_all_clearly_slower_stops(useless_pair, cycle_model,
                                                                     monkeypatch):
    """tune_search (2026-11-27, structured): three more rounds of draft-model settings at
    0.41x [0.40, 0.45] took a third of the search's time, though no later round could make
    one the winner. On the forward clock (1 ms a forward, so the speeds are the forwards'):
    a draft nobody accepts makes every setting clearly slower once its pairs give an
    interval (round 2 of 3), and the search stops there and says why; n-gram settings on the
    cycling model, which beat no drafting, run every round."""
    from specdeck.core.bench.grid import run_grid
    from specdeck.core.bench.halving import clearly_slower
    from specdeck.core.bench.noise import noise
    from specdeck.core.engines import create_engine
    from tiny_models import forward_clock

    forward_clock(monkeypatch, lambda model, ids: 1e-3)
    engine = create_engine("torch")
    try:
        base, cells = _model_grid(*useless_pair, 8)
        slow = run_grid(base, base.arms[0], cells, engine, halving=True)
        engine.unload()
        fast_base, fast_cells = _ngram_grid(cycle_model, 8)
        fast = run_grid(fast_base, fast_base.arms[0], fast_cells, engine, halving=True)
    finally:
        engine.unload()

    left = [r for r in slow.rows if r.dropped_in_round is None]
    assert len(left) == 2 and all(len(r.round_scores) == 2 for r in left), "stopped after round 2"
    assert all(clearly_slower(r, noise(slow.runs, "A")) for r in left)
    (note,) = [n for n in slow.notes if n.startswith("Stopped after round 2 of 3")]
    assert "clearly slower than no drafting" in note
    assert slow.best is None
    assert any(n.startswith("Successive halving over 2 rounds") for n in slow.notes)
    finalists = [r for r in fast.rows if r.dropped_in_round is None]
    assert finalists and all(len(r.round_scores) == 3 for r in finalists)
    assert not any(n.startswith("Stopped after") for n in fast.notes)
