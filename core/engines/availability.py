"""Can an engine run here? Answered without importing torch or exllamav2.

Listing engines must stay instant and must never trigger ExLlamaV2's CUDA build, so the
quick probes only look at installed files: ``importlib.util.find_spec``, torch's
``version.py`` (which records the CUDA version torch was built for), the NVIDIA driver's
files, an ``nvcc`` to build the extension with. The one thing files cannot tell, whether
``import exllamav2`` really works, is learned two ways: the engine records the outcome of
every real import (keyed by the exllamav2 and torch versions), and a deep probe imports it
in a child process so that a failing or hour-long JIT build cannot hurt the caller.
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path

from specdeck.core import appdirs
from specdeck.core.engines.base import Availability
from specdeck.core.errors import SpecDeckError
from specdeck.core.files import read_text_bounded

TORCH_HINT = "pip install 'specdeck[torch]'"
EXLLAMAV2_HINT = "pip install 'specdeck[exllamav2]' with a CUDA build of torch (docs/engines.md)"
CUDA_TORCH_HINT = (
    "Install a CUDA build of torch that exllamav2 0.3.2 was built for, e.g. "
    "pip install torch==2.7.0 --index-url https://download.pytorch.org/whl/cu128"
)
TESTED_TORCH = ("2.3", "2.4", "2.5", "2.6", "2.7")
"""torch minor versions exllamav2 0.3.2's release workflow builds wheels for (CUDA)."""
DEEP_PROBE_TIMEOUT_S = 900.0
"""A first import JIT-compiles ~50 CUDA files: minutes, not seconds."""


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def torch_build() -> tuple[str | None, str | None, str | None]:
    """(torch version, CUDA version, HIP version) read from torch/version.py, unimported."""
    if "torch" in sys.modules:  # already imported anyway: ask it
        import torch

        return torch.__version__, torch.version.cuda, getattr(torch.version, "hip", None)
    spec = importlib.util.find_spec("torch") if _installed("torch") else None
    if spec is None or not spec.submodule_search_locations:
        return None, None, None
    version_file = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:  # bounded: a version.py is a few lines; a FIFO put there is not waited on
        text = read_text_bounded(version_file, "torch/version.py")
    except (OSError, SpecDeckError):
        return _version("torch"), None, None
    return _read_version_field(text, "__version__") or _version("torch"), _read_version_field(
        text, "cuda"
    ), _read_version_field(text, "hip")


def _read_version_field(text: str, name: str) -> str | None:
    match = re.search(rf"^{name}\s*(?::[^=]+)?=\s*(.+)$", text, re.MULTILINE)
    if not match:
        return None
    value = match.group(1).strip()
    if value in ("None", "''", '""'):
        return None
    return value.strip("'\"")


def nvidia_driver_present() -> bool:
    if Path("/proc/driver/nvidia/version").exists():
        return True
    return any(ctypes.util.find_library(name) for name in ("cuda", "nvcuda"))


def find_nvcc() -> str | None:
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(variable)
        if root:
            for name in ("nvcc", "nvcc.exe"):
                candidate = Path(root) / "bin" / name
                if candidate.is_file():
                    return str(candidate)
    found = shutil.which("nvcc")
    if found:
        return found
    default = Path("/usr/local/cuda/bin/nvcc")
    return str(default) if default.is_file() else None


# Recorded import outcomes -----------------------------------------------------------------
def _record_path() -> Path:
    return appdirs.cache_dir() / "engines" / "exllamav2-import.json"


def _versions_key() -> dict[str, str | None]:
    torch_version, cuda, _ = torch_build()
    return {"exllamav2": _version("exllamav2"), "torch": torch_version, "cuda": cuda}


def record_exllamav2_import(ok: bool, error: str) -> None:
    """Remember whether ``import exllamav2`` worked with the installed versions."""
    from specdeck.core.atomic import atomic_write_text

    path = _record_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"versions": _versions_key(), "ok": ok, "error": error[-2000:]}
        atomic_write_text(path, json.dumps(payload, indent=2) + "\n")
    except OSError:
        pass  # a cache that cannot be written only costs a later re-check


def recorded_exllamav2_import() -> tuple[bool, str] | None:
    """(ok, error) of the last real import with the versions installed now, if any."""
    try:
        payload = json.loads(read_text_bounded(_record_path(), "exllamav2 import record"))
    except (OSError, ValueError, SpecDeckError):
        return None
    if not isinstance(payload, dict) or payload.get("versions") != _versions_key():
        return None
    return bool(payload.get("ok")), str(payload.get("error") or "")


# Probes ----------------------------------------------------------------------------------
def torch_availability() -> Availability:
    missing = [m for m in ("torch", "transformers", "safetensors") if not _installed(m)]
    if missing:
        return Availability(False, f"not installed: {', '.join(missing)}", TORCH_HINT)
    torch_version, cuda, hip = torch_build()
    build = f"CUDA {cuda}" if cuda else (f"ROCm {hip}" if hip else "CPU-only build")
    return Availability(
        True, detail=f"torch {torch_version} ({build}), transformers {_version('transformers')}"
    )


@dataclass(frozen=True)
class ExllamaFacts:
    """What the machine says about running ExLlamaV2, gathered without importing it."""

    installed: bool
    version: str | None
    torch_version: str | None
    cuda: str | None
    hip: str | None
    driver: bool
    prebuilt_extension: bool
    nvcc: str | None
    import_ok: bool | None = None
    """Outcome of the last real ``import exllamav2`` with these versions (None: unknown)."""
    import_error: str = ""


def gather_exllamav2_facts(deep: bool = False) -> ExllamaFacts:
    """Quick unless ``deep``: then ``import exllamav2`` runs in a child process (may build)."""
    installed = _installed("exllamav2")
    torch_version, cuda, hip = torch_build()
    facts = ExllamaFacts(
        installed=installed,
        version=_version("exllamav2"),
        torch_version=torch_version,
        cuda=cuda,
        hip=hip,
        driver=nvidia_driver_present(),
        prebuilt_extension=_installed("exllamav2_ext"),
        nvcc=find_nvcc(),
    )
    if not (installed and (cuda or hip)):
        return facts
    if deep:
        ok, error = probe_exllamav2_import()
        record_exllamav2_import(ok, error)
    else:
        ok, error = recorded_exllamav2_import() or (None, "")
    return replace(facts, import_ok=ok, import_error=error)


def exllamav2_verdict(facts: ExllamaFacts) -> Availability:
    """Whether ExLlamaV2 can run, from the facts; the reasons name the first blocker."""
    if not facts.installed:
        return Availability(False, "exllamav2 is not installed", EXLLAMAV2_HINT)
    if facts.torch_version is None:
        return Availability(False, "torch is not installed", CUDA_TORCH_HINT)
    if not facts.cuda and not facts.hip:
        return Availability(
            False, f"no CUDA: torch {facts.torch_version} is a CPU-only build", CUDA_TORCH_HINT
        )
    if facts.cuda and not facts.driver:
        return Availability(
            False,
            "no CUDA GPU: no NVIDIA driver found",
            "ExLlamaV2 runs on NVIDIA GPUs; install the NVIDIA driver.",
        )
    build = f"CUDA {facts.cuda}" if facts.cuda else f"ROCm {facts.hip}"
    notes = [f"exllamav2 {facts.version}, torch {facts.torch_version} ({build})"]
    if not facts.torch_version.startswith(TESTED_TORCH):
        notes.append(
            f"torch {facts.torch_version} is newer than any exllamav2 0.3.2 was released for"
        )
    if facts.import_ok is False:
        from specdeck.core.engines.exllamav2 import map_import_error

        mapped = map_import_error(RuntimeError(facts.import_error))
        return Availability(
            False,
            f"its CUDA extension failed to build or load: {mapped.what}",
            mapped.fix or EXLLAMAV2_HINT,
        )
    if facts.import_ok is None and not facts.prebuilt_extension:
        if facts.nvcc is None:
            return Availability(
                False,
                "its CUDA extension is not built and no CUDA toolkit (nvcc) was found to build it",
                "Install the CUDA toolkit matching torch's CUDA version and set CUDA_HOME, or "
                "a prebuilt exllamav2 wheel for your torch/CUDA/Python.",
            )
        notes.append("its CUDA extension will be built on first load (minutes)")
    return Availability(True, detail="; ".join(notes))


def exllamav2_availability(deep: bool = False) -> Availability:
    return exllamav2_verdict(gather_exllamav2_facts(deep))


def probe_exllamav2_import(timeout_s: float = DEEP_PROBE_TIMEOUT_S) -> tuple[bool, str]:
    """Import exllamav2 in a child process: (worked, error text)."""
    code = "import exllamav2, exllamav2.ext; print(exllamav2.__version__)"
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True, text=True, timeout=timeout_s, check=False,
        )
    except subprocess.TimeoutExpired:
        return False, f"import exllamav2 did not finish within {timeout_s:.0f} s"
    if done.returncode == 0:
        return True, ""
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return False, "\n".join(lines[-5:]) or f"exit status {done.returncode}"
