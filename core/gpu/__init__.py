"""GPU telemetry: NVML readings, the no-GPU states, replayed traces, a background sampler.

Importing this package touches no GPU and imports neither pynvml nor numpy-heavy parts; the
NVML library is loaded when a source is opened. Typical use::

    from specdeck.core.gpu import Sampler
    sampler = Sampler()            # NVML by default, or a ReplaySource
    sampler.start()
    frame = sampler.latest         # TelemetryFrame: .state, .headline, .gpus
    sampler.stop()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specdeck.core.gpu.telemetry import (
    NO_GPU_HEADLINE,
    GpuReading,
    GpuStatus,
    ProcessUsage,
    TelemetryFrame,
    TelemetryState,
)

if TYPE_CHECKING:
    from specdeck.core.gpu.nvml import NvmlSource
    from specdeck.core.gpu.replay import ReplaySource, Trace
    from specdeck.core.gpu.sampler import Sampler

__all__ = [
    "NO_GPU_HEADLINE",
    "GpuReading",
    "GpuStatus",
    "NvmlSource",
    "ProcessUsage",
    "ReplaySource",
    "Sampler",
    "TelemetryFrame",
    "TelemetryState",
    "Trace",
    "read_once",
]

_LAZY = {
    "NvmlSource": "specdeck.core.gpu.nvml",
    "ReplaySource": "specdeck.core.gpu.replay",
    "Trace": "specdeck.core.gpu.replay",
    "Sampler": "specdeck.core.gpu.sampler",
}


def __getattr__(name: str):
    # The sampler needs numpy and the sources their own imports: load them on first use so
    # that `import specdeck.core.gpu` stays free.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)


def read_once(source=None) -> TelemetryFrame:
    """One frame from ``source`` (default: NVML, or the replay named by SPECDECK_GPU_REPLAY)."""
    import time

    from specdeck.core.gpu.sampler import default_source
    from specdeck.core.gpu.telemetry import state_frame

    src = source if source is not None else default_source()
    try:
        failure = src.open()
        return failure if failure is not None else src.read()
    except Exception as exc:  # noqa: BLE001 - a driver surprise is a state, never a traceback
        return state_frame(TelemetryState.ERROR, time.time(), f"{type(exc).__name__}: {exc}",
                           source=getattr(src, "name", ""))
    finally:
        src.close()
