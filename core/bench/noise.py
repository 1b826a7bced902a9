"""This machine's noise, measured: how far the reference's own speed strays between runs of
the same prompt (``noise``), how far a score of n pairs may stray by noise alone
(``noise_band``), and the runs another program disturbed (``disturbed``, ``disturbed_runs``:
the one rule the A/B, the grid and the tune name a busy machine by).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specdeck.core.bench.runner import BenchRun

if TYPE_CHECKING:
    from specdeck.core.bench.grid import Cell


DISTURBED = 0.3
"""A reference run this far (as a share) from that prompt's median over the round, or four
noise widths where the machine's noise is larger, was disturbed: the reference is the same
server on the same prompt beside every setting, so only the machine can move it that far."""


def disturbed(measured: Sequence[tuple[Cell, BenchRun]], reference: str) -> set[str]:
    """The arm names of the cells whose paired reference runs were disturbed (``DISTURBED``),
    judged against each prompt's median over every cell's reference runs (three at least)."""
    rates: dict[str, list[float]] = {}
    for _cell, run in measured:
        for record in run.counted(reference):
            if record.result.stats.decode_s > 0:
                rates.setdefault(record.prompt_id, []).append(
                    record.result.stats.tokens_per_second)
    medians = {pid: statistics.median(v) for pid, v in rates.items() if len(v) >= 3}
    limit = max(DISTURBED, 4 * noise([run for _c, run in measured], reference))
    out = set()
    for cell, run in measured:
        for record in run.counted(reference):
            middle = medians.get(record.prompt_id)
            if middle and record.result.stats.decode_s > 0 and \
                    abs(record.result.stats.tokens_per_second / middle - 1) > limit:
                out.add(cell.arm.name)
    return out


@dataclass(frozen=True)
class Disturbance:
    """Runs of one plan that strayed far from the other repeats of their setting and prompt
    (``disturbed_runs``): another program took the cores while they ran."""

    strayed: dict[str, int]
    """Arm name -> its runs that strayed (arms with none are left out)."""
    repeated: int
    """Runs that had other repeats of their setting and prompt to be judged against."""
    limit: float
    """How far (as a share of the speed) a run strayed to count."""

    @property
    def count(self) -> int:
        return sum(self.strayed.values())

    def note(self, what: str, noise_share: float | None = None, advice: str = "") -> str:
        """What a report says: ``what`` names the runs ("the verification's", "this
        A/B's"), ``noise_share`` the quieter noise they are set against."""
        against = "" if noise_share is None else f" (the search's noise was {noise_share:.1%})"
        return (f"{self.count} of {what} {self.repeated} repeated runs ran more than "
                f"{self.limit:.0%} away from the other repeats of their setting and prompt"
                f"{against}: another program probably took the cores during "
                "it, so its intervals are wider than this machine gives when quiet."
                + (f" {advice}" if advice else ""))


def disturbed_runs(run: BenchRun, noise_share: float) -> Disturbance | None:
    """The runs of ``run`` that another program disturbed: each (setting, prompt) repeated at
    least twice, a run more than ``DISTURBED`` (or four widths of ``noise_share``, on a
    noisier machine) from its repeats' median. The one rule the A/B (page and CLI) and the
    tuner name a busy machine by; None when no run strayed, or no run was repeated."""
    limit = max(DISTURBED, 4 * noise_share)
    rates: dict[tuple[str, str], list[float]] = {}
    for arm in run.plan.arms:
        for done in run.counted(arm.name):
            if done.result.stats.decode_s > 0:
                rates.setdefault((arm.name, done.prompt_id), []).append(
                    done.result.stats.tokens_per_second)
    repeated = sum(len(v) for v in rates.values() if len(v) >= 2)
    strayed: dict[str, int] = {}
    for (arm, _prompt), values in rates.items():
        if len(values) < 2:
            continue
        middle = statistics.median(values)
        far = sum(abs(r / middle - 1) > limit for r in values)
        if far:
            strayed[arm] = strayed.get(arm, 0) + far
    return Disturbance(strayed, repeated, limit) if strayed else None


def noise(runs: Sequence[BenchRun], reference: str) -> float:
    """The run-to-run noise of this machine, as a share of the speed: how far the reference
    arm's own tok/s strays between runs of the same prompt (the median absolute deviation of
    its runs over their median, per prompt, then the median of those). The reference runs
    beside every setting, so this is measured, not assumed; 0 with too few runs to tell."""
    by_prompt: dict[str, list[float]] = {}
    for run in runs:
        for record in run.counted(reference):
            if record.result.stats.decode_s > 0:
                by_prompt.setdefault(record.prompt_id, []).append(
                    record.result.stats.tokens_per_second)
    spreads = []
    for rates in by_prompt.values():
        if len(rates) >= 2:
            middle = statistics.median(rates)
            spreads.append(statistics.median(abs(r - middle) for r in rates) / middle)
    return statistics.median(spreads) if spreads else 0.0


NOISE_MARGIN = 2.0
"""Two settings whose scores differ by less than this many noise widths (of a score with
that many pairs: ``noise_band``) cannot be told apart: one lucky or unlucky run must not
decide between them."""


def noise_band(noise_share: float, pairs: int) -> float:
    """How far (as a share) a score of ``pairs`` paired ratios may stray by noise alone:
    ``NOISE_MARGIN`` widths of a ratio of two runs (each ``noise_share`` off, so the ratio
    about sqrt(2) times that), narrowing with the square root of the pairs behind it."""
    return NOISE_MARGIN * noise_share * math.sqrt(2 / max(1, pairs))
