"""TabbyAPI in the server engine: one SpecDeck starts from its folder (checked before the
plan; its log gives each request's draft counts), one it reloads through the admin API per
arm (what it held is restored after the plan), and a request that names a model only when
the user asked to (TabbyAPI treats a request's "model" as an inline model switch)."""

from __future__ import annotations

from specdeck.core.servers.drivers.base import Driver, Switch
from specdeck.core.servers.kinds import ServerKind
from specdeck.core.servers.tabby_reload import TabbyReloads


class TabbyApiDriver(Driver):
    kind = ServerKind.TABBYAPI

    def __init__(self):
        self.reloads = TabbyReloads()

    def check_launch(self, arm) -> None:
        from specdeck.core.servers.tabby_launch import check_folder

        check_folder(arm.server.tabby_launch)

    def check(self, arm, info, reference: bool) -> None:
        if arm.server.tabby is not None:  # a reload arm: what it holds changes on reload
            self.reloads.remember(arm)
            return
        super().check(arm, info, reference)

    def notes(self, arm, info, reference: bool, first: bool) -> list[str]:
        if arm.server.tabby is None or not first:
            return []
        return ["TabbyAPI arms reload the model through the admin API; at the end SpecDeck "
                "restores the model (and the draft where TabbyAPI reports it: its main branch "
                "does not, so reload your draft there if you had one)"]

    def acceptance(self, arm, info) -> str:
        """A TabbyAPI SpecDeck starts: its log's per-request draft counts, where its backend
        logs them (core.servers.tabby_launch.logged_acceptance)."""
        if arm.server.tabby_launch is None:
            return super().acceptance(arm, info)
        from specdeck.core.servers.tabby_launch import logged_acceptance

        return logged_acceptance(arm.server.tabby_launch)

    def request_model(self, server, info) -> str | None:
        # An inline model switch is an admin action: name a model only when the user asked.
        return server.model

    def activate(self, arm, info, switch: Switch) -> None:
        if arm.server.tabby is not None:
            self.reloads.switch(arm.server, switch.say, switch.cancel)

    def logged_draft(self, managed, response_id: str | None, cancel):
        """A TabbyAPI SpecDeck started: what its log says this request drafted
        (core.servers.tabby_launch.logged_draft); None without such a line."""
        from specdeck.core.servers.tabby_launch import ManagedTabby

        if not isinstance(managed, ManagedTabby) or not response_id:
            return None
        return managed.logged_draft(response_id.removeprefix("chatcmpl-"), cancel)

    def drafts_by_construction(self, server) -> str:
        """A TabbyAPI holding a draft model: its ExLlama backend drafts with it at every
        step."""
        name = None
        if server.tabby is not None:
            name = self.reloads.draft_held(server)
        elif server.tabby_launch is not None:
            from specdeck.core.servers.tabby_launch import draft_model_of

            name = draft_model_of(server.tabby_launch)
        return (f"TabbyAPI holds the draft model {name}, and its ExLlama backend drafts with "
                "it at every step") if name else ""

    def end(self) -> list[str]:
        return self.reloads.restore()
