"""The engine worker: one QThread owns a real PyTorch engine; the GUI only sees signals."""

from __future__ import annotations

import threading

import pytest
from specdeck.core.engines.base import (
    DrafterKind,
    DrafterSpec,
    GenerationRequest,
    LoadProgress,
    LoadSpec,
    StopReason,
)
from specdeck.core.errors import NotFoundError, SpecDeckError
from tiny_models import cycling_llama, random_llama

pytest.importorskip("transformers")

from specdeck.core.engines.torch_ref import TorchEngine
from specdeck.gui.engine_worker import EngineWorker, StreamUpdate

PROMPT = "The quick brown fox jumps over the lazy dog."
WAIT_MS = 60_000


class RecordingEngine(TorchEngine):
    """The real engine, noting which thread each call ran on."""

    def __init__(self):
        super().__init__()
        self.threads: dict[str, set[int]] = {}

    def _note(self, name: str) -> None:
        self.threads.setdefault(name, set()).add(threading.get_ident())

    def load(self, *args, **kwargs):
        self._note("load")
        return super().load(*args, **kwargs)

    def set_drafter(self, *args, **kwargs):
        self._note("set_drafter")
        return super().set_drafter(*args, **kwargs)

    def generate(self, *args, **kwargs):
        self._note("generate")
        return super().generate(*args, **kwargs)

    def unload(self):
        self._note("unload")
        return super().unload()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("worker-models")
    return {"random": random_llama(root / "random"), "cycle": cycling_llama(root / "cycle")}


@pytest.fixture
def worker(qapp):
    engines: list[RecordingEngine] = []

    def factory(name: str) -> RecordingEngine:
        assert name == "torch"
        engines.append(RecordingEngine())
        return engines[-1]

    w = EngineWorker(factory=factory)
    w.engines = engines
    yield w
    assert w.shutdown(WAIT_MS)


def load(qtbot, worker, path, **kwargs):
    with qtbot.waitSignal(worker.loaded, timeout=WAIT_MS) as loaded:
        worker.load("torch", LoadSpec(path, **kwargs))
    return loaded.args[0]


def generate(qtbot, worker, request):
    updates: list[StreamUpdate] = []
    worker.stream.connect(updates.append)
    with qtbot.waitSignal(worker.finished, timeout=WAIT_MS) as finished:
        worker.generate(request)
    worker.stream.disconnect(updates.append)
    return finished.args[0], updates


def test_load_reports_progress_then_the_loaded_model(qtbot, worker, models):
    progress: list[LoadProgress] = []
    worker.load_progress.connect(progress.append)
    loaded = load(qtbot, worker, models["random"])
    assert loaded.model_path == models["random"]
    assert progress[0].stage == "Checking the model folder"
    assert progress[-1].stage == "Ready" and progress[-1].fraction == 1.0


def test_streamed_updates_add_up_to_the_result_and_are_throttled(qtbot, worker, models):
    load(qtbot, worker, models["cycle"], drafter=DrafterSpec(DrafterKind.NGRAM))
    request = GenerationRequest(prompt=PROMPT, max_new_tokens=400, stop_on_eos=False)
    result, updates = generate(qtbot, worker, request)
    assert "".join(u.text for u in updates) == result.text
    assert [t for u in updates for t in u.token_ids] == list(result.token_ids)
    assert [f for u in updates for f in u.from_draft] == list(result.from_draft)
    assert sum(u.events for u in updates) == result.stats.steps
    assert updates[-1].last.new_tokens == result.stats.new_tokens == 400
    assert len(updates) < result.stats.steps  # coalesced, not one signal per step


def test_every_engine_call_runs_on_the_worker_thread(qtbot, worker, models):
    load(qtbot, worker, models["random"])
    with qtbot.waitSignal(worker.loaded, timeout=WAIT_MS):
        worker.set_drafter(DrafterSpec(DrafterKind.NGRAM))
    generate(qtbot, worker, GenerationRequest(prompt=PROMPT, max_new_tokens=8))
    with qtbot.waitSignal(worker.unloaded, timeout=WAIT_MS):
        worker.unload()
    threads = worker.engines[0].threads
    assert set(threads) == {"load", "set_drafter", "generate", "unload"}
    used = set().union(*threads.values())
    assert len(used) == 1
    assert threading.get_ident() not in used


def test_the_gui_thread_keeps_running_during_a_generation(qtbot, worker, models):
    from PySide6.QtCore import QTimer

    load(qtbot, worker, models["random"])
    ticks = []
    timer = QTimer()
    timer.setInterval(5)
    timer.timeout.connect(lambda: ticks.append(1))
    timer.start()
    result, _ = generate(
        qtbot, worker, GenerationRequest(prompt=PROMPT, max_new_tokens=300, stop_on_eos=False)
    )
    timer.stop()
    assert result.stats.new_tokens == 300
    assert len(ticks) >= 3  # the event loop ran while the engine worked


def test_cancel_stops_the_generation_and_returns_what_was_made(qtbot, worker, models):
    load(qtbot, worker, models["random"])
    worker.stream.connect(lambda update: worker.cancel())
    result, _ = generate(
        qtbot, worker, GenerationRequest(prompt=PROMPT, max_new_tokens=480, stop_on_eos=False)
    )
    assert result.stats.stop_reason is StopReason.CANCELLED
    assert 0 < result.stats.new_tokens < 480


def test_errors_arrive_as_signals_and_the_worker_stays_usable(qtbot, worker, models, tmp_path):
    with qtbot.waitSignal(worker.failed, timeout=WAIT_MS) as failed:
        worker.generate(GenerationRequest(prompt=PROMPT))
    operation, error = failed.args
    assert operation == "generate" and isinstance(error, SpecDeckError)
    with qtbot.waitSignal(worker.failed, timeout=WAIT_MS) as failed:
        worker.load("torch", LoadSpec(tmp_path / "missing"))
    assert failed.args[0] == "load" and isinstance(failed.args[1], NotFoundError)
    load(qtbot, worker, models["random"])
    result, _ = generate(qtbot, worker, GenerationRequest(prompt=PROMPT, max_new_tokens=4))
    assert result.stats.new_tokens == 4


def test_busy_is_signalled_around_work(qtbot, worker, models):
    states: list[bool] = []
    worker.busy_changed.connect(states.append)
    load(qtbot, worker, models["random"])
    qtbot.waitUntil(lambda: states == [True, False], timeout=WAIT_MS)
    assert not worker.busy


def test_cancel_also_drops_queued_work(qtbot, worker, models):
    load(qtbot, worker, models["random"])
    failures = []
    worker.failed.connect(lambda op, exc: failures.append((op, exc)))
    long = GenerationRequest(prompt=PROMPT, max_new_tokens=480, stop_on_eos=False)
    with qtbot.waitSignal(worker.stream, timeout=WAIT_MS):
        worker.generate(long)  # running once it streams
    with qtbot.waitSignal(worker.finished, timeout=WAIT_MS) as finished:
        worker.generate(long)  # queued behind the first
        worker.cancel()
    assert finished.args[0].stats.stop_reason is StopReason.CANCELLED
    qtbot.waitUntil(lambda: not worker.busy, timeout=WAIT_MS)
    assert [op for op, _ in failures] == ["generate"]
    assert "cancelled before it started" in str(failures[0][1])


def test_shutdown_unloads_and_stops_the_thread(qtbot, qapp, models):
    w = EngineWorker()
    with qtbot.waitSignal(w.loaded, timeout=WAIT_MS):
        w.load("torch", LoadSpec(models["random"]))
    assert w.shutdown(WAIT_MS)
    assert w.shutdown(WAIT_MS)  # a second call is harmless
