"""vLLM in the server engine: its Prometheus counters around a run count the run's drafts
where its requests carry no counts of their own (core.servers.counters says why)."""

from __future__ import annotations

from specdeck.core.servers.drivers.base import Driver
from specdeck.core.servers.kinds import ServerKind


class VllmDriver(Driver):
    kind = ServerKind.VLLM
    counters_around_run = True
