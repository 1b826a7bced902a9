"""What one look at the GPUs returns: a frame of per-GPU readings, or a state saying why not.

Every way NVML can fail is a :class:`TelemetryState` with words a user can act on, never an
exception: a machine without an NVIDIA driver is a normal machine for SpecDeck. A field the
GPU cannot report (fan speed on a passively cooled card, power on some laptops) is ``None``
and shows as "N/A"; a GPU that falls off the bus keeps its row with ``status = LOST``.

Memory follows NVML's v2 accounting where the driver has it: ``total = reserved + used +
free``, where ``reserved`` is what the driver and firmware keep for themselves. With the v1
query ``reserved`` is ``None`` and ``used`` includes it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

NO_GPU_HEADLINE = "No NVIDIA GPU detected"


class TelemetryState(str, enum.Enum):
    """Why a frame has (or lacks) readings. The value is stable: it appears in JSON."""

    OK = "ok"
    NO_LIBRARY = "no-library"
    """NVML (libnvidia-ml) is not on this machine: no NVIDIA driver is installed."""
    NO_DEVICES = "no-devices"
    """NVML works but lists no GPU (a driver without a card, or a container without one)."""
    DRIVER_NOT_LOADED = "driver-not-loaded"
    DRIVER_MISMATCH = "driver-mismatch"
    NO_PERMISSION = "no-permission"
    ERROR = "error"


# Headline and what to do, per state; the GUI and the CLI show exactly these words.
STATE_TEXT: dict[TelemetryState, tuple[str, str | None]] = {
    TelemetryState.OK: ("GPU telemetry is live", None),
    TelemetryState.NO_LIBRARY: (
        NO_GPU_HEADLINE,
        "The NVIDIA management library (NVML) is not installed, so there is no NVIDIA driver "
        "here. Everything else in SpecDeck works; to plan VRAM for another machine, give its "
        "GPU sizes (e.g. 32,24: typed GPUs on the GPUs page, `specdeck vram --gpus 32,24`).",
    ),
    TelemetryState.NO_DEVICES: (
        NO_GPU_HEADLINE,
        "The NVIDIA driver is installed but reports no GPU. In a container, pass the GPUs in "
        "(docker run --gpus all); otherwise check that the card is seated and powered.",
    ),
    TelemetryState.DRIVER_NOT_LOADED: (
        "The NVIDIA driver is not loaded",
        "The driver is installed but its kernel module is not running. Reboot, or load it "
        "with 'sudo modprobe nvidia'; check 'nvidia-smi' afterwards.",
    ),
    TelemetryState.DRIVER_MISMATCH: (
        "NVIDIA driver/library version mismatch",
        "The driver was updated but the old kernel module is still loaded. Reboot to finish "
        "the driver update.",
    ),
    TelemetryState.NO_PERMISSION: (
        "Not allowed to read the GPUs",
        "This user may not open the NVIDIA device files; ask the administrator to add you to "
        "the 'video' group or run 'nvidia-smi' to see the error.",
    ),
    TelemetryState.ERROR: (
        "GPU telemetry failed",
        "Run 'nvidia-smi' to see whether the driver works; SpecDeck keeps running without "
        "telemetry.",
    ),
}


class GpuStatus(str, enum.Enum):
    OK = "ok"
    LOST = "lost"
    """The GPU stopped answering (fell off the bus, Xid 79); it needs a reset or a reboot."""
    NO_ACCESS = "no_access"
    """NVML lists the GPU but will not open it for this user (a per-GPU cgroup or permission)."""

    @property
    def problem(self) -> str:
        """What to tell the user about a GPU in this state ("" when it is fine)."""
        return _GPU_PROBLEMS.get(self, "")


_GPU_PROBLEMS = {
    GpuStatus.LOST: "Lost: the GPU stopped answering. Reset it or reboot.",
    GpuStatus.NO_ACCESS: "No access: this user may not open this GPU (run nvidia-smi to see why).",
}


@dataclass(frozen=True)
class ProcessUsage:
    """One process holding memory on a GPU."""

    pid: int
    name: str
    used_bytes: int | None
    """None where the driver does not say (Windows WDDM, some containers)."""
    is_self: bool = False
    """This process: SpecDeck itself (its in-process engine)."""


def cuda_text(cuda_index: int | None, exact: bool = True) -> str:
    """How SpecDeck names a GPU by its CUDA index, wherever it shows one (the GPUs page's
    cards, the VRAM plan, its advice): "CUDA 1", "CUDA 1 (estimated)", "hidden from CUDA"."""
    if cuda_index is None:
        return "hidden from CUDA"
    return f"CUDA {cuda_index}" + ("" if exact else " (estimated)")


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one instant. ``None`` = not supported by this GPU or driver (N/A)."""

    index: int
    """NVML's index (PCI bus order, as nvidia-smi shows)."""
    name: str
    cuda_index: int | None = None
    """The index CUDA programs started like this one use; None if CUDA cannot see it."""
    cuda_index_exact: bool = True
    """False when the CUDA order had to be estimated (CUDA_DEVICE_ORDER=FASTEST_FIRST)."""
    uuid: str | None = None
    pci_bus_id: str | None = None
    status: GpuStatus = GpuStatus.OK
    memory_total: int | None = None
    memory_reserved: int | None = None
    memory_used: int | None = None
    memory_free: int | None = None
    utilization_gpu: float | None = None
    """Percent of the sample period a kernel was running."""
    utilization_memory: float | None = None
    """Percent of the sample period device memory was being read or written."""
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: float | None = None
    fan_percent: float | None = None
    processes: tuple[ProcessUsage, ...] = ()
    own_bytes: int | None = None
    """Memory this process holds here (0 when it holds none, None when unknown)."""
    memory_bandwidth_peak: float | None = None
    """Bytes/s the memory can deliver at most (see :func:`peak_bandwidth`)."""

    @property
    def label(self) -> str:
        return f"GPU {self.index}: {self.name}"

    @property
    def cuda_text(self) -> str:
        return cuda_text(self.cuda_index, self.cuda_index_exact)

    @property
    def usable_total(self) -> int | None:
        """What CUDA programs can share: the total less the driver's own reservation."""
        if self.memory_total is None:
            return None
        return self.memory_total - (self.memory_reserved or 0)


def peak_bandwidth(max_memory_clock_mhz: float | None, bus_width_bits: float | None) -> float | None:
    """Peak memory bandwidth in bytes/s from NVML's max memory clock and bus width: two
    transfers per reported clock (what NVML reports for GDDR6/6X/7 and HBM2e/3 alike).

    Against published figures: H100 SXM 2619 MHz x 5120 bits = 3.35 TB/s; A100 40 GB
    1215 MHz x 5120 bits = 1.555 TB/s; RTX 4090 10501 MHz x 384 bits = 1.008 TB/s;
    RTX 3090 9751 MHz x 384 bits = 936 GB/s.
    """
    if not max_memory_clock_mhz or not bus_width_bits:
        return None
    return max_memory_clock_mhz * 1e6 * 2 * bus_width_bits / 8


@dataclass(frozen=True)
class TelemetryFrame:
    """Everything one poll returned."""

    timestamp: float
    """Seconds (time.time() for live frames, trace time for replays)."""
    state: TelemetryState
    gpus: tuple[GpuReading, ...] = ()
    detail: str | None = None
    """The underlying error text, for the log and the 'details' line."""
    driver_version: str | None = None
    source: str = "nvml"
    """"nvml", or "replay:<file name>"."""
    synthetic: bool = False
    """True for replayed traces that were not recorded on real hardware."""

    @property
    def headline(self) -> str:
        return STATE_TEXT[self.state][0]

    @property
    def fix(self) -> str | None:
        return STATE_TEXT[self.state][1]

    @property
    def has_gpus(self) -> bool:
        return self.state is TelemetryState.OK and bool(self.gpus)

    def gpu(self, index: int) -> GpuReading | None:
        return next((g for g in self.gpus if g.index == index), None)

    @property
    def own_bytes(self) -> int | None:
        """VRAM held by SpecDeck's own processes over every readable GPU; None when a
        driver does not list processes."""
        values = [g.own_bytes for g in self.gpus if g.status is GpuStatus.OK]
        if any(v is None for v in values):
            return None
        return sum(values)

    def to_json(self) -> dict:
        from dataclasses import fields

        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["headline"] = self.headline
        data["fix"] = self.fix
        return data


def state_frame(state: TelemetryState, timestamp: float, detail: str | None = None,
                source: str = "nvml") -> TelemetryFrame:
    """A frame with no readings that explains why."""
    return TelemetryFrame(timestamp=timestamp, state=state, detail=detail, source=source)
