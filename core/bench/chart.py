"""The report's PNG chart, drawn with Qt offscreen (QImage + QPainter, no display needed).

matplotlib is not a SpecDeck dependency; Qt is. PySide6 is imported inside the functions
only, so core stays free of Qt at import time (CONTRIBUTING.md); with no QGuiApplication
running (the CLI), one is created on the "offscreen" platform when no display is set.

Left: median decode tok/s per arm. Right: speed-up per drafting arm, the bar at the median
of paired ratios, a thin line from min to max, a box over the bootstrap 95% interval, and a
dashed line at 1.0 (no change). Slower arms are drawn in red.
"""

from __future__ import annotations

import os
from typing import Any

from specdeck.core.bench.summary import BenchSummary

WIDTH = 960
ROW = 44
HEADER = 64
FOOTER = 36
LABEL_W = 250
GAP = 40

_app: Any = None
"""The QGuiApplication this module created (kept so Qt does not destroy it)."""


def _ensure_gui_app() -> None:
    global _app
    from PySide6.QtGui import QGuiApplication

    if QGuiApplication.instance() is not None:
        return
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    # A QApplication (a QGuiApplication that can also host widgets): only one application
    # object may exist per process, and a later GUI in this process (or a test) needs widgets.
    try:
        from PySide6.QtWidgets import QApplication
    except ImportError:
        QApplication = QGuiApplication  # noqa: N806 - Qt's class name
    _app = QApplication(["specdeck-chart"])


def render_chart(summary: BenchSummary) -> bytes:
    """PNG bytes of the chart."""
    _ensure_gui_app()
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QPointF, QRectF, Qt
    from PySide6.QtGui import QColor, QFont, QImage, QPainter, QPen

    arms = summary.arms
    height = HEADER + ROW * max(len(arms), 1) + FOOTER
    image = QImage(WIDTH, height, QImage.Format.Format_ARGB32)
    image.fill(QColor("white"))
    painter = QPainter(image)
    try:
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        font = QFont()
        font.setPixelSize(13)
        painter.setFont(font)
        text_color = QColor("#202020")
        plot_w = (WIDTH - LABEL_W - GAP - 20) // 2
        left_x = LABEL_W
        right_x = LABEL_W + plot_w + GAP

        painter.setPen(text_color)
        painter.drawText(QRectF(left_x, 8, plot_w, 20), Qt.AlignmentFlag.AlignLeft,
                         "decode tok/s (median)")
        painter.drawText(QRectF(right_x, 8, plot_w, 20), Qt.AlignmentFlag.AlignLeft,
                         "speed-up vs " + summary.reference + " (median, 95% CI, min-max)")

        rates = [a.tokens_per_second or 0.0 for a in arms]
        top_rate = max(rates + [1e-9])
        comparisons = {c.arm: c for c in summary.comparisons}
        spans = [1.0]
        for c in summary.comparisons:
            if c.speedup is not None:
                spans += [c.speedup.maximum, c.speedup.ci_high]
        top_ratio = max(spans) * 1.1

        def x_ratio(value: float) -> float:
            return right_x + plot_w * min(value, top_ratio) / top_ratio

        for i, arm in enumerate(arms):
            y = HEADER + i * ROW
            painter.setPen(text_color)
            painter.drawText(QRectF(8, y, LABEL_W - 16, ROW - 8),
                             Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
                             _elide(arm.label, 34))
            bar = (plot_w - 60) * rates[i] / top_rate  # room for the value label
            painter.fillRect(QRectF(left_x, y + 8, bar, ROW - 20), QColor("#5b8def"))
            painter.drawText(QRectF(left_x + bar + 4, y, 90, ROW - 8),
                             Qt.AlignmentFlag.AlignVCenter, f"{rates[i]:.1f}")
            comparison = comparisons.get(arm.name)
            if comparison is None or comparison.speedup is None:
                label = "reference" if comparison is None else "no paired runs"
                painter.drawText(QRectF(right_x, y, plot_w, ROW - 8),
                                 Qt.AlignmentFlag.AlignVCenter, label)
                continue
            s = comparison.speedup
            colour = QColor("#d64545") if s.median < 1.0 else QColor("#2e9d5b")
            mid = y + (ROW - 8) / 2
            painter.fillRect(QRectF(right_x, y + 12, x_ratio(s.median) - right_x, ROW - 28),
                             colour.lighter(150))
            painter.setPen(QPen(QColor("#404040"), 1.5))
            painter.drawLine(QPointF(x_ratio(s.minimum), mid), QPointF(x_ratio(s.maximum), mid))
            painter.drawRect(QRectF(x_ratio(s.ci_low), mid - 5,
                                    max(x_ratio(s.ci_high) - x_ratio(s.ci_low), 1.0), 10))
            painter.setPen(QPen(colour, 3))
            painter.drawLine(QPointF(x_ratio(s.median), y + 8), QPointF(x_ratio(s.median), y + ROW - 12))
            painter.setPen(text_color)
            painter.drawText(QRectF(x_ratio(max(s.maximum, s.ci_high)) + 6, y, 80, ROW - 8),
                             Qt.AlignmentFlag.AlignVCenter, f"{s.median:.2f}x")

        one = x_ratio(1.0)
        painter.setPen(QPen(QColor("#808080"), 1, Qt.PenStyle.DashLine))
        painter.drawLine(QPointF(one, HEADER - 6), QPointF(one, height - FOOTER + 4))
        painter.setPen(text_color)
        painter.drawText(QRectF(one - 20, height - FOOTER + 6, 40, 20),
                         Qt.AlignmentFlag.AlignHCenter, "1.0x")
    finally:
        painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    buffer.close()
    return bytes(data.data())


def _elide(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
