"""The live plots' legends: under the plot, never over its data, and naming only what is
drawn. Real pyqtgraph plots in the real BenchPlots widget (the A/B and Tune pages' plots)."""

from __future__ import annotations

import pytest


@pytest.fixture
def plots(qtbot):
    from specdeck.gui.bench_view import BenchPlots

    widget = BenchPlots()
    qtbot.addWidget(widget)
    widget.resize(1200, 260)
    widget.show()
    return widget


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
    qtbot.wait(50)
    item = plots.speed_plot.getPlotItem()
    view = item.vb.sceneBoundingRect()
    legend = item.legend.sceneBoundingRect()
    assert item.legend.parentItem() is not item.vb
    assert legend.height() > 0 and legend.top() >= view.bottom(), (legend, view)


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
