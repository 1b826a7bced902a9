"""Run A/B plans in a child process that owns the engine; events come back in batches.

Why a process: the engine's decode loop is Python (the PyTorch engine's speculative loop,
ExLlamaV2's generator), and in the GUI's process it would compete with the GUI thread for
the GIL. In its own process the engine holds its own GIL, and the GUI process only unpickles
a batch of events every few ms (docs/benchmarks/ab_gui.md measures the event loop's latency
meanwhile).

Protocol (all plain picklable data, see core.bench.runner):

- parent -> child, ``jobs`` queue: a :class:`BenchPlan` to run, or ``None`` to unload and exit;
- child -> parent, ``events`` queue: lists of events in order (verify steps batched, at most
  ``BATCH_INTERVAL_S`` apart), each plan ending with :class:`PlanDone` (the run and its
  summary, made here: the GUI process neither repeats it nor reads a tokenizer) or :class:`PlanFailed`;
  ``None`` once the child has unloaded and is about to exit;
- ``cancel``: a shared event; the runner checks it between verify steps.

The engine stays loaded between plans (a second plan on the same engine reloads only what
its load spec changes).
"""

from __future__ import annotations

import gc
import logging
import os
import pickle
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specdeck.core.bench.runner import (
    BenchEvent,
    BenchRun,
    PlanStarted,
    RunStep,
    run_plan,
    serves_arms,
)
from specdeck.core.bench.summary import BenchSummary, summarize
from specdeck.core.engines.base import Engine
from specdeck.core.errors import SpecDeckError

log = logging.getLogger(__name__)

BATCH_INTERVAL_S = 0.01
"""Verify steps are sent at most this long after they happened (other events at once)."""

EngineFactory = Callable[[str], Engine]


@dataclass(frozen=True)
class PlanDone:
    run: BenchRun
    summary: BenchSummary
    """``summarize(run)``, made once in the process that ran the plan."""


@dataclass(frozen=True)
class PlanFailed:
    error: BaseException


WorkerEvent = BenchEvent | PlanDone | PlanFailed


def default_factory(name: str) -> Engine:
    from specdeck.core.engines import create_engine

    return create_engine(name)


class _Batcher:
    """Collects events; sends them as one list when something other than a step arrives or
    the oldest unsent step is ``BATCH_INTERVAL_S`` old."""

    def __init__(self, send: Callable[[list[WorkerEvent]], None], clock=time.monotonic):
        self._send = send
        self._clock = clock
        self._pending: list[WorkerEvent] = []
        self._since = 0.0

    def emit(self, event: WorkerEvent) -> None:
        if not self._pending:
            self._since = self._clock()
        self._pending.append(event)
        if not isinstance(event, RunStep) or self._clock() - self._since >= BATCH_INTERVAL_S:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            batch, self._pending = self._pending, []
            self._send(batch)


def picklable_error(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling (every SpecDeckError does), else a RuntimeError that
    keeps its type, message and traceback for the log."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any pickling failure
        detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return RuntimeError(f"{type(exc).__name__}: {exc}\n{detail}")


PARENT_GRACE_S = 20.0
"""After the process that started this one is gone: how long the engine may take to stop its
run and unload (stopping the llama-servers it launched) before the process ends anyway."""


def watch_parent(jobs: Any, cancel: Any, events: Any = None) -> bool:
    """End this engine process when the one that started it is gone, however it ended
    (SIGTERM, SIGKILL, a crash: none of them runs multiprocessing's exit handlers, which end
    a daemon child only on a normal exit). A thread waits on the parent's sentinel
    (multiprocessing's ``parent_process()``: a pipe on POSIX, a process handle on Windows,
    so it works everywhere); when it fires it stops the run, asks the loop to unload and
    exit, and ends the process after ``PARENT_GRACE_S`` if that has not happened. False when
    this process has no multiprocessing parent (``serve`` called in-process)."""
    import multiprocessing
    import threading
    from multiprocessing.connection import wait

    parent = multiprocessing.parent_process()
    if parent is None or getattr(parent, "sentinel", None) is None:
        return False

    def watch() -> None:
        wait([parent.sentinel])
        log.warning("SpecDeck's process is gone: stopping the engine process")
        cancel.set()
        if events is not None:
            events.cancel_join_thread()  # nobody reads them now: never block the exit on it
        try:
            jobs.put(None)
        finally:
            threading.Event().wait(PARENT_GRACE_S)
            os._exit(1)

    threading.Thread(target=watch, name="specdeck-parent-watch", daemon=True).start()
    return True


ENGINE_NICENESS = 10
"""The engine process yields the CPU to the GUI process when both want it (POSIX nice): on a
machine with few cores the engine's compute threads otherwise delay the GUI's frames."""


def serve(jobs: Any, events: Any, cancel: Any, factory: EngineFactory = default_factory,
          niceness: int = ENGINE_NICENESS, environ: dict[str, str] | None = None) -> None:
    """The child's main loop (see the module docstring); ``environ``: the starting process's
    environment, taken as this process's (a child forked from a fork server has the
    server's)."""
    if environ is not None:
        os.environ.clear()
        os.environ.update(environ)
    child = watch_parent(jobs, cancel, events)
    if niceness and hasattr(os, "nice"):
        try:
            os.nice(niceness)
        except OSError as exc:
            log.debug("Could not lower the engine process's priority: %s", exc)
    engine: Engine | None = None
    engine_name: str | None = None
    try:
        while True:
            plan = jobs.get()
            if plan is None:
                return
            batcher = _Batcher(events.put)
            try:
                if engine is not None and engine_name != plan.engine:
                    _unload(engine)
                    engine = None
                if engine is None:
                    engine, engine_name = factory(plan.engine), plan.engine
                serving = serves_arms(engine)
                try:
                    run = run_plan(plan, engine=engine, on_event=_freezing(batcher.emit),
                                   cancel=cancel)
                finally:
                    if serving:
                        # Server arms: the llama-servers it launched stop, and a reloaded
                        # TabbyAPI gets its model back, when the plan ends (not at exit).
                        _unload(engine)
                        problems, engine = list(getattr(engine, "restore_problems", ())), None
                if serving and problems:
                    run.environment.setdefault("notes", []).extend(problems)
                summary = summarize(run)
            except BaseException as exc:  # noqa: BLE001 - delivered to the parent, never lost
                if not isinstance(exc, SpecDeckError):
                    log.error("A/B run failed:\n%s", traceback.format_exc())
                batcher.flush()
                events.put([PlanFailed(picklable_error(exc))])
                if isinstance(exc, KeyboardInterrupt):
                    return
            else:
                batcher.flush()
                events.put([PlanDone(run, summary)])
    finally:
        if engine is not None:
            _unload(engine, collect=not child)
        events.put(None)
        if child:
            _exit_now(events)


def _exit_now(events: Any) -> None:
    """End the engine process once its engine is unloaded and its last events are sent.

    What is left is the interpreter's own teardown of torch, transformers and the heap they
    built: seconds of a niced process's CPU (30 s with the machine busy), during which the app
    waited to quit. Nothing in it matters: the engine's servers are stopped, its files
    closed, and the events flushed here."""
    from multiprocessing import util

    events.close()
    events.join_thread()  # the queue's feeder has written everything to the pipe
    util._run_finalizers(0)  # what multiprocessing runs at a child's exit (semaphores freed)
    logging.shutdown()
    os._exit(0)


def _freezing(sink: Callable[[WorkerEvent], None]) -> Callable[[WorkerEvent], None]:
    """``sink``, freezing the heap when the plan starts: everything allocated by then (torch,
    transformers, the model) lives as long as the engine, and freezing it keeps automatic
    full collections (~200 ms each in a process this size) out of the measured runs."""

    def emit(event: WorkerEvent) -> None:
        if isinstance(event, PlanStarted):
            gc.freeze()
        sink(event)

    return emit


def _unload(engine: Engine, collect: bool = True) -> None:
    try:
        engine.unload()
    except Exception:
        log.exception("Unloading the A/B engine failed")
    if collect:  # the next engine loads into the memory this one held
        gc.unfreeze()
        gc.collect()
