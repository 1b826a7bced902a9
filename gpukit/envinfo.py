"""The environment a kit run happened in: machine, GPU, driver, CUDA, package versions."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from importlib import metadata
from typing import Any

PACKAGES = ("specdeck", "torch", "transformers", "tokenizers", "safetensors", "exllamav2",
            "flash-attn", "nvidia-ml-py", "numpy", "ninja", "fastparquet", "pandas")


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in names:
        if name == "specdeck":  # linked from the tree on the device: no dist-info there
            import specdeck

            versions[name] = specdeck.__version__
            continue
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def command_output(argv: list[str], timeout: float = 30.0) -> str | None:
    """A tool's output, or None when the tool is not installed."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({argv[0]} failed: {exc})"
    return (done.stdout + done.stderr).strip()


def torch_facts() -> dict[str, Any]:
    """torch's build and devices (imports torch; CUDA is initialised only if present)."""
    try:
        import torch
    except ImportError:
        return {"torch": None}
    facts: dict[str, Any] = {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
                             "cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        facts["devices"] = [
            {"name": torch.cuda.get_device_name(i),
             "capability": ".".join(map(str, torch.cuda.get_device_capability(i))),
             "total_bytes": torch.cuda.get_device_properties(i).total_memory}
            for i in range(torch.cuda.device_count())]
    return facts


def gpu_frame() -> dict[str, Any]:
    """What SpecDeck's own telemetry sees (NVML), including the no-GPU states."""
    from specdeck.core.gpu import read_once

    frame = read_once()
    return {"headline": frame.headline, "state": frame.state.value, "driver": frame.driver_version,
            "gpus": [{"name": g.name, "memory_total": g.memory_total,
                      "memory_used": g.memory_used, "memory_free": g.memory_free,
                      "memory_reserved": g.memory_reserved,
                      # NVML's v2 query: used + free + reserved is the card's total
                      "memory_adds_up": g.memory_used is not None and g.memory_free is not None
                      and g.memory_used + g.memory_free + (g.memory_reserved or 0)
                      == g.memory_total} for g in frame.gpus]}


def collect(include_torch: bool = True) -> dict[str, Any]:
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "packages": package_versions(),
        "nvidia_smi": command_output(["nvidia-smi", "--query-gpu=name,driver_version,"
                                      "memory.total,compute_cap", "--format=csv,noheader"]),
        "nvcc": command_output(["nvcc", "--version"]),
        "nvml": gpu_frame(),
    }
    if include_torch:
        info.update(torch_facts())
    return info
