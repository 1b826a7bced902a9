"""Live telemetry from NVML (nvidia-ml-py, imported as ``pynvml``): the default source.

Nothing happens at import. :meth:`NvmlSource.open` initialises NVML (in the sampler's thread,
never the GUI's); every NVML error becomes a :class:`TelemetryState` or a ``None`` field:

- ``NVMLError_LibraryNotFound`` -> NO_LIBRARY ("No NVIDIA GPU detected"); permanent, not retried;
- ``NVMLError_DriverNotLoaded`` -> DRIVER_NOT_LOADED, ``NVMLError_LibRmVersionMismatch`` ->
  DRIVER_MISMATCH, ``NVMLError_NoPermission`` -> NO_PERMISSION; retried every
  ``retry_interval_s`` (a reboot or modprobe fixes them while SpecDeck runs);
- ``NVMLError_NotSupported`` / ``FunctionNotFound`` / ``NoPermission`` on one query -> that
  field is N/A;
- ``NVMLError_GpuIsLost`` on one GPU -> that GPU's row says LOST, the others go on;
- any other error opening one GPU (``NoPermission`` under a per-GPU cgroup, say) -> that GPU's
  row says NO_ACCESS, the others go on;
- nvidia-ml-py 12.550+ raises ``NVMLLibraryMismatchError`` (not an ``NVMLError``) when an
  unversioned query is missing from an older driver: that query is N/A too, and the versioned
  queries (``_v3``, then ``_v2``) are always asked first.

SpecDeck's engine may run in a child process (the A/B bench does): :meth:`NvmlSource.set_own_pids`
adds its pid, so its memory counts as SpecDeck's own and not as another program's.

The device order, names, UUIDs, power limits and CUDA indices are read once at open; memory,
utilisation, power, temperature, fan and processes on every :meth:`read`.

This path cannot run for real on a machine without an NVIDIA GPU. tests/core/test_nvml_source.py
drives it through the real nvidia-ml-py wrappers with the driver's C entry points replaced (a
5090 + 4090 workstation, an old driver, lost and locked GPUs); the no-library state is tested
for real. docs/vram.md says how it is checked on a GPU.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from specdeck.core.gpu.cuda_order import DeviceIdentity, cuda_index_map
from specdeck.core.gpu.telemetry import (
    GpuReading,
    GpuStatus,
    ProcessUsage,
    TelemetryFrame,
    TelemetryState,
    peak_bandwidth,
    state_frame,
)

log = logging.getLogger(__name__)

RETRY_INTERVAL_S = 10.0

# NVML error class name -> state, for errors that mean "no telemetry at all".
_INIT_ERRORS: dict[str, TelemetryState] = {
    "NVMLError_LibraryNotFound": TelemetryState.NO_LIBRARY,
    "NVMLError_DriverNotLoaded": TelemetryState.DRIVER_NOT_LOADED,
    "NVMLError_LibRmVersionMismatch": TelemetryState.DRIVER_MISMATCH,
    "NVMLError_NoPermission": TelemetryState.NO_PERMISSION,
}
# Errors on one query that mean "this GPU or driver cannot tell": the field is N/A.
_NOT_AVAILABLE = {
    "NVMLError_NotSupported",
    "NVMLError_FunctionNotFound",
    "NVMLError_NoPermission",
    "NVMLError_NoData",
    "NVMLError_NotFound",
    "NVMLError_ArgumentVersionMismatch",
    "NVMLError_InvalidArgument",
    "NVMLLibraryMismatchError",
}
_LOST = {"NVMLError_GpuIsLost", "NVMLError_ResetRequired"}


class _GpuLost(Exception):
    """Raised inside one GPU's read when NVML says the GPU is gone."""


@dataclass
class _Device:
    """What does not change while NVML stays initialised."""

    index: int
    handle: Any
    name: str
    uuid: str | None
    pci_bus_id: str | None
    power_limit_w: float | None
    memory_bandwidth_peak: float | None = None
    cuda_index: int | None = None
    cuda_index_exact: bool = True
    memory_v2: bool = True
    status: GpuStatus = GpuStatus.OK


def _state_for(exc: BaseException) -> TelemetryState:
    return _INIT_ERRORS.get(type(exc).__name__, TelemetryState.ERROR)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class NvmlSource:
    """Reads the GPUs through NVML. Open once, read many times, close."""

    name = "nvml"
    synthetic = False

    def __init__(
        self,
        retry_interval_s: float = RETRY_INTERVAL_S,
        own_pid: int | None = None,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.retry_interval_s = retry_interval_s
        self.own_pid = os.getpid() if own_pid is None else own_pid
        self._own_pids: frozenset[int] = frozenset({self.own_pid})
        self._environ = environ
        self._clock = clock
        self._nvml: Any = None
        self._initialised = False
        self._devices: list[_Device] = []
        self._driver_version: str | None = None
        self._failure: TelemetryFrame | None = None
        self._retry_at = 0.0
        self._process_names: dict[int, str] = {}
        self._errors: tuple[type[BaseException], ...] = ()

    def set_own_pids(self, extra: set[int] | frozenset[int] | tuple[int, ...] = ()) -> None:
        """SpecDeck's processes besides this one (an engine child process); any thread."""
        self._own_pids = frozenset({self.own_pid, *extra})  # one assignment: atomic

    # lifecycle ----------------------------------------------------------------------
    def open(self) -> TelemetryFrame | None:
        """Initialise NVML; returns the failure frame if it could not, else None."""
        if self._initialised:
            return None
        now = self._clock()
        try:
            import pynvml
        except ImportError as exc:  # nvidia-ml-py missing: same meaning as no NVML
            return self._fail(TelemetryState.NO_LIBRARY, f"nvidia-ml-py is not installed: {exc}")
        self._nvml = pynvml
        # Errors a query may raise: NVMLError, and the wrapper's own "library mismatch".
        self._errors = (pynvml.NVMLError, getattr(pynvml, "NVMLLibraryMismatchError", pynvml.NVMLError))
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            return self._fail(_state_for(exc), f"nvmlInit: {exc}")
        self._initialised = True
        try:
            self._driver_version = _text(pynvml.nvmlSystemGetDriverVersion())
        except pynvml.NVMLError:
            self._driver_version = None
        try:
            self._devices = self._enumerate()
        except pynvml.NVMLError as exc:
            self.close()
            return self._fail(_state_for(exc), f"listing GPUs: {exc}")
        self._failure = None
        log.info("NVML open: %d GPU(s), driver %s (at %.0f)", len(self._devices),
                 self._driver_version, now)
        return None

    def close(self) -> None:
        if self._initialised and self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError as exc:
                log.debug("nvmlShutdown: %s", exc)
        self._initialised = False
        self._devices = []

    def _fail(self, state: TelemetryState, detail: str) -> TelemetryFrame:
        log.info("GPU telemetry unavailable (%s): %s", state.value, detail)
        self._failure = state_frame(state, self._clock(), detail, source=self.name)
        # A missing library will not appear while we run; the other states can clear.
        self._retry_at = float("inf") if state is TelemetryState.NO_LIBRARY else (
            self._clock() + self.retry_interval_s
        )
        return self._failure

    # reading --------------------------------------------------------------------------
    def read(self) -> TelemetryFrame:
        """One frame: every GPU's current readings, or the state that prevents them."""
        if not self._initialised:
            if self._failure is not None and self._clock() < self._retry_at:
                return self._failure
            failure = self.open()
            if failure is not None:
                return failure
        if not self._devices:
            return state_frame(TelemetryState.NO_DEVICES, self._clock(), source=self.name)
        pynvml = self._nvml
        readings = []
        for device in self._devices:
            try:
                readings.append(self._read_device(device))
            except pynvml.NVMLError_Uninitialized:
                # Something shut NVML down under us: start again on the next read.
                self._initialised = False
                self._failure = None
                return state_frame(TelemetryState.ERROR, self._clock(), "NVML was shut down",
                                   source=self.name)
        return TelemetryFrame(
            timestamp=self._clock(),
            state=TelemetryState.OK,
            gpus=tuple(readings),
            driver_version=self._driver_version,
            source=self.name,
        )

    def _query(self, device: _Device, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(handle, *args)``, or None when this GPU cannot answer. Raises _GpuLost."""
        try:
            return fn(device.handle, *args)
        except self._errors as exc:
            kind = type(exc).__name__
            if kind in _LOST:
                raise _GpuLost(str(exc)) from exc
            if kind == "NVMLError_Uninitialized":
                raise
            if kind not in _NOT_AVAILABLE:
                log.debug("GPU %d: %s failed: %s", device.index, getattr(fn, "__name__", fn), exc)
            return None

    def _read_device(self, device: _Device) -> GpuReading:
        base = dict(
            index=device.index,
            name=device.name,
            cuda_index=device.cuda_index,
            cuda_index_exact=device.cuda_index_exact,
            uuid=device.uuid,
            pci_bus_id=device.pci_bus_id,
            power_limit_w=device.power_limit_w,
            memory_bandwidth_peak=device.memory_bandwidth_peak,
        )
        if device.status is not GpuStatus.OK:
            return GpuReading(status=device.status, **base)
        try:
            return GpuReading(**base, **self._live_fields(device))
        except _GpuLost as exc:
            log.warning("GPU %d (%s) was lost: %s", device.index, device.name, exc)
            device.status = GpuStatus.LOST
            return GpuReading(status=GpuStatus.LOST, **base)

    def _live_fields(self, device: _Device) -> dict[str, Any]:
        pynvml = self._nvml
        fields: dict[str, Any] = {}
        fields.update(self._memory(device))
        util = self._query(device, pynvml.nvmlDeviceGetUtilizationRates)
        fields["utilization_gpu"] = float(util.gpu) if util is not None else None
        fields["utilization_memory"] = float(util.memory) if util is not None else None
        milliwatts = self._query(device, pynvml.nvmlDeviceGetPowerUsage)
        fields["power_w"] = milliwatts / 1000.0 if milliwatts is not None else None
        temperature = self._first_answer(device, ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"),
                                         pynvml.NVML_TEMPERATURE_GPU)
        fields["temperature_c"] = float(temperature) if temperature is not None else None
        fan = self._query(device, pynvml.nvmlDeviceGetFanSpeed)
        fields["fan_percent"] = float(fan) if fan is not None else None
        processes = self._processes(device)
        fields["processes"] = processes or ()
        fields["own_bytes"] = _own_bytes(processes) if processes is not None else None
        return fields

    def _memory(self, device: _Device) -> dict[str, int | None]:
        pynvml = self._nvml
        memory = None
        if device.memory_v2:
            memory = self._query(device, pynvml.nvmlDeviceGetMemoryInfo, pynvml.nvmlMemory_v2)
            if memory is None:  # older driver: remember and use v1 from now on
                device.memory_v2 = False
        if memory is None:
            memory = self._query(device, pynvml.nvmlDeviceGetMemoryInfo)
        if memory is None:
            return dict(memory_total=None, memory_reserved=None, memory_used=None, memory_free=None)
        return dict(
            memory_total=int(memory.total),
            memory_reserved=int(memory.reserved) if device.memory_v2 else None,
            memory_used=int(memory.used),
            memory_free=int(memory.free),
        )

    def _processes(self, device: _Device) -> tuple[ProcessUsage, ...] | None:
        """Processes with memory on this GPU (compute and graphics merged), or None if unknown."""
        merged: dict[int, int | None] = {}
        answered = False
        own = self._own_pids
        for kind in ("Compute", "Graphics"):
            # The newest query first; drivers older than 510 only have _v2, and nvidia-ml-py
            # before 11.510 only the unversioned one.
            entries = self._first_answer(device, tuple(
                f"nvmlDeviceGet{kind}RunningProcesses{suffix}" for suffix in ("_v3", "_v2", "")))
            if entries is None:
                continue
            answered = True
            for entry in entries:
                # A process with both a compute and a graphics context is listed twice.
                known = [v for v in (merged.get(entry.pid), entry.usedGpuMemory) if v is not None]
                merged[entry.pid] = int(max(known)) if known else None
        if not answered:
            return None
        return tuple(
            ProcessUsage(pid, self._process_name(pid), used, is_self=pid in own)
            for pid, used in sorted(merged.items(), key=lambda kv: -(kv[1] or 0))
        )

    def _first_answer(self, device: _Device, names: tuple[str, ...], *args: Any) -> Any:
        """The first of these queries (by nvidia-ml-py name) that this driver answers."""
        for name in names:
            fn = getattr(self._nvml, name, None)
            answer = self._query(device, fn, *args) if fn is not None else None
            if answer is not None:
                return answer
        return None

    def _process_name(self, pid: int) -> str:
        if pid not in self._process_names:
            self._process_names[pid] = process_name(pid)
        return self._process_names[pid]

    # static information ---------------------------------------------------------------
    def _enumerate(self) -> list[_Device]:
        pynvml = self._nvml
        devices = []
        identities = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            except pynvml.NVMLError as exc:
                # One GPU we may not open (a per-GPU cgroup, a GPU being reset) must not hide
                # the others, which nvidia-smi would still show.
                status = GpuStatus.LOST if type(exc).__name__ in _LOST else GpuStatus.NO_ACCESS
                log.warning("GPU %d cannot be opened: %s", index, exc)
                devices.append(_Device(index, None, "unknown GPU", None, None, None, status=status))
                continue
            device = _Device(
                index=index,
                handle=handle,
                name=_text(self._static(pynvml.nvmlDeviceGetName, handle) or "NVIDIA GPU"),
                uuid=_optional_text(self._static(pynvml.nvmlDeviceGetUUID, handle)),
                pci_bus_id=_bus_id(self._static(pynvml.nvmlDeviceGetPciInfo, handle)),
                power_limit_w=_watts(self._static(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)),
                memory_bandwidth_peak=peak_bandwidth(
                    self._static(lambda h: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM), handle),
                    self._static(getattr(pynvml, "nvmlDeviceGetMemoryBusWidth", None), handle)),
            )
            devices.append(device)
            if device.pci_bus_id:
                cc = self._static(pynvml.nvmlDeviceGetCudaComputeCapability, handle)
                sms = self._static(pynvml.nvmlDeviceGetNumGpuCores, handle)
                identities.append(DeviceIdentity(index, device.pci_bus_id, device.uuid or "",
                                                 tuple(cc) if cc else None, sms))
        mapping = cuda_index_map(identities, self._environ)
        for device in devices:
            device.cuda_index = mapping.indices.get(device.index)
            device.cuda_index_exact = mapping.exact
        return devices

    def _static(self, fn: Callable[..., Any] | None, handle: Any) -> Any:
        if fn is None:  # an nvidia-ml-py too old to have this query
            return None
        try:
            return fn(handle)
        except self._errors:
            return None


def _own_bytes(processes: tuple[ProcessUsage, ...]) -> int | None:
    mine = [p for p in processes if p.is_self]
    if not mine:
        return 0
    if any(p.used_bytes is None for p in mine):
        return None
    return sum(p.used_bytes or 0 for p in mine)


def _optional_text(value: Any) -> str | None:
    return _text(value) if value is not None else None


def _bus_id(pci: Any) -> str | None:
    if pci is None:
        return None
    return _text(getattr(pci, "busId", None) or getattr(pci, "busIdLegacy", "")) or None


def _watts(milliwatts: Any) -> float | None:
    return float(milliwatts) / 1000.0 if milliwatts is not None else None


def process_name(pid: int) -> str:
    """A process's short name, or "pid N" when it is not visible (another container)."""
    try:
        import psutil

        return psutil.Process(pid).name() or f"pid {pid}"
    except Exception:  # noqa: BLE001 - psutil raises several kinds; the pid is enough
        return f"pid {pid}"
