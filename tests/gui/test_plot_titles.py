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
        assert _lines(positions) >= 2, plots.title("positions")  # a title of its own length
        assert len(_plot_rows(plots)) == 1, (plots.title("positions"), _plot_rows(plots))

    plots.set_memory_title("Memory: the server's memory is not visible (no GPU that NVML "
                           "reads on this machine)")
    qtbot.waitUntil(lambda: _lines(plots.titles["memory"]) >= 2)
    assert len(_plot_rows(plots)) == 1, _plot_rows(plots)
