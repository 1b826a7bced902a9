"""The tuning loop: candidates, prediction, search, verification, apply, one call.

``tune(setup, options)`` runs every phase in order and reports each to ``on_event`` (the CLI
prints them, the Tune page renders them); it returns a :class:`TuneResult` whatever happened
(cancelled, out of budget, nothing better than no drafting), and writes nothing the user owns
unless a verified winner is applied (``apply`` is given and confirms). What differs by server
is in core.tune.llama_server and core.tune.tabby (each a :class:`TunedServer`); the Hub's
drafts and their downloads, before the clock starts, in core.tune.downloads; the
verification and the verdict in core.tune.verify. This module holds the options, the events
and the result, and the search both servers share. ``budget_s`` counts from the end of the
downloads.

Prompts: the suites' prompts split in two, alternately per suite: the search decides on the
tuning half, the verification measures on the other, so a setting is never verified on the
prompts that chose it. The search is ``core.bench.grid.run_grid`` with successive halving:
round 1 runs one tuning prompt of each suite, the later rounds run the tuning prompts up to
``SEARCH_MAX_REPEATS`` times, and a setting is judged on every pair of every round it ran;
the rounds are sized to the search's share of the budget (fewer repeats first, then fewer
settings). Where settings lie within the machine's measured noise of the cut (or of the best,
among the finalists), the cheaper setting (a shorter draft, no draft model) is preferred, so
one lucky run does not decide.
"""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specdeck.core.bench.grid import ALL, Cell, GridResult, GridRow, run_grid
from specdeck.core.bench.halving import pairs_of, setting_cost
from specdeck.core.bench.noise import noise, noise_band
from specdeck.core.bench.plan import Arm, BenchPlan
from specdeck.core.bench.runner import choose_prompts
from specdeck.core.bench.winner import cheapest_close, figure_of
from specdeck.core.engines import SERVER_ENGINE
from specdeck.core.errors import InvalidInputError
from specdeck.core.tune.candidates import Candidate, Candidates
from specdeck.core.tune.predict import Prediction, record
from specdeck.core.tune.request import (
    DEFAULT_BUDGET_S,
    MAX_NEW_TOKENS,
    PROMPTS_PER_SUITE,
    TABBYAPI,
)
from specdeck.core.tune.setup import Setup

if TYPE_CHECKING:
    from specdeck.core.tune.downloads import ConfirmDownload, Downloaded
    from specdeck.core.tune.verify import Verification

DEFAULT_SUITES = ("grounded", "code", "structured")
VERIFY_SHARE = 0.3
"""Of the budget, what the search leaves for the verification."""
SEARCH_MAX_REPEATS = 4
"""The most times the search's later rounds run the tuning prompts (successive halving sizes
its rounds to the deadline, halving the repeats before it drops a setting): one pass of a
handful of prompts cannot tell settings a few percent apart on a noisy machine."""
REFERENCE, CURRENT, WINNER = "A", "C", "W"
REPLAY_SEARCH_REPEATS = 1
"""With every setting predicted, the search measures a few finalists on the tuning prompts
once (successive halving among them); the verification is what runs long enough to decide."""


@dataclass(frozen=True)
class TuneOptions:
    budget_s: float = DEFAULT_BUDGET_S
    """Wall clock for everything after the candidates are found and downloaded."""
    suites: tuple[str, ...] = DEFAULT_SUITES
    """Built-in suite names or the user's prompt files (JSON Lines with a "prompt" field)."""
    prompts_per_suite: int = PROMPTS_PER_SUITE
    """Per suite: half tune, half verify."""
    max_new_tokens: int = MAX_NEW_TOKENS
    verify_repeats: int = 2
    draft_dirs: tuple[Path, ...] = ()
    device: str | None = None
    """"cpu" or "gpu": the verify cost the predictions assume (None: where the server holds
    the model, ``Setup.on_gpu``)."""
    download_budget: int = 0
    """Bytes of Hub drafts to download at most; 0: local drafts only (the Hub is not asked).
    The command line's default is hub.DEFAULT_DOWNLOAD_BUDGET; a caller that gives none
    never reaches the network."""
    download_dir: Path | None = None
    """Where downloaded drafts go (None: core.tune.hub.library_dir's choice)."""
    hub_endpoint: str | None = None
    """The Hub to search (None: HF_ENDPOINT, SpecDeck's setting, huggingface.co)."""
    memory_bytes: int | None = None
    """Memory the server may use (None: what is free now); a Hub draft's quantization must
    fit what the target leaves of it."""
    download_retry: Any = None
    """core.hub.transfer.RetryPolicy for the downloads (None: the installer's default)."""
    download_time_s: float | None = None
    """Wall clock for all the downloads together (None: ``budget_s``): a Hub that trickles
    cannot hold a tune past it (core.tune.downloads.download_phase)."""
    replay: bool = True
    """Predict every setting from one plain run (core.tune.replay) and search only the best
    predicted; False: search every candidate's k values (llama-server setups only)."""


# Events ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Phase:
    name: str
    """"candidates", "download", "search", "verify", "apply"."""
    text: str


@dataclass(frozen=True)
class CandidatesFound:
    candidates: tuple[tuple[Candidate, Prediction], ...]
    not_tried: tuple


@dataclass(frozen=True)
class Forecasted:
    """Every setting predicted from one plain run (core.tune.replay.phase.Forecast), and what
    the search will measure instead of every candidate's k values."""

    forecast: Any
    finalists: tuple[str, ...]
    """The finalists' labels, best predicted first."""
    cells: tuple[tuple[str, str, Any], ...] = ()
    """Every setting the search will run: (arm name, label, its Candidate)."""
    predictions: tuple[tuple[Any, Any], ...] = ()
    """(Candidate, Prediction): each candidate's prediction, from its best setting's."""


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
    acceptance: float | None = None
    """The share of drafted tokens accepted at that setting (None: not reported)."""
    k: int | None = None
    """That setting's k (None: the type's own, unsearched)."""
    pairs: int = 0
    """The paired runs the measured speed-up rests on."""
    disturbed: bool = False
    """A run behind it was disturbed by another program (grid.GridRow.disturbed)."""
    not_drafting: str = ""
    """Why it is not known to have drafted at that setting ("" when it drafted): then what it
    measured is noise, shown but never learned from."""
    interval: tuple[float, float] | None = None
    """The 95% interval of the measured speed-up (None: too few pairs for one)."""
    complete: bool = True
    """Measured on every prompt the search ran (False: dropped after an early round, on
    part of them: a figure for those prompts, not for the whole set)."""
    refuted: str = ""
    """Why verification refuted this figure ("" when it did not, or did not judge it):
    then it is shown, never learned from (``settled``)."""
    not_a_result: str = ""
    """Why that figure is not a drafting result of this candidate ("" when it is): no
    setting of it was one (core.bench.winner.figure_of: it did not draft, or nobody can tell
    whether it did, or its output changed), so the fastest is shown, never learned from."""

    @property
    def error(self) -> float | None:
        return self.prediction.error(self.measured)


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
    downloads: tuple[Downloaded, ...] = ()
    """Every Hub draft chosen for download, and what became of it."""
    forecast: Any = None
    """core.tune.replay.phase.Forecast: every setting predicted from one plain run (None:
    not replayed)."""
    servers_started: int = 0
    """llama-servers this tune started (the replay's and the search's and verification's)."""

    def with_applied(self, applied) -> TuneResult:
        return replace(self, applied=applied)


EventSink = Callable[[Any], None]


def device_of(setup, options: TuneOptions) -> str:
    """The device the predictions assume: the user's word (``options.device``), else where
    the server holds the model (``on_gpu`` of the setup)."""
    return options.device or ("gpu" if setup.on_gpu else "cpu")


def ranked(found, setup, options: TuneOptions, history: list[dict]) -> list:
    """Each candidate ``found`` with its predicted speed-up (``core.tune.predict``), the most
    promising first: the order both servers' searches take them in."""
    from specdeck.core.tune.predict import predict

    device = device_of(setup, options)
    prompts = prompt_set(options)
    return sorted(((c, predict(c, setup, device, history, prompts)) for c in found.found),
                  key=lambda cp: cp[1].speedup, reverse=True)


# The loop --------------------------------------------------------------------------------------
def tune(setup: Setup, options: TuneOptions = TuneOptions(), engine=None,
         on_event: EventSink | None = None, cancel: threading.Event | None = None,
         history: list[dict] | None = None,
         confirm_download: ConfirmDownload | None = None) -> TuneResult:
    """Find, download, verify and decide (see the module docstring); applying is
    :mod:`.apply`'s. ``confirm_download`` is asked before any download (None: download
    within the budget without asking). A TabbyAPI setup (core.tune.tabby) is tuned by
    ``tune_tabby``: its own candidates, then the same search, verification and decision."""
    split_prompts(options)  # a missing or broken prompt file fails now, not after the candidates
    if setup.kind == TABBYAPI:
        from specdeck.core.tune.tabby import tune_tabby

        return tune_tabby(setup, options, engine, on_event, cancel, history)
    from specdeck.core.tune.llama_server import tune_llama

    return tune_llama(setup, options, engine, on_event, cancel, history, confirm_download)




@dataclass(frozen=True)
class TunedServer:
    """What the loop needs from the kind of server it tunes: llama-server (here) or TabbyAPI
    (core.tune.tabby). Arms are what core.bench runs; ``drafting`` is what would be written
    for a setting (llama-server flags, or TabbyAPI's draft_model keys as "key=value")."""

    reference_arm: Callable[[Any], Arm]
    current_arm: Callable[[Any, str], Arm | None]
    cells: Callable[[Any, Candidate], list[Cell]]
    drafting: Callable[[GridRow], tuple[str, ...]]
    engine: Callable[[Any, list], Any]
    model: Callable[[Any], str]


def _buildable(setup, server: TunedServer, predicted: list, notes: list) -> list:
    """The candidates whose settings the one builder (core.tune.arguments) can make: one it
    refuses (a draft gone from disk since it was found, say) is a note, never the end of the
    tune."""
    kept = []
    for candidate, prediction in predicted:
        try:
            server.cells(setup, candidate)
        except InvalidInputError as exc:
            notes.append(f"{candidate.label} was not tried: {exc.what}")
            continue
        kept.append((candidate, prediction))
    return kept


def search_and_decide(setup, server: TunedServer, options: TuneOptions, predicted: list,
                      found: Candidates, downloads, phase_s: dict, notes: list, engine,
                      emit: EventSink, cancel: threading.Event, forecast=None) -> TuneResult:
    """The search, the verification and the decision, whatever the server (the module's
    docstring says how). With a ``forecast`` (core.tune.replay) the search measures its
    finalists and the candidates it could not predict, once, and the verification runs as
    long as the finalist's predicted speed-up needs (the replay, like the downloads, ran
    before the budget's clock started)."""
    from specdeck.core.tune.verify import (
        decide,
        disturbed_verification,
        over_budget,
        verify,
        verify_repeats,
    )

    tuning, held_out = split_prompts(options)
    predicted = _buildable(setup, server, predicted, notes)
    cells = [cell for c, _ in predicted for cell in server.cells(setup, c)]
    expected: dict[str, float] = {}
    from specdeck.core.tune.replay import search as replayed

    chosen = replayed.finalists(forecast) if forecast is not None else []
    by_label = {c.label: c for c, _ in predicted}
    owner = {cell.arm.name: c for c, _ in predicted for cell in server.cells(setup, c)}
    finals = replayed.cells(setup, by_label, chosen)
    if chosen:
        expected = {cell.arm.name: max(item.predicted.speedup, item.predicted.mean)
                    for cell, item in zip(finals, chosen, strict=True)}
        predicted_labels = {s.candidate for s in forecast.settings}
        cells = finals + [cell for c, _ in predicted if c.label not in predicted_labels
                          for cell in server.cells(setup, c)]
        owner.update({cell.arm.name: by_label[item.candidate]
                      for cell, item in zip(finals, chosen, strict=True)})
    elif forecast is not None:
        notes.append("The replay found no setting that drafts on the tuning prompts: every "
                     "candidate's k values were searched instead.")
    if forecast is not None:
        emit(Forecasted(forecast, tuple(c.label for c in finals),
                        tuple((cell.arm.name, cell.label, owner.get(cell.arm.name))
                              for cell in cells), tuple(predicted)))
    # The user's own setting is searched too (as it is, its k included): it may be the best,
    # and then the answer is to keep it.
    current = server.current_arm(setup, CURRENT)
    if current is not None:
        cells.append(Cell(current, current_label(current)))
    # Two settings or fewer make one round, which nothing sizes to the deadline: once then.
    repeats = SEARCH_MAX_REPEATS if len(cells) > 2 else 1
    if expected:
        repeats = REPLAY_SEARCH_REPEATS
    base = BenchPlan(engine=SERVER_ENGINE, model=server.model(setup),
                     arms=(server.reference_arm(setup),), suites=options.suites,
                     prompt_ids=tuning, max_new_tokens=options.max_new_tokens,
                     repeats=repeats, warmup=1, warmup_tokens=8, apply_chat_template=True,
                     stop_on_eos=False)
    end = time.monotonic() + options.budget_s
    deadline = end - options.budget_s * VERIFY_SHARE
    search = verification = None
    try:
        emit(Phase("search", f"{len(cells)} settings of {len(predicted)} candidates"
                             + (" and your current setting" if current is not None else "")
                             + f" on {len(tuning)} tuning prompts, successive halving"))
        t0 = time.monotonic()
        search = run_grid(base, base.arms[0], cells, engine, emit, cancel,
                          halving=not expected, deadline=deadline, together=bool(expected))
        phase_s["search"] = time.monotonic() - t0
        best, noise_share = finalist(search)
        tried = tuple(_tried(c, p, search, tuning) for c, p in predicted)
        if cancel.is_set() or best is None:  # no verification will judge these figures
            remember(setup, tried, device_of(setup, options), prompts=prompt_set(options))
        if cancel.is_set():
            return tune_result(setup, options, tried, found, search, None,
                           Decided(None, None, False, "Cancelled during the search: nothing "
                                   "was written."), phase_s, True, notes, downloads,
                           forecast=forecast, engine=engine)
        if best is None:
            return tune_result(setup, options, tried, found, search, None,
                           Decided(None, None, False, _why_no_best(search)), phase_s, False,
                           notes, downloads, forecast=forecast, engine=engine)
        if noise_share:
            notes.append(f"This machine's run-to-run noise: {noise_share:.1%} of the speed.")
        notes += filter(None, [why_not_the_top(search, best, noise_share)])
        held = not set(tuning) & set(held_out)
        emit(Phase("verify", f"{best.cell.label} against "
                             + ("your current setting and " if setup.drafting else "")
                             + f"no drafting, on {len(held_out)} "
                             + ("held-out prompts" if held else "prompts, not all held out "
                                "(a suite of one prompt)")))
        if not held:
            notes.append("A prompt suite holds one prompt, so the search and the verification "
                         "both ran on it: the verdict is not on held-out prompts. Give at "
                         "least two prompts a suite for an independent verification.")
        t0 = time.monotonic()
        arms = 2 + (current is not None and best.cell.arm.name != CURRENT)
        figure, shaky = None, 0.0
        if expected:
            figure = max(expected.get(best.cell.arm.name, 0.0), best.score)
            # one pass of the search cannot show the noise; the calibration's runs did (its
            # pairs of plain runs: what repeats average away, not the model's misfit)
            costs = forecast.costs
            shaky = noise_share or (costs.run_noise or costs.noise) / math.sqrt(2)
        repeats = verify_repeats(search, arms, len(held_out), end - t0, options.verify_repeats,
                                 expected=figure, noise_share=shaky)
        if figure is not None:
            notes.append(f"The verification ran the held-out prompts {repeats} times: what a "
                         f"{figure:.2f}x speed-up (predicted, or measured by the search) "
                         f"needs at this machine's noise ({shaky:.1%}) for its interval to "
                         "clear 1.0, or the fewest where no number of repeats could.")
        elif repeats > options.verify_repeats:
            notes.append(f"The verification ran the held-out prompts {repeats} times (the time "
                         f"the search left; decided before its first run).")
        late = over_budget(search, arms, len(held_out), repeats, end - t0)
        if late:
            emit(Phase("verify", late))
            notes.append(late)
        verification = replace(
            verify(setup, best, replace(base, prompt_ids=held_out, repeats=repeats), engine,
                   emit, cancel, server), held_out=held)
        phase_s["verify"] = time.monotonic() - t0
        notes += filter(None, [disturbed_verification(noise_share, verification.run)])
    finally:
        engine.unload()
    winner = next((c for c, _ in predicted if best.cell.arm.name.startswith(c.arm_prefix)),
                  None)  # None: the user's current setting
    tried = tuple(settled(t, winner, verification, cancel.is_set()) for t in tried)
    remember(setup, tried, device_of(setup, options), prompts=prompt_set(options))
    notes += [f"{t.candidate.label}'s search figure ({t.measured:.2f}x) is not kept in the "
              f"prediction history: {t.refuted}." for t in tried if t.refuted]
    decision = decide(winner, best, verification, setup, cancel.is_set(),
                      server.drafting(best))
    emit(decision)
    return tune_result(setup, options, tried, found, search, verification, decision, phase_s,
                   cancel.is_set(), notes, downloads, forecast=forecast, engine=engine)


def settled(item: Tried, winner: Candidate | None, verification: Verification | None,
            cancelled: bool) -> Tried:
    """``item``, marked ``refuted`` when it is the search's winner and a finished
    verification refuted its search figure: the winner drafted nothing on the held-out
    prompts, or its figure lies outside the verification's 95% interval (a search's 1.61x
    that verified at 0.97x is not this drafter's figure)."""
    if item.candidate is not winner or verification is None or cancelled \
            or item.measured is None:
        return item
    if verification.not_drafting:
        return replace(item, refuted="verification refuted it: it drafted nothing on the "
                                     f"held-out prompts ({verification.not_drafting})")
    ratio = verification.winner_vs_none
    if ratio is not None and ratio.has_interval and \
            not ratio.ci_low <= item.measured <= ratio.ci_high:
        return replace(item, refuted=f"verification refuted it: {ratio.median:.2f}x "
                                     f"({ratio.interval_text()}) on the held-out prompts")
    return item


def remember(setup, tried, device: str, path: Path | None = None, *,
             prompts: str | None = None) -> None:
    """Add what the search measured of each candidate on the ``prompts`` (``prompt_set``) to
    the prediction history, except a setting that drafted nothing (it measured noise, not
    the drafter), one whose output changed (``Tried.not_a_result``) and a figure
    verification refuted (``settled``): none is history."""
    for item in tried:
        if item.measured is not None and not (item.not_drafting or item.not_a_result
                                              or item.refuted):
            record(setup, item.candidate, item.measured, path, device=device,
                   acceptance=item.acceptance, k=item.k, pairs=item.pairs,
                   disturbed=item.disturbed, prompts=prompts, interval=item.interval,
                   complete=item.complete)


def current_label(arm: Arm) -> str:
    """The user's current setting, as the search's table and the live view name it."""
    return f"your current setting ({arm.drafter.label})"


FAILED_NOTE = " could not be measured: "
"""How core.bench.grid notes a setting that failed (its server did not start, crashed, or
its reading failed its checks)."""


def _why_no_best(search: GridResult) -> str:
    """Why the search named no setting to verify, as it happened: nothing could be measured,
    some settings failed (they might have been the faster ones), the budget ran out, or
    nothing that could win beat no drafting; and the settings measured faster that cannot
    win, with why (core.bench.winner.passed_over), so that a 1.30x in the table is never
    left unexplained."""
    if not search.rows:
        return ("No setting could be measured: "
                + (search.notes[-1] if search.notes else "the search ran nothing")
                + " Nothing was written.")
    failed = [note.split(FAILED_NOTE, 1)[0] for note in search.notes if FAILED_NOTE in note]
    passed = search.passed_over(None, leave_out=failed)
    could = " that could be written" if passed else ""
    passed = f" {passed}" if passed else ""
    if failed:
        # The settings that failed might have been the faster ones: that is the news, not
        # "nothing beat no drafting".
        by_label = {r.cell.label: r for r in search.rows}
        shown = [f"{label} ({by_label[label].score:.2f}x before it failed)"
                 if label in by_label and by_label[label].speedup_known else label
                 for label in failed[:3]]
        more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
        usable = [r for r in search.rows if r.standing().excluded_because is None]
        rest = ("no setting ran to the end" if not usable else
                "none of the settings that ran to the end beat decoding without a draft")
        return (f"{len(failed)} setting{'s' if len(failed) > 1 else ''} could not be measured "
                f"(the server did not start, stopped, or its readings failed their checks): "
                f"{', '.join(shown)}{more}; {rest}.{passed} Nothing was written. The notes say "
                "why each failed; whether a failed one is faster is not known.")
    if any("budget ran out" in n for n in search.notes):
        return (f"No setting still in the search{could} beat decoding without a draft when the "
                f"time budget ran out: nothing was written.{passed} A larger budget measures "
                "more settings on more prompts.")
    return (f"No setting{could} beat decoding without a draft on the tuning prompts: nothing "
            f"was written.{passed}")


def cancelled_reading(setup, options: TuneOptions, found: Candidates, phase_s: dict,
                      notes: list) -> TuneResult:
    """Cancel pressed while the candidates were read (a binary's --help, the Hub, the draft
    folders): nothing ran, nothing was written."""
    return tune_result(setup, options, (), found, None, None,
                   Decided(None, None, False, "Cancelled while reading the candidates: "
                           "nothing was written."), phase_s, True, notes, ())


def tune_result(setup, options, tried, found, search, verification, decision, phase_s,
                cancelled, notes, downloads, forecast=None, engine=None) -> TuneResult:
    """The result of a tune that ended here, with the llama-servers it started counted (the
    replay's, ``forecast``, and the ``engine``'s)."""
    started = (forecast.servers_started if forecast is not None else 0) + \
        getattr(engine, "starts", 0)
    return TuneResult(setup, options, tried, found.not_tried, search, verification, decision,
                      phase_s=phase_s, cancelled=cancelled, notes=tuple(notes),
                      downloads=tuple(downloads), forecast=forecast, servers_started=started)




def prompt_set(options: TuneOptions) -> str:
    """What the search measures on, as the prediction history tells tunes apart: a digest of
    the tuning prompts' text and the answer length (how much an answer repeats its prompt
    decides much of an n-gram drafter's speed-up, and how sure the target is, a draft
    model's). The same prompt file, suites and length give the same digest on any machine."""
    import hashlib

    tuning, _held_out = split_prompts(options)
    chosen = choose_prompts(BenchPlan(engine=SERVER_ENGINE, suites=options.suites))
    by_id = {p.id: p for p in chosen}
    digest = hashlib.sha256(f"max_new_tokens={options.max_new_tokens}".encode())
    for pid in tuning:
        digest.update(b"\0" + by_id[pid].text.encode("utf-8"))
    return digest.hexdigest()[:16]


def split_prompts(options: TuneOptions) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Prompt ids to tune on and to verify on: per suite, alternately, ``prompts_per_suite``
    in all (a suite with one prompt tunes and verifies on it: the report says so)."""
    prompts = choose_prompts(BenchPlan(engine=SERVER_ENGINE, suites=options.suites))
    by_suite: dict[str, list[str]] = {}
    for prompt in prompts:
        by_suite.setdefault(prompt.suite, []).append(prompt.id)
    tuning, held_out = [], []
    for ids in by_suite.values():
        ids = ids[:max(options.prompts_per_suite, 1)]
        tuning += ids[0::2]
        held_out += ids[1::2] or ids[:1]
    return tuple(tuning), tuple(held_out)


def tuned_server(setup) -> TunedServer:
    """The loop's view of ``setup``'s server: llama-server, or TabbyAPI (core.tune.tabby)."""
    if setup.kind == TABBYAPI:
        from specdeck.core.tune.tabby import tuned_server as tabby_server

        return tabby_server()
    from specdeck.core.tune.llama_server import LLAMA_SERVER

    return LLAMA_SERVER


def finalist(search: GridResult) -> tuple[GridRow | None, float]:
    """The setting to verify (core.bench.winner.cheapest_close: the search's winner, or
    within this machine's noise of it the cheapest setting instead); with the noise share
    used."""
    share = noise(search.runs, REFERENCE)
    return cheapest_close(search.rows, GridRow.standing, lambda r: setting_cost(r.cell),
                          lambda r: noise_band(share, pairs_of(r))), share


def why_not_the_top(search: GridResult, chosen: GridRow, noise_share: float) -> str | None:
    """Why the setting verified is not the search's best by median (None: it is), for the
    report, whose search table names that best."""
    top = search.best
    if top is None or top is chosen:
        return None
    return (f"The search's best by median was {top.cell.label} ({top.score:.2f}x); "
            f"{chosen.cell.label} ({chosen.score:.2f}x) lies within this machine's noise of it "
            f"({noise_band(noise_share, pairs_of(top)):.1%} at its {pairs_of(top)} pairs) and "
            "costs less (no draft model, or fewer tokens drafted a step), so it was verified "
            "instead.")


def _tried(candidate: Candidate, prediction: Prediction, search: GridResult,
           every: Iterable[str] = ()) -> Tried:
    """What the search measured of ``candidate`` (``every``: the prompt ids it searched on,
    for ``Tried.complete``): its best setting among those that went
    furthest in the search. A setting dropped early rests on fewer pairs, and the best of
    several thin figures flatters itself: in the tune_search benchmark (2026-11-27) the draft
    model's k=8, dropped after round 1 on 3 pairs at 0.70x, outscored the k=4 the search kept
    (0.60x on 7 pairs; 0.58x on 12 in the exhaustive grid)."""
    # A setting that drafted nothing is noise, and one whose output changed is not this
    # drafter's: the candidate's figure is a drafting result's wherever one is (a row said
    # "drafted nothing" beside the 50% its other setting had accepted).
    found = figure_of(
        (r for r in search.rows if r.cell.arm.name.startswith(candidate.arm_prefix)),
        GridRow.standing, _reach)
    if found is None:
        return Tried(candidate, prediction, None, None)
    top, not_a_result = found
    k = dict(top.cell.settings).get("k")
    ratio = top.by_suite[ALL].speedup
    return Tried(candidate, prediction, top.score, top.cell.label,
                 top.by_suite[ALL].acceptance_rate,
                 int(k) if k is not None and k.isdigit() else None,
                 ratio.n, top.disturbed, top.standing().not_drafting,
                 (ratio.ci_low, ratio.ci_high) if ratio.has_interval else None,
                 on_every_prompt(search, top.cell.arm.name, every), not_a_result=not_a_result)


def on_every_prompt(search: GridResult, arm: str, every: Iterable[str]) -> bool:
    """Whether ``arm`` was measured on every prompt of ``every`` (the search's prompt ids): a
    setting dropped after an early round was measured on that round's prompts only, and so
    was every setting of a search stopped early or cut short by its deadline."""
    return {r.prompt_id for run in search.runs for r in run.counted(arm)} >= set(every)


def _reach(row: GridRow) -> float:
    """How far a row went in the search: the round it was dropped in, or all the way."""
    return math.inf if row.dropped_in_round is None else row.dropped_in_round


