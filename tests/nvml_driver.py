"""A stand-in for the NVIDIA driver's NVML library (libnvidia-ml.so), under the real nvidia-ml-py.

No NVIDIA GPU exists on the machines that run the tests, so ``NvmlSource`` cannot reach a real
driver. Everything above the driver stays real: nvidia-ml-py's own Python wrappers build the
ctypes structures, check return codes, raise its ``NVMLError_*`` classes and its
``NVMLLibraryMismatchError``. Only the C entry points are replaced, by :class:`NvmlLibrary`,
which answers like a driver does for the demo workstation (an RTX 4090 in the first slot and an
RTX 5090 in the second, the same cards and readings as the replayed demo trace).

A GPU's handle is its index + 1 stored in the ``nvmlDevice_t`` pointer. Entry points can be
removed (an older driver) and any call can be made to fail with an NVML return code.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field

GiB = 1024**3
MiB = 1024**2

# NVML return codes (nvml.h).
SUCCESS = 0
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_INSUFFICIENT_SIZE = 7
ERROR_DRIVER_NOT_LOADED = 9
ERROR_GPU_IS_LOST = 15
ERROR_LIB_RM_VERSION_MISMATCH = 18

# What a driver older than 510 lacks: the _v3 process lists and the v2 memory query.
PRE_510_MISSING = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetTemperatureV",
)


@dataclass
class Gpu:
    name: str
    bus_id: str
    uuid: str
    total: int
    reserved: int
    used: int
    """v2 "used": excludes the driver's reservation."""
    cc: tuple[int, int]
    cores: int
    power_mw: int
    power_limit_mw: int
    max_memory_clock_mhz: int
    bus_width_bits: int
    utilization: tuple[int, int] = (97, 61)
    temperature_c: int = 64
    fan_percent: int = 48
    compute: list[tuple[int, int | None]] = field(default_factory=list)
    graphics: list[tuple[int, int | None]] = field(default_factory=list)


def workstation(own_pid: int = 4242, engine_pid: int = 4343) -> list[Gpu]:
    """The demo workstation with SpecDeck (own_pid), its engine process and a desktop."""
    return [
        Gpu("NVIDIA GeForce RTX 4090", "00000000:01:00.0", "GPU-5d1c9a3e-7f42-4b8e-9c1a-2e6f0b7d4a19",
            total=24 * GiB, reserved=451 * MiB, used=21 * GiB, cc=(8, 9), cores=16384,
            power_mw=402_512, power_limit_mw=450_000, max_memory_clock_mhz=10501, bus_width_bits=384,
            compute=[(engine_pid, 20 * GiB), (own_pid, 300 * MiB)],
            graphics=[(1733, 512 * MiB), (engine_pid, 20 * GiB)]),
        Gpu("NVIDIA GeForce RTX 5090", "00000000:02:00.0", "GPU-a4e07c52-19b3-4d6f-8e25-7c90f1b3d6e8",
            total=32 * GiB, reserved=507 * MiB, used=28 * GiB, cc=(12, 0), cores=21760,
            power_mw=511_000, power_limit_mw=575_000, max_memory_clock_mhz=14001, bus_width_bits=512,
            compute=[(engine_pid, 28 * GiB)]),
    ]


class NvmlLibrary:
    """The C functions nvidia-ml-py looks up with getattr on its loaded CDLL."""

    def __init__(self, gpus: list[Gpu], missing: tuple[str, ...] = (),
                 fail: dict[str, Callable[[int], int] | int] | None = None,
                 driver_version: str = "570.133.07"):
        self.gpus = gpus
        self.missing = set(missing)
        self.fail = dict(fail or {})
        self.driver_version = driver_version
        self.calls: list[str] = []

    def __getattribute__(self, name: str):
        if name.startswith("nvml"):
            if name in object.__getattribute__(self, "missing"):
                raise AttributeError(name)  # nvidia-ml-py turns this into FunctionNotFound
            object.__getattribute__(self, "calls").append(name)
        return object.__getattribute__(self, name)

    # helpers ---------------------------------------------------------------------------
    def _failure(self, name: str, index: int | None = None) -> int:
        rule = self.fail.get(name)
        if rule is None:
            return SUCCESS
        return rule(index) if callable(rule) else rule

    @staticmethod
    def _index(handle) -> int:
        return ctypes.cast(handle, ctypes.c_void_p).value - 1

    def _gpu(self, handle) -> tuple[int, Gpu]:
        index = self._index(handle)
        return index, self.gpus[index]

    @staticmethod
    def _set(pointer, value) -> int:
        pointer._obj.value = value
        return SUCCESS

    # library -----------------------------------------------------------------------------
    def nvmlInitWithFlags(self, flags):
        return self._failure("nvmlInitWithFlags")

    def nvmlShutdown(self):
        return SUCCESS

    class _ErrorString:
        restype = None

        def __call__(self, result):
            return f"NVML error {result}".encode()

    nvmlErrorString = _ErrorString()

    def nvmlSystemGetDriverVersion(self, buffer, size):
        buffer.value = self.driver_version.encode()
        return SUCCESS

    def nvmlDeviceGetCount_v2(self, count):
        return self._set(count, len(self.gpus))

    def nvmlDeviceGetHandleByIndex_v2(self, index, handle):
        code = self._failure("nvmlDeviceGetHandleByIndex_v2", index.value)
        if code:
            return code
        ctypes.c_void_p.from_address(ctypes.addressof(handle._obj)).value = index.value + 1
        return SUCCESS

    # static ------------------------------------------------------------------------------
    def nvmlDeviceGetName(self, handle, buffer, size):
        buffer.value = self._gpu(handle)[1].name.encode()
        return SUCCESS

    def nvmlDeviceGetUUID(self, handle, buffer, size):
        buffer.value = self._gpu(handle)[1].uuid.encode()
        return SUCCESS

    def nvmlDeviceGetPciInfo_v3(self, handle, pci):
        pci._obj.busId = self._gpu(handle)[1].bus_id.encode()
        return SUCCESS

    def nvmlDeviceGetEnforcedPowerLimit(self, handle, limit):
        return self._set(limit, self._gpu(handle)[1].power_limit_mw)

    def nvmlDeviceGetMaxClockInfo(self, handle, clock_type, clock):
        return self._set(clock, self._gpu(handle)[1].max_memory_clock_mhz)

    def nvmlDeviceGetMemoryBusWidth(self, handle, width):
        return self._set(width, self._gpu(handle)[1].bus_width_bits)

    def nvmlDeviceGetCudaComputeCapability(self, handle, major, minor):
        gpu = self._gpu(handle)[1]
        major._obj.value, minor._obj.value = gpu.cc
        return SUCCESS

    def nvmlDeviceGetNumGpuCores(self, handle, cores):
        return self._set(cores, self._gpu(handle)[1].cores)

    # live --------------------------------------------------------------------------------
    def nvmlDeviceGetMemoryInfo_v2(self, handle, memory):
        index, gpu = self._gpu(handle)
        code = self._failure("nvmlDeviceGetMemoryInfo_v2", index)
        if code:
            return code
        assert memory._obj.version, "the v2 query needs its version field set"
        memory._obj.total, memory._obj.reserved, memory._obj.used = gpu.total, gpu.reserved, gpu.used
        memory._obj.free = gpu.total - gpu.reserved - gpu.used
        return SUCCESS

    def nvmlDeviceGetMemoryInfo(self, handle, memory):
        index, gpu = self._gpu(handle)
        code = self._failure("nvmlDeviceGetMemoryInfo", index)
        if code:
            return code
        # v1 "used" includes the reservation.
        memory._obj.total, memory._obj.used = gpu.total, gpu.used + gpu.reserved
        memory._obj.free = gpu.total - gpu.reserved - gpu.used
        return SUCCESS

    def nvmlDeviceGetUtilizationRates(self, handle, utilization):
        index, gpu = self._gpu(handle)
        code = self._failure("nvmlDeviceGetUtilizationRates", index)
        if code:
            return code
        utilization._obj.gpu, utilization._obj.memory = gpu.utilization
        return SUCCESS

    def nvmlDeviceGetPowerUsage(self, handle, power):
        index, gpu = self._gpu(handle)
        return self._failure("nvmlDeviceGetPowerUsage", index) or self._set(power, gpu.power_mw)

    def nvmlDeviceGetTemperatureV(self, handle, temperature):
        index, gpu = self._gpu(handle)
        code = self._failure("nvmlDeviceGetTemperatureV", index)
        if code:
            return code
        temperature._obj.temperature = gpu.temperature_c
        return SUCCESS

    def nvmlDeviceGetTemperature(self, handle, sensor, temperature):
        index, gpu = self._gpu(handle)
        return self._failure("nvmlDeviceGetTemperature", index) or self._set(temperature, gpu.temperature_c)

    def nvmlDeviceGetFanSpeed(self, handle, fan):
        index, gpu = self._gpu(handle)
        return self._failure("nvmlDeviceGetFanSpeed", index) or self._set(fan, gpu.fan_percent)

    def _processes(self, kind: str, version: str, handle, count, array) -> int:
        index, gpu = self._gpu(handle)
        code = self._failure(f"nvmlDeviceGet{kind}RunningProcesses{version}", index)
        if code:
            return code
        entries = gpu.compute if kind == "Compute" else gpu.graphics
        if array is None:  # the size query
            count._obj.value = len(entries)
            return ERROR_INSUFFICIENT_SIZE if entries else SUCCESS
        for slot, (pid, used) in zip(array, entries):
            slot.pid = pid
            slot.usedGpuMemory = used if used is not None else 0xFFFFFFFFFFFFFFFF  # N/A (WDDM)
        count._obj.value = len(entries)
        return SUCCESS

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle, count, array):
        return self._processes("Compute", "_v3", handle, count, array)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle, count, array):
        return self._processes("Compute", "_v2", handle, count, array)

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle, count, array):
        return self._processes("Graphics", "_v3", handle, count, array)

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle, count, array):
        return self._processes("Graphics", "_v2", handle, count, array)


def install(monkeypatch, library: NvmlLibrary) -> None:
    """Make the real pynvml use ``library`` as its loaded libnvidia-ml (for this test only)."""
    import pynvml

    monkeypatch.setattr(pynvml, "nvmlLib", library)
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
