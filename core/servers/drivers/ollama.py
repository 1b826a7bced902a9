"""Ollama in the server engine: what /api/show says of each arm's model, the one drafting
option its requests carry (``draft_num_predict``), and the load that gives the model that
option before the arm's runs (a changed option reloads it). Ollama's own API and why:
core.servers.ollama."""

from __future__ import annotations

import logging

from specdeck.core.errors import InvalidInputError
from specdeck.core.servers.drivers.base import Driver, Switch
from specdeck.core.servers.kinds import ServerKind
from specdeck.core.servers.ollama import (
    OPTION,
    ModelDrafting,
    load,
    model_drafting,
    parse_draft_n,
    request_options,
)
from specdeck.core.servers.transport import Base, ServerError

log = logging.getLogger(__name__)


class OllamaDriver(Driver):
    kind = ServerKind.OLLAMA
    draft_per_request = True

    def __init__(self):
        self.drafting: dict[str, ModelDrafting] = {}
        """Arm name -> what /api/show says of its model's drafting."""
        self._loaded: dict[tuple[str, str], dict[str, int]] = {}
        """(URL, model) -> the drafting options Ollama last loaded it with."""

    def check_arm(self, arm, info, reference: bool) -> None:
        """An arm's draft_num_predict is a number, and its model has a draft to use it with
        (its DRAFT layer or MTP layers, from /api/show)."""
        self._check_draft(arm, arm.server.model or info.model)
        super().check_arm(arm, info, reference)

    def _check_draft(self, arm, model: str | None) -> None:
        server = arm.server
        if server.draft_model:
            parse_draft_n(server.draft_model, arm.name)
        if not model:
            return  # the request asks for the name
        try:
            drafting = model_drafting(Base.parse(server.url), model, server.api_key())
        except ServerError as exc:
            log.debug("Ollama /api/show for %s: %s", model, exc)
            return
        self.drafting[arm.name] = drafting
        if server.draft_model and drafting.draft is None and drafting.certain:
            raise InvalidInputError(
                f"Arm {arm.name} asks Ollama to draft ({OPTION} "
                f"{server.draft_model}), but {model} has no draft: {drafting.describe()}, so "
                "Ollama would start it without drafting.",
                "Use a model with a DRAFT layer or MTP layers (ollama show MODEL).")

    def notes(self, arm, info, reference: bool, first: bool) -> list[str]:
        """What an Ollama arm sends and measures, said once in the plan's notes."""
        options = self.options(arm, reference)
        drafting = self.drafting.get(arm.name)
        model = f"model {drafting.model}: {drafting.describe()}" if drafting else "its model"
        sent = (f"its requests carry {OPTION} {options[OPTION]}" if options
                else f"its requests leave {OPTION} as the model sets it")
        return [(f"{arm.name}: Ollama {model}; {sent} (a changed {OPTION} reloads the "
                 "model: SpecDeck loads it before the arm's runs)")]

    def options(self, arm, reference: bool) -> dict[str, int]:
        return request_options(arm.server.draft_model, reference)

    def activate(self, arm, info, switch: Switch) -> None:
        """Load the arm's model with its options when Ollama holds it with others (a changed
        Runner option reloads it): the reload is not paid by a measured run."""
        if not switch.model:
            return
        base = Base.parse(switch.url)
        options = self.options(arm, switch.reference)
        key = (base.shown, switch.model)
        if self._loaded.get(key) == options:
            return
        shown = ", ".join(f"{k} {v}" for k, v in options.items()) or "its own drafting settings"
        switch.say(f"Ollama is loading {switch.model} with {shown}")
        try:
            load(base, switch.model, options, switch.api_key)
        except ServerError as exc:
            raise ServerError(f"Arm {arm.name}: {exc.what}", exc.fix) from None
        self._loaded[key] = options
