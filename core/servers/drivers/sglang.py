"""SGLang in the server engine: its acceptance gauges read after each run (a mean acceptance
length where the request gave none), and its n-gram drafter's memory of earlier requests."""

from __future__ import annotations

from specdeck.core.servers import sglang
from specdeck.core.servers.drivers.base import Driver
from specdeck.core.servers.kinds import ServerKind


class SglangDriver(Driver):
    kind = ServerKind.SGLANG

    def remembers(self, info) -> str:
        return sglang.REMEMBERS if (info.draft or "").startswith("NGRAM") else ""

    def after_run(self, base, api_key: str | None, info):
        if info.metrics and info.speculative is not False:
            return sglang.read_gauges(base, api_key)
        return None

    def gauge_mean(self, gauges) -> tuple[float, str] | None:
        if gauges is None or gauges.accept_length is None:
            return None
        return gauges.accept_length, f"{sglang.ACCEPT_LENGTH}: {sglang.GAUGE_MEANING}"
