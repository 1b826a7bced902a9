"""ServerEngine: the Engine protocol over HTTP, with arms that are servers.

The runner treats it like any engine, with two differences it asks about by name:
``prepare_plan`` (check every arm before anything runs: reachable, the right kind, the
reference not drafting, launch flags valid) and ``activate_arm`` (switch to an arm's server,
starting its llama-server if SpecDeck manages it). Prompts go as text; the server applies
its own chat template and tokenizer, so token ids are not compared: losslessness is checked
on the text (see core.engines.lossless.compare_text).

This module checks a plan's arms, switches between them and turns a stream into a run's
result (``ServerRun``), the same way for every kind of server. Where kinds differ it asks the
arm's driver (core.servers.drivers: one per kind, chosen by ``ServerInfo.kind``). The rest is
where its concept is: the servers SpecDeck launched (core.servers.pool), the request each kind
is sent (core.servers.payload), and the Prometheus counters around a run
(core.servers.counters).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from specdeck.core.engines import SERVER_ENGINE, SERVER_MODEL
from specdeck.core.engines.base import (
    NO_DRAFT,
    WARMUP_TEXT,
    DrafterSpec,
    EventCallback,
    GenerationEvent,
    GenerationRequest,
    GenerationResult,
    GenerationStats,
    LoadedModel,
    LoadProgress,
    LoadSpec,
    ProgressCallback,
    StopReason,
)
from specdeck.core.errors import CancelledError, InvalidInputError
from specdeck.core.servers import counters
from specdeck.core.servers.arms import ServerArm
from specdeck.core.servers.drivers import Driver, Switch, engine_drivers, launched_kind
from specdeck.core.servers.kinds import TRAITS, ServerKind
from specdeck.core.servers.payload import request_body
from specdeck.core.servers.pool import ServerPool
from specdeck.core.servers.probe import ServerInfo, probe
from specdeck.core.servers.readings import (
    ServerReport,
    StreamReading,
    check_acceptance,
    check_positions,
)
from specdeck.core.servers.transport import Base, ServerError, stream_sse

log = logging.getLogger(__name__)


GENERATION_TIMEOUT_S = 120.0
"""A generation's total deadline: this much (a long prompt's prefill) ..."""
GENERATION_S_PER_TOKEN = 1.0
"""... plus this much per token asked for (a server slower than one token a second is not
worth benchmarking); past it the run fails, so a server that never ends its stream or keeps
it alive with comments cannot hold a run for ever."""


@dataclass(frozen=True)
class ServerRun:
    """A server run's own account beside the client's clock (GenerationResult.server)."""

    report: ServerReport
    client_tokens_per_second: float | None
    """(tokens - 1) / (last token's arrival - first token's arrival)."""
    time_to_first_token_s: float | None
    chunks: int
    url: str
    metrics_drafted: int | None = None
    """Difference of the server's Prometheus counters around the run (vLLM)."""
    metrics_accepted: int | None = None
    drafting_flags: tuple[str, ...] | None = None
    """The llama-server drafting flags the arm ran with, where SpecDeck knows them (launched,
    a router's model, a llama-swap model); None otherwise."""
    problems: tuple[str, ...] = ()
    """What the server reported that failed its checks (the report's, the counters'): those
    figures were not used."""
    speed_problem: str = ""
    """Why this run has no decode rate ("" when it has one): its stats' decode_s is 0 then,
    and no speed-up is computed from it."""
    acceptance_problem: str = ""
    """Why the draft counts the server gave are not usable ("" when they are or none came)."""
    lost: tuple[str, ...] = ()
    """Data the stream lost (events that were not JSON): the run's output is not compared."""
    draft_source: str = ""
    """Where this run's drafted / accepted / verify steps / positions came from: the
    request's own report (its field), "Prometheus counters around the run", or "" (none)."""
    mean_acceptance_length: float | None = None
    """A mean acceptance length exactly as the server gave it (never computed from counts):
    this request's (vLLM, SGLang per request) or, failing that, SGLang's gauge after the run."""
    mean_acceptance_source: str = ""
    """Its field and what it means (a gauge is the server's recent average, not this run's)."""
    gauges: Any = None
    """SGLang: its acceptance gauges after the run (core.servers.sglang.Gauges)."""
    cross_check: str = ""
    """Where a request's own counts and the counters' growth both exist (vLLM): whether they
    agree; the request's own counts are used either way (they are this request's alone)."""
    options: tuple[tuple[str, int], ...] = ()
    """Drafting options the run's requests carried (Ollama's draft_num_predict)."""
    drafts_by_construction: str = ""
    """Why this run drafted at every step whatever it reported (a TabbyAPI that loaded a
    draft model: its ExLlama backend drafts with it at every step); "" when that is not
    known. Then a run without draft counts still is a drafting result."""


class ServerEngine:
    name = SERVER_ENGINE

    def __init__(self, exclusive: bool = False, log_dir: Path | None = None,
                 max_servers: int | None = None):
        self._exclusive = exclusive
        self.exclusive = exclusive
        """Run one managed llama-server at a time (they share one GPU): given here, or by
        the plan (BenchPlan.one_server_at_a_time)."""
        self.max_servers = max_servers
        """At most this many managed llama-servers up at once (None: no limit): starting
        another stops the one used longest ago, so a grid keeps its reference and the
        setting of the moment loaded and restarts only what must go."""
        self._pool = ServerPool(log_dir)
        self._loaded: LoadedModel | None = None
        self._infos: dict[str, ServerInfo] = {}
        self._arm = None
        self._plan_arms: tuple = ()
        self._reference: str | None = None
        """The no-draft reference arm's name (None: the arms run have none)."""
        self._flags_now: tuple[str, ...] | None = None
        """The active arm's drafting flags, where SpecDeck knows them (``arm_flags``)."""
        self._drivers = engine_drivers()
        """One driver per server kind (core.servers.drivers), kept with the engine."""
        self._driver: Driver = self._drivers[ServerKind.OPENAI]
        """The active arm's."""
        self._base: Base | None = None
        self._model: str | None = None
        self._key: str | None = None
        self._info: ServerInfo | None = None
        """What the probe said of the active arm's server."""
        self.restore_problems: list[str] = []
        self.restarts = 0
        """Servers restarted so that a remembering drafter meets a prompt afresh."""
        self._warmup: tuple[int, int] = (1, 8)
        """The plan's warm-up runs and their tokens, repeated after such a restart."""

    # Engine protocol ---------------------------------------------------------------------
    @property
    def loaded(self) -> LoadedModel | None:
        return self._loaded

    def load(self, spec: LoadSpec, progress: ProgressCallback | None = None,
             cancel: threading.Event | None = None) -> LoadedModel:
        raise InvalidInputError("The server engine's arms are servers: run it with a plan "
                                "whose arms name servers (specdeck bench --server URL ...).")

    def set_drafter(self, drafter: DrafterSpec, progress=None, cancel=None) -> LoadedModel:
        raise InvalidInputError("A server arm drafts as its server is configured.")

    def tokenize(self, text: str, apply_chat_template: bool = False) -> list[int]:
        return []  # the server tokenizes; prompts go as text

    @property
    def starts(self) -> int:
        """Servers this engine started (the restarts among them)."""
        return self._pool.starts

    def running(self) -> dict[str, int]:
        """Arm name -> process id of each llama-server this engine started and keeps up."""
        return self._pool.running()

    def unload(self) -> None:
        self._pool.stop_all()
        self._loaded = None
        problems = [p for driver in self._drivers.values() for p in driver.end()]
        self.restore_problems.extend(problems)
        for problem in problems:
            log.warning(problem)

    # Plans -------------------------------------------------------------------------------
    def prepare_plan(self, plan, progress: ProgressCallback | None = None,
                     cancel: threading.Event | None = None) -> LoadedModel:
        """Check every arm before the first run; probe the running servers."""
        self._warmup = (plan.warmup, plan.warmup_tokens)
        self.exclusive = self._exclusive or plan.one_server_at_a_time
        return self.prepare_arms(tuple(plan.arms), plan.model, progress, cancel)

    def prepare_arms(self, arms: tuple, model: str | None = None,
                     progress: ProgressCallback | None = None,
                     cancel: threading.Event | None = None, *,
                     reference: bool = True) -> LoadedModel:
        """:meth:`prepare_plan`'s checks for ``arms`` without a plan: the first is the
        plan's no-draft reference unless ``reference`` is False (one drafting arm run on its
        own, as core.tune.apply proves a written file: :meth:`activate_arm` then
        :meth:`generate`)."""
        say = progress or (lambda _p: None)
        self._plan_arms = tuple(arms)
        self._reference = arms[0].name if reference and arms else None
        missing = [a.name for a in arms if a.server is None]
        # An engine kept between plans (a grid sweep) keeps the servers this plan uses again
        # (the reference); with ``max_servers`` it keeps the others too while they fit (a
        # search's next round uses them again; the least recently used go first), without it
        # it stops them. A server whose arm now names another launch is stopped.
        wanted = {a.name: a.server.managed for a in arms if a.server is not None}
        self._pool.retain(wanted, keep_others=bool(self.max_servers))
        if missing:
            raise InvalidInputError(f"Arms {', '.join(missing)} name no server.",
                                    "Every arm of a server plan is a URL or a launch profile.")
        for arm in arms:
            server: ServerArm = arm.server
            if cancel is not None and cancel.is_set():
                raise CancelledError()
            if server.managed is not None:
                self._drivers[launched_kind(server)].check_launch(arm)
                continue
            say(LoadProgress(f"Probing {server.where}"))
            try:
                info = probe(server.url, server.api_key(), server.kind)
            except ServerError as exc:
                raise ServerError(f"Arm {arm.name}: {exc.what}", exc.fix) from None
            self._infos[arm.name] = info
            self._drivers[info.kind].check(arm, info, reference=arm.name == self._reference)
        self._loaded = LoadedModel(engine=self.name, model_path=Path(model or SERVER_MODEL),
                                   device="server", dtype="as served", drafter=NO_DRAFT,
                                   max_seq_len=0, vocab_size=0,
                                   notes=tuple(self._notes(arms)))
        return self._loaded

    def _notes(self, arms: tuple) -> list[str]:
        notes = []
        for arm in arms:
            info = self._infos.get(arm.name)
            kind = info.kind if info else launched_kind(arm.server)  # not started yet
            traits = TRAITS[kind]
            where = info.url if info else arm.server.where
            accepted = self._drivers[kind].acceptance(arm, info)
            notes.append(f"{arm.name}: {traits.title} at {where}; acceptance: {accepted}")
            drafting = _drafting(arm, info)
            if drafting is not None:
                notes.append(f"{arm.name}: {drafting.full} (said before the run)")
            notes.extend(self._drivers[kind].notes(arm, info, arm.name == self._reference,
                                                   first=arm is arms[0]))
            remembers = self.remembers(arm) if arm.server is not None else ""
            if remembers:
                notes.append(f"{arm.name}: {remembers}. " + (
                    "SpecDeck restarts this llama-server before any prompt it has already "
                    "run and warms it up on other text, so no measured run is drafted from an "
                    "earlier run of its own prompt" if arm.server.managed is not None else
                    "SpecDeck cannot restart a server it did not start: a prompt's repeats "
                    "are drafted from its earlier output and flatter this arm (run one "
                    "repeat, or let SpecDeck launch the server)"))
            if not traits.cache_off:
                notes.append(f"{arm.name}: this server keeps a prompt cache a client cannot "
                             "turn off; arms alternate which runs a prompt first, so the cache "
                             "favours none, and decode tok/s excludes the prefill it speeds up")
        return notes

    def activate_arm(self, arm, progress: ProgressCallback | None = None,
                     cancel: threading.Event | None = None) -> LoadedModel:
        server: ServerArm = arm.server
        say = progress or (lambda _p: None)
        if server.managed is not None:
            running = self._pool.get(arm.name)
            kind = launched_kind(server)
            if running is None or running.process is None:
                self._pool.make_room(1 if self.exclusive else self.max_servers)
                say(LoadProgress(f"Starting {TRAITS[kind].title} for {arm.name}"))
                running = self._pool.start(arm.name, server.tabby_launch or server.launch,
                                           server.tabby_launch is not None, cancel)
            self._pool.use(arm.name)
            url = running.url
            self._infos[arm.name] = probe(url, server.api_key(), kind)
        else:
            url = server.url
        info = self._infos[arm.name]
        driver = self._drivers[info.kind]
        model = driver.request_model(server, info)
        key = server.api_key()
        driver.activate(arm, info, Switch(
            url, model, key, reference=arm.name == self._reference, previous=self._arm,
            plan_arms=self._plan_arms, exclusive=self.exclusive,
            say=lambda text, fraction=None: say(LoadProgress(text, fraction)), cancel=cancel))
        self._arm = arm
        self._base = Base.parse(url)
        self._driver = driver
        self._model = model
        self._key = key
        self._info = info
        from specdeck.core.servers.llama_server import drafting_flags

        flags = self.arm_flags(arm)
        self._flags_now = None if flags is None else drafting_flags(flags)
        self._loaded = replace(self._loaded, drafter=arm.drafter,
                               model_path=Path(info.model or url)) if self._loaded else None
        return self._loaded

    def _options(self) -> dict[str, int]:
        """The drafting options the active arm's requests carry (its driver's)."""
        return self._driver.options(self._arm, self._arm.name == self._reference)

    def remembers(self, arm) -> str:
        """How ``arm``'s drafter keeps earlier requests' text (``llama_server.remembers``: a
        prompt run again is then drafted from its earlier output); "" when it does not or its
        flags are unknown."""
        from specdeck.core.servers.llama_server import remembers

        flags = self.arm_flags(arm)
        if flags:
            return remembers(flags)
        info = self._infos.get(arm.name)
        return "" if info is None else self._drivers[info.kind].remembers(info)

    def _afresh(self, request: GenerationRequest, cancel: threading.Event | None) -> None:
        """A launched server whose drafter remembers is restarted before a prompt it has
        already run (and warmed up as the plan warms up, on other text), so no measured run
        is drafted from an earlier run of its own prompt."""
        arm = self._arm
        seen = self._pool.seen.get(arm.name)
        if seen is None or request.prompt == WARMUP_TEXT or arm.server.managed is None \
                or not self.remembers(arm):
            return
        if request.prompt in seen:
            self._pool.seen[arm.name] = set()  # a start that fails leaves no stale record
            self._pool.stop(arm.name)
            self.restarts += 1
            self.activate_arm(arm, None, cancel)
            runs, tokens = self._warmup
            for _ in range(runs):
                self._generate(replace(request, prompt=WARMUP_TEXT, prompt_ids=None,
                                       max_new_tokens=min(request.max_new_tokens, tokens)),
                               None, cancel)
        self._pool.seen[arm.name].add(request.prompt)

    def arm_flags(self, arm) -> tuple[str, ...] | None:
        """The llama-server flags that set up ``arm``'s drafting, where SpecDeck knows them:
        a launched arm's own flags, or its driver's (a router model's, a llama-swap model's
        drafting flags). None otherwise."""
        if arm.server.launch is not None:
            return tuple(arm.server.launch.args)
        info = self._infos.get(arm.name)
        return None if info is None else self._drivers[info.kind].arm_flags(arm, info)

    # Generation --------------------------------------------------------------------------
    def generate(self, request: GenerationRequest, on_event: EventCallback | None = None,
                 cancel: threading.Event | None = None) -> GenerationResult:
        if self._base is None or self._arm is None:
            raise InvalidInputError("No server arm is active.")
        if not request.prompt:
            raise InvalidInputError("A server arm needs the prompt's text.")
        self._afresh(request, cancel)
        result = self._generate(request, on_event, cancel)
        if result.stats.stop_reason is not StopReason.CANCELLED:
            self._pool.answered(self._arm.name)
        return result

    def keep_only(self, names: set[str]) -> None:
        """Stop the launched servers of every arm not in ``names`` (a search's dropped
        settings), so those still needed are not the ones ``max_servers`` makes room from."""
        self._pool.keep_only(names)

    def is_warm(self, arm) -> bool:
        """Whether ``arm`` is a server SpecDeck started that has answered a request since it
        started: its first-request costs are paid, so a plan need not warm it up again
        (servers SpecDeck did not start, or reloads on them, are always warmed up)."""
        return arm.server.managed is not None and self._pool.is_warm(arm.name)

    def _generate(self, request: GenerationRequest, on_event: EventCallback | None,
                  cancel: threading.Event | None) -> GenerationResult:
        route, body = request_body(request, self._driver.kind, self._model, self._arm,
                                   self._options())
        emit = on_event or (lambda _e: None)
        counters_before = counters.read_counters(self._base, self._key) \
            if self._driver.counters_around_run and self._info.metrics else None
        sent = time.perf_counter()
        reading = StreamReading(self._driver.kind.value, sent,
                                max_tokens=request.max_new_tokens)
        stop = None
        response_id = None
        deadline = GENERATION_TIMEOUT_S + GENERATION_S_PER_TOKEN * request.max_new_tokens
        try:
            for event in stream_sse(self._base, route, body, self._key, cancel,
                                    timeout=deadline):
                if response_id is None and isinstance(event.data, dict) \
                        and isinstance(event.data.get("id"), str):
                    response_id = event.data["id"]
                text = reading.add(event)
                if reading.overran:
                    break  # closing the stream stops the server's generation too
                if text:
                    n = len(reading.arrivals)
                    emit(GenerationEvent(text=text, token_ids=(), from_draft=(), step=n,
                                         drafted=0, accepted=0, new_tokens=n, total_drafted=0,
                                         total_accepted=0,
                                         elapsed_s=event.at - reading.arrivals[0]))
        except CancelledError:
            stop = StopReason.CANCELLED
        except ServerError as exc:
            raise ServerError(f"Arm {self._arm.name}: {exc.what}", exc.fix) from None
        report = reading.report()
        if stop is None and not reading.arrivals and report.completion_tokens in (None, 0):
            raise ServerError(f"Arm {self._arm.name}: {self._base.shown_at(route)} returned no "
                              "text.",
                              "Check the server's log; the model may have failed to generate.")
        counted = None
        if counters_before is not None:
            counted = counters.counted_draft(counters_before, counters.read_counters(self._base, self._key),
                                     report.completion_tokens if report.completion_tokens
                                     is not None else len(reading.arrivals))
        gauges = self._driver.after_run(self._base, self._key, self._info)
        logged = self._driver.logged_draft(self._pool.get(self._arm.name), response_id, cancel)
        return self._result(request, reading, report, stop, counted, gauges, logged)

    def _result(self, request, reading: StreamReading, report: ServerReport, stop,
                counted: counters.CountedDraft | None, gauges=None, logged=None) -> GenerationResult:
        arrivals = reading.arrivals
        problems = list(report.problems)
        speed_problem = ""
        if report.completion_tokens is not None:
            n = report.completion_tokens
        else:
            n = len(arrivals)
            if report.completion_problem:
                speed_problem = ("the server's token count is not usable "
                                 f"({report.completion_problem})")
        ttft = arrivals[0] - reading.sent_at if arrivals else None
        span = arrivals[-1] - arrivals[0] if len(arrivals) >= 2 else 0.0
        if not speed_problem and (n < 2 or span <= 0):
            speed_problem = ("fewer than two tokens arrived, so there is no decode rate" if n < 2
                             else "every token arrived at once, so there is no decode rate")
        # new_tokens / decode_s must read as the rate between the first and the last token:
        # n - 1 tokens arrived in `span`, so the n tokens' decode time is span * n / (n - 1).
        decode_s = 0.0 if speed_problem else span * n / (n - 1)
        client_rate = None if speed_problem else (n - 1) / span
        drafted, accepted = report.drafted, report.accepted
        acceptance_problem = report.acceptance_problem
        foreign = self._driver.foreign_counts(self._arm, report)
        if foreign:
            acceptance_problem = foreign
            problems.append(foreign)
            drafted = accepted = None
        drafted_m = accepted_m = None
        draft_steps, by_position, drafted_by_position = 0, (), ()
        source = report.acceptance_source if drafted is not None else ""
        if drafted is None and logged is not None and logged.drafted is not None:
            from specdeck.core.servers.tabby_launch import LOG_SOURCE

            # Checked like every reading: a count the log garbled is not used.
            acceptance_problem = check_acceptance(logged.drafted, logged.accepted, n,
                                                  LOG_SOURCE)
            if acceptance_problem:
                problems.append(acceptance_problem)
            else:
                drafted, accepted, source = logged.drafted, logged.accepted, LOG_SOURCE
        per_request = report.draft_steps is not None and drafted is not None
        if per_request:  # the request's own report: exact, and this request's alone
            draft_steps = report.draft_steps
            by_position, drafted_by_position = (report.accepted_by_position,
                                                report.drafted_by_position)
        cross_check = ""
        if counted is not None:
            drafted_m, accepted_m = counted.drafted, counted.accepted
            if counted.problem:
                problems.append(counted.problem)
            if not report.acceptance_source:  # the counters are this run's acceptance
                drafted, accepted = drafted_m, accepted_m
                acceptance_problem = counted.problem
                source = "Prometheus counters around the run" if drafted is not None else ""
            elif per_request:
                cross_check = counters.cross_check(report, counted)
            if not per_request and counted.steps is not None and not counted.problem \
                    and drafted_m == drafted:
                # The steps and positions describe the same drafts the figures count.
                draft_steps, by_position = counted.steps, counted.accepted_by_position
        if by_position and not drafted_by_position:
            drafted_by_position = counters.reached_positions(by_position, draft_steps, drafted)
        # No position saw more drafts than there were steps that drafted, whatever reached it.
        position_problem = check_positions(
            by_position, drafted_by_position or tuple(draft_steps for _ in by_position),
            _set_k(self._arm))
        if position_problem:  # impossible positions are not tabled (the totals still are)
            problems.append(position_problem)
            by_position, drafted_by_position = (), ()
        mean, mean_source = report.mean_acceptance_length, report.mean_acceptance_source
        if mean is None:
            mean, mean_source = self._driver.gauge_mean(gauges) or (mean, mean_source)
        if gauges is not None and gauges.problem:
            problems.append(gauges.problem)
        if stop is None:
            stop = (StopReason.MAX_NEW_TOKENS if report.finish_reason == "length"
                    or reading.overran or n >= request.max_new_tokens else StopReason.EOS)
        stats = GenerationStats(
            prompt_tokens=report.prompt_tokens or 0,
            new_tokens=n,
            prefill_s=ttft or 0.0,
            decode_s=decode_s,
            steps=max(0, n - (accepted or 0)),
            draft_steps=draft_steps,
            drafted=drafted or 0,
            accepted=accepted or 0,
            per_position_drafted=drafted_by_position,
            per_position_accepted=by_position,
            stop_reason=stop,
            time_to_first_token_s=ttft,
        )
        server = ServerRun(report=report, client_tokens_per_second=client_rate,
                           time_to_first_token_s=ttft, chunks=len(arrivals),
                           url=self._base.shown, metrics_drafted=drafted_m,
                           metrics_accepted=accepted_m, drafting_flags=self._flags_now,
                           problems=tuple(problems), speed_problem=speed_problem,
                           acceptance_problem=acceptance_problem, lost=tuple(reading.lost),
                           draft_source=source, mean_acceptance_length=mean,
                           mean_acceptance_source=mean_source, gauges=gauges,
                           cross_check=cross_check,
                           options=tuple(self._options().items()),
                           drafts_by_construction=self._driver.drafts_by_construction(
                               self._arm.server))
        return GenerationResult(text=reading.text, token_ids=(), prompt_ids=(), stats=stats,
                                drafter=self._arm.drafter, sampling=request.sampling,
                                engine=f"server:{self._driver.kind.value}", server=server)


def _set_k(arm) -> int | None:
    """The most tokens a step of ``arm`` drafts where SpecDeck set it: a llama-server it
    launched with that type's k flag given (None: the server's own, unknown here)."""
    from specdeck.core.servers.llama_server import binary_help, flag_value, k_flag

    launch = arm.server.launch if arm.server is not None else None
    if launch is None or arm.drafter.k_from_server:
        return None
    flag = k_flag(tuple(launch.args), binary_help(launch.binary))
    return arm.drafter.num_draft_tokens if flag and flag_value(tuple(launch.args), flag) \
        else None


def _drafting(arm, info: ServerInfo | None):
    """Whether an arm will draft, as told before its runs (None for a TabbyAPI reload arm:
    what it holds changes on reload)."""
    from specdeck.core.servers.probe import launched_drafting, server_drafting

    if arm.server.launch is not None:
        return launched_drafting(arm.server.launch)
    if info is None or arm.server.tabby is not None:
        return None
    return server_drafting(info, arm.server.model, arm.server.draft_model)
