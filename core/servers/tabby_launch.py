"""Start TabbyAPI for one A/B arm, from a copy of the user's config.yml that differs only in
the draft settings; stop it after the arm. The user's config.yml is read, never written.

What SpecDeck relies on, from TabbyAPI's source (main e632af41; exl2-checkpoint 79126f90 is
the same in each point):

- ``python main.py --config FILE`` (common/args.py builds an option per config field; the
  ``config`` group's ``--config`` is "Path to an overriding config.yml file"). Its values are
  merged over the config.yml of the working folder and the ``TABBY_*`` environment
  (common/tabby_config.py ``load``: file, environment, then the override, with None values
  dropped), and every other command-line option is then ignored (``_from_args`` returns
  early). So the arm's copy is complete (host, port, model, draft), the working folder is
  TabbyAPI's own (relative paths in the file, api_tokens.yml and templates resolve from it).
- A value left blank (None) in the copy does not clear the one in config.yml, since the merge
  drops None: the arm without a draft says so with ``draft_mode: disabled`` on main
  (backends/exllamav3/model.py accepts model, disabled, mtp, ngram) and an empty
  ``draft_model_name`` on exl2-checkpoint (backends/exllamav2/model.py drafts only when the
  name is truthy).
- The model loads before the API starts (main.py ``entrypoint_async``), so ``GET /health``
  answering means the arm is ready; a port in use makes TabbyAPI take the next one
  (``is_port_in_use``; it logs "Switching to"), so both are tried.
- A config.yml in the legacy layout (``model.draft``) is rewritten by TabbyAPI at every start
  (``_from_file`` renames it to config.yml.bak and writes a migrated one): SpecDeck refuses
  to start TabbyAPI in a folder whose config.yml it would rewrite, and says how to migrate.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdeck.core.config.schema import (
    DRAFT,
    DRAFT_MODE_DISABLED,
    draft_mode_of,
    loads_draft_model,
)
from specdeck.core.config.tabby import CONFIG_NAME
from specdeck.core.errors import InvalidInputError, NotFoundError, SpecDeckError
from specdeck.core.servers.process import ManagedProcess
from specdeck.core.units import KiB

NO_HTTP_COUNTS = "TabbyAPI returns no draft counts over HTTP"
EXL2_LOGS_NONE = "the ExLlamaV2 backend of its exl2-checkpoint branch logs none"
"""Why a TabbyAPI arm may have no draft counts, said once for the plan's notes and the
summary (see LOG_SOURCE)."""
LOG_SOURCE = "TabbyAPI's log (Metrics ... Draft: A / T tokens accepted)"
"""Where a launched TabbyAPI arm's draft counts come from: TabbyAPI returns none over HTTP,
but logs them per request (common/gen_logging.py ``log_metrics``, main e632af41, from the
ExLlamaV3 backend's draft_accept / draft_reject; exl2-checkpoint's ExLlamaV2 backend passes
none, so its lines have no Draft part)."""
LOG_WAIT_S = 5.0
"""TabbyAPI logs a request's metrics after its stream ends (backends/exllamav3/model.py,
``finally``): how long to wait for that line before saying the log had none."""
LOG_WIDTH = "100000"
"""TABBY_LOG_CONSOLE_WIDTH for a TabbyAPI SpecDeck starts (common/logger.py): Rich wraps its
console at 80 columns when the output is not a terminal, which would split a metrics line."""
MAX_LOG_LINE = 64 * KiB
"""Longer than any metrics line TabbyAPI writes: a longer unfinished line is not kept."""
_METRICS = re.compile(r"Metrics \(ID: ([0-9A-Za-z_.-]{1,200})\): (.*)")
_DRAFT = re.compile(r"Draft: (\d{1,12}) / (\d{1,12}) tokens accepted")

HEALTH_TIMEOUT_S = 900.0
"""A 70B model's load from a slow disk happens before TabbyAPI answers /health."""
STOP_TIMEOUT_S = 20.0


def default_python(folder: Path) -> Path | None:
    """The Python of TabbyAPI's own venv (start.sh/start.bat create ``venv`` in its folder)."""
    for candidate in (folder / "venv" / "bin" / "python", folder / "venv" / "Scripts" /
                      "python.exe"):
        if candidate.is_file():
            return candidate
    return None


@dataclass(frozen=True)
class TabbyLaunch:
    """How to start TabbyAPI for one arm."""

    folder: str
    """TabbyAPI's folder (main.py, config.yml, api_tokens.yml)."""
    python: str
    draft: tuple[tuple[str, Any], ...] = ()
    """draft_model keys this arm sets, e.g. (("draft_mode", "ngram"),
    ("draft_num_tokens", 4)); the rest of config.yml is as the user wrote it."""
    host: str = "127.0.0.1"
    port: int = 0
    """0 = a free port."""

    @property
    def config(self) -> Path:
        return Path(self.folder) / CONFIG_NAME

    def api_key(self) -> str | None:
        """The API key in the folder's api_tokens.yml (TabbyAPI writes it at its first start;
        common/auth.py), or None. Read to send, never shown or saved."""
        from ruamel.yaml import YAML
        from specdeck.core.files import KEY_FILE, read_text_bounded

        path = Path(self.folder) / "api_tokens.yml"
        try:
            # Read with bounds (a FIFO, /dev/zero or a huge file is no key file), and the key
            # taken only as the short string TabbyAPI writes (an alias-built tree is none).
            text = read_text_bounded(path, "API key file", limit=KEY_FILE)
            tokens = YAML(typ="safe").load(text)
        except (OSError, ValueError, RecursionError, Exception):  # noqa: BLE001 - no key
            return None
        key = tokens.get("api_key") if isinstance(tokens, dict) else None
        return key if isinstance(key, str) and 0 < len(key) <= 1024 else None

    @property
    def where(self) -> str:
        shown = ", ".join(f"{k}: {v}" for k, v in self.draft) or "config.yml's draft settings"
        return f"TabbyAPI in {self.folder} ({shown})"

    def to_json(self) -> dict:
        return {"folder": self.folder, "python": self.python,
                "draft": [[k, v] for k, v in self.draft], "host": self.host, "port": self.port}

    @classmethod
    def from_json(cls, data: dict) -> TabbyLaunch:
        return cls(str(data["folder"]), str(data["python"]),
                   tuple((str(k), v) for k, v in data.get("draft", ())),
                   str(data.get("host", "127.0.0.1")), int(data.get("port", 0)))


def no_draft(main_branch: bool) -> tuple[tuple[str, Any], ...]:
    """The draft settings of an arm that must not draft, whatever config.yml says."""
    return (("draft_mode", DRAFT_MODE_DISABLED),) if main_branch else (("draft_model_name", ""),)


def switched_off(settings) -> bool:
    """Whether an arm's draft settings switch drafting off whatever config.yml says: either
    of what :func:`no_draft` writes (``draft_mode: disabled`` on main, an empty
    ``draft_model_name`` on exl2-checkpoint)."""
    values = dict(settings)
    return draft_mode_of(values) == DRAFT_MODE_DISABLED or values.get("draft_model_name") == ""


def draft_values(launch: TabbyLaunch, doc=None) -> dict[str, Any]:
    """The draft_model values the arm's TabbyAPI starts with: its settings over config.yml's
    (``doc``, None when there is none)."""
    return {**(doc.section_values(DRAFT) if doc is not None else {}), **dict(launch.draft)}


FOLDER_HINT = "Give the folder you cloned TabbyAPI into."


def check_folder(launch: TabbyLaunch) -> None:
    """Refuse what TabbyAPI could not start, or would start by rewriting the user's file."""
    from specdeck.core.config.document import ConfigDocument, Layout
    from specdeck.core.userpath import must_exist

    folder = must_exist(launch.folder, "TabbyAPI folder", FOLDER_HINT)
    if not (folder / "main.py").is_file():
        raise NotFoundError(f"{folder} is not a TabbyAPI folder (no main.py).", FOLDER_HINT)
    if not Path(launch.python).is_file():
        raise NotFoundError(f"{launch.python} does not exist.",
                            "Give the Python of TabbyAPI's venv (its folder's venv/bin/python "
                            "after start.sh).")
    if not launch.config.is_file():
        return
    doc = ConfigDocument.from_file(launch.config)
    if doc.layout is Layout.LEGACY_NESTED:
        raise InvalidInputError(
            f"{launch.config} has the legacy layout (model.draft): TabbyAPI rewrites such "
            "a file every time it starts, so SpecDeck will not start it there.",
            f"Migrate it first: specdeck config migrate {launch.config}")
    values = draft_values(launch, doc)
    folders = [("model", doc.target_model_path(), "model_name")]
    if loads_draft_model(values):
        folders.append(("draft model", doc.resolve_dir(DRAFT, "draft_model_dir") /
                        str(values["draft_model_name"]),
                        "draft_model_name"))
    for what, path, key in folders:
        if path is not None and not path.is_dir():
            raise NotFoundError(f"TabbyAPI would not start: the {what} folder {path} does not "
                                "exist.", f"Check {key} (and its folder setting) in "
                                f"{launch.config}, or the arm's settings.")


def arm_config(launch: TabbyLaunch, port: int) -> str:
    """The arm's config.yml: the user's values, with where to listen and the arm's draft."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe")
    data: dict = {}
    if launch.config.is_file():
        from specdeck.core.config.document import ConfigDocument

        # Read as every config.yml is (its cap, UTF-8, no alias bomb), then as plain values.
        loaded = yaml.load(ConfigDocument.from_file(launch.config).text)
        data = loaded if isinstance(loaded, dict) else {}
    network = data.get("network") if isinstance(data.get("network"), dict) else {}
    data["network"] = {**network, "host": launch.host, "port": port}
    draft = data.get(DRAFT) if isinstance(data.get(DRAFT), dict) else {}
    data[DRAFT] = {**draft, **dict(launch.draft)}
    out = io.StringIO()
    YAML().dump(data, out)
    return out.getvalue()


@dataclass
class ManagedTabby(ManagedProcess):
    """One TabbyAPI that SpecDeck started for an arm; ``stop()`` ends it and removes its
    config copy."""

    profile: TabbyLaunch
    log_path: Path
    api_key: str | None = None
    process: subprocess.Popen | None = None
    url: str = ""
    _log: object = field(default=None, repr=False)
    _dir: Path | None = None
    _log_read: int = 0
    """How far logged_draft has read the log (each byte is read once)."""
    _log_partial: bytes = b""
    """The end of the log past its last whole line, when last read."""
    name = "TabbyAPI"
    stop_timeout_s = STOP_TIMEOUT_S

    def start(self, cancel: threading.Event | None = None,
              timeout: float = HEALTH_TIMEOUT_S) -> str:
        from specdeck.core.servers.llama_server import free_port

        check_folder(self.profile)
        port = self.profile.port or free_port(self.profile.host)
        self._dir = Path(tempfile.mkdtemp(prefix="specdeck-tabby-"))
        self._log_read, self._log_partial = 0, b""  # a new log
        copy = self._dir / CONFIG_NAME
        copy.write_text(arm_config(self.profile, port), encoding="utf-8")
        self._spawn([self.profile.python, "main.py", "--config", str(copy)],
                    cwd=self.profile.folder, env={**os.environ,
                                                  "TABBY_LOG_CONSOLE_WIDTH": LOG_WIDTH})
        try:
            # TabbyAPI moves to the next port when its own is taken.
            self.url = self._wait_healthy(
                [f"http://{self.profile.host}:{p}" for p in (port, port + 1)],
                lambda h: isinstance(h, dict) and h.get("status") == "healthy",
                timeout, cancel, 0.2, f"Its whole log: {self.log_path}.")
        except BaseException:
            self.stop()
            raise
        return self.url

    def logged_draft(self, request_id: str, cancel: threading.Event | None = None,
                     wait_s: float = LOG_WAIT_S) -> LoggedDraft | None:
        """What TabbyAPI's log says of request ``request_id`` (the chunks' id without its
        "chatcmpl-"), waiting up to ``wait_s`` for the line it writes after the stream;
        None when no such line came."""
        from specdeck.core.files import LOG_STEP, read_new

        deadline = time.monotonic() + wait_s
        found = None
        while True:
            # Only what the log gained since the last look (a log of gigabytes is not read
            # again for every request), whole lines, at most 4 MiB a look.
            while True:
                new, start = read_new(self.log_path, self._log_read, LOG_STEP)
                if start != self._log_read:
                    self._log_partial = b""  # the log was started again
                self._log_read = start + len(new)
                whole, _, self._log_partial = (self._log_partial + new).rpartition(b"\n")
                if len(self._log_partial) > MAX_LOG_LINE:
                    self._log_partial = b""  # no metrics line is that long
                found = logged_draft(whole.decode("utf-8", errors="replace"),
                                     request_id) or found
                if len(new) < LOG_STEP:
                    break  # caught up with the log
            if found is not None or time.monotonic() > deadline or \
                    (cancel is not None and cancel.is_set()) or self.process is None \
                    or self.process.poll() is not None:
                return found
            time.sleep(0.05)

    def stop(self) -> None:
        self._end()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


@dataclass(frozen=True)
class LoggedDraft:
    """One request's metrics line in TabbyAPI's log: its draft counts, where it has them."""

    accepted: int | None
    drafted: int | None
    """accept + reject ("Draft: A / T tokens accepted"); None: the line has no Draft part
    (no drafter, or a backend that logs none)."""


def logged_draft(text: str, request_id: str) -> LoggedDraft | None:
    """The draft counts TabbyAPI logged for ``request_id`` (the last such line), or None."""
    found = None
    for match in _METRICS.finditer(text):
        if match.group(1) != request_id:
            continue
        draft = _DRAFT.search(match.group(2))
        found = LoggedDraft(int(draft.group(1)), int(draft.group(2))) if draft else \
            LoggedDraft(None, None)
    return found


def logged_acceptance(launch: TabbyLaunch) -> str:
    """Where a launched TabbyAPI arm's draft acceptance comes from, said before it starts: its
    log (``LOG_SOURCE``) where the install runs ExLlamaV3 (TabbyAPI main), whose backend logs
    the counts; none on exl2-checkpoint, whose ExLlamaV2 backend logs none."""
    main, _backend = _install(Path(launch.folder))
    if main:
        return LOG_SOURCE
    return f"not reported by this server ({NO_HTTP_COUNTS}, and {EXL2_LOGS_NONE})"


def draft_model_of(launch: TabbyLaunch) -> str | None:
    """The draft model an arm's TabbyAPI loads (it then drafts with it at every step), from
    the arm's settings over the folder's config.yml; None without one (n-gram, MTP, off)."""
    from specdeck.core.config.document import ConfigDocument

    doc = ConfigDocument.from_file(launch.config) if launch.config.is_file() else None
    values = draft_values(launch, doc)
    return str(values["draft_model_name"]) if loads_draft_model(values) else None


def python_for(folder: str | Path, python: str | Path | None = None) -> str:
    """The Python that runs TabbyAPI in ``folder``: the one given, else its venv's."""
    from specdeck.core.userpath import must_exist

    must_exist(folder, "TabbyAPI folder", FOLDER_HINT)
    if python is not None:
        return str(python)
    found = default_python(Path(folder))
    if found is None:
        raise NotFoundError(f"{folder} has no venv (venv/bin/python): SpecDeck does not know "
                            "which Python runs this TabbyAPI.",
                            "Give it with --tabby-python (the Python start.sh uses).")
    return str(found)


def draft_keys() -> tuple[str, ...]:
    """The draft_model keys an arm may set (core.config.schema's table, minus the folder)."""
    from specdeck.core.config.schema import SETTINGS

    return tuple(s.key for s in SETTINGS if s.section == DRAFT and s.key != "draft_model_dir")


def parse_arm(text: str, default_name: str, backend: str | None
              ) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """"[NAME=]key=value key=value ..." -> (NAME, settings), each value checked by TabbyAPI's
    own rule for its key (core.config.schema)."""
    import shlex

    from specdeck.core.config.schema import normalize, setting

    known = draft_keys()
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise InvalidInputError(f"--tabby-arm {text!r}: {exc}.") from None
    name = default_name
    if words and words[0].partition("=")[0] not in known:
        name, eq, rest = words[0].partition("=")
        if not eq or not name.replace("-", "").replace("_", "").isalnum():
            raise InvalidInputError(f"--tabby-arm {text!r}: {words[0]!r} is neither NAME= nor "
                                    "a draft setting.",
                                    f"Write [NAME=]key=value ...; keys: {', '.join(known)}.")
        words = [rest, *words[1:]] if rest else words[1:]
    settings = []
    for word in words:
        key, eq, value = word.partition("=")
        if not eq or key not in known:
            raise InvalidInputError(f"--tabby-arm {text!r}: {word!r} is not key=value with a "
                                    "draft_model key.", f"Keys: {', '.join(known)}.")
        settings.append((key, normalize(setting(DRAFT, key), value, backend)))
    return name, tuple(settings)


def _install(folder: Path) -> tuple[bool, str | None]:
    """(TabbyAPI main?, the backend its config.yml implies) for the install in ``folder``."""
    from specdeck.core.config.document import ConfigDocument

    config = folder / CONFIG_NAME
    doc = ConfigDocument.from_file(config) if config.is_file() else None
    if doc is None:
        return False, None
    return doc.runs_exllamav3, doc.backend_hint()


def launched_tabby_arm(name: str, folder: str | Path, text: str = "",
                       python: str | Path | None = None, api_key_env: str | None = None,
                       reference: bool = False):
    """An arm that starts TabbyAPI from ``folder`` with the draft settings ``text`` ("key=value
    ...", as --tabby-arm takes them); the reference runs without a draft whatever config.yml
    says."""
    from specdeck.core.bench.plan import Arm
    from specdeck.core.engines.base import (
        DEFAULT_DRAFT_TOKENS,
        NO_DRAFT,
        DrafterKind,
        DrafterSpec,
    )
    from specdeck.core.servers.arms import ServerArm
    from specdeck.core.servers.kinds import ServerKind

    folder = Path(folder)
    main, backend = _install(folder)
    if reference:
        settings = no_draft(main)
    else:
        name, settings = parse_arm(f"{name}={text}", name, backend)
        if not settings:
            raise InvalidInputError(f"TabbyAPI arm {name} sets nothing.",
                                    "Give its draft settings, e.g. draft_mode=ngram.")
    values = dict(settings)
    off = switched_off(settings)
    k = int(values.get("draft_num_tokens") or DEFAULT_DRAFT_TOKENS)
    drafter = NO_DRAFT if off else DrafterSpec(
        DrafterKind.SERVER, num_draft_tokens=k, adaptive=bool(values.get("dynamic_draft")))
    return Arm(name, drafter, ServerArm(kind=ServerKind.TABBYAPI, api_key_env=api_key_env,
                                        tabby_launch=TabbyLaunch(str(folder),
                                                                 python_for(folder, python),
                                                                 settings)))


def launched_tabby_arms(folder: str | Path, texts, python: str | Path | None = None,
                        api_key_env: str | None = None):
    """Arms that each start TabbyAPI from ``folder`` with their own draft settings: A without
    a draft (whatever config.yml says), then one per "[NAME=]key=value ..." in ``texts``."""
    from specdeck.core.bench.plan import arm_letter

    arms = [launched_tabby_arm("A", folder, python=python, api_key_env=api_key_env,
                               reference=True)]
    for text in texts:
        name, _ = parse_arm(text, arm_letter(len(arms)), None)
        settings = text.split("=", 1)[1] if text.startswith(f"{name}=") else text
        arms.append(launched_tabby_arm(name, folder, settings, python, api_key_env))
    if len({a.name for a in arms}) != len(arms):
        raise InvalidInputError("Two TabbyAPI arms have the same name.")
    return tuple(arms)


def plan_apply_settings(settings, config_path: str | Path):
    """The config editor's change writing a winning arm's draft settings into config.yml
    (only those keys change; core.config keeps every other byte)."""
    from specdeck.core import config

    doc = config.load(config_path)
    return config.plan_change(doc, {(DRAFT, key): value for key, value in settings})


def memory_needed(launch: TabbyLaunch) -> int:
    """What one started TabbyAPI of this arm holds, at least: the target's and its draft's
    weights (their safetensors files; the cache comes on top, so ``servers_that_fit`` keeps
    its margin). Two that do not fit side by side are started one at a time."""
    from specdeck.core.config.document import ConfigDocument

    try:
        doc = ConfigDocument.from_file(launch.config)
    except SpecDeckError:
        return 0
    total = 0
    target = doc.target_model_path()
    values = draft_values(launch, doc)
    folders = [target] if target is not None else []
    if loads_draft_model(values):
        folders.append(doc.resolve_dir(DRAFT, "draft_model_dir") / str(values["draft_model_name"]))
    for folder in folders:
        with contextlib.suppress(OSError):
            total += sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    return total
