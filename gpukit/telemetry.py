"""An NVML telemetry trace of the run, recorded by SpecDeck's own `specdeck gpus --record`
in a child process while the A/B runs load and generate: the replay fixture for tests
(format: resources/traces/README.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def record_argv(path: Path, seconds: float, description: str, interval: float = 0.25,
                python: str = sys.executable) -> list[str]:
    return [python, "-m", "specdeck", "gpus", "--record", str(path), "--duration", f"{seconds:g}",
            "--interval", f"{interval:g}", "--description", description]


class Recorder:
    """Starts the recorder now; :meth:`finish` waits for it (it stops on its own after
    ``seconds``) and returns its exit code and output."""

    def __init__(self, path: Path, seconds: float, description: str, log_path: Path):
        self.path = Path(path)
        self.log_path = Path(log_path)
        self.seconds = seconds
        self._log = self.log_path.open("w", encoding="utf-8")
        self._process = subprocess.Popen(record_argv(self.path, seconds, description),
                                         stdout=self._log, stderr=subprocess.STDOUT)

    def finish(self, grace_s: float = 30.0) -> tuple[int, str]:
        try:
            code = self._process.wait(timeout=self.seconds + grace_s)
        except subprocess.TimeoutExpired:
            self._process.kill()
            code = self._process.wait()
        self._log.close()
        return code, self.log_path.read_text(encoding="utf-8", errors="replace")
