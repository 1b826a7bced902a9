"""Run A/B plans in an engine process; the caller drains the events from a deque.

An A/B plan blocks for minutes and the engine's decode loop is Python, so a
:class:`BenchSession` starts one child process (core.bench.worker) that owns the engine and
runs plans there, one at a time: the engine's Python never competes with the GUI thread for
the GIL. The engine stays loaded between plans: repeating a run with another k or another
suite does not reload the model.

A reader thread receives the child's event batches into a deque; the caller drains it when
it likes (the A/B page from a timer, every 50 ms), so the GUI does a bounded amount of work
per frame however fast the engine runs, and nothing is lost. The last event of a plan is :class:`PlanDone` or
:class:`PlanFailed`; a child that dies mid-plan (killed, out of memory) ends the plan with
PlanFailed saying so.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import threading
from collections import deque

from specdeck.core.bench.plan import BenchPlan
from specdeck.core.bench.worker import (
    EngineFactory,
    PlanDone,
    PlanFailed,
    WorkerEvent,
    default_factory,
    serve,
)
from specdeck.core.errors import SpecDeckError

__all__ = ["BenchSession", "PlanDone", "PlanFailed"]

log = logging.getLogger(__name__)

POLL_S = 0.25
"""How often the reader checks that the child is still alive while waiting for events."""

START_METHOD = "spawn"
"""How the engine process starts. ``"spawn"`` (the app's): a fresh interpreter, never a fork
of the GUI process, which has Qt's and torch's threads running. ``"forkserver"`` (set by
tests/conftest.py, where present): children are forked from a server process that imported
``ENGINE_MODULES`` once, so each engine process skips torch's import (about 2 s of CPU). The
test suite starts an engine process in dozens of tests; the app starts one per page and
keeps it, where a resident fork server (~230 MB) would buy nothing."""

ENGINE_MODULES = ("specdeck.core.bench.worker", "specdeck.core.engines.torch_ref")
"""What every local engine process imports (a fork server preloads them; one it cannot
import, torch absent, is skipped)."""


def _context(method: str):
    if method == "forkserver" and method in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context(method)
        context.set_forkserver_preload(list(ENGINE_MODULES))  # before its server first starts
        return context
    return multiprocessing.get_context("spawn")


class EngineProcessDied(SpecDeckError):
    """The engine process ended in the middle of a plan."""


class BenchSession:
    """See the module docstring. Call :meth:`shutdown` before the application quits.

    ``factory`` makes the engine in the child, so it must be picklable (a module-level
    function).
    """

    def __init__(self, factory: EngineFactory | None = None, start_method: str | None = None):
        context = _context(start_method or START_METHOD)
        self._events: deque[WorkerEvent] = deque()
        self._jobs = context.Queue()
        self._from_child = context.Queue()
        self._cancel = context.Event()
        self._running = threading.Event()
        self._closed = False
        self._process = context.Process(
            target=serve, args=(self._jobs, self._from_child, self._cancel, factory or default_factory),
            # a forked child has its server's environment, not this process's of now
            kwargs={"environ": dict(os.environ)}, name="specdeck-engine", daemon=True,
        )
        self._process.start()
        self._reader = threading.Thread(target=self._read, name="specdeck-bench-reader", daemon=True)
        self._reader.start()

    # caller's thread -----------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._running.is_set()

    @property
    def alive(self) -> bool:
        return not self._closed and self._process.is_alive()

    @property
    def worker_pid(self) -> int | None:
        """The engine process (its memory is the run's memory on a CPU)."""
        return self._process.pid

    def start(self, plan: BenchPlan) -> None:
        if self._running.is_set():
            raise SpecDeckError("An A/B run is already going.", "Stop it first, or wait for it.")
        if not self.alive:
            raise SpecDeckError("The engine process has stopped.", "Start the run again.")
        self._cancel.clear()
        self._running.set()
        self._jobs.put(plan)

    def stop(self) -> None:
        """Stop after the current verify step; the finished runs are kept."""
        self._cancel.set()

    def drain(self, limit: int | None = None) -> list[WorkerEvent]:
        """The events since the last call, oldest first (at most ``limit``)."""
        out: list[WorkerEvent] = []
        while self._events and (limit is None or len(out) < limit):
            out.append(self._events.popleft())
        return out

    def shutdown(self, timeout_s: float = 30.0) -> bool:
        """Stop the run, unload the engine in its process, end it. True if it ended in time
        (otherwise it is terminated)."""
        if self._closed:
            return not self._process.is_alive()
        self._closed = True
        self._cancel.set()
        self._jobs.put(None)
        self._process.join(timeout_s)
        stopped = not self._process.is_alive()
        if not stopped:
            log.warning("The engine process did not stop within %.0f s; terminating it", timeout_s)
            self._process.terminate()
            self._process.join(5)
        self._reader.join(2 * POLL_S + 1)
        return stopped

    # reader thread ---------------------------------------------------------------------
    def _read(self) -> None:
        while True:
            try:
                batch = self._from_child.get(timeout=POLL_S)
            except queue.Empty:
                if self._process.is_alive():
                    continue
                self._child_died()
                return
            except (EOFError, OSError):
                self._child_died()
                return
            if batch is None:  # the child unloaded and is exiting
                return
            if any(isinstance(e, (PlanDone, PlanFailed)) for e in batch):
                self._running.clear()
            self._events.extend(batch)

    def _child_died(self) -> None:
        if self._running.is_set():
            code = self._process.exitcode
            self._running.clear()
            self._events.append(PlanFailed(EngineProcessDied(
                f"The engine process stopped in the middle of the run (exit code {code}).",
                "It may have run out of memory: try a smaller model, context or cache, then "
                "start again. The runs that finished are in the table.")))
