"""A tune's verification and its verdict: the search's finalist against no drafting (and the
user's current setting) on the held-out prompts, paired and interleaved, with as many repeats
as the time the search left holds, fixed before the first run; then ``decide``: write only a
setting verified clearly faster, with its output shown unchanged (core.bench.winner's rules).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from specdeck.core.bench.grid import GridResult, GridRow
from specdeck.core.bench.lossless import LosslessCheck
from specdeck.core.bench.noise import disturbed_runs
from specdeck.core.bench.plan import BenchPlan
from specdeck.core.bench.runner import BenchRun, run_plan
from specdeck.core.bench.stats import RatioSummary
from specdeck.core.bench.summary import BenchSummary, Comparison, paired_speedup, summarize
from specdeck.core.bench.winner import Standing, clearly_faster, comparison_standing
from specdeck.core.tune.candidates import Candidate
from specdeck.core.tune.run import CURRENT, WINNER, Decided, TunedServer

VERIFY_MAX_REPEATS = 8
"""The most repeats of the held-out prompts the verification runs when time is left."""


@dataclass(frozen=True)
class Verification:
    run: BenchRun
    summary: BenchSummary
    winner: Comparison
    """The finalist's arm against no drafting on the verification's prompts: its speed-up,
    its output check, whether it drafted (what ``decide`` judges, through its Standing)."""
    winner_vs_current: RatioSummary | None
    current_vs_none: RatioSummary | None
    held_out: bool = True
    """Whether its prompts were all held out from the search (False: a suite of one prompt
    left none to hold out, and the verification ran on what the search chose on)."""

    @property
    def standing(self) -> Standing:
        """What core.bench.winner reads of the finalist's verification runs."""
        return comparison_standing(self.winner)

    @property
    def winner_vs_none(self) -> RatioSummary | None:
        return self.winner.speedup

    @property
    def lossless(self) -> bool:
        """Its output was compared with no drafting's and did not change
        (``Standing.shown_unchanged``)."""
        return self.standing.shown_unchanged

    @property
    def check(self) -> LosslessCheck:
        """The winner's output check: what diverged where, or why it could not be checked."""
        return self.winner.lossless

    @property
    def not_drafting(self) -> str:
        """Why the winner drafted nothing on these prompts ("" when it drafted, or when the
        server reports no counts)."""
        return self.winner.not_drafting

    @property
    def where(self) -> str:
        """On what the verdict rests, as the decision and the report say it."""
        return ("on held-out prompts" if self.held_out else
                "on the prompts the search chose on (no prompt was left to hold out: a suite "
                "of one prompt)")


def verify_repeats(search: GridResult, arms: int, prompts: int, seconds_left: float,
                   least: int, most: int = VERIFY_MAX_REPEATS, expected: float | None = None,
                   noise_share: float = 0.0) -> int:
    """How many times the verification runs its held-out prompts: as many as the time the
    search left holds, at the pace of the search's measured runs (each from its start to the
    next run's), at least ``least``; with a speed-up ``expected`` (predicted, or measured by
    the search), no more than it needs at ``noise_share`` for its interval to clear 1.0
    (core.tune.replay.search.repeats_needed). Fixed before the verification starts, so it
    never stops on a lucky interval (stopping when the interval first clears 1.0 would make
    the 95% an overstatement)."""
    per_repeat = repeat_seconds(search, arms, prompts)
    if per_repeat is None:
        fits = least
    else:
        fits = int(0.8 * seconds_left // per_repeat) if per_repeat > 0 else most
        fits = max(least, min(most, fits))
    if expected is None:
        return fits
    from specdeck.core.tune.replay.search import repeats_needed

    return min(fits, repeats_needed(expected, noise_share, prompts, least, most))


def repeat_seconds(search: GridResult, arms: int, prompts: int) -> float | None:
    """What one repeat of ``prompts`` held-out prompts on ``arms`` settings costs at the pace
    of the search's measured runs (each from its start to the next run's); None when the
    search measured none."""
    seconds = []
    for run in search.runs:
        starts = [r.started_at for r in run.records] + [run.finished_at]
        seconds += [b - a for record, a, b in zip(run.records, starts, starts[1:])
                    if not record.slot.warmup]
    if not seconds or arms < 1 or prompts < 1:
        return None
    return statistics.fmean(seconds) * arms * prompts


def over_budget(search: GridResult, arms: int, prompts: int, repeats: int,
                seconds_left: float) -> str | None:
    """A warning when even the verification's fewest repeats will not fit the time the
    search left (a busy machine slows every run): how far past the budget it will end."""
    per_repeat = repeat_seconds(search, arms, prompts)
    if per_repeat is None:
        return None
    needed = per_repeat * repeats
    if needed <= max(seconds_left, 0.0) * 1.1:
        return None
    return (f"The verification needs about {needed / 60:.1f} min ({repeats} repeats of "
            f"{prompts} held-out prompts on {arms} settings, at the search's pace) where "
            f"{max(seconds_left, 0.0) / 60:.1f} min of the budget are left: the tune ends about "
            f"{(needed - max(seconds_left, 0.0)) / 60:.1f} min past its budget (fewer repeats "
            "give no verdict).")


def disturbed_verification(search_noise: float, run: BenchRun) -> str | None:
    """A note when runs of the verification strayed far from the other repeats of the same
    setting and prompt (``core.bench.noise.disturbed_runs``, against the search's noise): another
    program took the cores during it. None when none did (or with one repeat, too few runs
    to tell)."""
    found = disturbed_runs(run, search_noise)
    if found is None:
        return None
    return found.note("the verification's", search_noise,
                      "Run the tune again on a quiet machine for a firmer verdict.")


def verify(setup, best: GridRow, plan: BenchPlan, engine, emit, cancel,
           server: TunedServer | None = None) -> Verification:
    """The winner against no drafting and against the current setting, on ``plan``'s
    (held-out) prompts, paired and interleaved."""
    if server is None:
        from specdeck.core.tune.llama_server import LLAMA_SERVER as server
    arms = [server.reference_arm(setup)]
    current = server.current_arm(setup, CURRENT)
    if best.cell.arm.name == CURRENT:  # the search's pick is the current setting itself
        current = None
    if current is not None:
        arms.append(current)
    arms.append(replace(best.cell.arm, name=WINNER))
    run = run_plan(replace(plan, arms=tuple(arms)), engine, emit, cancel)
    summary = summarize(run)
    win = summary.comparison(WINNER)
    current = summary.comparison(CURRENT) if current is not None else None
    return Verification(run, summary, win,
                        paired_speedup(run, CURRENT, WINNER) if current else None,
                        current.speedup if current else None)


def _not_lossless(label: str, check: LosslessCheck, held_out: bool = True) -> str:
    """Why a winner whose output was not shown unchanged is not written: what changed where,
    or why it could not be checked."""
    if not check.checkable or not check.compared:
        return (f"{label}'s output could not be checked against no drafting "
                f"({check.verdict}), and a setting is written only with its output shown "
                "unchanged: nothing was written.")
    first = next(d for d in check.divergences if not d.tie)
    runs = "held-out runs" if held_out else "runs (on the prompts the search chose on)"
    return (f"{label} changed the output: {check.diverged} of {check.compared} {runs} "
            f"differ from no drafting (first at {first.unit} {first.position} of prompt "
            f"{first.prompt_id}). A setting that changes the output is never written: nothing "
            "was written.")


def decide(candidate: Candidate, best: GridRow, verification: Verification | None, setup,
           cancelled: bool, drafting: tuple[str, ...] | None = None) -> Decided:
    """Apply only a winner verified clearly faster than no drafting (core.bench.winner's
    ``clearly_faster``: its whole 95% interval above 1.0), clearly faster than the current
    setting where there is one, and with the output unchanged.
    ``drafting``: what would be written (default: a launched llama-server's drafting flags)."""
    if drafting is None:
        from specdeck.core.servers.llama_server import drafting_flags

        drafting = drafting_flags(best.cell.arm.server.launch.args)
    if cancelled or verification is None:
        return Decided(candidate, drafting, False, "Cancelled during the verification: nothing "
                       "was written.")
    none = verification.winner_vs_none
    win = verification.standing  # judged as every winner is (core.bench.winner)
    if not win.shown_unchanged:
        return Decided(candidate, drafting, False, _not_lossless(
            best.cell.label, verification.check, verification.held_out))
    where = verification.where
    if win.not_drafting:  # not a drafting result: which of the two, in the words for it
        unknown = verification.winner.drafting_unknown
        if verification.not_drafting:
            return Decided(candidate, drafting, False, f"{best.cell.label} drafted nothing "
                           f"{where} ({verification.not_drafting}): a speed-up without "
                           "drafts is noise, so nothing was written.")
        return Decided(candidate, drafting, False, f"SpecDeck cannot tell whether "
                       f"{best.cell.label} drafted {where} ({unknown}): "
                       "its speed-up may be noise, so nothing was written.")
    if none is None or not none.has_interval:
        return Decided(candidate, drafting, False, f"Too few verification runs of "
                       f"{best.cell.label} to tell: nothing was written. Give a larger budget.")
    if win.not_a_result is not None:
        return Decided(candidate, drafting, False, f"{best.cell.label} {where}: "
                       f"{win.not_a_result}: nothing was written.")
    mine = verification.current_vs_none
    keep = (f" Your current setting measured {mine.median:.2f}x over no drafting "
            f"({mine.interval_text()}): keep it." if clearly_faster(mine) else "")
    yours = best.cell.arm.name == CURRENT or (
        bool(setup.drafting) and tuple(setup.drafting) == tuple(drafting))
    if not clearly_faster(none):
        what = "Your current setting, the search's pick," if yours else best.cell.label
        return Decided(candidate, drafting, False, f"{what} was not clearly faster than no "
                       f"drafting {where} ({none.median:.2f}x, "
                       f"{none.interval_text()}): nothing was written.{keep}")
    against = verification.winner_vs_current
    if yours:
        keep_it = ("Keep it as migrated: the migration is what is written." if getattr(
            setup, "migration", ()) else "Keep it: nothing to change.")
        return Decided(candidate, drafting, False, f"Your current setting is the best the "
                       f"search found: {none.median:.2f}x over no drafting "
                       f"({none.interval_text()}) {where}. {keep_it}")
    if against is not None and not clearly_faster(against):
        return Decided(candidate, drafting, False, f"{best.cell.label} was not clearly faster "
                       f"than your current setting ({against.median:.2f}x, "
                       f"{against.interval_text()}): nothing was written.{keep}")
    return Decided(candidate, drafting, True, f"{best.cell.label}: {none.median:.2f}x over no "
                   f"drafting ({none.interval_text()}) {where}, output unchanged.")
