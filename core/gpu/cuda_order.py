"""Which CUDA index each NVML GPU gets.

NVML (and nvidia-smi) number GPUs in PCI bus order. CUDA numbers them in
``CUDA_DEVICE_ORDER``: ``FASTEST_FIRST`` (the default!) or ``PCI_BUS_ID``, then keeps only
the devices ``CUDA_VISIBLE_DEVICES`` names, in the order it names them. On a machine with two
different cards (an RTX 5090 and an RTX 4090, say) "GPU 0" in TabbyAPI's gpu_split may be
"GPU 1" in nvidia-smi. SpecDeck shows both numbers.

The exact order comes from the CUDA driver itself (``cuDeviceGetPCIBusId`` for each CUDA
index), asked in a short-lived child process so that this process never initialises CUDA
(a CUDA-initialised parent must not fork). When that is impossible, PCI_BUS_ID order is
computed exactly and FASTEST_FIRST is estimated (newest architecture, then most
multiprocessors, then bus order), and flagged as an estimate.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

log = logging.getLogger(__name__)

DRIVER_QUERY_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class DeviceIdentity:
    """What CUDA ordering depends on, for one GPU in NVML order."""

    nvml_index: int
    pci_bus_id: str
    uuid: str = ""
    compute_capability: tuple[int, int] | None = None
    cores: int | None = None


@dataclass(frozen=True)
class CudaIndexMap:
    indices: dict[int, int | None]
    """NVML index -> CUDA index (None: hidden from CUDA by CUDA_VISIBLE_DEVICES)."""
    exact: bool


def normalize_bus_id(bus_id: str) -> tuple[int, int, int, int]:
    """"00000000:01:00.0" (NVML) and "0000:01:00.0" (CUDA) -> (domain, bus, device, function)."""
    text = bus_id.strip().lower()
    try:
        domain, bus, rest = text.split(":")
        device, function = rest.split(".")
        return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)
    except ValueError:
        raise ValueError(f"not a PCI bus id: {bus_id!r}") from None


def parse_visible_devices(value: str | None, devices: Sequence[DeviceIdentity]) -> list[int] | None:
    """Positions (in CUDA enumeration order) named by CUDA_VISIBLE_DEVICES, in its order.

    ``None`` means the variable is unset (all devices). CUDA reads the list up to the first
    entry it cannot resolve and ignores the rest; an unknown entry therefore hides every
    device after it, which is what we reproduce. Entries are ordinals or (prefixes of) GPU
    UUIDs ("GPU-8e3a..."); MIG instances are not GPUs NVML lists here and end the list.
    """
    if value is None:
        return None
    chosen: list[int] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            break
        position: int | None = None
        if entry.lstrip("-").isdigit():
            ordinal = int(entry)
            position = ordinal if 0 <= ordinal < len(devices) else None
        elif entry.upper().startswith("GPU-"):
            prefix = entry.lower()
            matches = [i for i, d in enumerate(devices) if d.uuid.lower().startswith(prefix)]
            position = matches[0] if len(matches) == 1 else None
        if position is None or position in chosen:
            break
        chosen.append(position)
    return chosen


def _fastest_first_key(device: DeviceIdentity) -> tuple:
    cc = device.compute_capability or (0, 0)
    return (-cc[0], -cc[1], -(device.cores or 0), normalize_bus_id(device.pci_bus_id))


def estimate_cuda_order(devices: Sequence[DeviceIdentity], environ: Mapping[str, str]) -> CudaIndexMap:
    """CUDA indices computed from the environment alone (no CUDA call)."""
    order = environ.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST").strip().upper()
    by_bus = sorted(devices, key=lambda d: normalize_bus_id(d.pci_bus_id))
    if order == "PCI_BUS_ID" or len(devices) <= 1:
        enumerated, exact = by_bus, True
    else:
        # CUDA documents FASTEST_FIRST only as "a simple heuristic" that picks device 0 and
        # leaves the rest unspecified: this guess is flagged as one.
        enumerated, exact = sorted(devices, key=_fastest_first_key), False
    visible = parse_visible_devices(environ.get("CUDA_VISIBLE_DEVICES"), enumerated)
    positions = list(range(len(enumerated))) if visible is None else visible
    indices: dict[int, int | None] = {d.nvml_index: None for d in devices}
    for cuda_index, position in enumerate(positions):
        indices[enumerated[position].nvml_index] = cuda_index
    return CudaIndexMap(indices, exact)


def map_from_driver(devices: Sequence[DeviceIdentity], cuda_bus_ids: Sequence[str]) -> CudaIndexMap:
    """CUDA indices from the bus ids the CUDA driver listed, in CUDA index order."""
    by_bus = {normalize_bus_id(d.pci_bus_id): d.nvml_index for d in devices}
    indices: dict[int, int | None] = {d.nvml_index: None for d in devices}
    for cuda_index, bus_id in enumerate(cuda_bus_ids):
        nvml_index = by_bus.get(normalize_bus_id(bus_id))
        if nvml_index is not None:
            indices[nvml_index] = cuda_index
    return CudaIndexMap(indices, True)


PROBE_FLAG = "--cuda-device-probe"
"""Argument that makes the `specdeck` command (or the frozen app) run :func:`print_driver_bus_ids`."""


def print_driver_bus_ids() -> int:
    """Print the CUDA driver's devices (PCI bus ids in CUDA order) as JSON, or ``null``.

    Runs in a child process: it initialises the CUDA driver API (no context, no VRAM), which
    the app's own process must never do.
    """
    names = ["nvcuda.dll"] if sys.platform == "win32" else ["libcuda.so.1", "libcuda.so", "libcuda.dylib"]
    ids: list[str] | None = None
    for name in names:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        ids = _bus_ids(lib)
        break
    print(json.dumps(ids))
    return 0


def _bus_ids(lib) -> list[str] | None:
    count = ctypes.c_int()
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return None
    ids = []
    for i in range(count.value):
        device = ctypes.c_int()
        buffer = ctypes.create_string_buffer(64)
        if lib.cuDeviceGet(ctypes.byref(device), i) != 0 or lib.cuDeviceGetPCIBusId(buffer, 64, device) != 0:
            return None
        ids.append(buffer.value.decode())
    return ids


def probe_command() -> list[str]:
    """The child process that runs the probe: this interpreter, or the frozen app itself
    (where ``sys.executable`` is SpecDeck's launcher and takes no ``-c``)."""
    if getattr(sys, "frozen", False):
        return [sys.executable, PROBE_FLAG]
    return [sys.executable, "-c",
            "import sys; from specdeck.core.gpu.cuda_order import print_driver_bus_ids as p; sys.exit(p())"]


def query_driver_bus_ids(environ: Mapping[str, str] | None = None) -> list[str] | None:
    """The CUDA driver's device list (bus ids in CUDA order), or None if it cannot be asked."""
    try:
        result = subprocess.run(
            probe_command(),
            capture_output=True,
            text=True,
            timeout=DRIVER_QUERY_TIMEOUT_S,
            env=dict(environ if environ is not None else os.environ),
        )
        ids = json.loads(result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "null")
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        log.info("Could not ask the CUDA driver for its device order: %s", exc)
        return None
    return [str(i) for i in ids] if isinstance(ids, list) else None


def cuda_index_map(
    devices: Sequence[DeviceIdentity],
    environ: Mapping[str, str] | None = None,
    ask_driver: bool = True,
) -> CudaIndexMap:
    """NVML index -> CUDA index for a process started with ``environ`` (default: ours)."""
    env = dict(os.environ if environ is None else environ)
    order = env.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST").strip().upper()
    estimated = estimate_cuda_order(devices, env)
    # PCI_BUS_ID order (or a single GPU) is computed exactly; only FASTEST_FIRST on several
    # GPUs is worth a child process.
    if estimated.exact or order == "PCI_BUS_ID" or not ask_driver:
        return estimated
    bus_ids = query_driver_bus_ids(env)
    return map_from_driver(devices, bus_ids) if bus_ids is not None else estimated
