"""Cycles are collected on the GUI thread (gui/gc_guard.py), never on a worker's."""

from __future__ import annotations

import gc
import threading


def test_cycles_are_collected_on_the_gui_thread_only(qtbot, qapp):
    from PySide6.QtCore import QObject

    from specdeck.gui.gc_guard import GuiThreadCollector, install

    guard = install(qapp)
    assert isinstance(guard, GuiThreadCollector) and install(qapp) is guard
    assert not gc.isenabled()  # no collection in whichever thread allocates
    freed_in = []
    kept = []

    class Cyclic(QObject):
        def __del__(self):
            freed_in.append(threading.current_thread().name)

    def make_garbage():
        for _ in range(3):
            obj = Cyclic()
            obj.me = obj  # a cycle: only the collector frees it
        # Net allocations far past the youngest generation's threshold, on a worker thread:
        # with automatic collection this thread would free the cycles above.
        kept.extend([] for _ in range(20 * gc.get_threshold()[0]))

    worker = threading.Thread(target=make_garbage, name="worker")
    worker.start()
    worker.join()
    assert freed_in == []  # the worker's allocations collected nothing
    qtbot.waitUntil(lambda: len(freed_in) == 3, timeout=5000)
    assert set(freed_in) == {threading.main_thread().name}
