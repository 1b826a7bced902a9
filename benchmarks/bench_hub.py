"""Hub install: what verification, resume and progress cost over a plain HTTP download

Serves a 128 MB EXL2-shaped variant (real safetensors file + the TinyLlama tokenizer and
config fixtures) from the test suite's fake Hub on 127.0.0.1, then measures, each as the
median of RUNS runs:

- a plain streamed GET of the weights file through huggingface_hub's HTTP session, bytes
  thrown away (the ceiling: network + server, nothing else);
- huggingface_hub's own ``hf_hub_download`` into a folder (size check, no sha256);
- SpecDeck's ``install`` (staging, sha256 of every byte as it arrives, progress snapshots,
  atomic move, install marker);
- resuming an install cancelled at half of the weights file (re-hash of the kept half, then
  a Range request for the rest);
- the peak growth of the process's memory during an install (downloads stream: it must
  not grow with the file size).

Localhost removes the network, so these numbers isolate SpecDeck's own overhead; on a real
connection the download itself dominates. (Profiled on the 2-core dev machine, most of the
gap to hf_hub_download is fsync: every finished file and the staging state are flushed to
disk so a power cut cannot leave a "verified" file that is not on the disk; sha256 runs at
~1.5 GB/s there.)
"""

from __future__ import annotations

import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.report import Report, median
from tools.fixtures import fixtures_dir

ROOT = Path(__file__).resolve().parents[1]
RUNS = 3
WEIGHTS_MB = 128
REPO = "benchorg/Bench-Model-exl2"
BRANCH = "4.0bpw"


def _weights(size_mb: int) -> bytes:
    import numpy as np

    sys.path.insert(0, str(ROOT / "tests"))
    from hubserver import safetensors_bytes

    rows = size_mb * 1024 * 1024 // (4 * 4096)
    rng = np.random.default_rng(0)
    return safetensors_bytes({"model.layers.0.mlp.up_proj.q_weight":
                              rng.integers(-2**31, 2**31 - 1, (rows, 4096), dtype=np.int32)})


def _hub():
    sys.path.insert(0, str(ROOT / "tests"))
    from hubserver import FakeHub, FakeRepo, exl2_branch

    fixtures = fixtures_dir()
    files = exl2_branch(fixtures / "models" / "TinyLlama-1.1B-Chat-v1.0", 4.0, 6, layers=1, hidden=64)
    files["output.safetensors"] = _weights(WEIGHTS_MB)
    return FakeHub([FakeRepo(REPO, {"main": {"README.md": b"bench"}, BRANCH: files})]).start(), files


def _rate(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e6


def _plain_get(hub, size: int) -> float:
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import get_session

    url = hf_hub_url(REPO, "output.safetensors", revision=BRANCH, endpoint=hub.url)
    started = time.perf_counter()
    got = 0
    with get_session().stream("GET", url, follow_redirects=True) as response:
        for chunk in response.iter_bytes():
            got += len(chunk)
    assert got == size
    return time.perf_counter() - started


def _hf_download(hub, dest: Path) -> float:
    from huggingface_hub import hf_hub_download

    started = time.perf_counter()
    for name in ("config.json", "output.safetensors"):
        hf_hub_download(REPO, name, revision=BRANCH, local_dir=dest, endpoint=hub.url, token=False)
    return time.perf_counter() - started


def _install(hub, dest: Path) -> tuple[float, int]:
    from specdeck.core.hub import install

    events = []
    started = time.perf_counter()
    install(REPO, BRANCH, dest, endpoint=hub.url, progress=events.append)
    return time.perf_counter() - started, len(events)


def _resume(hub, dest: Path, size: int) -> float:
    from specdeck.core.errors import CancelledError
    from specdeck.core.hub import install

    stall = hub.stall("output.safetensors", at=size // 2)
    cancel = threading.Event()
    thread = threading.Thread(target=lambda: _swallow(install, CancelledError, REPO, BRANCH, dest,
                                                      endpoint=hub.url, cancel=cancel))
    thread.start()
    stall.reached.wait(120)
    time.sleep(0.2)
    cancel.set()
    thread.join()
    stall.release()
    started = time.perf_counter()
    install(REPO, BRANCH, dest, endpoint=hub.url)
    return time.perf_counter() - started


def _swallow(fn, error, *args, **kwargs) -> None:
    try:
        fn(*args, **kwargs)
    except error:
        pass


def _peak_rss_growth(hub, dest: Path) -> int:
    from specdeck.core.hub import install

    import psutil

    process = psutil.Process()
    base = process.memory_info().rss
    peak = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], process.memory_info().rss)

    sampler = threading.Thread(target=sample)
    sampler.start()
    install(REPO, BRANCH, dest, endpoint=hub.url)
    done.set()
    sampler.join()
    return peak[0] - base


def run(report: Report) -> None:
    os.environ.setdefault("SPECDECK_HOME", tempfile.mkdtemp(prefix="specdeck-bench-"))
    hub, files = _hub()
    size = len(files["output.safetensors"])
    total = sum(len(d) for d in files.values())
    work = Path(tempfile.mkdtemp(prefix="specdeck-bench-hub-"))
    try:
        _plain_get(hub, size)  # warm up the connection pool and the page cache
        plain = median([_plain_get(hub, size) for _ in range(RUNS)])
        hf_times, install_times, resume_times, events = [], [], [], []
        for i in range(RUNS):
            hf_times.append(_hf_download(hub, work / f"hf{i}"))
            seconds, count = _install(hub, work / f"install{i}")
            install_times.append(seconds)
            events.append(count)
            resume_times.append(_resume(hub, work / f"resume{i}", size))
        growth = _peak_rss_growth(hub, work / "rss")
    finally:
        hub.stop()
        shutil.rmtree(work, ignore_errors=True)

    hf_bytes = size + len(files["config.json"])
    rows = [
        ["plain GET of the weights (bytes discarded)", f"{plain:.2f}", f"{_rate(size, plain):.0f}"],
        ["hf_hub_download (config + weights)", f"{median(hf_times):.2f}", f"{_rate(hf_bytes, median(hf_times)):.0f}"],
        ["SpecDeck install (all files, sha256, staging)", f"{median(install_times):.2f}",
         f"{_rate(total, median(install_times)):.0f}"],
        ["SpecDeck resume from 50% of the weights", f"{median(resume_times):.2f}", ""],
    ]
    report.text(f"Variant: {total / 1e6:.1f} MB in {len(files)} files; weights file {size / 1e6:.1f} MB. "
                f"Median of {RUNS} runs on 127.0.0.1.")
    report.table(["transfer", "seconds", "MB/s"], rows)
    report.text(f"Install vs plain GET throughput: {_rate(total, median(install_times)) / _rate(size, plain):.2f}x. "
                f"Progress snapshots per install: {median(events):.0f}. "
                f"Peak memory growth during an install: {growth / 1e6:.1f} MB "
                f"(max RSS of the process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3:.0f} MB).")
    report.record("plain_get_s", plain)
    report.record("hf_hub_download_s", median(hf_times))
    report.record("install_s", median(install_times))
    report.record("resume_half_s", median(resume_times))
    report.record("install_mb_per_s", _rate(total, median(install_times)))
    report.record("plain_get_mb_per_s", _rate(size, plain))
    report.record("progress_events", median(events))
    report.record("peak_rss_growth_bytes", growth)
