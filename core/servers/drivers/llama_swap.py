"""llama-swap in the server engine: an arm names one of its models, which is started (others
swapped out) before the arm's runs; the command line it runs with gives the arm's flags."""

from __future__ import annotations

from specdeck.core.servers import swap
from specdeck.core.servers.drivers.base import Driver, Switch
from specdeck.core.servers.kinds import ServerKind


class LlamaSwapDriver(Driver):
    kind = ServerKind.LLAMA_SWAP

    def __init__(self):
        self._flags: dict[str, tuple[str, ...]] = {}
        """Arm name -> the command line llama-swap ran the arm's model with."""

    def check_arm(self, arm, info, reference: bool) -> None:
        # The reference's drafting is checked when its model starts (activate).
        swap.check_arm(arm, info.models, info.url)

    def activate(self, arm, info, switch: Switch) -> None:
        self._flags[arm.name] = swap.activate_arm(arm, switch.url, switch.reference,
                                                  lambda text: switch.say(text))

    def arm_flags(self, arm, info) -> tuple[str, ...] | None:
        from specdeck.core.servers.llama_server import drafting_flags

        flags = self._flags.get(arm.name)
        return None if flags is None else drafting_flags(flags)
