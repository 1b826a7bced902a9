"""The VRAM plan drawn as one stacked bar per GPU, with the live memory use marked on it.

Bars share one scale (GiB), so a 24 GB card's bar is shorter than a 32 GB card's. Each bar
stacks target weights, target cache, draft weights, draft cache, overhead, other programs
and free; a black tick marks what the GPU really holds now (from telemetry), which is the
"plan vs reality" view. Pure painting: no domain logic, the numbers come from a VramPlan.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QBrush, QColor, QFontMetrics, QPainter, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget
from specdeck.core.units import format_bytes
from specdeck.core.vram import GpuPlan, VramPlan

SEGMENT_COLOURS = {
    "target weights": QColor("#1d4ed8"),
    "target cache": QColor("#60a5fa"),
    "draft weights": QColor("#c2410c"),
    "draft cache": QColor("#fdba74"),
    "overhead": QColor("#6b7280"),
    "other programs": QColor("#a8a29e"),
    "free": QColor(0, 0, 0, 0),
}
ROW_HEIGHT = 50
BAR_HEIGHT = 22
LEGEND_LINE = 20
LABEL_WIDTH = 150


@dataclass(frozen=True)
class BarSegment:
    """One painted piece of a bar, for tests and tooltips."""

    gpu: int
    label: str
    nbytes: int
    rect: QRectF


class PlanBars(QWidget):
    """Paints a VramPlan; ``set_live_used({gpu_index: bytes})`` adds the reality ticks."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.plan: VramPlan | None = None
        self.live_used: dict[int, int] = {}
        self.segments: list[BarSegment] = []
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMouseTracking(True)

    def set_plan(self, plan: VramPlan | None) -> None:
        self.plan = plan
        self.updateGeometry()
        self.update()

    def set_live_used(self, used_by_plan_gpu: dict[int, int]) -> None:
        """Live memory use keyed by the plan's GPU index (CUDA order)."""
        if used_by_plan_gpu != self.live_used:
            self.live_used = dict(used_by_plan_gpu)
            self.update()

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        rows = len(self.plan.gpus) if self.plan is not None else 1
        return QSize(480, self._legend_height(max(self.width(), 480)) + rows * ROW_HEIGHT + 4)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        return QSize(320, self.sizeHint().height())

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self.updateGeometry()  # the legend may wrap onto another line

    # painting ---------------------------------------------------------------------------
    def _legend_items(self) -> list[tuple[str, QColor | None]]:
        items: list[tuple[str, QColor | None]] = [
            (label, colour) for label, colour in SEGMENT_COLOURS.items() if label != "free"]
        return items + [("live use", None)]

    def _legend_layout(self, width: int) -> list[tuple[float, float, str, QColor | None]]:
        """(x, y, label, colour) per legend entry, wrapping at ``width``."""
        metrics = QFontMetrics(self.font())
        x, y, placed = 4.0, 0.0, []
        for label, colour in self._legend_items():
            advance = 16 + metrics.horizontalAdvance(label) + 14
            if x > 4 and x + advance > width:
                x, y = 4.0, y + LEGEND_LINE
            placed.append((x, y, label, colour))
            x += advance
        return placed

    def _legend_height(self, width: int) -> int:
        return int(max(y for _, y, _, _ in self._legend_layout(width)) + LEGEND_LINE + 6)

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt's name
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.segments = []
        if self.plan is None:
            painter.setPen(self.palette().placeholderText().color())
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, "No plan yet")
            return
        text = self.palette().text().color()
        for x, y, label, colour in self._legend_layout(self.width()):
            if colour is None:  # the live-use tick
                painter.setPen(QPen(text, 2))
                painter.drawLine(int(x + 6), int(y + 4), int(x + 6), int(y + 16))
            else:
                painter.fillRect(QRectF(x, y + 4, 12, 12), colour)
            painter.setPen(text)
            painter.drawText(QRectF(x + 16, y, 200, LEGEND_LINE), Qt.AlignmentFlag.AlignVCenter, label)
        scale_bytes = max(g.total_bytes for g in self.plan.gpus) or 1
        width = max(10, self.width() - LABEL_WIDTH - 12)
        top = self._legend_height(self.width())
        for row, gpu in enumerate(self.plan.gpus):
            self._paint_row(painter, gpu, top + row * ROW_HEIGHT, width * gpu.total_bytes / scale_bytes)
        painter.end()

    def _paint_row(self, painter: QPainter, gpu: GpuPlan, top: float, bar_width: float) -> None:
        text = self.palette().text().color()
        hint = self.palette().placeholderText().color()
        painter.setPen(text)
        painter.drawText(QRectF(4, top, LABEL_WIDTH - 8, BAR_HEIGHT),
                         Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
                         gpu.label)
        layers = []
        if gpu.target_layers:
            layers.append("layers {}-{}".format(*gpu.target_layers))
        if gpu.draft_layers:
            layers.append("draft")
        painter.setPen(hint)
        painter.drawText(QRectF(4, top + BAR_HEIGHT + 2, LABEL_WIDTH - 8, 18),
                         Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop,
                         " + ".join(layers) or "unused")
        left = float(LABEL_WIDTH)
        x = left
        # The bar's full length is the card's total; the driver's reservation is not drawn.
        per_byte = bar_width / gpu.total_bytes if gpu.total_bytes else 0.0
        for label, nbytes in gpu.segments():
            if nbytes <= 0:
                continue
            rect = QRectF(x, top, nbytes * per_byte, BAR_HEIGHT)
            painter.fillRect(rect, SEGMENT_COLOURS[label])
            self.segments.append(BarSegment(gpu.index, label, nbytes, rect))
            x += rect.width()
        # Outline what programs can use: the total less the driver's reservation.
        outline = QRectF(left, top, (gpu.capacity_bytes + gpu.in_use_bytes) * per_byte, BAR_HEIGHT)
        over = gpu.free_bytes < 0
        painter.setPen(QPen(QColor("#dc2626") if over else text, 2 if over else 1))
        painter.setBrush(QBrush(Qt.BrushStyle.NoBrush))
        painter.drawRect(outline)
        live = self.live_used.get(gpu.index)
        if live is not None:
            tick = left + live * per_byte
            painter.setPen(QPen(text, 2))
            painter.drawLine(int(tick), int(top - 4), int(tick), int(top + BAR_HEIGHT + 4))
        painter.setPen(text)
        free = gpu.free_bytes
        caption = (f"{format_bytes(gpu.used_bytes)} of {format_bytes(gpu.capacity_bytes)}, "
                   + (f"{format_bytes(free)} free" if free >= 0
                      else f"{format_bytes(-free)} short"))
        if live is not None:
            caption += f"  ·  live {format_bytes(live)}"
        painter.drawText(QRectF(left, top + BAR_HEIGHT + 2, self.width() - left, 18),
                         Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop, caption)

    def segment_at(self, x: float, y: float) -> BarSegment | None:
        return next((s for s in self.segments if s.rect.contains(x, y)), None)

    def mouseMoveEvent(self, event) -> None:  # noqa: N802 - Qt's name
        segment = self.segment_at(event.position().x(), event.position().y())
        self.setToolTip(f"{self.plan.gpu(segment.gpu).label} · {segment.label}: "
                        f"{format_bytes(segment.nbytes)}"
                        if segment else "")
