"""Worker events into a page while it runs, as the A/B and Tune pages both show them.

A worker (the A/B page's engine process, the Tune page's thread) reports faster than a
window can repaint. The :class:`LivePump` drains everything reported since its last tick, in
order, every ``DRAIN_INTERVAL_MS``, and hands the batch to the page in one call: the GUI does
a bounded amount of work per frame however fast tokens arrive. The page redraws one plot per
tick, in turn (:meth:`LivePump.redraw_in_turn`): no frame pays for every plot. When the work
ends (finished, failed, cancelled) the page calls :meth:`LivePump.finish`: the timer stops and
the last events are shown.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Sequence

from PySide6.QtCore import QObject, QTimer

DRAIN_INTERVAL_MS = 50


def queued(events: queue.SimpleQueue) -> list:
    """Everything ``events`` holds now, in the order it was put (a drain for the pump)."""
    out = []
    while True:
        try:
            out.append(events.get_nowait())
        except queue.Empty:
            return out


class LivePump(QObject):
    """``drain()`` -> the events since the last call, in order; ``show(events)`` applies them
    (also an empty batch: a page may show elapsed time)."""

    def __init__(self, drain: Callable[[], Sequence], show: Callable[[Sequence], None],
                 parent: QObject | None = None, interval_ms: int = DRAIN_INTERVAL_MS):
        super().__init__(parent)
        self._drain = drain
        self._show = show
        self._turn = 0
        self.timer = QTimer(self)
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self.pump)

    def start(self) -> None:
        self.timer.start()

    def running(self) -> bool:
        return self.timer.isActive()

    def pump(self) -> int:
        """Show what was reported since the last tick; returns how many events."""
        events = self._drain()
        self._show(events)
        return len(events)

    def finish(self) -> int:
        """The work ended: no more ticks; what it reported last is shown."""
        self.timer.stop()
        return self.pump()

    def stop(self) -> None:
        """No more ticks (the page closes); nothing more is shown."""
        self.timer.stop()

    def redraw_in_turn(self, plots, count: int) -> None:
        """Redraw the next of ``plots``' first ``count`` plots (BenchPlots.redraw's ``only``)."""
        self._turn = (self._turn + 1) % count
        plots.redraw(only=self._turn)
