"""Sizing a search's rounds to its deadline: what each setting's runs cost so far
(``RoundCosts``: its server's start, its warm-ups, its measured runs) projects the rounds left
(``projected_s``); when they would not end in time, ``fit_rounds`` runs the prompts fewer
times (down to once), then keeps fewer settings (the best by score), then runs the last round
on fewer prompts, and ``sized_note`` says so.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from specdeck.core.bench.plan import BenchPlan
from specdeck.core.bench.runner import BenchRun, choose_prompts

COST_MARGIN = 1.1
"""Projected seconds are multiplied by this before they are held against the time left:
prompts differ in length, and a round that overruns eats into what comes after the search."""


@dataclass
class RoundCosts:
    """What each setting's plans have cost so far: the seconds before its first run (its
    server's start, tokenizing), and the seconds of each warm-up and each measured run
    (each run from its start to the next one's, so switching between arms is counted)."""

    fixed: dict[str, list[float]] = field(default_factory=dict)
    warmups: dict[str, list[float]] = field(default_factory=dict)
    measured: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, run: BenchRun, elapsed: float,
            arms: set[str] | None = None) -> None:
        """``elapsed``: the plan's whole time, server starts and tokenizing included. A plan
        shared by several settings: only the records of ``arms`` (this setting and the
        reference) count, and an even share of its fixed time."""
        starts = [r.started_at for r in run.records] + [run.finished_at]
        sharing = 1 if arms is None else max(1, len(run.plan.arms) - 1)
        self.fixed.setdefault(name, []).append(
            max(0.0, elapsed - (starts[-1] - starts[0])) / sharing)
        for record, start, end in zip(run.records, starts, starts[1:]):
            if arms is not None and record.slot.arm.name not in arms:
                continue
            kind = self.warmups if record.slot.warmup else self.measured
            kind.setdefault(name, []).append(max(0.0, end - start))

    def plan_s(self, name: str, plan: BenchPlan) -> float:
        """The projected seconds of ``plan`` (the reference and this setting) for ``name``."""
        return self.fixed_s(name) + 2 * self.runs_s(name, plan)  # the reference and the setting

    def fixed_s(self, name: str) -> float:
        """Seconds before a plan of ``name``'s first run (its server's start, tokenizing)."""
        return statistics.fmean(self.fixed.get(name) or [0.0])

    def runs_s(self, name: str, plan: BenchPlan) -> float:
        """Seconds of one arm's warm-ups and measured runs in ``plan``, at ``name``'s pace."""
        measured = self.measured.get(name) or [0.0]
        per_run = statistics.fmean(measured)
        per_warmup = statistics.fmean(self.warmups.get(name) or measured)
        return plan.warmup * per_warmup + len(choose_prompts(plan)) * plan.repeats * per_run

    def shared_s(self, names: Sequence[str], plan: BenchPlan) -> float:
        """The projected seconds of ``plan`` run once for all of ``names`` beside one
        reference (:func:`_measure_together`): the dearest start, every setting's runs and
        the reference's once (at the settings' mean pace)."""
        runs = [self.runs_s(name, plan) for name in names]
        return max(self.fixed_s(name) for name in names) + sum(runs) + statistics.fmean(runs)


@dataclass(frozen=True)
class Fitted:
    rounds: tuple[BenchPlan, ...]
    keep: int
    """How many of the ranked settings go on."""


def projected_s(rounds: Sequence[BenchPlan], ranked: Sequence[str], costs: RoundCosts,
                together: Callable[[int], bool] = lambda n: False) -> float:
    """Seconds the ``rounds`` take for the ``ranked`` settings (best first), the best half
    going on after each round (as :func:`survivors` keeps at least). ``together(n)``: whether
    a round of n settings runs them in one plan beside one reference (their servers fit)."""
    total, n = 0.0, len(ranked)
    for plan in rounds:
        names = ranked[:n]
        total += costs.shared_s(names, plan) if n > 1 and together(n) \
            else sum(costs.plan_s(name, plan) for name in names)
        n = max(1, math.ceil(n / 2))
    return total


def fit_rounds(left: Sequence[BenchPlan], ranked: Sequence[str], costs: RoundCosts,
               seconds: float, interleaved: Sequence[str], ran: int = 0,
               together: Callable[[int], bool] = lambda n: False) -> Fitted | None:
    """The rounds left and how many of the ``ranked`` settings to keep so that they end
    within ``seconds``: every setting kept and every round, else the rounds' repeats halved
    (down to one run of each prompt), else fewer settings (the best; one setting goes
    straight to the last round), else the best alone on the last round's first prompts,
    once (taken from each suite in turn), on more than the ``ran`` prompts of the round just
    measured. None when that does not fit: the rounds so far decide."""
    if not left or not ranked:
        return None
    most = max(plan.repeats for plan in left)
    halved = 0
    while True:
        rounds = tuple(replace(plan, repeats=max(1, plan.repeats >> halved)) for plan in left)
        if projected_s(rounds, ranked, costs, together) * COST_MARGIN <= seconds:
            return Fitted(rounds, len(ranked))
        if most >> halved <= 1:
            break
        halved += 1
    left = rounds  # one run of each prompt from here
    for keep in range(len(ranked), 0, -1):
        rounds = tuple(left) if keep > 1 else (left[-1],)
        if projected_s(rounds, ranked[:keep], costs, together) * COST_MARGIN <= seconds:
            return Fitted(rounds, keep)
    final = left[-1]
    ids = [pid for pid in interleaved if pid in {p.id for p in choose_prompts(final)}]
    for size in range(len(ids) if final.repeats > 1 else len(ids) - 1, ran, -1):
        shorter = replace(final, prompt_ids=tuple(ids[:size]), max_prompts=None, repeats=1)
        if costs.plan_s(ranked[0], shorter) * COST_MARGIN <= seconds:
            return Fitted((shorter,), 1)
    return None


def sized_note(number: int, had: int, left: Sequence[BenchPlan], fitted: Fitted) -> str:
    changes = []
    cut = [plan.repeats for plan in fitted.rounds if plan.repeats > 1] or [1]
    # The rounds kept are the last of those left (one setting goes straight to the last).
    if any(a.repeats < b.repeats for a, b in zip(fitted.rounds, left[-len(fitted.rounds):])):
        changes.append(f"ran the prompts fewer times ({max(cut)} at most, of the "
                       f"{max(p.repeats for p in left)} planned)")
    if fitted.keep < had:
        changes.append(f"kept the best {fitted.keep} of the {had} settings the round passed")
    if len(fitted.rounds) < len(left):
        changes.append("went straight to the last round")
    final = fitted.rounds[-1]
    if len(choose_prompts(final)) < len(choose_prompts(left[-1])):
        changes.append(f"ran the last round on {len(choose_prompts(final))} of the "
                       f"{len(choose_prompts(left[-1]))} prompts, once")
    return (f"After round {number} the rounds left were sized to the time left before the "
            f"search's deadline (projected from what each setting's runs cost so far): "
            + "; ".join(changes) + ".")
