"""A tune's drafts from the Hugging Face Hub: found beside the tune within a deadline, chosen
by their prediction within the download budget, and installed before the tune's clock starts.

The Hub's draft candidates (core.tune.hub) are ranked with the others by their prediction;
the best ranked that fit ``download_budget`` (at most ``hub.MAX_DOWNLOADS``) are installed,
after ``confirm_download`` says yes. A download that fails is noted and tuning goes on with
the other candidates; a cancel stops the tune, and what was fetched stays in the installer's
hidden staging folder (resumed next time, never taken for an installed model).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdeck.core.bench.winner import beats_no_draft
from specdeck.core.changed import MODEL, FileChanged
from specdeck.core.errors import CancelledError, SpecDeckError
from specdeck.core.llama_flags import DRAFT_SIMPLE
from specdeck.core.tune import hub
from specdeck.core.tune.candidates import Candidate, Candidates
from specdeck.core.tune.predict import Prediction
from specdeck.core.tune.run import EventSink, Phase, TuneOptions
from specdeck.core.tune.setup import Setup
from specdeck.core.units import format_bytes


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

    @property
    def changed(self) -> FileChanged | None:
        """The model folder this download filled, for the app to announce (None: nothing
        was installed)."""
        if self.status != "downloaded" or self.path is None:
            return None
        return FileChanged(self.path.parent.absolute(), MODEL)


ConfirmDownload = Callable[[tuple[Candidate, ...], int, Path], bool]
"""(the candidates to download, their bytes, the folder) -> whether to download them."""


HUB_DEADLINE_S = 120.0
"""How long the search of the Hub for drafts may take in all (a handful of listings and
header reads of a few MiB): a Hub that trickles its answers or pages for ever is left
behind at this deadline, and the tune goes on with the drafts on disk."""


HUB_STOP_S = 10.0
"""How long a stopped Hub search may take to end (its connections are shut: at once)."""


def with_hub(setup: Setup, found: Candidates, library: Path, options: TuneOptions,
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
    kept = tuple(n for n in found.not_tried if not (drafts and n.what == DRAFT_SIMPLE))
    return Candidates(found.found + tuple(drafts), kept + tuple(refused))


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
