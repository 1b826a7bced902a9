"""GPU telemetry traces: a JSON Lines file that records frames, and a source that replays it.

A trace is what lets SpecDeck show, test and demonstrate its GPU views without a GPU, and
what the GPU-proof kit records on a real machine (``specdeck gpus --record FILE``).

Format (version 1), one JSON object per line:

- line 1, the header::

    {"format": "specdeck-gpu-trace", "version": 1, "synthetic": false,
     "description": "...", "interval_s": 0.25, "driver_version": "570.133.07",
     "own_pid": 4242,
     "gpus": [{"index": 0, "name": "NVIDIA GeForce RTX 5090", "cuda_index": 0,
               "uuid": "GPU-...", "pci_bus_id": "00000000:01:00.0",
               "memory_total": 34190917632, "memory_reserved": 524288000,
               "power_limit_w": 575.0}, ...]}

- every other line, one sample::

    {"t": 0.25, "gpus": [{"index": 0, "used": 1234567890, "util": 97, "mem_util": 61,
                          "power_w": 402.5, "temp_c": 64, "fan": 48,
                          "procs": [[4242, "python3", 1200000000], ...]}, ...]}

``t`` is seconds from the start of the trace. Per-GPU keys: ``used`` bytes (v2 "used", which
excludes ``memory_reserved``), ``util`` and ``mem_util`` percent, ``power_w``, ``temp_c``,
``fan`` percent, ``procs`` as [pid, name, bytes]; a missing key or null is "not supported"
(N/A); ``"status": "lost"`` marks a GPU that stopped answering and ``"no_access"`` one NVML
would not open. ``own_pid`` (optional) is the process that plays "this app". Free memory is
derived: total - reserved - used.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdeck.core.atomic import atomic_write_text
from specdeck.core.errors import CancelledError, InvalidInputError
from specdeck.core.gpu.telemetry import (
    GpuReading,
    GpuStatus,
    ProcessUsage,
    TelemetryFrame,
    TelemetryState,
)
from specdeck.core.units import MiB

TRACE_FORMAT = "specdeck-gpu-trace"
TRACE_VERSION = 1
MAX_TRACE_BYTES = 256 * MiB
"""The most SpecDeck reads of a trace: a sample of two GPUs is ~330 bytes (the demo trace), so
a day of a 4 Hz recording of four GPUs is ~225 MB; a larger file is not a recording."""
# Static fields kept in the header rather than repeated on every line.
_STATIC_KEYS = ("name", "cuda_index", "uuid", "pci_bus_id", "memory_total", "memory_reserved",
                "power_limit_w", "memory_bandwidth_peak")


@dataclass(frozen=True)
class Trace:
    """A trace file, parsed: its header and its samples as telemetry frames."""

    path: Path
    header: dict[str, Any]
    frames: tuple[TelemetryFrame, ...]

    @property
    def synthetic(self) -> bool:
        return bool(self.header.get("synthetic", False))

    @property
    def description(self) -> str:
        return str(self.header.get("description", ""))

    @property
    def interval_s(self) -> float:
        return float(self.header.get("interval_s") or 0.25)

    @property
    def duration_s(self) -> float:
        if not self.frames:
            return 0.0
        return self.frames[-1].timestamp - self.frames[0].timestamp + self.interval_s


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _integer(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None else None


def _reading(static: dict[str, Any], sample: dict[str, Any], own_pid: int | None) -> GpuReading:
    index = int(static["index"])
    base = dict(
        index=index,
        name=str(static.get("name") or f"GPU {index}"),
        cuda_index=_integer(static.get("cuda_index")),
        uuid=static.get("uuid"),
        pci_bus_id=static.get("pci_bus_id"),
        power_limit_w=_number(static.get("power_limit_w")),
        memory_bandwidth_peak=_number(static.get("memory_bandwidth_peak")),
    )
    if sample.get("status", GpuStatus.OK.value) != GpuStatus.OK.value:
        return GpuReading(status=GpuStatus(sample["status"]), **base)
    total = _integer(static.get("memory_total"))
    reserved = _integer(static.get("memory_reserved"))
    used = _integer(sample.get("used"))
    free = total - (reserved or 0) - used if total is not None and used is not None else None
    processes = tuple(
        ProcessUsage(int(p[0]), str(p[1]), _integer(p[2]), is_self=int(p[0]) == own_pid)
        for p in sample.get("procs") or ()
    )
    own = [p for p in processes if p.is_self]
    return GpuReading(
        **base,
        memory_total=total,
        memory_reserved=reserved,
        memory_used=used,
        memory_free=free,
        utilization_gpu=_number(sample.get("util")),
        utilization_memory=_number(sample.get("mem_util")),
        power_w=_number(sample.get("power_w")),
        temperature_c=_number(sample.get("temp_c")),
        fan_percent=_number(sample.get("fan")),
        processes=processes,
        own_bytes=sum(p.used_bytes or 0 for p in own),
    )


def _parse_line(path: Path, number: int, line: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(
            f"{path} line {number} is not valid JSON ({exc.msg}).",
            "A trace has one JSON object per line; re-record it with 'specdeck gpus --record'.",
        ) from exc
    if not isinstance(value, dict):
        raise InvalidInputError(f"{path} line {number} should be a JSON object.")
    return value


def load_trace(path: str | Path) -> Trace:
    """Read and check a trace file (see the module docstring for the format)."""
    from specdeck.core.files import read_text_bounded

    path = Path(path)
    text = read_text_bounded(path, "trace", MAX_TRACE_BYTES,
                             hint="Give a trace recorded with 'specdeck gpus --record'.")
    lines = text.splitlines()
    numbered = [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]
    if not numbered:
        raise InvalidInputError(f"Trace {path} is empty.")
    header = _parse_line(path, *numbered[0])
    if header.get("format") != TRACE_FORMAT:
        raise InvalidInputError(
            f"{path} is not a SpecDeck GPU trace (its first line lacks "
            f'"format": "{TRACE_FORMAT}").'
        )
    if header.get("version") != TRACE_VERSION:
        raise InvalidInputError(
            f"{path} is a version {header.get('version')} trace; this SpecDeck reads version "
            f"{TRACE_VERSION}.", "Update SpecDeck or re-record the trace."
        )
    statics = {int(g["index"]): g for g in header.get("gpus") or () if isinstance(g, dict)}
    own_pid = _integer(header.get("own_pid"))
    source = f"replay:{path.name}"
    synthetic = bool(header.get("synthetic", False))
    frames = []
    for number, line in numbered[1:]:
        sample = _parse_line(path, number, line)
        t = _number(sample.get("t"))
        if t is None:
            raise InvalidInputError(f"{path} line {number} has no time 't'.")
        try:
            readings = tuple(
                _reading(statics[int(g["index"])], g, own_pid) for g in sample.get("gpus") or ()
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise InvalidInputError(
                f"{path} line {number} describes a GPU the header does not list or is "
                f"malformed ({exc!r})."
            ) from exc
        state = TelemetryState.OK if readings else TelemetryState.NO_DEVICES
        frames.append(TelemetryFrame(t, state, readings, driver_version=header.get("driver_version"),
                                     source=source, synthetic=synthetic))
    if not frames:
        raise InvalidInputError(f"Trace {path} has a header but no samples.")
    return Trace(path, header, tuple(frames))


class ReplaySource:
    """Plays a trace back, one sample per :meth:`read`, looping by default.

    The pace is the caller's: a Sampler polling every 0.25 s plays a 4 Hz trace in real
    time. Timestamps keep growing across loops so plots never jump backwards.
    """

    def __init__(self, trace: Trace | str | Path, loop: bool = True):
        self.trace = trace if isinstance(trace, Trace) else load_trace(trace)
        self.loop = loop
        self.name = f"replay:{self.trace.path.name}"
        self.synthetic = self.trace.synthetic
        self._position = 0
        self._lap = 0

    def open(self) -> None:
        return None

    def close(self) -> None:
        return None

    @property
    def finished(self) -> bool:
        return not self.loop and self._position >= len(self.trace.frames)

    def read(self) -> TelemetryFrame:
        frames = self.trace.frames
        if self._position >= len(frames):
            if not self.loop:
                return frames[-1]
            self._position = 0
            self._lap += 1
        frame = frames[self._position]
        self._position += 1
        if self._lap == 0:
            return frame
        shift = self._lap * self.trace.duration_s
        return TelemetryFrame(frame.timestamp + shift, frame.state, frame.gpus, frame.detail,
                              frame.driver_version, frame.source, frame.synthetic)


# recording ---------------------------------------------------------------------------
def trace_header(first: TelemetryFrame, interval_s: float, description: str,
                 own_pid: int | None, synthetic: bool = False) -> dict[str, Any]:
    gpus = []
    for g in first.gpus:
        static = {"index": g.index}
        static.update({key: getattr(g, key) for key in _STATIC_KEYS})
        gpus.append(static)
    return {"format": TRACE_FORMAT, "version": TRACE_VERSION, "synthetic": synthetic,
            "description": description, "interval_s": interval_s,
            "driver_version": first.driver_version, "own_pid": own_pid, "gpus": gpus}


def trace_sample(frame: TelemetryFrame, t: float) -> dict[str, Any]:
    gpus = []
    for g in frame.gpus:
        if g.status is not GpuStatus.OK:
            gpus.append({"index": g.index, "status": g.status.value})
            continue
        gpus.append({
            "index": g.index, "used": g.memory_used, "util": g.utilization_gpu,
            "mem_util": g.utilization_memory, "power_w": g.power_w, "temp_c": g.temperature_c,
            "fan": g.fan_percent,
            "procs": [[p.pid, p.name, p.used_bytes] for p in g.processes],
        })
    return {"t": round(t, 3), "gpus": gpus}


def write_trace(path: str | Path, header: dict[str, Any], samples: list[dict[str, Any]]) -> None:
    """Write a whole trace atomically (a crash never leaves half a trace)."""
    lines = [json.dumps(header, separators=(",", ":"))]
    lines += [json.dumps(s, separators=(",", ":")) for s in samples]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(path), "\n".join(lines) + "\n")


def record_trace(
    source: Any,
    path: str | Path,
    duration_s: float,
    interval_s: float = 0.25,
    description: str = "",
    *,
    progress: Callable[[float], None] | None = None,
    cancel: threading.Event | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Path:
    """Poll ``source`` for ``duration_s`` and save what it saw as a trace at ``path``.

    Raises SpecDeckError when the source has no GPUs to record (the state says why).
    """
    failure = source.open()
    try:
        first = source.read() if failure is None else failure
        if not first.has_gpus:
            raise InvalidInputError(f"Nothing to record: {first.headline}.", first.fix)
        own_pid = getattr(source, "own_pid", None)
        header = trace_header(first, interval_s, description, own_pid, source.synthetic)
        samples = []
        for frame in _polls(source, first, duration_s, interval_s, sleep, clock):
            if cancel is not None and cancel.is_set():
                raise CancelledError("Recording cancelled; no trace was written.")
            elapsed = frame.timestamp - first.timestamp
            samples.append(trace_sample(frame, elapsed))
            if progress is not None:
                progress(min(1.0, elapsed / duration_s) if duration_s else 1.0)
    finally:
        source.close()
    write_trace(path, header, samples)
    return Path(path)


def _polls(source: Any, first: TelemetryFrame, duration_s: float, interval_s: float,
           sleep: Callable[[float], None], clock: Callable[[], float]) -> Iterator[TelemetryFrame]:
    started = clock()
    yield first
    count = 1
    while count * interval_s < duration_s:
        sleep(max(0.0, started + count * interval_s - clock()))
        yield source.read()
        count += 1
