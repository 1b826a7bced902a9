"""Which setting wins: the one rule behind every "best" SpecDeck names or applies.

A plain A/B (`specdeck bench --apply`, the A/B page's Apply button), a sweep of k, a grid of
llama-server flags and the k tuner all end by naming a winner, and the user may write it into
their server's config. They must never disagree, so they all ask this module:

- A setting takes part only when it is known to have drafted (a drafting arm that drafted
  nothing is not a drafting result, and neither is one of which nobody can tell whether it
  drafted: a server that gave no draft counts, such as a llama-server without --metrics,
  whose timings leave draft_n out of a request that drafted nothing), its median paired
  speed-up against decoding without a draft is known (a finite number, from readings that
  passed their checks), its output did not change (no real divergence from the reference:
  float ties are not divergences; a sampled plan, which cannot be checked, is not held
  against it), and it was measured on everything the others were (successive halving drops
  settings after a round: a setting measured on fewer prompts cannot win on them).
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
    not_drafting: str = ""
    """Why it is not known to have drafted: it drafted nothing, or nobody can tell whether
    it did (``drafting_doubt``); "" when it drafted."""

    @property
    def excluded_because(self) -> str | None:
        """Why this setting cannot win whatever its speed; None when it takes part."""
        if self.not_usable:
            return f"not usable: {self.not_usable}"
        if self.not_drafting:
            return self.not_drafting
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


def drafting_doubt(not_drafting: str, unknown: str) -> str:
    """Why a setting is not a drafting result, as Standing.not_drafting says it: it drafted
    nothing (core.bench.summary's ``not_drafting``), or nobody can tell whether it did
    (``drafting_unknown``); "" when it drafted."""
    if not_drafting:
        return f"it did not draft: {not_drafting}"
    if unknown:
        return f"SpecDeck cannot tell whether it drafted: {unknown}"
    return ""


def comparison_standing(comparison: Comparison) -> Standing:
    ratio = comparison.speedup
    return Standing(None if ratio is None else ratio.median, comparison.lossless.diverged,
                    not_usable=comparison.not_usable,
                    not_drafting=drafting_doubt(comparison.not_drafting,
                                                comparison.drafting_unknown))


def best_arm(summary: BenchSummary) -> str | None:
    """The name of the winning drafting arm of a finished A/B, or None: no draft."""
    best = pick(summary.comparisons, comparison_standing)
    return None if best is None else best.arm
