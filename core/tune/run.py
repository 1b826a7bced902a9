"""The tuning loop: candidates, prediction, search, verification, apply, one call.

``tune(setup, options)`` runs every phase in order and reports each to ``on_event`` (the CLI
prints them, the Tune page renders them); it returns a :class:`TuneResult` whatever happened
(cancelled, out of budget, nothing better than no drafting), and writes nothing the user owns
unless a verified winner is applied (``apply`` is given and confirms).

Prompts: the suites' prompts split in two, alternately per suite: the search decides on the
tuning half, the verification measures on the other, so a setting is never verified on the
prompts that chose it. The search is ``core.bench.grid.run_grid`` with successive halving under
the time budget (a setting within the machine's measured noise of the cut goes on to the next
round); among the finalists, one within the noise of the best is preferred when it is the
cheaper setting (a shorter draft, no draft model), so one lucky run does not decide.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specdeck.core.bench.grid import ALL, Cell, GridResult, GridRow, noise, run_grid
from specdeck.core.bench.plan import Arm, BenchPlan
from specdeck.core.bench.runner import BenchRun, choose_prompts, run_plan
from specdeck.core.bench.stats import RatioSummary, summarize_ratios
from specdeck.core.bench.summary import BenchSummary, summarize
from specdeck.core.bench.winner import Standing, pick
from specdeck.core.engines.base import NO_DRAFT
from specdeck.core.errors import InvalidInputError
from specdeck.core.servers.arms import ServerArm
from specdeck.core.servers.llama_server import (
    LaunchProfile,
    binary_help,
    drafter_from_flags,
    with_flag,
)
from specdeck.core.tune.candidates import (
    K_VALUES,
    Candidate,
    Candidates,
    draft_files,
    find_candidates,
)
from specdeck.core.tune.predict import Prediction, predict, read_history, record
from specdeck.core.tune.setup import Setup

DEFAULT_SUITES = ("grounded", "code", "structured")
DEFAULT_BUDGET_S = 600.0
VERIFY_SHARE = 0.3
"""Of the budget, what the search leaves for the verification."""
REFERENCE, CURRENT, WINNER = "A", "C", "W"


@dataclass(frozen=True)
class TuneOptions:
    budget_s: float = DEFAULT_BUDGET_S
    """Wall clock for everything after the candidates are found."""
    suites: tuple[str, ...] = DEFAULT_SUITES
    """Built-in suite names or the user's prompt files (JSON Lines with a "prompt" field)."""
    prompts_per_suite: int = 4
    """Per suite: half tune, half verify."""
    max_new_tokens: int = 96
    verify_repeats: int = 2
    draft_dirs: tuple[Path, ...] = ()
    device: str = "cpu"
    """"cpu" or "gpu": the verify cost the predictions assume."""


# Events ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Phase:
    name: str
    """"candidates", "search", "verify", "apply"."""
    text: str


@dataclass(frozen=True)
class CandidatesFound:
    candidates: tuple[tuple[Candidate, Prediction], ...]
    not_tried: tuple


@dataclass(frozen=True)
class Decided:
    """The verdict after verification: what would be written, or why nothing."""

    winner: Candidate | None
    flags: tuple[str, ...] | None
    apply: bool
    why: str


# Result ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tried:
    """One candidate: predicted, and what the search measured of it at its best setting."""

    candidate: Candidate
    prediction: Prediction
    measured: float | None
    best_setting: str | None

    @property
    def error(self) -> float | None:
        return self.prediction.error(self.measured)


@dataclass(frozen=True)
class Verification:
    run: BenchRun
    summary: BenchSummary
    winner_vs_none: RatioSummary | None
    winner_vs_current: RatioSummary | None
    current_vs_none: RatioSummary | None
    lossless: bool


@dataclass(frozen=True)
class TuneResult:
    setup: Setup
    options: TuneOptions
    tried: tuple[Tried, ...]
    not_tried: tuple
    search: GridResult | None
    verification: Verification | None
    decision: Decided
    applied: Any = None
    """core.tune.apply.Applied when a winner was written (or rolled back)."""
    phase_s: dict[str, float] = field(default_factory=dict)
    cancelled: bool = False
    notes: tuple[str, ...] = ()

    def with_applied(self, applied) -> TuneResult:
        return replace(self, applied=applied)


EventSink = Callable[[Any], None]


# The loop --------------------------------------------------------------------------------------
def tune(setup: Setup, options: TuneOptions = TuneOptions(), engine=None,
         on_event: EventSink | None = None, cancel: threading.Event | None = None,
         history: list[dict] | None = None) -> TuneResult:
    """Find, verify and decide (see the module docstring); applying is :mod:`.apply`'s."""
    from specdeck.core.servers.engine import ServerEngine

    emit = on_event or (lambda _e: None)
    cancel = cancel or threading.Event()
    phase_s: dict[str, float] = {}
    notes: list[str] = []

    started = time.monotonic()
    emit(Phase("candidates", f"Reading what {Path(setup.binary).name} can draft with"))
    info = binary_help(setup.binary)
    if info is None or not info.spec_types:
        raise InvalidInputError(f"{setup.binary} --help lists no --spec-type values.",
                                "SpecDeck tunes llama-server builds that draft with --spec-type "
                                "(2026 and later).")
    found: Candidates = find_candidates(setup, info.spec_types,
                                        draft_files(setup, options.draft_dirs), cancel,
                                        methods=info.methods)
    history = read_history() if history is None else history
    predicted = sorted(((c, predict(c, setup, options.device, history)) for c in found.found),
                       key=lambda cp: cp[1].speedup, reverse=True)
    emit(CandidatesFound(tuple(predicted), found.not_tried))
    phase_s["candidates"] = time.monotonic() - started
    if not predicted:
        raise InvalidInputError(f"{setup.where}: nothing to try ({_why_none(found)}).",
                                "Put a draft GGUF of the target's family beside it, or use a "
                                "llama-server build with n-gram spec types.")

    tuning, held_out = split_prompts(options)
    base = BenchPlan(engine="server", model=str(setup.target), arms=(reference_arm(setup),),
                     suites=options.suites, prompt_ids=tuning, max_new_tokens=options.max_new_tokens,
                     repeats=1, warmup=1, warmup_tokens=8, apply_chat_template=True,
                     stop_on_eos=False)
    cells = [cell for c, _ in predicted for cell in candidate_cells(setup, c)]
    deadline = started + options.budget_s * (1 - VERIFY_SHARE)
    from specdeck.core.servers.llama_server import servers_that_fit

    engine = engine or ServerEngine(max_servers=servers_that_fit(
        setup.facts.weight_bytes + max((c.draft_bytes for c, _ in predicted), default=0)))
    search = verification = None
    try:
        emit(Phase("search", f"{len(cells)} settings of {len(predicted)} candidates on "
                             f"{len(tuning)} tuning prompts, successive halving"))
        t0 = time.monotonic()
        search = run_grid(base, base.arms[0], cells, engine, emit, cancel, halving=True,
                          deadline=deadline)
        phase_s["search"] = time.monotonic() - t0
        best, noise_share = finalist(search)
        tried = tuple(_tried(c, p, search) for c, p in predicted)
        for item in tried:
            if item.measured is not None:
                record(setup, item.candidate, item.measured)
        if cancel.is_set():
            return _result(setup, options, tried, found, search, None,
                           Decided(None, None, False, "Cancelled during the search: nothing "
                                   "was written."), phase_s, True, notes)
        if best is None:
            out_of_time = any("budget ran out" in n for n in search.notes)
            if not search.rows:
                why = ("No setting could be measured: "
                       + (search.notes[-1] if search.notes else "the search ran nothing")
                       + " Nothing was written.")
            elif out_of_time:
                why = ("The time budget ran out before any setting was measured on every "
                       "tuning prompt: nothing was written. Give a larger budget.")
            else:
                why = ("No setting beat decoding without a draft on the tuning prompts: "
                       "nothing was written.")
            return _result(setup, options, tried, found, search, None,
                           Decided(None, None, False, why), phase_s, False, notes)
        if noise_share:
            notes.append(f"This machine's run-to-run noise: {noise_share:.1%} of the speed.")
        emit(Phase("verify", f"{best.cell.label} against "
                             + ("your current setting and " if setup.drafting else "")
                             + f"no drafting, on {len(held_out)} held-out prompts"))
        t0 = time.monotonic()
        verification = verify(setup, best, replace(base, prompt_ids=held_out,
                                                   repeats=options.verify_repeats),
                              engine, emit, cancel)
        phase_s["verify"] = time.monotonic() - t0
    finally:
        engine.unload()
    winner = next(c for c, _ in predicted if best.cell.arm.name.startswith(_cell_prefix(c)))
    decision = decide(winner, best, verification, setup, cancel.is_set())
    emit(decision)
    return _result(setup, options, tried, found, search, verification, decision, phase_s,
                   cancel.is_set(), notes)


def _result(setup, options, tried, found, search, verification, decision, phase_s, cancelled,
            notes) -> TuneResult:
    return TuneResult(setup, options, tried, found.not_tried, search, verification, decision,
                      phase_s=phase_s, cancelled=cancelled, notes=tuple(notes))


def _why_none(found: Candidates) -> str:
    return "; ".join(f"{n.what}: {n.why}" for n in found.not_tried) or "no spec types"


def split_prompts(options: TuneOptions) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Prompt ids to tune on and to verify on: per suite, alternately, ``prompts_per_suite``
    in all (a suite with one prompt tunes and verifies on it: the report says so)."""
    prompts = choose_prompts(BenchPlan(engine="server", suites=options.suites))
    by_suite: dict[str, list[str]] = {}
    for prompt in prompts:
        by_suite.setdefault(prompt.suite, []).append(prompt.id)
    tuning, held_out = [], []
    for ids in by_suite.values():
        ids = ids[:max(options.prompts_per_suite, 1)]
        tuning += ids[0::2]
        held_out += ids[1::2] or ids[:1]
    return tuple(tuning), tuple(held_out)


def reference_arm(setup: Setup) -> Arm:
    """No drafting: the user's flags without the drafting ones."""
    return Arm(REFERENCE, NO_DRAFT, ServerArm(launch=LaunchProfile(setup.binary, str(setup.target),
                                                                   setup.common)))


def _cell_prefix(candidate: Candidate) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in candidate.label)[:40] + "-"


def candidate_cells(setup: Setup, candidate: Candidate) -> list[Cell]:
    """One grid cell per searched k of ``candidate`` (one cell when its type has no k flag)."""
    flags = setup.common + candidate.flags
    values = K_VALUES if candidate.k_flag else (None,)
    cells = []
    for value in values:
        args = flags if value is None else with_flag(flags, candidate.k_flag, value)
        name = _cell_prefix(candidate) + ("default" if value is None else value)
        label = candidate.label + ("" if value is None else f" k={value}")
        settings = () if value is None else (("k", value),)
        launch = LaunchProfile(setup.binary, str(setup.target), args)
        cells.append(Cell(Arm(name, drafter_from_flags(args, binary_help(setup.binary)),
                              ServerArm(launch=launch)), label, settings))
    return cells


def _cost(row: GridRow) -> tuple[int, int]:
    """Cheaper settings first: no draft model before one, then fewer tokens per step."""
    launch = row.cell.arm.server.launch
    drafter = row.cell.arm.drafter
    return (int(drafter.model_path is not None or "draft-" in " ".join(launch.args)),
            drafter.num_draft_tokens)


def finalist(search: GridResult) -> tuple[GridRow | None, float]:
    """The search's winner (core.bench.winner), and, within the machine's noise of it, the
    cheapest setting instead; with the noise share used."""
    best = search.best
    share = noise(search.runs, REFERENCE)
    if best is None:
        return None, share
    floor = best.score * (1 - 2 * share)
    close = [r for r in search.rows if r.standing().excluded_because is None
             and r.score >= floor and r.score > 1.0]
    return min(close, key=_cost, default=best), share


def _tried(candidate: Candidate, prediction: Prediction, search: GridResult) -> Tried:
    rows = [r for r in search.rows if r.cell.arm.name.startswith(_cell_prefix(candidate))
            and ALL in r.by_suite and r.by_suite[ALL].speedup is not None]
    top = pick(rows, lambda r: Standing(r.score, r.diverged)) or max(
        rows, key=lambda r: r.score, default=None)
    return Tried(candidate, prediction, None if top is None else top.score,
                 None if top is None else top.cell.label)


def verify(setup: Setup, best: GridRow, plan: BenchPlan, engine, emit, cancel) -> Verification:
    """The winner against no drafting and against the current setting, on ``plan``'s
    (held-out) prompts, paired and interleaved."""
    arms = [reference_arm(setup)]
    if setup.drafting:
        launch = LaunchProfile(setup.binary, str(setup.target), setup.flags)
        arms.append(Arm(CURRENT, drafter_from_flags(setup.flags), ServerArm(launch=launch)))
    arms.append(replace(best.cell.arm, name=WINNER))
    run = run_plan(replace(plan, arms=tuple(arms)), engine, emit, cancel)
    summary = summarize(run)
    win = summary.comparison(WINNER)
    current = summary.comparison(CURRENT) if setup.drafting else None
    return Verification(
        run, summary, win.speedup, paired(run, CURRENT, WINNER) if current else None,
        current.speedup if current else None,
        lossless=win.lossless.checkable and win.lossless.compared > 0 and not win.lossless.diverged)


def paired(run: BenchRun, first: str, second: str) -> RatioSummary | None:
    """``second``'s speed over ``first``'s, paired by prompt and repeat (median of ratios)."""
    rates = {arm: {r.pair_key: r.result.stats.tokens_per_second for r in run.counted(arm)
                   if r.result.stats.decode_s > 0} for arm in (first, second)}
    ratios = [rates[second][key] / rate for key, rate in rates[first].items()
              if key in rates[second] and rate > 0]
    return summarize_ratios(ratios) if ratios else None


def decide(candidate: Candidate, best: GridRow, verification: Verification | None, setup: Setup,
           cancelled: bool) -> Decided:
    """Apply only a winner verified faster than no drafting (its whole 95% interval above
    1.0), faster than the current setting where there is one, and with the output unchanged."""
    flags = best.cell.arm.server.launch.args
    from specdeck.core.servers.llama_server import drafting_flags

    drafting = drafting_flags(flags)
    if cancelled or verification is None:
        return Decided(candidate, drafting, False, "Cancelled during the verification: nothing "
                       "was written.")
    none = verification.winner_vs_none
    if not verification.lossless:
        return Decided(candidate, drafting, False, f"{best.cell.label} changed the output on "
                       "the held-out prompts (or could not be checked): nothing was written.")
    if none is None or not none.has_interval:
        return Decided(candidate, drafting, False, f"Too few verification runs of "
                       f"{best.cell.label} to tell: nothing was written. Give a larger budget.")
    if none.ci_low <= 1.0:
        return Decided(candidate, drafting, False, f"{best.cell.label} was not clearly faster "
                       f"than no drafting on the held-out prompts ({none.median:.2f}x, "
                       f"{none.interval_text()}): nothing was written.")
    against = verification.winner_vs_current
    if setup.drafting and tuple(setup.drafting) == tuple(drafting):
        return Decided(candidate, drafting, False, "Your current setting is the best found: "
                       "nothing to change.")
    if against is not None and (not against.has_interval or against.ci_low <= 1.0):
        return Decided(candidate, drafting, False, f"{best.cell.label} was not clearly faster "
                       f"than your current setting ({against.median:.2f}x, "
                       f"{against.interval_text()}): nothing was written.")
    return Decided(candidate, drafting, True, f"{best.cell.label}: {none.median:.2f}x over no "
                   f"drafting ({none.interval_text()}) on held-out prompts, output unchanged.")
