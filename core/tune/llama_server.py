"""Tuning a llama-server (``specdeck tune`` on a llama-server or a llama-swap cmd), as
core.tune.tabby tunes a TabbyAPI: what its binary can draft with and which drafts to try
(the spec types its ``--help`` lists, draft GGUFs on disk, the Hub's), the downloads, the
replay that predicts every setting from one plain run, and its arms and settings for the
search and verification that core.tune.run runs for both.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

from specdeck.core.bench.grid import Cell, GridRow
from specdeck.core.bench.plan import Arm, BenchPlan
from specdeck.core.bench.runner import choose_prompts
from specdeck.core.engines import SERVER_ENGINE
from specdeck.core.engines.base import NO_DRAFT
from specdeck.core.errors import CancelledError, InvalidInputError, SpecDeckError
from specdeck.core.llama_flags import DRAFT_SIMPLE
from specdeck.core.servers.arms import ServerArm
from specdeck.core.servers.llama_server import (
    LaunchProfile,
    binary_help,
    drafter_from_flags,
    drafting_flags,
    launch_bytes,
    servers_that_fit,
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
from specdeck.core.tune.downloads import ConfirmDownload, download_phase, with_hub
from specdeck.core.tune.predict import history_note, read_history
from specdeck.core.tune.run import (
    REFERENCE,
    REPLAY_SEARCH_REPEATS,
    CandidatesFound,
    Decided,
    EventSink,
    Phase,
    TunedServer,
    TuneOptions,
    TuneResult,
    cancelled_reading,
    device_of,
    ranked,
    search_and_decide,
    split_prompts,
    tune_result,
)
from specdeck.core.tune.setup import Setup


def tune_llama(setup: Setup, options: TuneOptions, engine=None,
               on_event: EventSink | None = None, cancel: threading.Event | None = None,
               history: list[dict] | None = None,
               confirm_download: ConfirmDownload | None = None) -> TuneResult:
    """``core.tune.run.tune`` for a llama-server: its candidates (the spec types its
    ``--help`` lists, the draft GGUFs on disk, the Hub's), the downloads, the replay, then the
    same search, verification and decision."""
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
    drafts_with = info.implied_draft or info.method(DRAFT_SIMPLE)
    if options.download_budget > 0 and DRAFT_SIMPLE in methods and not any(
            n.what == DRAFT_SIMPLE and "draft length" in n.why for n in found.not_tried):
        emit(Phase("candidates", f"Searching the Hub for {setup.facts.family} drafts"))
        found = with_hub(setup, found, library, options, notes, cancel)
        if drafts_with is not None:  # the Hub's drafts run as this build drafts with a model
            from specdeck.core.tune.candidates import kept_values

            found = replace(found, found=tuple(
                replace(c, k_flag=drafts_with.k_flag, implied=drafts_with.implied,
                        kept=kept_values(drafts_with, setup.flags))
                if c.hub is not None else c for c in found.found))
    if history is None:
        notes += filter(None, [history_note()])
    history = read_history() if history is None else history
    predicted = ranked(found, setup, options, history)
    emit(CandidatesFound(tuple(predicted), found.not_tried))
    phase_s["candidates"] = time.monotonic() - started
    if cancel.is_set():
        return cancelled_reading(setup, options, found, phase_s, notes)
    if not predicted:
        raise InvalidInputError(f"{setup.where}: nothing to try ({found.why_none}).",
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
               f"Nothing left to try ({found.why_none}): nothing was written.")
        return tune_result(setup, options, (), found, None, None, Decided(None, None, False, why),
                       phase_s, cancel.is_set(), notes, downloads)

    forecast = None
    if options.replay:
        t0 = time.monotonic()
        forecast, predicted = replay_phase(setup, predicted, options,
                                           device_of(setup, options), emit, cancel,
                                           notes)
        phase_s["replay"] = time.monotonic() - t0
        if cancel.is_set():
            return tune_result(setup, options, (), found, None, None,
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
    prompts = choose_prompts(BenchPlan(engine=SERVER_ENGINE, suites=options.suites,
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


def reference_arm(setup: Setup) -> Arm:
    """No drafting: the user's flags without the drafting ones."""
    return Arm(REFERENCE, NO_DRAFT, ServerArm(launch=LaunchProfile(setup.binary, str(setup.target),
                                                                   setup.common)))


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
        name = candidate.arm_prefix + ("default" if value is None else value)
        label = candidate.label + ("" if value is None else f" k={value}")
        settings = () if value is None else (("k", value),)
        launch = LaunchProfile(setup.binary, str(setup.target), args)
        cells.append(Cell(Arm(name, drafter_from_flags(args, info), ServerArm(launch=launch)),
                          label, settings))
    return cells


def current_arm(setup: Setup, name: str) -> Arm | None:
    """The user's own drafting flags as an arm (None when the setup does not draft)."""
    if not setup.drafting:
        return None
    launch = LaunchProfile(setup.binary, str(setup.target), setup.flags)
    return Arm(name, drafter_from_flags(setup.flags, binary_help(setup.binary)),
               ServerArm(launch=launch))


def _drafting(row: GridRow) -> tuple[str, ...]:
    """What a setting would write: its llama-server drafting flags."""
    return drafting_flags(row.cell.arm.server.launch.args)


def _engine(setup: Setup, predicted: list):
    """An engine that keeps as many llama-servers up as the largest setting lets fit."""
    from specdeck.core.servers.engine import ServerEngine

    flags = [setup.common + c.flags for c, _ in predicted] or [setup.common]
    biggest = max(launch_bytes(LaunchProfile(setup.binary, str(setup.target), f)) for f in flags)
    return ServerEngine(max_servers=servers_that_fit(biggest, setup.on_gpu))


LLAMA_SERVER = TunedServer(reference_arm=reference_arm, current_arm=current_arm,
                           cells=candidate_cells, drafting=_drafting, engine=_engine,
                           model=lambda setup: str(setup.target))
