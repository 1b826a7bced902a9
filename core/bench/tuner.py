"""The adaptive tuner: a good k for a drafter at a fraction of an exhaustive sweep's cost.

An exhaustive sweep runs every k (1..8) on every prompt, ``repeats`` times. The tuner runs
each setting once (repeats = 1) and only a few settings:

1. **Probe**: A (no draft), k = k_max and k = k_max / 2, fixed k. The k_max run measures, for every draft
   position i, how many verify steps kept a draft there (accepted_i) and proposed one
   (drafted_i). Because a step at k_max keeps position i exactly when a run at any k >= i
   would have kept it (the same greedy target decides), the k_max run predicts every
   smaller k: tokens per step E(k) = 1 + sum_{i<k} accepted_i / steps.
2. **Cost model**: the time of a verify step = t0 + t1 * d + t2 * d^2 for d drafts in it,
   fitted to the three probe runs (A pins t0, the time of one plain target step; t1 is the
   cost of one more draft token: the draft forward plus the wider verify; t2 lets the verify
   cost grow faster than linearly, as it does once k + 1 tokens stop being free for the
   hardware, so the best k can lie between the probes). Predicted tok/s at k:
   E(k) / (t0 + t1 * D(k) + t2 * Q(k)), with D(k) = sum_{i<k} drafted_i / steps the mean
   drafts per step and Q(k) = sum_{i<k} (2i + 1) drafted_i / steps the mean of d^2 (a step
   with d drafts drafted at positions 0..d-1, and d^2 = sum_{i<d} (2i + 1)). This is
   Leviathan et al.'s model with the cost measured instead of assumed.
3. **Confirm**: the best predicted k values not yet measured (``confirm`` of them) run with
   A again (no warm-up: the probe left the engine warm); the winner is chosen among every
   measured k by ``core.bench.winner``'s rule (k = 0, no draft, when none beats 1).

With the default 2 confirmations the tuner runs at most 6 arm passes over the prompts once;
the sweep runs 9 arm passes ``repeats`` times (27 at the default 3 repeats).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Any

from specdeck.core.bench import winner
from specdeck.core.bench.fields import DEFAULT_K_MAX, PLAN_FIELDS
from specdeck.core.bench.plan import Arm, BenchPlan
from specdeck.core.bench.runner import BenchRun, EventSink, RunRecord, run_plan
from specdeck.core.bench.summary import summarize
from specdeck.core.bench.sweep import arm_name, generation_seconds
from specdeck.core.engines.base import DrafterKind, DrafterSpec, Engine
from specdeck.core.errors import InvalidInputError


@dataclass(frozen=True)
class CostModel:
    """Seconds per verify step with D drafts: step_s + draft_token_s * D + draft_token2_s * D^2."""

    step_s: float
    draft_token_s: float
    draft_token2_s: float = 0.0

    def step_seconds(self, drafts: float, drafts_squared: float | None = None) -> float:
        """Mean seconds of a verify step with ``drafts`` mean drafts (and ``drafts_squared``
        the mean of their squares; default: as if every step drafted the mean)."""
        square = drafts * drafts if drafts_squared is None else drafts_squared
        return self.step_s + self.draft_token_s * drafts + self.draft_token2_s * square

    @property
    def draft_cost_ratio(self) -> float:
        """One more draft token, in plain target steps: Leviathan's c (plus verify growth)."""
        return self.draft_token_s / self.step_s if self.step_s > 0 else 0.0


def squared_drafts(per_position_drafted) -> int:
    """Sum over a run's steps of (drafts in the step)^2, from its per-position counts."""
    return sum((2 * i + 1) * n for i, n in enumerate(per_position_drafted))


@dataclass(frozen=True)
class KForecast:
    k: int
    tokens_per_step: float
    drafts_per_step: float
    tokens_per_second: float
    speedup: float
    """Over the probe's no-draft tok/s."""


@dataclass(frozen=True)
class TuneResult:
    drafter: DrafterSpec
    best_k: int
    """0 = no draft: nothing measured beat decoding without one."""
    best_speedup: float
    """Measured median paired speed-up of best_k (1.0 for no draft)."""
    cost: CostModel
    forecast: tuple[KForecast, ...]
    measured: dict[int, float]
    """k -> measured median paired speed-up, for every k the tuner ran."""
    runs: tuple[BenchRun, ...]
    spent_s: float
    """Generation time of every run (warm-ups included), as SweepResult.spent_s."""
    notes: tuple[str, ...] = field(default=())

    @property
    def predicted_best_k(self) -> int:
        top = max(self.forecast, key=lambda f: f.tokens_per_second)
        return top.k if winner.beats_no_draft(top.speedup) else 0

    def to_json(self) -> dict[str, Any]:
        from specdeck.core.jsonout import to_jsonable

        return {
            "drafter": to_jsonable(self.drafter), "best_k": self.best_k,
            "best_speedup": self.best_speedup, "predicted_best_k": self.predicted_best_k,
            "cost": {"step_s": self.cost.step_s, "draft_token_s": self.cost.draft_token_s,
                     "draft_token2_s": self.cost.draft_token2_s,
                     "draft_cost_ratio": self.cost.draft_cost_ratio},
            "forecast": to_jsonable(self.forecast), "measured": self.measured,
            "spent_s": self.spent_s, "notes": list(self.notes),
        }


def fit_cost(records: list[RunRecord]) -> CostModel:
    """The step cost fitted to the runs: with three or more distinct drafts per step, the
    quadratic model (least squares of each run's decode_s over steps, drafted and
    drafted^2 / steps); else, or when the quadratic one would predict a step cheaper than a
    plain one anywhere up to the most drafts measured, the linear one."""
    quadratic = _fit_quadratic(records)
    return quadratic if quadratic is not None else _fit_linear(records)


def _fit_quadratic(records: list[RunRecord]) -> CostModel | None:
    rows = []
    for record in records:
        s = record.result.stats
        if s.steps:
            rows.append((float(s.steps), float(s.drafted),
                         float(squared_drafts(s.per_position_drafted)), s.decode_s))
    if len({round(r[1] / r[0], 6) for r in rows}) < 3:
        return None
    # Normal equations of the 3-parameter least squares.
    a = [[sum(r[i] * r[j] for r in rows) for j in range(3)] for i in range(3)]
    b = [sum(r[i] * r[3] for r in rows) for i in range(3)]
    solved = _solve3(a, b)
    if solved is None:
        return None
    cost = CostModel(*solved)
    most = max(r[1] / r[0] for r in rows)
    plain = cost.step_s
    if plain <= 0 or any(cost.step_seconds(most * i / 16) < plain for i in range(1, 17)):
        return None  # noise made drafting look cheaper than not drafting: keep it linear
    return cost


def _solve3(a: list[list[float]], b: list[float]) -> tuple[float, float, float] | None:
    """Gaussian elimination with partial pivoting; None when singular."""
    m = [row[:] + [v] for row, v in zip(a, b)]
    for col in range(3):
        pivot = max(range(col, 3), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-18:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(3):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col])]
    return tuple(m[i][3] / m[i][i] for i in range(3))


def _fit_linear(records: list[RunRecord]) -> CostModel:
    """Least squares of decode_s over (steps, drafted); drafted-free runs pin step_s."""
    sxx = sxy = syy = sx_t = sy_t = 0.0
    for record in records:
        s = record.result.stats
        x, y, t = float(s.steps), float(s.drafted), s.decode_s
        sxx += x * x
        sxy += x * y
        syy += y * y
        sx_t += x * t
        sy_t += y * t
    det = sxx * syy - sxy * sxy
    if sxx <= 0:
        raise InvalidInputError("The tuner's probe produced no verify steps to time.")
    if abs(det) < 1e-12 * max(sxx * syy, 1.0):  # nothing drafted: only the step cost is known
        return CostModel(sx_t / sxx, 0.0)
    step = (sx_t * syy - sy_t * sxy) / det
    per_draft = (sy_t * sxx - sx_t * sxy) / det
    return CostModel(max(step, 1e-12), max(per_draft, 0.0))


def forecast(records: list[RunRecord], cost: CostModel, k_max: int,
             baseline_tokens_per_second: float) -> tuple[KForecast, ...]:
    """Predicted tok/s for k = 1..k_max from k_max runs' per-position counts."""
    steps = sum(r.result.stats.steps for r in records)
    accepted = [0] * k_max
    drafted = [0] * k_max
    for record in records:
        s = record.result.stats
        for i, (a, d) in enumerate(zip(s.per_position_accepted, s.per_position_drafted)):
            if i < k_max:
                accepted[i] += a
                drafted[i] += d
    out = []
    for k in range(1, k_max + 1):
        tokens = 1.0 + sum(accepted[:k]) / steps if steps else 1.0
        drafts = sum(drafted[:k]) / steps if steps else 0.0
        squares = squared_drafts(drafted[:k]) / steps if steps else 0.0
        rate = tokens / cost.step_seconds(drafts, squares)
        speedup = rate / baseline_tokens_per_second if baseline_tokens_per_second > 0 else 0.0
        out.append(KForecast(k, tokens, drafts, rate, speedup))
    return tuple(out)


def tune_k(
    base: BenchPlan,
    drafter: DrafterSpec,
    k_max: int = DEFAULT_K_MAX,
    confirm: int = 2,
    engine: Engine | None = None,
    on_event: EventSink | None = None,
    cancel: threading.Event | None = None,
) -> TuneResult:
    """Find a good k for ``drafter`` on ``base``'s prompts (see the module docstring)."""
    if drafter.kind is DrafterKind.NONE:
        raise InvalidInputError("The tuner needs a drafter (a draft model or n-gram).")
    k_field = PLAN_FIELDS["k"]
    if not k_field.low <= k_max <= k_field.high:
        raise InvalidInputError(f"k_max {k_max} must be {k_field.low} to {k_field.high}.")
    cancel = cancel or threading.Event()
    owned = engine is None
    if engine is None:
        from specdeck.core.engines import create_engine

        engine = create_engine(base.engine)

    def arm(k: int) -> Arm:
        return Arm(arm_name(k), replace(drafter, num_draft_tokens=k, adaptive=False))

    def plan(ks: list[int]) -> BenchPlan:
        return replace(base, arms=(Arm("A"), *(arm(k) for k in ks)), repeats=1)

    probes = sorted({k_max, max(1, k_max // 2)})
    try:
        probe = run_plan(plan(probes), engine, on_event, cancel)
        runs = [probe]
        probe_summary = summarize(probe)
        standings = _standings(probe_summary)
        baseline = probe_summary.arm("A").tokens_per_second or 0.0
        cost = fit_cost(probe.counted())
        curve = forecast(probe.counted(arm_name(k_max)), cost, k_max, baseline)
        ranked = sorted(curve, key=lambda f: f.tokens_per_second, reverse=True)
        candidates = [f.k for f in ranked if f.k not in standings
                      and winner.beats_no_draft(f.speedup)][:confirm]
        if candidates and not cancel.is_set():
            # The probe just warmed the engine up: no second warm-up.
            check = run_plan(replace(plan(sorted(candidates)), warmup=0), engine, on_event,
                             cancel)
            runs.append(check)
            standings.update(_standings(summarize(check)))
    finally:
        if owned:
            engine.unload()
    measured = {k: s.speedup for k, s in sorted(standings.items()) if s.speedup is not None}
    notes = [f"k={k} cannot be chosen: {s.excluded_because}."
             for k, s in sorted(standings.items()) if s.diverged]
    best_k = chosen_k(standings)
    best = standings[best_k].speedup if best_k else winner.NO_DRAFT_SPEEDUP
    passed = winner.passed_over_text(
        [(k, why) for k, why in winner.passed_over(sorted(standings), standings.__getitem__,
                                                   best_k or None)
         if not standings[k].diverged],  # those already have their note
        standings.__getitem__, lambda k: f"k={k}")
    if not best_k:
        notes.append(f"No k {'that could be chosen ' if passed else ''}beat decoding without a "
                     "draft: turn drafting off for this setup.")
    if passed:
        notes.append(f"Not chosen although as fast: {passed}")
    return TuneResult(
        drafter=drafter,
        best_k=best_k,
        best_speedup=best,
        cost=cost,
        forecast=curve,
        measured=measured,
        runs=tuple(runs),
        spent_s=generation_seconds(runs),
        notes=tuple(notes),
    )


def chosen_k(standings: dict[int, winner.Standing]) -> int:
    """The k ``core.bench.winner`` picks among those measured (the smaller on a tie); 0: no
    draft."""
    return winner.pick(sorted(standings), standings.__getitem__) or 0


def _standings(summary) -> dict[int, winner.Standing]:
    """k -> what ``core.bench.winner`` reads of that k's arm."""
    out = {}
    for comparison in summary.comparisons:
        k = summary.arm(comparison.arm).k
        if k is not None:
            out[k] = winner.comparison_standing(comparison)
    return out
