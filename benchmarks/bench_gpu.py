"""GPU telemetry and VRAM planning cost: sampler polls, GUI redraws, plans

Goals (issue 5): the sampler is cheap enough to run all day at 4 Hz (well under 1% of one
core), a redraw of the GPUs page fits easily in a 250 ms tick, and a plan (with its search
for the largest context) is fast enough to run on every form change. Without a GPU the NVML
numbers are those of the "no NVIDIA GPU" state; a lent GPU gives the real ones.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from specdeck.core.units import KiB, format_bytes

from benchmarks.report import Report
from tools.fixtures import fixtures_dir

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "resources" / "traces" / "demo-5090-4090-70b.jsonl"
POLLS = 4000
RATE_HZ = 4.0


def _per_call_us(fn, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1e6)
    return times


def _sampler_cost(report: Report) -> None:
    from specdeck.core.gpu.nvml import NvmlSource
    from specdeck.core.gpu.replay import ReplaySource
    from specdeck.core.gpu.sampler import Sampler

    rows = []
    for label, source in (("replay (2 GPUs)", ReplaySource(TRACE)), ("NVML", NvmlSource())):
        sampler = Sampler(source)
        sampler.poll_once()  # opens the source (NVML init happens here, once)
        state = sampler.latest.state.value
        times = _per_call_us(sampler.poll_once, POLLS)
        median = statistics.median(times)
        cpu_share = median * 1e-6 * RATE_HZ * 100
        sampler.stop()
        report.record(f"poll_us_{label.split()[0].lower()}", median)
        report.record(f"poll_state_{label.split()[0].lower()}", state)
        rows.append([label, state, f"{median:.1f}", f"{max(times):.0f}", f"{cpu_share:.4f}%",
                     format_bytes(sampler.history_bytes())])
    report.text(f"Sampler polls ({POLLS} each, read + ring-buffer append):")
    report.text()
    report.table(["source", "state", "median us", "max us", "CPU at 4 Hz", "history held"], rows)


def _plan_cost(report: Report) -> None:
    from specdeck.core import vram

    fixtures = fixtures_dir()
    target = vram.model_weights(ROOT / "tests" / "data" / "models" / "Llama-3.1-70B-Instruct", bpw=4.0)
    draft = vram.model_weights(fixtures / "models" / "Llama-3.2-1B", bpw=4.0)
    gpus = vram.parse_gpu_sizes("32,24")
    fits = vram.PlanRequest(target, gpus, 32768, "Q4", draft, "Q4")
    short = vram.PlanRequest(target, gpus, 65536, "FP16", draft, "FP16")
    rows = []
    for label, request in (("fits (70B + 1B, 32k Q4)", fits), ("does not fit (64k FP16)", short)):
        times = _per_call_us(lambda r=request: vram.plan(r), 30)
        median_ms = statistics.median(times) / 1000
        report.record(f"plan_ms_{'fits' if request is fits else 'no_fit'}", median_ms)
        rows.append([label, f"{median_ms:.1f}"])
    report.text("A whole plan: placement, largest context with and without the draft, and "
                "the suggestions when it does not fit:")
    report.text()
    report.table(["request", "median ms"], rows)


# Runs in a child process (a Qt crash must not take the benchmark down with it):
# 1. the plot redraw with a full 10-minute history of the demo trace, for two windows;
# 2. a soak: the GPUs page fed N replayed frames, redrawn after each, with Python object
#    counts and peak RSS before and after.
_GUI_BENCH = r"""
import gc, json, os, resource, statistics, sys, tempfile, time
os.environ["QT_QPA_PLATFORM"] = "offscreen"
os.environ["SPECDECK_HOME"] = tempfile.mkdtemp()
os.environ["SPECDECK_GPU_REPLAY"] = sys.argv[1]
from PySide6.QtWidgets import QApplication
from specdeck.core.gpu.replay import ReplaySource
from specdeck.core.gpu.sampler import Sampler
from specdeck.gui.app import configure_application
from specdeck.gui.main_window import MainWindow
from specdeck.gui.telemetry_view import TelemetryPlots
app = QApplication(["bench"]); configure_application(app)
out = {"redraw": []}
sampler = Sampler(ReplaySource(sys.argv[1]))
for _ in range(sampler.capacity + 100):
    sampler.poll_once()
for window_s in (120.0, 600.0):
    plots = TelemetryPlots(window_s=window_s); plots.resize(900, 260); plots.show()
    times = []
    for _ in range(61):
        started = time.perf_counter()
        points = plots.update_from(sampler); plots.repaint(); app.processEvents()
        times.append((time.perf_counter() - started) * 1000)
    out["redraw"].append([window_s, points, statistics.median(times[1:])])
    plots.close()
window = MainWindow(); window.resize(1280, 800); window.show()
page = window.show_page("gpus"); page.sampler.stop()
def step(n):
    for _ in range(n):
        page.sampler.poll_once(); page.refresh(); app.processEvents()
step(600)
gc.collect(); before = (len(gc.get_objects()), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
step(int(sys.argv[2]))
gc.collect(); after = (len(gc.get_objects()), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
out["objects"] = [before[0], after[0]]
out["rss_kib"] = [before[1], after[1]]
print(json.dumps(out))
window.close()
"""


def _gui_cost(report: Report, frames: int = 3000) -> None:
    import json
    import subprocess
    import sys
    from importlib import metadata

    result = subprocess.run([sys.executable, "-c", _GUI_BENCH, str(TRACE), str(frames)],
                            capture_output=True, text=True, timeout=1200, cwd=ROOT)
    version = f"PySide6 {metadata.version('PySide6-Essentials')}, Python {sys.version.split()[0]}"
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines()
        fatal = next((line for line in lines if "Fatal" in line), lines[-1] if lines else "?")
        report.record("gui", {"crashed": fatal, "versions": version})
        report.text(f"GUI redraw and soak ({version}): **crashed**: {fatal}. PySide6 6.12.0 "
                    "leaks a reference to None per void Qt call on Python < 3.12; see "
                    "pyproject.toml.")
        report.text()
        return
    data = json.loads(result.stdout.strip().splitlines()[-1])
    report.record("gui", {**data, "versions": version, "soak_frames": frames})
    report.text(f"GPUs page plot redraw (memory + utilisation, 2 GPUs, offscreen, a full "
                f"10-minute history; {version}):")
    report.text()
    report.table(["window", "points drawn", "median ms"],
                 [[f"{w:.0f} s", str(points), f"{ms:.1f}"] for w, points, ms in data["redraw"]])
    report.text(f"Soak: {frames} replayed frames ({frames / RATE_HZ / 60:.1f} min at 4 Hz), the "
                f"whole page redrawn after each: Python objects {data['objects'][0]} -> "
                f"{data['objects'][1]}, peak RSS {format_bytes(data['rss_kib'][0] * KiB)} -> "
                f"{format_bytes(data['rss_kib'][1] * KiB)}.")
    report.text()


def run(report: Report) -> None:
    _sampler_cost(report)
    _gui_cost(report)
    _plan_cost(report)
    report.text("Measured on a shared 2-core machine without a GPU: provisional; the NVML row "
                "is the no-driver state here.")
