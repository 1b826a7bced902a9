"""Statistics for A/B runs: paired speed-ups, losslessness, the theoretical speed-up.

Speed-ups are paired: each run of arm B is divided by the run of arm A on the same prompt
in the same repeat (the arms are interleaved, so drift hits both). The summary is the
median of those ratios with its min/max and a bootstrap interval, never a ratio of means.

The theoretical speed-up follows Leviathan et al. (2023, "Fast Inference from Transformers
via Speculative Decoding"): with k draft tokens per step, the expected tokens per verify
step is E(k) = 1 + sum_{i=1..k} P(the first i drafts are all accepted), and a step costs
k * c + v(k) target-forward units, where c is the cost of one draft forward relative to a
target forward and v(k) the cost of verifying k+1 tokens (1 on a GPU, about 2 at k=2..4
on a 2-core CPU). For i.i.d. acceptance alpha, E(k) = (1 - alpha^(k+1)) / (1 - alpha).

In SpecDeck's accounting the drafts of one step are proposed together, and the token at
position i is accepted only when every earlier one was. So accepted_i / drafted_i, the
measured per-position acceptance, is already the cumulative P(first i+1 accepted).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specdeck.core.bench import winner
from specdeck.core.bench.fields import DEFAULT_K_MAX

BOOTSTRAP_RESAMPLES = 2000
SLOWER, FASTER = "slower", "faster"
"""A paired speed-up's verdict (``RatioSummary.verdict``) when its interval lies wholly below,
or above, as fast as no drafting (``winner.clearly_slower``, ``winner.clearly_faster``)."""

MIN_PAIRS_FOR_INTERVAL = 3
"""Fewer pairs than this give no interval: a bootstrap of one or two ratios only repeats them
("95% interval 1.06-1.06x, 1 pairs" is no interval). Say that more runs are needed."""


@dataclass(frozen=True)
class RatioSummary:
    n: int
    median: float
    minimum: float
    maximum: float
    ci_low: float
    """2.5th percentile of the bootstrap distribution of the median."""
    ci_high: float

    @property
    def has_interval(self) -> bool:
        return self.n >= MIN_PAIRS_FOR_INTERVAL

    @property
    def verdict(self) -> str:
        if not self.has_interval:
            return "too few runs to tell"
        if winner.clearly_slower(self):
            return SLOWER
        if winner.clearly_faster(self):
            return FASTER
        return "no clear difference"

    def interval_text(self, sep: str = "-") -> str:
        """"95% interval 1.02-1.31x, 12 pairs", or why there is none."""
        if not self.has_interval:
            return (f"no interval from {self.n} pair{'s' if self.n != 1 else ''}: run more "
                    f"repeats (at least {MIN_PAIRS_FOR_INTERVAL} pairs)")
        return f"95% interval {self.ci_low:.2f}{sep}{self.ci_high:.2f}x, {self.n} pairs"


def speedup(reference_tps: float, arm_tps: float) -> float | None:
    """One pair's speed-up: the arm's tok/s over the reference run's beside it. None when
    either run has no decode rate (tok/s 0: nothing measured, or a reading that failed its
    checks): an unknown speed is never a 0.00x. The live A/B and the finished summary both
    use it."""
    return arm_tps / reference_tps if reference_tps > 0 and arm_tps > 0 else None


def paired_ratios(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """b[i] / a[i] for each pair (a[i] > 0)."""
    if len(a) != len(b):
        raise ValueError("paired_ratios needs as many runs in each arm")
    return [y / x for x, y in zip(a, b) if x > 0]


def summarize_ratios(ratios: Sequence[float], seed: int = 0) -> RatioSummary:
    if not ratios:
        raise ValueError("no ratios to summarise")
    values = list(ratios)
    rng = random.Random(seed)
    medians = sorted(
        statistics.median(rng.choices(values, k=len(values))) for _ in range(BOOTSTRAP_RESAMPLES)
    )
    low = medians[int(0.025 * (len(medians) - 1))]
    high = medians[int(0.975 * (len(medians) - 1))]
    return RatioSummary(
        n=len(values),
        median=statistics.median(values),
        minimum=min(values),
        maximum=max(values),
        ci_low=low,
        ci_high=high,
    )


@dataclass(frozen=True)
class Divergence:
    """Where two greedy outputs stop agreeing."""

    position: int
    """Index of the first generated token that differs (or where one output ends)."""
    expected: int | None
    """The baseline's token there (None if the baseline ended)."""
    actual: int | None


def first_divergence(baseline: Sequence[int], other: Sequence[int]) -> Divergence | None:
    """None when the outputs are identical token for token.

    A shorter output that is a prefix of the other only counts when neither stopped early
    for the same reason; callers compare runs with the same stop rule, so any length
    difference is reported.
    """
    for index, (x, y) in enumerate(zip(baseline, other)):
        if x != y:
            return Divergence(index, x, y)
    if len(baseline) != len(other):
        index = min(len(baseline), len(other))
        expected = baseline[index] if index < len(baseline) else None
        actual = other[index] if index < len(other) else None
        return Divergence(index, expected, actual)
    return None


def expected_tokens_per_step(cumulative_acceptance: Sequence[float], k: int) -> float:
    """E(k) = 1 + sum of P(first i accepted) for i = 1..k."""
    return 1.0 + sum(cumulative_acceptance[:k])


def iid_cumulative(alpha: float, k: int) -> list[float]:
    """P(first i accepted) = alpha^i, i = 1..k."""
    return [alpha**i for i in range(1, k + 1)]


def extend_cumulative(measured: Sequence[float], k: int) -> list[float]:
    """Measured cumulative acceptance, extended geometrically to k positions."""
    values = [min(max(v, 0.0), 1.0) for v in measured if v is not None]
    if not values:
        return [0.0] * k
    if len(values) >= 2 and values[-2] > 0:
        ratio = min(values[-1] / values[-2], 1.0)
    else:
        ratio = values[0]
    while len(values) < k:
        values.append(values[-1] * ratio)
    return values[:k]


def theoretical_speedup(
    cumulative_acceptance: Sequence[float],
    k: int,
    draft_cost_ratio: float,
    verify_cost: Callable[[int], float] | float = 1.0,
) -> float:
    """Predicted speed-up over plain decoding for k drafts per step."""
    if k <= 0:
        return 1.0
    v = verify_cost(k) if callable(verify_cost) else float(verify_cost)
    return expected_tokens_per_step(extend_cumulative(cumulative_acceptance, k), k) / (
        k * draft_cost_ratio + v
    )


@dataclass(frozen=True)
class KPrediction:
    k: int
    speedup: float


def predict_best_k(
    cumulative_acceptance: Sequence[float],
    draft_cost_ratio: float,
    verify_cost: Callable[[int], float] | float = 1.0,
    k_max: int = DEFAULT_K_MAX,
) -> tuple[KPrediction, list[KPrediction]]:
    """The k in 1..k_max with the highest predicted speed-up, and the whole curve."""
    curve = [
        KPrediction(k, theoretical_speedup(cumulative_acceptance, k, draft_cost_ratio, verify_cost))
        for k in range(1, k_max + 1)
    ]
    return max(curve, key=lambda p: p.speedup), curve
