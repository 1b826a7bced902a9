"""The widgets of the A/B bench page: a streaming pane per arm, live plots, the results table."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QFont, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from specdeck.core.units import MiB
from specdeck.gui.bench_render import (
    ARM,
    ARM_COLOURS,
    OUTPUT,
    POSITIONS_AXIS,
    POSITIONS_TIP,
    POSITIONS_TITLE,
    REPEAT,
    RESULT_COLUMNS,
    arm_colour_name,
    positions_title,
)
from specdeck.gui.telemetry_view import set_text
from specdeck.gui.widgets.elided_label import ElidedLabel

DRAFT_HIGHLIGHT = "#bbf7d0"
Y_HEADROOM = 1.05
"""The position and memory plots' y axes reach this far above their data (their legends
are under the plots, telemetry_view.live_plot)."""


def arm_colour(index: int) -> QColor:
    """A fixed colour per arm (gui.bench_render.arm_colour_name: the summary's HTML uses the
    same)."""
    return QColor(arm_colour_name(index))


class StreamPane(QFrame):
    """One arm's output as it streams; text from accepted drafts highlighted (toggle)."""

    def __init__(self, title: str, colour: QColor, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("streamPane")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.title = ElidedLabel(title, min_chars=10)
        font = self.title.font()
        font.setBold(True)
        self.title.setFont(font)
        self.title.setStyleSheet(f"color: {colour.name()};")
        self.prompt_label = ElidedLabel(min_chars=10)
        self.prompt_label.setProperty("role", "hint")
        # Elided and of ignored size: the text changes every tick and must neither re-lay-out
        # nor widen the window; the whole line is in its tooltip.
        self.metrics = ElidedLabel("waiting", min_chars=12)
        self.metrics.setProperty("role", "hint")
        self.metrics.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        # QPlainTextEdit: built for appending, keeps per-character formats.
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.text.setFont(QFont("monospace", 9))
        header = QHBoxLayout()
        header.addWidget(self.title, 1)
        header.addWidget(self.metrics, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(header)
        layout.addWidget(self.prompt_label)
        layout.addWidget(self.text, 1)
        self.highlight = True
        self._segments: list[tuple[str, bool]] = []
        self._plain = QTextCharFormat()
        self._draft = QTextCharFormat()
        self._draft.setBackground(QBrush(QColor(DRAFT_HIGHLIGHT)))

    def set_title(self, title: str, colour: QColor) -> None:
        self.title.setText(title)
        self.title.setStyleSheet(f"color: {colour.name()};")

    def begin(self, prompt_text: str) -> None:
        self._segments.clear()
        self.text.clear()
        self.prompt_label.setText(prompt_text)

    def append(self, text: str, draft_chars: int | None, accepted: int, tokens: int) -> None:
        """A verify step's text; ``draft_chars`` leading characters came from accepted drafts."""
        self.append_steps([(text, draft_chars, accepted, tokens)])

    def append_steps(self, steps: list[tuple[str, int | None, int, int]]) -> None:
        """Several verify steps at once: (text, draft_chars, accepted, tokens) each.

        When the engine cannot tell which characters came from drafts (draft_chars None),
        the share of the step's tokens that were drafts is used: the highlight is then
        approximate within that step. Adjacent pieces of the same kind are merged, so a
        whole tick of streaming costs a couple of document edits, not one per token.
        """
        pieces: list[tuple[str, bool]] = []
        for text, draft_chars, accepted, tokens in steps:
            if not text:
                continue
            if draft_chars is None:
                draft_chars = round(len(text) * accepted / tokens) if tokens else 0
            for piece, from_draft in ((text[:draft_chars], True), (text[draft_chars:], False)):
                if not piece:
                    continue
                if pieces and pieces[-1][1] == from_draft:
                    pieces[-1] = (pieces[-1][0] + piece, from_draft)
                else:
                    pieces.append((piece, from_draft))
        if not pieces:
            return
        cursor = self.text.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.beginEditBlock()  # one re-layout for the whole tick, not one per piece
        for piece, from_draft in pieces:
            self._segments.append((piece, from_draft))
            cursor.insertText(piece, self._draft if from_draft and self.highlight else self._plain)
        cursor.endEditBlock()
        self.text.setTextCursor(cursor)
        self.text.ensureCursorVisible()

    def set_highlight(self, on: bool) -> None:
        if on == self.highlight:
            return
        self.highlight = on
        self.text.clear()
        cursor = self.text.textCursor()
        for piece, from_draft in self._segments:
            cursor.insertText(piece, self._draft if from_draft and on else self._plain)

    @property
    def draft_characters(self) -> int:
        return sum(len(p) for p, d in self._segments if d)

    @property
    def plain_text(self) -> str:
        return "".join(p for p, _ in self._segments)


def _same_range(a: tuple[float, float], b: tuple[float, float]) -> bool:
    scale = max(abs(b[1] - b[0]), 1e-9)
    return abs(a[0] - b[0]) <= 1e-6 * scale and abs(a[1] - b[1]) <= 1e-6 * scale


TIME_HEADROOM = 0.25
"""While a plan runs, the time plots' range runs this fraction of the seconds so far ahead of
the data (BenchPlots._fit_time)."""
PLOT_MIN_HEIGHT = 128
"""Each live plot's least height: four side by side, with their titles, must leave the A/B
page's panes and table room in a 1024x640 window after a run."""
LOADING_LABEL = "loading"
"""The shaded seconds before a plan's first run (the model loading, servers starting)."""


@dataclass
class _Series:
    x: list[float] = field(default_factory=list)
    y: list[float] = field(default_factory=list)

    dirty: bool = False

    def add(self, x: float, y: float) -> None:
        self.x.append(x)
        self.y.append(y)
        self.dirty = True

    def gap(self) -> None:
        """Break the line between runs (pyqtgraph connect="finite")."""
        if self.y and not math.isnan(self.y[-1]):
            self.add(self.x[-1], math.nan)


class BenchPlots(QWidget):
    """Tokens/s and acceptance per arm against seconds since the plan started, acceptance by
    draft position per drafting arm, and memory.

    Each plot's title is a word-wrapped label above it (telemetry_view.titled_row): at 1200 px
    four plots share the row, and a title that names its sources takes two lines instead of
    being cut at the plot's edge; the titles' row is as tall as the tallest, so the plots stay
    as tall as each other."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        import pyqtgraph as pg
        from specdeck.gui.telemetry_view import titled_row

        self._pg = pg
        self.speed_plot = self._plot("tok/s", "seconds")
        self.accept_plot = self._plot("%", "seconds")
        self.accept_plot.setYRange(0, 100, padding=0.02)
        self.position_plot = self._plot(POSITIONS_AXIS, "draft position")
        self.position_plot.setYRange(0, Y_HEADROOM * 100, padding=0)
        self.position_plot.getAxis("left").setTicks([[(v, str(v)) for v in range(0, 101, 20)]])
        self.position_plot.setMouseEnabled(x=False, y=False)
        self.memory_plot = self._plot("MiB", "seconds")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        shown = (("speed", self.speed_plot, "Decode speed"),
                 ("accept", self.accept_plot, "Draft acceptance (this run)"),
                 ("positions", self.position_plot, POSITIONS_TITLE),
                 ("memory", self.memory_plot, "Memory"))
        row, labels = titled_row([(plot, title) for _, plot, title in shown])
        layout.addWidget(row)
        self._row = row
        self.titles: dict[str, QLabel] = {key: label
                                          for (key, _, _), label in zip(shown, labels)}
        for widget in (self.titles["positions"], self.position_plot):
            widget.setToolTip(POSITIONS_TIP)
        self.speed: dict[str, _Series] = {}
        self.finished: dict[str, _Series] = {}
        self.accept: dict[str, _Series] = {}
        self.accept_done: dict[str, _Series] = {}
        """Acceptance of each finished run (server arms: the server's counts)."""
        self.memory: dict[str, _Series] = {}
        """Bytes; drawn in the unit that fits the largest (core.units.byte_unit)."""
        self.memory_unit = ("MiB", MiB)
        self.positions: dict[str, object] = {}
        """Arm name -> the core.bench.summary.DraftPositions drawn (None: no run yet)."""
        self.position_bars: dict[str, object] = {}
        """Arm name -> its pyqtgraph BarGraphItem (arms with positions to draw)."""
        self._curves: dict[tuple[str, str], object] = {}
        self._arm_index: dict[str, int] = {}
        self._legend = True
        # The three plots against seconds show the same seconds: acceptance points only from
        # the runs that drafted, drawn over their own span, sat under other seconds of the
        # speed plot beside them. Panning or zooming one moves all three.
        for plot in (self.accept_plot, self.memory_plot):
            plot.setXLink(self.speed_plot)
        self.time_shown: tuple[float, float] | None = None
        """The seconds the time plots show while they follow the data (None: none yet)."""
        self.loading: tuple[float, float] | None = None
        """The seconds shaded as loading, from Start to the first run (mark_loading)."""
        self._loading_items: list = []
        self.loading_label = None
        self._follow_time = True
        self._x_set: tuple[float, float] | None = None
        """The seconds shown as _fit_time last set them (a y-only change keeps them)."""
        for plot in (self.speed_plot, self.accept_plot, self.memory_plot):
            plot.getViewBox().sigRangeChangedManually.connect(self._stop_following)

    def title(self, key: str) -> str:
        """A plot's title as shown: "speed", "accept", "positions" or "memory"."""
        return self.titles[key].text()

    def set_acceptance_title(self, servers: bool, unreported: bool = False) -> None:
        """Servers report acceptance once a run is done, not per step: a point per finished
        run from the server's own counts; where no drafting arm's server reports any
        (TabbyAPI, Ollama, an OpenAI-compatible server), the title says so instead of an
        empty plot that looks broken."""
        if not servers:
            title = "Draft acceptance (this run)"
        elif unreported:
            title = "Acceptance: not reported by these servers"
        else:
            title = "Acceptance per finished run (server counts)"
        self.titles["accept"].setText(title)

    def set_memory_title(self, text: str) -> None:
        set_text(self.titles["memory"], text)

    @staticmethod
    def _plot(unit: str, x_label: str):
        from specdeck.gui.telemetry_view import live_plot

        return live_plot("", unit, x_label, min_height=PLOT_MIN_HEIGHT)

    def mark_loading(self, until: float | None) -> None:
        """Shade the seconds before the plan's first run on the three time plots, labelled:
        the axes count from Start, and loading the model took those seconds (the first
        points had stood at 45 s with nothing to say why). None: no mark."""
        pg = self._pg
        for plot, item in self._loading_items:
            plot.removeItem(item)
        self._loading_items = []
        self.loading = None if until is None or until <= 0 else (0.0, until)
        if self.loading is None:
            return
        for plot in (self.speed_plot, self.accept_plot, self.memory_plot):
            region = pg.LinearRegionItem(self.loading, movable=False,
                                         brush=pg.mkBrush(128, 128, 128, 40),
                                         pen=pg.mkPen(None))
            region.setZValue(-10)
            plot.addItem(region)
            self._loading_items.append((plot, region))
        # From the shaded span's left edge, near the top, whatever the y range becomes (on
        # the right edge, right-aligned, a short span cut it to "ng").
        edge = self._loading_items[0][1].lines[0]
        self.loading_label = pg.InfLineLabel(edge, LOADING_LABEL, position=0.92,
                                             anchors=[(0, 0.5), (0, 0.5)],
                                             color=(100, 100, 100))

    def hide_plot(self, plot) -> None:
        """Leave ``plot`` (one of the four) and its title out; the others share its room."""
        from specdeck.gui.telemetry_view import hide_column

        hide_column(self._row, plot)

    def reset(self, arms: list[str]) -> None:
        self.mark_loading(None)
        for (_kind, _name), curve in self._curves.items():
            for plot in (self.speed_plot, self.accept_plot, self.memory_plot):
                if curve in plot.listDataItems():
                    plot.removeItem(curve)
        self._curves.clear()
        for plot in (self.speed_plot, self.accept_plot, self.position_plot, self.memory_plot):
            legend = plot.getPlotItem().legend
            if legend is not None:
                legend.clear()
        self._arm_index = {name: i for i, name in enumerate(arms)}
        # A sweep's many arms would bury the lines under a legend: the table says the colours.
        self._legend = len(arms) <= len(ARM_COLOURS)
        self.speed = {a: _Series() for a in arms}
        self.finished = {a: _Series() for a in arms}
        self.accept = {a: _Series() for a in arms[1:]}
        self.accept_done = {a: _Series() for a in arms[1:]}
        self.memory = {}
        self.time_shown = None
        self._follow_time = True
        self._x_set = None
        self.set_memory_title("Memory")
        self.show_positions([(a, None) for a in arms[1:]])

    def show_positions(self, entries) -> None:
        """Acceptance by draft position: a group of bars per position, one bar per drafting
        arm (``entries``: (arm name, DraftPositions or None), in plan order), at the
        shares of all drafts core computed (core.bench.summary.draft_positions). An arm whose server
        reports no positions gets no bar; the title names it and the source of the rest."""
        pg, plot = self._pg, self.position_plot
        for item in self.position_bars.values():
            plot.removeItem(item)
        self.position_bars = {}
        legend = plot.getPlotItem().legend
        if legend is not None:
            legend.clear()
        self.positions = dict(entries)
        drawn = [(name, p) for name, p in entries
                 if p is not None and p.reported and any(r is not None for r in p.shares)]
        width = 0.8 / max(len(drawn), 1)
        for j, (name, positions) in enumerate(drawn):
            shown = [(i + 1, rate) for i, rate in enumerate(positions.shares) if rate is not None]
            colour = arm_colour(self._arm_index.get(name, j + 1))
            bars = pg.BarGraphItem(x=[x - 0.4 + width * (j + 0.5) for x, _ in shown],
                                   height=[100 * rate for _, rate in shown], width=width * 0.9,
                                   brush=colour, pen=pg.mkPen(colour.darker(130)),
                                   name=name if self._legend else None)
            plot.addItem(bars)
            self.position_bars[name] = bars
        top = max((len(p.shares) for _, p in drawn), default=1)
        plot.getAxis("bottom").setTicks([[(x, str(x)) for x in range(1, top + 1)]])
        plot.setXRange(0.5, top + 0.5, padding=0)
        self.titles["positions"].setText(positions_title(entries))

    def _curve(self, kind: str, name: str, plot, colour: QColor, scatter: bool = False):
        key = (kind, name)
        if key not in self._curves:
            pg = self._pg
            if scatter:
                self._curves[key] = plot.plot([], [], pen=None, symbol="o", symbolSize=7,
                                              symbolBrush=colour, symbolPen=None, name=None)
            else:
                # Memory: the title names a lone series; a legend comes with the second.
                legend = name if self._legend and kind != "memory" else None
                self._curves[key] = plot.plot([], [], pen=pg.mkPen(colour, width=2), name=legend,
                                              connect="finite")
        return self._curves[key]

    def add_memory(self, name: str, t: float, used_bytes: float) -> None:
        self.memory.setdefault(name, _Series()).add(t, used_bytes)

    def redraw(self, only: int | None = None) -> None:
        """Push the series into the curves: all three live plots, or only plot ``only``
        (0..2: speed, acceptance, memory; the position chart changes per finished run).

        Repainting a pyqtgraph plot costs a few ms of Python on the GUI thread; the page
        redraws one plot per tick, in turn, so no single frame pays for all three.
        """
        if only in (None, 0):
            self._redraw_speed()
        if only in (None, 1):
            self._redraw_accept()
        if only in (None, 2):
            self._redraw_memory()
        self._fit_time(tight=only is None)

    def _stop_following(self, *_args) -> None:
        """The user panned or zoomed the seconds: the range is theirs until the next plan. A
        change of the y axis alone (the wheel over an axis, a drag along it) leaves the
        seconds following the data."""
        if self._x_set is None or not _same_range(self._x_range(), self._x_set):
            self._follow_time = False

    def _x_range(self) -> tuple[float, float]:
        low, high = self.speed_plot.getViewBox().viewRange()[0]
        return low, high

    def _fit_time(self, tight: bool) -> None:
        """Show every time plot's data on one range of seconds. While data comes in, the range
        grows TIME_HEADROOM ahead at a time, so the three linked plots are not all repainted
        on every tick; ``tight`` (the full redraw at the end) fits the data exactly."""
        if not self._follow_time:
            return
        drawn = [s for group in (self.speed, self.finished, self.accept, self.accept_done,
                                 self.memory) for s in group.values() if s.x]
        if not drawn:
            return
        low, high = min(s.x[0] for s in drawn), max(s.x[-1] for s in drawn)
        if self.loading is not None:  # from Start, the loading shaded: not from 45 s
            low = min(low, self.loading[0])
        shown = self.time_shown
        if not tight and shown is not None and shown[0] <= low and high <= shown[1]:
            return
        span = max(high - low, 1.0)
        self.time_shown = (low, high if tight else high + TIME_HEADROOM * span)
        self.speed_plot.setXRange(*self.time_shown, padding=0.02)
        self._x_set = self._x_range()

    def _set(self, kind: str, name: str, plot, colour: QColor, series: _Series,
             scatter: bool = False, scale: float = 1.0, drawn: bool | None = None) -> None:
        """Only series that changed are pushed: setData re-converts the whole series. A
        curve (and its legend entry) is made once its arm has something to draw (``drawn``;
        default: this series has a point): the Tune page's "your current setting" has none
        when nothing drafts now."""
        if (kind, name) not in self._curves and not (bool(series.x) if drawn is None else drawn):
            return
        if series.dirty or (kind, name) not in self._curves:
            y = series.y if scale == 1.0 else [v / scale for v in series.y]
            self._curve(kind, name, plot, colour, scatter).setData(series.x, y)
            series.dirty = False

    def _redraw_speed(self) -> None:
        for arm, series in self.speed.items():
            colour = arm_colour(self._arm_index[arm])
            drawn = bool(series.x or self.finished[arm].x)  # the line's legend names both
            self._set("speed", arm, self.speed_plot, colour, series, drawn=drawn)
            self._set("done", arm, self.speed_plot, colour, self.finished[arm], scatter=True)

    def _redraw_accept(self) -> None:
        for arm, series in self.accept.items():
            colour = arm_colour(self._arm_index[arm])
            self._set("accept", arm, self.accept_plot, colour, series,
                      drawn=bool(series.x or self.accept_done[arm].x))
            self._set("accept-done", arm, self.accept_plot, colour, self.accept_done[arm],
                      scatter=True)

    def _redraw_memory(self) -> None:
        from specdeck.core.units import byte_unit

        largest = max((max(s.y) for s in self.memory.values() if s.y), default=0)
        unit = byte_unit(largest) if largest >= MiB else ("MiB", MiB)
        if unit != self.memory_unit:  # a new unit rescales every curve, not just new points
            self.memory_unit = unit
            for series in self.memory.values():
                series.dirty = True
        self.memory_plot.setLabel("left", unit[0])
        for index, (name, series) in enumerate(self.memory.items()):
            colour = QColor("#0f766e") if index == 0 else arm_colour(index + 2)
            self._set("memory", name, self.memory_plot, colour, series, scale=unit[1])
        legend = self.memory_plot.getPlotItem().legend
        if legend is not None and len(self.memory) > 1 and not legend.items:
            for name in self.memory:
                legend.addItem(self._curves[("memory", name)], name)
        if largest:  # from zero: 1.41 GiB held flat must not read as a steep climb
            self.memory_plot.setYRange(0, Y_HEADROOM * largest / unit[1], padding=0)

    def points(self) -> int:
        """Every point the plots hold: live rates, finished runs' marks and memory samples (a
        run shorter than the rate window has only its finished mark)."""
        groups = (self.speed, self.accept, self.finished, self.accept_done, self.memory)
        return sum(len(s.x) for group in groups for s in group.values())


class ResultsTable(QTableWidget):
    """One row per measured run, filled in as runs finish."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(0, len(RESULT_COLUMNS), parent)
        self.setHorizontalHeaderLabels(RESULT_COLUMNS)
        self.verticalHeader().setVisible(False)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setAlternatingRowColors(True)
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.setWordWrap(False)
        self.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)

    def add_row(self, values: list[str], colour: QColor, warn_column: int | None = None) -> int:
        row = self.rowCount()
        self.insertRow(row)
        for column, value in enumerate(values):
            item = QTableWidgetItem(value)
            if column >= REPEAT and column != OUTPUT:
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if column == ARM:
                item.setForeground(QBrush(colour))
            if column == warn_column:
                item.setForeground(QBrush(QColor("#b91c1c")))
            self.setItem(row, column, item)
        self.scrollToBottom()
        return row

    def set_cell(self, row: int, column: int, value: str) -> None:
        item = self.item(row, column)
        if item is not None:
            item.setText(value)

    def rows(self) -> list[dict[str, str]]:
        """Every row's text by column name (RESULT_COLUMNS), top to bottom."""
        from specdeck.gui.widgets.table_text import rows_by_header

        return rows_by_header(self)
