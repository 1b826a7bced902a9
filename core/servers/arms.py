"""A server arm: where an A/B arm's tokens come from when a server makes them.

Either a running server (a URL; its kind detected or given) or a llama-server that SpecDeck
launches from a profile. API keys are never part of an arm: they come from an environment
variable the arm names (or SPECDECK_SERVER_API_KEY), or the system keyring, and plan files
carry only the variable's name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from specdeck.core.errors import InvalidInputError
from specdeck.core.servers.key_names import DEFAULT_KEY_ENV, KEYRING_SERVICE
from specdeck.core.servers.kinds import ServerKind, parse_kind
from specdeck.core.servers.llama_server import LaunchProfile
from specdeck.core.servers.tabby_launch import TabbyLaunch
from specdeck.core.servers.tabby_reload import TabbyLoad
from specdeck.core.urls import redact_url, shown_args
from specdeck.core.userpath import expand_user


@dataclass(frozen=True)
class ServerArm:
    url: str | None = None
    """A running server's base URL (credentials in it are used, never saved)."""
    launch: LaunchProfile | None = None
    """A llama-server SpecDeck starts for this arm."""
    kind: ServerKind | None = None
    """None = detect by probing."""
    model: str | None = None
    """The model name to request (llama-swap and routers switch by it); None = the loaded one."""
    api_key_env: str | None = None
    tabby: TabbyLoad | None = None
    """For a TabbyAPI at ``url``: the model and draft to reload it with for this arm."""
    draft_model: str | None = None
    """For LM Studio: the draft model this arm's requests name (its per-request
    ``draft_model``), so one LM Studio serves every arm."""
    tabby_launch: TabbyLaunch | None = None
    """A TabbyAPI SpecDeck starts for this arm (core.servers.tabby_launch)."""

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.url, self.launch, self.tabby_launch)) != 1:
            raise InvalidInputError("A server arm needs one of a URL, a llama-server launch "
                                    "profile or a TabbyAPI launch.")
        if self.tabby is not None and self.url is None:
            raise InvalidInputError("A TabbyAPI reload arm needs the TabbyAPI's URL.")

    @property
    def managed(self) -> LaunchProfile | TabbyLaunch | None:
        """What SpecDeck starts for this arm (None: a running server)."""
        return self.launch or self.tabby_launch

    @property
    def where(self) -> str:
        if self.tabby_launch is not None:
            return self.tabby_launch.where
        if self.launch is not None:
            return f"llama-server {' '.join(shown_args(self.launch.args)) or '(no drafting flags)'}"
        shown = redact_url(self.url or "")
        if self.tabby is not None:
            draft = (f"draft {self.tabby.draft_model_name}" if self.tabby.draft_model_name
                     else "no draft")
            return f"{shown} reloaded: {self.tabby.model_name or 'its model'}, {draft}"
        shown = f"{shown}#{self.model}" if self.model else shown
        return f"{shown} + draft {self.draft_model}" if self.draft_model else shown

    def api_key(self) -> str | None:
        """The key for this arm: its environment variable, the default one, the keyring; a
        llama-server SpecDeck launches takes the key its command line gives, and no other."""
        if self.launch is not None:
            return self.launch.api_key()
        for name in (self.api_key_env, DEFAULT_KEY_ENV):
            if name and os.environ.get(name):
                return os.environ[name]
        if self.tabby_launch is not None:  # the key TabbyAPI made for itself in its folder
            return self.tabby_launch.api_key()
        if self.url is None:
            return None
        try:
            import keyring

            parts = urlsplit(self.url if "://" in self.url else f"http://{self.url}")
            return keyring.get_password(KEYRING_SERVICE, parts.netloc.rsplit("@", 1)[-1]) or None
        except Exception:  # noqa: BLE001 - no keyring backend is "no key"
            return None

    def to_json(self) -> dict[str, Any]:
        return {
            "url": None if self.url is None else _without_password(self.url),
            "launch": None if self.launch is None else self.launch.to_json(),
            "kind": None if self.kind is None else self.kind.value,
            "model": self.model,
            "api_key_env": self.api_key_env,
            "tabby": None if self.tabby is None else self.tabby.to_json(),
            "draft_model": self.draft_model,
            "tabby_launch": None if self.tabby_launch is None else self.tabby_launch.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ServerArm:
        launch = data.get("launch")
        kind = data.get("kind")
        tabby = data.get("tabby")
        tabby_launch = data.get("tabby_launch")
        return cls(
            url=data.get("url"),
            launch=None if launch is None else LaunchProfile.from_json(launch),
            kind=None if kind is None else parse_kind(str(kind)),
            model=data.get("model"),
            api_key_env=data.get("api_key_env"),
            tabby=None if tabby is None else TabbyLoad.from_json(tabby),
            draft_model=data.get("draft_model"),
            tabby_launch=None if tabby_launch is None else TabbyLaunch.from_json(tabby_launch),
        )


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return redact_url(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    netloc = f"{parts.username}@{host}" if parts.username else host
    return redact_url(urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment)))


def split_arm_name(text: str, default: str) -> tuple[str, str]:
    """"NAME=VALUE" -> (NAME, VALUE) when NAME looks like an arm name; else (default, text)."""
    head, eq, tail = text.partition("=")
    if eq and head and head.replace("-", "").replace("_", "").isalnum():
        return head, tail
    return default, text


def url_arm(name: str, url: str, model: str | None = None, api_key_env: str | None = None,
            reference: bool = False, kind: ServerKind | None = None,
            draft_model: str | None = None):
    """An arm for a running server: the reference does not draft; the others draft as their
    servers are configured (or, on LM Studio, with the draft model their requests name)."""
    from specdeck.core.bench.plan import Arm
    from specdeck.core.engines.base import NO_DRAFT, DrafterKind, DrafterSpec

    if reference and draft_model:
        raise InvalidInputError(f"Arm {name} is the reference; it cannot name a draft model.",
                                "Give the draft to a later arm.")
    drafter = NO_DRAFT if reference else DrafterSpec(DrafterKind.SERVER, adaptive=False)
    return Arm(name, drafter, ServerArm(url=url.strip(), kind=kind, model=(model or "").strip()
                                        or None, api_key_env=(api_key_env or "").strip() or None,
                                        draft_model=(draft_model or "").strip() or None))


def launched_arm(name: str, binary: str, gguf: str, flags: tuple[str, ...],
                 common: tuple[str, ...] = ()):
    """An arm whose llama-server SpecDeck launches: the binary, the target GGUF, the flags
    every arm shares, then this arm's own (its drafter is read from them). An arm that names
    a draft model is a drafting arm even without --spec-type: it is judged as one, and the
    probe (``core.servers.probe.launched_drafting``) says before its runs that it will not
    draft."""

    from specdeck.core import llama_flags
    from specdeck.core.bench.plan import Arm
    from specdeck.core.engines.base import DrafterKind
    from specdeck.core.servers.llama_server import binary_help, drafter_from_flags, flag_value

    profile = LaunchProfile(str(expand_user(binary)), str(expand_user(gguf)),
                            tuple(common) + tuple(flags))
    info = binary_help(profile.binary)
    drafter = drafter_from_flags(tuple(flags), info)
    if drafter.kind is DrafterKind.NONE and flag_value(tuple(flags), *llama_flags.DRAFT_MODEL):
        drafter = drafter_from_flags((*flags, llama_flags.SPEC_TYPE, llama_flags.DRAFT_SIMPLE),
                                     info)
    return Arm(name, drafter, ServerArm(launch=profile))


def describe(arm) -> str:
    """One line on what an arm is and whether it will draft, by which method, as far as can
    be told before a run (a worker calls it: it probes a running server, or reads a launched
    one's binary --help and draft GGUF); never raises."""
    return _described(arm, *_forecast(arm))


def _forecast(arm):
    """(whether it will draft, the running server's ServerInfo or None, the problem that
    stops it or None); never raises."""
    from specdeck.core.errors import SpecDeckError
    from specdeck.core.servers.probe import (
        Drafting,
        launched_drafting,
        probe,
        server_drafting,
        tabby_launch_drafting,
        tabby_reload_drafting,
    )

    server: ServerArm = arm.server
    if server.tabby_launch is not None:
        from specdeck.core.servers.tabby_launch import check_folder

        try:
            check_folder(server.tabby_launch)
        except SpecDeckError as exc:
            return Drafting(False, why=exc.what), None, exc.what
        return tabby_launch_drafting(server.tabby_launch.draft), None, None
    if server.launch is not None:
        from specdeck.core.servers.llama_server import check_launch

        try:
            check_launch(tuple(server.launch.args), server.launch.binary)
        except SpecDeckError as exc:
            return Drafting(False, why=exc.what), None, exc.what
        return launched_drafting(server.launch), None, None
    if server.tabby is not None:
        return tabby_reload_drafting(server.tabby.draft_model_name), None, None
    try:
        info = probe(server.url, server.api_key(), server.kind)
    except SpecDeckError as exc:
        return Drafting(None, why=f"not probed: {exc.what}"), None, exc.what
    return server_drafting(info, server.model, server.draft_model), info, None


def _described(arm, drafting, info, problem: str | None) -> str:
    from specdeck.core.servers.llama_server import drafting_flags, shown_command

    server: ServerArm = arm.server
    if problem is not None:
        return f"{arm.name}: {problem}"
    if server.tabby_launch is not None:
        settings = ", ".join(f"{k}: {v!r}" if v == "" else f"{k}: {v}"
                             for k, v in server.tabby_launch.draft)
        return (f"{arm.name}: starts TabbyAPI with {settings or 'its config.yml'}; folder ok; "
                f"{drafting.line}")
    if server.launch is not None:
        shown = shown_command(list(drafting_flags(tuple(server.launch.args))))
        return (f"{arm.name}: launched llama-server, {shown or 'no drafting flags'}; flags "
                f"accepted; {drafting.full}")
    if info is None:
        return f"{arm.name}: {server.where}; {drafting.line}"
    if info.router:
        if not server.model:
            return f"{arm.name}: llama-server router; name a model: {', '.join(info.models)}"
        flags = info.flags_of(server.model)
        if flags is None:
            return f"{arm.name}: the router has no model {server.model!r}"
        shown = shown_command(list(drafting_flags(flags))) or "no drafting flags"
        return f"{arm.name}: router model {server.model}, {shown}; {drafting.line}"
    if info.kind is ServerKind.LLAMA_SWAP:
        if not server.model or server.model not in info.models:
            return f"{arm.name}: llama-swap; name a model: {', '.join(info.models)}"
        return (f"{arm.name}: llama-swap model {server.model} (its drafting flags are read "
                "when it starts)")
    return f"{arm.name}: {info.kind.value}, {drafting.line}"


def arms_from_urls(texts, kind: ServerKind | None = None, api_key_env: str | None = None,
                   drafts: dict[str, str] | None = None):
    """Arms for running servers, from "[NAME=]URL[#MODEL]" texts: the first is the no-draft
    reference, the others draft as their servers are configured. ``drafts``: arm name ->
    the draft model its requests name (LM Studio)."""
    from specdeck.core.bench.plan import arm_letter

    arms = []
    drafts = dict(drafts or {})
    for text in (t.strip() for t in texts):
        if not text:
            continue
        name, url = split_arm_name(text, arm_letter(len(arms)))
        url, _, model = url.partition("#")
        arms.append(url_arm(name, url, model, api_key_env, reference=not arms, kind=kind,
                            draft_model=drafts.pop(name, None)))
    if drafts:
        raise InvalidInputError(f"--server-draft names no arm called {', '.join(drafts)}.",
                                "Name the arms: --server B=URL --server-draft B=DRAFT.")
    if len({a.name for a in arms}) != len(arms):
        raise InvalidInputError("Two server arms have the same name.",
                                "Name them: A=http://... B=http://...")
    return tuple(arms)


def tabby_arms(url: str, drafts, model_name: str = "", api_key_env: str | None = None,
               admin_key_env: str | None = None):
    """Arms that reload one TabbyAPI: A holds ``model_name`` (default: the model it holds
    when the plan starts) without a draft, then one arm per "[NAME=]DRAFT" in ``drafts``."""
    from specdeck.core.bench.plan import Arm, arm_letter
    from specdeck.core.engines.base import NO_DRAFT, DrafterKind, DrafterSpec

    def arm(name: str, draft: str | None):
        load = TabbyLoad(model_name, draft, admin_key_env=admin_key_env)
        drafter = NO_DRAFT if draft is None else DrafterSpec(DrafterKind.SERVER, adaptive=False)
        return Arm(name, drafter, ServerArm(url=url, kind=ServerKind.TABBYAPI,
                                            api_key_env=api_key_env, tabby=load))

    arms = [arm("A", None)]
    for text in drafts:
        name, draft = split_arm_name(text.strip(), arm_letter(len(arms)))
        if not draft:
            raise InvalidInputError(f"--tabby-draft {text!r} names no draft model.",
                                    "Give the draft's folder name in TabbyAPI's draft_model_dir.")
        arms.append(arm(name, draft))
    if len({a.name for a in arms}) != len(arms):
        raise InvalidInputError("Two TabbyAPI arms have the same name.")
    return tuple(arms)
