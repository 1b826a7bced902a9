"""CUDA index vs NVML index: CUDA_DEVICE_ORDER, CUDA_VISIBLE_DEVICES, the driver probe."""

from __future__ import annotations

import pytest

from specdeck.core.gpu.cuda_order import (
    DeviceIdentity,
    cuda_index_map,
    estimate_cuda_order,
    map_from_driver,
    normalize_bus_id,
    parse_visible_devices,
    query_driver_bus_ids,
)

# The demo workstation: an RTX 4090 (Ada, cc 8.9, 128 SMs) in the first slot and an
# RTX 5090 (Blackwell, cc 12.0, 170 SMs) in the second.
RTX4090 = DeviceIdentity(0, "00000000:01:00.0", "GPU-5d1c9a3e-7f42-4b8e-9c1a-2e6f0b7d4a19", (8, 9), 128)
RTX5090 = DeviceIdentity(1, "00000000:02:00.0", "GPU-a4e07c52-19b3-4d6f-8e25-7c90f1b3d6e8", (12, 0), 170)
PAIR = [RTX4090, RTX5090]


def test_bus_ids_from_nvml_and_cuda_compare_equal():
    assert normalize_bus_id("00000000:02:00.0") == normalize_bus_id("0000:02:00.0") == (0, 2, 0, 0)
    assert normalize_bus_id("0000:4F:00.1") == (0, 0x4F, 0, 1)
    with pytest.raises(ValueError):
        normalize_bus_id("bus 2")


def test_pci_bus_order_is_exact_and_matches_nvml():
    mapping = estimate_cuda_order(PAIR, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert mapping.exact and mapping.indices == {0: 0, 1: 1}


def test_fastest_first_puts_the_5090_first_as_an_estimate():
    mapping = estimate_cuda_order(PAIR, {})
    assert mapping.indices == {0: 1, 1: 0}
    assert not mapping.exact


def test_visible_devices_select_and_reorder():
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert estimate_cuda_order(PAIR, {**env, "CUDA_VISIBLE_DEVICES": "1"}).indices == {0: None, 1: 0}
    assert estimate_cuda_order(PAIR, {**env, "CUDA_VISIBLE_DEVICES": "1,0"}).indices == {0: 1, 1: 0}
    assert estimate_cuda_order(PAIR, {**env, "CUDA_VISIBLE_DEVICES": ""}).indices == {0: None, 1: None}
    by_uuid = estimate_cuda_order(PAIR, {**env, "CUDA_VISIBLE_DEVICES": "GPU-a4e07c52"})
    assert by_uuid.indices == {0: None, 1: 0}


def test_visible_devices_stop_at_the_first_unknown_entry():
    # CUDA reads the list up to the first invalid ordinal and ignores the rest.
    assert parse_visible_devices("0,7,1", PAIR) == [0]
    assert parse_visible_devices("GPU-ffff,1", PAIR) == []
    assert parse_visible_devices("1,1", PAIR) == [1]
    assert parse_visible_devices(None, PAIR) is None


def test_driver_bus_ids_map_exactly_even_when_cuda_hides_a_gpu():
    mapping = map_from_driver(PAIR, ["0000:02:00.0"])
    assert mapping.exact and mapping.indices == {0: None, 1: 0}


def test_single_gpu_needs_no_driver_probe():
    mapping = cuda_index_map([RTX4090], {})
    assert mapping.exact and mapping.indices == {0: 0}


def test_driver_probe_without_cuda_falls_back_to_the_estimate():
    # This machine has no libcuda: the real child-process probe answers None and the
    # FASTEST_FIRST estimate is used, flagged as such.
    if query_driver_bus_ids() is not None:
        pytest.skip("a CUDA driver is present here")
    mapping = cuda_index_map(PAIR, {})
    assert mapping.indices == {0: 1, 1: 0} and not mapping.exact


class _CudaDriver:
    """The four CUDA driver API calls the probe makes, answering like libcuda does for the
    demo workstation under FASTEST_FIRST: the 5090 (bus 02) is CUDA 0."""

    def __init__(self, bus_ids=("0000:02:00.0", "0000:01:00.0"), init_result=0):
        self.bus_ids, self.init_result = bus_ids, init_result

    def cuInit(self, flags):
        return self.init_result

    def cuDeviceGetCount(self, count):
        count._obj.value = len(self.bus_ids)
        return 0

    def cuDeviceGet(self, device, ordinal):
        device._obj.value = ordinal
        return 0

    def cuDeviceGetPCIBusId(self, buffer, length, device):
        buffer.value = self.bus_ids[device.value].encode()[:length - 1]
        return 0


def test_driver_probe_lists_bus_ids_in_cuda_order_and_maps_them():
    from specdeck.core.gpu.cuda_order import _bus_ids

    ids = _bus_ids(_CudaDriver())
    assert ids == ["0000:02:00.0", "0000:01:00.0"]
    assert map_from_driver(PAIR, ids).indices == {0: 1, 1: 0}
    assert _bus_ids(_CudaDriver(init_result=100)) is None  # CUDA_ERROR_NO_DEVICE


def test_frozen_app_runs_the_probe_through_its_own_command(tmp_path, monkeypatch):
    # In the PyInstaller bundle sys.executable is SpecDeck's launcher: it takes no "-c", so
    # the probe must go through the `specdeck` command's own flag.
    import json
    import os
    import subprocess
    import sys

    from specdeck.core.gpu.cuda_order import PROBE_FLAG, probe_command

    launcher = tmp_path / "specdeck-app"
    launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m specdeck "$@"\n')
    launcher.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(launcher))
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    command = probe_command()
    assert command == [str(launcher), PROBE_FLAG]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    # No libcuda here: the probe answers null; with a driver it answers the list.
    answer = json.loads(done.stdout)
    assert answer is None or isinstance(answer, list)
