"""The one live pump the A/B and Tune pages drain worker events through (gui.live_pump): on
its real QTimer, events a worker thread reports arrive in order, a batch per tick; finish
stops the ticks and shows what came last; the plots are redrawn one per tick, in turn."""

from __future__ import annotations

import queue
import threading

from specdeck.gui.live_pump import LivePump, queued

EVENTS = 500


def test_a_worker_threads_events_arrive_in_order_in_batches_and_stop_at_finish(qtbot,
                                                                            configured_qapp):
    events: queue.SimpleQueue = queue.SimpleQueue()
    batches: list[list[int]] = []
    pump = LivePump(lambda: queued(events), lambda batch: batches.append(list(batch)),
                    interval_ms=5)
    half = threading.Event()

    def worker() -> None:
        for n in range(EVENTS):
            events.put(n)
            if n == EVENTS // 2:
                half.set()

    pump.start()
    thread = threading.Thread(target=worker)
    thread.start()
    qtbot.waitUntil(lambda: half.is_set() and len(batches) >= 2, timeout=10_000)
    thread.join()
    left = pump.finish()
    assert not pump.running()
    shown = [n for batch in batches for n in batch]
    assert shown == list(range(EVENTS))  # every event once, in the order reported
    assert len(batches[-1]) == left  # finish showed the rest


def test_the_plots_are_redrawn_one_per_tick_in_turn(configured_qapp):
    class Plots:
        def __init__(self):
            self.drawn: list[int] = []

        def redraw(self, only: int) -> None:
            self.drawn.append(only)

    pump, plots = LivePump(list, lambda batch: None), Plots()
    for _ in range(7):
        pump.redraw_in_turn(plots, 3)
    assert plots.drawn == [1, 2, 0, 1, 2, 0, 1]


def test_an_empty_tick_is_still_shown(configured_qapp):
    """The A/B page updates elapsed time and memory on ticks without events."""
    shown: list[list] = []
    pump = LivePump(list, lambda batch: shown.append(list(batch)))
    assert pump.pump() == 0 and shown == [[]]
