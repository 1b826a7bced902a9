"""The theory beside the measurement: Leviathan et al.'s speed-up from an arm's measured
acceptance and a draft/target cost ratio, the predicted best k, and the measured cost of one
speculative step in target forwards (what a step should cost: k * c + 1).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specdeck.core.bench import stats, winner
from specdeck.core.bench.runner import BenchRun, RunRecord
from specdeck.core.engines.base import DrafterKind, DrafterSpec, count_at
from specdeck.core.units import format_bytes

if TYPE_CHECKING:
    from specdeck.core.bench.summary import ArmSummary


@dataclass(frozen=True)
class CostRatio:
    """One draft forward's cost relative to one target forward."""

    value: float | None
    source: str
    estimate: bool


@dataclass(frozen=True)
class Theory:
    """Leviathan et al.'s prediction from the measured acceptance, beside the measurement."""

    k: int
    cost_ratio: CostRatio
    predicted_speedup: float | None
    """At this arm's k, with a verify step costing one target forward (the GPU ideal)."""
    best_k: int | None
    """0 when no k is predicted to beat decoding without a draft."""
    best_speedup: float | None
    curve: tuple[stats.KPrediction, ...]
    ideal_step_cost: float | None
    """k * c + 1: what a step should cost in target forwards."""
    measured_step_cost: float | None
    """Median over pairs of (this arm's time per step) / (the reference's time per token)."""
    note: str = ""


def draft_cost_ratio(drafter: DrafterSpec, target_path: Path | None) -> CostRatio:
    """c = cost of one draft forward / one target forward.

    n-gram lookup: ~0 (a dictionary search). A draft model: decoding is memory-bound, so a
    forward costs about the bytes of weights it reads; the estimate is the draft's weight
    bytes over the target's (embedding excluded: a lookup reads one row of it).
    """
    if drafter.kind is DrafterKind.NGRAM:
        return CostRatio(0.0, "n-gram lookup: ~0 of a target forward", estimate=True)
    if drafter.kind is not DrafterKind.MODEL or drafter.model_path is None or target_path is None:
        return CostRatio(None, "no drafter", estimate=False)
    from specdeck.core.errors import SpecDeckError
    from specdeck.core.models import read_model

    try:
        draft = read_model(drafter.model_path).weights
        target = read_model(target_path).weights
    except SpecDeckError as exc:
        return CostRatio(None, f"unknown: {exc.what}", estimate=True)
    if draft is None or target is None or target.on_gpu <= 0:
        return CostRatio(None, "unknown: no safetensors weights to measure", estimate=True)
    return CostRatio(
        draft.on_gpu / target.on_gpu,
        f"estimate from weight bytes: draft {format_bytes(draft.on_gpu)} / target "
        f"{format_bytes(target.on_gpu)}",
        estimate=True,
    )


def measured_step_cost(matched: list[tuple[RunRecord, RunRecord]]) -> float | None:
    """Median of (arm's seconds per verify step) / (reference's seconds per token)."""
    values = []
    for reference, candidate in matched:
        a, b = reference.result.stats, candidate.result.stats
        if a.new_tokens and a.decode_s > 0 and b.steps:
            values.append((b.decode_s / b.steps) / (a.decode_s / a.new_tokens))
    return statistics.median(values) if values else None


def per_step_acceptance(records: Sequence[RunRecord]) -> list[float]:
    """P(the draft at position i was kept) per verify step, i = 0.. (cumulative in i).

    Steps in which the drafter proposed nothing count as misses: an n-gram drafter that
    finds no match gains nothing that step, and the prediction must not pretend it does.
    """
    steps = sum(r.result.stats.steps for r in records)
    width = max((len(r.result.stats.per_position_accepted) for r in records), default=0)
    if not steps:
        return []
    return [sum(count_at(r.result.stats.per_position_accepted, i) for r in records) / steps
            for i in range(width)]


def theory_of(run: BenchRun, drafter: DrafterSpec, summary: ArmSummary,
              matched: list[tuple[RunRecord, RunRecord]]) -> Theory | None:
    """Leviathan et al.'s prediction for a drafting arm (None for the reference)."""
    if drafter.kind is DrafterKind.NONE:
        return None
    k = drafter.num_draft_tokens
    cost = draft_cost_ratio(drafter, run.loaded.model_path)
    measured = measured_step_cost(matched)
    acceptance = per_step_acceptance([b for _, b in matched])
    if cost.value is None or not acceptance:
        why = "no draft was proposed" if not acceptance else f"the draft cost is {cost.source}"
        return Theory(k, cost, None, None, None, (), None, measured, note=f"No prediction: {why}.")
    best, curve = stats.predict_best_k(acceptance, cost.value)
    if not winner.beats_no_draft(best.speedup):  # no k beats plain decoding: no draft
        best = stats.KPrediction(0, winner.NO_DRAFT_SPEEDUP)
    return Theory(
        k=k,
        cost_ratio=cost,
        predicted_speedup=stats.theoretical_speedup(acceptance, k, cost.value),
        best_k=best.k,
        best_speedup=best.speedup,
        curve=tuple(curve),
        ideal_step_cost=k * cost.value + 1.0,
        measured_step_cost=measured,
        note="Acceptance per verify step (steps without a draft count as misses); verify "
        "steps priced at one target forward (a GPU's ideal); positions beyond the measured "
        "ones are extended geometrically.",
    )
