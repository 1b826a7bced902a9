"""The server engine's driver interface, and its default: an OpenAI-compatible server.

ServerEngine runs every arm the same way (probe, switch, stream, turn the stream into a run's
result) and asks the arm's driver (core.servers.drivers) wherever kinds differ. ``Driver``
itself is the kind that does nothing of its own: a server that reports no draft counts, takes
no drafting per request, names the model it serves, and keeps nothing between arms.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specdeck.core.errors import InvalidInputError
from specdeck.core.servers.kinds import TRAITS, ServerKind


@dataclass(frozen=True)
class Switch:
    """What a driver is told when the engine switches to one of its arms."""

    url: str
    model: str | None
    """The model the arm's requests name (``Driver.request_model``)."""
    api_key: str | None
    reference: bool
    """The arm is the plan's no-draft reference."""
    previous: Any
    """The arm that was active before (None: none yet)."""
    plan_arms: tuple
    exclusive: bool
    """One server at a time (the plan's or the engine's setting)."""
    say: Callable[..., None]
    """``say(text, fraction=None)``: progress for the user."""
    cancel: threading.Event | None


class Driver:
    """An OpenAI-compatible server's part in the server engine, and the interface every
    kind's driver keeps. One instance per engine: a driver may keep what its arms need
    between plans (what it loaded, what to restore)."""

    kind = ServerKind.OPENAI
    draft_per_request = False
    """Its requests can say how to draft (LM Studio's draft model, Ollama's
    draft_num_predict), so an arm may name a draft with ``--server-draft``."""
    counters_around_run = False
    """The growth of its Prometheus counters around a run counts the run's drafts (where the
    probe found them: ``ServerInfo.metrics``)."""

    # Before the plan ---------------------------------------------------------------------
    def check_launch(self, arm) -> None:
        """Check an arm whose server SpecDeck starts (before anything starts)."""
        raise InvalidInputError(f"Arm {arm.name}: SpecDeck does not start a {self.kind.value} "
                                "server.", "Give the running server's URL.")

    def check(self, arm, info, reference: bool) -> None:
        """Check a running server's arm after its probe (``info``)."""
        if arm.server.draft_model and not self.draft_per_request:
            raise InvalidInputError(
                f"Arm {arm.name} names a draft model per request, which only LM Studio "
                f"takes (and Ollama a draft_num_predict); {info.url} is "
                f"{TRAITS[info.kind].title}.",
                "Start that server with its draft, and drop --server-draft.")
        self.check_arm(arm, info, reference)

    def check_arm(self, arm, info, reference: bool) -> None:
        """The kind's own checks; by default, that the reference's server does not draft."""
        if reference and info.speculative:
            raise InvalidInputError(
                f"Arm {arm.name} is the reference, but {info.url} drafts "
                f"({info.draft or 'speculative decoding is on'}).",
                "Put a server without speculative decoding first.")

    def notes(self, arm, info, reference: bool, first: bool) -> list[str]:
        """What the plan's notes say of this kind's arm (``first``: the plan's first arm)."""
        return []

    def acceptance(self, arm, info) -> str:
        """Where this arm's draft acceptance comes from, or why there is none, as the plan's
        notes say it (``info``: None for a server SpecDeck has not started yet): the kind's
        (``TRAITS``), unless how SpecDeck reaches this arm's server adds a source."""
        return TRAITS[self.kind].acceptance

    # Switching to an arm -----------------------------------------------------------------
    def request_model(self, server, info) -> str | None:
        """The model an arm's requests name: the arm's, else the one the server serves."""
        return server.model or info.model

    def activate(self, arm, info, switch: Switch) -> None:
        """Make the server ready for the arm's runs (load, switch or start its model)."""

    def arm_flags(self, arm, info) -> tuple[str, ...] | None:
        """The llama-server flags a running server's arm drafts with, where known."""
        return None

    def remembers(self, info) -> str:
        """How the server's drafter keeps earlier requests' text, when no flags tell."""
        return ""

    # A run -------------------------------------------------------------------------------
    def options(self, arm, reference: bool) -> dict[str, int]:
        """The drafting options the arm's requests carry."""
        return {}

    def after_run(self, base, api_key: str | None, info) -> Any:
        """What the server says after a run besides the run's own report (gauges)."""
        return None

    def gauge_mean(self, gauges) -> tuple[float, str] | None:
        """A mean acceptance length from ``after_run``'s gauges, and what it means."""
        return None

    def logged_draft(self, managed, response_id: str | None, cancel):
        """What the log of a server SpecDeck started says a request drafted (None: none)."""
        return None

    def foreign_counts(self, arm, report) -> str:
        """Why the report's draft counts are not this arm's drafting ("" when they are)."""
        return ""

    def drafts_by_construction(self, server) -> str:
        """Why the arm drafts at every step whatever it reports ("" when not known)."""
        return ""

    # After the plan ----------------------------------------------------------------------
    def end(self) -> list[str]:
        """Undo what the plan changed on servers SpecDeck did not start; what could not be
        undone, said for the user."""
        return []
