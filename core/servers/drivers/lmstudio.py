"""LM Studio in the server engine: an arm names its draft model per request, and a response
that drafted with another model does not count as the arm's drafting."""

from __future__ import annotations

from specdeck.core.servers.drivers.base import Driver
from specdeck.core.servers.kinds import ServerKind


class LmStudioDriver(Driver):
    kind = ServerKind.LMSTUDIO
    draft_per_request = True

    def foreign_counts(self, arm, report) -> str:
        wanted = arm.server.draft_model
        if report.drafted is not None and wanted and report.draft_model not in (None, wanted):
            # LM Studio drafted with another model than the arm's: its counts are not this
            # arm's drafting.
            return (f"stats.draft_model is {report.draft_model!r}, not the {wanted!r} this "
                    "arm's requests name")
        return ""
