"""llama-swap: one address, a llama-server per model in its config.yaml, swapped by name.

What this module relies on, from llama-swap's sources at 0bdb3720 (2026-08-22):

- ``GET /running`` (internal/server/api.go, handleRunning, and runningModel at line 313):
  ``{"running": [{"model", "state", "cmd", "proxy", "ttl", "name", "description"}]}``;
  states from internal/process/process.go lines 14-20: stopped, starting, ready, stopping,
  shutdown. ``cmd`` is the model's command line from config.yaml: its drafting flags.
- ``/upstream/{model}/{path}`` (server.go line 311, api.go handleUpstream) forwards a request
  to the model's own server, starting it first (swapping out the others of its group) and
  answering once it is up; ``GET /upstream/{model}/health`` is llama-server's /health, so it
  loads the model and waits without generating anything. An unknown model answers 404
  "model not found".
- ``GET /v1/models`` lists the configured models (owned_by "llama-swap", status value
  loaded/unloaded).

A model is loaded before its arm's runs, so no measured run pays for a swap.
"""

from __future__ import annotations

import shlex
from urllib.parse import quote

from specdeck.core.errors import InvalidInputError
from specdeck.core.servers.transport import Base, ServerError, request_json, request_text

LOAD_TIMEOUT_S = 600.0


def running(base: Base, api_key: str | None) -> dict[str, dict]:
    """The models llama-swap runs now, by name, with their state and command line."""
    data = request_json(base, "GET", "/running", api_key=api_key, timeout=10.0)
    items = data.get("running") if isinstance(data, dict) else None
    return {str(item.get("model")): item for item in items if isinstance(item, dict)} \
        if isinstance(items, list) else {}


def command_flags(cmd: str) -> tuple[str, ...]:
    """A config.yaml cmd (possibly folded over lines with backslashes) as argv."""
    try:
        return tuple(shlex.split(cmd.replace("\\\n", " ")))
    except ValueError:
        return tuple(cmd.split())


def start_model(base: Base, model: str, api_key: str | None, timeout: float = LOAD_TIMEOUT_S
                ) -> tuple[str, ...]:
    """Make llama-swap run ``model`` and wait until its server answers; its command line."""
    try:
        request_text(base, f"/upstream/{quote(model, safe='')}/health", api_key, timeout=timeout)
    except ServerError as exc:
        if "(404)" in exc.what:
            raise ServerError(f"llama-swap at {base.shown} has no model {model!r}.",
                              "Name one of the models in its config.yaml (URL#MODEL).") from None
        raise ServerError(f"llama-swap could not start {model!r}: {exc.what}",
                          "Read llama-swap's log (its /logs page): the model's cmd may fail.") from None
    now = running(base, api_key).get(model)
    return command_flags(str(now.get("cmd") or "")) if now else ()


def check_arm(arm, models: tuple[str, ...], url: str) -> None:
    """A llama-swap arm names one of the models of its config.yaml."""
    listed = ", ".join(models) or "none"
    if not arm.server.model:
        raise InvalidInputError(
            f"Arm {arm.name}: {url} is llama-swap, which starts a model by the name a "
            f"request gives; name this arm's model (it lists: {listed}).",
            f"Write the arm as {arm.name}={url}#MODEL.")
    if models and arm.server.model not in models:
        raise InvalidInputError(
            f"Arm {arm.name}: llama-swap at {url} has no model {arm.server.model!r} "
            f"(it lists: {listed}).", "Check the name in its config.yaml.")


def activate_arm(arm, url: str, reference: bool, say) -> tuple[str, ...]:
    """Start the arm's model (swapping others out) before its runs; the command line
    llama-swap runs it with. The reference must not draft."""
    from specdeck.core.engines.base import DrafterKind
    from specdeck.core.servers.llama_server import (
        drafter_from_flags,
        drafting_flags,
        shown_command,
    )

    say(f"llama-swap is starting {arm.server.model}")
    try:
        flags = start_model(Base.parse(url), arm.server.model, arm.server.api_key())
    except ServerError as exc:
        raise ServerError(f"Arm {arm.name}: {exc.what}", exc.fix) from None
    if reference and drafter_from_flags(flags).kind is not DrafterKind.NONE:
        raise InvalidInputError(
            f"Arm {arm.name} is the reference, but llama-swap runs {arm.server.model!r} "
            f"with drafting flags ({shown_command(list(drafting_flags(flags)))}).",
            "Put a model without --spec-type first.")
    return flags
