"""The server engine's drivers: one per server kind, chosen by a table keyed by kind (the
behaviour of each is tested through ServerEngine in tests/core/test_servers*.py)."""

from specdeck.core.servers.drivers import DRIVERS, Driver, engine_drivers
from specdeck.core.servers.engine import ServerEngine
from specdeck.core.servers.kinds import ServerKind


def test_every_server_kind_has_its_own_driver():
    assert set(DRIVERS) == set(ServerKind)
    for kind, driver in DRIVERS.items():
        assert issubclass(driver, Driver) and driver.kind is kind
    # Only an OpenAI-compatible server falls back on the default driver.
    assert [k for k, d in DRIVERS.items() if d is Driver] == [ServerKind.OPENAI]


def test_each_engine_keeps_its_own_drivers():
    # A driver keeps what a plan's arms need (what Ollama loaded, what to restore in a
    # TabbyAPI): two engines must not share it.
    first, second = engine_drivers(), engine_drivers()
    assert all(first[k] is not second[k] for k in ServerKind)
    assert ServerEngine()._drivers[ServerKind.OLLAMA] is not \
        ServerEngine()._drivers[ServerKind.OLLAMA]  # noqa: SLF001
