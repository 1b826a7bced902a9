"""llama-server in the server engine: one SpecDeck launches (its flags and files checked
before anything starts), a running one (its Prometheus counters around each run), and a
router (an arm names one of its models, loaded before the arm's runs; the model's flags are
the arm's)."""

from __future__ import annotations

from pathlib import Path

from specdeck.core.errors import InvalidInputError
from specdeck.core.servers import router
from specdeck.core.servers.drivers.base import Driver, Switch
from specdeck.core.servers.kinds import ServerKind


class LlamaServerDriver(Driver):
    kind = ServerKind.LLAMA_SERVER
    counters_around_run = True

    def check_launch(self, arm) -> None:
        from specdeck.core.servers.llama_server import check_launch

        launch = arm.server.launch
        check_launch(tuple(launch.args), launch.binary)
        for path, what in ((launch.binary, "llama-server binary"), (launch.model, "model")):
            if not Path(path).is_file():
                raise InvalidInputError(f"Arm {arm.name}: the {what} {path} does not exist.")

    def check_arm(self, arm, info, reference: bool) -> None:
        if not info.router:
            super().check_arm(arm, info, reference)
            return
        router.check_arm(arm, info.models, info.flags_of(arm.server.model) or (), info.url,
                         reference=reference)

    def notes(self, arm, info, reference: bool, first: bool) -> list[str]:
        if info is None or not info.router:
            return []
        from specdeck.core.servers.llama_server import drafting_flags, shown_command

        flags = drafting_flags(info.flags_of(arm.server.model) or ())
        return [f"{arm.name}: router model {arm.server.model}, drafting flags: "
                f"{shown_command(list(flags)) or 'none'}; loaded before its runs, so no run "
                "pays for a model load"]

    def acceptance(self, arm, info) -> str:
        """With /metrics (a server SpecDeck launches always has it), the counters' growth
        around each run counts its drafts too: a run whose timings leave draft_n out (it
        drafted nothing) is told from one that reports nothing."""
        text = super().acceptance(arm, info)
        if arm.server.managed is None and not (info is not None and info.metrics):
            return text
        return f"{text}, and the growth of its /metrics spec_decode counters around each run"

    def activate(self, arm, info, switch: Switch) -> None:
        if info.router:
            router.activate_arm(arm, switch.url, switch.previous, switch.plan_arms,
                                switch.exclusive, lambda text: switch.say(text), switch.cancel)

    def arm_flags(self, arm, info) -> tuple[str, ...] | None:
        if not info.router:
            return None
        from specdeck.core.servers.llama_server import drafting_flags

        return drafting_flags(info.flags_of(arm.server.model) or ())
