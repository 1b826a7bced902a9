"""Which setting wins: the one rule behind every "best" SpecDeck names or applies.

A plain A/B (`specdeck bench --apply`, the A/B page's Apply button), a sweep of k, a grid of
llama-server flags and the k tuner all end by naming a winner, and the user may write it into
their server's config. They must never disagree, so they all ask this module:

- A setting takes part only when it drafted (a drafting arm that drafted nothing is not a
  drafting result), its median paired speed-up against decoding without a draft is known (a
  finite number, from readings that passed their checks), its output did not change (no real divergence from the
  reference: float ties are not divergences; a sampled plan, which cannot be checked, is not
  held against it), and it was measured on everything the others were (successive halving
  drops settings after a round: a setting measured on fewer prompts cannot win on them).
- The winner is the highest median speed-up among them; the earlier one in the plan on a tie.
- It must beat decoding without a draft (a median above 1.0); otherwise there is no winner
  and the right setting is "no draft".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from specdeck.core.bench.summary import BenchSummary, Comparison

T = TypeVar("T")

NO_DRAFT_SPEEDUP = 1.0
"""Decoding without a draft, the setting every winner must beat."""


@dataclass(frozen=True)
class Standing:
    """What the rule reads of one measured setting."""

    speedup: float | None
    """Median paired speed-up against decoding without a draft; None when unmeasured."""
    diverged: int = 0
    """Runs whose output really changed (float ties excluded)."""
    complete: bool = True
    """Measured on every prompt the plan holds (not dropped early)."""
    not_usable: str = ""
    """Why its figures cannot be used (a server's reading that failed its checks)."""

    @property
    def excluded_because(self) -> str | None:
        """Why this setting cannot win whatever its speed; None when it takes part."""
        if self.not_usable:
            return f"not usable: {self.not_usable}"
        if self.speedup is None or not math.isfinite(self.speedup):
            return "no paired runs to measure it"
        if self.diverged:
            return f"its output changed in {self.diverged} run(s)"
        if not self.complete:
            return "it was not measured on every prompt"
        return None


def pick(items: Iterable[T], standing: Callable[[T], Standing]) -> T | None:
    """The winning item of ``items`` (see the module docstring), or None: no draft."""
    best, best_speedup = None, NO_DRAFT_SPEEDUP
    for item in items:
        s = standing(item)
        if s.excluded_because is None and s.speedup > best_speedup:
            best, best_speedup = item, s.speedup
    return best


def comparison_standing(comparison: Comparison) -> Standing:
    ratio = comparison.speedup
    return Standing(None if ratio is None else ratio.median, comparison.lossless.diverged,
                    not_usable=comparison.not_usable or comparison.not_drafting)


def best_arm(summary: BenchSummary) -> str | None:
    """The name of the winning drafting arm of a finished A/B, or None: no draft."""
    best = pick(summary.comparisons, comparison_standing)
    return None if best is None else best.arm
