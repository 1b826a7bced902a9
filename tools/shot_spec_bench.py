"""Screenshot of Spec-Bench on the A/B page: `python -m tools.screenshots spec_bench`.

bench-spec-bench.png: a finished run of the embedded demo model (no draft vs n-gram, k <= 4)
on the first question of each shipped Spec-Bench category, the summary giving the speed-up
per category; over it, the Spec-Bench choice opened (the categories not shipped greyed out)
with the tooltip of one of them (core's reason). The popup and the tooltip are windows of
their own, so they are painted onto the window's grab where they stand on the screen.
"""

from __future__ import annotations

from pathlib import Path

from tools.shot_bench import _pump_until, demo_plan


def _paint_over(shot, window, widget, at=None) -> None:
    """Paint the top-level ``widget`` (a popup, a tooltip) onto ``shot`` of ``window``, where
    it stands or at the global point ``at``."""
    from PySide6.QtGui import QPainter

    painter = QPainter(shot)
    where = at if at is not None else widget.mapToGlobal(widget.rect().topLeft())
    painter.drawPixmap(window.mapFromGlobal(where), widget.grab())
    painter.end()


def render(window, out_dir: Path) -> list[Path]:
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QApplication, QToolTip

    page = window.show_page("bench")
    page.form.set_plan(demo_plan(("spec-bench",), per_suite=1, max_new_tokens=32, repeats=1,
                                 warmup=1))
    page.start()
    _pump_until(page, lambda: page.last_summary is not None, 900)
    _pump_until(page, lambda: False, 0.3)

    combo = page.form.spec_bench
    combo.showPopup()
    _pump_until(page, lambda: False, 0.5)
    view = combo.view()
    popup = view.window()
    row = combo.findData("spec-bench/summarization")
    where = view.visualRect(view.model().index(row, 0))
    QToolTip.showText(view.viewport().mapToGlobal(where.center()),
                      combo.itemData(row, Qt.ItemDataRole.ToolTipRole), view)
    _pump_until(page, lambda: False, 0.5)
    shot = window.grab()
    _paint_over(shot, window, popup)
    # The tooltip beside the list, not over it (the offscreen screen is narrower than the
    # window, so Qt moves it left): every category stays readable.
    beside = popup.mapToGlobal(popup.rect().topRight())
    beside.setY(view.viewport().mapToGlobal(where.topLeft()).y())
    for widget in QApplication.topLevelWidgets():
        if widget.inherits("QTipLabel") and widget.isVisible():
            _paint_over(shot, window, widget, beside)
    combo.hidePopup()
    QToolTip.hideText()
    path = out_dir / "bench-spec-bench.png"
    shot.save(str(path))
    return [path]
