"""One thread that owns a generation engine; the GUI talks to it through signals.

An engine must be driven from a single thread (CUDA contexts, KV caches and tokenizers are
not shared), and it blocks for seconds to minutes. So :class:`EngineWorker` starts one
QThread, and every engine call (create, load, set_drafter, generate, unload) runs there,
in the order it was asked for. The GUI thread only queues requests and receives signals.

At hundreds of tokens/s one signal per verify step would flood the GUI's event loop, so the
worker coalesces the engine's events and emits :class:`StreamUpdate` batches at most every
``min_interval_s`` (50 ms by default), and always once more before ``finished``.

Cancel is a ``threading.Event``, set directly from the GUI thread: the engine checks it
between steps. Errors never escape the worker thread: they arrive as ``failed(operation,
exception)`` and the worker stays usable.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot
from specdeck.core.engines.base import (
    DrafterSpec,
    Engine,
    GenerationEvent,
    GenerationRequest,
    LoadSpec,
)
from specdeck.core.errors import SpecDeckError

log = logging.getLogger(__name__)

DEFAULT_MIN_INTERVAL_S = 0.05
EngineFactory = Callable[[str], Engine]


@dataclass
class StreamUpdate:
    """Everything the engine streamed since the previous update."""

    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    from_draft: list[bool] = field(default_factory=list)
    events: int = 0
    """Verify steps merged into this update."""
    last: GenerationEvent | None = None
    """The newest event: running totals (new tokens, drafted, accepted, elapsed)."""

    def add(self, event: GenerationEvent) -> None:
        self.text += event.text
        self.token_ids.extend(event.token_ids)
        self.from_draft.extend(event.from_draft)
        self.events += 1
        self.last = event


def _default_factory(name: str) -> Engine:
    from specdeck.core.engines import create_engine

    return create_engine(name)


class _Host(QObject):
    """Lives in the worker thread; its slots are where the engine is called."""

    def __init__(self, worker: EngineWorker, factory: EngineFactory, min_interval_s: float):
        super().__init__()
        self._worker = worker
        self._factory = factory
        self._min_interval_s = min_interval_s
        self.engine: Engine | None = None
        self.engine_name: str | None = None

    def _run(
        self,
        operation: str,
        cancel: threading.Event,
        call: Callable[[], Any],
        cancellable: bool = True,
    ) -> None:
        worker = self._worker
        worker._set_busy(True)
        try:
            if cancellable and cancel.is_set():
                from specdeck.core.errors import CancelledError

                raise CancelledError(f"{operation.capitalize()} cancelled before it started.")
            call()
        except BaseException as exc:  # noqa: BLE001 - delivered to the GUI, never lost
            if not isinstance(exc, SpecDeckError):
                log.error("Engine %s failed:\n%s", operation, traceback.format_exc())
            worker.failed.emit(operation, exc)
        finally:
            worker._operation_done(cancel)

    def _progress(self, value: Any) -> None:
        self._worker.load_progress.emit(value)

    @Slot(str, object, object)
    def load(self, engine_name: str, spec: LoadSpec, cancel: threading.Event) -> None:
        def call() -> None:
            if self.engine is not None and self.engine_name != engine_name:
                self.engine.unload()
                self.engine = None
            if self.engine is None:
                self.engine = self._factory(engine_name)
                self.engine_name = engine_name
            resolved = self._resolve_demo(spec, cancel)
            loaded = self.engine.load(resolved, self._progress, cancel)
            self._worker.loaded.emit(loaded)

        self._run("load", cancel, call)

    def _resolve_demo(self, spec: LoadSpec, cancel: threading.Event) -> LoadSpec:
        """"demo" as a model path means the embedded demo model (converted on first use)."""
        from dataclasses import replace

        from specdeck.core.engines.demo import is_demo_alias, resolve_model

        if not is_demo_alias(spec.model_path):
            return spec
        return replace(spec, model_path=resolve_model(spec.model_path, self._progress, cancel))

    @Slot(object, object)
    def set_drafter(self, drafter: DrafterSpec, cancel: threading.Event) -> None:
        def call() -> None:
            loaded = self._require_engine().set_drafter(drafter, self._progress, cancel)
            self._worker.loaded.emit(loaded)

        self._run("set_drafter", cancel, call)

    @Slot(object, object)
    def generate(self, request: GenerationRequest, cancel: threading.Event) -> None:
        def call() -> None:
            engine = self._require_engine()
            pending = StreamUpdate()
            last_emit = [time.monotonic()]

            def on_event(event: GenerationEvent) -> None:
                pending.add(event)
                now = time.monotonic()
                if now - last_emit[0] >= self._min_interval_s:
                    self._flush(pending)
                    last_emit[0] = now

            self._worker.generation_started.emit(request)
            try:
                result = engine.generate(request, on_event, cancel)
            finally:
                self._flush(pending)
            self._worker.finished.emit(result)

        self._run("generate", cancel, call)

    def _flush(self, pending: StreamUpdate) -> None:
        if pending.events:
            update = StreamUpdate(
                pending.text, list(pending.token_ids), list(pending.from_draft),
                pending.events, pending.last,
            )
            pending.text, pending.events, pending.last = "", 0, None
            pending.token_ids.clear()
            pending.from_draft.clear()
            self._worker.stream.emit(update)

    @Slot(object)
    def unload(self, cancel: threading.Event) -> None:
        def call() -> None:
            if self.engine is not None:
                self.engine.unload()
            self._worker.unloaded.emit()

        self._run("unload", cancel, call, cancellable=False)

    @Slot()
    def shutdown(self) -> None:
        """Last request: free the engine, then end this thread's event loop."""
        try:
            if self.engine is not None:
                self.engine.unload()
        except Exception:
            log.exception("Unloading the engine at shutdown failed")
        self.engine = None
        QThread.currentThread().quit()

    def _require_engine(self) -> Engine:
        if self.engine is None:
            raise SpecDeckError("No model is loaded.", "Load a model first.")
        return self.engine


class EngineWorker(QObject):
    """The GUI's handle on one engine running in its own thread. See the module docstring.

    Connect to the signals, then call :meth:`load`, :meth:`generate`, ... from the GUI
    thread; each returns at once. Call :meth:`shutdown` before the application quits."""

    load_progress = Signal(object)
    """LoadProgress while loading (or converting the demo model)."""
    loaded = Signal(object)
    """LoadedModel after load() or set_drafter()."""
    unloaded = Signal()
    generation_started = Signal(object)
    """The GenerationRequest that began running."""
    stream = Signal(object)
    """StreamUpdate: text and tokens since the previous update (throttled)."""
    finished = Signal(object)
    """GenerationResult (stop_reason CANCELLED when cancelled)."""
    failed = Signal(str, object)
    """(operation, exception): "load", "set_drafter", "generate" or "unload"."""
    busy_changed = Signal(bool)

    _request_load = Signal(str, object, object)
    _request_set_drafter = Signal(object, object)
    _request_generate = Signal(object, object)
    _request_unload = Signal(object)
    _request_shutdown = Signal()

    def __init__(
        self,
        parent: QObject | None = None,
        factory: EngineFactory | None = None,
        min_interval_s: float = DEFAULT_MIN_INTERVAL_S,
    ):
        super().__init__(parent)
        self._thread = QThread()
        self._thread.setObjectName("specdeck-engine")
        self._host = _Host(self, factory or _default_factory, min_interval_s)
        self._host.moveToThread(self._thread)
        self._request_load.connect(self._host.load)
        self._request_set_drafter.connect(self._host.set_drafter)
        self._request_generate.connect(self._host.generate)
        self._request_unload.connect(self._host.unload)
        self._request_shutdown.connect(self._host.shutdown)
        self._lock = threading.Lock()
        self._pending: list[threading.Event] = []
        self._busy = False
        self._thread.start()

    # requests (GUI thread) -------------------------------------------------------------
    def load(self, engine_name: str, spec: LoadSpec) -> None:
        self._request_load.emit(engine_name, spec, self._new_operation())

    def set_drafter(self, drafter: DrafterSpec) -> None:
        self._request_set_drafter.emit(drafter, self._new_operation())

    def generate(self, request: GenerationRequest) -> None:
        self._request_generate.emit(request, self._new_operation())

    def unload(self) -> None:
        self._request_unload.emit(self._new_operation())

    def cancel(self) -> None:
        """Stop the running operation after its current step and drop the queued ones."""
        with self._lock:
            for event in self._pending:
                event.set()

    @property
    def busy(self) -> bool:
        with self._lock:
            return bool(self._pending)

    def shutdown(self, timeout_ms: int = 30_000) -> bool:
        """Cancel, unload on the worker thread, stop the thread. True if it stopped in time."""
        if not self._thread.isRunning():
            return True
        self.cancel()
        self._request_shutdown.emit()
        stopped = self._thread.wait(timeout_ms)
        if not stopped:
            log.warning("The engine thread did not stop within %d ms", timeout_ms)
        return stopped

    # bookkeeping (any thread) ----------------------------------------------------------
    def _new_operation(self) -> threading.Event:
        event = threading.Event()
        with self._lock:
            self._pending.append(event)
        return event

    def _set_busy(self, busy: bool) -> None:
        with self._lock:
            changed = busy != self._busy
            self._busy = busy
        if changed:
            self.busy_changed.emit(busy)

    def _operation_done(self, cancel: threading.Event) -> None:
        with self._lock:
            if cancel in self._pending:
                self._pending.remove(cancel)
            idle = not self._pending
        if idle:
            self._set_busy(False)
