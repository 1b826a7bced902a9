"""ServerEngine: the Engine protocol over HTTP, with arms that are servers.

The runner treats it like any engine, with two differences it asks about by name:
``prepare_plan`` (check every arm before anything runs: reachable, the right kind, the
reference not drafting, launch flags valid) and ``activate_arm`` (switch to an arm's server,
starting its llama-server if SpecDeck manages it). Prompts go as text; the server applies
its own chat template and tokenizer, so token ids are not compared: losslessness is checked
on the text (see core.engines.lossless.compare_text).
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from specdeck.core import appdirs
from specdeck.core.engines.base import (
    NO_DRAFT,
    WARMUP_TEXT,
    Availability,
    DrafterKind,
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
from specdeck.core.errors import CancelledError, InvalidInputError, SpecDeckError
from specdeck.core.servers.arms import ServerArm
from specdeck.core.servers.kinds import TRAITS, ServerKind
from specdeck.core.servers.llama_server import ManagedServer
from specdeck.core.servers.probe import ServerInfo, probe
from specdeck.core.servers.readings import (
    ServerReport,
    StreamReading,
    check_acceptance,
    check_positions,
)
from specdeck.core.servers.transport import (
    Base,
    ServerError,
    request_json,
    request_text,
    stream_sse,
)
from specdeck.core.urls import redact_url

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


def availability() -> Availability:
    return Availability(True, detail="HTTP client (standard library): servers you run or "
                        "llama-servers SpecDeck launches")


class ServerEngine:
    name = "server"

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
        self._used: dict[str, int] = {}
        self._log_dir = log_dir
        self._loaded: LoadedModel | None = None
        self._infos: dict[str, ServerInfo] = {}
        self._managed: dict[str, ManagedServer] = {}
        self._arm = None
        self._plan_arms: tuple = ()
        self._swap_flags: dict[str, tuple[str, ...]] = {}
        self._flags_now: tuple[str, ...] | None = None
        """llama-swap arms: the command line llama-swap ran the arm's model with."""
        self._base: Base | None = None
        self._kind: ServerKind = ServerKind.OPENAI
        self._model: str | None = None
        self._key: str | None = None
        self._tabby_original: dict[str, Any] = {}
        """TabbyAPI URL -> what it held before the plan (restored by unload)."""
        self._tabby_now: dict[str, Any] = {}
        self.restore_problems: list[str] = []
        self._ollama: dict[str, Any] = {}
        """Ollama arms: arm name -> what /api/show says of its model's drafting."""
        self._ollama_loaded: dict[tuple[str, str], dict[str, int]] = {}
        """(URL, model) -> the drafting options Ollama last loaded it with."""
        self._seen: dict[str, set[str]] = {}
        """Launched arms whose drafter remembers earlier requests (``remembers``): the
        prompts its server has run since it started."""
        self._served: set[str] = set()
        """Launched arms whose server has answered a request since it started (``is_warm``)."""
        self.restarts = 0
        """Servers restarted so that a remembering drafter meets a prompt afresh."""
        self.starts = 0
        """Servers this engine started (the restarts among them)."""
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

    def running(self) -> dict[str, int]:
        """Arm name -> process id of each llama-server this engine started and keeps up."""
        return {name: server.process.pid for name, server in self._managed.items()
                if server.process is not None}

    def _make_room(self, limit: int | None) -> None:
        """Stop managed servers, the least recently used first, until one more fits ``limit``."""
        if limit is None:
            return
        while self._managed and len(self._managed) >= limit:
            name = min(self._managed, key=lambda n: self._used.get(n, 0))
            self._managed.pop(name).stop()

    def unload(self) -> None:
        for server in self._managed.values():
            server.stop()
        self._managed.clear()
        self._loaded = None
        self._restore_tabby()

    def _restore_tabby(self) -> None:
        """Give each reloaded TabbyAPI back what it held before the plan."""
        from specdeck.core.servers.tabby_reload import TabbyLoad, TabbyState, switch

        problems = []
        for url, (original, key_env) in list(self._tabby_original.items()):
            now = self._tabby_now.get(url, original)
            base = Base.parse(url)
            now = TabbyState(now.model_name, now.draft_model_name)  # the original is kept as is
            try:
                if original.model_name is None and now.model_name is not None:
                    request_json(base, "POST", "/v1/model/unload",
                                 api_key=TabbyLoad("", admin_key_env=key_env).admin_key())
                elif original.model_name is not None:
                    switch(base, TabbyLoad(original.model_name, original.draft_model_name,
                                           admin_key_env=key_env), now)
            except SpecDeckError as exc:
                problems.append(f"{base.shown}: {exc}")
        self._tabby_original.clear()
        self._tabby_now.clear()
        if problems:  # reported, not raised: the plan's results must not be lost to it
            self.restore_problems.extend(
                f"Could not restore what TabbyAPI held before the plan ({p}); load your model "
                "again in TabbyAPI." for p in problems)
            for problem in self.restore_problems:
                log.warning(problem)

    # Plans -------------------------------------------------------------------------------
    def prepare_plan(self, plan, progress: ProgressCallback | None = None,
                     cancel: threading.Event | None = None) -> LoadedModel:
        """Check every arm before the first run; probe the running servers."""
        say = progress or (lambda _p: None)
        self._plan_arms = tuple(plan.arms)
        self._warmup = (plan.warmup, plan.warmup_tokens)
        self.exclusive = self._exclusive or plan.one_server_at_a_time
        missing = [a.name for a in plan.arms if a.server is None]
        # An engine kept between plans (a grid sweep) keeps the servers this plan uses again
        # (the reference); with ``max_servers`` it keeps the others too while they fit (a
        # search's next round uses them again; the least recently used go first), without it
        # it stops them. A server whose arm now names another launch is stopped.
        wanted = {a.name: a.server.managed for a in plan.arms if a.server is not None}
        for name, running in list(self._managed.items()):
            if wanted.get(name, running.profile if self.max_servers else None) \
                    != running.profile:
                running.stop()
                del self._managed[name]
        if missing:
            raise InvalidInputError(f"Arms {', '.join(missing)} name no server.",
                                    "Every arm of a server plan is a URL or a launch profile.")
        from specdeck.core.servers.llama_server import check_launch

        for arm in plan.arms:
            server: ServerArm = arm.server
            if cancel is not None and cancel.is_set():
                raise CancelledError()
            if server.tabby_launch is not None:
                from specdeck.core.servers.tabby_launch import check_folder

                check_folder(server.tabby_launch)
                continue
            if server.launch is not None:
                check_launch(tuple(server.launch.args), server.launch.binary)
                for path, what in ((server.launch.binary, "llama-server binary"),
                                   (server.launch.model, "model")):
                    if not Path(path).is_file():
                        raise InvalidInputError(f"Arm {arm.name}: the {what} {path} does not exist.")
                continue
            say(LoadProgress(f"Probing {server.where}"))
            try:
                info = probe(server.url, server.api_key(), server.kind)
            except ServerError as exc:
                raise ServerError(f"Arm {arm.name}: {exc.what}", exc.fix) from None
            self._infos[arm.name] = info
            if server.tabby is not None:
                self._remember_tabby(arm, server)
                continue
            if server.draft_model and info.kind not in (ServerKind.LMSTUDIO, ServerKind.OLLAMA):
                raise InvalidInputError(
                    f"Arm {arm.name} names a draft model per request, which only LM Studio "
                    f"takes (and Ollama a draft_num_predict); {info.url} is "
                    f"{TRAITS[info.kind].title}.",
                    "Start that server with its draft, and drop --server-draft.")
            if info.kind is ServerKind.OLLAMA:
                self._check_ollama_arm(arm, info)
            if info.router:
                self._check_router_arm(arm, info, reference=arm is plan.arms[0])
                continue
            if info.kind is ServerKind.LLAMA_SWAP:
                self._check_swap_arm(arm, info)
                continue
            if arm is plan.arms[0] and info.speculative:
                raise InvalidInputError(
                    f"Arm {arm.name} is the reference, but {info.url} drafts "
                    f"({info.draft or 'speculative decoding is on'}).",
                    "Put a server without speculative decoding first.")
        self._loaded = LoadedModel(engine=self.name, model_path=Path(plan.model or "server"),
                                   device="server", dtype="as served", drafter=NO_DRAFT,
                                   max_seq_len=0, vocab_size=0,
                                   notes=tuple(self._notes(plan)))
        return self._loaded

    def _check_ollama_arm(self, arm, info: ServerInfo) -> None:
        """Ollama: an arm's draft_num_predict is a number, and its model has a draft to use
        it with (its DRAFT layer or MTP layers, from /api/show)."""
        from specdeck.core.servers import ollama

        server: ServerArm = arm.server
        if server.draft_model:
            ollama.parse_draft_n(server.draft_model, arm.name)
        model = server.model or info.model
        if not model:
            return  # generate() asks for the name
        try:
            drafting = ollama.model_drafting(Base.parse(server.url), model, server.api_key())
        except ServerError as exc:
            log.debug("Ollama /api/show for %s: %s", model, exc)
            return
        self._ollama[arm.name] = drafting
        if server.draft_model and drafting.draft is None and drafting.certain:
            raise InvalidInputError(
                f"Arm {arm.name} asks Ollama to draft (draft_num_predict "
                f"{server.draft_model}), but {model} has no draft: {drafting.describe()}, so "
                "Ollama would start it without drafting.",
                "Use a model with a DRAFT layer or MTP layers (ollama show MODEL).")

    @staticmethod
    def _check_router_arm(arm, info: ServerInfo, reference: bool) -> None:
        from specdeck.core.servers.llama_server import (
            drafter_from_flags,
            drafting_flags,
            shown_command,
        )

        listed = ", ".join(info.models) or "none"
        model = arm.server.model
        if not model:
            raise InvalidInputError(
                f"Arm {arm.name}: {info.url} is a llama-server router; name the model this "
                f"arm requests (it lists: {listed}).",
                f"Write the arm as {arm.name}={info.url}#MODEL.")
        if model not in info.models:
            raise InvalidInputError(
                f"Arm {arm.name}: the router at {info.url} has no model {model!r} "
                f"(it lists: {listed}).", "Check the name, or add a preset for it.")
        flags = info.flags_of(model) or ()
        if reference and drafter_from_flags(flags).kind is not DrafterKind.NONE:
            raise InvalidInputError(
                f"Arm {arm.name} is the reference, but the router starts {model!r} with "
                f"drafting flags ({shown_command(list(drafting_flags(flags)))}).",
                "Put a model without --spec-type first (a preset with no drafting).")

    @staticmethod
    def _check_swap_arm(arm, info: ServerInfo) -> None:
        listed = ", ".join(info.models) or "none"
        if not arm.server.model:
            raise InvalidInputError(
                f"Arm {arm.name}: {info.url} is llama-swap, which starts a model by the name a "
                f"request gives; name this arm's model (it lists: {listed}).",
                f"Write the arm as {arm.name}={info.url}#MODEL.")
        if info.models and arm.server.model not in info.models:
            raise InvalidInputError(
                f"Arm {arm.name}: llama-swap at {info.url} has no model {arm.server.model!r} "
                f"(it lists: {listed}).", "Check the name in its config.yaml.")

    def _remember_tabby(self, arm, server: ServerArm) -> None:
        from specdeck.core.servers.tabby_reload import loaded_state

        if server.url not in self._tabby_original:
            state = loaded_state(Base.parse(server.url), server.api_key())
            self._tabby_original[server.url] = (state, server.tabby.admin_key_env)
        if not server.tabby.model_name and self._tabby_original[server.url][0].model_name is None:
            raise InvalidInputError(f"Arm {arm.name}: TabbyAPI at {redact_url(server.url)} has "
                                    "no model loaded, so SpecDeck does not know which to load.",
                                    "Name it with --tabby-model.")
        if server.tabby.admin_key() is None:
            raise InvalidInputError(
                f"Arm {arm.name} reloads TabbyAPI, which needs its admin key.",
                "Put it in SPECDECK_TABBY_ADMIN_KEY (or the variable --admin-key-env names).")

    def _notes(self, plan) -> list[str]:
        notes = []
        for arm in plan.arms:
            info = self._infos.get(arm.name)
            kind = info.kind if info else ServerKind.LLAMA_SERVER
            traits = TRAITS[kind]
            where = info.url if info else arm.server.where
            notes.append(f"{arm.name}: {traits.title} at {where}; acceptance: {traits.acceptance}")
            drafting = _drafting(arm, info)
            if drafting is not None:
                notes.append(f"{arm.name}: {drafting.full} (said before the run)")
            if info is not None and info.router:
                from specdeck.core.servers.llama_server import drafting_flags, shown_command

                flags = drafting_flags(info.flags_of(arm.server.model) or ())
                notes.append(f"{arm.name}: router model {arm.server.model}, drafting flags: "
                             f"{shown_command(list(flags)) or 'none'}; loaded before its "
                             "runs, so no run pays for a model load")
            if arm.server is not None and arm.server.tabby is not None \
                    and arm is plan.arms[0]:
                notes.append("TabbyAPI arms reload the model through the admin API; at the end "
                             "SpecDeck restores the model (and the draft where TabbyAPI reports "
                             "it: its main branch does not, so reload your draft there if you "
                             "had one)")
            notes.extend(self._kind_notes(arm, info))
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

    def _kind_notes(self, arm, info: ServerInfo | None) -> list[str]:
        """What an Ollama arm sends and measures, said once in the plan's notes."""
        from specdeck.core.servers import ollama

        if info is None or info.kind is not ServerKind.OLLAMA:
            return []
        reference = arm is self._plan_arms[0]
        options = ollama.request_options(arm.server.draft_model, reference)
        drafting = self._ollama.get(arm.name)
        model = f"model {drafting.model}: {drafting.describe()}" if drafting else "its model"
        sent = (f"its requests carry draft_num_predict {options[ollama.OPTION]}" if options
                else "its requests leave draft_num_predict as the model sets it")
        return [f"{arm.name}: Ollama {model}; {sent} (a changed draft_num_predict reloads the "
                "model: SpecDeck loads it before the arm's runs)"]

    def activate_arm(self, arm, progress: ProgressCallback | None = None,
                     cancel: threading.Event | None = None) -> LoadedModel:
        server: ServerArm = arm.server
        say = progress or (lambda _p: None)
        if server.managed is not None:
            running = self._managed.get(arm.name)
            tabby = server.tabby_launch is not None
            if running is None or running.process is None:
                self._make_room(1 if self.exclusive else self.max_servers)
                say(LoadProgress(f"Starting {'TabbyAPI' if tabby else 'llama-server'} for "
                                 f"{arm.name}"))
                if tabby:
                    from specdeck.core.servers.tabby_launch import ManagedTabby

                    running = ManagedTabby(server.tabby_launch, self._log_path(arm.name))
                else:
                    running = ManagedServer(server.launch, self._log_path(arm.name))
                running.start(cancel)
                self.starts += 1
                self._managed[arm.name] = running
                self._seen[arm.name] = set()
                self._served.discard(arm.name)
            self._used[arm.name] = max(self._used.values(), default=0) + 1
            url = running.url
            self._infos[arm.name] = probe(url, server.api_key(),
                                          ServerKind.TABBYAPI if tabby else
                                          ServerKind.LLAMA_SERVER)
        else:
            url = server.url
        if server.tabby is not None:
            self._switch_tabby(server, say, cancel)
        info = self._infos[arm.name]
        if info.router:
            self._switch_router(arm, url, say, cancel)
        elif info.kind is ServerKind.LLAMA_SWAP:
            self._switch_swap(arm, url, say)
        self._arm = arm
        self._base = Base.parse(url)
        self._kind = info.kind
        # TabbyAPI treats a request's "model" as an inline model switch (an admin action):
        # name a model there only when the user asked to.
        self._model = server.model if info.kind is ServerKind.TABBYAPI else \
            (server.model or info.model)
        self._key = server.api_key()
        self._info = info
        if info.kind is ServerKind.OLLAMA and self._model:
            self._load_ollama(arm, say)
        from specdeck.core.servers.llama_server import drafting_flags

        flags = self.arm_flags(arm)
        self._flags_now = None if flags is None else drafting_flags(flags)
        self._loaded = replace(self._loaded, drafter=arm.drafter,
                               model_path=Path(info.model or url)) if self._loaded else None
        return self._loaded

    def _ollama_options(self) -> dict[str, int]:
        from specdeck.core.servers import ollama

        reference = bool(self._plan_arms) and self._arm.name == self._plan_arms[0].name
        return ollama.request_options(self._arm.server.draft_model, reference)

    def _load_ollama(self, arm, say) -> None:
        """Load the arm's model with its drafting options when Ollama holds it with others
        (a changed Runner option reloads it): the reload is not paid by a measured run."""
        from specdeck.core.servers import ollama

        options = self._ollama_options()
        key = (self._base.shown, self._model)
        if self._ollama_loaded.get(key) == options:
            return
        shown = ", ".join(f"{k} {v}" for k, v in options.items()) or "its own drafting settings"
        say(LoadProgress(f"Ollama is loading {self._model} with {shown}"))
        try:
            ollama.load(self._base, self._model, options, self._key)
        except ServerError as exc:
            raise ServerError(f"Arm {arm.name}: {exc.what}", exc.fix) from None
        self._ollama_loaded[key] = options

    def _switch_tabby(self, server: ServerArm, say, cancel) -> None:
        from specdeck.core.servers.tabby_reload import switch

        original = self._tabby_original[server.url][0]
        want = server.tabby
        if not want.model_name:
            want = replace(want, model_name=original.model_name)
        now = self._tabby_now.get(server.url)
        if now is None:
            # TabbyAPI main's model card never shows a loaded draft: "no draft" there may be
            # false, so the first arm always reloads rather than trust it.
            from specdeck.core.servers.tabby_reload import TabbyState

            now = TabbyState(original.model_name, "(unknown)")
            self._tabby_now[server.url] = now
        switch(
            Base.parse(server.url), want, now, cancel=cancel,
            progress=lambda text, fraction=None: say(LoadProgress(text, fraction)))

    def remembers(self, arm) -> str:
        """How ``arm``'s drafter keeps earlier requests' text (``llama_server.remembers``: a
        prompt run again is then drafted from its earlier output); "" when it does not or its
        flags are unknown."""
        from specdeck.core.servers import sglang
        from specdeck.core.servers.llama_server import remembers

        flags = self.arm_flags(arm)
        if flags:
            return remembers(flags)
        info = self._infos.get(arm.name)
        if info is not None and info.kind is ServerKind.SGLANG \
                and (info.draft or "").startswith("NGRAM"):
            return sglang.REMEMBERS
        return ""

    def _afresh(self, request: GenerationRequest, cancel: threading.Event | None) -> None:
        """A launched server whose drafter remembers is restarted before a prompt it has
        already run (and warmed up as the plan warms up, on other text), so no measured run
        is drafted from an earlier run of its own prompt."""
        arm = self._arm
        seen = self._seen.get(arm.name)
        if seen is None or request.prompt == WARMUP_TEXT or arm.server.managed is None \
                or not self.remembers(arm):
            return
        if request.prompt in seen:
            old = self._managed.pop(arm.name, None)
            self._seen[arm.name] = set()  # a start that fails leaves no stale record
            if old is not None:
                old.stop()
            self.restarts += 1
            self.activate_arm(arm, None, cancel)
            runs, tokens = self._warmup
            for _ in range(runs):
                self._generate(replace(request, prompt=WARMUP_TEXT, prompt_ids=None,
                                       max_new_tokens=min(request.max_new_tokens, tokens)),
                               None, cancel)
        self._seen[arm.name].add(request.prompt)

    def arm_flags(self, arm) -> tuple[str, ...] | None:
        """The llama-server flags that set up ``arm``'s drafting, where SpecDeck knows them:
        a launched arm's own flags, or a router model's drafting flags. None otherwise."""
        from specdeck.core.servers.llama_server import drafting_flags

        if arm.server.launch is not None:
            return tuple(arm.server.launch.args)
        info = self._infos.get(arm.name)
        if info is not None and info.router:
            return drafting_flags(info.flags_of(arm.server.model) or ())
        if arm.name in self._swap_flags:
            return drafting_flags(self._swap_flags[arm.name])
        return None

    def _switch_swap(self, arm, url: str, say) -> None:
        """llama-swap: start the arm's model (swapping others out) before its runs, and read
        its command line; the reference must not draft."""
        from specdeck.core.servers import swap
        from specdeck.core.servers.llama_server import (
            drafter_from_flags,
            drafting_flags,
            shown_command,
        )

        say(LoadProgress(f"llama-swap is starting {arm.server.model}"))
        try:
            flags = swap.start_model(Base.parse(url), arm.server.model, arm.server.api_key())
        except ServerError as exc:
            raise ServerError(f"Arm {arm.name}: {exc.what}", exc.fix) from None
        self._swap_flags[arm.name] = flags
        if arm.name == self._plan_arms[0].name and \
                drafter_from_flags(flags).kind is not DrafterKind.NONE:
            raise InvalidInputError(
                f"Arm {arm.name} is the reference, but llama-swap runs {arm.server.model!r} "
                f"with drafting flags ({shown_command(list(drafting_flags(flags)))}).",
                "Put a model without --spec-type first.")

    def _switch_router(self, arm, url: str, say, cancel) -> None:
        """Load the arm's model on its router (and, one at a time, stop the model of the arm
        before it on the same router), waiting until it is loaded."""
        from specdeck.core.servers import router

        base = Base.parse(url)
        key = arm.server.api_key()
        previous = self._arm
        if (self.exclusive and previous is not None and previous.server.url == url
                and previous.server.model != arm.server.model):
            try:
                router.unload(base, previous.server.model, key)
            except ServerError as exc:  # already gone: the router evicted it
                log.debug("Router unload of %s: %s", previous.server.model, exc)
        evict = tuple(a.server.model for a in self._plan_arms
                      if a.server.url == url and a.server.model)
        try:
            router.load_model(base, arm.server.model, key, evict=evict, cancel=cancel,
                        progress=lambda text: say(LoadProgress(text)))
        except ServerError as exc:
            raise ServerError(f"Arm {arm.name}: {exc.what}", exc.fix) from None

    def _log_path(self, arm_name: str) -> Path:
        folder = self._log_dir or appdirs.cache_dir() / "llama-server-logs"
        return folder / f"arm-{arm_name}-{int(time.time())}.log"

    # Generation --------------------------------------------------------------------------
    def _payload(self, request: GenerationRequest) -> tuple[str, dict[str, Any]]:
        s = request.sampling
        kind = self._kind
        body: dict[str, Any] = {"stream": True, "temperature": s.temperature,
                                "seed": 0 if s.seed is None else s.seed}
        if s.top_p < 1.0:
            body["top_p"] = s.top_p
        if self._model:
            body["model"] = self._model
        if kind is ServerKind.OLLAMA:
            if not self._model:
                raise InvalidInputError(
                    f"Arm {self._arm.name}: Ollama needs the model's name in every request.",
                    "Give it after the URL: http://127.0.0.1:11434#qwen2.5:32b")
            options = {"temperature": s.temperature, "seed": body["seed"],
                       "num_predict": request.max_new_tokens, **self._ollama_options()}
            if s.greedy:
                options["top_k"] = 1
            body = {"model": self._model, "stream": True, "options": options}
            if request.apply_chat_template:
                body["messages"] = [{"role": "user", "content": request.prompt}]
                return "/api/chat", body
            body["prompt"], body["raw"] = request.prompt, True
            return "/api/generate", body
        body["max_tokens"] = request.max_new_tokens
        body["stream_options"] = {"include_usage": True}
        if kind in (ServerKind.LLAMA_SERVER, ServerKind.LLAMA_SWAP):
            body["cache_prompt"] = False  # no arm gets a cheaper prefill from a cached prompt
            if s.greedy:
                body["top_k"] = 1
            if not request.stop_on_eos:
                body["ignore_eos"] = True
        elif kind is ServerKind.TABBYAPI:
            if s.greedy:
                body["top_k"] = 1
            if not request.stop_on_eos:
                body["ban_eos_token"] = True
        elif kind in (ServerKind.VLLM, ServerKind.SGLANG):
            if s.greedy:
                body["top_k"] = 1
            if not request.stop_on_eos:
                body["ignore_eos"] = True
            if kind is ServerKind.SGLANG:
                # Per request, exact: a chunk with sglext.spec_tokens_details (SGLang 0.5.23).
                body["return_spec_tokens_details"] = True
        chat = request.apply_chat_template
        if chat:
            body["messages"] = [{"role": "user", "content": request.prompt}]
        else:
            body["prompt"] = request.prompt
        if kind is ServerKind.LMSTUDIO and self._arm.server.draft_model:
            # Per request (LM Studio's API changelog, 0.3.10): it loads the draft itself.
            body["draft_model"] = self._arm.server.draft_model
        # LM Studio: its OpenAI-compatible routes, whose stream carries usage with
        # include_usage (0.3.18); its own /api/v0 stream carries neither usage nor stats.
        return ("/v1/chat/completions" if chat else "/v1/completions"), body

    def generate(self, request: GenerationRequest, on_event: EventCallback | None = None,
                 cancel: threading.Event | None = None) -> GenerationResult:
        if self._base is None or self._arm is None:
            raise InvalidInputError("No server arm is active.")
        if not request.prompt:
            raise InvalidInputError("A server arm needs the prompt's text.")
        self._afresh(request, cancel)
        result = self._generate(request, on_event, cancel)
        if self._arm.name in self._managed \
                and result.stats.stop_reason is not StopReason.CANCELLED:
            self._served.add(self._arm.name)
        return result

    def keep_only(self, names: set[str]) -> None:
        """Stop the launched servers of every arm not in ``names`` (a search's dropped
        settings), so those still needed are not the ones ``max_servers`` makes room from."""
        for name in [n for n in self._managed if n not in names]:
            self._managed.pop(name).stop()

    def is_warm(self, arm) -> bool:
        """Whether ``arm`` is a server SpecDeck started that has answered a request since it
        started: its first-request costs are paid, so a plan need not warm it up again
        (servers SpecDeck did not start, or reloads on them, are always warmed up)."""
        return arm.server.managed is not None and arm.name in self._managed \
            and arm.name in self._served

    def _generate(self, request: GenerationRequest, on_event: EventCallback | None,
                  cancel: threading.Event | None) -> GenerationResult:
        route, body = self._payload(request)
        emit = on_event or (lambda _e: None)
        counters_before = self._counters() if self._use_metrics_diff() else None
        sent = time.perf_counter()
        reading = StreamReading(self._kind.value, sent, max_tokens=request.max_new_tokens)
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
            counted = _counted_draft(counters_before, self._counters(),
                                     report.completion_tokens if report.completion_tokens
                                     is not None else len(reading.arrivals))
        gauges = None
        if self._kind is ServerKind.SGLANG and self._info.metrics \
                and self._info.speculative is not False:
            from specdeck.core.servers.sglang import read_gauges

            gauges = read_gauges(self._base, self._key)
        logged = self._logged_draft(response_id, cancel)
        return self._result(request, reading, report, stop, counted, gauges, logged)

    def _logged_draft(self, response_id: str | None, cancel):
        """A TabbyAPI SpecDeck started: what its log says this request drafted
        (core.servers.tabby_launch.logged_draft); None for other arms, or no such line."""
        from specdeck.core.servers.tabby_launch import ManagedTabby

        managed = self._managed.get(self._arm.name)
        if not isinstance(managed, ManagedTabby) or not response_id:
            return None
        return managed.logged_draft(response_id.removeprefix("chatcmpl-"), cancel)

    def _drafts_by_construction(self) -> str:
        """Why this arm drafts at every step ("" when that is not known): a TabbyAPI holding
        a draft model (its ExLlama backend drafts with it at every step)."""
        server = self._arm.server
        name = None
        if server.tabby is not None:
            now = self._tabby_now.get(server.url)
            name = now.draft_model_name if now is not None and now.draft_model_name \
                == server.tabby.draft_model_name else None
        elif server.tabby_launch is not None:
            from specdeck.core.servers.tabby_launch import draft_model_of

            name = draft_model_of(server.tabby_launch)
        return (f"TabbyAPI holds the draft model {name}, and its ExLlama backend drafts with "
                "it at every step") if name else ""

    def _result(self, request, reading: StreamReading, report: ServerReport, stop,
                counted: CountedDraft | None, gauges=None, logged=None) -> GenerationResult:
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
        wanted = self._arm.server.draft_model
        if self._kind is ServerKind.LMSTUDIO and drafted is not None and wanted \
                and report.draft_model not in (None, wanted):
            # LM Studio drafted with another model than the arm's: its counts are not this
            # arm's drafting.
            acceptance_problem = (f"stats.draft_model is {report.draft_model!r}, not the "
                                  f"{wanted!r} this arm's requests name")
            problems.append(acceptance_problem)
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
                cross_check = _cross_check(report, counted)
            if not per_request and counted.steps is not None and not counted.problem \
                    and drafted_m == drafted:
                # The steps and positions describe the same drafts the figures count.
                draft_steps, by_position = counted.steps, counted.accepted_by_position
        if by_position and not drafted_by_position:
            drafted_by_position = _reached(by_position, draft_steps, drafted)
        # No position saw more drafts than there were steps that drafted, whatever reached it.
        position_problem = check_positions(
            by_position, drafted_by_position or tuple(draft_steps for _ in by_position),
            _set_k(self._arm))
        if position_problem:  # impossible positions are not tabled (the totals still are)
            problems.append(position_problem)
            by_position, drafted_by_position = (), ()
        mean, mean_source = report.mean_acceptance_length, report.mean_acceptance_source
        if mean is None and gauges is not None and gauges.accept_length is not None:
            from specdeck.core.servers.sglang import ACCEPT_LENGTH, GAUGE_MEANING

            mean, mean_source = gauges.accept_length, f"{ACCEPT_LENGTH}: {GAUGE_MEANING}"
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
                           options=tuple(self._ollama_options().items())
                           if self._kind is ServerKind.OLLAMA else (),
                           drafts_by_construction=self._drafts_by_construction())
        return GenerationResult(text=reading.text, token_ids=(), prompt_ids=(), stats=stats,
                                drafter=self._arm.drafter, sampling=request.sampling,
                                engine=f"server:{self._kind.value}", server=server)

    # Prometheus counters around each run: vLLM reports no per-request acceptance unless asked
    # at launch, and llama-server's timings say nothing of verify steps, positions, or a run
    # that drafted nothing (draft_n is left out then). SpecDeck is a launched server's only
    # client, so the growth around a run is that run's.
    def _use_metrics_diff(self) -> bool:
        return self._kind in (ServerKind.VLLM, ServerKind.LLAMA_SERVER) and self._info.metrics

    def _counters(self) -> dict[str, float]:
        try:
            return parse_counters(request_text(self._base, "/metrics", self._key, timeout=5.0))
        except ServerError:
            return {}


def parse_counters(text: str) -> dict[str, float]:
    """Prometheus text: metric name (labels dropped, values summed) -> value; a series with a
    ``position`` label is also kept as ``name#position`` (per-position acceptance)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition(" ")
        name = name.split("{", 1)[0]
        labels = ""
        if "{" in line and "}" in line:
            name = line.split("{", 1)[0]
            labels = line.split("{", 1)[1].rsplit("}", 1)[0]
            rest = line.rsplit("}", 1)[1]
        try:
            value = float(rest.strip().split()[0])
        except (ValueError, IndexError):
            continue
        out[name] = out.get(name, 0.0) + value
        position = _POSITION.search(labels)
        if position:
            key = f"{name}#{position.group(1)}"
            out[key] = out.get(key, 0.0) + value
    return out


_POSITION = re.compile(r'(?:^|,)\s*position="(\d{1,4})"')


def _delta(before: dict[str, float], after: dict[str, float], suffix: str
           ) -> tuple[float | None, str]:
    """How much the speculative counters ending in ``suffix`` grew around a run; a problem
    when a value is not finite or a counter went down (the server restarted or reset it)."""
    names = [n for n in after if n.endswith(suffix) and "spec_decode" in n and "per_pos" not in n
             and "#" not in n]
    if not names:
        return None, ""
    total = 0.0
    for name in names:
        old, new = before.get(name, 0.0), after[name]
        if not (math.isfinite(old) and math.isfinite(new)) or old < 0 or new < 0:
            return None, f"/metrics {name} is {new!r} (was {old!r}): not a counter's value"
        if new < old:
            return None, (f"/metrics {name} went down from {old:g} to {new:g} (the server "
                          "restarted or reset its counters)")
        total += new - old
    return total, ""


def _cross_check(report: ServerReport, counted: CountedDraft) -> str:
    """A request's own counts beside the counters' growth around it: equal when the server
    ran nothing else meanwhile; otherwise the request's own are still this run's."""
    if counted.drafted is None:  # the totals failed their checks (the problem says why)
        return ""
    mine = (report.drafted, report.accepted)
    theirs = (counted.drafted, counted.accepted)
    if mine == theirs and (counted.steps is None or counted.steps == report.draft_steps):
        return "agrees with the Prometheus counters' growth around the run"
    steps = "" if counted.steps is None else f", {counted.steps} steps"
    return (f"differs from the Prometheus counters' growth around the run ({theirs[0]} "
            f"drafted, {theirs[1]} accepted{steps}; this request: {mine[0]}, {mine[1]}, "
            f"{report.draft_steps} steps): other requests on the server, or counters that "
            "lag; the request's own counts are used")


@dataclass(frozen=True)
class CountedDraft:
    """What the server's Prometheus counters say one run drafted (their growth around it)."""

    drafted: int | None = None
    accepted: int | None = None
    steps: int | None = None
    """Verify steps that carried a draft (``..._num_drafts_total``)."""
    accepted_by_position: tuple[int, ...] = ()
    """Drafts accepted at each position (``..._num_accepted_tokens_per_pos_total``)."""
    problem: str = ""


def _counted_draft(before: dict[str, float], after: dict[str, float], tokens: int
                   ) -> CountedDraft:
    """The counters' growth around a run, checked like a reported count
    (core.servers.readings.check_acceptance): finite, counters that only grow, accepted <=
    drafted, at most the tokens the run made; the drafts at most one per token; the
    positions' accepted adding up to the accepted total and none above the drafts."""
    if not before and not after:
        return CountedDraft()
    if not before or not after:
        return CountedDraft(problem="/metrics could not be read on both sides of the run")
    drafted, problem = _delta(before, after, "num_draft_tokens_total")
    accepted, accepted_problem = _delta(before, after, "num_accepted_tokens_total")
    steps, steps_problem = _delta(before, after, "num_drafts_total")
    problem = problem or accepted_problem or steps_problem
    if not problem and drafted is None and accepted is None:
        return CountedDraft()
    problem = problem or check_acceptance(drafted, accepted, tokens,
                                          "/metrics spec_decode counters")
    if not problem and steps is not None and steps > max(tokens, 0):
        problem = f"/metrics spec_decode counters: {int(steps)} drafts for {tokens} tokens"
    if problem:
        return CountedDraft(problem=problem)
    by_position, position_problem = _by_position(before, after, accepted, steps)
    return CountedDraft(int(drafted), int(accepted), None if steps is None else int(steps),
                        by_position, position_problem)


def _by_position(before: dict[str, float], after: dict[str, float], accepted: float | None,
                 steps: float | None) -> tuple[tuple[int, ...], str]:
    """Accepted drafts per position from the ``..._per_pos_total{position=N}`` counters;
    () with a problem when they do not add up."""
    grown: dict[int, float] = {}
    for name, new in after.items():
        head, sep, position = name.partition("#")
        if not sep or "accepted_tokens_per_pos" not in head:
            continue
        old = before.get(name, 0.0)
        if not (math.isfinite(old) and math.isfinite(new)) or new < old:
            return (), f"/metrics {head} at position {position} is not a growing counter"
        grown[int(position)] = grown.get(int(position), 0.0) + (new - old)
    if not grown or steps == 0:
        return (), ""  # no draft: no position reached
    # Every position the server reports, zeros included: llama-server sizes its per-position
    # array to its k (server-context.cpp, n_accepted_per_pos.resize(common_speculative_n_max))
    # and exports it whole, so a run whose acceptance ended early still has its drafts
    # counted at the later positions, where it kept nothing.
    values = [grown.get(i, 0.0) for i in range(max(grown) + 1)]
    if accepted is not None and abs(sum(values) - accepted) > 0.5:
        return (), (f"/metrics accepted per position add up to {sum(values):g}, not the "
                    f"{accepted:g} accepted")
    if steps is not None and any(v > steps for v in values):
        return (), "/metrics accepted at a position more often than there were drafts"
    return tuple(int(v) for v in values), ""


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


def _reached(by_position: tuple[int, ...], drafts: int, drafted: int | None
             ) -> tuple[int, ...]:
    """The drafts that reached each position, where the counts say it: only when every draft
    was as long as the positions reported (drafted = drafts x k); otherwise () (unknown: a
    shorter draft reached fewer positions, and the counters do not say which)."""
    if drafts and drafted == drafts * len(by_position):
        return tuple(drafts for _ in by_position)
    return ()


def _drafting(arm, info: ServerInfo | None):
    """Whether an arm will draft, as told before its runs (None for a TabbyAPI reload arm:
    what it holds changes on reload)."""
    from specdeck.core.servers.probe import launched_drafting, server_drafting

    if arm.server.launch is not None:
        return launched_drafting(arm.server.launch)
    if info is None or arm.server.tabby is not None:
        return None
    return server_drafting(info, arm.server.model)
