"""Grid sweeps: many settings against one reference, as the tables users make by hand.

A grid is a reference arm (no drafting) and a list of cells, each one setting to try (on a
server: a llama-server launch with its flags). Each cell runs its own A/B plan, the reference
and the cell interleaved, so every speed-up is paired with reference runs taken beside it
(slow drift and thermals hit both alike); a server engine keeps the servers that fit up
between plans (``max_servers``). The reference's tok/s over all plans gives the table's
baseline row.

The table follows the hand-made ones (the llama-swap tuning table): settings down, prompt
suites across, a baseline row, each cell "tok/s (speed-up)", the best of each column marked.
A speed-up per suite is the median of that suite's paired ratios; "all" pools every prompt.

``halving`` cuts the time of a large grid (successive halving): every cell runs once on the
first prompt (on one prompt of each suite where the plan has the prompt-runs for it); half
the cells go on to the next round, which runs twice as many prompt-runs (more prompts, taken
from each suite in turn, then the plan's repeats), until one is left. A cell's figures pool
its pairs over every round it ran (the cells still in the search ran the same rounds).
The half that goes on is the better half by median speed-up, except near the cut: settings
whose scores lie within the noise of the cut (the spread this machine's runs measured,
narrower the more pairs a score has) cannot be told apart there, and the cheaper of them go
on (no draft model before one, then fewer tokens per step), not the luckier. So the search
costs a fixed share of the grid, however alike the settings are. Cells dropped early keep the
figures they had, marked with the round that dropped them. A single setting left goes
straight to the last round.

From the second round, when the engine keeps every setting's server up at once, the settings
left run in one plan beside one reference, interleaved per prompt, sharing its runs. A round
run plan by plan is also a check on the machine: a setting whose reference ran far from that
prompt's median over the round (another program took the cores) is run again, once, so that a
disturbed pair does not decide a cut. (A shared reference run moves every setting alike.)

With a ``deadline`` the rounds are sized to it: after each round, what every setting's runs
cost so far (its server's start, its warm-ups, its measured runs) projects the rounds left;
when they would not end by the deadline, the search runs the prompts fewer times (down to
once), then keeps fewer settings (the best by score), then runs the last round on fewer
prompts, and says so in a note.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from specdeck.core.bench import winner
from specdeck.core.bench.budget import RoundCosts, fit_rounds, sized_note
from specdeck.core.bench.halving import (
    SLOWER_NOISE_MULTIPLE,
    clearly_slower,
    dropped_why,
    interleaved_ids,
    plan_rounds,
    survivors,
)
from specdeck.core.bench.noise import disturbed, noise
from specdeck.core.bench.plan import Arm, BenchPlan
from specdeck.core.bench.runner import (
    BenchRun,
    EventSink,
    choose_prompts,
    run_plan,
    serves_arms,
)
from specdeck.core.bench.stats import RatioSummary
from specdeck.core.bench.summary import BenchSummary, summarize
from specdeck.core.errors import CancelledError, InvalidInputError, SpecDeckError

ALL = "all"


@dataclass(frozen=True)
class Cell:
    """One setting of the grid: its arm, and what it sets, for the table's first column."""

    arm: Arm
    label: str
    settings: tuple[tuple[str, str], ...] = ()
    """(what, value) pairs that differ from the family's flags, e.g. ("k", "8")."""


@dataclass(frozen=True)
class RoundStarted:
    """Successive halving: round ``number`` of ``rounds`` (as planned now) begins with these
    settings (arm names); a plan re-run in it is the same round."""

    number: int
    rounds: int
    arms: tuple[str, ...]


@dataclass(frozen=True)
class Figure:
    tokens_per_second: float | None
    speedup: RatioSummary | None
    acceptance_rate: float | None = None

    @property
    def score(self) -> float:
        return self.speedup.median if self.speedup is not None else 0.0


@dataclass(frozen=True)
class GridRow(winner.Facts):
    """One setting of the grid over every prompt it ran, with the facts the winner's rule
    reads of it over all of them (``winner.Facts``)."""

    cell: Cell
    by_suite: dict[str, Figure]
    """Suite name (and "all") -> the figure there."""
    lossless: str
    dropped_in_round: int | None = None
    """Successive halving: the round after which this cell was not run further."""
    dropped_why: str = ""
    """Why it was dropped then (below the cut, within the noise and costlier, ...)."""
    round_scores: tuple[float, ...] = ()
    """Successive halving: the overall median speed-up measured in each round it ran."""
    disturbed: bool = False
    """A run of this setting still stands whose reference ran far from its median (another
    program took the cores?): its figure is not one to learn from."""

    @property
    def overall(self) -> Figure | None:
        """The figure over every prompt it ran (the "all" column)."""
        return self.by_suite.get(ALL)

    @property
    def score(self) -> float:
        return self.by_suite[ALL].score if ALL in self.by_suite else 0.0

    @property
    def speedup_known(self) -> bool:
        """Whether ``score`` is a measured speed-up (not the 0.0 of none)."""
        return ALL in self.by_suite and self.by_suite[ALL].speedup is not None

    def standing(self, suite: str = ALL) -> winner.Standing:
        """What ``core.bench.winner`` reads of this row over ``suite`` ("all": every prompt)."""
        figure = self.by_suite.get(suite)
        return self.judged(None if figure is None else figure.speedup,
                           complete=self.dropped_in_round is None)


@dataclass(frozen=True)
class GridResult:
    suites: tuple[str, ...]
    rows: tuple[GridRow, ...]
    baseline: dict[str, float | None]
    """Suite -> median tok/s of the reference over every plan."""
    runs: tuple[BenchRun, ...]
    halving: bool = False
    cancelled: bool = False
    notes: tuple[str, ...] = field(default=())

    @property
    def best(self) -> GridRow | None:
        """The winning row (``core.bench.winner``: fully measured, output unchanged, the
        best overall median speed-up); None when no setting beats the reference."""
        return winner.pick(self.rows, lambda row: row.standing())

    def passed_over(self, best: GridRow | None, leave_out: Sequence[str] = ()) -> str:
        """The settings that ran to the end measured at least as fast as ``best`` (faster
        than no draft where it is None) that cannot be it, with why, in a sentence
        (core.bench.winner.passed_over); "" for none. A dropped setting is not among them:
        its row says why it was dropped. ``leave_out``: labels said elsewhere."""
        rows = [r for r in self.rows if r.dropped_in_round is None
                and r.cell.label not in leave_out]
        return winner.passed_over_text(winner.passed_over(rows, GridRow.standing, best),
                                       GridRow.standing, lambda row: row.cell.label)

    def to_json(self) -> dict[str, Any]:
        from specdeck.core.jsonout import to_jsonable

        best = self.best
        return {
            "suites": list(self.suites),
            "baseline_tokens_per_second": self.baseline,
            "rows": [{"arm": r.cell.arm.name, "label": r.cell.label,
                      "settings": dict(r.cell.settings), "score": r.score,
                      "lossless": r.lossless, "dropped_in_round": r.dropped_in_round,
                      "dropped_why": r.dropped_why or None,
                      "diverged_runs": r.diverged, "drafted_nothing": r.not_drafting or None,
                      "drafting_unknown": r.drafting_unknown or None,
                      "cannot_win_because": r.standing().excluded_because,
                      "round_scores": list(r.round_scores),
                      "by_suite": {s: to_jsonable(f) for s, f in r.by_suite.items()}}
                     for r in self.rows],
            "best": None if best is None else {"arm": best.cell.arm.name,
                                               "label": best.cell.label,
                                               "speedup": best.score},
            "halving": self.halving,
            "cancelled": self.cancelled,
            "notes": list(self.notes),
        }


def cell_plan(base: BenchPlan, reference: Arm, cell: Cell) -> BenchPlan:
    return replace(base, arms=(reference, cell.arm))


def suite_summaries(run: BenchRun) -> dict[str, BenchSummary]:
    """The run summarized over each suite's prompts, and over all of them ("all")."""
    out = {ALL: summarize(run)}
    suites = dict.fromkeys(p.suite for p in run.prompts)
    if len(suites) < 2:
        out.update({s: out[ALL] for s in suites})
        return out
    for suite in suites:
        ids = {p.id for p in run.prompts if p.suite == suite}
        part = replace(run, prompts=tuple(p for p in run.prompts if p.id in ids),
                       records=tuple(r for r in run.records if r.prompt_id in ids))
        out[suite] = summarize(part)
    return out


def pooled(runs: Sequence[BenchRun], reference: Arm, cell: Cell) -> BenchRun:
    """``cell``'s runs over every round it ran, as one run of the reference and the cell:
    each round's repeats numbered after the rounds before (a pair stays within its round),
    every prompt any round ran. A setting that went on is judged on all its pairs, not on
    the last round's alone; every setting still in the search ran the same rounds, so the
    pooled scores compare like with like."""
    names = {reference.name, cell.arm.name}
    records: list = []
    prompts: dict[str, Any] = {}
    prompt_ids: dict[str, tuple[int, ...]] = {}
    offset = 0
    for run in runs:
        records += [replace(r, slot=replace(r.slot, repeat=r.slot.repeat + offset))
                    for r in run.records if r.arm in names]
        offset += 1 + max((r.slot.repeat for r in run.records), default=-1)
        prompts.update((p.id, p) for p in run.prompts)
        prompt_ids.update(run.prompt_ids)
    last = runs[-1]
    return replace(last, plan=replace(last.plan, arms=(reference, cell.arm)),
                   prompts=tuple(prompts.values()), records=tuple(records),
                   started_at=runs[0].started_at, prompt_ids=prompt_ids,
                   cancelled=any(run.cancelled for run in runs))


def _row(cell: Cell, summaries: dict[str, BenchSummary], dropped: int | None = None) -> GridRow:
    """``cell``'s row from its plan's ``suite_summaries`` (its facts over all of them)."""
    by_suite = {}
    for suite, summary in summaries.items():
        arm = summary.arm(cell.arm.name)
        comparison = summary.comparison(cell.arm.name)
        by_suite[suite] = Figure(arm.tokens_per_second, comparison.speedup, arm.acceptance_rate)
    overall = summaries[ALL].comparison(cell.arm.name)
    return GridRow(cell, by_suite, overall.lossless.verdict, dropped,
                   **winner.facts(overall).keywords())


def _baseline(runs: Sequence[BenchRun], reference: str, suites: Sequence[str]) -> dict:
    out: dict[str, float | None] = {}
    for suite in (*suites, ALL):
        rates = [r.result.stats.tokens_per_second for run in runs
                 for r in run.counted(reference)
                 if (suite == ALL or r.slot.prompt.suite == suite) and r.result.stats.decode_s > 0]
        out[suite] = statistics.median(rates) if rates else None
    return out


def run_grid(base: BenchPlan, reference: Arm, cells: Sequence[Cell], engine,
             on_event: EventSink | None = None, cancel: threading.Event | None = None,
             halving: bool = False, deadline: float | None = None,
             together: bool = False) -> GridResult:
    """Run every cell's A/B plan on ``engine`` (kept between plans, so the reference's
    server stays up); with ``halving``, successive halving over the prompts (later rounds
    in one shared plan where the servers fit: module docstring); ``together``: the first
    round too (a few settings already chosen, core.tune.replay, need no round of their
    own to tell the machine's noise). ``deadline`` (time.monotonic()): no cell's plan
    starts after it; what was measured by then is the result (a note says the budget ran
    out)."""
    if not cells:
        raise InvalidInputError("The grid has no settings to try.",
                                "Give a drafting arm and values to sweep.")
    if len({c.arm.name for c in cells} | {reference.name}) != len(cells) + 1:
        raise InvalidInputError("Two grid settings have the same arm name.")
    cancel = cancel or threading.Event()
    prompts = choose_prompts(base)
    suites = tuple(dict.fromkeys(p.suite for p in prompts))
    runs: list[BenchRun] = []
    rows: dict[str, GridRow] = {}
    ran: dict[str, list[BenchRun]] = {}
    """Arm name -> its runs, one a round (a round's run again replaces its first)."""
    failed: dict[str, str] = {}
    """Arm name -> why its plan could not run (a server that would not start or died)."""
    alive = list(cells)
    together_first = together
    rounds = plan_rounds(base, prompts, len(cells)) if halving else [base]
    costs = RoundCosts()
    sized: list[str] = []
    """What sizing the rounds to the deadline changed, for the notes."""
    out_of_time = False
    number = 0
    disturbed_notes: list[str] = []
    stood_disturbed: set[str] = set()
    """Arm names a disturbed run of which still counts (not run again, or still disturbed)."""
    fallbacks: list[str] = []
    emit = on_event or (lambda _event: None)
    together_rounds: list[int] = []
    """Rounds whose settings ran in one plan, sharing the reference's runs."""
    stopped_early: list[str] = []
    while number < len(rounds):
        plan = rounds[number]
        number += 1
        last = number == len(rounds)
        measured: list[tuple[Cell, BenchRun]] = []
        together = (number > 1 or together_first) and len(alive) > 1 \
            and _keeps_all(engine, len(alive) + 1)
        emit(RoundStarted(number, len(rounds), tuple(c.arm.name for c in alive)))
        if together and not _stop(cancel, deadline):
            shared = _measure_together(plan, reference, alive, engine, on_event, cancel,
                                       costs)
            if isinstance(shared, BenchRun):
                measured = [(cell, shared) for cell in alive]
                together_rounds.append(number)
            elif cancel.is_set():
                break
            elif isinstance(shared, str):
                fallbacks.append(f"Round {number} could not run its settings side by side "
                                 f"({shared}); it ran them one plan each.")
        for cell in alive if not measured else ():
            if _stop(cancel, deadline):
                out_of_time = not cancel.is_set()
                break
            run = _measure(plan, reference, cell, engine, on_event, cancel, costs, failed)
            if run is None and cell.arm.name not in failed:  # cancelled
                break
            if run is not None:
                measured.append((cell, run))
        # Runs another program disturbed are run again, once, while there is time (a
        # reference shared by every setting moves them all alike: nothing to judge by).
        again = set() if number in together_rounds else disturbed(measured, reference.name)
        rerun_ok: set[str] = set()
        for index, (cell, run) in enumerate(measured):
            if cell.arm.name not in again or _stop(cancel, deadline):
                continue
            rerun = _measure(plan, reference, cell, engine, on_event, cancel, costs, failed)
            if rerun is not None:
                measured[index] = (cell, rerun)
                rerun_ok.add(cell.arm.name)
            failed.pop(cell.arm.name, None)  # a re-run that fails keeps the first run
        if again:
            still = disturbed(measured, reference.name) & rerun_ok
            words = [f"Round {number}: the reference ran far from its median beside "
                     f"{_names(again, cells)} (another program took the cores?)"]
            if rerun_ok - still:
                words.append(f"run again, undisturbed: {_names(rerun_ok - still, cells)}")
            if still:
                words.append(f"run again, still disturbed: {_names(still, cells)}")
            if again - rerun_ok:
                words.append(f"not run again (no time left, cancelled, or the re-run failed): "
                             f"{_names(again - rerun_ok, cells)}; its first run stands")
            disturbed_notes.append("; ".join(words) + ".")
            stood_disturbed |= still | (again - rerun_ok)
        for cell, run in measured:
            if all(run is not seen for seen in runs):
                runs.append(run)
            rounds_run = ran.setdefault(cell.arm.name, [])
            rounds_run.append(run)
            earlier = rows[cell.arm.name].round_scores if cell.arm.name in rows else ()
            row = _row(cell, suite_summaries(pooled(rounds_run, reference, cell)))
            # This round's own figure (over all prompts): the pooled one, in its first round.
            this_round = row.score if len(rounds_run) == 1 else \
                _row(cell, {ALL: summarize(pooled([run], reference, cell))}).score
            rows[cell.arm.name] = replace(row, round_scores=(*earlier, this_round),
                                          disturbed=cell.arm.name in stood_disturbed)
        for name in failed:  # a setting that stopped running is not a finalist
            if name in rows and rows[name].dropped_in_round is None:
                rows[name] = replace(rows[name], dropped_in_round=number)
        if cancel.is_set() or last or out_of_time:
            break
        machine_noise = noise(runs, reference.name)
        kept = survivors([rows[c.arm.name] for c, _ in measured], machine_noise)
        halved = set(kept)
        ranked = sorted(kept, key=lambda name: rows[name].score, reverse=True)
        left = rounds[number:]
        if len(ranked) == 1:  # one setting left: the rounds between are nothing to compare
            left = left[-1:]
        fitted = None
        if deadline is not None and ranked:
            fitted = fit_rounds(left, ranked, costs, deadline - time.monotonic(),
                                interleaved_ids(prompts), len(choose_prompts(plan)),
                                lambda n: _keeps_all(engine, n + 1))
            if fitted is not None:
                if (fitted.keep, len(fitted.rounds)) != (len(ranked), len(left)) \
                        or fitted.rounds[-1] != left[-1]:
                    sized.append(sized_note(number, len(ranked), left, fitted))
                left, ranked = list(fitted.rounds), ranked[:fitted.keep]
                kept = set(ranked)
        rounds = [*rounds[:number], *left]
        lowest_kept = min((rows[name].score for name in kept), default=None)
        for cell, _run in measured:
            if cell.arm.name not in kept:
                rows[cell.arm.name] = replace(
                    rows[cell.arm.name], dropped_in_round=number,
                    dropped_why=dropped_why(rows[cell.arm.name], cell.arm.name in halved,
                                             lowest_kept))
        alive = [cell for cell, _run in measured if cell.arm.name in kept]
        if hasattr(engine, "keep_only"):  # the dropped settings' servers make room
            engine.keep_only({reference.name, *(c.arm.name for c in alive)})
        if not alive:
            break
        if all(clearly_slower(rows[c.arm.name], machine_noise) for c in alive):
            stopped_early.append(
                f"Stopped after round {number} of {len(rounds)}: every setting left "
                f"({_names({c.arm.name for c in alive}, cells)}) was clearly slower than no "
                "drafting (its speed-up's 95% interval below 1.0, its median more than "
                f"{SLOWER_NOISE_MULTIPLE:g} times the machine's noise below it), so no later "
                "round could make one of them the winner.")
            rounds = rounds[:number]
            break
        if deadline is not None and fitted is None:  # not even a shorter last round fits
            out_of_time, number = True, number + 1
            break
    ordered = tuple(rows[c.arm.name] for c in cells if c.arm.name in rows)
    label_of = {c.arm.name: c.label for c in cells}
    notes = []
    if halving:
        dropped = any(r.dropped_in_round for r in ordered)
        notes.append(f"Successive halving over {len(rounds)} rounds: each row pools every "
                     "round it ran; " + (
                         "rows marked 'dropped' were measured on fewer (and other) "
                         "prompt-runs, so compare their speed-ups, not their tok/s, and "
                         "they are not candidates for best; half went on after each round, "
                         "and among settings within the machine's noise of the cut the "
                         "cheaper went on, not the luckier." if dropped else
                         "no setting was dropped."))
    notes += sized
    notes += stopped_early
    if together_rounds:
        notes.append(f"Round{'s' if len(together_rounds) > 1 else ''} "
                     f"{', '.join(map(str, together_rounds))} ran every setting left in one "
                     "plan, interleaved per prompt, sharing the reference's runs (their "
                     "servers all fit at once).")
    notes += fallbacks
    notes += disturbed_notes
    notes += [f"{label_of[name]} could not be measured: {why}" for name, why in failed.items()]
    if cancel.is_set():
        notes.append(f"Cancelled in round {number} of the {len(rounds)} planned: the rows show "
                     "what was measured by then.")
    never = [c.label for c in cells if c.arm.name not in rows and c.arm.name not in failed]
    if never:
        why = ("cancelled" if cancel.is_set() else "the time budget ran out" if out_of_time
               else "the search stopped")
        notes.append(f"Not measured ({why} before they ran; not in the table, no figure for "
                     f"them): {', '.join(never)}.")
    if out_of_time:
        notes.append(f"The time budget ran out in round {number} of {len(rounds)}: the "
                     "settings still in the search are compared on every round each ran "
                     "(those the budget stopped before that round ran one round fewer; those "
                     "dropped earlier are not candidates).")
    return GridResult(suites, ordered, _baseline(runs, reference.name, suites), tuple(runs),
                      halving, cancelled=cancel.is_set(),
                      notes=tuple(notes))


def _keeps_all(engine, servers: int) -> bool:
    """Whether ``engine`` keeps this many servers up at once (a server engine with room for
    them, not one server at a time): then a round's settings can run in one plan."""
    room = getattr(engine, "max_servers", None)
    return serves_arms(engine) and room is not None and room >= servers \
        and not getattr(engine, "exclusive", False)


def _measure_together(plan: BenchPlan, reference: Arm, cells: Sequence[Cell], engine,
                      on_event, cancel, costs: RoundCosts) -> BenchRun | str | None:
    """Every cell in one plan beside one reference: each prompt-run of the reference is
    shared by every setting (the arms interleaved per prompt, their order alternating). None
    when cancelled; why, when a server would not run (then the round runs cell by cell, so
    one failing setting does not take the others with it)."""
    started = time.monotonic()
    try:
        run = run_plan(replace(plan, arms=(reference, *(c.arm for c in cells))), engine,
                       on_event, cancel)
    except CancelledError:
        return None
    except SpecDeckError as exc:
        return str(exc)
    elapsed = time.monotonic() - started
    for cell in cells:  # each setting's own runs; the reference's as though paired (dearer)
        costs.add(cell.arm.name, run, elapsed, arms={reference.name, cell.arm.name})
    return run


def _stop(cancel: threading.Event, deadline: float | None) -> bool:
    return cancel.is_set() or (deadline is not None and time.monotonic() > deadline)


def _measure(plan: BenchPlan, reference: Arm, cell: Cell, engine, on_event, cancel,
             costs: RoundCosts, failed: dict[str, str]) -> BenchRun | None:
    """One cell's A/B plan; None when cancelled or when its server would not run (then
    ``failed`` says why: the other settings can still run)."""
    started = time.monotonic()
    try:
        run = run_plan(cell_plan(plan, reference, cell), engine, on_event, cancel)
    except CancelledError:
        return None
    except SpecDeckError as exc:
        # The note names the setting by its label: the run's internal name ("Arm X: ") is
        # no word for a user.
        failed[cell.arm.name] = str(exc).removeprefix(f"Arm {cell.arm.name}: ")
        return None
    costs.add(cell.arm.name, run, time.monotonic() - started)
    return run


def _names(arms: set[str], cells: Sequence[Cell]) -> str:
    return ", ".join(c.label for c in cells if c.arm.name in arms)


