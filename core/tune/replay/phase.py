"""The tune's replay phase: one plain run, a short calibration, every setting predicted.

``forecast(setup, candidates, tuning, options)`` does, on the user's own llama-server:

1. **the plain run**: a server without drafting, sent the warm-up request the search's
   engine sends first (core.engines.base.WARMUP_TEXT, 8 tokens) and then the tuning prompts
   (chat template, greedy, ``max_new_tokens``), streamed and kept as token ids
   (:mod:`.capture`);
2. **the calibration**: one drafting server (:data:`CALIBRATION`, a setting that drafts on
   most steps, drafts of many lengths) sent the same prompts, each right after the plain
   server, streamed: what a verification and each verified token cost in plain steps
   (:mod:`.costs`). Its /metrics counters are held against the replay of the same requests
   (``Forecast.calibration_exact``): a build whose drafters differ from the pinned one's
   shows here, and then nothing is predicted from the replay. Each prompt then runs plain a
   second time: the two plain runs' spans give the run-to-run noise of a pair, what a
   measured median's interval shrinks with its pairs (:mod:`.costs`);
3. **each draft model**: its teacher-forced pass on a plain server of the draft GGUF
   (:mod:`.draft_model`), then a drafting server of it (n_max :data:`DRAFT_CALIBRATION`)
   sent the prompts, each right after the plain server: what one of the draft's decodes
   costs in the server's own loop (:func:`.costs.fit_draft_share`);
4. **every setting** of every candidate the replay can predict (:mod:`.settings`: every
   n-gram type's lookup and draft lengths, min-hits and n-min; a draft model's n_max and
   p_min), replayed over the requests the search's servers will get, in their order; its
   predicted speed-up with an interval, best first.

Servers started: the plain one, the calibration's, two per draft model (its own, for the
pass; the target drafting with it, for its cost). Candidates the
replay cannot predict are listed with why (``Forecast.not_replayed``): the search measures
them as before.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from specdeck.core import appdirs
from specdeck.core.errors import CancelledError, SpecDeckError
from specdeck.core.llama_flags import DRAFT_SIMPLE, NGRAM_SIMPLE
from specdeck.core.llama_flags import SPEC_TYPE as SPEC_TYPE_FLAG
from specdeck.core.tune.replay.capture import Captured, capture, stream_complete
from specdeck.core.tune.replay.costs import (
    CalibrationRun,
    Predicted,
    StepCosts,
    fit_costs,
    fit_draft_share,
    predict_speedup,
    run_noise_of,
)
from specdeck.core.tune.replay.draft_model import DraftModel, forced_on_server
from specdeck.core.tune.replay.proof import Counted, counted_between, counters
from specdeck.core.tune.replay.session import Replayed, Request, Session, Setting, replay
from specdeck.core.tune.replay.settings import grid, why_not_replayed

CALIBRATION = Setting.of(NGRAM_SIMPLE, size_n=1, size_m=8)
"""Drafts on nearly every step (a one-token lookup finds the last token's previous
occurrence), from 1 to 8 tokens long: every d the fit needs, on one server."""
DRAFT_N_MAX = (1, 2, 3, 4, 6, 8, 12, 16)
DRAFT_CALIBRATION = 4
"""The n_max a draft model's cost is timed at: every step drafts (p_min 0), so every step
carries the draft's decodes; the other n_max follow from the decodes each step makes."""
DRAFT_P_MIN = (0.0, 0.5, 0.8)
WARMUP_TOKENS = 8
PRIOR = {"gpu": StepCosts(0.0, 0.02, noise=0.1), "cpu": StepCosts(0.0, 0.6, noise=0.1)}
"""Used only where no calibration could run (no n-gram type to calibrate with): the
prior of core.tune.predict.VERIFY_COST_PER_TOKEN, typical values."""


SHORT = {"size_n": "n", "size_m": "m", "min_hits": "hits", "n_match": "match",
         "n_max": "max", "n_min": "min", "p_min": "p_min"}
"""Parameter names as a table shows them: llama.cpp's lookup (n) and draft (m) lengths."""


@dataclass(frozen=True)
class SettingForecast:
    """One setting's prediction."""

    candidate: str
    """The candidate's label (core.tune.candidates.Candidate.label)."""
    setting: Setting
    flags: tuple[str, ...]
    """Its drafting flags for llama-server (a draft model's -md included)."""
    predicted: Predicted
    replayed: Replayed
    """The replay's totals over the measured requests (per-position counts, drafts)."""

    @property
    def label(self) -> str:
        return self.setting.label

    @property
    def k(self) -> int:
        """The most tokens it drafts a step."""
        return self.replayed.n_max

    @property
    def short_label(self) -> str:
        """The candidate and its parameters in a few words ("ngram-map-k n=3 m=8")."""
        params = self.setting.params_of(self.setting.kinds[0])
        words = [f"{SHORT.get(k, k)}={v:g}" for k, v in params.items()]
        return " ".join([self.candidate, *words])

    def to_json(self) -> dict:
        return {"candidate": self.candidate, "setting": self.setting.label,
                "flags": list(self.flags), "predicted": self.predicted.to_json(),
                "replayed": self.replayed.to_json(), "k": self.k}


@dataclass(frozen=True)
class Forecast:
    """What the replay phase found: every setting predicted, best first."""

    settings: tuple[SettingForecast, ...]
    costs: StepCosts
    calibrated: bool
    """The costs come from this server's calibration (False: the prior)."""
    calibration_exact: bool | None
    """The calibration server's counters equal the replay's (None: not checked)."""
    not_replayed: tuple[tuple[str, str], ...] = ()
    """(candidate, why): measured by the search instead."""
    servers_started: int = 0
    seconds: float = 0.0
    notes: tuple[str, ...] = ()
    requests: int = 0
    """Tuning prompts the predictions rest on."""

    def best_of(self, candidate: str) -> SettingForecast | None:
        return next((s for s in self.settings if s.candidate == candidate), None)

    def to_json(self) -> dict:
        return {"settings": [s.to_json() for s in self.settings], "costs": self.costs.to_json(),
                "calibrated": self.calibrated, "calibration_exact": self.calibration_exact,
                "not_replayed": [list(n) for n in self.not_replayed],
                "servers_started": self.servers_started, "seconds": self.seconds,
                "notes": list(self.notes), "requests": self.requests}


@dataclass
class _Servers:
    """The servers this phase starts, all stopped when it ends."""

    binary: str
    log_dir: Path
    started: int = 0
    running: list = field(default_factory=list)

    def start(self, model: Path, flags: tuple[str, ...], name: str,
              cancel: threading.Event | None):
        from specdeck.core.servers.llama_server import LaunchProfile, ManagedServer
        from specdeck.core.servers.transport import Base

        self.log_dir.mkdir(parents=True, exist_ok=True)
        server = ManagedServer(LaunchProfile(self.binary, str(model), flags),
                               self.log_dir / f"replay-{name}-{int(time.time())}.log")
        self.started += 1
        server.start(cancel)
        self.running.append(server)
        return server, Base.parse(server.url)

    def key(self, model: Path, flags: tuple[str, ...]) -> str | None:
        """The key a server launched with ``flags`` wants on every request (None: none)."""
        from specdeck.core.servers.llama_server import LaunchProfile

        return LaunchProfile(self.binary, str(model), flags).api_key()

    def stop(self, server) -> None:
        server.stop()
        if server in self.running:
            self.running.remove(server)

    def stop_all(self) -> None:
        for server in list(self.running):
            self.stop(server)


def server_shape(flags: tuple[str, ...]) -> tuple[int, float]:
    """The slots (``-np``; auto: 4) and the slot similarity (``-sps``; 0.1) of a llama-server
    with these flags: which slot a request lands on, whose drafter state it meets."""
    from specdeck.core.servers.llama_server import flag_value
    from specdeck.core.tune.replay.session import DEFAULT_SLOTS, SLOT_SIMILARITY

    try:
        slots = int(flag_value(flags, "-np", "--parallel") or -1)
    except ValueError:
        slots = -1
    try:
        similarity = float(flag_value(flags, "-sps", "--slot-prompt-similarity")
                           or SLOT_SIMILARITY)
    except ValueError:
        similarity = SLOT_SIMILARITY
    return (slots if slots > 0 else DEFAULT_SLOTS), similarity


def _draft_settings() -> list[Setting]:
    return [Setting.of(DRAFT_SIMPLE, n_max=n, p_min=p) for n in DRAFT_N_MAX
            for p in DRAFT_P_MIN]


def _with(flags: tuple[str, ...], flag: str, value: str) -> tuple[str, ...]:
    from specdeck.core.servers.llama_server import with_flag

    return with_flag(flags, flag, value)


def forecast(setup, candidates, prompts, max_new_tokens: int, device: str = "cpu",
             repeats: int = 1, emit=None, cancel: threading.Event | None = None,
             log_dir: Path | None = None) -> Forecast:
    """Predict every setting of ``candidates`` (core.tune.candidates.Candidate) on
    ``prompts`` (core.bench.suites.Prompt, the tuning prompts) for ``setup``'s llama-server,
    as a search that runs them ``repeats`` times would measure them. Raises SpecDeckError
    when a server will not start; CancelledError on cancel."""
    from specdeck.core.engines.base import WARMUP_TEXT
    from specdeck.core.tune.run import Phase

    say = emit or (lambda _e: None)
    started = time.monotonic()
    servers = _Servers(setup.binary, log_dir or appdirs.cache_dir() / "llama-server-logs")
    notes: list[str] = []
    not_replayed: list[tuple[str, str]] = []
    ngram, drafts = [], []
    for c in candidates:
        why = why_not_replayed(c.spec_type, setup.common)
        if c.spec_type == DRAFT_SIMPLE:
            drafts.append(c)
        elif why:
            not_replayed.append((c.label, why))
        else:
            ngram.append(c)
    # every server here is launched with the setup's own flags: its --api-key (or
    # --api-key-file) is the key each request carries, as the tune's own arms send it
    key = servers.key(setup.target, setup.common)
    try:
        say(Phase("replay", "One plain run of the tuning prompts, kept as token ids"))
        plain, base = servers.start(setup.target, setup.common, "plain", cancel)
        warm = capture(base, [("warm-up", WARMUP_TEXT)], WARMUP_TOKENS, api_key=key,
                       cancel=cancel)
        runs = capture(base, [(p.id, p.text) for p in prompts], max_new_tokens, api_key=key,
                       cancel=cancel)
        measured = [r.request for r in runs]
        # what a fresh server of each setting gets: the warm-up, then the prompts (a repeat
        # runs on the same server, or on a restarted one for a drafter that remembers:
        # core.servers.engine; either way the first pass is what is predicted)
        sequence = [w.request for w in warm] + measured
        costs, calibrated, exact = _calibrate(setup, servers, base, runs, device, notes, say,
                                              cancel, key)
        forced, drafting = _forced(setup, servers, drafts, sequence, measured, base,
                                   not_replayed, say, cancel, key, costs)
        servers.stop(plain)
        say(Phase("replay", "Predicting every setting from the plain run"))
        out = []
        shape = server_shape(setup.common)
        for c in ngram:
            out += _predict(c.label, c.spec_type, grid(c.spec_type), c.flags, sequence,
                            measured, costs, repeats, None, shape)
        for c in drafts:
            if c.label in forced:
                out += _predict(c.label, DRAFT_SIMPLE, _draft_settings(), c.flags, sequence,
                                measured, drafting[c.label], repeats, forced[c.label], shape)
    finally:
        servers.stop_all()
    if exact is False:
        notes.append("The calibration server's counts differ from the replay's: this "
                      "llama-server's drafters are not the build SpecDeck replays, so the "
                      "search measures every candidate instead.")
        out = []
    # best first by the geometric mean over prompts; of equals, one that drafts at all (one
    # that never does is no drafting under another name), then the one drafting less
    out.sort(key=lambda s: (-round(s.predicted.mean, 4), s.replayed.drafts == 0,
                            s.replayed.drafted))
    return Forecast(tuple(out), costs, calibrated, exact, tuple(not_replayed),
                    servers.started, time.monotonic() - started, tuple(notes), len(measured))


def _predict(candidate: str, kind: str, settings: list[Setting], flags: tuple[str, ...],
             sequence: list[Request], measured: list[Request], costs: StepCosts, repeats: int,
             forced, shape: tuple[int, float] = (4, 0.1)) -> list[SettingForecast]:
    from specdeck.core.llama_flags import SPEC_TYPE

    out = []
    first = len(sequence) - len(measured)
    for setting in settings:
        model = None
        if forced is not None:
            params = setting.params_of(DRAFT_SIMPLE)
            model = DraftModel(forced, n_max=params.get("n_max"), p_min=params.get("p_min"))
        session = Session(setting, n_slots=shape[0], similarity=shape[1], draft_model=model)
        each = [session.run(r) for r in sequence]
        each = each[first:first + len(measured)]
        total = Replayed(0)
        for r in each:
            total.add(r)
        predicted = predict_speedup(costs, each, draft_model=forced is not None,
                                    pairs=len(measured) * max(1, repeats))
        own = tuple(f for f in flags if f not in (SPEC_TYPE, kind))
        setting_flags = setting.flags() + own
        out.append(SettingForecast(candidate, setting, setting_flags, predicted, total))
    return out


def _calibrate(setup, servers: _Servers, base, runs: list[Captured], device: str,
               notes: list[str], say, cancel,
               key: str | None = None) -> tuple[StepCosts, bool, bool | None]:
    """The costs from a calibration server, or the prior where none can run."""
    from specdeck.core.servers.llama_server import binary_help
    from specdeck.core.tune.run import Phase

    info = binary_help(setup.binary)
    if info is None or CALIBRATION.kinds[0] not in info.spec_types:
        notes.append(f"No calibration ({CALIBRATION.kinds[0]} is not a --spec-type of this "
                     "server): the step costs are the prior's.")
        return PRIOR.get(device, PRIOR["cpu"]), False, None
    say(Phase("replay", f"Calibrating the step costs ({CALIBRATION.label})"))
    server, cal = servers.start(setup.target, setup.common + CALIBRATION.flags(),
                                "calibration", cancel)
    try:
        before = counters(cal, key)
        pairs, twice = [], []
        for run in runs:
            if cancel is not None and cancel.is_set():
                raise CancelledError("Tune cancelled.")
            r = run.request
            plain = stream_complete(base, r.prompt, r.n_predict, api_key=key, cancel=cancel)
            drafted = stream_complete(cal, r.prompt, r.n_predict, api_key=key, cancel=cancel)
            again = stream_complete(base, r.prompt, r.n_predict, api_key=key, cancel=cancel)
            pairs.append((r, plain, drafted))
            twice.append((plain.span_s, again.span_s))
        counted = counted_between(before, counters(cal, key),
                                  sum(len(d.tokens) for _, _, d in pairs))
    finally:
        servers.stop(server)
    requests = [r for r, _, _ in pairs]
    _, each = replay(CALIBRATION, requests)
    own = [Request(r.prompt, d.tokens, r.n_predict, d.stop) for r, _, d in pairs]
    own_total, _ = replay(CALIBRATION, own)
    exact = Counted.of(own_total) == counted
    usable = [CalibrationRun(p.arrivals, d.arrivals, e)
              for (r, p, d), e in zip(pairs, each, strict=True) if d.tokens == r.output]
    try:
        costs = fit_costs(usable)
    except ValueError as exc:
        notes.append(f"The calibration could not fit the step costs ({exc}): the prior's.")
        return PRIOR.get(device, PRIOR["cpu"]), False, exact
    if len(usable) < len(pairs):
        notes.append(f"{len(pairs) - len(usable)} of the calibration's {len(pairs)} outputs "
                     "changed with drafting (a near-tie the batch shape flips): left out of "
                     "the fit.")
    costs = replace(costs, run_noise=run_noise_of([a for a, _ in twice], [b for _, b in twice]),
                    run_pairs=len(twice))
    return costs, True, exact


def _forced(setup, servers: _Servers, drafts, sequence: list[Request],
            measured: list[Request], plain_base, not_replayed: list[tuple[str, str]], say, cancel, key: str | None = None,
            costs: StepCosts | None = None) -> tuple[dict, dict]:
    """Each draft model's teacher-forced passes over ``sequence`` (what a fresh server gets:
    the warm-up, then the ``measured`` requests; keyed by candidate) and the step costs with
    what one of its decodes costs (``costs`` with ``draft_share``): a drafting server of the
    target and that draft (n_max ``DRAFT_CALIBRATION``) is sent each measured request right
    after the plain server at ``plain_base``, so both are timed in the same seconds of a
    machine whose speed drifts, and its steps are replayed from the pass
    (:func:`.costs.fit_draft_share`)."""
    from specdeck.core.tune.run import Phase

    costs = costs or PRIOR["cpu"]
    forced, drafting = {}, {}
    for c in drafts:
        say(Phase("replay", f"The teacher-forced pass of {c.draft.name}"))
        try:
            server, base = servers.start(c.draft, _with(setup.common, "-np", "1"),
                                         "draft", cancel)
        except SpecDeckError as exc:
            not_replayed.append((c.label, f"its plain server did not start ({exc.what})"))
            continue
        try:
            passes = {}
            for r in sequence:
                if DraftModel.key(r) not in passes:
                    passes[DraftModel.key(r)] = forced_on_server(base, r, api_key=key,
                                                                 cancel=cancel)
        finally:
            servers.stop(server)
        forced[c.label] = passes
        say(Phase("replay", f"Timing {c.draft.name}'s decodes on a drafting server"))
        try:
            drafting[c.label] = _draft_costs(setup, servers, c, passes, sequence, measured,
                                             plain_base, costs, cancel, key)
        except (SpecDeckError, ValueError) as exc:
            del forced[c.label]
            why = exc.what if isinstance(exc, SpecDeckError) else str(exc)
            not_replayed.append((c.label, f"its drafting server could not be timed ({why})"))
    return forced, drafting


def _draft_costs(setup, servers: _Servers, candidate, passes: dict, sequence: list[Request],
                 measured: list[Request], plain_base, costs: StepCosts, cancel,
                 key: str | None) -> StepCosts:
    setting = Setting.of(DRAFT_SIMPLE, n_max=DRAFT_CALIBRATION)
    own = tuple(f for f in candidate.flags if f not in (SPEC_TYPE_FLAG, DRAFT_SIMPLE))
    flags = setup.common + setting.flags() + own + setup.draft_placement
    server, base = servers.start(setup.target, flags, "draft-timing", cancel)
    try:
        # what the search's server gets first (a fresh drafting server's first request pays
        # for its buffers)
        warm = sequence[0]
        stream_complete(base, warm.prompt, warm.n_predict, api_key=key, cancel=cancel)
        session = Session(setting, n_slots=server_shape(setup.common)[0],
                          similarity=server_shape(setup.common)[1],
                          draft_model=DraftModel(passes, n_max=DRAFT_CALIBRATION))
        each = [session.run(r) for r in sequence][len(sequence) - len(measured):]
        runs = []
        for r, replayed in zip(measured, each, strict=True):
            if cancel is not None and cancel.is_set():
                raise CancelledError("Tune cancelled.")
            plain = stream_complete(plain_base, r.prompt, r.n_predict, api_key=key,
                                    cancel=cancel)
            drafted = stream_complete(base, r.prompt, r.n_predict, api_key=key, cancel=cancel)
            if drafted.tokens == r.output:
                runs.append(CalibrationRun(plain.arrivals, drafted.arrivals, replayed))
    finally:
        servers.stop(server)
    share, se, noise, n = fit_draft_share(costs, runs)
    return costs.with_draft(share, se, noise, n)
