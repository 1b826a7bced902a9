"""The tuning loop: candidates, prediction, search, verification, apply, one call.

``tune(setup, options)`` runs every phase in order and reports each to ``on_event`` (the CLI
prints them, the Tune page renders them); it returns a :class:`TuneResult` whatever happened
(cancelled, out of budget, nothing better than no drafting), and writes nothing the user owns
unless a verified winner is applied (``apply`` is given and confirms).

Downloads (before the clock starts): the Hub's draft candidates (:mod:`.hub`) are ranked
with the others by their prediction; the best ranked that fit ``download_budget`` (at most
``hub.MAX_DOWNLOADS``) are installed, after ``confirm_download`` says yes. A download that
fails is noted and tuning goes on with the other candidates; a cancel stops the tune, and
what was fetched stays in the installer's hidden staging folder (resumed next time, never
taken for an installed model). ``budget_s`` counts from the end of the downloads.

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
import statistics
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specdeck.core.bench.grid import (
    ALL,
    Cell,
    GridResult,
    GridRow,
    disturbed_runs,
    noise,
    noise_band,
    pairs_of,
    run_grid,
    setting_cost,
)
from specdeck.core.bench.plan import Arm, BenchPlan
from specdeck.core.bench.runner import BenchRun, choose_prompts, run_plan
from specdeck.core.bench.stats import RatioSummary, summarize_ratios
from specdeck.core.bench.summary import BenchSummary, summarize
from specdeck.core.bench.winner import beats_no_draft, cheapest_close, clearly_faster, figure_of
from specdeck.core.engines.base import NO_DRAFT
from specdeck.core.errors import CancelledError, InvalidInputError, SpecDeckError
from specdeck.core.servers.arms import ServerArm
from specdeck.core.servers.llama_server import (
    LaunchProfile,
    binary_help,
    drafter_from_flags,
)
from specdeck.core.tune import hub
from specdeck.core.tune.candidates import (
    Candidate,
    Candidates,
    NotTried,
    draft_files,
    drafting_methods,
    find_candidates,
)
from specdeck.core.tune.predict import Prediction, history_note, predict, read_history, record
from specdeck.core.tune.setup import Setup
from specdeck.core.units import format_bytes

DEFAULT_SUITES = ("grounded", "code", "structured")
DEFAULT_BUDGET_S = 600.0
VERIFY_SHARE = 0.3
"""Of the budget, what the search leaves for the verification."""
VERIFY_MAX_REPEATS = 8
"""The most repeats of the held-out prompts the verification runs when time is left."""
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
    prompts_per_suite: int = 4
    """Per suite: half tune, half verify."""
    max_new_tokens: int = 96
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
    cannot hold a tune past it (core.tune.run.download_phase)."""
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
class Downloading:
    """A Hub draft's download under way (sent every tenth of a second or so)."""

    candidate: str
    """The candidate's label, as in CandidatesFound."""
    repo_id: str
    file: str
    done: int
    total: int


@dataclass(frozen=True)
class Downloaded:
    """A Hub draft's download ended (also what the report lists for each one considered)."""

    candidate: str
    repo_id: str
    file: str
    status: str
    """"downloaded", "already installed", "failed", "cancelled", "timed out" (past the
    downloads' time: what arrived is kept to resume), "declined" (the user said no or could
    not be asked), "over budget", "not worth it" (predicted slower than no drafting even at
    the top of its range)."""
    bytes: int
    """The file's size (its shards together)."""
    downloaded_bytes: int = 0
    """Fetched by this tune (less than ``bytes`` when an earlier attempt was resumed)."""
    seconds: float = 0.0
    path: Path | None = None
    why: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("downloaded", "already installed")


ConfirmDownload = Callable[[tuple[Candidate, ...], int, Path], bool]
"""(the candidates to download, their bytes, the folder) -> whether to download them."""


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
class Verification:
    run: BenchRun
    summary: BenchSummary
    winner_vs_none: RatioSummary | None
    winner_vs_current: RatioSummary | None
    current_vs_none: RatioSummary | None
    lossless: bool
    check: Any = None
    """The winner's core.bench.summary.LosslessCheck (what diverged where, or why it could
    not be checked); None where not kept."""
    not_drafting: str = ""
    """Why the winner drafted nothing on the held-out prompts ("" when it drafted, or when
    the server reports no counts)."""
    drafting_unknown: str = ""
    """Why nobody can tell whether the winner drafted there ("" when it can be told): its
    server gave no draft count (core.bench.summary's ``drafting_unknown``)."""
    held_out: bool = True
    """Whether its prompts were all held out from the search (False: a suite of one prompt
    left none to hold out, and the verification ran on what the search chose on)."""

    @property
    def where(self) -> str:
        """On what the verdict rests, as the decision and the report say it."""
        return ("on held-out prompts" if self.held_out else
                "on the prompts the search chose on (no prompt was left to hold out: a suite "
                "of one prompt)")


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
    if setup.kind == "tabbyapi":
        from specdeck.core.tune.tabby import tune_tabby

        return tune_tabby(setup, options, engine, on_event, cancel, history)
    emit = on_event or (lambda _e: None)
    cancel = cancel or threading.Event()
    phase_s: dict[str, float] = {}
    notes: list[str] = []

    started = time.monotonic()
    emit(Phase("candidates", f"Reading what {Path(setup.binary).name} can draft with"))
    info = binary_help(setup.binary)
    if info is None:
        from specdeck.core.servers.llama_server import help_problem

        raise InvalidInputError(f"SpecDeck could not read what {setup.binary} can draft with: "
                                f"{help_problem(setup.binary)}. Nothing was tuned.",
                                f"Check that it is a llama-server that runs here: "
                                f"`{setup.binary} --help` prints its flags.")
    methods = drafting_methods(info)
    if not methods:
        raise InvalidInputError(f"{setup.binary} --help lists no way to draft (no --spec-type "
                                "values, no draft model flag).",
                                "Give the llama-server that runs this model (--llama-server).")
    if setup.migration:
        said = (f"Your cmd's flags are out of date for {Path(setup.binary).name} "
                f"({'; '.join(setup.migration)}): every setting, your current one included, "
                "is measured as migrated, and the migration is part of what is written.")
        emit(Phase("candidates", said))
        notes.append(said)
    from specdeck.core.servers.llama_server import problems_of, unlisted_note

    refused = problems_of(setup.flags, info)
    if refused:  # checked now, not at the verification after the whole search
        from specdeck.core.urls import shown_args

        raise InvalidInputError(
            f"{Path(setup.binary).name} would not start with your flags "
            f"({'; '.join(shown_args(refused))}). Nothing was tuned.",
            f"Fix these flags in your command line; `{setup.binary} --help` lists what this "
            "build knows.")
    hedge = unlisted_note(setup.flags, info)
    if hedge:  # the user's own flags: passed on, never refused for the help's silence
        said = f"Your flags: {hedge}."
        emit(Phase("candidates", said))
        notes.append(said)
    library = hub.library_dir(options.download_dir)
    found: Candidates = find_candidates(
        setup, methods,
        draft_files(setup, (*options.draft_dirs, *hub.library_folders(library))), cancel,
        methods=info.methods)
    drafts_with = info.implied_draft or info.method(hub.DRAFT_SIMPLE)
    if options.download_budget > 0 and hub.DRAFT_SIMPLE in methods and not any(
            n.what == hub.DRAFT_SIMPLE and "draft length" in n.why for n in found.not_tried):
        emit(Phase("candidates", f"Searching the Hub for {setup.facts.family} drafts"))
        found = _with_hub(setup, found, library, options, notes, cancel)
        if drafts_with is not None:  # the Hub's drafts run as this build drafts with a model
            from specdeck.core.tune.candidates import kept_values

            found = replace(found, found=tuple(
                replace(c, k_flag=drafts_with.k_flag, implied=drafts_with.implied,
                        kept=kept_values(drafts_with, setup.flags))
                if c.hub is not None else c for c in found.found))
    if history is None:
        notes += filter(None, [history_note()])
    history = read_history() if history is None else history
    device = device_of(setup, options)
    prompts = prompt_set(options)
    predicted = sorted(((c, predict(c, setup, device, history, prompts)) for c in found.found),
                       key=lambda cp: cp[1].speedup, reverse=True)
    emit(CandidatesFound(tuple(predicted), found.not_tried))
    phase_s["candidates"] = time.monotonic() - started
    if cancel.is_set():
        return cancelled_reading(setup, options, found, phase_s, notes)
    if not predicted:
        raise InvalidInputError(f"{setup.where}: nothing to try ({_why_none(found)}).",
                                "Put a draft GGUF of the target's family beside it, or use a "
                                "llama-server build with n-gram spec types.")
    t0 = time.monotonic()
    predicted, downloads = download_phase(predicted, library, options, emit, cancel,
                                          confirm_download)
    if downloads:
        phase_s["download"] = time.monotonic() - t0
    found = Candidates(tuple(c for c, _ in predicted), found.not_tried + tuple(
        NotTried(d.candidate, f"{d.status}: {d.why}") for d in downloads if not d.ok))
    if cancel.is_set() or not predicted:
        why = ("Cancelled during the downloads: nothing was written." if cancel.is_set() else
               f"Nothing left to try ({_why_none(found)}): nothing was written.")
        return _result(setup, options, (), found, None, None, Decided(None, None, False, why),
                       phase_s, cancel.is_set(), notes, downloads)

    forecast = None
    if options.replay:
        t0 = time.monotonic()
        forecast, predicted = replay_phase(setup, predicted, options, device, emit, cancel,
                                           notes)
        phase_s["replay"] = time.monotonic() - t0
        if cancel.is_set():
            return _result(setup, options, (), found, None, None,
                           Decided(None, None, False, "Cancelled during the replay: nothing "
                                   "was written."), phase_s, True, notes, downloads,
                           forecast=forecast)
    engine = engine or LLAMA_SERVER.engine(setup, predicted)
    return search_and_decide(setup, LLAMA_SERVER, options, predicted, found, downloads,
                             phase_s, notes, engine, emit, cancel, forecast=forecast)


def replay_phase(setup: Setup, predicted: list, options: TuneOptions, device: str,
                 emit: EventSink, cancel: threading.Event, notes: list[str]):
    """Every setting predicted from one plain run (core.tune.replay.phase.forecast), and the
    candidates' predictions replaced by their best predicted setting's. None (and the
    predictions as they were) when the replay cannot run: a server that will not start is
    a note, and the search measures every candidate as without it."""
    from specdeck.core.tune.replay.phase import forecast as run_forecast
    from specdeck.core.tune.replay.search import prediction_of

    tuning, _held_out = split_prompts(options)
    prompts = choose_prompts(BenchPlan(engine="server", suites=options.suites,
                                       prompt_ids=tuning))
    try:
        forecast = run_forecast(setup, [c for c, _ in predicted], prompts,
                                options.max_new_tokens, device, REPLAY_SEARCH_REPEATS, emit,
                                cancel)
    except CancelledError:
        cancel.set()
        return None, predicted
    except SpecDeckError as exc:
        notes.append(f"The replay could not run ({exc.what}): every candidate was searched "
                     "instead.")
        return None, predicted
    except (ArithmeticError, ValueError) as exc:
        # The replay only predicts (the search and the verification decide): a fault in its
        # arithmetic costs the tune its shortcut, never the tune.
        notes.append(f"The replay failed ({type(exc).__name__}: {exc}; please report it): "
                     "every candidate was searched instead.")
        return None, predicted
    notes += forecast.notes
    costs = forecast.costs
    costs_text = (f"a verified token {costs.row_share:.2f} of a step, a verification "
                  f"{costs.verify_share:.2f} more" + ("" if forecast.calibrated else
                                                      " (the prior's)"))
    replaced = []
    for candidate, prediction in predicted:
        best = forecast.best_of(candidate.label)
        replaced.append((candidate, prediction if best is None
                         else prediction_of(best, costs_text)))
    replaced.sort(key=lambda cp: cp[1].speedup, reverse=True)
    return forecast, replaced


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
    base = BenchPlan(engine="server", model=server.model(setup),
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
            return _result(setup, options, tried, found, search, None,
                           Decided(None, None, False, "Cancelled during the search: nothing "
                                   "was written."), phase_s, True, notes, downloads,
                           forecast=forecast, engine=engine)
        if best is None:
            return _result(setup, options, tried, found, search, None,
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
        repeats = verify_repeats(search, arms, len(held_out), end - t0, options.verify_repeats)
        if expected:
            from specdeck.core.tune.replay.search import verify_repeats as needed

            figure = max(expected.get(best.cell.arm.name, 0.0), best.score)
            # one pass of the search cannot show the noise; the calibration's runs did
            shaky = noise_share or forecast.costs.noise / math.sqrt(2)
            repeats = min(repeats, needed(figure, shaky, len(held_out),
                                          options.verify_repeats, VERIFY_MAX_REPEATS))
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
    winner = next((c for c, _ in predicted if best.cell.arm.name.startswith(_cell_prefix(c))),
                  None)  # None: the user's current setting
    tried = tuple(settled(t, winner, verification, cancel.is_set()) for t in tried)
    remember(setup, tried, device_of(setup, options), prompts=prompt_set(options))
    notes += [f"{t.candidate.label}'s search figure ({t.measured:.2f}x) is not kept in the "
              f"prediction history: {t.refuted}." for t in tried if t.refuted]
    decision = decide(winner, best, verification, setup, cancel.is_set(),
                      server.drafting(best))
    emit(decision)
    return _result(setup, options, tried, found, search, verification, decision, phase_s,
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


def verify_repeats(search: GridResult, arms: int, prompts: int, seconds_left: float,
                   least: int, most: int = VERIFY_MAX_REPEATS) -> int:
    """How many times the verification runs its held-out prompts: as many as the time the
    search left holds, at the pace of the search's measured runs (each from its start to the
    next run's), at least ``least``. Fixed before the verification starts, so it never stops
    on a lucky interval (stopping when the interval first clears 1.0 would make the 95% an
    overstatement)."""
    per_repeat = repeat_seconds(search, arms, prompts)
    if per_repeat is None:
        return least
    fits = int(0.8 * seconds_left // per_repeat) if per_repeat > 0 else most
    return max(least, min(most, fits))


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


FAILED_NOTE = " could not be measured: "
"""How core.bench.grid notes a setting that failed (its server did not start, crashed, or
its reading failed its checks)."""


def _why_no_best(search: GridResult) -> str:
    if not search.rows:
        return ("No setting could be measured: "
                + (search.notes[-1] if search.notes else "the search ran nothing")
                + " Nothing was written.")
    failed = [note.split(FAILED_NOTE, 1)[0] for note in search.notes if FAILED_NOTE in note]
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
                f"{', '.join(shown)}{more}; {rest}. Nothing was written. The notes say why "
                "each failed; whether a failed one is faster is not known.")
    if any("budget ran out" in n for n in search.notes):
        return ("No setting still in the search beat decoding without a draft when the time "
                "budget ran out: nothing was written. A larger budget measures more settings "
                "on more prompts.")
    return "No setting beat decoding without a draft on the tuning prompts: nothing was written."


def cancelled_reading(setup, options: TuneOptions, found: Candidates, phase_s: dict,
                      notes: list) -> TuneResult:
    """Cancel pressed while the candidates were read (a binary's --help, the Hub, the draft
    folders): nothing ran, nothing was written."""
    return _result(setup, options, (), found, None, None,
                   Decided(None, None, False, "Cancelled while reading the candidates: "
                           "nothing was written."), phase_s, True, notes, ())


def _result(setup, options, tried, found, search, verification, decision, phase_s, cancelled,
            notes, downloads, forecast=None, engine=None) -> TuneResult:
    started = (forecast.servers_started if forecast is not None else 0) + \
        getattr(engine, "starts", 0)
    return TuneResult(setup, options, tried, found.not_tried, search, verification, decision,
                      phase_s=phase_s, cancelled=cancelled, notes=tuple(notes),
                      downloads=tuple(downloads), forecast=forecast, servers_started=started)


HUB_DEADLINE_S = 120.0
"""How long the search of the Hub for drafts may take in all (a handful of listings and
header reads of a few MiB): a Hub that trickles its answers or pages for ever is left
behind at this deadline, and the tune goes on with the drafts on disk."""


HUB_STOP_S = 10.0
"""How long a stopped Hub search may take to end (its connections are shut: at once)."""


def _with_hub(setup: Setup, found: Candidates, library: Path, options: TuneOptions,
              notes: list[str], cancel: threading.Event) -> Candidates:
    """``found`` with the Hub's drafts added (and the Hub's refusals with why), within
    ``HUB_DEADLINE_S``: the search runs beside the tune, and one still running then is
    stopped: its connections are shut (core.hub.client.stoppable, a response trickling its
    headers or its body included) and it ends before the tune goes on."""
    from specdeck.core.hub.client import stoppable

    outcome: dict[str, Any] = {}
    stop = threading.Event()

    def search() -> None:
        try:
            with stoppable(stop):
                outcome["found"] = hub.find_hub_drafts(
                    setup, library, list(found.found), memory=options.memory_bytes,
                    endpoint=options.hub_endpoint, cancel=stop)
        except BaseException as exc:  # noqa: BLE001 - raised again on the tune's thread
            outcome["error"] = exc

    worker = threading.Thread(target=search, name="specdeck-tune-hub", daemon=True)
    worker.start()
    deadline = time.monotonic() + HUB_DEADLINE_S
    while worker.is_alive() and not cancel.is_set() and time.monotonic() < deadline:
        worker.join(0.1)
    if worker.is_alive():
        stop.set()
        worker.join(HUB_STOP_S)  # its sockets are shut: it ends at once
        if not cancel.is_set():
            notes.append(f"The Hub did not finish answering within {HUB_DEADLINE_S:g} s (it "
                         "sent its answers too slowly, or without end): no Hub drafts were "
                         "tried; tuning went on with the drafts on disk.")
        return found
    if "error" in outcome:
        if isinstance(outcome["error"], CancelledError) and cancel.is_set():
            return found
        raise outcome["error"]
    drafts, refused, hub_notes = outcome["found"]
    notes += hub_notes
    kept = tuple(n for n in found.not_tried if not (drafts and n.what == hub.DRAFT_SIMPLE))
    return Candidates(found.found + tuple(drafts), kept + tuple(refused))


# Downloads -------------------------------------------------------------------------------------
def plan_downloads(ranked: list[tuple[Candidate, Prediction]], budget: int
                   ) -> tuple[list[Candidate], list[Downloaded]]:
    """The Hub candidates to download, best ranked first, while their bytes fit ``budget``
    (at most hub.MAX_DOWNLOADS), leaving out any predicted slower than no drafting even at
    the top of its range; and the others, each with why not."""
    take: list[Candidate] = []
    left_out: list[Downloaded] = []
    used = 0
    for candidate, prediction in ranked:
        if candidate.hub is None or candidate.download_bytes <= 0:
            continue
        if not beats_no_draft(prediction.high):
            why = (f"predicted slower than no drafting even at the top of its range "
                   f"({prediction.high:.2f}x, {prediction.source}): not worth "
                   f"{format_bytes(candidate.download_bytes)}")
            left_out.append(_download_record(candidate, "not worth it", why=why))
            continue
        if used + candidate.download_bytes > budget:
            why = (f"{format_bytes(candidate.download_bytes)} does not fit the download budget "
                   f"({format_bytes(budget - used)} of {format_bytes(budget)} left); raise "
                   "--download-budget to try it")
        elif len(take) >= hub.MAX_DOWNLOADS:
            why = (f"{hub.MAX_DOWNLOADS} better-ranked drafts are downloaded already (each one "
                   "more is another round of the search)")
        else:
            take.append(candidate)
            used += candidate.download_bytes
            continue
        left_out.append(_download_record(candidate, "over budget", why=why))
    return take, left_out


def _download_record(candidate: Candidate, status: str, **fields) -> Downloaded:
    source = candidate.hub
    return Downloaded(candidate.label, source.repo_id, source.file, status, source.size,
                      **fields)


def download_phase(predicted: list, library: Path, options: TuneOptions, emit: EventSink,
                   cancel: threading.Event, confirm: ConfirmDownload | None
                   ) -> tuple[list, list[Downloaded]]:
    """Download what :func:`plan_downloads` picks, once confirmed; the (candidate, prediction)
    pairs that can run, and a record of every Hub draft chosen or left out."""
    wanted, records = plan_downloads(predicted, options.download_budget)
    for left_out in records:
        emit(left_out)
    if wanted:
        total = sum(c.download_bytes for c in wanted)
        emit(Phase("download", f"{len(wanted)} draft{'s' if len(wanted) > 1 else ''} from the "
                               f"Hub, {format_bytes(total)}, into {library}"))
        if confirm is not None and not confirm(tuple(wanted), total, library):
            declined = [_download_record(c, "declined", why="not confirmed; --yes downloads "
                                         "without asking, --download-budget 0 uses local "
                                         "drafts only") for c in wanted]
            for no in declined:
                emit(no)
            records += declined
        else:
            seconds = options.download_time_s if options.download_time_s is not None \
                else options.budget_s
            with _deadline(cancel, seconds) as stop:
                for candidate in wanted:
                    ended = _download(candidate, library, options, emit, stop, seconds,
                                      cancel)
                    emit(ended)
                    records.append(ended)
                    if ended.status == "cancelled":
                        break
    failed = {r.candidate for r in records if not r.ok}
    wanted_labels = {c.label for c in wanted}
    done = {r.candidate for r in records if r.ok}
    kept = [(c, p) for c, p in predicted if c.label not in failed
            and (c.label not in wanted_labels or c.label in done)]
    return kept, records


class _Either:
    """Set when the user's cancel is, or when the downloads' time runs out: what the installer
    stops on (it asks ``is_set`` and ``wait``, as of a threading.Event)."""

    def __init__(self, cancel: threading.Event, expired: threading.Event) -> None:
        self.cancel, self.expired = cancel, expired

    def is_set(self) -> bool:
        return self.cancel.is_set() or self.expired.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        ends = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = None if ends is None else ends - time.monotonic()
            if left is not None and left <= 0:
                return False
            self.cancel.wait(0.05 if left is None else min(0.05, left))
        return True


@contextmanager
def _deadline(cancel: threading.Event, seconds: float):
    """A stop for the downloads: set the moment ``cancel`` is, or ``seconds`` after entering
    (the installer then closes its connection at once and keeps what arrived)."""
    expired = threading.Event()
    timer = threading.Timer(seconds, expired.set)
    timer.daemon = True
    timer.start()
    try:
        yield _Either(cancel, expired)
    finally:
        timer.cancel()


def _download(candidate: Candidate, library: Path, options: TuneOptions, emit: EventSink,
              stop: _Either, seconds: float, cancel: threading.Event) -> Downloaded:
    """One Hub draft installed, unless ``stop`` comes first: the user's ``cancel``
    ("cancelled"), or the downloads' ``seconds`` running out ("timed out"); either way what
    arrived stays hidden in the library, for the next install to resume, and nothing looks
    installed."""
    source = candidate.hub
    started = time.monotonic()
    timed_out = ("timed out", f"not finished within the {seconds:g} s the downloads may take "
                 "(as long as the tune's --budget); what arrived is kept and the next tune "
                 "resumes it. Tuning goes on with the other candidates.")
    if stop.is_set() and not cancel.is_set():
        return _download_record(candidate, timed_out[0], why=timed_out[1])

    def progress(snapshot) -> None:
        if snapshot.total:
            emit(Downloading(candidate.label, source.repo_id, source.file, snapshot.done,
                             snapshot.total))

    try:
        result = hub.install_draft(candidate, library, endpoint=options.hub_endpoint,
                                   progress=progress, cancel=stop,
                                   retry=options.download_retry)
    except CancelledError as exc:
        if not cancel.is_set():
            return _download_record(candidate, timed_out[0],
                                    seconds=time.monotonic() - started, why=timed_out[1])
        return _download_record(candidate, "cancelled", seconds=time.monotonic() - started,
                                why=str(exc))
    except (SpecDeckError, OSError) as exc:
        # A SpecDeckError's words carry no secret (core.hub.errors); an OSError's might
        # (a URL), so only its kind is said.
        what = str(exc) if isinstance(exc, SpecDeckError) else type(exc).__name__
        return _download_record(candidate, "failed", seconds=time.monotonic() - started,
                                why=f"{what.rstrip('.')}. Tuning goes on with the other "
                                    "candidates.")
    path = result.path / Path(source.file).name
    status = "downloaded" if result.status == "installed" else "already installed"
    return _download_record(candidate, status, downloaded_bytes=result.downloaded_bytes,
                            seconds=time.monotonic() - started, path=path)


def _why_none(found: Candidates) -> str:
    return "; ".join(f"{n.what}: {n.why}" for n in found.not_tried) or "no spec types"


def prompt_set(options: TuneOptions) -> str:
    """What the search measures on, as the prediction history tells tunes apart: a digest of
    the tuning prompts' text and the answer length (how much an answer repeats its prompt
    decides much of an n-gram drafter's speed-up, and how sure the target is, a draft
    model's). The same prompt file, suites and length give the same digest on any machine."""
    import hashlib

    tuning, _held_out = split_prompts(options)
    by_id = {p.id: p for p in choose_prompts(BenchPlan(engine="server", suites=options.suites))}
    digest = hashlib.sha256(f"max_new_tokens={options.max_new_tokens}".encode())
    for pid in tuning:
        digest.update(b"\0" + by_id[pid].text.encode("utf-8"))
    return digest.hexdigest()[:16]


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
    """One grid cell per searched k of ``candidate`` (one cell when its type has no k flag),
    each launch's drafting flags built and checked by core.tune.arguments."""
    from specdeck.core.tune.arguments import tuned_args

    info = binary_help(setup.binary)
    values = candidate.k_values if candidate.k_flag else (None,)
    cells = []
    for value in values:
        numbers = candidate.kept + (() if value is None else ((candidate.k_flag, value),))
        args = setup.common + tuned_args(candidate.spec_type, candidate.draft, numbers, info)
        if candidate.draft is not None:  # the user's -ngld, -devd, ... place the draft
            args += setup.draft_placement
        name = _cell_prefix(candidate) + ("default" if value is None else value)
        label = candidate.label + ("" if value is None else f" k={value}")
        settings = () if value is None else (("k", value),)
        launch = LaunchProfile(setup.binary, str(setup.target), args)
        cells.append(Cell(Arm(name, drafter_from_flags(args, info), ServerArm(launch=launch)),
                          label, settings))
    return cells


def _current_arm(setup: Setup, name: str) -> Arm | None:
    """The user's own drafting flags as an arm (None when the setup does not draft)."""
    if not setup.drafting:
        return None
    launch = LaunchProfile(setup.binary, str(setup.target), setup.flags)
    return Arm(name, drafter_from_flags(setup.flags, binary_help(setup.binary)),
               ServerArm(launch=launch))


def _llama_drafting(row: GridRow) -> tuple[str, ...]:
    from specdeck.core.servers.llama_server import drafting_flags

    return drafting_flags(row.cell.arm.server.launch.args)


def _llama_engine(setup: Setup, predicted: list):
    from specdeck.core.servers.engine import ServerEngine
    from specdeck.core.servers.llama_server import launch_bytes, servers_that_fit

    flags = [setup.common + c.flags for c, _ in predicted] or [setup.common]
    biggest = max(launch_bytes(LaunchProfile(setup.binary, str(setup.target), f)) for f in flags)
    return ServerEngine(max_servers=servers_that_fit(biggest, setup.on_gpu))


LLAMA_SERVER = TunedServer(reference_arm=reference_arm, current_arm=_current_arm,
                           cells=candidate_cells, drafting=_llama_drafting,
                           engine=_llama_engine, model=lambda setup: str(setup.target))


def tuned_server(setup) -> TunedServer:
    """The loop's view of ``setup``'s server: llama-server, or TabbyAPI (core.tune.tabby)."""
    if setup.kind == "tabbyapi":
        from specdeck.core.tune.tabby import tuned_server as tabby_server

        return tabby_server()
    return LLAMA_SERVER


def finalist(search: GridResult) -> tuple[GridRow | None, float]:
    """The setting to verify (core.bench.winner.cheapest_close: the search's winner, or
    within this machine's noise of it the cheapest setting instead); with the noise share
    used."""
    share = noise(search.runs, REFERENCE)
    return cheapest_close(search.rows, GridRow.standing, lambda r: setting_cost(r.cell),
                          lambda r: noise_band(share, pairs_of(r))), share


def disturbed_verification(search_noise: float, run: BenchRun) -> str | None:
    """A note when runs of the verification strayed far from the other repeats of the same
    setting and prompt (``grid.disturbed_runs``, against the search's noise): another
    program took the cores during it. None when none did (or with one repeat, too few runs
    to tell)."""
    found = disturbed_runs(run, search_noise)
    if found is None:
        return None
    return found.note("the verification's", search_noise,
                      "Run the tune again on a quiet machine for a firmer verdict.")


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
        (r for r in search.rows if r.cell.arm.name.startswith(_cell_prefix(candidate))),
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


def verify(setup, best: GridRow, plan: BenchPlan, engine, emit, cancel,
           server: TunedServer | None = None) -> Verification:
    """The winner against no drafting and against the current setting, on ``plan``'s
    (held-out) prompts, paired and interleaved."""
    server = server or LLAMA_SERVER
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
    return Verification(
        run, summary, win.speedup, paired(run, CURRENT, WINNER) if current else None,
        current.speedup if current else None,
        lossless=win.lossless.checkable and win.lossless.compared > 0 and not win.lossless.diverged,
        check=win.lossless, not_drafting=win.not_drafting,
        drafting_unknown=win.drafting_unknown)


def paired(run: BenchRun, first: str, second: str) -> RatioSummary | None:
    """``second``'s speed over ``first``'s, paired by prompt and repeat (median of ratios)."""
    rates = {arm: {r.pair_key: r.result.stats.tokens_per_second for r in run.counted(arm)
                   if r.result.stats.decode_s > 0} for arm in (first, second)}
    ratios = [rates[second][key] / rate for key, rate in rates[first].items()
              if key in rates[second] and rate > 0]
    return summarize_ratios(ratios) if ratios else None


def _not_lossless(label: str, check, held_out: bool = True) -> str:
    """Why a winner whose output was not shown unchanged is not written: what changed where,
    or why it could not be checked."""
    if check is None:
        return f"{label}'s output could not be shown unchanged: nothing was written."
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
    if not verification.lossless:
        return Decided(candidate, drafting, False, _not_lossless(
            best.cell.label, verification.check, verification.held_out))
    where = verification.where
    if verification.not_drafting:
        return Decided(candidate, drafting, False, f"{best.cell.label} drafted nothing "
                       f"{where} ({verification.not_drafting}): a speed-up without "
                       "drafts is noise, so nothing was written.")
    if verification.drafting_unknown:  # not a drafting result either (core.bench.winner)
        return Decided(candidate, drafting, False, f"SpecDeck cannot tell whether "
                       f"{best.cell.label} drafted {where} ({verification.drafting_unknown}): "
                       "its speed-up may be noise, so nothing was written.")
    if none is None or not none.has_interval:
        return Decided(candidate, drafting, False, f"Too few verification runs of "
                       f"{best.cell.label} to tell: nothing was written. Give a larger budget.")
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
