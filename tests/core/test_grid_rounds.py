"""Successive halving's rounds (core.bench.grid._rounds): what each round runs, and what the
search costs against running every setting on the full plan."""

from __future__ import annotations

import math

import pytest
from specdeck.core.bench.grid import _rounds
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


def test_rounds_grow_prompts_then_repeat_the_full_plan():
    base = _plan(("grounded",), repeats=3)
    prompts = choose_prompts(base)
    rounds = _rounds(base, prompts, n_cells=16)
    sizes = [(len(r.prompt_ids) if r.prompt_ids else None, r.repeats) for r in rounds]
    assert sizes[:2] == [(1, 1), (2, 1)]
    assert sizes[2] == (len(prompts), 1)  # every prompt once before the repeats
    assert rounds[-1] == base
    assert all(r.warmup <= 1 for r in rounds)


@pytest.mark.parametrize("repeats, share", [(2, 0.5), (3, 0.4)])
def test_search_costs_a_fraction_of_the_exhaustive_grid(repeats, share):
    base = _plan(("code",), repeats=repeats)
    prompts = choose_prompts(base)
    n_cells = 16
    exhaustive = n_cells * len(prompts) * repeats
    assert _cost(_rounds(base, prompts, n_cells), n_cells, len(prompts)) <= share * exhaustive


def test_one_repeat_plans_are_unchanged():
    base = _plan(("grounded", "code"), repeats=1)
    prompts = choose_prompts(base)
    rounds = _rounds(base, prompts, n_cells=8)
    assert [len(r.prompt_ids) for r in rounds[:-1]] == [1, 2, 4]
    assert rounds[-1] == base
    assert _rounds(base, prompts, n_cells=2) == [base]
