"""Which setting wins: the one rule behind every "best" SpecDeck names or applies.

A plain A/B (`specdeck bench --apply`, the A/B page's Apply button), a sweep of k, a grid of
llama-server flags, the k tuner and the tune (its live best so far, its finalist, its verdict,
its report and the prediction history) all end by naming a setting, and the user may write it
into their server's config. They must never disagree, so they all ask this module, and every
one of them reads a setting's measurements through the one constructor, :func:`standing`:

- A setting takes part only when it is known to have drafted (a drafting arm that drafted
  nothing is not a drafting result, and neither is one of which nobody can tell whether it
  drafted: a server that gave no draft counts, such as a llama-server without --metrics,
  whose timings leave draft_n out of a request that drafted nothing), its median paired
  speed-up against decoding without a draft is known (a finite number, from readings that
  passed their checks), its output was checked (at least one of its paired runs compared
  with the reference's: a setting whose every paired run lost data on the way was never
  checked) and did not change (no real divergence from the reference: float ties are not
  divergences, and neither is a run that lost data and so was not compared; a sampled plan,
  which cannot be checked, is not held against it), and it was measured on everything the
  others were (successive halving drops settings after a round: a setting measured on fewer
  prompts cannot win on them).
- The winner is the highest median speed-up among them; the earlier one in the plan on a tie.
- It must beat decoding without a draft (a median above ``NO_DRAFT_SPEEDUP``, 1.0: exactly
  1.0 does not); otherwise there is no winner and the right setting is "no draft".

The tune judges twice more, by rules that live here too: within the machine's noise of the
winner it verifies the cheapest setting instead (:func:`cheapest_close`), and it writes a
setting only when the verification's whole 95% interval lies above 1.0
(:func:`clearly_faster`), and with its output shown unchanged by a greedy verification
(:attr:`Standing.shown_unchanged`: there a sampled plan is not excused). A group of
settings measured alike (a tune candidate's) is represented by the best of them that is a
drafting result, winner or not (:func:`figure_of`). Wherever a winner (or "no draft") is
named, the settings measured at least as fast that cannot win are named beside it, with why
(:func:`passed_over`, :func:`passed_over_text`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from specdeck.core.bench.stats import RatioSummary
    from specdeck.core.bench.summary import BenchSummary, Comparison

T = TypeVar("T")

NO_DRAFT_SPEEDUP = 1.0
"""Decoding without a draft, the setting every winner must beat: a paired speed-up of 1.0
(a ratio of two settings' speeds is 1.0 where they are equally fast)."""


@dataclass(frozen=True)
class Standing:
    """What the rule reads of one measured setting: built by :func:`standing`, from whatever
    measured it (a finished A/B's comparison, a sweep's or a grid's row, a running search's
    figures), so that every judge reads the same facts the same way."""

    speedup: float | None
    """Median paired speed-up against decoding without a draft; None when unmeasured."""
    diverged: int = 0
    """Runs whose output really changed (float ties, runs not compared and sampled plans
    excluded)."""
    complete: bool = True
    """Measured on every prompt the plan holds (not dropped early)."""
    not_usable: str = ""
    """Why its figures cannot be used (a server's reading that failed its checks)."""
    not_drafting: str = ""
    """Why it is not known to have drafted: it drafted nothing, or nobody can tell whether
    it did (``drafting_doubt``); "" when it drafted."""
    unchecked: str = ""
    """Why its output was never compared with the reference's (every paired run lost data,
    or none was paired); "" when at least one paired run was, or when the plan sampled."""
    sampled: bool = False
    """Its plan sampled: outputs differ by design, so neither ``diverged`` nor ``unchecked``
    is held against it here."""

    @property
    def not_a_result(self) -> str | None:
        """Why its figure is not this setting's drafting speed-up, however it was measured
        (not usable, not drafting, unmeasured, output changed); None when it is."""
        if self.not_usable:
            return f"not usable: {self.not_usable}"
        if self.not_drafting:
            return self.not_drafting
        if self.speedup is None or not math.isfinite(self.speedup):
            return "no paired runs to measure it"
        if self.diverged:
            return f"its output changed in {self.diverged} run(s)"
        if self.unchecked:
            return f"its output was never checked ({self.unchecked})"
        return None

    @property
    def shown_unchanged(self) -> bool:
        """Whether its output was compared with the reference's and did not change: what the
        tune requires of a setting before writing it (its verification plans are greedy, so
        a sampled one is not excused there)."""
        return not (self.sampled or self.diverged or self.unchecked)

    @property
    def excluded_because(self) -> str | None:
        """Why this setting cannot win whatever its speed; None when it takes part."""
        why = self.not_a_result
        if why is None and not self.complete:
            return "it was not measured on every prompt"
        return why


def standing(speedup: RatioSummary | float | None, *, diverged: int, unchecked: str,
             sampled: bool, complete: bool, not_drafting: str, drafting_unknown: str,
             not_usable: str = "") -> Standing:
    """The one constructor of a :class:`Standing`, from a setting's measured runs, so that no
    judge can leave a fact out (every fact is a required keyword):

    ``speedup``: its paired speed-up over no draft (a RatioSummary: its median is read; or
    the median itself; None: none measured). ``diverged``: its runs whose output really
    changed (core.engines.lossless: not float ties, not runs left uncompared because they
    lost data). ``unchecked``: why none of its paired runs was compared with the reference's
    ("" when one was). ``sampled``: the plan sampled, so outputs differ by design and neither
    ``diverged`` nor ``unchecked`` is held against it. ``complete``: it was measured on every
    prompt the others were (not dropped by successive halving). ``not_drafting``: why it
    drafted nothing (core.bench.summary's reading, "" when it drafted or nobody counted);
    ``drafting_unknown``: why nobody can tell whether it drafted. ``not_usable``: why its
    figures cannot be used."""
    median = getattr(speedup, "median", speedup)
    return Standing(median, 0 if sampled else diverged, complete, not_usable,
                    drafting_doubt(not_drafting, drafting_unknown),
                    "" if sampled else unchecked, sampled)


@dataclass(frozen=True, kw_only=True)
class Facts:
    """What a finished A/B showed of a drafting arm besides its speed-up: the facts
    :func:`standing` reads, read off a ``core.bench.summary.Comparison`` by :func:`facts`
    alone. The rows that keep a setting's measurement (core.bench.sweep's and
    core.bench.grid's) carry them as their own fields; the defaults are those of a clean
    drafting setting, for rows built by hand."""

    diverged: int = 0
    """Runs whose output really changed."""
    unchecked: str = ""
    """Why none of its paired runs was compared with the reference's ("" when one was)."""
    sampled: bool = False
    """Its plan sampled: outputs differ by design and were not checked."""
    not_drafting: str = ""
    """Why it drafted nothing (core.bench.summary's reading): it never wins."""
    drafting_unknown: str = ""
    """Why nobody can tell whether it drafted: it never wins either."""
    not_usable: str = ""
    """Why its figures cannot be used ("" when they can)."""

    def judged(self, speedup: RatioSummary | float | None, *, complete: bool) -> Standing:
        """The :class:`Standing` of a setting with these facts and ``speedup``."""
        return standing(speedup, diverged=self.diverged, unchecked=self.unchecked,
                        sampled=self.sampled, complete=complete,
                        not_drafting=self.not_drafting,
                        drafting_unknown=self.drafting_unknown, not_usable=self.not_usable)

    def keywords(self) -> dict[str, object]:
        """These facts as keywords, for the constructor of a row that carries them."""
        return {f.name: getattr(self, f.name) for f in fields(Facts)}


def facts(comparison: Comparison) -> Facts:
    """The one reading of a finished A/B's drafting arm into the rule's facts (an A/B's, a
    sweep's row, a grid's row, the k tuner's, the tune's verification)."""
    check = comparison.lossless
    unchecked = "" if check.compared else check.verdict.removeprefix("not checked: ")
    return Facts(diverged=check.diverged, unchecked=unchecked,
                 sampled=not check.checkable, not_drafting=comparison.not_drafting,
                 drafting_unknown=comparison.drafting_unknown,
                 not_usable=comparison.not_usable)


def beats_no_draft(speedup: float | None) -> bool:
    """Whether a speed-up (a median, or a prediction) is above decoding without a draft:
    exactly ``NO_DRAFT_SPEEDUP`` is not, and neither is an unknown or non-finite one."""
    return speedup is not None and math.isfinite(speedup) and speedup > NO_DRAFT_SPEEDUP


def clearly_faster(ratio: RatioSummary | None) -> bool:
    """Whether a paired speed-up is faster beyond the noise: its whole 95% interval lies
    above ``NO_DRAFT_SPEEDUP`` (a ratio of two settings: above as fast). The tune writes a
    setting only when this holds against no drafting and against the user's own setting;
    too few pairs for an interval is not clearly faster."""
    return ratio is not None and ratio.has_interval and ratio.ci_low > NO_DRAFT_SPEEDUP


def clearly_slower(ratio: RatioSummary | None) -> bool:
    """Whether a paired speed-up is slower beyond the noise: its whole 95% interval lies
    below ``NO_DRAFT_SPEEDUP``."""
    return ratio is not None and ratio.has_interval and ratio.ci_high < NO_DRAFT_SPEEDUP


def pick(items: Iterable[T], standing: Callable[[T], Standing]) -> T | None:
    """The winning item of ``items`` (see the module docstring), or None: no draft."""
    best, best_speedup = None, NO_DRAFT_SPEEDUP
    for item in items:
        s = standing(item)
        if s.excluded_because is None and s.speedup > best_speedup:
            best, best_speedup = item, s.speedup
    return best


def passed_over(items: Iterable[T], standing: Callable[[T], Standing],
                best: T | None) -> list[tuple[T, str]]:
    """The items measured at least as fast as the winner ``best`` (faster than no draft where
    it is None) that cannot win, fastest first, each with why (``Standing.excluded_because``):
    what is said beside the winner wherever it is offered, so that a figure on screen as high
    as the one offered is never left unexplained (an n-gram arm that drafted nothing, at 1.2x
    by noise)."""
    bar = None if best is None else standing(best).speedup
    out = [(item, s.excluded_because) for item in items
           if (s := standing(item)).excluded_because is not None and beats_no_draft(s.speedup)
           and (bar is None or s.speedup >= bar)]
    return sorted(out, key=lambda pair: -standing(pair[0]).speedup)


def passed_over_text(passed: Iterable[tuple[T, str]], standing: Callable[[T], Standing],
                     name: Callable[[T], str]) -> str:
    """:func:`passed_over`'s settings in one sentence, as the CLI, the tables and the tune
    say them beside the winner (or beside "no draft"): each one's name, its figure and why
    it cannot be the best; "" for none."""
    said = [f"{name(item)} measured {standing(item).speedup:.2f}x but cannot be the best: {why}"
            for item, why in passed]
    return "; ".join(said) + "." if said else ""


def cheapest_close(items: Iterable[T], standing: Callable[[T], Standing],
                   cost: Callable[[T], tuple], band: Callable[[T], float]) -> T | None:
    """The tune's finalist: the winner (:func:`pick`), or, among the settings that could win
    as well (they take part and beat no draft) and lie within ``band(winner)`` (a share of its
    speed-up: how far this machine's noise moves a figure of its pairs) of it, the cheapest
    by ``cost``, the better scored among equally cheap ones. None when nothing wins: one
    lucky run must not buy a draft model's memory when fewer tokens a step do as well."""
    items = list(items)
    best = pick(items, standing)
    if best is None:
        return None
    floor = standing(best).speedup * (1 - band(best))
    close = [i for i in items if standing(i).excluded_because is None
             and beats_no_draft(standing(i).speedup) and standing(i).speedup >= floor]
    return min(close, key=lambda i: (cost(i), -standing(i).speedup), default=best)


def figure_of(items: Iterable[T], standing: Callable[[T], Standing],
              reach: Callable[[T], float]) -> tuple[T, str] | None:
    """The setting whose figure stands for a group of settings (a tune candidate's, as its
    report row, the prediction history and the Tune page's row give it), and "", or why that
    figure is not a drafting result. Among the settings that went furthest (``reach``: how
    far each went in the search; those dropped earlier rest on fewer pairs, and the best of
    thin figures flatters itself), the one the winner's rule ranks first without its bar (a
    figure below no draft's is still the group's); where none of them is a drafting result
    (:attr:`Standing.not_a_result`), the fastest measured one, with why, shown and never
    learned from. None when none has a speed-up."""
    measured = [i for i in items if standing(i).speedup is not None
                and math.isfinite(standing(i).speedup)]
    furthest = max((reach(i) for i in measured), default=0)
    measured = [i for i in measured if reach(i) == furthest]
    results = [i for i in measured if standing(i).not_a_result is None]
    if results:
        return max(results, key=lambda i: standing(i).speedup), ""
    if not measured:
        return None
    top = max(measured, key=lambda i: standing(i).speedup)
    return top, standing(top).not_a_result


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
    """A finished A/B's drafting arm (an A/B measures every arm on every prompt)."""
    return facts(comparison).judged(comparison.speedup, complete=True)


def best_arm(summary: BenchSummary) -> str | None:
    """The name of the winning drafting arm of a finished A/B, or None: no draft."""
    best = pick(summary.comparisons, comparison_standing)
    return None if best is None else best.arm
