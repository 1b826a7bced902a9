"""Run slow core calls off the GUI thread.

``submit(fn, ...)`` runs ``fn`` on Qt's thread pool and delivers its result, error or
progress back on the GUI thread through signals. ``fn`` receives a ``threading.Event`` as
``cancel`` and a ``progress`` callback when it accepts them, which is how every long core
call in SpecDeck is shaped (see CONTRIBUTING.md).

A page does not call ``submit`` itself: it keeps one :class:`Tasks` and runs its calls
through it by key (as anki's ``QueryOp``), which holds the rules every page needs: the newest
request of a key wins (the older is cancelled and its late answer dropped), and closing the
page cancels everything and drops whatever still arrives.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import logging
import threading
import traceback
import weakref
from collections.abc import Callable, Hashable
from typing import Any

from PySide6.QtCore import (
    QCoreApplication,
    QObject,
    QRunnable,
    Qt,
    QThreadPool,
    QTimer,
    Signal,
    Slot,
)
from shiboken6 import isValid

log = logging.getLogger(__name__)


class TaskHandle(QObject):
    """The GUI-side end of a background call. Keep a reference while it runs."""

    finished = Signal(object)
    """The call's return value."""
    failed = Signal(object)
    """The exception it raised (SpecDeckError for user errors)."""
    progress = Signal(object)
    """Whatever the call passed to its ``progress`` callback."""
    done = Signal()
    """Emitted last, after finished or failed."""

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.cancel_event = threading.Event()
        self.state = _State()
        """What the worker writes: plain Python, never the Qt object, which the GUI thread
        may be deleting meanwhile."""
        self.owned_by_parent = parent is not None
        """A parent (a page) owns the C++ object; without one Python owns it, and only its
        last reference may free it (a deleteLater too would free it twice)."""

    @property
    def running(self) -> bool:
        """Whether the call is still in its worker (False once it returned or raised)."""
        return self.state.running

    def cancel(self) -> None:
        self.cancel_event.set()


class _State:
    __slots__ = ("running",)

    def __init__(self):
        self.running = True


class _Runnable(QRunnable):
    """The worker's side of a call. It holds no reference to the handle (the GUI thread's
    mailbox holds it, by ``token``) and hands what it was given back to the GUI thread with
    its last letter: a worker that held the last reference to a handle or a page would
    free a Qt object on the wrong thread."""

    def __init__(self, mailbox: _Mailbox, token: int, state: _State,
                 fn: Callable[..., Any], args, kwargs):
        super().__init__()
        self.setAutoDelete(True)
        self._mailbox, self._token, self._state = mailbox, token, state
        self._call = (fn, args, kwargs)

    def run(self) -> None:  # worker thread: touches no Qt object but the mailbox
        call, self._call = self._call, None
        fn, args, kwargs = call
        post = self._mailbox.posted.emit
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - delivered to the GUI, never lost
            if not _is_user_error(exc):
                log.error("Background task failed:\n%s", traceback.format_exc())
            self._state.running = False
            post(self._token, "failed", exc)
        else:
            self._state.running = False
            post(self._token, "finished", result)
        del fn, args, kwargs
        post(self._token, "done", call)  # the call's references go back with it


class _Mailbox(QObject):
    """Where workers post what they have for the GUI thread: one object for the whole
    application, living as long as it does, so a worker never touches a Qt object that the
    GUI thread may be deleting at that moment. Workers used to emit their handle's signals
    themselves; a page deleted while one of its calls still reported progress (a test's
    page, a window closed mid-scan) then freed the handle under the emitting worker, a
    segmentation fault (the full test suite, 2026-11-27, in the Models page's compatibility
    scan; reproduced by tests/gui/test_workers.py in seconds). The mailbox's own queued
    connection to its slot (a @Slot method, not a lambda: PySide6 6.8+ has crashed on
    cross-thread signals to plain callables, PYSIDE-3124) hands each letter to the GUI
    thread, which emits the handle's signal there only if the handle still exists.

    Letters name their call by a token; the mailbox keeps each call's handle until its last
    letter, and what a finished call held (its handle, function and arguments) a moment
    longer (``KEEP_MS`` to twice that: two generations, the older dropped at each sweep), so
    the last reference never drops on the worker, which may still be returning from posting
    it, and a steady stream of calls keeps no more than two sweeps' worth."""

    posted = Signal(int, str, object)
    KEEP_MS = 1000

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._handles: dict[int, TaskHandle] = {}
        self._tokens = itertools.count()
        self._retired: list = []
        self._retiring: list = []
        self._sweep = QTimer(self)
        self._sweep.setSingleShot(True)
        self._sweep.timeout.connect(self._age)
        self.posted.connect(self._arrive, Qt.ConnectionType.QueuedConnection)

    @Slot()
    def _age(self) -> None:  # GUI thread
        self._retired, self._retiring = self._retiring, []
        if self._retired:
            self._sweep.start(self.KEEP_MS)

    def register(self, handle: TaskHandle) -> int:  # GUI thread
        token = next(self._tokens)
        self._handles[token] = handle
        return token

    @Slot(int, str, object)
    def _arrive(self, token: int, what: str, value: object) -> None:  # GUI thread
        handle = self._handles.get(token)
        if what == "done":
            self._handles.pop(token, None)
            self._retiring.append((handle, value))
            if not self._sweep.isActive():
                self._sweep.start(self.KEEP_MS)
        if handle is None or not isValid(handle):
            return  # closed with the widget that asked: nobody waits for the answer
        if what == "progress":
            handle.progress.emit(value)
        elif what == "done":
            handle.done.emit()
            _release(handle)
        else:
            getattr(handle, what).emit(value)


_mailbox: _Mailbox | None = None


def _mailbox_of_the_app() -> _Mailbox:
    """The application's mailbox, made on first use as a child of the application (pages
    submit work on the GUI thread, where it must live)."""
    global _mailbox
    if _mailbox is None or not isValid(_mailbox):
        app = QCoreApplication.instance()
        if app is None:
            raise RuntimeError("gui.workers needs a QApplication (create it first).")
        _mailbox = _Mailbox(app)
    return _mailbox


def _release(handle) -> None:
    """Delete a finished handle (on the GUI thread, after its done signal): its parent would
    otherwise keep every handle of a long session alive (the soak benchmark found two per
    A/B run). Deferred, so slots queued for its signals run first."""
    if handle.owned_by_parent and isValid(handle):  # Python owns the others
        handle.deleteLater()


def _is_user_error(exc: BaseException) -> bool:
    from specdeck.core.errors import SpecDeckError

    return isinstance(exc, SpecDeckError)


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def submit(
    fn: Callable[..., Any],
    *args: Any,
    parent: QObject | None = None,
    pool: QThreadPool | None = None,
    on_result: Callable[[Any], None] | None = None,
    on_error: Callable[[BaseException], None] | None = None,
    on_progress: Callable[[Any], None] | None = None,
    **kwargs: Any,
) -> TaskHandle:
    """Run ``fn(*args, **kwargs)`` in the background.

    Pass ``on_result`` / ``on_error`` / ``on_progress``, or connect to the handle's signals
    right after this call: the work starts on the next turn of the event loop, because a
    signal emitted from another thread before anything is connected to it is lost.
    """
    handle, runnable = _prepare(fn, args, kwargs, parent)
    if on_result is not None:
        handle.finished.connect(on_result)
    if on_error is not None:
        handle.failed.connect(on_error)
    if on_progress is not None:
        handle.progress.connect(on_progress)
    target_pool = pool or QThreadPool.globalInstance()
    QTimer.singleShot(0, handle, lambda: target_pool.start(runnable))
    return handle


def _prepare(fn: Callable[..., Any], args, kwargs: dict[str, Any],
             parent: QObject | None) -> tuple[TaskHandle, _Runnable]:
    mailbox = _mailbox_of_the_app()
    handle = TaskHandle(parent)
    token = mailbox.register(handle)
    if _accepts(fn, "cancel") and "cancel" not in kwargs:
        kwargs["cancel"] = handle.cancel_event
    if _accepts(fn, "progress") and "progress" not in kwargs:
        kwargs["progress"] = functools.partial(mailbox.posted.emit, token, "progress")
    return handle, _Runnable(mailbox, token, handle.state, fn, args, kwargs)


class Tasks(QObject):
    """A page's background calls, by key.

    ``run(key, fn, ...)`` submits ``fn`` and calls ``on_result`` / ``on_error`` /
    ``on_progress`` / ``on_done`` on the GUI thread, but only while that call is still the
    newest of its key and the page is open (by ``on_result`` or ``on_error`` the call no
    longer counts as running, so they may start the next call of the key):

    - a newer ``run`` with the same key cancels the older call (its ``cancel`` event is set)
      and drops whatever the older one still delivers: the page never shows an answer to a
      question it no longer asks (a scan of folders since changed, a plan of edits since
      typed over);
    - ``key=None`` is a call of its own, never superseded (saving a report, a history entry);
    - ``close()`` (a page's shutdown) cancels every call and drops every late answer; so does
      destroying the page, which owns this object.

    The handles are children of this object, deleted once done (see ``_release``).
    """

    def __init__(self, owner: QObject):
        super().__init__(owner)
        self._current: dict[Hashable, TaskHandle] = {}
        self._cancels: dict[Hashable, threading.Event] = {}
        """The running calls' cancel events: plain Python, so the page's destruction can set
        them without touching a Qt object being deleted."""
        self._unfinished: set[TaskHandle] = set()
        """Every call still in a worker, superseded and cancelled ones too."""
        self._callbacks: dict[TaskHandle, _Callbacks] = {}
        self._released: list = []
        """Callbacks of finished calls, dropped on the next run(): never while a handle is
        being delivered or deleted (see run)."""
        self._closed = False
        self._serial = itertools.count()
        self.destroyed.connect(lambda *_args, cancels=self._cancels: _cancel_all(cancels))

    def run(
        self,
        key: Hashable | None,
        fn: Callable[..., Any],
        *args: Any,
        on_result: Callable[[Any], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        on_progress: Callable[[Any], None] | None = None,
        on_done: Callable[[], None] | None = None,
        pool: QThreadPool | None = None,
        **kwargs: Any,
    ) -> TaskHandle | None:
        """Run ``fn(*args, **kwargs)`` as the newest call of ``key`` (in ``pool``, Qt's
        global pool by default); None once closed."""
        if self._closed:
            return None
        if key is None:
            key = (Tasks, next(self._serial))
        self.cancel(key)
        self._released.clear()  # the caller holds its page: dropping these frees nothing
        handle, runnable = _prepare(fn, args, kwargs, self)
        self._current[key] = handle
        self._cancels[key] = handle.cancel_event
        self._unfinished.add(handle)
        self._callbacks[handle] = _Callbacks(on_result, on_error, on_progress, on_done)
        # The handle's own connections hold no callback (they close over the page): only a
        # weak reference to this object. Otherwise deleting a finished handle could drop the
        # last reference to a page that Python owns, and the page, deleted in the middle of
        # the handle's deletion, would delete the handle a second time.
        tasks = weakref.ref(self)
        handle.finished.connect(lambda value: _dispatch(tasks, key, handle, "result", value))
        handle.failed.connect(lambda value: _dispatch(tasks, key, handle, "error", value))
        handle.progress.connect(lambda value: _dispatch(tasks, key, handle, "progress", value))
        handle.done.connect(lambda: _dispatch(tasks, key, handle, "done", None))
        # Everything is connected: the work starts now, not on the next turn of the event
        # loop (a page that is closing can wait for it in ``pool``).
        (pool or QThreadPool.globalInstance()).start(runnable)
        return handle

    def _live(self, key: Hashable, handle: TaskHandle) -> bool:
        return not self._closed and self._current.get(key) is handle

    def _deliver(self, key: Hashable, handle: TaskHandle, what: str, value: Any) -> None:
        callbacks = self._callbacks.get(handle)
        if what == "done":
            self._unfinished.discard(handle)
            self._released.append(self._callbacks.pop(handle, None))
            if callbacks is not None and callbacks.answered and callbacks.on_done is not None \
                    and not self._closed:
                callbacks.on_done()
            return
        if callbacks is None or not self._live(key, handle):
            return  # superseded or closed: nobody asks any more
        if what == "progress":
            if callbacks.on_progress is not None:
                callbacks.on_progress(value)
            return
        callbacks.answered = True  # its result or error: the call no longer runs
        del self._current[key]
        self._cancels.pop(key, None)
        callback = callbacks.on_result if what == "result" else callbacks.on_error
        if callback is not None:
            callback(value)

    def cancel(self, key: Hashable) -> None:
        """Cancel the call of ``key`` and drop its answers (nothing if none runs)."""
        handle = self._current.pop(key, None)
        self._cancels.pop(key, None)
        if handle is not None:
            handle.cancel()

    def stop(self, key: Hashable) -> None:
        """Ask the call of ``key`` to stop (a Cancel button): unlike :meth:`cancel` it stays
        the newest, so what it answers (a CancelledError, or its result if it was too late
        to stop) is still delivered."""
        handle = self._current.get(key)
        if handle is not None:
            handle.cancel()

    def running(self, key: Hashable | None = None) -> bool:
        """Whether the newest call of ``key`` is still running; without a key, whether any
        call is still in a worker, cancelled ones included (what a closed page's owner may
        wait for before it goes)."""
        if key is None:
            # ``running`` is plain Python, cleared in the worker: it stays readable when the
            # page (and with it each handle) was deleted before the answer could arrive.
            self._unfinished = {h for h in self._unfinished if h.running}
            return bool(self._unfinished)
        return key in self._current

    def close(self) -> None:
        """The page is closing: cancel every call; nothing is delivered from now on."""
        self._closed = True
        for key in list(self._current):
            self.cancel(key)
        self._callbacks.clear()  # the page is still held by its caller: nothing is freed here
        self._released.clear()


class _Callbacks:
    __slots__ = ("on_result", "on_error", "on_progress", "on_done", "answered")

    def __init__(self, on_result, on_error, on_progress, on_done):
        self.on_result, self.on_error = on_result, on_error
        self.on_progress, self.on_done = on_progress, on_done
        self.answered = False


def _dispatch(tasks, key, handle, what: str, value) -> None:
    owner = tasks()
    if owner is not None:
        owner._deliver(key, handle, what, value)


def _cancel_all(cancels: dict) -> None:
    for event in list(cancels.values()):
        event.set()
