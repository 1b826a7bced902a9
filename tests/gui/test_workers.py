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


# Tasks: a page's calls by key ---------------------------------------------------------------
@pytest.fixture
def owner(qtbot, configured_qapp):
    from PySide6.QtWidgets import QWidget

    widget = QWidget()
    qtbot.addWidget(widget)
    return widget


def _gated(gate: threading.Event, value, seen_cancel: list):
    """A call that answers ``value`` only once ``gate`` opens, whatever its cancel says: the
    worst case, a call that ignores cancel and answers late."""
    def call(cancel=None):
        gate.wait(10)
        seen_cancel.append(cancel.is_set())
        return value
    return call


def test_the_newest_request_of_a_key_wins_and_a_late_answer_is_dropped(qtbot, owner):
    from specdeck.gui.workers import Tasks

    tasks = Tasks(owner)
    results, dones, seen_cancel = [], [], []
    gate = threading.Event()
    old = tasks.run("scan", _gated(gate, "old", seen_cancel), on_result=results.append,
                    on_done=lambda: dones.append("old"))
    new = tasks.run("scan", lambda: "new", on_result=results.append,
                    on_done=lambda: dones.append("new"))
    assert old.cancel_event.is_set() and not new.cancel_event.is_set()
    qtbot.waitUntil(lambda: dones == ["new"], timeout=5000)
    assert results == ["new"] and not tasks.running("scan")
    with qtbot.waitSignal(old.done, timeout=5000):
        gate.set()  # the superseded call answers now, after the newer one
    qtbot.waitUntil(lambda: seen_cancel == [True], timeout=5000)
    assert results == ["new"] and dones == ["new"]


def test_keys_are_independent_and_a_keyless_call_is_never_superseded(qtbot, owner):
    from specdeck.gui.workers import Tasks

    tasks = Tasks(owner)
    results = []
    for value in ("a", "b"):
        tasks.run(None, lambda v=value: v, on_result=results.append)
    tasks.run("library", lambda: "library", on_result=results.append)
    tasks.run("variants", lambda: "variants", on_result=results.append)
    qtbot.waitUntil(lambda: len(results) == 4, timeout=5000)
    assert sorted(results) == ["a", "b", "library", "variants"]
    qtbot.waitUntil(lambda: not tasks.running(), timeout=5000)


def test_errors_and_progress_of_a_superseded_call_are_dropped_too(qtbot, owner):
    from specdeck.gui.workers import Tasks

    tasks = Tasks(owner)
    errors, progress, gate = [], [], threading.Event()

    def failing(progress=None):
        progress("old step")
        gate.wait(10)
        raise SpecDeckError("old failure")

    old = tasks.run("check", failing, on_error=errors.append, on_progress=progress.append)
    tasks.cancel("check")
    with qtbot.waitSignal(old.done, timeout=5000):
        gate.set()
    qtbot.wait(0)  # anything queued for the superseded call would run now
    assert errors == [] and progress == []
    tasks.run("check", lambda: 1 / 0, on_error=errors.append)
    qtbot.waitUntil(lambda: len(errors) == 1, timeout=5000)
    assert isinstance(errors[0], ZeroDivisionError)


def test_close_cancels_every_call_and_drops_what_still_arrives(qtbot, owner):
    from specdeck.gui.workers import Tasks

    tasks = Tasks(owner)
    delivered, started = [], threading.Event()

    def waits_for_cancel(cancel=None):
        started.set()
        if not cancel.wait(10):
            return "not cancelled"
        raise CancelledError()

    handle = tasks.run("install", waits_for_cancel, on_result=delivered.append,
                       on_error=delivered.append, on_done=lambda: delivered.append("done"))
    qtbot.waitUntil(started.is_set, timeout=5000)
    with qtbot.waitSignal(handle.done, timeout=5000):
        tasks.close()
    assert handle.cancel_event.is_set()
    qtbot.wait(0)
    assert delivered == [] and not tasks.running()
    assert tasks.run("install", lambda: "after close", on_result=delivered.append) is None


def test_destroying_the_owner_cancels_its_calls(qtbot, configured_qapp):
    from PySide6.QtWidgets import QWidget

    from specdeck.gui.workers import Tasks

    owner = QWidget()
    tasks = Tasks(owner)
    started, finished = threading.Event(), threading.Event()

    def waits_for_cancel(cancel=None):
        started.set()
        cancel.wait(10)
        finished.set()

    handle = tasks.run("scan", waits_for_cancel)
    qtbot.waitUntil(started.is_set, timeout=5000)
    cancel = handle.cancel_event
    owner.deleteLater()
    qtbot.waitUntil(cancel.is_set, timeout=5000)
    assert finished.wait(5)
    # Its answer has nowhere to go, but whoever waits for the work to end is told it did.
    qtbot.waitUntil(lambda: not tasks.running(), timeout=5000)


def test_by_its_answer_a_call_no_longer_runs_so_the_answer_may_ask_again(qtbot, owner):
    """A save whose result reopens the file, a failed sign-in that asks for the status: the
    next call of the key starts from inside the answer, and is not dropped."""
    from specdeck.gui.workers import Tasks

    tasks = Tasks(owner)
    seen = []

    def first_answer(value):
        seen.append((value, tasks.running("file")))
        tasks.run("file", lambda: "reopened", on_result=lambda v: seen.append((v, None)))

    tasks.run("file", lambda: "saved", on_result=first_answer, on_done=lambda: seen.append("done"))
    qtbot.waitUntil(lambda: ("reopened", None) in seen, timeout=5000)
    assert seen[0] == ("saved", False)
    qtbot.waitUntil(lambda: "done" in seen, timeout=5000)


def test_a_page_that_python_owns_survives_its_calls_ending(tmp_path):
    """An owner without a parent, held only through its callbacks (a context a test dropped):
    the finished handles are deleted, and that must not free the owner in the middle of a
    handle's deletion (the owner would then delete that handle a second time: a segmentation
    fault, seen when the callbacks were connected to the handle itself). In a child process,
    so a crash fails this test instead of ending the run."""
    import os
    import subprocess
    import sys

    script = tmp_path / "owner.py"
    script.write_text(
        "from PySide6.QtCore import QCoreApplication, QObject, QThreadPool\n"
        "from specdeck.gui.workers import Tasks\n"
        "app = QCoreApplication([])\n"
        "class Owner(QObject):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.tasks = Tasks(self)\n"
        "        self.pool = QThreadPool(self)\n"
        "    def failed(self, error):\n"
        "        pass\n"
        "def drop():\n"
        "    owner = Owner()\n"
        "    for _ in range(20):\n"
        "        owner.tasks.run('save', lambda: 1, on_error=owner.failed, pool=owner.pool)\n"
        "    app.processEvents()  # a page's work starts at once or on this turn\n"
        "    owner.pool.waitForDone()  # answered in workers, not yet delivered\n"
        "drop()\n"
        "for _ in range(5):\n"
        "    app.processEvents()\n"
        "print('survived')\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert done.returncode == 0 and done.stdout.strip() == "survived", done.stderr[-2000:]


def test_pages_deleted_while_their_calls_report_progress(tmp_path):
    """Pages are deleted (a window closed, a test's page cleaned up) while their calls still
    report progress from workers. A worker must never touch a handle the GUI thread is
    deleting: when workers emitted their handle's signals themselves, this crashed with a
    segmentation fault within a second or two (the full test suite crashed so on
    2026-11-27, in the Models page's compatibility scan). In a child process, so a crash
    fails this test instead of ending the run; every call that answered is delivered."""
    import os
    import subprocess
    import sys

    script = tmp_path / "churn.py"
    script.write_text(
        "from PySide6.QtCore import QCoreApplication, QObject, QTimer\n"
        "from specdeck.gui.workers import Tasks\n"
        "app = QCoreApplication([])\n"
        "owners, answers = [], []\n"
        "def work(progress=None, cancel=None):\n"
        "    for i in range(2000):\n"
        "        progress({'step': i})\n"
        "    return i\n"
        "def tick():\n"
        "    owner = QObject()\n"
        "    owner.tasks = Tasks(owner)\n"
        "    for key in range(3):\n"
        "        owner.tasks.run(key, work, on_progress=lambda v: None,\n"
        "                        on_result=answers.append)\n"
        "    owners.append(owner)\n"
        "    if len(owners) > 3:\n"
        "        old = owners.pop(0)\n"
        "        old.tasks.close()\n"
        "        old.deleteLater()\n"
        "timer = QTimer()\n"
        "timer.timeout.connect(tick)\n"
        "timer.start(5)\n"
        "QTimer.singleShot(3000, app.quit)\n"
        "app.exec()\n"
        "timer.stop()\n"
        "last = owners[-1]\n"
        "while last.tasks.running():\n"
        "    app.processEvents()\n"
        "for _ in range(5):\n"
        "    app.processEvents()\n"
        "print('survived', len(answers) >= 3 and set(answers) == {1999})\n")
    done = subprocess.run([sys.executable, "-X", "faulthandler", str(script)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert done.returncode == 0 and done.stdout.split() == ["survived", "True"], \
        done.stderr[-2000:]


def test_finished_calls_are_let_go_while_others_keep_finishing(qtbot, configured_qapp,
                                                               monkeypatch):
    """The mailbox keeps what a finished call held a moment longer (so its last reference
    never drops on the worker), and no more than two sweeps' worth under a steady stream of
    calls: restarting one timer at every finished call kept all of them while calls went on
    finishing more often than the sweep. The sweep's timer runs on a clock that counts the
    calls (one finishes every 10 ms of it, the sweep waits 100 ms), so the machine's pace
    does not decide what is kept."""
    from specdeck.gui.workers import _Mailbox, _mailbox_of_the_app

    mailbox = _mailbox_of_the_app()
    # What earlier calls left ages at the usual pace first: the sweep is then idle.
    qtbot.waitUntil(lambda: not mailbox._retired and not mailbox._retiring, timeout=5000)
    now = [0]

    class CountedTimer:
        """QTimer's single shot as the mailbox uses it, on the calls' clock: start() (re)arms
        it ``ms`` from now, as QTimer.start does on an active timer."""

        due: int | None = None

        def start(self, ms: int) -> None:
            self.due = now[0] + ms

        def isActive(self) -> bool:  # noqa: N802 - QTimer's name
            return self.due is not None

        def tick(self) -> None:
            if self.due is not None and now[0] >= self.due:
                self.due = None
                mailbox._age()

    timer = CountedTimer()
    monkeypatch.setattr(_Mailbox, "KEEP_MS", 100)
    monkeypatch.setattr(mailbox, "_sweep", timer)
    held = []
    for _ in range(100):  # a call finishing every 10 ms for a second
        call = submit(lambda: 1)
        with qtbot.waitSignal(call.done, timeout=10_000):
            pass
        now[0] += 10
        timer.tick()
        held.append(len(mailbox._retired) + len(mailbox._retiring))
    assert max(held) <= 20, max(held)  # two sweeps of 100 ms: 20 calls, not all 100
    assert held[-1] >= 10  # and what finished within the last sweep is still kept
    now[0] += 200
    timer.tick()
    timer.tick()
    now[0] += 200
    timer.tick()
    assert not mailbox._retired and not mailbox._retiring
