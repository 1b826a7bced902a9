"""Tuning a running TabbyAPI: which draft model, or none, makes it fastest.

TabbyAPI changes models only through its admin API (core.servers.tabby_reload): a setting is
``POST /v1/model/load`` with the model and a ``draft_model_name`` from its
``draft_model_dir``. The draft's k (``draft_num_tokens``), ``draft_mode`` and the cache mode
are read from config.yml when TabbyAPI starts and cannot be sent with a load (TabbyAPI main
e632af41 and exl2-checkpoint 79126f90, endpoints/core/types/model.py), so against a TabbyAPI
that SpecDeck does not start, the search is over draft models at the k the file sets; the
report says so.

The candidates are the model folders in ``draft_model_dir`` that this TabbyAPI's backend can
load (EXL3 on main, EXL2 on exl2-checkpoint: core.config.document decides the branch from the
file), smaller than the target, and whose tokenizer matches the target's (core.compat, when
the target's folder is on this machine). The winner is written with the config editor
(draft_model_dir and draft_model_name; a diff, a .bak, an atomic save) and never over a
config.yml that changed on disk while tuning ran. TabbyAPI reads config.yml when it starts,
so the check after writing loads what the file now names through the admin API, as a restart
would, and must answer and keep the output; otherwise the file is put back byte for byte.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from specdeck.core.config.schema import (
    DRAFT_MODE_MODEL,
    DRAFT_MODE_MTP,
    DRAFT_MODE_NGRAM,
    MODELLESS_DRAFT_MODES,
    draft_mode_of,
)
from specdeck.core.engines.base import DEFAULT_DRAFT_TOKENS
from specdeck.core.errors import CancelledError, InvalidInputError, SpecDeckError
from specdeck.core.tune.candidates import NotTried, draft_refusal
from specdeck.core.tune.request import TABBYAPI

EXL2, EXL3 = "exl2", "exl3"


@dataclass(frozen=True)
class TabbySetup:
    """One running TabbyAPI and the config.yml it was started from."""

    url: str
    config: Path
    fingerprint: str | None
    """config.yml's bytes when it was read: a file changed while tuning is never
    overwritten."""
    model_name: str
    """The model TabbyAPI holds (or, when it holds none, config.yml's model_name)."""
    model_folder: Path | None
    """That model's folder, where it is on this machine (for the tokenizer check)."""
    draft_dir: Path
    current_draft: str | None
    """config.yml's draft_model_name (the draft TabbyAPI loads at its start)."""
    main_branch: bool
    """TabbyAPI main (ExLlamaV3, EXL3 models) rather than exl2-checkpoint (EXL2)."""
    draft_tokens: int | None = None
    """config.yml's draft_num_tokens (None: TabbyAPI's default)."""
    api_key_env: str | None = None
    admin_key_env: str | None = None
    python: str | None = None
    """Set when SpecDeck starts this TabbyAPI itself (its install is config.yml's folder):
    then the draft mode and k can be searched too. None: a running TabbyAPI at ``url``,
    switched by reloading through its admin API."""
    draft_mode: str | None = None
    """config.yml's draft_mode (main), None when unset."""

    @property
    def k(self) -> int:
        """The tokens it drafts per step as config.yml says (unset: TabbyAPI's default)."""
        return self.draft_tokens or DEFAULT_DRAFT_TOKENS

    kind = TABBYAPI
    on_gpu = True
    """ExLlamaV2 and ExLlamaV3 run on CUDA only."""

    @property
    def managed(self) -> bool:
        return self.python is not None

    @property
    def where(self) -> str:
        if self.managed:
            return f"TabbyAPI in {self.config.parent} (started by SpecDeck)"
        return f"TabbyAPI at {self.url} ({self.config})"

    @property
    def facts(self):
        """The target as its folder describes it (core.tune.setup.TargetFacts); zeros where
        the folder is not on this machine."""
        from specdeck.core.tune.setup import TargetFacts

        if self.model_folder is not None:
            try:
                from specdeck.core.models import read_model

                info = read_model(self.model_folder)
                return TargetFacts(self.model_name, info.arch.model_type, info.arch.num_layers,
                                   info.context_length, weight_bytes(self.model_folder))
            except SpecDeckError:
                pass
        return TargetFacts(self.model_name, "unknown", 0, 0, 0)

    @property
    def weights_format(self) -> str:
        return EXL3 if self.main_branch else EXL2

    @property
    def drafting(self) -> tuple[str, ...]:
        """How config.yml has TabbyAPI draft now, as "key=value" (empty: it does not)."""
        # exl2-checkpoint has no draft_mode: it drafts with a draft model when one is named.
        mode = draft_mode_of({"draft_mode": self.draft_mode}) if self.main_branch \
            else DRAFT_MODE_MODEL
        if mode in MODELLESS_DRAFT_MODES:
            shown = [f"draft_mode={mode}"]
        elif self.current_draft and mode == DRAFT_MODE_MODEL:
            shown = [f"draft_model_name={self.current_draft}"]
        else:
            return ()
        if self.draft_tokens and self.main_branch:
            shown.append(f"draft_num_tokens={self.draft_tokens}")
        return tuple(shown)

    @property
    def server_text(self) -> str:
        branch = "main (ExLlamaV3)" if self.main_branch else "exl2-checkpoint (ExLlamaV2)"
        how = "started by SpecDeck per setting" if self.managed else \
            "reloaded through its admin API per setting"
        return f"TabbyAPI {branch}, {how}"


def read_setup(url: str, config_path: str | Path, api_key_env: str | None = None,
               admin_key_env: str | None = None) -> TabbySetup:
    """The TabbyAPI at ``url`` and its ``config_path``: what it holds and where its drafts
    are. A server that holds no model and a file that names none is refused."""
    from specdeck.core.config.document import ConfigDocument
    from specdeck.core.config.schema import MODEL
    from specdeck.core.servers.arms import ServerArm
    from specdeck.core.servers.kinds import ServerKind
    from specdeck.core.servers.tabby_reload import loaded_state
    from specdeck.core.servers.transport import Base

    doc = ConfigDocument.from_file(config_path)
    arm = ServerArm(url=url, kind=ServerKind.TABBYAPI, api_key_env=api_key_env)
    state = loaded_state(Base.parse(url), arm.api_key())
    name = state.model_name or doc.raw(MODEL, "model_name")
    if not name:
        raise InvalidInputError(f"TabbyAPI at {url} holds no model and {doc.path} names none "
                                "(model_name).",
                                "Load the model you want tuned, or set model_name in "
                                "config.yml.")
    return _from_doc(doc, str(name), url=url, api_key_env=api_key_env,
                     admin_key_env=admin_key_env)


def read_install(folder: str | Path, python: str | Path | None = None,
                 api_key_env: str | None = None) -> TabbySetup:
    """A TabbyAPI install that SpecDeck starts itself for each setting (core.servers.
    tabby_launch): its config.yml names the model; nothing needs to be running."""
    from specdeck.core.config.document import ConfigDocument
    from specdeck.core.config.schema import MODEL
    from specdeck.core.config.tabby import CONFIG_NAME
    from specdeck.core.servers.tabby_launch import TabbyLaunch, check_folder, python_for

    folder = Path(folder)
    run_with = python_for(folder, python)
    check_folder(TabbyLaunch(str(folder), run_with))
    doc = ConfigDocument.from_file(folder / CONFIG_NAME)
    name = doc.raw(MODEL, "model_name")
    if not name:
        raise InvalidInputError(f"{doc.path} names no model (model_name): SpecDeck starts "
                                "TabbyAPI with the model config.yml names.",
                                "Set model_name in config.yml.")
    return _from_doc(doc, str(name), url="", api_key_env=api_key_env, python=run_with)


def read_tabby(folder: str | Path | None = None, python: str | Path | None = None,
               url: str | None = None, config: str | Path | None = None,
               api_key_env: str | None = None, admin_key_env: str | None = None
               ) -> TabbySetup:
    """The TabbyAPI a user names, as ``specdeck tune`` and the Tune page take it: its folder
    (SpecDeck starts it per setting: :func:`read_install`), or the URL of a running one and the
    config.yml it was started from (reloaded through its admin API: :func:`read_setup`). Keys
    are read from the environment variables named (never given here): the API key from
    ``api_key_env`` (else SPECDECK_SERVER_API_KEY, the keyring, the install's api_tokens.yml),
    the admin key a running one needs from ``admin_key_env`` (else SPECDECK_TABBY_ADMIN_KEY)."""
    from specdeck.core.servers.key_names import DEFAULT_ADMIN_KEY_ENV
    from specdeck.core.servers.tabby_reload import TabbyLoad

    folder, url, config = (str(v).strip() if v else "" for v in (folder, url, config))
    if bool(folder) == bool(url):
        raise InvalidInputError("Say which TabbyAPI to tune: its folder (SpecDeck starts it "
                                "for each setting), or the URL of a running one with its "
                                "config.yml.")
    if folder:
        return read_install(folder, str(python).strip() if python else None,
                            api_key_env or None)
    if not config:
        raise InvalidInputError(f"Tuning the running TabbyAPI at {url} needs the config.yml it "
                                "was started from (where the winner is written).",
                                "Give its config.yml (--tabby-config FILE).")
    if TabbyLoad("", admin_key_env=admin_key_env or None).admin_key() is None:
        named = admin_key_env or DEFAULT_ADMIN_KEY_ENV
        raise InvalidInputError(f"A running TabbyAPI is reloaded through its admin API, which "
                                f"needs its admin key, and {named} is not set.",
                                f"Put its admin key (api_tokens.yml's admin_key) in {named} "
                                "before starting SpecDeck, or give TabbyAPI's folder so "
                                "SpecDeck starts it itself.")
    return read_setup(url, config, api_key_env or None, admin_key_env or None)


def _from_doc(doc, name: str, **where) -> TabbySetup:
    from specdeck.core.config.schema import DRAFT, MODEL

    folder = doc.resolve_dir(MODEL, "model_dir") / name
    tokens = doc.raw(DRAFT, "draft_num_tokens")
    mode = doc.raw(DRAFT, "draft_mode")
    return TabbySetup(
        config=doc.path, fingerprint=doc.disk_fingerprint, model_name=name,
        model_folder=folder if (folder / "config.json").is_file() else None,
        draft_dir=doc.resolve_dir(DRAFT, "draft_model_dir"),
        current_draft=str(doc.raw(DRAFT, "draft_model_name") or "") or None,
        main_branch=doc.runs_exllamav3,
        draft_tokens=tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None,
        draft_mode=str(mode) if mode else None, **where)


@dataclass(frozen=True)
class TabbyDraft:
    """A draft model folder TabbyAPI could load."""

    folder: Path
    weight_bytes: int

    @property
    def name(self) -> str:
        return self.folder.name


def folder_format(folder: Path) -> str | None:
    """exl2 / exl3 from config.json's quantization_config; None for anything else."""
    from specdeck.core.models import quantization_from_config, read_json

    try:
        method = quantization_from_config(read_json(folder / "config.json")).method
    except SpecDeckError:
        return None
    return method if method in (EXL2, EXL3) else None


def weight_bytes(folder: Path) -> int:
    """The bytes of a folder's safetensors files (what loading it reads into memory)."""
    return sum(p.stat().st_size for p in folder.glob("*.safetensors") if p.is_file())


def draft_candidates(setup: TabbySetup, cancel: threading.Event | None = None
                     ) -> tuple[list[TabbyDraft], list[NotTried]]:
    """The folders of ``draft_model_dir`` worth trying as drafts, and the others with why."""
    from specdeck.core.compat import check

    try:
        folders = sorted(p for p in setup.draft_dir.iterdir() if (p / "config.json").is_file())
    except OSError as exc:
        raise InvalidInputError(f"Cannot list the draft models in {setup.draft_dir}: "
                                f"{exc.strerror or exc}.",
                                "Check draft_model_dir in config.yml.") from None
    target_bytes = weight_bytes(setup.model_folder) if setup.model_folder else 0
    usable: list[TabbyDraft] = []
    refused: list[NotTried] = []
    for folder in folders:
        if cancel is not None and cancel.is_set():
            raise CancelledError()
        if folder.name == setup.model_name:
            continue
        label = f"draft {folder.name}"
        kind = folder_format(folder)
        if kind != setup.weights_format:
            branch = "main" if setup.main_branch else "exl2-checkpoint"
            refused.append(NotTried(label, f"{kind.upper() if kind else 'not EXL2/EXL3'} weights; "
                                    f"TabbyAPI {branch} loads "
                                    f"{setup.weights_format.upper()} models only"))
            continue
        size = weight_bytes(folder)
        target = setup.model_folder
        why = draft_refusal(size, target_bytes, None if target is None else (
            lambda folder=folder: check(target, folder, examples=0, cancel=cancel)))
        if why is not None:
            refused.append(NotTried(label, why))
            continue
        usable.append(TabbyDraft(folder, size))
    return usable, refused


def arm(setup: TabbySetup, name: str, draft: str | None):
    """An A/B arm that has TabbyAPI hold the target with ``draft`` (None: no draft)."""
    from specdeck.core.bench.plan import Arm
    from specdeck.core.engines.base import NO_DRAFT, DrafterKind, DrafterSpec
    from specdeck.core.servers.arms import ServerArm
    from specdeck.core.servers.kinds import ServerKind
    from specdeck.core.servers.tabby_reload import TabbyLoad

    load = TabbyLoad(setup.model_name, draft, admin_key_env=setup.admin_key_env)
    drafter = NO_DRAFT if draft is None else DrafterSpec(
        DrafterKind.SERVER, num_draft_tokens=setup.k, adaptive=False)
    return Arm(name, drafter, ServerArm(url=setup.url, kind=ServerKind.TABBYAPI,
                                        api_key_env=setup.api_key_env, tabby=load))


K_VALUES = (2, 4, 8)
"""draft_num_tokens tried on TabbyAPI main (ExLlamaV3); exllamav2 always drafts 4."""
def mtp_layers(folder: Path | None) -> int:
    """The target folder's MTP layers (core.models.mtp_layers); 0 when it has no readable
    config.json."""
    from specdeck.core import models

    if folder is None:
        return 0
    try:
        return models.mtp_layers(models.read_json(folder / "config.json"))
    except SpecDeckError:
        return 0


def find(setup: TabbySetup, cancel: threading.Event | None = None):
    """Every way this TabbyAPI can draft (core.tune.candidates.Candidates): the draft models
    of its draft_model_dir, and on main, when SpecDeck starts it, n-gram and MTP."""
    from specdeck.core.tune.candidates import Candidate, Candidates

    drafts, refused = draft_candidates(setup, cancel)
    found = [Candidate(DRAFT_MODE_MODEL, d.folder, d.weight_bytes) for d in drafts]
    skipped = list(refused)
    if not drafts:
        skipped.append(NotTried(DRAFT_MODE_MODEL, f"no draft model in {setup.draft_dir} passes the checks"))
    if setup.main_branch:
        layers = mtp_layers(setup.model_folder)
        modes = [(DRAFT_MODE_NGRAM, None)] + (
            [(DRAFT_MODE_MTP, f"{layers} MTP layer(s)")] if layers else [])
        for mode, note in modes:
            if setup.managed:
                found.append(Candidate(mode, notes=(note,) if note else ()))
            else:
                skipped.append(NotTried(mode, "TabbyAPI reads draft_mode when it starts: give "
                                              "its folder (--tabby-folder) so SpecDeck starts "
                                              "it for each setting"))
        if not layers:
            skipped.append(NotTried(DRAFT_MODE_MTP, "the target has no MTP layers"))
    return Candidates(tuple(found), tuple(skipped))


def _launch(setup: TabbySetup, settings):
    from specdeck.core.servers.tabby_launch import TabbyLaunch

    return TabbyLaunch(str(setup.config.parent), str(setup.python), tuple(settings))


def _arm(setup: TabbySetup, name: str, settings, drafts: bool, k: int | None = None):
    from specdeck.core.bench.plan import Arm
    from specdeck.core.engines.base import NO_DRAFT, DrafterKind, DrafterSpec
    from specdeck.core.servers.arms import ServerArm
    from specdeck.core.servers.kinds import ServerKind

    drafter = DrafterSpec(DrafterKind.SERVER, num_draft_tokens=k or setup.k,
                          adaptive=False) if drafts else NO_DRAFT
    return Arm(name, drafter, ServerArm(kind=ServerKind.TABBYAPI, api_key_env=setup.api_key_env,
                                        tabby_launch=_launch(setup, settings)))


def reference_arm(setup: TabbySetup, name: str = "A"):
    """No drafting, whatever config.yml says."""
    from specdeck.core.servers.tabby_launch import no_draft

    if not setup.managed:
        return arm(setup, name, None)
    return _arm(setup, name, no_draft(setup.main_branch), drafts=False)


def current_arm(setup: TabbySetup, name: str):
    """The user's setting as config.yml has it (None when it does not draft)."""
    if not setup.drafting:
        return None
    if not setup.managed:
        return arm(setup, name, setup.current_draft)
    return _arm(setup, name, (), drafts=True)  # the copy changes nothing: config.yml's own


def settings_of(candidate, k: int | None, main_branch: bool) -> tuple[tuple[str, object], ...]:
    """The draft_model keys that make TabbyAPI draft as ``candidate`` at ``k``."""
    if not main_branch:
        return (("draft_model_name", candidate.draft.name),)
    out: tuple = (("draft_mode", candidate.spec_type),)
    if candidate.draft is not None:
        out += (("draft_model_name", candidate.draft.name),)
    return out + ((("draft_num_tokens", k),) if k else ())


def cells(setup: TabbySetup, candidate, prefix: str):
    """One grid cell per k for a TabbyAPI SpecDeck starts (k is config-only: one cell, at
    config.yml's k, for a running one, and on exl2-checkpoint, which always drafts 4)."""
    from specdeck.core.bench.grid import Cell

    if not setup.managed:
        return [Cell(arm(setup, prefix + "reload", candidate.draft.name), candidate.label)]
    values = K_VALUES if setup.main_branch else (None,)
    return [Cell(_arm(setup, prefix + (str(k) if k else "default"),
                      settings_of(candidate, k, setup.main_branch), drafts=True, k=k),
                 candidate.label + (f" k={k}" if k else ""), (("k", str(k)),) if k else ())
            for k in values]


# The loop -------------------------------------------------------------------------------------
def _drafting(row) -> tuple[str, ...]:
    """What the setting of ``row`` would write into config.yml, as "key=value"."""
    server = row.cell.arm.server
    if server.tabby_launch is not None:
        return tuple(f"{key}={value}" for key, value in server.tabby_launch.draft)
    return (f"draft_model_name={server.tabby.draft_model_name}",)


def _engine(setup: TabbySetup, predicted: list):
    from specdeck.core.servers.engine import ServerEngine
    from specdeck.core.servers.llama_server import SERVER_OVERHEAD, servers_that_fit

    if not setup.managed:
        return ServerEngine()
    biggest = max((c.draft_bytes for c, _ in predicted), default=0)
    return ServerEngine(max_servers=servers_that_fit(
        setup.facts.weight_bytes + biggest + SERVER_OVERHEAD, setup.on_gpu))


def tuned_server():
    """What the tuning loop (core.tune.run.search_and_decide) needs from a TabbyAPI."""
    from specdeck.core.tune.run import TunedServer

    return TunedServer(reference_arm=reference_arm, current_arm=current_arm,
                       cells=lambda setup, c: cells(setup, c, c.arm_prefix),
                       drafting=_drafting, engine=_engine, model=lambda setup: setup.model_name)


def tune_tabby(setup: TabbySetup, options=None, engine=None, on_event=None,
               cancel: threading.Event | None = None, history: list[dict] | None = None):
    """``core.tune.run.tune`` for a TabbyAPI: its candidates (:func:`find`), then the same
    search, verification and decision."""
    import time

    from specdeck.core.tune.predict import history_note, read_history
    from specdeck.core.tune.run import (
        CandidatesFound,
        Phase,
        TuneOptions,
        cancelled_reading,
        ranked,
        search_and_decide,
    )

    options = options or TuneOptions()
    emit = on_event or (lambda _e: None)
    cancel = cancel or threading.Event()
    started = time.monotonic()
    emit(Phase("candidates", f"Reading what {setup.where} can draft with"))
    found = find(setup, cancel)
    notes = [] if history is not None else list(filter(None, [history_note()]))
    history = read_history() if history is None else history
    predicted = ranked(found, setup, options, history)
    emit(CandidatesFound(tuple(predicted), found.not_tried))
    phase_s = {"candidates": time.monotonic() - started}
    if cancel.is_set():
        return cancelled_reading(setup, options, found, phase_s, notes)
    if not predicted:
        raise InvalidInputError(f"{setup.where}: nothing to try ({found.why_none}).",
                                f"Put a draft model of the target's family in {setup.draft_dir}"
                                + ("" if setup.managed else ", or give TabbyAPI's folder "
                                   "(--tabby-folder) so SpecDeck can try its draft modes")
                                + ".")
    server = tuned_server()
    notes += [] if setup.managed else [
        "TabbyAPI reads draft_num_tokens and draft_mode when it starts: against a running "
        "TabbyAPI only its draft models were compared, at config.yml's k."]
    return search_and_decide(setup, server, options, predicted, found, (), phase_s, notes,
                             engine or server.engine(setup, predicted), emit, cancel)


# Apply ----------------------------------------------------------------------------------------
def apply_tabby(result, confirm=None, cancel: threading.Event | None = None):
    """Write a verified TabbyAPI winner's draft settings into config.yml (the config editor:
    only those keys change, a diff first, a .bak, an atomic save), never over a file that
    changed while tuning ran; then run TabbyAPI as the file now says and roll the file back
    byte for byte if it does not answer."""
    from specdeck.core import config
    from specdeck.core.servers.tabby_launch import parse_arm, plan_apply_settings
    from specdeck.core.tune.apply import counted, refuse_if_changed, write_and_prove

    setup: TabbySetup = result.setup
    flags = " ".join(result.decision.flags or ())
    doc = config.load(setup.config)
    _, settings = parse_arm(flags, "W", doc.backend_hint())
    change = plan_apply_settings(settings, setup.config)
    how = ("started from the saved file" if setup.managed else
           "loaded with the saved draft through its admin API (it reads config.yml when it "
           "starts: restart it to keep the setting)")
    started: list[int] = []
    return counted(write_and_prove(
        setup.config, flags, change, confirm,
        lambda: relaunch(result, cancel, started),
        proved=f"TabbyAPI {how} answered. It reports no draft counts, so whether it drafts is "
               "seen only in its speed.",
        noop="The file already has these settings: nothing to write.",
        unchanged=lambda: refuse_if_changed(setup.config, doc.disk_fingerprint,
                                            setup.fingerprint)), started)


def relaunch(result, cancel: threading.Event | None = None,
             started: list[int] | None = None) -> str | None:
    """Run one held-out prompt on TabbyAPI as the saved config.yml says, on its own
    (core.tune.apply.run_written); None when it answered, else what went wrong."""
    from specdeck.core.tune.apply import run_written

    setup: TabbySetup = result.setup
    try:
        written = read_install(setup.config.parent, setup.python, setup.api_key_env) \
            if setup.managed else _from_doc(_load(setup.config), setup.model_name, url=setup.url,
                                            api_key_env=setup.api_key_env,
                                            admin_key_env=setup.admin_key_env)
        arm_written = current_arm(written, "written")
        if arm_written is None:
            return "the saved config.yml does not draft."
        answer = run_written(result, written.model_name, arm_written, cancel, started)
    except SpecDeckError as exc:
        return f"TabbyAPI did not run as the saved file says: {exc}"
    if not answer.stats.new_tokens:
        return "TabbyAPI with the saved settings answered with no tokens."
    return None


def _load(path: Path):
    from specdeck.core.config.document import ConfigDocument

    return ConfigDocument.from_file(path)


# A saved tune, applied later (--apply-saved) ---------------------------------------------------
LOOPBACK = ("127.0.0.1", "localhost", "::1", "0.0.0.0")


def read_saved_tabby(saved: dict[str, str], python: str | None = None,
                     api_key_env: str | None = None,
                     admin_key_env: str | None = None) -> TabbySetup:
    """The TabbyAPI a saved tune names, read again from its config.yml. What the saved file
    says is data: the Python that runs it is the install's own (or ``python``, the command
    line's), the keys come from the variables the command line names (or the defaults),
    never from variables the file names, and a running TabbyAPI's URL must be the one its
    config.yml serves on (its network port, on this machine or its host): the admin key is
    sent there."""
    from dataclasses import replace
    from urllib.parse import urlsplit

    from specdeck.core.config.document import ConfigDocument
    from specdeck.core.urls import redact_url

    try:
        config = Path(saved["config"])
    except KeyError:
        raise InvalidInputError("The saved tune names no TabbyAPI config.yml.",
                                "Tune it again.") from None
    if saved.get("python") is not None:  # SpecDeck started it
        now = read_tabby(config.parent, python, None, None, api_key_env, None)
        return replace(now, fingerprint=saved.get("fingerprint"))
    url = saved.get("url") or ""
    network = ConfigDocument.from_file(config).section_values("network")
    host = str(network.get("host") or "127.0.0.1")
    port = network.get("port") or 5000
    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and parts.port == port \
            and (parts.hostname in LOOPBACK or parts.hostname == host)
    except ValueError:
        ok = False
    if not ok:
        raise InvalidInputError(f"The saved tune names a TabbyAPI at {redact_url(url)}, not the "
                                f"one {config} serves ({host}:{port}); SpecDeck sends its keys "
                                "only there.", "Tune it again (--tabby URL --tabby-config FILE).")
    now = read_tabby(None, None, url, config, api_key_env, admin_key_env)
    return replace(now, fingerprint=saved.get("fingerprint"))


def checked_saved_settings(setup: TabbySetup, flags: list[str]) -> tuple[str, ...]:
    """A saved TabbyAPI winner's ``key=value`` draft settings, checked again: each a
    draft_model key with a value TabbyAPI's own rule takes (core.config.schema), and a
    draft model named by its folder in config.yml's draft_model_dir, which must hold it."""
    import shlex

    from specdeck.core.printable import printable
    from specdeck.core.servers.tabby_launch import draft_keys, parse_arm

    known = draft_keys()
    for flag in flags:
        key, eq, _ = flag.partition("=")
        if not eq or key not in known:
            raise InvalidInputError(f"The saved tune's winner has {printable(flag)[:80]!r}, "
                                    "not a draft_model setting SpecDeck writes.",
                                    "Tune it again.")
    _, settings = parse_arm(" ".join(shlex.quote(f) for f in flags), "W",
                            _load(setup.config).backend_hint())
    for key, value in settings:
        if key == "draft_model_name" and value:
            name = str(value)
            if Path(name).name != name or name.startswith(".") \
                    or not (setup.draft_dir / name).is_dir():
                raise InvalidInputError(f"The saved tune's draft model {printable(name)[:80]!r} "
                                        f"is not a folder in {setup.draft_dir}.",
                                        "Tune it again.")
    return tuple(flags)
