"""The GPUs page's live memory plot draws bytes in the unit that fits them, as every byte axis
does (core.units.byte_unit): a card under 1 GiB read "0.29 GiB" on an axis fixed at GiB.
Real pyqtgraph plots in the real TelemetryPlots widget, fed by the real Sampler."""

from __future__ import annotations

import pytest
from specdeck.core.gpu.sampler import Sampler
from specdeck.core.gpu.telemetry import GpuReading, TelemetryFrame, TelemetryState
from specdeck.core.units import GiB, MiB


class _Frames:
    """A telemetry source (core.gpu.sampler.TelemetrySource, SpecDeck's own protocol) that
    reads one GPU holding ``used`` of ``total`` bytes, a second later each time."""

    name = "test"

    def __init__(self, total: int, used: int) -> None:
        self.total, self.used, self.t = total, used, 0.0

    def open(self) -> None:
        return None

    def close(self) -> None:
        return None

    def read(self) -> TelemetryFrame:
        self.t += 1.0
        gpu = GpuReading(0, "Test GPU", memory_total=self.total, memory_used=self.used,
                         memory_free=self.total - self.used, utilization_gpu=10.0)
        return TelemetryFrame(self.t, TelemetryState.OK, (gpu,), source="test")


@pytest.mark.parametrize(("total", "unit", "size"), [(24 * GiB, "GiB", GiB),
                                                     (768 * MiB, "MiB", MiB)])
def test_the_memory_axis_takes_the_unit_that_fits_what_it_draws(qtbot, total, unit, size):
    from specdeck.gui.telemetry_view import TelemetryPlots

    plots = TelemetryPlots()
    qtbot.addWidget(plots)
    sampler = Sampler(_Frames(total, 300 * MiB), interval_s=0)
    for _ in range(3):
        sampler.poll_once()
    assert plots.update_from(sampler) == 3
    assert plots.memory_plot.getAxis("left").labelText == unit
    _, used = plots.memory_curves[0].getData()
    assert list(used) == pytest.approx([300 * MiB / size] * 3)
    _, line = plots.total_lines[0].getData()
    assert list(line) == pytest.approx([total / size] * 2)
