"""Poll a telemetry source on a thread of its own into fixed-size per-GPU histories.

A :class:`Sampler` does nothing until :meth:`Sampler.start` and stops at
:meth:`Sampler.stop`; it never starts at import. Each poll reads one frame, keeps it as
:attr:`Sampler.latest`, appends one row per GPU to that GPU's :class:`RingTable` (so memory
stays constant however long it runs) and calls the listeners. Readers on other threads get
copies, taken under a lock.

The source is anything with ``open()``, ``read() -> TelemetryFrame`` and ``close()``:
:class:`~specdeck.core.gpu.nvml.NvmlSource` (the default) or
:class:`~specdeck.core.gpu.replay.ReplaySource`.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from specdeck.core.gpu.ring import RingTable
from specdeck.core.gpu.telemetry import (
    GpuReading,
    GpuStatus,
    TelemetryFrame,
    TelemetryState,
    state_frame,
)

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 0.25
"""4 Hz: smooth plots, and well under 1% of a core with NVML (see benchmarks/bench_gpu.py)."""
DEFAULT_CAPACITY = 2400
"""Ten minutes at 4 Hz per GPU: 2400 rows x 9 columns x 8 bytes = 173 KB per GPU."""
REPLAY_ENV = "SPECDECK_GPU_REPLAY"
"""Set to a trace file to replay it instead of reading NVML (demos, screenshots, tests)."""

HISTORY_COLUMNS = (
    "t",
    "memory_used",
    "memory_total",
    "utilization_gpu",
    "utilization_memory",
    "power_w",
    "temperature_c",
    "own_bytes",
    "lost",
)

Listener = Callable[[TelemetryFrame], None]


class TelemetrySource(Protocol):
    name: str
    synthetic: bool

    def open(self) -> Any: ...
    def read(self) -> TelemetryFrame: ...
    def close(self) -> None: ...


def default_source() -> TelemetrySource:
    """NVML, unless SPECDECK_GPU_REPLAY names a trace to replay instead."""
    trace = os.environ.get(REPLAY_ENV)
    if trace:
        from specdeck.core.gpu.replay import ReplaySource

        return ReplaySource(trace)
    from specdeck.core.gpu.nvml import NvmlSource

    return NvmlSource()


def _row(frame: TelemetryFrame, gpu: GpuReading) -> tuple[float | None, ...]:
    return (
        frame.timestamp,
        gpu.memory_used,
        gpu.memory_total,
        gpu.utilization_gpu,
        gpu.utilization_memory,
        gpu.power_w,
        gpu.temperature_c,
        gpu.own_bytes,
        1.0 if gpu.status == GpuStatus.LOST else 0.0,
    )


class Sampler:
    """Background polling with bounded history. Thread-safe to read from any thread."""

    def __init__(
        self,
        source: TelemetrySource | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        capacity: int = DEFAULT_CAPACITY,
    ):
        if interval_s < 0 or not math.isfinite(interval_s):
            raise ValueError("interval_s must be a finite number >= 0")
        self._source = source
        self.interval_s = interval_s
        self.capacity = capacity
        self._lock = threading.Lock()
        self._histories: dict[int, RingTable] = {}
        self._latest: TelemetryFrame | None = None
        self._listeners: list[Listener] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._opened = False
        self._own_pids: frozenset[int] = frozenset()
        self.polls = 0
        self.poll_seconds = 0.0
        """Time spent inside polls (read + record), for the cost benchmark."""

    # configuration ----------------------------------------------------------------------
    @property
    def source(self) -> TelemetrySource:
        if self._source is None:
            self._source = default_source()
            self._tell_own_pids(self._source)
        return self._source

    def set_own_pids(self, pids) -> None:
        """SpecDeck's other processes (the A/B engine's child): their GPU memory is SpecDeck's."""
        self._own_pids = frozenset(pids)
        if self._source is not None:
            self._tell_own_pids(self._source)

    def _tell_own_pids(self, source: TelemetrySource) -> None:
        setter = getattr(source, "set_own_pids", None)  # replays name their own process
        if setter is not None:
            setter(self._own_pids)

    def set_source(self, source: TelemetrySource) -> None:
        """Switch sources (e.g. to a replay); history starts afresh. Restarts if running."""
        running = self.is_running
        if running:
            self.stop()
        self._close_source()
        self._tell_own_pids(source)
        with self._lock:
            self._source = source
            self._histories.clear()
            self._latest = None
        if running:
            self.start()

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(frame)`` after every poll, on the sampler's thread."""
        with self._lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    # running ----------------------------------------------------------------------------
    @property
    def is_running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start polling on a daemon thread (a no-op when already running)."""
        if self.is_running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="specdeck-gpu-sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop polling and release the source; history and latest frame stay readable."""
        thread = self._thread
        self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                log.warning("GPU sampler did not stop within %.1f s", timeout)
        self._thread = None
        self._close_source()

    def _run(self) -> None:
        deadline = time.monotonic()
        while not self._stop.is_set():
            self.poll_once()
            deadline += self.interval_s
            now = time.monotonic()
            if deadline < now:  # fell behind (suspend, slow driver): do not try to catch up
                deadline = now
            if self._stop.wait(deadline - now):
                break

    def _close_source(self) -> None:
        if self._opened and self._source is not None:
            try:
                self._source.close()
            except Exception:  # noqa: BLE001 - closing must not raise into stop()
                log.exception("Closing the telemetry source failed")
        self._opened = False

    def poll_once(self) -> TelemetryFrame:
        """Read one frame and record it (what the thread does each interval)."""
        started = time.perf_counter()
        source = self.source
        try:
            if not self._opened:
                self._opened = True
                source.open()
            frame = source.read()
        except Exception as exc:  # noqa: BLE001 - telemetry must never take the app down
            log.exception("Reading GPU telemetry failed")
            frame = state_frame(TelemetryState.ERROR, time.time(), f"{type(exc).__name__}: {exc}",
                                source=getattr(source, "name", "?"))
        self._record(frame)
        self.poll_seconds += time.perf_counter() - started
        self.polls += 1
        for listener in self.listeners():
            try:
                listener(frame)
            except Exception:  # noqa: BLE001 - one bad listener must not stop the others
                log.exception("GPU telemetry listener failed")
        return frame

    def _record(self, frame: TelemetryFrame) -> None:
        with self._lock:
            self._latest = frame
            for gpu in frame.gpus:
                table = self._histories.get(gpu.index)
                if table is None:
                    table = self._histories[gpu.index] = RingTable(HISTORY_COLUMNS, self.capacity)
                table.append(_row(frame, gpu))

    # reading ----------------------------------------------------------------------------
    def listeners(self) -> list[Listener]:
        with self._lock:
            return list(self._listeners)

    @property
    def latest(self) -> TelemetryFrame | None:
        with self._lock:
            return self._latest

    def gpu_indices(self) -> list[int]:
        with self._lock:
            return sorted(self._histories)

    def history(self, gpu_index: int) -> dict[str, np.ndarray]:
        """Copies of one GPU's columns (see HISTORY_COLUMNS), oldest first; {} if unknown."""
        with self._lock:
            table = self._histories.get(gpu_index)
            if table is None:
                return {}
            rows = table.rows()
        return {name: rows[:, i] for i, name in enumerate(HISTORY_COLUMNS)}

    def rows_recorded(self, gpu_index: int) -> int:
        """Rows ever appended for this GPU (can exceed the capacity)."""
        with self._lock:
            table = self._histories.get(gpu_index)
            return table.appended if table is not None else 0

    def history_bytes(self) -> int:
        """Memory held by all histories (constant once every GPU has been seen)."""
        with self._lock:
            return sum(t.nbytes for t in self._histories.values())
