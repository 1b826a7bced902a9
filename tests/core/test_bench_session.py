"""The A/B engine session (core.bench.session): plans run in a child process, events drained
in order, a dying child reported, verify steps batched (tiny real models)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from specdeck.core.bench.session import BenchSession, PlanDone, PlanFailed
from tiny_models import ab_models, tiny_plan

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    return ab_models(tmp_path_factory.mktemp("bench-session-models"))


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_session_drains_in_order_and_shuts_down(models, start_method):
    """The app's engine process is spawned; the suite's are forked from a fork server that
    imported torch once (tests/conftest.py): both run a plan alike."""
    from specdeck.core.bench.plan import default_arms

    session = BenchSession(start_method=start_method)
    plan = tiny_plan(models["cycle"], default_arms(ngram=True), suites=("chat",), max_prompts=1,
                     max_new_tokens=8, repeats=1, warmup=0)
    session.start(plan)
    events = []
    deadline = time.monotonic() + 60
    while not (events and isinstance(events[-1], PlanDone)) and time.monotonic() < deadline:
        events.extend(session.drain())
        time.sleep(0.02)
    assert isinstance(events[-1], PlanDone)
    assert not session.running
    assert session.shutdown(timeout_s=30)


def _failure(session: BenchSession, plan) -> str:
    """Why ``plan`` failed on ``session`` (its one PlanFailed, waited for)."""
    session.start(plan)
    events = []
    deadline = time.monotonic() + 60
    # other events (the plan's start, a load stage) may come first, in a batch of their own
    while not any(isinstance(e, PlanFailed) for e in events) and time.monotonic() < deadline:
        events.extend(session.drain())
        time.sleep(0.05)
    (failed,) = [e for e in events if isinstance(e, PlanFailed)]
    return str(failed.error)


def test_a_forked_engine_process_has_the_environment_of_its_start(models, monkeypatch):
    """A child forked from the fork server would have the server's environment, taken when
    the first engine process started: each has its starter's of the moment instead."""
    from specdeck.core.bench.plan import default_arms
    from tiny_models import environment_engine

    plan = tiny_plan(models["cycle"], default_arms(ngram=True), max_new_tokens=8, repeats=1,
                     warmup=0)
    for mark in ("first", "second"):
        monkeypatch.setenv("SPECDECK_TEST_MARK", mark)
        session = BenchSession(environment_engine, "forkserver")
        assert f"mark={mark}" in _failure(session, plan)
        session.shutdown(timeout_s=30)


def test_an_engine_process_that_dies_ends_the_plan_with_a_clear_error(models):
    from specdeck.core.bench.plan import default_arms
    from tiny_models import dying_engine

    session = BenchSession(dying_engine)
    plan = tiny_plan(models["cycle"], default_arms(ngram=True), max_new_tokens=8, repeats=1, warmup=0)
    failed = _failure(session, plan)
    assert "engine process stopped" in failed and "exit code 9" in failed
    assert not session.running and not session.alive
    session.shutdown(timeout_s=5)


def test_worker_batches_steps_but_sends_other_events_at_once():
    from specdeck.core.bench.runner import RunStep, Stage
    from specdeck.core.bench.worker import BATCH_INTERVAL_S, _Batcher, picklable_error

    sent, now = [], [0.0]
    batcher = _Batcher(sent.append, clock=lambda: now[0])
    step = RunStep(slot=None, event=None)
    batcher.emit(step)
    batcher.emit(step)
    assert sent == []  # steps wait for company
    now[0] += BATCH_INTERVAL_S
    batcher.emit(step)
    assert sent == [[step, step, step]]
    batcher.emit(step)
    batcher.emit(Stage("Loading"))
    assert sent[-1] == [step, Stage("Loading")]  # a stage goes out at once, after its steps

    class Unpicklable(Exception):
        def __init__(self):
            super().__init__("boom")
            self.handle = lambda: None

    error = picklable_error(Unpicklable())
    assert isinstance(error, RuntimeError) and "Unpicklable: boom" in str(error)


PARENT = """
import os, sys, time
sys.path.insert(0, {tests!r})
from specdeck.core.bench.plan import default_arms
from specdeck.core.bench.session import BenchSession
from tiny_models import tiny_plan

if __name__ == "__main__":
    session = BenchSession()
    session.start(tiny_plan({model!r}, default_arms(ngram=True), max_prompts=2, repeats=50,
                            max_new_tokens=64, warmup=0))
    while not session.drain(1):  # the engine is loaded and running
        time.sleep(0.02)
    print(session.worker_pid, flush=True)
    if sys.argv[1] == "crash":
        os.abort()
    sys.stdin.read()
"""


def _ended(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # ended, not yet reaped
    except psutil.NoSuchProcess:
        return True


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL", "crash"])
def test_the_engine_process_ends_with_the_app_however_the_app_ends(models, tmp_path, how):
    """Issue 44: ending the app with SIGTERM left its engine process (~750 MB with a model)
    running. SIGTERM and SIGKILL run no exit handler in the app, nor does a crash (abort):
    the engine process notices that its parent is gone, stops the plan it was running and
    ends."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "app.py"
    script.write_text(PARENT.format(tests=str(Path(__file__).resolve().parents[1]),
                                    model=str(models["cycle"])))
    app = subprocess.Popen([sys.executable, str(script), how], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    try:
        worker = int(app.stdout.readline())
        assert not _ended(worker)
        if how != "crash":
            app.send_signal(getattr(signal, how))
        app.wait(30)
        deadline = time.monotonic() + 60
        while not _ended(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _ended(worker)
    finally:
        if app.poll() is None:
            app.kill()
        if not _ended(worker):
            import os

            os.kill(worker, signal.SIGKILL)
