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


def _acceptance_notes(arms) -> dict[str, str]:
    """Each arm's "acceptance: ..." as the plan's notes say it, before anything starts."""
    notes = ServerEngine().prepare_arms(arms).notes
    return {n.partition(":")[0]: n.partition("; acceptance: ")[2]
            for n in notes if "; acceptance: " in n}


def test_a_launched_arms_acceptance_note_says_where_its_counts_come_from(
        tmp_path, llama_bin, demo_gguf):
    """The plan's notes say of each arm where its draft counts come from. A TabbyAPI SpecDeck
    starts is read from its log where its backend logs them (ExLlamaV3, TabbyAPI main); one
    it reaches over HTTP, or an exl2-checkpoint one, reports none. A llama-server SpecDeck
    launches has /metrics, whose counters count a run's drafts besides its timings."""
    import sys

    from specdeck.core.bench.plan import Arm
    from specdeck.core.engines.base import NO_DRAFT
    from specdeck.core.servers.arms import ServerArm
    from specdeck.core.servers.llama_server import LaunchProfile
    from specdeck.core.servers.tabby_launch import LOG_SOURCE, TabbyLaunch
    from tabby_app import make_install

    def tabby(name, branch):
        folder = make_install(tmp_path / branch, branch)
        return Arm(name, NO_DRAFT, ServerArm(kind=ServerKind.TABBYAPI, tabby_launch=TabbyLaunch(
            str(folder), sys.executable, (("draft_mode", "ngram"),))))

    said = _acceptance_notes((tabby("main", "main"), tabby("exl2", "exl2-checkpoint")))
    assert said["main"] == LOG_SOURCE
    assert said["exl2"].startswith("not reported") and "exl2-checkpoint" in said["exl2"]

    launched = Arm("L", NO_DRAFT, ServerArm(launch=LaunchProfile(str(llama_bin),
                                                                  str(demo_gguf))))
    said = _acceptance_notes((launched,))
    assert said["L"].startswith("timings.draft_n") and "/metrics" in said["L"]
