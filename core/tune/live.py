"""A tune in progress, as the Tune page shows it: the events of ``core.tune.run.tune`` reduced
into candidates, the search's round and best so far, plot points, and the result's words.

The page renders this state and computes nothing itself, so every figure on it comes from the
same places as the CLI's: predictions from ``core.tune.predict``, running speed-ups from
``core.bench.live.LivePlan`` (the A/B page's reducer), the best from ``core.bench.winner``,
intervals from ``core.bench.stats``, the verdict from ``core.tune.verify.decide``.

The download events (Downloading, Downloaded) update their candidate's download column.
Events this module does not know (a newer ``run.py`` may emit more) are kept as a line of
text rather than dropped: anything with a ``text`` is shown as the stage.
"""

from __future__ import annotations

import math
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specdeck.core.bench.grid import RoundStarted
from specdeck.core.bench.live import ArmSoFar, LivePlan, Point, RunRow
from specdeck.core.bench.runner import PlanStarted, RunFinished, RunStarted, RunStep, Stage
from specdeck.core.bench.winner import (
    Standing,
    figure_of,
    passed_over,
    passed_over_text,
    pick,
    standing,
)
from specdeck.core.tune.candidates import Candidate
from specdeck.core.tune.downloads import Downloaded, Downloading
from specdeck.core.tune.predict import Prediction
from specdeck.core.tune.request import TABBYAPI
from specdeck.core.tune.run import (
    CURRENT,
    REFERENCE,
    WINNER,
    CandidatesFound,
    Decided,
    Forecasted,
    Phase,
    current_label,
)
from specdeck.core.tune.setup import Setup
from specdeck.core.units import format_bytes

NO_DRAFTING, TRIED, YOURS = "no drafting", "setting tried", "your current setting"
SERIES = (NO_DRAFTING, TRIED, YOURS)
"""The live plot's lines: every plan's reference, the setting being measured (a search cell,
then the search's pick in the verification), the user's current setting."""
VERIFY_NAMES = {REFERENCE: "no drafting", CURRENT: "your current setting",
                WINNER: "the search's pick"}


@dataclass(frozen=True)
class SetupRead:
    """The setup the tune runs on, read in the worker before ``tune`` starts."""

    setup: Setup


@dataclass
class CandidateRow:
    candidate: Candidate
    prediction: Prediction
    download: str
    """"on disk", "to download 80 MiB", then what the download events said."""
    measured: ArmSoFar | None = None
    """Its best setting's running figures in the search so far."""
    measured_label: str = ""

    @property
    def predicted_text(self) -> str:
        p = self.prediction
        return f"{p.speedup:.2f}x ({p.low:.2f}-{p.high:.2f})"

    @property
    def size_text(self) -> str:
        return "-" if not self.candidate.draft_bytes else format_bytes(self.candidate.draft_bytes)

    @property
    def measured_text(self) -> str:
        m = self.measured
        if m is None or m.median_speedup is None:
            return "-"
        # The row names the candidate: its best setting is said by what its label adds (k=4).
        setting = self.measured_label.removeprefix(self.candidate.label).strip()
        if m.drafted_nothing:  # its figure is noise: short, so a narrow column shows it all
            return f"drafted nothing ({setting})" if setting else "drafted nothing"
        return f"{m.median_speedup:.2f}x ({setting + ', ' if setting else ''}{m.pairs} paired)"


@dataclass
class CellSoFar:
    """One searched setting: its label, the rounds it ran, its figures over all of them (the
    pairs of every round pooled, as the search judges it: core.bench.grid.pooled)."""

    label: str
    candidate: Candidate | None
    """None: the user's current setting, searched beside the candidates."""
    rounds: int = 0
    figures: ArmSoFar | None = None
    earlier: list[RunRow] = field(default_factory=list)
    """Its paired runs from the rounds before its latest plan."""
    latest: list[RunRow] = field(default_factory=list)
    """Its paired runs in its latest plan (a plan run again in the same round replaces them,
    as the search replaces a disturbed run)."""
    dropped: bool = False
    """A round began without it: like the search's dropped rows, it cannot be the best."""

    def standing(self) -> Standing:
        """What core.bench.winner reads of it so far: its pooled figures, as the A/B's
        running figures give them (core.bench.live.ArmSoFar.standing)."""
        if self.figures is None:
            return standing(None, diverged=0, unchecked="", sampled=False,
                            complete=not self.dropped,
                            not_drafting="", drafting_unknown="")
        return self.figures.standing(complete=not self.dropped)

    def reach(self) -> float:
        """How far it went in the search so far (as core.tune.run's ``_reach``): all the way
        while still in it, else the rounds it ran."""
        return self.rounds if self.dropped else math.inf


@dataclass
class TuneLive:
    """Feed every event to :meth:`apply`; read the fields to show them."""

    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)
    setup: Setup | None = None
    phase: str = ""
    """The current phase's name ("candidates", "search", "verify"), "" before the first."""
    phase_text: str = ""
    stage: str = ""
    """The latest stage line (a server starting, a download, ...)."""
    candidates: list[CandidateRow] = field(default_factory=list)
    not_tried: tuple = ()
    cells: dict[str, CellSoFar] = field(default_factory=dict)
    """Search cells by arm name (core.tune.llama_server.candidate_cells)."""
    round: int = 0
    in_round: int = 0
    """Settings started in the current round."""
    together: bool = False
    """The current round runs its settings in one plan, side by side."""
    _started: set = field(default_factory=set)
    """Arm names started in the current round."""
    current: str = ""
    """What runs now: a setting's label, or the verification's arms."""
    plan: LivePlan | None = None
    plans: int = 0
    decision: Decided | None = None
    acceptance_reported: bool = False
    """A drafting run's server reported its acceptance (llama-server's counters)."""
    acceptance_unreported: bool = False
    forecast: Any = None
    """core.tune.replay.phase.Forecast once every setting is predicted (None: not yet, or
    not replayed)."""
    finalists: tuple[str, ...] = ()
    _offset: float = 0.0
    _points: list[Point] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def elapsed(self) -> float:
        return self.clock() - self.started

    # events --------------------------------------------------------------------------------
    def apply(self, event: Any) -> None:
        if isinstance(event, SetupRead):
            self.setup = event.setup
        elif isinstance(event, Phase):
            self.phase, self.phase_text, self.current, self.stage = event.name, event.text, "", ""
        elif isinstance(event, CandidatesFound):
            self._candidates(event)
        elif isinstance(event, Forecasted):
            self._forecasted(event)
        elif isinstance(event, Decided):
            self.decision = event
        elif isinstance(event, RoundStarted):
            self.round, self.in_round, self._started = event.number, 0, set()
            for name, cell in self.cells.items():
                cell.dropped = cell.dropped or (cell.rounds > 0 and name not in event.arms)
        elif isinstance(event, PlanStarted):
            self._plan_started(event)
        elif isinstance(event, Stage):
            self.stage = event.text
        elif isinstance(event, (Downloading, Downloaded)):
            self._download(event)
        elif isinstance(event, (RunStarted, RunStep, RunFinished)):
            self._run_event(event)
        elif isinstance(getattr(event, "text", None), str):
            self.stage = event.text

    def _candidates(self, event: CandidatesFound) -> None:
        from specdeck.core.tune.run import tuned_server

        self.candidates = [CandidateRow(c, p, _download_text(c)) for c, p in event.candidates]
        self.not_tried = event.not_tried
        if self.setup is not None:
            server = tuned_server(self.setup)  # llama-server's or TabbyAPI's settings
            for c, _ in event.candidates:
                for cell in server.cells(self.setup, c):
                    self.cells[cell.arm.name] = CellSoFar(cell.label, c)
            current = server.current_arm(self.setup, CURRENT)
            if current is not None:  # searched too (core.tune.run.search_and_decide)
                self.cells[CURRENT] = CellSoFar(current_label(current), None)

    def _forecasted(self, event: Forecasted) -> None:
        """The replay's predictions replace the candidates' and its finalists the cells:
        what the search will run now."""
        self.forecast, self.finalists = event.forecast, event.finalists
        predictions = {c.label: p for c, p in event.predictions}
        for row in self.candidates:
            row.prediction = predictions.get(row.candidate.label, row.prediction)
        self.candidates.sort(key=lambda r: r.prediction.speedup, reverse=True)
        current = self.cells.get(CURRENT)
        self.cells = {name: CellSoFar(label, candidate)
                      for name, label, candidate in event.cells if name != CURRENT}
        if current is not None:
            self.cells[CURRENT] = current

    def forecast_rows(self, count: int = 12) -> list[tuple[str, ...]]:
        """The best predicted settings, as the page's table shows them: the setting, its
        predicted speed-up (the median over prompts, as the search measures it, with its
        interval), the geometric mean over prompts (what ranks them), accepted by position,
        mean accepted length, and a full step's cost in plain steps (why a longer draft is or
        is not worth it here)."""
        forecast = self.forecast
        if forecast is None:
            return []
        rows = []
        for item in forecast.settings[:count]:
            p = item.predicted
            positions = " ".join(f"{a:.0%}" for a in p.per_pos_acceptance[:6]) + (
                " …" if len(p.per_pos_acceptance) > 6 else "")
            rows.append((item.short_label, f"{p.speedup:.2f}x ({p.low:.2f}-{p.high:.2f})",
                         f"{p.mean:.3f}x", positions or "-", f"{p.mean_accepted_length:.2f}",
                         f"{forecast.costs.step(item.k):.1f}"))
        return rows

    def _plan_started(self, event: PlanStarted) -> None:
        self.plan = LivePlan(event.plan, clock=self.clock)
        self._offset = self.plan.started - self.started
        self.plan.apply(event)
        self.plans += 1
        names = [a.name for a in event.plan.arms]
        cells = [self.cells[n] for n in names[1:] if n in self.cells] \
            if self.phase == "search" else []
        if cells:  # one setting beside the reference, or a round's settings side by side
            self.round = max(self.round, 1)
            for cell in cells:  # a plan run again in the same round counts once
                if cell.rounds < self.round:  # a new round: the last one's pairs are kept
                    cell.earlier += cell.latest
                cell.latest = []
                cell.rounds = self.round
            self._started.update(names[1:])
            self.in_round = len(self._started)
            self.together = len(cells) > 1
            self.current = cells[0].label if len(cells) == 1 else \
                f"the {len(cells)} settings left, side by side"
        else:
            *others, last = [VERIFY_NAMES.get(n, n) for n in names]
            self.current = f"{last} against " + " and ".join(reversed(others))

    def _run_event(self, event: Any) -> None:
        plan = self.plan
        if plan is None:
            return
        plan.apply(event)
        self._points += [Point(p.series, self._series(p.arm), p.t + self._offset, p.value)
                         for p in plan.take_points()]
        if not isinstance(event, RunFinished):
            return
        self.acceptance_reported |= bool(plan.acceptance_reported)
        self.acceptance_unreported |= bool(plan.acceptance_unreported)
        if self.phase != "search":
            return
        for name in plan.arms[1:]:
            cell = self.cells.get(name)
            if cell is not None:
                cell.latest = plan.paired_rows(name)
                cell.figures = plan.arm_so_far(name, earlier=cell.earlier)
                self._measured(cell)

    def _measured(self, changed: CellSoFar) -> None:
        row = next((r for r in self.candidates if r.candidate == changed.candidate), None)
        if row is None:
            return
        # the candidate's figure by the rule core.tune.run._tried gives the report: "drafted
        # nothing" only when no setting of the candidate drafted
        found = figure_of((c for c in self.cells.values() if c.candidate == changed.candidate),
                          CellSoFar.standing, CellSoFar.reach)
        if found is not None:
            top, _ = found
            row.measured, row.measured_label = top.figures, top.label

    def _series(self, arm: str) -> str:
        if arm == REFERENCE:
            return NO_DRAFTING
        return YOURS if arm == CURRENT else TRIED

    def _download(self, event: Any) -> None:
        row = _row_for(self.candidates, event)
        text = download_text(event)
        if row is not None:
            row.download = text
        self.stage = text if row is None else f"{row.candidate.label}: {text}"

    # figures -------------------------------------------------------------------------------
    def take_points(self) -> list[Point]:
        """Plot points since the last call, ``t`` in seconds since the tune started and
        ``arm`` one of :data:`SERIES`."""
        points, self._points = self._points, []
        return points

    @property
    def acceptance_unknown(self) -> bool:
        """Drafting runs finished and no server reported acceptance (the plot says so)."""
        return self.acceptance_unreported and not self.acceptance_reported

    @property
    def best(self) -> CellSoFar | None:
        """The best setting so far (core.bench.winner over each setting's pooled rounds)."""
        return pick(self.cells.values(), CellSoFar.standing)

    def round_text(self) -> str:
        if self.phase != "search" or not self.round:
            return ""
        where = self.current if self.together else \
            f"setting {self.in_round} of this round, {self.current}"
        return (f"Round {self.round}: {where}"
                + (f" ({self.plan.done}/{self.plan.total} runs)" if self.plan else ""))

    def best_text(self, final: bool = False, cancelled: bool = False) -> str:
        """The search's leader in words; ``final`` once the tune is over (no "so far"), and
        ``cancelled`` where it was cut short (nothing said as settled)."""
        best = self.best
        if best is None:
            measured = any(c.figures is not None and c.figures.pairs
                           for c in self.cells.values())
            if final and cancelled:
                return ("Before the cancel, no setting had beaten decoding without a draft"
                        if measured else "Cancelled before anything was measured")
            passed = passed_over_text(  # as the search's table says it (GridResult)
                passed_over([c for c in self.cells.values() if not c.dropped],
                            CellSoFar.standing, None),
                CellSoFar.standing, lambda cell: cell.label)
            could = " that could win" if passed else ""
            passed = f". {passed}" if passed else ""
            if final:
                return (f"In the search, no setting{could} beat decoding without a "
                        f"draft{passed}" if measured else "The search measured nothing")
            return (f"Best so far: no setting{could} beats decoding without a draft "
                    f"yet{passed}" if measured else "Best so far: nothing measured yet")
        f = best.figures
        lead = ("Best before the cancel" if cancelled else "Best in the search") if final \
            else "Best so far"
        return (f"{lead}: {best.label}: {f.median_speedup:.2f}x over no drafting "
                f"(median of {f.pairs} paired run{'s' if f.pairs != 1 else ''} over "
                f"{best.rounds} round{'s' if best.rounds != 1 else ''})")


def _download_text(candidate: Candidate) -> str:
    if candidate.download_bytes:
        return f"to download {format_bytes(candidate.download_bytes)}"
    return "on disk"


def _row_for(rows: list[CandidateRow], event: Any) -> CandidateRow | None:
    """The candidate a download event is about (its ``candidate`` is the label)."""
    return next((row for row in rows if row.candidate.label == event.candidate), None)


def download_text(event: Any) -> str:
    """A download event (core.tune.run's Downloading / Downloaded) in words: "downloading
    12.0 MiB of 80.0 MiB", "✔ downloaded", or its outcome and why."""
    if isinstance(event, Downloading):
        return f"downloading {format_bytes(event.done)} of {format_bytes(event.total)}"
    if isinstance(event, Downloaded):
        if event.ok:
            return f"✔ {event.status}"
        return f"{event.status}: {event.why}" if event.why else event.status
    return type(event).__name__.lower()


# The result in words ---------------------------------------------------------------------
def result_lines(result) -> list[tuple[str, str]]:
    """The Tune page's result: (what, text) pairs, every figure from the result."""
    decision = result.decision
    lines: list[tuple[str, str]] = []
    verification = result.verification
    if verification is not None:
        none = verification.winner_vs_none
        lines.append(("Verified speed-up", "-" if none is None else
                      f"{none.median:.2f}x over no drafting ({none.interval_text()}), "
                      f"{verification.where}"))
        if verification.winner_vs_current is not None:
            r = verification.winner_vs_current
            lines.append(("Against your setting", f"{r.median:.2f}x ({r.interval_text()})"))
        lines.append(("Output unchanged", "yes" if verification.lossless else "no"))
    elif result.cancelled:
        lines.append(("Verified speed-up", "not verified: cancelled"))
    else:
        lines.append(("Verified speed-up", "not verified"))
    if decision.flags:
        what = ("Best setting (config.yml)" if result.setup.kind == TABBYAPI
                else "Best setting's flags")
        lines.append((what, shlex.join(decision.flags)))
    lines.append(("Decision", decision.why))
    forecast = getattr(result, "forecast", None)
    if forecast is not None:
        lines.append(("Predicted", f"{len(forecast.settings)} settings from one plain run of "
                      f"{forecast.requests} prompts; the search measured the best "
                      "predicted (the report's table says why each)"))
    from specdeck.core.tune.report import servers_text

    started = servers_text(result)
    if started:
        what, _, count = started.partition(": ")
        lines.append((what, count))
    applied = result.applied
    if applied is not None:
        lines.append(("Written", applied_text(applied)))
    return lines


def apply_texts(setup, path) -> tuple[str, str]:
    """Apply's question beside the diff, and what the page says while it writes ``path`` and
    checks it: what runs from the written file depends on the server."""
    if setup.kind != TABBYAPI:
        run, doing, check = ("llama-server is started from the file as written",
                             "starting llama-server from it", "answer and draft")
    elif setup.managed:
        run, doing, check = ("TabbyAPI is started from the file as written",
                             "starting TabbyAPI from it", "answer")
    else:
        run, doing, check = ("the running TabbyAPI loads the saved draft through its admin API",
                             "loading the saved draft into TabbyAPI", "answer")
    return (f"Write the verified winner into {path}? A backup is kept; then {run}, and if it "
            f"does not {check}, the file is put back.", f"Writing {path} and {doing}…")


def applied_text(applied) -> str:
    """What applying did (core.tune.apply.Applied), in one line."""
    if applied.rolled_back:
        return applied.why or f"Rolled back: {applied.relaunch}"
    if applied.written:
        backup = f" (previous version: {applied.backup})" if applied.backup else ""
        return f"yes, to {applied.path}{backup}. {applied.relaunch}"
    return f"no: {applied.why}" if applied.why else "no"
