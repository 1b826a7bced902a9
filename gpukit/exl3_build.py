"""How long ExLlamaV3's extension takes to build on the device: measured with spare CPUs.

Issue 40 asks for the seed-scale check on an EXL3 target too (TabbyAPI main) if exllamav3
1.6.5 installs on the device within the carry limit. Its wheel does (3.8 MB, pure Python),
but like exllamav2 it compiles its CUDA extension at first import: 177 sources, about six
times exllamav2's, whose build took 111-147 s on the H200. That estimate says a build does
not fit a call beside everything else; this module measures it instead of guessing. After
exllamav2's build the CPUs are nearly idle (the converter, the A/B and the seed loads work on
the GPU), so the kit starts ``import exllamav3.ext`` at the lowest priority with half the
cores, and at the end of the call counts the objects ninja finished: objects per second over
the call, and so the minutes a whole build would take. If it finishes, the import is timed.

The package is imported with its ``__init__`` skipped (it imports the model code and its
dependencies: pydantic, marisa-trie, llguidance, which the kit does not carry); ``ext.py``
needs only torch. Torch's JIT build keeps its objects in ``TORCH_EXTENSIONS_DIR/
exllamav3_ext``, one ``build NAME.o`` line per source in its build.ninja.
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

EXTENSION = "exllamav3_ext"
PROBE = (
    "import importlib.util, sys, time, types; t = time.monotonic(); "
    "spec = importlib.util.find_spec('exllamav3'); "
    "package = types.ModuleType('exllamav3'); "
    "package.__path__ = list(spec.submodule_search_locations); "
    "sys.modules['exllamav3'] = package; "
    "from exllamav3.ext import exllamav3_ext as ext; "
    "print('SPECDECK_IMPORT_OK', ext.__file__, round(time.monotonic() - t, 1))"
)
"""``import exllamav3.ext`` without the package's __init__ (see the module's docstring)."""


def build_dir(env: dict[str, str]) -> Path:
    return Path(env["TORCH_EXTENSIONS_DIR"]) / EXTENSION


def jobs(cores: int | None = None) -> int:
    """Half the cores: the other half keep the A/B's and the loads' Python threads fed."""
    return max(1, (cores or os.cpu_count() or 2) // 2)


def progress(folder: Path) -> tuple[int, int | None]:
    """(objects built, objects the build has) in a torch JIT build folder; the total is
    None until torch has written build.ninja."""
    ninja = folder / "build.ninja"
    total = None
    if ninja.is_file():
        total = len(re.findall(r"^build [^:]+\.o:", ninja.read_text(encoding="utf-8",
                                                                     errors="replace"), re.M))
    built = sum(1 for p in folder.glob("*.o") if p.stat().st_size > 0) if folder.is_dir() else 0
    return built, total


class Build:
    """The niced background build; killed with its whole process group when the kit's
    process ends, so no compiler outlives the call into the next one."""

    def __init__(self, env: dict[str, str], log_path: Path, argv: list[str] | None = None):
        self.env = {**env, "MAX_JOBS": str(jobs())}
        self.log_path = log_path
        (build_dir(self.env) / "lock").unlink(missing_ok=True)  # a killed build's baton
        self._log = log_path.open("a", encoding="utf-8")
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            argv or [sys.executable, "-c", PROBE], stdout=self._log, stderr=subprocess.STDOUT,
            env=self.env, start_new_session=True, preexec_fn=lambda: os.nice(19))
        atexit.register(self.stop)

    def stop(self) -> int | None:
        """The exit code, or None when it was still building (then killed)."""
        code = self.process.poll()
        if code is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()
        self._log.close()
        return code

    def result(self) -> dict[str, Any]:
        seconds = time.monotonic() - self.started
        built_before, _ = progress(build_dir(self.env))
        code = self.stop()
        built, total = progress(build_dir(self.env))
        built = max(built, built_before)
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        marker = [line for line in text.splitlines() if line.startswith("SPECDECK_IMPORT_OK")]
        out: dict[str, Any] = {"seconds": round(seconds, 1), "jobs": int(self.env["MAX_JOBS"]),
                               "niced": 19, "objects_built": built, "objects_total": total,
                               "finished": code == 0 and bool(marker), "exit": code}
        if out["finished"]:
            out["import_seconds"] = float(marker[-1].split()[-1])
        elif built and total:
            out["projected_minutes_at_these_jobs"] = round(seconds / built * total / 60, 1)
        if code not in (None, 0) or (code == 0 and not marker):
            out["failure"] = "\n".join(text.splitlines()[-40:])
        return out
