"""Python's cycle collector, run on the GUI thread only.

CPython collects reference cycles in whichever thread happens to allocate past the collector's
threshold. SpecDeck's worker threads allocate a lot (a YAML parse, a download, an A/B plan's
events), and a cycle that holds a Qt object (a widget whose signal is connected to a lambda
that refers back to it, a finished page) would then be freed on that worker thread: Qt objects
must be deleted on the thread they live on, and the GUI thread later crashes in its event loop
with nothing in the traceback but ``exec``. Seen here: a segmentation fault in the full test
suite while a worker parsed config.yml.

So while the app runs, automatic collection is off, and a timer on the GUI thread collects
when the allocation counts pass the usual thresholds (the same generational policy, only on
the right thread). Plain reference counting, which frees almost everything, is unaffected.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

CHECK_MS = 250


class GuiThreadCollector(QObject):
    """Install once per application (see :func:`install`)."""

    def __init__(self, parent: QObject | None = None, interval_ms: int = CHECK_MS):
        super().__init__(parent)
        self._thresholds = gc.get_threshold()
        gc.disable()
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self.check)
        self._timer.start()

    def check(self) -> int | None:
        """Collect the oldest generation whose count passed its threshold; the generation
        collected, or None."""
        counts = gc.get_count()
        for generation in (2, 1, 0):
            if counts[generation] > self._thresholds[generation]:
                gc.collect(generation)
                return generation
        return None

    def stop(self) -> None:
        self._timer.stop()
        gc.enable()


def install(app: QObject) -> GuiThreadCollector:
    """Collect on ``app``'s (the GUI) thread from now on; a second call returns the first."""
    existing = app.findChild(GuiThreadCollector)
    return existing if existing is not None else GuiThreadCollector(app)
