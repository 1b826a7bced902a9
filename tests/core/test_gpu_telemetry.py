"""GPU telemetry: the real no-NVML state, ring buffers, the sampler under a long replay, traces.

This machine has no NVIDIA driver, so the NVML tests exercise the real "library not found"
path; the live path is read by the GPU proof kit's env step (gpukit/envinfo.py, which records
whether each GPU's used + free + reserved adds up to its total), not by a test that would
skip on every CI machine. Everything downstream of NVML is
driven by real trace files through ReplaySource, never by a mock of pynvml.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from conftest import REPO_ROOT
from specdeck.core.errors import InvalidInputError, NotFoundError
from specdeck.core.gpu import NO_GPU_HEADLINE, GpuStatus, TelemetryState, read_once
from specdeck.core.gpu.nvml import NvmlSource
from specdeck.core.gpu.replay import ReplaySource, load_trace, record_trace
from specdeck.core.gpu.ring import RingTable
from specdeck.core.gpu.sampler import HISTORY_COLUMNS, Sampler

DEMO = REPO_ROOT / "resources" / "traces" / "demo-5090-4090-70b.jsonl"


def _nvml_present() -> bool:
    code = "import pynvml\ntry:\n    pynvml.nvmlInit(); print(1)\nexcept pynvml.NVMLError:\n    print(0)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return out.stdout.strip() == "1"


NVML_PRESENT = _nvml_present()


# NVML --------------------------------------------------------------------------------------
@pytest.mark.skipif(NVML_PRESENT, reason="this machine has an NVIDIA driver")
def test_missing_nvml_is_the_no_gpu_state_not_an_error(monkeypatch):
    import pynvml

    inits = []
    real_init = pynvml.nvmlInit
    monkeypatch.setattr(pynvml, "nvmlInit", lambda *a, **k: (inits.append(1), real_init(*a, **k)))
    source = NvmlSource()
    failure = source.open()
    assert failure is not None
    assert failure.state is TelemetryState.NO_LIBRARY
    assert failure.headline == NO_GPU_HEADLINE == "No NVIDIA GPU detected"
    assert "NVML" in failure.detail and failure.fix
    assert not failure.has_gpus and failure.gpus == ()
    # Reads keep answering with the same state, without retrying a library that cannot appear.
    frames = [source.read() for _ in range(200)]
    assert {f.state for f in frames} == {TelemetryState.NO_LIBRARY}
    assert len(inits) == 1  # the real library was looked for once
    source.close()
    assert read_once().state is TelemetryState.NO_LIBRARY


@pytest.mark.skipif(NVML_PRESENT, reason="this machine has an NVIDIA driver")
def test_sampler_without_nvml_keeps_polling_and_records_no_history():
    sampler = Sampler(NvmlSource(), interval_s=0.01)
    sampler.start()
    deadline = time.monotonic() + 10
    while sampler.polls < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.stop()
    assert not sampler.is_running
    assert sampler.polls >= 5
    assert sampler.latest.state is TelemetryState.NO_LIBRARY
    assert sampler.gpu_indices() == [] and sampler.history_bytes() == 0


def test_importing_gpu_package_loads_neither_nvml_nor_numpy_work():
    code = ("import sys, json, specdeck.core.gpu, specdeck.core.vram\n"
            "print(json.dumps([m for m in ('pynvml', 'psutil') if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


# ring buffers -------------------------------------------------------------------------------
def test_ring_table_keeps_the_newest_rows_in_order():
    table = RingTable(("a", "b"), capacity=4)
    size = table.nbytes
    for i in range(10):
        table.append((i, None if i % 3 == 0 else i * 10))
    assert len(table) == 4 and table.appended == 10 and table.nbytes == size
    assert table.column("a").tolist() == [6, 7, 8, 9]
    b = table.column("b")
    assert np.isnan(b[0]) and np.isnan(b[3]) and b[1:3].tolist() == [70, 80]
    assert table.rows().shape == (4, 2)
    partial = RingTable(("a",), capacity=5)
    partial.append((1,))
    assert partial.column("a").tolist() == [1]
    with pytest.raises(ValueError):
        RingTable(("a",), capacity=0)


def test_sampler_ring_buffers_under_a_long_replay():
    trace = load_trace(DEMO)
    sampler = Sampler(ReplaySource(trace), capacity=300)
    sampler.poll_once()
    bytes_after_first = sampler.history_bytes()
    polls = 5 * len(trace.frames) + 37  # five laps and a bit: 2437 frames
    for _ in range(polls - 1):
        sampler.poll_once()
    assert sampler.history_bytes() == bytes_after_first  # memory never grew
    assert sampler.gpu_indices() == [0, 1]
    latest = sampler.latest
    for index in (0, 1):
        history = sampler.history(index)
        assert set(history) == set(HISTORY_COLUMNS)
        assert len(history["t"]) == 300
        assert sampler.rows_recorded(index) == polls
        assert np.all(np.diff(history["t"]) > 0)  # time keeps growing across laps
        assert history["t"][-1] == latest.timestamp
        assert history["memory_used"][-1] == latest.gpu(index).memory_used
        assert history["utilization_gpu"][-1] == latest.gpu(index).utilization_gpu
    # The newest 300 rows: 37 frames into the sixth lap, so the last 37 are the trace's start.
    tail = sampler.history(1)["memory_used"][-37:]
    assert tail.tolist() == [f.gpu(1).memory_used for f in trace.frames[:37]]


def test_sampler_thread_runs_a_replay_and_stops_promptly():
    sampler = Sampler(ReplaySource(DEMO), interval_s=0.0, capacity=500)
    seen = []
    sampler.add_listener(lambda frame: seen.append(frame.timestamp))
    sampler.add_listener(lambda frame: 1 / 0)  # a broken listener must not stop the others
    sampler.start()
    thread = next(t for t in threading.enumerate() if t.name == "specdeck-gpu-sampler")
    deadline = time.monotonic() + 30
    while sampler.polls < 1500 and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.stop()  # joins the thread: the loop sees the stop between two polls
    assert not thread.is_alive() and not sampler.is_running and sampler.polls >= 1500
    assert len(sampler.history(1)["t"]) == 500
    assert len(seen) == sampler.polls and seen == sorted(seen)


def test_sampler_survives_a_source_that_raises():
    class Flaky:
        name, synthetic = "flaky", False

        def __init__(self):
            self.calls = 0
            self.replay = ReplaySource(DEMO)

        def open(self):
            return None

        def close(self):
            return None

        def read(self):
            self.calls += 1
            if self.calls % 2 == 0:
                raise OSError("driver hiccup")
            return self.replay.read()

    sampler = Sampler(Flaky())
    frames = [sampler.poll_once() for _ in range(6)]
    assert [f.state for f in frames] == [TelemetryState.OK, TelemetryState.ERROR] * 3
    assert "OSError: driver hiccup" in frames[1].detail
    assert len(sampler.history(0)["t"]) == 3  # only the good frames became history


def test_set_source_restarts_with_fresh_history():
    sampler = Sampler(ReplaySource(DEMO), interval_s=0.0)
    for _ in range(10):
        sampler.poll_once()
    sampler.start()
    sampler.set_source(NvmlSource() if not NVML_PRESENT else ReplaySource(DEMO))
    assert sampler.is_running
    before, deadline = sampler.polls, time.monotonic() + 10
    while sampler.polls == before and time.monotonic() < deadline:  # the new source polled
        time.sleep(0.01)
    sampler.stop()
    if not NVML_PRESENT:
        assert sampler.gpu_indices() == []
        assert sampler.latest.state is TelemetryState.NO_LIBRARY


def test_sampler_rejects_a_bad_interval():
    with pytest.raises(ValueError):
        Sampler(interval_s=-1)


# traces -------------------------------------------------------------------------------------
def test_demo_trace_is_marked_synthetic_and_consistent():
    trace = load_trace(DEMO)
    assert trace.synthetic and "SYNTHETIC" in trace.description
    assert trace.interval_s == 0.25 and len(trace.frames) == 480
    first = trace.frames[0]
    assert first.synthetic and first.source == "replay:demo-5090-4090-70b.jsonl"
    g4090, g5090 = first.gpus
    assert (g4090.index, g4090.cuda_index) == (0, 1) and (g5090.index, g5090.cuda_index) == (1, 0)
    for frame in trace.frames:
        for gpu in frame.gpus:
            assert gpu.memory_used + gpu.memory_free + gpu.memory_reserved == gpu.memory_total
            assert gpu.memory_used == sum(p.used_bytes for p in gpu.processes)
            assert 0 <= gpu.utilization_gpu <= 100 and 0 < gpu.power_w <= gpu.power_limit_w
            assert gpu.own_bytes == 0  # SpecDeck drives TabbyAPI and holds no GPU memory
    # Loading makes memory climb on the 5090, then on the 4090, and never fall back.
    used = np.array([f.gpu(1).memory_used for f in trace.frames])
    assert used[0] == 0 and used[-1] > 28 * 1024**3 and np.all(np.diff(used) >= 0)


def test_replay_loops_with_growing_timestamps():
    trace = load_trace(DEMO)
    source = ReplaySource(trace)
    stamps = [source.read().timestamp for _ in range(2 * len(trace.frames) + 1)]
    assert np.all(np.diff(stamps) > 0)
    once = ReplaySource(trace, loop=False)
    for _ in range(len(trace.frames)):
        once.read()
    assert once.finished and once.read() is trace.frames[-1]


def _write(path, lines):
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


HEADER = {"format": "specdeck-gpu-trace", "version": 1, "own_pid": 7,
          "gpus": [{"index": 0, "name": "Tesla T4", "memory_total": 16 * 1024**3},
                   {"index": 1, "name": "GeForce GTX 1080", "memory_total": 8 * 1024**3}]}


def test_unsupported_fields_are_none_and_a_lost_gpu_keeps_its_row(tmp_path):
    path = _write(tmp_path / "t.jsonl", [HEADER, {"t": 0, "gpus": [
        {"index": 0, "used": 1024**3, "util": 12, "fan": None, "power_w": None,
         "procs": [[7, "specdeck", 512 * 1024**2], [9, "python", None]]},
        {"index": 1, "status": "lost"}]}])
    frame = read_once(ReplaySource(path))
    t4, lost = frame.gpus
    assert t4.fan_percent is None and t4.power_w is None and t4.temperature_c is None
    assert t4.memory_reserved is None and t4.memory_free == 15 * 1024**3
    assert t4.own_bytes == 512 * 1024**2
    assert [p.is_self for p in t4.processes] == [True, False]
    assert t4.processes[1].used_bytes is None
    assert lost.status is GpuStatus.LOST and lost.name == "GeForce GTX 1080"
    assert lost.memory_used is None
    sampler = Sampler(ReplaySource(path))
    sampler.poll_once()
    assert sampler.history(1)["lost"][-1] == 1.0 and np.isnan(sampler.history(1)["memory_used"][-1])


@pytest.mark.parametrize("lines,match", [
    (["not json"], "line 1 is not valid JSON"),
    ([{"format": "other"}], "not a SpecDeck GPU trace"),
    ([{**HEADER, "version": 9}], "version 9"),
    ([HEADER], "no samples"),
    ([HEADER, {"gpus": []}], "no time"),
    ([HEADER, {"t": 0, "gpus": [{"index": 5}]}], "does not list"),
])
def test_malformed_traces_are_user_errors(tmp_path, lines, match):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines))
    with pytest.raises(InvalidInputError, match=match):
        load_trace(path)


def test_missing_trace_is_not_found(tmp_path):
    with pytest.raises(NotFoundError):
        load_trace(tmp_path / "nope.jsonl")


def test_recording_round_trips_through_the_trace_format(tmp_path):
    out = record_trace(ReplaySource(DEMO), tmp_path / "rec.jsonl", duration_s=5.0, interval_s=0.25,
                       description="round trip", sleep=lambda s: None)
    again = load_trace(out)
    original = load_trace(DEMO)
    assert len(again.frames) == 20 and again.description == "round trip"
    assert again.header["own_pid"] is None
    assert again.synthetic  # a recording of a synthetic replay stays marked synthetic
    for mine, theirs in zip(again.frames, original.frames):
        assert mine.timestamp == theirs.timestamp
        assert [g.memory_used for g in mine.gpus] == [g.memory_used for g in theirs.gpus]
        assert [g.cuda_index for g in mine.gpus] == [g.cuda_index for g in theirs.gpus]
        assert [len(g.processes) for g in mine.gpus] == [len(g.processes) for g in theirs.gpus]


@pytest.mark.skipif(NVML_PRESENT, reason="this machine has an NVIDIA driver")
def test_recording_without_a_gpu_writes_nothing(tmp_path):
    with pytest.raises(InvalidInputError, match="No NVIDIA GPU detected"):
        record_trace(NvmlSource(), tmp_path / "rec.jsonl", duration_s=1.0)
    assert not (tmp_path / "rec.jsonl").exists()


def test_cancelled_recording_writes_nothing(tmp_path):
    from specdeck.core.errors import CancelledError

    cancel = threading.Event()
    cancel.set()
    with pytest.raises(CancelledError):
        record_trace(ReplaySource(DEMO), tmp_path / "rec.jsonl", 5.0, cancel=cancel,
                     sleep=lambda s: None)
    assert list(tmp_path.iterdir()) == []
