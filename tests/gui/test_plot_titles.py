"""The live plots' titles (the A/B and Tune pages' BenchPlots, real widgets): a title that
names its source wraps onto more lines, and every plot stays as tall as its neighbours."""

from __future__ import annotations

PLOTS = ("speed_plot", "accept_plot", "position_plot", "memory_plot")


def _lines(label) -> int:
    """The lines the title takes at its width (its row may be taller: a neighbour's)."""
    return round(label.heightForWidth(label.width()) / label.fontMetrics().lineSpacing())


def _plot_rows(plots) -> set[tuple[int, int]]:
    """Each plot's (top, height) in the row: one pair when all four line up."""
    return {(getattr(plots, name).mapTo(plots, getattr(plots, name).rect().topLeft()).y(),
             getattr(plots, name).height()) for name in PLOTS}


def test_every_plot_is_as_tall_as_its_neighbours_whatever_its_title_says(plots, qtbot):
    """Acceptance by position's title took a second line (a third, naming its sources: "(no
    finished run yet)", "(server counters)") where its neighbours' took one, and only its
    plot lost those lines' height; the memory plot's, naming why the server's memory is not
    visible, took two or three."""
    speed = plots.titles["speed"]
    for entries in ([], [("B", None)], [("B", None), ("C", None)]):
        plots.show_positions(entries)
        positions = plots.titles["positions"]
        qtbot.waitUntil(lambda: positions.width() > 0 and _lines(speed) == 1)
        if entries:  # a title naming its sources is longer than its neighbours'
            assert _lines(positions) >= 2, plots.title("positions")
        assert len(_plot_rows(plots)) == 1, (plots.title("positions"), _plot_rows(plots))

    plots.set_memory_title("Memory: the server's memory is not visible (no GPU that NVML "
                           "reads on this machine)")
    qtbot.waitUntil(lambda: _lines(plots.titles["memory"]) >= 2)
    assert len(_plot_rows(plots)) == 1, _plot_rows(plots)


def _data_areas(plots) -> set[tuple[int, int]]:
    """Each plot's data area (its ViewBox): (bottom, height) in the row's coordinates."""
    areas = set()
    for name in PLOTS:
        plot = getattr(plots, name)
        box = plot.getPlotItem().vb.sceneBoundingRect()
        bottom = plot.mapTo(plots, plot.mapFromScene(box.bottomLeft().toPoint())).y()
        areas.add((bottom, round(box.height())))
    return areas


def test_a_plot_without_a_legend_draws_its_data_level_with_its_neighbours(plots, qtbot):
    """The memory plot of one unnamed series had an empty legend row, 21 px lower than its
    neighbours' rows of samples: its data area was taller and its x axis sat lower."""
    for name in PLOTS[:3]:
        getattr(plots, name).plot([0, 1], [0, 1], name="A")
    plots.memory_plot.plot([0, 1], [0, 1])  # one series: no legend entry
    qtbot.waitUntil(lambda: plots.memory_plot.getPlotItem().vb.height() > 0)
    plots.repaint()
    qtbot.wait(50)
    assert len(_data_areas(plots)) == 1, _data_areas(plots)
