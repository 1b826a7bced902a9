"""NvmlSource through the real nvidia-ml-py, with the driver's C library stood in for.

No NVIDIA driver exists here (test_gpu_telemetry.py covers that state for real). These tests
replace only libnvidia-ml's entry points (tests/nvml_driver.py) so that the code that turns
NVML answers and errors into frames runs through nvidia-ml-py's own wrappers, structures and
exception classes: a modern driver, a pre-510 driver, lost and locked GPUs, driver states.
"""

from __future__ import annotations

import pytest

import nvml_driver as driver
from specdeck.core.gpu import GpuStatus, TelemetryState, read_once
from specdeck.core.gpu.nvml import NvmlSource
from specdeck.core.gpu.sampler import Sampler
from specdeck.core.gpu.telemetry import peak_bandwidth

OWN, ENGINE, DESKTOP = 4242, 4343, 1733
PCI_ORDER = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def source(**kwargs) -> NvmlSource:
    return NvmlSource(own_pid=OWN, environ=PCI_ORDER, **kwargs)


@pytest.fixture
def gpus():
    return driver.workstation(own_pid=OWN, engine_pid=ENGINE)


def read(monkeypatch, library):
    driver.install(monkeypatch, library)
    src = source()
    assert src.open() is None
    frame = src.read()
    src.close()
    return frame


def test_a_modern_driver_reads_every_field_of_every_gpu(monkeypatch, gpus):
    frame = read(monkeypatch, driver.NvmlLibrary(gpus))
    assert frame.state is TelemetryState.OK and frame.driver_version == "570.133.07"
    first, second = frame.gpus
    assert (first.name, second.name) == ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 5090")
    assert (first.cuda_index, second.cuda_index) == (0, 1) and first.cuda_index_exact
    assert first.pci_bus_id == "00000000:01:00.0" and first.uuid.startswith("GPU-5d1c")
    # The v2 memory query: "used" without the driver's reservation, which is its own field.
    spec = gpus[0]
    assert (first.memory_total, first.memory_reserved, first.memory_used) == (spec.total, spec.reserved, spec.used)
    assert first.memory_used + first.memory_free + first.memory_reserved == first.memory_total
    assert (first.utilization_gpu, first.utilization_memory) == (97.0, 61.0)
    assert first.power_w == pytest.approx(402.512) and first.power_limit_w == 450.0
    assert first.temperature_c == 64.0 and first.fan_percent == 48.0
    assert first.memory_bandwidth_peak == peak_bandwidth(10501, 384) == pytest.approx(1.008e12, rel=1e-3)
    assert second.memory_bandwidth_peak == pytest.approx(1.792e12, rel=1e-3)
    # Processes: compute and graphics merged (the engine holds both kinds of context).
    usage = {p.pid: p.used_bytes for p in first.processes}
    assert usage == {ENGINE: 20 * driver.GiB, OWN: 300 * driver.MiB, DESKTOP: 512 * driver.MiB}
    assert [p.pid for p in first.processes][0] == ENGINE  # largest first
    assert first.own_bytes == 300 * driver.MiB and second.own_bytes == 0


def test_the_engine_child_process_counts_as_specdeck_s_own_memory(monkeypatch, gpus):
    driver.install(monkeypatch, driver.NvmlLibrary(gpus))
    sampler = Sampler(source(), interval_s=0)
    sampler.set_own_pids({ENGINE})  # what the A/B page does once its engine process starts
    frame = sampler.poll_once()
    first, second = frame.gpus
    assert first.own_bytes == 20 * driver.GiB + 300 * driver.MiB
    assert second.own_bytes == 28 * driver.GiB
    assert {p.pid for p in first.processes if p.is_self} == {OWN, ENGINE}
    sampler.stop()


def test_a_pre_510_driver_falls_back_to_the_older_queries(monkeypatch, gpus):
    # nvidia-ml-py 12.550+ raises NVMLLibraryMismatchError (not an NVMLError) when its
    # unversioned process query is missing from the driver; the versioned ones come first.
    library = driver.NvmlLibrary(gpus, missing=driver.PRE_510_MISSING)
    frame = read(monkeypatch, library)
    first = frame.gpus[0]
    assert frame.state is TelemetryState.OK
    assert first.memory_reserved is None  # v1 has no reservation field
    assert first.memory_used == gpus[0].used + gpus[0].reserved and first.memory_total == gpus[0].total
    assert first.temperature_c == 64.0  # from the deprecated query the old driver has
    assert first.own_bytes == 300 * driver.MiB and len(first.processes) == 3
    assert "nvmlDeviceGetComputeRunningProcesses_v2" in library.calls


def test_a_driver_without_process_queries_leaves_them_unknown(monkeypatch, gpus):
    names = ("Compute", "Graphics")
    missing = tuple(f"nvmlDeviceGet{k}RunningProcesses{v}" for k in names for v in ("_v3", "_v2"))
    frame = read(monkeypatch, driver.NvmlLibrary(gpus, missing=missing))
    assert frame.state is TelemetryState.OK
    assert frame.gpus[0].processes == () and frame.gpus[0].own_bytes is None
    assert frame.gpus[0].memory_used == gpus[0].used  # everything else still read
    # The CLI's one-shot read is a frame too, never a traceback.
    assert read_once(source()).state is TelemetryState.OK


def test_unsupported_queries_are_na_and_the_rest_is_read(monkeypatch, gpus):
    fail = {name: driver.ERROR_NOT_SUPPORTED for name in (
        "nvmlDeviceGetFanSpeed", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetUtilizationRates")}
    first = read(monkeypatch, driver.NvmlLibrary(gpus, fail=fail)).gpus[0]
    assert first.fan_percent is None and first.power_w is None and first.utilization_gpu is None
    assert first.memory_used == gpus[0].used and first.temperature_c == 64.0


def test_a_gpu_lost_mid_session_keeps_its_row_and_the_others_go_on(monkeypatch, gpus):
    lost = set()
    library = driver.NvmlLibrary(gpus, fail={"nvmlDeviceGetMemoryInfo_v2": lambda index: (
        driver.ERROR_GPU_IS_LOST if index in lost else driver.SUCCESS)})
    driver.install(monkeypatch, library)
    src = source()
    assert src.open() is None
    assert [g.status for g in src.read().gpus] == [GpuStatus.OK, GpuStatus.OK]
    lost.add(1)  # the 5090 falls off the bus (Xid 79)
    frame = src.read()
    assert frame.state is TelemetryState.OK
    assert [g.status for g in frame.gpus] == [GpuStatus.OK, GpuStatus.LOST]
    assert frame.gpus[1].name == "NVIDIA GeForce RTX 5090" and frame.gpus[1].memory_used is None
    assert frame.gpus[0].memory_used == gpus[0].used
    lost.clear()  # a lost GPU stays lost until NVML is opened again (a reset)
    assert src.read().gpus[1].status is GpuStatus.LOST
    src.close()


def test_a_gpu_this_user_may_not_open_does_not_hide_the_others(monkeypatch, gpus):
    library = driver.NvmlLibrary(gpus, fail={"nvmlDeviceGetHandleByIndex_v2": lambda index: (
        driver.ERROR_NO_PERMISSION if index == 0 else driver.SUCCESS)})
    frame = read(monkeypatch, library)
    assert frame.state is TelemetryState.OK
    blocked, usable = frame.gpus
    assert blocked.status is GpuStatus.NO_ACCESS and "No access" in blocked.status.problem
    assert usable.status is GpuStatus.OK and usable.memory_total == gpus[1].total


@pytest.mark.parametrize(("code", "state"), [
    (driver.ERROR_DRIVER_NOT_LOADED, TelemetryState.DRIVER_NOT_LOADED),
    (driver.ERROR_LIB_RM_VERSION_MISMATCH, TelemetryState.DRIVER_MISMATCH),
    (driver.ERROR_NO_PERMISSION, TelemetryState.NO_PERMISSION),
])
def test_driver_states_are_frames_and_are_retried(monkeypatch, gpus, code, state):
    library = driver.NvmlLibrary(gpus, fail={"nvmlInitWithFlags": code})
    driver.install(monkeypatch, library)
    now = [1000.0]
    src = NvmlSource(own_pid=OWN, environ=PCI_ORDER, retry_interval_s=10, clock=lambda: now[0])
    failure = src.open()
    assert failure.state is state and failure.fix and not failure.gpus
    assert src.read().state is state
    library.fail.clear()  # modprobe / reboot / the admin fixes it while SpecDeck runs
    assert src.read().state is state  # not retried before the interval
    now[0] += 11
    assert src.read().state is TelemetryState.OK
    src.close()
