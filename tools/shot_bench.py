"""Screenshots of the A/B bench page: `python -m tools.screenshots bench`.

A real run of the embedded demo model (SmolLM2-135M on this CPU): no draft vs n-gram
(k <= 4) on grounded-edit and code prompts.

1. bench-running.png: mid-run, both panes streaming, n-gram draft text highlighted.
2. bench-results.png: the finished plan: results table, paired speed-ups, losslessness.
3. bench-sweep.png: a k = 1..8 sweep of n-gram drafting, the sweep table and "Apply".
"""

from __future__ import annotations

import time
from pathlib import Path


def _pump_until(page, done, timeout_s: float) -> None:
    from PySide6.QtWidgets import QApplication

    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        QApplication.processEvents()
        time.sleep(0.01)


def render(window, out_dir: Path) -> list[Path]:
    page = window.show_page("bench")
    page.model.setEditText("demo")
    page.use_draft.setChecked(False)
    page.use_ngram.setChecked(True)
    page.sweep.setChecked(False)
    page.k.setValue(4)
    for name, button in page.suite_buttons.items():
        button.setChecked(name in ("grounded", "code"))
    page.per_suite.setValue(2)
    page.max_new.setValue(96)
    page.repeats.setValue(1)
    page.warmup.setValue(1)
    page.start()
    # Mid-run: the second measured B run is streaming.
    _pump_until(page, lambda: page.table.rowCount() >= 3 and page.state.live.current is not None
                and page.state.live.current.new_tokens > 40,
                600)
    shots = [out_dir / "bench-running.png", out_dir / "bench-results.png"]
    window.grab().save(str(shots[0]))
    _pump_until(page, lambda: page.last_run is not None or not page.timer.isActive(), 900)
    _pump_until(page, lambda: False, 0.3)
    window.grab().save(str(shots[1]))

    page.sweep.setChecked(True)
    page.per_suite.setValue(1)
    page.suite_buttons["code"].setChecked(False)
    page.max_new.setValue(64)
    page.start()
    _pump_until(page, lambda: page.last_summary is not None, 900)
    _pump_until(page, lambda: False, 0.3)
    shots.append(out_dir / "bench-sweep.png")
    window.grab().save(str(shots[2]))
    return shots
