"""Widgets that show live GPU telemetry from a Sampler: per-GPU cards, plots, processes.

They only read: each ``update_from(sampler)`` takes copies of the sampler's bounded ring
buffers (at most its capacity per GPU) and redraws, so memory stays flat however long the
window is open. The GPUs page drives them from a QTimer at the sampling rate; the A/B page
can reuse :class:`TelemetryPlots` for VRAM next to its throughput curves.
"""

from __future__ import annotations

import functools
import math

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QSizePolicy,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from specdeck.core.gpu.telemetry import GpuReading, GpuStatus, TelemetryFrame
from specdeck.core.units import GiB, MiB, byte_unit, format_bytes
from specdeck.core.vram.gpus import short_name

# One colour per GPU (NVML index), readable on light and dark backgrounds.
GPU_COLOURS = ("#2563eb", "#ea580c", "#16a34a", "#9333ea", "#0891b2", "#ca8a04", "#db2777", "#4b5563")


def set_text(label: QLabel, text: str) -> None:
    """Change a label only when its text changes: redraws at 4 Hz stay cheap."""
    if label.text() != text:
        label.setText(text)


def set_visible(widget: QWidget, visible: bool) -> None:
    """Show or hide only on a change (see set_text)."""
    if widget.isHidden() == visible:
        widget.setVisible(visible)


def gpu_colour(index: int) -> QColor:
    return QColor(GPU_COLOURS[index % len(GPU_COLOURS)])


def fmt(value: float | None, unit: str, digits: int = 0) -> str:
    return "N/A" if value is None else f"{value:.{digits}f} {unit}".rstrip()


def fmt_bytes(value: int | None) -> str:
    """A byte count as everywhere in SpecDeck (core.units.format_bytes), or N/A."""
    return "N/A" if value is None else format_bytes(value)


LEGEND_COLUMNS = 4
"""Legend entries per row under a live plot."""
BAR_SAMPLE_SIDE = 10
"""Side in pixels of a bar series' swatch in a legend: the size of the label's capitals.
pyqtgraph's own swatch is an 18-pixel square crossed by the pen's line, twice the text's
height beside the 20-pixel lines of the curves' entries."""

@functools.cache
def legend_sample_type():
    """pyqtgraph's legend swatch (LegendItem's ``sampleType``), with a bar series drawn as a
    small filled square centred on the line the curves' swatches draw (made on first use:
    pyqtgraph is imported lazily)."""
    import pyqtgraph as pg
    from pyqtgraph.graphicsItems.LegendItem import ItemSample
    from PySide6.QtCore import QRectF

    class Sample(ItemSample):
        def paint(self, painter, *args):
            if not isinstance(self.item, pg.BarGraphItem) or not self.item.isVisible():
                return super().paint(painter, *args)
            side, middle = BAR_SAMPLE_SIDE, 11  # 11: the curves' swatch line
            painter.setPen(pg.mkPen(self.item.opts.get("pen")))
            painter.setBrush(pg.mkBrush(self.item.opts.get("brush")))
            painter.drawRect(QRectF((20 - side) / 2, middle - side / 2, side, side))

    return Sample


def live_plot(title: str, unit: str, x_label: str, min_height: int):
    """A pyqtgraph plot in SpecDeck's style for live series: quiet grid, legend, no menu,
    drawing only what is visible (downsampled), cheap to update several times a second.
    ``title`` "" draws none (see :func:`titled_row`). The axis shows its values as they are:
    pyqtgraph's own rescaling ("GiB (x0.001)") is off; callers pick the unit that fits."""
    import pyqtgraph as pg

    plot = pg.PlotWidget(background=None)
    if title:
        plot.setTitle(title, size="10pt")
    plot.getAxis("left").enableAutoSIPrefix(False)
    plot.setLabel("left", unit)
    plot.setLabel("bottom", x_label)
    plot.showGrid(x=True, y=True, alpha=0.15)
    plot.setMenuEnabled(False)
    plot.hideButtons()
    plot.setMinimumHeight(min_height)
    item = plot.getPlotItem()
    # The legend sits in a row under the x axis, never over the data: drawn inside the view
    # (pyqtgraph's addLegend) it covered the first points of every live plot. PlotItem adds
    # each curve made with a name to ``item.legend``, wherever that legend is laid out.
    item.legend = new_legend()
    item.layout.addItem(item.legend, 4, 1)
    # A plot with no named curve (one series) has an empty legend row, 21 px lower than one
    # with a row of samples: its data area was taller and its x axis lower than its
    # neighbours'. Every legend row is at least one row of samples high.
    item.layout.setRowMinimumHeight(4, legend_row_height())
    item.setClipToView(True)
    item.setDownsampling(auto=True, mode="peak")
    return plot


def new_legend():
    """A live plot's legend: rows of small samples under the x axis, no frame."""
    import pyqtgraph as pg

    return pg.LegendItem(labelTextSize="8pt", colCount=LEGEND_COLUMNS, frame=False,
                         horSpacing=12, sampleType=legend_sample_type())


@functools.cache
def legend_row_height() -> float:
    """The height of a live plot's legend with one row of samples (live_plot's style)."""
    import pyqtgraph as pg

    legend = new_legend()
    legend.addItem(pg.PlotDataItem([0], [0]), "A")
    return legend.layout.effectiveSizeHint(Qt.SizeHint.PreferredSize).height()


def titled_row(plots) -> tuple[QWidget, list[QLabel]]:
    """Plots side by side, each under its title (``plots``: (plot, title) pairs). A title
    wraps onto more lines when its plot is narrow (a pyqtgraph title is one line cut at the
    plot's edge: "... (server count"; a QLabel with word wrap asks its layout for the height
    it needs), and the titles share one row, as tall as the tallest: every plot is as tall as
    its neighbours and starts at the same height, whatever its title says (a title that named
    its source took a second line from its own plot alone). Returns the row and the labels."""
    box = QWidget()
    grid = QGridLayout(box)
    grid.setContentsMargins(0, 0, 0, 0)
    grid.setVerticalSpacing(0)
    labels = []
    for column, (plot, title) in enumerate(plots):
        label = QLabel(title)
        label.setWordWrap(True)
        label.setAlignment(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop)
        font = label.font()
        font.setBold(True)
        label.setFont(font)
        label.setTextFormat(Qt.TextFormat.PlainText)
        # Ignored width: a long title wraps instead of widening its column.
        policy = QSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Minimum)
        policy.setHeightForWidth(True)
        label.setSizePolicy(policy)
        grid.addWidget(label, 0, column)
        grid.addWidget(plot, 1, column)
        grid.setColumnStretch(column, 1)
        labels.append(label)
    grid.setRowStretch(1, 1)
    return box, labels


def hide_column(row: QWidget, plot: QWidget) -> None:
    """Hide ``plot`` and its title in a :func:`titled_row` row, and give its column's room
    to the others (a plot's parent is the whole row: hiding that hid every plot)."""
    grid = row.layout()
    index = grid.indexOf(plot)
    _row, column, _rows, _columns = grid.getItemPosition(index)
    for r in range(grid.rowCount()):
        item = grid.itemAtPosition(r, column)
        if item is not None and item.widget() is not None:
            item.widget().hide()
    grid.setColumnStretch(column, 0)


class GpuCard(QFrame):
    """One GPU at a glance: name, both indices, memory bar, utilisation, power, temperature."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setMinimumWidth(240)
        self.title = QLabel()
        font = QFont(self.title.font())
        font.setBold(True)
        self.title.setFont(font)
        self.indices = QLabel()
        self.indices.setProperty("role", "hint")
        self.memory = QProgressBar()
        self.memory.setTextVisible(True)
        self.status = QLabel()
        self.status.setProperty("role", "error")
        self.stats = QLabel()
        self.stats.setTextFormat(Qt.TextFormat.PlainText)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 8, 10, 8)
        layout.setSpacing(4)
        header = QHBoxLayout()
        self.swatch = QLabel()
        self.swatch.setFixedSize(12, 12)
        header.addWidget(self.swatch)
        header.addWidget(self.title, 1)
        layout.addLayout(header)
        layout.addWidget(self.indices)
        layout.addWidget(self.memory)
        layout.addWidget(self.stats)
        layout.addWidget(self.status)

    def show_reading(self, gpu: GpuReading) -> None:
        style = f"background: {gpu_colour(gpu.index).name()}; border-radius: 6px;"
        if self.swatch.styleSheet() != style:
            self.swatch.setStyleSheet(style)
        set_text(self.title, gpu.name)
        set_text(self.indices, f"nvidia-smi {gpu.index} · {gpu.cuda_text}")
        lost = gpu.status is not GpuStatus.OK
        set_text(self.status, gpu.status.problem)
        set_visible(self.status, lost)
        usable = gpu.usable_total
        if lost or usable is None or gpu.memory_used is None:
            self.memory.setRange(0, 1)
            self.memory.setValue(0)
            self.memory.setFormat("memory N/A")
        else:
            self.memory.setRange(0, max(1, usable // MiB))
            self.memory.setValue(min(usable, gpu.memory_used) // MiB)
            self.memory.setFormat(f"{format_bytes(gpu.memory_used)} / {format_bytes(usable)}")
        power = fmt(gpu.power_w, "W")
        if gpu.power_w is not None and gpu.power_limit_w:
            power = f"{gpu.power_w:.0f} / {gpu.power_limit_w:.0f} W"
        set_text(self.stats,
                 f"GPU {fmt(gpu.utilization_gpu, '%')}   mem I/O {fmt(gpu.utilization_memory, '%')}\n"
                 f"{power}   {fmt(gpu.temperature_c, '°C')}   fan {fmt(gpu.fan_percent, '%')}")


class GpuCards(QWidget):
    """A row of :class:`GpuCard`, one per GPU in the latest frame."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._layout = QHBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self.cards: dict[int, GpuCard] = {}

    def show_frame(self, frame: TelemetryFrame | None) -> None:
        readings = {g.index: g for g in frame.gpus} if frame is not None else {}
        for index in list(self.cards):
            if index not in readings:
                self.cards.pop(index).deleteLater()
        for index, reading in sorted(readings.items()):
            card = self.cards.get(index)
            if card is None:
                card = self.cards[index] = GpuCard(self)
                self._layout.insertWidget(sorted(readings).index(index), card)
            card.show_reading(reading)


class TelemetryPlots(QWidget):
    """Memory used and GPU utilisation over the last ``window_s`` seconds, one curve per GPU;
    memory in the unit that fits the largest value drawn (core.units.byte_unit)."""

    def __init__(self, window_s: float = 120.0, parent: QWidget | None = None):
        super().__init__(parent)
        import pyqtgraph as pg

        self._pg = pg
        self.window_s = window_s
        self.memory_unit = ("GiB", GiB)
        self.memory_plot = self._plot("Memory used", self.memory_unit[0])
        self.util_plot = self._plot("GPU utilisation", "%")
        self.util_plot.setYRange(0, 100, padding=0.02)
        self.util_plot.getViewBox().setLimits(yMin=0, yMax=105)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.memory_plot, 1)
        layout.addWidget(self.util_plot, 1)
        self.memory_curves: dict[int, object] = {}
        self.total_lines: dict[int, object] = {}
        self.util_curves: dict[int, object] = {}

    def _plot(self, title: str, unit: str):
        plot = live_plot(title, unit, "seconds ago", min_height=150)
        plot.setMouseEnabled(x=False, y=False)
        return plot

    def _curve(self, plot, store: dict[int, object], index: int, name: str | None,
               dashed: bool = False):
        if index not in store:
            pg = self._pg
            style = Qt.PenStyle.DashLine if dashed else Qt.PenStyle.SolidLine
            pen = pg.mkPen(gpu_colour(index), width=1 if dashed else 2, style=style)
            store[index] = plot.plot([], [], pen=pen, name=name, connect="finite")
        return store[index]

    def update_from(self, sampler) -> int:
        """Redraw from the sampler's histories; returns the number of points drawn."""
        import numpy as np

        latest = sampler.latest
        names = {g.index: short_name(g.name) for g in (latest.gpus if latest is not None else ())}
        now = latest.timestamp if latest is not None else 0.0
        drawn = 0
        shown = []
        for index in sampler.gpu_indices():
            history = sampler.history(index)
            keep = history["t"] >= now - self.window_s
            total = history["memory_total"][keep]
            shown.append((index, history, keep, total[-1] if total.size else math.nan))
        drawn_bytes = np.concatenate([h["memory_used"][keep] for _, h, keep, _ in shown]
                                     + [np.array([last for *_, last in shown])])
        drawn_bytes = drawn_bytes[~np.isnan(drawn_bytes)]
        if drawn_bytes.size:  # nothing to draw keeps the unit it has
            largest = float(drawn_bytes.max())
            self.memory_unit = byte_unit(largest) if largest >= MiB else ("MiB", MiB)
            self.memory_plot.setLabel("left", self.memory_unit[0])
        scale = self.memory_unit[1]
        for index, history, keep, last in shown:
            x = history["t"][keep] - now
            label = f"{index}: {names.get(index, f'GPU {index}')}"
            memory = self._curve(self.memory_plot, self.memory_curves, index, label)
            memory.setData(x, history["memory_used"][keep] / scale)
            if not math.isnan(last):
                line = self._curve(self.memory_plot, self.total_lines, index, None, True)
                line.setData(np.array([-self.window_s, 0.0]), np.full(2, last / scale))
            util = self._curve(self.util_plot, self.util_curves, index, label)
            util.setData(x, history["utilization_gpu"][keep])
            drawn += int(keep.sum())
        for plot in (self.memory_plot, self.util_plot):
            plot.setXRange(-self.window_s, 0, padding=0)
        return drawn

    def clear(self) -> None:
        for store, plot in ((self.memory_curves, self.memory_plot), (self.total_lines, self.memory_plot),
                            (self.util_curves, self.util_plot)):
            for curve in store.values():
                plot.removeItem(curve)
            store.clear()
        for plot in (self.memory_plot, self.util_plot):
            legend = plot.getPlotItem().legend
            if legend is not None:
                legend.clear()


class ProcessTable(QTableWidget):
    """Processes holding GPU memory; SpecDeck's own process in bold."""

    HEADERS = ("GPU", "PID", "Process", "Memory")

    def __init__(self, parent: QWidget | None = None):
        super().__init__(0, len(self.HEADERS), parent)
        self.setHorizontalHeaderLabels(self.HEADERS)
        self.horizontalHeaderItem(0).setToolTip("nvidia-smi's index (each card shows its CUDA "
                                                "index beside it)")
        self.verticalHeader().setVisible(False)
        self.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.setSelectionMode(QTableWidget.SelectionMode.NoSelection)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)

    def show_frame(self, frame: TelemetryFrame | None) -> None:
        rows = [(g.index, p) for g in (frame.gpus if frame is not None else ()) for p in g.processes]
        self.setRowCount(len(rows))
        for row, (index, process) in enumerate(rows):
            name = process.name + ("  (SpecDeck)" if process.is_self else "")
            cells = (str(index), str(process.pid), name, fmt_bytes(process.used_bytes))
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if column in (0, 1, 3):
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if process.is_self:
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                self.setItem(row, column, item)


def own_usage_text(frame: TelemetryFrame | None) -> str:
    """"SpecDeck itself: 1.2 GiB" (summed over GPUs), or why it is unknown."""
    if frame is None or not frame.gpus:
        return ""
    if frame.own_bytes is None:
        return "SpecDeck itself: unknown (the driver does not list processes here)"
    return f"SpecDeck itself: {fmt_bytes(frame.own_bytes)}"

