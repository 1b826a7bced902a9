"""Background calls deliver results, errors and progress on the GUI thread, never lost."""

from __future__ import annotations

import threading

import pytest
from PySide6.QtCore import QThread

from specdeck.core.errors import CancelledError, SpecDeckError
from specdeck.gui.workers import submit


def test_instant_failure_is_not_lost(qtbot, configured_qapp):
    """A call that fails at once still reaches handlers connected after submit()."""
    for _ in range(20):
        def boom():
            raise SpecDeckError("no such file")

        handle = submit(boom)
        with qtbot.waitSignal(handle.failed, timeout=2000) as blocker:
            pass
        assert str(blocker.args[0]) == "no such file"


def test_result_progress_and_thread(qtbot, configured_qapp):
    seen = []
    gui_thread = QThread.currentThread()

    def work(n, progress=None):
        for i in range(n):
            progress(i)
        return threading.current_thread().name

    def on_progress(value):
        assert QThread.currentThread() is gui_thread
        seen.append(value)

    handle = submit(work, 5, on_progress=on_progress)
    with qtbot.waitSignal(handle.finished, timeout=2000) as blocker:
        pass
    assert blocker.args[0] != threading.current_thread().name
    qtbot.waitUntil(lambda: len(seen) == 5)
    assert seen == [0, 1, 2, 3, 4]


def test_cancel_reaches_the_call(qtbot, configured_qapp):
    started = threading.Event()

    def slow(cancel=None):
        started.set()
        while not cancel.wait(0.01):
            pass
        raise CancelledError()

    handle = submit(slow)
    qtbot.waitUntil(started.is_set, timeout=2000)
    with qtbot.waitSignal(handle.failed, timeout=2000) as blocker:
        handle.cancel()
    assert isinstance(blocker.args[0], CancelledError)
    assert not handle.running


@pytest.mark.parametrize("kind", ["result", "error"])
def test_callbacks_given_to_submit(qtbot, configured_qapp, kind):
    got = []
    if kind == "result":
        handle = submit(lambda: 42, on_result=got.append)
    else:
        handle = submit(lambda: 1 / 0, on_error=got.append)
    with qtbot.waitSignal(handle.done, timeout=2000):
        pass
    assert got and (got[0] == 42 if kind == "result" else isinstance(got[0], ZeroDivisionError))


def test_finished_handles_do_not_pile_up_on_their_parent(qtbot, configured_qapp):
    """A page's handles are its children; done, each is deleted (the soak benchmark found two
    kept per A/B run), after every caller's result and done slots have run."""
    from PySide6.QtWidgets import QWidget

    from specdeck.gui.workers import TaskHandle

    owner = QWidget()
    qtbot.addWidget(owner)
    results, dones = [], []
    for i in range(10):
        handle = submit(lambda n=i: n * n, parent=owner, on_result=results.append)
        handle.done.connect(lambda: dones.append(1))
    qtbot.waitUntil(lambda: len(dones) == 10, timeout=5000)
    qtbot.waitUntil(lambda: not owner.findChildren(TaskHandle), timeout=5000)
    assert sorted(results) == [i * i for i in range(10)]
