"""Switch the arms of one TabbyAPI by reloading its model through the admin API.

An arm says which model and which draft (or none) TabbyAPI should hold while it runs:
``POST /v1/model/unload``, then ``POST /v1/model/load`` with ``draft_model`` when the arm has a
draft, following the load's progress stream to its end. What was loaded before the plan is
restored when the plan ends, fails or is cancelled. The facts, from TabbyAPI's source (main
e632af41, exl2-checkpoint 79126f90):

- admin routes read ``x-admin-key`` or ``Authorization: Bearer`` (common/auth.py); the API
  key is not enough;
- the load body is ModelLoadRequest: ``model_name`` and ``draft_model`` =
  {draft_model_name, draft_rope_scale, draft_rope_alpha, draft_gpu_split}
  (endpoints/core/types/model.py); draft_num_tokens, draft_mode, ngram_match_min and
  draft_cache_mode are config.yml-only, so they are not sent and a plan cannot vary them;
- progress events are {"model_type", "module", "modules", "status": "processing" |
  "finished"}; the stream ends without [DONE]; an error is {"error": {"message", ...}} in a
  200 stream (endpoints/core/utils/model.py);
- reloading the model that is loaded may be a no-op: SpecDeck always unloads first.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field, replace
from typing import Any

from specdeck.core.errors import CancelledError, InvalidInputError, SpecDeckError
from specdeck.core.servers.key_names import DEFAULT_ADMIN_KEY_ENV
from specdeck.core.servers.transport import Base, ServerError, request_json, stream_sse
from specdeck.core.urls import redact_url

LOAD_TIMEOUT_S = 600.0
"""Longest wait between two progress events: a 70B model's layers on a slow disk."""
LOAD_TOTAL_S = 3600.0
"""Longest a whole load takes (a server that sends progress for ever is given up on)."""


@dataclass(frozen=True)
class TabbyLoad:
    """What TabbyAPI should hold while an arm runs (TabbyAPI's load request, in part)."""

    model_name: str
    draft_model_name: str | None = None
    draft_rope_alpha: float | None = None
    draft_rope_scale: float | None = None
    draft_gpu_split: tuple[float, ...] = ()
    admin_key_env: str | None = None

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"model_name": self.model_name}
        if self.draft_model_name:
            draft: dict[str, Any] = {"draft_model_name": self.draft_model_name}
            if self.draft_rope_alpha is not None:
                draft["draft_rope_alpha"] = self.draft_rope_alpha
            if self.draft_rope_scale is not None:
                draft["draft_rope_scale"] = self.draft_rope_scale
            if self.draft_gpu_split:
                draft["draft_gpu_split"] = list(self.draft_gpu_split)
            body["draft_model"] = draft
        return body

    def admin_key(self) -> str | None:
        for name in (self.admin_key_env, DEFAULT_ADMIN_KEY_ENV):
            if name and os.environ.get(name):
                return os.environ[name]
        return None

    def to_json(self) -> dict[str, Any]:
        return {"model_name": self.model_name, "draft_model_name": self.draft_model_name,
                "draft_rope_alpha": self.draft_rope_alpha,
                "draft_rope_scale": self.draft_rope_scale,
                "draft_gpu_split": list(self.draft_gpu_split),
                "admin_key_env": self.admin_key_env}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TabbyLoad:
        return cls(str(data["model_name"]), data.get("draft_model_name"),
                   data.get("draft_rope_alpha"), data.get("draft_rope_scale"),
                   tuple(float(v) for v in data.get("draft_gpu_split") or ()),
                   data.get("admin_key_env"))


@dataclass
class TabbyState:
    """What one TabbyAPI holds, as SpecDeck last set or saw it."""

    model_name: str | None
    draft_model_name: str | None
    log: list[str] = field(default_factory=list)


def loaded_state(base: Base, api_key: str | None) -> TabbyState:
    """The model and draft TabbyAPI holds now (None, None when nothing is loaded)."""
    try:
        card = request_json(base, "GET", "/v1/model", api_key=api_key)
    except ServerError as exc:
        if "503" in exc.what or "No models are currently loaded" in exc.what:
            return TabbyState(None, None)
        raise
    params = card.get("parameters") if isinstance(card, dict) else None
    draft = params.get("draft") if isinstance(params, dict) else None
    return TabbyState(card.get("id") if isinstance(card, dict) else None,
                      draft.get("id") if isinstance(draft, dict) else None)


def switch(base: Base, want: TabbyLoad, state: TabbyState, *,
           progress=None, cancel: threading.Event | None = None) -> TabbyState:
    """Make TabbyAPI hold ``want``: unload, then load, following the progress stream.

    ``state`` is updated as the server changes (after the unload it holds nothing), so that
    a load that fails halfway leaves the caller knowing what to restore."""
    say = progress or (lambda _text, _fraction=None: None)
    if (state.model_name, state.draft_model_name) == (want.model_name, want.draft_model_name):
        return state
    key = want.admin_key()
    if key is None:
        raise ServerError(
            "Switching TabbyAPI's draft model needs its admin key.",
            f"Put it in {want.admin_key_env or DEFAULT_ADMIN_KEY_ENV} (TabbyAPI's "
            "api_tokens.yml, admin_key).")
    if state.model_name is not None:
        say(f"Unloading {state.model_name}")
        request_json(base, "POST", "/v1/model/unload", api_key=key, timeout=120.0)
        state.model_name = state.draft_model_name = None
    label = want.model_name + (f" with draft {want.draft_model_name}"
                               if want.draft_model_name else " without a draft")
    say(f"Loading {label}", 0.0)
    finished = set()
    for event in stream_sse(base, "/v1/model/load", want.body(), key, cancel,
                            read_timeout=LOAD_TIMEOUT_S, until_closed=True,
                            timeout=LOAD_TOTAL_S, progress=_load_progress):
        data = event.data if isinstance(event.data, dict) else {}
        module, modules = data.get("module"), data.get("modules")
        kind = data.get("model_type") if isinstance(data.get("model_type"), str) else "model"
        if isinstance(module, int) and isinstance(modules, int) and 0 <= module <= modules \
                and modules > 0:  # (a fraction only of counts that make one)
            say(f"Loading {label}: {kind} {module}/{modules}", module / modules)
        if data.get("status") == "finished":
            finished.add(kind)
    if cancel is not None and cancel.is_set():
        raise CancelledError()
    needed = {"model"} | ({"draft"} if want.draft_model_name else set())
    if not needed <= finished:
        # An empty stream: the same model was loaded already (exl2-checkpoint). Check.
        now = loaded_state(base, key)
        if (now.model_name, now.draft_model_name) != (want.model_name, want.draft_model_name):
            raise ServerError(f"TabbyAPI did not finish loading {label}.",
                              "See TabbyAPI's console for why.")
    state.model_name, state.draft_model_name = want.model_name, want.draft_model_name
    return state


def _load_progress(data) -> bool:
    """An event of TabbyAPI's load stream that is progress: one of its module counts or its
    status (endpoints/core/utils/model.py stream_model_load: ``{model_type, module, modules,
    status}``); an empty event is not."""
    return isinstance(data, dict) and any(k in data for k in ("module", "status"))


class TabbyReloads:
    """The TabbyAPIs a plan's arms reload: what each held before the plan (restored at its
    end) and what it holds now."""

    def __init__(self):
        self._original: dict[str, tuple[TabbyState, str | None]] = {}
        """URL -> what it held before the plan, and its admin key's variable."""
        self._now: dict[str, TabbyState] = {}

    def remember(self, arm) -> None:
        """Read what the arm's TabbyAPI holds before the plan touches it; an arm that names no
        model needs one loaded, and every reload needs the admin key."""
        server = arm.server
        if server.url not in self._original:
            state = loaded_state(Base.parse(server.url), server.api_key())
            self._original[server.url] = (state, server.tabby.admin_key_env)
        if not server.tabby.model_name and self._original[server.url][0].model_name is None:
            raise InvalidInputError(f"Arm {arm.name}: TabbyAPI at {redact_url(server.url)} has "
                                    "no model loaded, so SpecDeck does not know which to load.",
                                    "Name it with --tabby-model.")
        if server.tabby.admin_key() is None:
            raise InvalidInputError(
                f"Arm {arm.name} reloads TabbyAPI, which needs its admin key.",
                "Put it in SPECDECK_TABBY_ADMIN_KEY (or the variable --admin-key-env names).")

    def switch(self, server, progress=None, cancel: threading.Event | None = None) -> None:
        """Make the arm's TabbyAPI hold what the arm names (its model by default the one it
        held before the plan)."""
        original = self._original[server.url][0]
        want = server.tabby
        if not want.model_name:
            want = replace(want, model_name=original.model_name)
        now = self._now.get(server.url)
        if now is None:
            # TabbyAPI main's model card never shows a loaded draft: "no draft" there may be
            # false, so the first arm always reloads rather than trust it.
            now = TabbyState(original.model_name, "(unknown)")
            self._now[server.url] = now
        switch(Base.parse(server.url), want, now, cancel=cancel, progress=progress)

    def draft_held(self, server) -> str | None:
        """The draft model the arm's TabbyAPI holds, when it is the one the arm names."""
        now = self._now.get(server.url)
        return now.draft_model_name if now is not None and now.draft_model_name \
            == server.tabby.draft_model_name else None

    def restore(self) -> list[str]:
        """Give each reloaded TabbyAPI back what it held before the plan; what could not be
        restored, said for the user (not raised: the plan's results must not be lost to it)."""
        problems = []
        for url, (original, key_env) in list(self._original.items()):
            now = self._now.get(url, original)
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
        self._original.clear()
        self._now.clear()
        return [f"Could not restore what TabbyAPI held before the plan ({p}); load your model "
                "again in TabbyAPI." for p in problems]
