"""Install SpecDeck and what the device image lacks, from carried wheels, with no index.

The device machine has python3 with a CUDA torch, transformers, tokenizers, numpy, pandas,
ninja, nvidia-ml-py, ... but no registry. The carried ``.whl/`` holds exllamav2 0.3.2 (the
JIT build, ``py3-none-any``) and the few packages the image lacks; they go into one
``--target`` folder that every later command puts on PYTHONPATH.

SpecDeck itself is *linked*, not built: ``site/specdeck`` mirrors setup.py's mapping
(``specdeck`` -> specdeck/, ``specdeck.core`` -> core/, ...) with symbolic links into the
working tree, so a fix made during a GPU session is live in the next command without a
rebuild, and no particular setuptools is needed on the device.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from gpukit.driver import ToolFailed

PACKAGE_ROOTS = {"core": "core", "gui": "gui", "resources": "resources"}
"""specdeck.<name> -> repository folder, as in setup.py; specdeck/'s own files are linked
one by one next to them."""


def link_specdeck(site: Path, repo: Path) -> Path:
    """``site/specdeck`` importable as the installed package, pointing into ``repo``."""
    package = site / "specdeck"
    package.mkdir(parents=True, exist_ok=True)
    for source in (repo / "specdeck").glob("*.py"):
        _link(package / source.name, source)
    for name, folder in PACKAGE_ROOTS.items():
        _link(package / name, repo / folder)
    return package


def _link(link: Path, target: Path) -> None:
    if link.is_symlink() or link.exists():
        if link.is_symlink() and link.resolve() == target.resolve():
            return
        link.unlink()
    link.symlink_to(target.resolve())


def wheels_fingerprint(wheels: list[Path]) -> str:
    digest = hashlib.sha256()
    for wheel in sorted(wheels):
        digest.update(f"{wheel.name}:{wheel.stat().st_size}\n".encode())
    return digest.hexdigest()[:16]


WHEELS = ("exllamav2==0.3.2", "fastparquet==2026.9.0", "cramjam==2.14.0", "websockets==17.4",
          "ruamel.yaml==0.19.1", "platformdirs==4.14.7", "exllamav3==1.6.5")
"""What the device image lacks: exllamav2 (a JIT build, py3-none-any), its converter's
fastparquet (+ cramjam), websockets for its metadata; SpecDeck's CLI's ruamel.yaml and
platformdirs; exllamav3 (3.8 MB, a JIT build too: only its extension's build is measured,
gpukit.exl3_build)."""
DEVICE_PYTHON = "3.12"
DEVICE_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                    "manylinux2014_x86_64", "manylinux1_x86_64")


def device_tags() -> list[str]:
    """pip's options for the device's interpreter (CPython 3.12 on x86-64 Linux), the same for
    the download here and the install there: the CPU rehearsal installs the very wheels the
    device gets, whatever Python runs it."""
    return ["--only-binary=:all:", "--python-version", DEVICE_PYTHON, "--implementation", "cp",
            *(f"--platform={p}" for p in DEVICE_PLATFORMS)]


def missing_wheels(folder: Path) -> list[str]:
    """The pins of WHEELS with no wheel of that name and version in ``folder``."""
    names = [f.name.lower() for f in folder.glob("*.whl")] if folder.is_dir() else []
    return [pin for pin in WHEELS if not any(n.startswith(wheel_prefix(pin)) for n in names)]


def wheel_prefix(pin: str) -> str:
    """A wheel's file name starts with its normalised name and version: "ruamel.yaml==0.19.1"
    -> "ruamel_yaml-0.19.1-" (PEP 427: runs of -_. in the name become one _)."""
    import re

    name, version = pin.split("==")
    return f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-"


def pip_download_argv(dest: Path, python: str = sys.executable) -> list[str]:
    return [python, "-m", "pip", "download", "-q", "--no-deps", *device_tags(), "-d", str(dest),
            *WHEELS]


def pip_install_argv(site: Path, wheels: list[Path], python: str = sys.executable) -> list[str]:
    return [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
            "--no-cache-dir", "--upgrade", *device_tags(), "--target", str(site),
            *map(str, sorted(wheels))]


def interpreter_note() -> str | None:
    """Said in the report where this Python is not the device's: the compiled wheels
    (cramjam, fastparquet) will not import here, so exllamav2's converter could not run."""
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if running == DEVICE_PYTHON:
        return None
    return (f"the wheels are for Python {DEVICE_PYTHON} (the device's); this is {running}: "
            "their compiled parts (cramjam, fastparquet) will not import here")


def install(site: Path, wheels_dir: Path, repo: Path, log_path: Path) -> dict:
    """Install the wheels (skipped when the same set is already in) and link SpecDeck."""
    wheels = sorted(wheels_dir.glob("*.whl"))
    if not wheels:
        raise ToolFailed(f"no wheels in {wheels_dir}", "carry .whl (docs/gpu-proof.md)")
    fingerprint = wheels_fingerprint(wheels)
    marker = site / ".specdeck-wheels"
    installed = marker.is_file() and marker.read_text() == fingerprint
    if not installed:
        done = subprocess.run(pip_install_argv(site, wheels), capture_output=True, text=True)
        log_path.write_text(done.stdout + done.stderr, encoding="utf-8")
        if done.returncode != 0:
            raise ToolFailed(f"pip install failed (exit {done.returncode})",
                             (done.stdout + done.stderr)[-4000:])
        marker.write_text(fingerprint)
    link_specdeck(site, repo)
    if str(site) not in sys.path:
        sys.path.insert(0, str(site))
    import importlib

    importlib.invalidate_caches()
    summary = {"wheels": [w.name for w in wheels], "reused": installed}
    note = interpreter_note()
    if note:
        summary["note"] = note
    return summary
