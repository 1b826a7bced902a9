"""Servers kept between a grid's plans, on the pinned llama-server.

A grid or a search runs one A/B plan per setting, round after round, on one ServerEngine.
Starting a llama-server is the dearest part of a setting's plan on a large model, and its
first request pays one-off costs: so the engine keeps every server that fits
(``max_servers``, least recently used stopped first), and a server it keeps that has already
answered is not warmed up again (``ServerEngine.is_warm``).
"""

from __future__ import annotations

from dataclasses import replace

from specdeck.core.bench.plan import Arm, BenchPlan
from specdeck.core.bench.runner import run_plan
from specdeck.core.servers.arms import ServerArm
from specdeck.core.servers.engine import ServerEngine
from specdeck.core.servers.llama_server import LaunchProfile, drafter_from_flags

FLAGS = ("-t", "1", "-c", "1024")


def _arm(llama_bin, demo_gguf, name, *flags) -> Arm:
    args = (*FLAGS, *flags)
    return Arm(name, drafter_from_flags(args), ServerArm(launch=LaunchProfile(
        str(llama_bin), str(demo_gguf), args)))


def _three(llama_bin, demo_gguf) -> tuple[Arm, Arm, Arm]:
    """The reference and two n-gram settings (each its own server)."""
    return (_arm(llama_bin, demo_gguf, "A"),
            _arm(llama_bin, demo_gguf, "B", "--spec-type", "ngram-simple"),
            _arm(llama_bin, demo_gguf, "C", "--spec-type", "ngram-map-k"))


def _plan(demo_gguf, *arms) -> BenchPlan:
    return BenchPlan(engine="server", model=str(demo_gguf), arms=arms, suites=("code",),
                     prompt_ids=("snake-python",), max_new_tokens=12, repeats=1, warmup=1,
                     warmup_tokens=4, apply_chat_template=True, stop_on_eos=False)


def _warmed(run) -> list[str]:
    return [r.slot.arm.name for r in run.records if r.slot.warmup]


def test_servers_that_fit_stay_up_and_warm_ones_are_not_warmed_again(llama_bin, demo_gguf,
                                                                      tmp_path):
    a, b, c = _three(llama_bin, demo_gguf)
    engine = ServerEngine(log_dir=tmp_path, max_servers=3)
    try:
        first = run_plan(replace(_plan(demo_gguf, a, b), warmup=2), engine)
        pids = engine.running()
        second = run_plan(_plan(demo_gguf, a, c), engine)
        assert engine.running()["B"] == pids["B"]  # kept while it fits
        third = run_plan(_plan(demo_gguf, a, b), engine)
        assert engine.running()["B"] == pids["B"] and engine.running()["A"] == pids["A"]
        engine.keep_only({"A", "C"})  # a search dropped B: its server goes
        assert set(engine.running()) == {"A", "C"}
    finally:
        engine.unload()
    assert _warmed(first) == ["A", "B", "A", "B"]  # fresh servers: every warm-up asked for
    assert _warmed(second) == ["C"]  # A has answered already
    assert _warmed(third) == []
    for run in (first, second, third):
        assert all(r.counted for r in run.records if not r.slot.warmup)


def test_a_server_that_no_longer_fits_is_started_and_warmed_again(llama_bin, demo_gguf,
                                                                   tmp_path):
    a, b, c = _three(llama_bin, demo_gguf)
    engine = ServerEngine(log_dir=tmp_path, max_servers=2)
    try:
        run_plan(_plan(demo_gguf, a, b), engine)
        pid = engine.running()["B"]
        run_plan(_plan(demo_gguf, a, c), engine)
        assert "B" not in engine.running()  # the least recently used made room for C
        again = run_plan(_plan(demo_gguf, a, b), engine)
        assert engine.running()["B"] != pid
    finally:
        engine.unload()
    assert _warmed(again) == ["B"]
