"""The live plots' legends: under the plot, never over its data, and naming only what is
drawn. Real pyqtgraph plots in the real BenchPlots widget (the A/B and Tune pages' plots)."""

from __future__ import annotations

import pytest


def _names(plot) -> list[str]:
    legend = plot.getPlotItem().legend
    return [label.text for _sample, label in legend.items]


def test_the_legend_sits_under_the_plot_not_over_its_points(plots, qtbot):
    """On the Tune page the legend covered the first points of 'Decode speed'."""
    plots.reset(["no drafting", "setting tried", "your current setting"])
    for t in range(40):
        plots.finished["no drafting"].add(float(t), 100.0 + t % 7)
        plots.finished["setting tried"].add(t + 0.5, 90.0 + t % 5)
    plots.redraw()
    item = plots.speed_plot.getPlotItem()
    assert item.legend.parentItem() is not item.vb

    def under() -> bool:  # pyqtgraph places the legend from the event loop
        view, legend = item.vb.sceneBoundingRect(), item.legend.sceneBoundingRect()
        return legend.height() > 0 and view.height() > 0 and legend.top() >= view.bottom()

    qtbot.waitUntil(under, timeout=5000)


def test_a_series_with_nothing_to_draw_has_no_legend_entry(plots):
    """Nothing drafts now: 'your current setting' never runs, and the legend does not name
    it; a series whose runs are only finished marks (a server's) is named."""
    plots.reset(["no drafting", "setting tried", "your current setting"])
    plots.redraw()
    assert _names(plots.speed_plot) == []
    plots.finished["no drafting"].add(1.0, 100.0)
    plots.speed["setting tried"].add(2.0, 90.0)
    plots.redraw()
    assert _names(plots.speed_plot) == ["no drafting", "setting tried"]
    plots.accept_done["setting tried"].add(2.0, 40.0)
    plots.redraw()
    assert _names(plots.accept_plot) == ["setting tried"]


def _painted_rows(sample) -> list[int]:
    """The rows of a legend swatch that its paint() covers (a transparent 20x20 image)."""
    from PySide6.QtGui import QImage, QPainter

    image = QImage(20, 20, QImage.Format.Format_ARGB32)
    image.fill(0)
    painter = QPainter(image)
    sample.paint(painter)
    painter.end()
    return [y for y in range(20) if any(image.pixelColor(x, y).alpha() for x in range(20))]


def test_a_bar_series_swatch_is_the_size_of_its_label(plots):
    """The A/B page's bar legend drew pyqtgraph's 18-pixel square crossed by a line, twice
    the height of the label beside it; now a small square on the curves' swatch line."""
    from specdeck.core.bench.summary import ENGINE_COUNT, DraftPositions
    from specdeck.gui.telemetry_view import BAR_SAMPLE_SIDE

    plots.reset(["A", "B"])
    plots.speed["B"].add(1.0, 20.0)
    plots.redraw()
    plots.show_positions([("B", DraftPositions((10, 8, 6), (6, 4, 2), 10, 12, ENGINE_COUNT,
                                               1, 1))])
    (bar_sample, label), = plots.position_plot.getPlotItem().legend.items
    assert label.text == "B"
    rows = _painted_rows(bar_sample)
    assert BAR_SAMPLE_SIDE - 1 <= len(rows) <= BAR_SAMPLE_SIDE + 1, rows
    assert rows == list(range(rows[0], rows[-1] + 1))  # one square, no line across it
    (line_sample, _), = plots.speed_plot.getPlotItem().legend.items
    line_rows = _painted_rows(line_sample)
    assert 0 < len(line_rows) <= 3 and rows[0] < line_rows[0] <= rows[-1]  # on the same line


@pytest.mark.parametrize("width", [1200, 1280])
def test_every_plots_axis_label_fits_its_axis(qtbot, width):
    """At 1200-1280 px the position plot's y label read '% of drafts kep'."""
    from specdeck.gui.bench_view import BenchPlots

    widget = BenchPlots()
    qtbot.addWidget(widget)
    widget.resize(width - 230, 175)  # the A/B page's plots row at 1200x800
    widget.show()
    plots = (widget.speed_plot, widget.accept_plot, widget.position_plot, widget.memory_plot)
    # The axes are sized from the event loop once the widget is shown: wait until they are.
    qtbot.waitUntil(lambda: all(p.getPlotItem().getAxis("left").boundingRect().height() > 0
                                for p in plots), timeout=5000)
    for plot in plots:
        axis = plot.getPlotItem().getAxis("left")
        assert axis.label.boundingRect().width() <= axis.boundingRect().height(), \
            axis.labelText
