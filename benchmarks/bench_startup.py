"""Cold start: process launch to the first painted main window

Goal (issue 2): under 1 s on a 2-core machine without a GPU. Each run is a fresh Python
process (`python -m specdeck`) with the offscreen Qt platform; the app writes the time of
its first paint event and quits. The median of the runs is the number that counts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.report import Report, median

RUNS = 9
GOAL_S = 1.0


def one_start(probe: Path, home: Path) -> float:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", SPECDECK_STARTUP_PROBE=str(probe),
               SPECDECK_HOME=str(home))
    started = time.time()
    subprocess.run([sys.executable, "-m", "specdeck"], env=env, check=True, timeout=60,
                   capture_output=True)
    return float(probe.read_text()) - started


def run(report: Report) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        probe = Path(tmp) / "painted"
        one_start(probe, home)  # warm the OS file cache: "cold" means a new process
        times = [one_start(probe, home) for _ in range(RUNS)]
    med = median(times)
    report.record("runs_s", times)
    report.record("median_s", med)
    report.record("goal_s", GOAL_S)
    report.text(f"Median over {RUNS} launches: **{med * 1000:.0f} ms** "
                f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}); "
                f"goal < {GOAL_S * 1000:.0f} ms: {'met' if med < GOAL_S else 'NOT met'}.")
