"""Run A/B plans on one worker thread that owns the engine; the GUI drains the events.

An engine must be driven from one thread and an A/B plan blocks for minutes, so a
:class:`BenchSession` keeps one Python thread that owns the engine and runs plans there,
one at a time. The engine stays loaded between plans: repeating a run with another k or
another suite does not reload the model.

The runner reports every verify step; at hundreds of tokens/s one Qt signal per step would
flood the GUI's event loop. So events go into a deque and the page drains it from a QTimer
(every 50 ms): the GUI does a bounded amount of work per frame however fast the engine runs,
and nothing is lost. The last event of a plan is :class:`PlanDone` or :class:`PlanFailed`.
"""

from __future__ import annotations

import gc
import logging
import queue
import threading
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from specdeck.core.bench.plan import BenchPlan
from specdeck.core.bench.runner import BenchEvent, BenchRun, PlanStarted, run_plan
from specdeck.core.engines.base import Engine
from specdeck.core.errors import SpecDeckError

log = logging.getLogger(__name__)

EngineFactory = Callable[[str], Engine]


@dataclass(frozen=True)
class PlanDone:
    run: BenchRun


@dataclass(frozen=True)
class PlanFailed:
    error: BaseException


SessionEvent = BenchEvent | PlanDone | PlanFailed


def _default_factory(name: str) -> Engine:
    from specdeck.core.engines import create_engine

    return create_engine(name)


class BenchSession:
    """See the module docstring. Call :meth:`shutdown` before the application quits."""

    def __init__(self, factory: EngineFactory | None = None):
        self._factory = factory or _default_factory
        self._events: deque[SessionEvent] = deque()
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._cancel = threading.Event()
        self._running = threading.Event()
        self._engine: Engine | None = None
        self._engine_name: str | None = None
        self._thread = threading.Thread(target=self._serve, name="specdeck-bench", daemon=True)
        self._thread.start()

    # GUI thread ------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._running.is_set()

    def start(self, plan: BenchPlan) -> None:
        if self._running.is_set():
            raise SpecDeckError("An A/B run is already going.", "Stop it first, or wait for it.")
        self._cancel = threading.Event()
        self._running.set()
        cancel = self._cancel
        self._jobs.put(lambda: self._run(plan, cancel))

    def stop(self) -> None:
        """Stop after the current verify step; the finished runs are kept."""
        self._cancel.set()

    def drain(self, limit: int | None = None) -> list[SessionEvent]:
        """The events since the last call, oldest first (at most ``limit``)."""
        out: list[SessionEvent] = []
        while self._events and (limit is None or len(out) < limit):
            out.append(self._events.popleft())
        return out

    def shutdown(self, timeout_s: float = 30.0) -> bool:
        """Stop the run, unload the engine on its thread, end the thread. True if it ended."""
        self._cancel.set()
        self._jobs.put(None)
        self._thread.join(timeout_s)
        stopped = not self._thread.is_alive()
        if not stopped:
            log.warning("The A/B thread did not stop within %.0f s", timeout_s)
        return stopped

    # worker thread ---------------------------------------------------------------------
    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                self._unload()
                return
            job()

    def _run(self, plan: BenchPlan, cancel: threading.Event) -> None:
        try:
            engine = self._engine_for(plan.engine)
            run = run_plan(plan, engine=engine, on_event=self._on_event, cancel=cancel)
        except BaseException as exc:  # noqa: BLE001 - delivered to the GUI, never lost
            if not isinstance(exc, SpecDeckError):
                log.error("A/B run failed:\n%s", traceback.format_exc())
            self._running.clear()
            self._events.append(PlanFailed(exc))
        else:
            self._running.clear()
            self._events.append(PlanDone(run))

    def _on_event(self, event: BenchEvent) -> None:
        if isinstance(event, PlanStarted):
            # Everything allocated so far (torch, transformers, the model, Qt's wrappers)
            # lives as long as the engine. Freezing it keeps Python's automatic full
            # collections from scanning it: in a process this size one takes ~200 ms, all
            # of it holding the GIL, and the GUI thread misses a dozen frames each time.
            gc.freeze()
        self._events.append(event)

    def _engine_for(self, name: str) -> Engine:
        if self._engine is not None and self._engine_name != name:
            self._unload()
        if self._engine is None:
            self._engine = self._factory(name)
            self._engine_name = name
        return self._engine

    def _unload(self) -> None:
        if self._engine is None:
            return
        try:
            self._engine.unload()
        except Exception:
            log.exception("Unloading the A/B engine failed")
        self._engine = None
        self._engine_name = None
        gc.unfreeze()  # let the unloaded model's cycles be collected
        gc.collect()
