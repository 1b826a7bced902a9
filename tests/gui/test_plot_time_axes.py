"""The live plots against seconds (decode speed, acceptance, memory) show the same seconds.

On the Tune page, acceptance points exist only for the runs that drafted (at 48-52 s of a
52 s tune): drawn over their own span they sat beside speed points from other seconds. Real
pyqtgraph plots in the real BenchPlots widget (the A/B and Tune pages' plots)."""

from __future__ import annotations

import pytest


def _x_range(plot) -> tuple[float, float]:
    low, high = plot.getViewBox().viewRange()[0]
    return low, high


@pytest.fixture(autouse=True)
def tune_arms(plots):
    plots.reset(["no drafting", "setting tried"])


def _tune_like(plots) -> None:
    for t in range(0, 52):
        plots.finished["no drafting" if t % 2 else "setting tried"].add(float(t), 100.0)
    for t in (48.8, 49.7, 51.6):
        plots.accept_done["setting tried"].add(t, 20.0)


def test_acceptance_and_memory_show_the_seconds_the_speed_plot_shows(plots):
    _tune_like(plots)
    plots.add_memory("engine process RSS", 0.5, 2**30)
    plots.redraw()
    speed = _x_range(plots.speed_plot)
    assert speed[0] <= 0.0 and speed[1] >= 51.6
    assert _x_range(plots.accept_plot) == pytest.approx(speed)
    assert _x_range(plots.memory_plot) == pytest.approx(speed)


def test_memory_sampled_before_the_first_token_is_in_view(plots):
    plots.add_memory("engine process RSS", 0.2, 2**30)
    plots.finished["no drafting"].add(6.0, 100.0)
    plots.finished["no drafting"].add(9.0, 100.0)
    plots.redraw()
    low, high = _x_range(plots.speed_plot)
    assert low <= 0.2 and high >= 9.0


def test_while_running_the_range_grows_ahead_not_on_every_tick(plots):
    """Moving three linked plots repaints all three: the range moves when data leaves it."""
    plots.finished["no drafting"].add(0.0, 100.0)
    plots.finished["no drafting"].add(10.0, 100.0)
    plots.redraw(only=0)
    first = plots.time_shown
    assert first is not None and first[1] > 10.0
    plots.finished["no drafting"].add(first[1] - 0.1, 100.0)
    plots.redraw(only=0)
    assert plots.time_shown == first
    plots.finished["no drafting"].add(first[1] + 1.0, 100.0)
    plots.redraw(only=1)
    assert plots.time_shown[1] > first[1] + 1.0
    plots.redraw()  # the end of a plan: fitted to the data, no room left ahead
    assert plots.time_shown == (0.0, first[1] + 1.0)


def _wheel(plot, on_left_axis: bool = False) -> None:
    """A mouse wheel turned over the plot's view, or over its left axis's tick labels (the
    axis item's own rectangle spans the grid it draws across the view)."""
    from PySide6.QtCore import QPoint, QPointF, Qt
    from PySide6.QtGui import QWheelEvent
    from PySide6.QtWidgets import QApplication

    viewport = plot.viewport()
    view = plot.getViewBox().sceneBoundingRect()
    point = QPointF(view.left() - 10, view.center().y()) if on_left_axis else view.center()
    at = plot.mapFromScene(point)
    event = QWheelEvent(QPointF(at), QPointF(viewport.mapToGlobal(at)), QPoint(0, 0),
                        QPoint(0, 120), Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier,
                        Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(viewport, event)


def test_a_user_who_zooms_keeps_the_range_until_the_next_plan(plots, qtbot):
    _tune_like(plots)
    plots.redraw()
    before = _x_range(plots.speed_plot)
    _wheel(plots.accept_plot)  # zoom in on the acceptance plot, as a mouse wheel does
    panned = _x_range(plots.speed_plot)
    assert panned[1] - panned[0] < before[1] - before[0]
    assert _x_range(plots.accept_plot) == pytest.approx(panned)  # the others moved with it
    plots.finished["no drafting"].add(80.0, 100.0)
    plots.redraw()
    assert _x_range(plots.speed_plot) == pytest.approx(panned)
    plots.reset(["no drafting", "setting tried"])
    plots.finished["no drafting"].add(0.0, 100.0)
    plots.finished["no drafting"].add(5.0, 100.0)
    plots.redraw()
    assert _x_range(plots.speed_plot)[1] < 10.0


def test_zooming_only_the_y_axis_keeps_the_seconds_following(plots):
    """The wheel over the left axis zooms y alone: the seconds still follow the data."""
    _tune_like(plots)
    plots.redraw()
    before_x = plots.time_shown
    before_y = plots.speed_plot.getViewBox().viewRange()[1]
    _wheel(plots.speed_plot, on_left_axis=True)
    assert plots.speed_plot.getViewBox().viewRange()[1] != pytest.approx(before_y)  # it zoomed
    plots.finished["no drafting"].add(80.0, 100.0)
    plots.redraw()
    assert plots.time_shown != before_x and _x_range(plots.speed_plot)[1] >= 80.0
