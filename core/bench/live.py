"""The live state of an A/B plan, reduced from the runner's events.

While a plan runs, the A/B page and the CLI's progress show the same figures: the run in
progress (tok/s so far, acceptance so far), every finished run as a row (its tok/s, its ratio
to the reference's run of the same prompt and repeat, whether its output matches), and per
drafting arm the running paired median. They are computed here, once, from the events
``core.bench.runner`` emits (:class:`PlanStarted`, :class:`RunStarted`, :class:`RunStep`,
:class:`RunFinished`); callers only render them.

The running figures follow the finished summary's rules (``core.bench.summary``): a ratio
pairs a drafting run with the reference's run of the same prompt and repeat, the headline is
the median of those ratios, acceptance is pooled (accepted / drafted over the runs, not a
mean of rates), outputs are compared token by token (characters for server runs). The
bootstrap interval, the theory and the likely causes need the whole plan: they come from
``summarize`` once the plan ends.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from specdeck.core.bench import stats, winner
from specdeck.core.bench.lossless import compare_pair
from specdeck.core.bench.plan import BenchPlan
from specdeck.core.bench.runner import (
    PlanStarted,
    RunFinished,
    RunRecord,
    RunSlot,
    RunStarted,
    RunStep,
)
from specdeck.core.bench.summary import (
    DRAFTED_NOTHING,
    DRAFTING_UNKNOWN,
    drafting_seen,
    drafts_counted,
)
from specdeck.core.engines import SERVER_ENGINE
from specdeck.core.engines.base import acceptance_rate
from specdeck.core.engines.lossless import OutputMatch

RATE_WINDOW_S = 0.25
"""A live tok/s point covers at least this much decode time, so the curve is readable."""


NOT_COMPARED = "not compared: lost data"
"""What a pair's output check says when a run of the pair lost data."""


@dataclass(frozen=True)
class OutputCheck:
    """A drafting run's output against the reference's run of the same prompt and repeat."""

    text: str
    """"identical", "ends at token N of M", "tie at token N", "differs at token N",
    "sampled", "not compared: lost data"."""
    verdict: OutputMatch | None
    """None when not checkable (sampled plans) or not compared (a run lost data)."""

    @property
    def differs(self) -> bool:
        """A real difference: a differing token, or one output ending before the other (both
        were asked for the same tokens). Not a float tie."""
        return self.verdict in (OutputMatch.DIVERGED, OutputMatch.PREFIX)


def check_output(reference: RunRecord, other: RunRecord, greedy: bool) -> OutputCheck:
    """The finished summary's losslessness check of one pair (core.bench.lossless's
    ``compare_pair``), in a word for the table."""
    if not greedy:
        return OutputCheck("sampled", None)
    compared = compare_pair(reference, other)
    if isinstance(compared, str):
        return OutputCheck(NOT_COMPARED, None)
    comparison, unit = compared
    shorter = min(comparison.reference_length, comparison.candidate_length)
    longer = max(comparison.reference_length, comparison.candidate_length)
    text = {
        OutputMatch.IDENTICAL: "identical",
        OutputMatch.PREFIX: (f"{'ends' if comparison.candidate_length < longer else 'goes on'} "
                         f"at {unit} {shorter} of {longer}"),
        OutputMatch.TIE: f"tie at {unit} {comparison.first_divergence}",
        OutputMatch.DIVERGED: f"differs at {unit} {comparison.first_divergence}",
    }[comparison.verdict]
    return OutputCheck(text, comparison.verdict)


@dataclass(frozen=True)
class RunRow:
    """One finished, counted run, as the results table shows it."""

    record: RunRecord
    speedup: float | None = None
    """tok/s over the reference's run of the same prompt and repeat (None: the reference
    itself, or its partner has not finished yet)."""
    output: OutputCheck | None = None

    @property
    def key(self) -> tuple[str, int]:
        return self.record.pair_key


@dataclass(frozen=True)
class ArmSoFar:
    """A drafting arm's running figures against the reference."""

    name: str
    label: str
    pairs: int
    """Finished runs paired with the reference's run of the same prompt and repeat."""
    median_speedup: float | None
    min_speedup: float | None
    max_speedup: float | None
    acceptance_rate: float | None
    """Pooled over the arm's paired runs: accepted / drafted (None: nothing drafted)."""
    identical: int
    """Paired runs whose output equals the reference's, as the summary's losslessness check
    counts them (an output that ends early is not identical)."""
    ties: int
    """Paired runs that first differ at a float tie of the target's top two logits."""
    checkable: bool
    """False for sampled plans: outputs differ by design."""
    drafted_nothing: bool = False
    """A paired run counted its drafts (an engine's own count, or a server that reports
    them) and none was drafted: the speed-up so far is noise (core.bench.summary's
    ``drafting_seen``, as the finished summary reads it)."""
    drafting_unknown: bool = False
    """No paired run carried a draft count (a server that reports none, such as a
    llama-server without --metrics): nobody can tell yet whether it drafted
    (``drafting_seen`` too)."""
    diverged: int = 0
    """Paired runs whose output really differs from the reference's (``OutputCheck.differs``,
    as the summary counts divergences: not float ties, not runs left uncompared because they
    lost data)."""
    not_compared: int = 0
    """Paired runs whose output was not compared because a run of the pair lost data (as the
    summary leaves them out)."""

    def standing(self, complete: bool = True) -> winner.Standing:
        """What ``core.bench.winner`` reads of these figures so far (``complete``: measured on
        every prompt the others were)."""
        return winner.standing(
            self.median_speedup, diverged=self.diverged, sampled=not self.checkable,
            unchecked=(f"every paired run so far lost data ({self.not_compared})"
                       if self.pairs and self.not_compared == self.pairs else ""),
            complete=complete,
            not_drafting=(f"it drafted nothing in {self.pairs} paired run"
                          f"{'s' if self.pairs != 1 else ''} so far"
                          if self.drafted_nothing else ""),
            drafting_unknown="no run carried a draft count so far" if self.drafting_unknown
            else "")

    def to_text(self, reference: str) -> str:
        """One line, as the CLI's progress prints it."""
        if self.median_speedup is None:
            if self.pairs:
                return f"{self.name}: no usable speed in {self.pairs} paired runs so far"
            return f"{self.name}: waiting for paired runs"
        accept = "" if self.acceptance_rate is None else f", acceptance {self.acceptance_rate:.0%}"
        if self.drafting_unknown:
            accept = ", did it draft? not reported"
        same = (f", {self.identical}/{self.pairs} identical" if self.checkable else "")
        return (f"{self.name}: {self.median_speedup:.2f}x vs {reference} so far (median of "
                f"{self.pairs} paired, {self.min_speedup:.2f}-{self.max_speedup:.2f}x{accept}{same})")


@dataclass(frozen=True)
class Point:
    """One point for the live plots: ``t`` seconds since the plan started."""

    series: str
    """"speed" (live tok/s), "accept" (live acceptance %), "finished" (a finished run's
    tok/s), "accept_done" (a finished server run's reported acceptance %)."""
    arm: str
    t: float
    value: float


@dataclass
class CurrentRun:
    """The run in progress."""

    slot: RunSlot
    prompt_tokens: int
    new_tokens: int = 0
    elapsed_s: float = 0.0
    drafted: int = 0
    accepted: int = 0
    rate_mark: tuple[float, int] = (0.0, 0)
    """(elapsed_s, new_tokens) where the current tok/s window began."""

    @property
    def tokens_per_second(self) -> float | None:
        return self.new_tokens / self.elapsed_s if self.elapsed_s > 0 else None

    @property
    def acceptance_rate(self) -> float | None:
        return acceptance_rate(self.accepted, self.drafted)


@dataclass
class LivePlan:
    """The plan's live state; feed it every event with :meth:`apply`."""

    plan: BenchPlan
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)
    total: int = 0
    """Runs in the schedule, warm-ups included (0 until the plan has started)."""
    done: int = 0
    loaded: object | None = None
    current: CurrentRun | None = None
    rows: list[RunRow] = field(default_factory=list)
    records: list[RunRecord] = field(default_factory=list)
    """Every finished run, warm-ups and stopped runs included."""
    acceptance_reported: set[str] = field(default_factory=set)
    """Server plans: drafting arms whose servers reported acceptance for a finished run."""
    acceptance_unreported: set[str] = field(default_factory=set)
    runs_from: float | None = None
    """Seconds from ``started`` to the plan's first run (loading the model, starting servers,
    tokenizing before it): the live plots mark that span as loading."""
    _points: list[Point] = field(default_factory=list)
    _row_of: dict[tuple[str, int, str], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.started = self.clock()

    @property
    def arms(self) -> list[str]:
        return [a.name for a in self.plan.arms]

    @property
    def reference(self) -> str:
        return self.plan.baseline.name

    @property
    def serving(self) -> bool:
        return self.plan.engine == SERVER_ENGINE

    @property
    def acceptance_unknown(self) -> bool:
        """Server plans: drafting runs finished, and none of their servers reports acceptance."""
        return not self.acceptance_reported and bool(self.acceptance_unreported)

    def elapsed(self) -> float:
        return self.clock() - self.started

    # events --------------------------------------------------------------------------------
    def apply(self, event) -> list[int]:
        """Take one runner event; returns the indices of the rows it added or changed."""
        if isinstance(event, RunStep):
            self._step(event)
        elif isinstance(event, RunStarted):
            self.current = CurrentRun(event.slot, event.prompt_tokens)
        elif isinstance(event, RunFinished):
            return self._finished(event.record, event.total)
        elif isinstance(event, PlanStarted):
            self.total = len(event.schedule)
            self.loaded = event.loaded
            self.runs_from = self.elapsed()
        return []

    def _step(self, step: RunStep) -> None:
        run = self.current
        if run is None or step.slot != run.slot:
            return
        e = step.event
        run.new_tokens, run.elapsed_s = e.new_tokens, e.elapsed_s
        run.drafted, run.accepted = e.total_drafted, e.total_accepted
        mark_s, mark_n = run.rate_mark
        if e.elapsed_s - mark_s >= RATE_WINDOW_S:
            arm, t = run.slot.arm.name, self.elapsed()
            self._points.append(Point("speed", arm, t, (e.new_tokens - mark_n) / (e.elapsed_s - mark_s)))
            if run.drafted:
                self._points.append(Point("accept", arm, t, 100.0 * run.acceptance_rate))
            run.rate_mark = (e.elapsed_s, e.new_tokens)

    def _finished(self, record: RunRecord, total: int) -> list[int]:
        self.total = total or self.total
        self.records.append(record)
        self.done = record.slot.index + 1
        if self.current is not None and self.current.slot == record.slot:
            self.current = None
        if not record.counted:
            return []
        measured = record.result.stats
        t = self.elapsed()
        if measured.decode_s > 0:  # a run without a usable speed has no point, not a 0
            self._points.append(Point("finished", record.arm, t, measured.tokens_per_second))
        if self.serving and record.arm != self.reference:
            if measured.acceptance_rate is not None:
                self._points.append(Point("accept_done", record.arm, t,
                                          100 * measured.acceptance_rate))
                self.acceptance_reported.add(record.arm)
            elif drafts_counted(record.result.server):
                # Counted, and nothing drafted: reported (no rate to plot), not "not
                # reported" beside the "drafted nothing" the figures say of it.
                self.acceptance_reported.add(record.arm)
            else:
                self.acceptance_unreported.add(record.arm)
        key = record.pair_key
        self._row_of[(*key, record.arm)] = len(self.rows)
        self.rows.append(RunRow(record))
        if record.arm != self.reference:
            return [self._pair(len(self.rows) - 1)]
        # The reference finished after its partners (B A order): their ratios come now.
        changed = [len(self.rows) - 1]
        for arm in self.arms[1:]:
            index = self._row_of.get((*key, arm))
            if index is not None:
                changed.append(self._pair(index))
        return changed

    def _pair(self, index: int) -> int:
        row = self.rows[index]
        reference = self.reference_of(row.key)
        if reference is not None:
            ratio = stats.speedup(reference.result.stats.tokens_per_second,
                                  row.record.result.stats.tokens_per_second)
            self.rows[index] = RunRow(row.record, ratio,
                                      check_output(reference, row.record, self.plan.sampling.greedy))
        return index

    def reference_of(self, key: tuple[str, int]) -> RunRecord | None:
        index = self._row_of.get((*key, self.reference))
        return None if index is None else self.rows[index].record

    # figures -------------------------------------------------------------------------------
    def take_points(self) -> list[Point]:
        """The plot points added since the last call."""
        points, self._points = self._points, []
        return points

    def paired_rows(self, name: str) -> list[RunRow]:
        """``name``'s finished runs that have their reference partner."""
        return [r for r in self.rows if r.record.arm == name and r.output is not None]

    def arm_so_far(self, name: str, earlier: Sequence[RunRow] = ()) -> ArmSoFar:
        """``name``'s figures so far; ``earlier``: its paired rows from plans before this one
        (a search's earlier rounds), pooled with this plan's as the search pools them."""
        paired = [*earlier, *self.paired_rows(name)]
        ratios = [r.speedup for r in paired if r.speedup is not None]
        drafted = sum(r.record.result.stats.drafted for r in paired)
        accepted = sum(r.record.result.stats.accepted for r in paired)
        seen = drafting_seen(self.plan.arm(name), [r.record for r in paired])
        return ArmSoFar(
            name=name,
            label=self.plan.arm(name).label,
            pairs=len(paired),
            median_speedup=statistics.median(ratios) if ratios else None,
            min_speedup=min(ratios, default=None),
            max_speedup=max(ratios, default=None),
            acceptance_rate=acceptance_rate(accepted, drafted),
            identical=sum(1 for r in paired if r.output.verdict is OutputMatch.IDENTICAL),
            ties=sum(1 for r in paired if r.output.verdict is OutputMatch.TIE),
            checkable=self.plan.sampling.greedy,
            drafted_nothing=seen == DRAFTED_NOTHING,
            drafting_unknown=seen == DRAFTING_UNKNOWN,
            diverged=sum(1 for r in paired if r.output.differs),
            not_compared=sum(1 for r in paired if r.output.text == NOT_COMPARED),
        )

    def figures(self) -> list[ArmSoFar]:
        """Every drafting arm's running figures, in plan order."""
        return [self.arm_so_far(name) for name in self.arms[1:]]
