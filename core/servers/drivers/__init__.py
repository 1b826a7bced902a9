"""One driver per server kind: what each kind does inside the server engine.

ServerEngine (core.servers.engine) checks, switches and runs every arm the same way and asks
the arm's driver wherever kinds differ: what it checks before a plan (``check``,
``check_launch``), what the plan's notes say of it, how an arm is activated (a router's or
llama-swap's model, a TabbyAPI reload, Ollama's load), what a request carries (the model it
names, Ollama's draft_num_predict), and how a run's counts are read (Prometheus counters
around the run, SGLang's gauges, TabbyAPI's log, LM Studio's draft model). The interface and
the default (an OpenAI-compatible server) are ``base.Driver``; ``DRIVERS`` is the table by
kind.
"""

from __future__ import annotations

from specdeck.core.servers.drivers.base import Driver, Switch
from specdeck.core.servers.drivers.llama_server import LlamaServerDriver
from specdeck.core.servers.drivers.llama_swap import LlamaSwapDriver
from specdeck.core.servers.drivers.lmstudio import LmStudioDriver
from specdeck.core.servers.drivers.ollama import OllamaDriver
from specdeck.core.servers.drivers.sglang import SglangDriver
from specdeck.core.servers.drivers.tabbyapi import TabbyApiDriver
from specdeck.core.servers.drivers.vllm import VllmDriver
from specdeck.core.servers.kinds import ServerKind

DRIVERS: dict[ServerKind, type[Driver]] = {
    driver.kind: driver
    for driver in (LlamaServerDriver, LlamaSwapDriver, TabbyApiDriver, VllmDriver,
                   SglangDriver, LmStudioDriver, OllamaDriver, Driver)
}
"""Server kind -> its driver (``Driver`` itself: an OpenAI-compatible server)."""

__all__ = ["DRIVERS", "Driver", "Switch", "engine_drivers", "launched_kind"]


def engine_drivers() -> dict[ServerKind, Driver]:
    """A driver of every kind for one engine (they keep what its plans' arms need)."""
    return {kind: driver() for kind, driver in DRIVERS.items()}


def launched_kind(server) -> ServerKind:
    """The kind of server SpecDeck starts for a managed arm (``ServerArm.managed``)."""
    return ServerKind.TABBYAPI if server.tabby_launch is not None else ServerKind.LLAMA_SERVER
