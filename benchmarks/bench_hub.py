"""Hub install: what verification, resume and progress cost over a plain HTTP download

Serves a 128 MiB EXL2-shaped variant (real safetensors file + the TinyLlama tokenizer and
config fixtures) from the test suite's fake Hub on 127.0.0.1, then measures, each as the
median of RUNS interleaved runs (with the fastest and slowest beside it, and the CPU time
this process spent):

- a plain streamed GET of the weights file through huggingface_hub's HTTP session, bytes
  thrown away (the ceiling: network + server, nothing else);
- huggingface_hub's own ``hf_hub_download`` into a folder (size check, no sha256, no
  fsync): of config.json and the weights, as this benchmark always did, and of the same
  files SpecDeck installs;
- SpecDeck's ``install`` (planning requests, staging, sha256 of every byte as it arrives,
  progress snapshots, an fsync per file, atomic move, install marker);
- resuming an install cancelled at half of the weights file (the kept half hashed once,
  then a Range request for the rest);
- the peak growth of the process's memory during an install (downloads stream: it must
  not grow with the file size).

The install against hf_hub_download of the same files is also given as paired ratios (each
run's hf_hub_download time over the install's beside it) with the median's 95% interval, so
"at least as fast" is a verdict with its noise, not two medians side by side.

Localhost removes the network, so these numbers isolate the client's own overhead; on a real
connection the download itself dominates. The Hub serving the timed rows runs in a process of
its own, as a real server would (until 2026-11-27 it ran in this one, so its threads shared
this process's GIL and CPU figures, and a transfer's server and client work were serialised).
The resume row needs the fake Hub's stall hook, so it is served from this process. A second
install vs hf_hub_download pair runs with this process held to one core (sched_setaffinity),
the case that does not flatter the install's hashing thread: on a busy machine it has no core
of its own, and sha256 costs the install its full time again.

Where the time went (cProfile and timers on the 2-core dev machine, 2026-11-26): the fake
Hub answered every small response 44 ms late (Nagle's algorithm holding the body behind the
headers until the client's delayed ACK); an install makes 10 requests, hf_hub_download of
two files 4, so most of the gap in the first report was that stall (fixed in
tests/hubserver.py: TCP_NODELAY, as real servers set it). Of SpecDeck's own time on the
weights: receiving and parsing HTTP (httpx/h11, 64 KiB per read) 40-45%, sha256 and the
page-cache write 15-20% each, the fsyncs about 10% (27 calls, 12 of them for the staging
state saved after each file), and a progress snapshot built per 64 KiB chunk about 9%.
Since: snapshots per 0.1 s, the state saved per 64 MiB or second (15 fsyncs), the disk
asked to write every 8 MiB as it arrives so the file's one fsync has little left.
hf_hub_download joins the 64 KiB reads into 10 MiB chunks before writing them, which costs
it more CPU than SpecDeck's sha256; joining into 1 MiB blocks measured slower for SpecDeck
too, so each chunk is written and hashed as it arrives.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from specdeck.core.units import KiB, MiB, format_bytes

from benchmarks.report import Report, median
from tools.fixtures import fixtures_dir

ROOT = Path(__file__).resolve().parents[1]
RUNS = 15
WEIGHTS = 128 * MiB
REPO = "benchorg/Bench-Model-exl2"
BRANCH = "4.0bpw"


def _weights(size: int) -> bytes:
    import numpy as np

    sys.path.insert(0, str(ROOT / "tests"))
    from hubserver import safetensors_bytes

    rows = size // (4 * 4096)
    rng = np.random.default_rng(0)
    return safetensors_bytes({"model.layers.0.mlp.up_proj.q_weight":
                              rng.integers(-2**31, 2**31 - 1, (rows, 4096), dtype=np.int32)})


def _hub():
    sys.path.insert(0, str(ROOT / "tests"))
    from hubserver import FakeHub, FakeRepo, exl2_branch

    fixtures = fixtures_dir()
    files = exl2_branch(fixtures / "models" / "TinyLlama-1.1B-Chat-v1.0", 4.0, 6, layers=1, hidden=64)
    files["output.safetensors"] = _weights(WEIGHTS)
    return FakeHub([FakeRepo(REPO, {"main": {"README.md": b"bench"}, BRANCH: files})]).start(), files


def _serve(conn) -> None:
    """The fake Hub in a child process: sends its URL and file sizes, serves until told."""
    hub, files = _hub()
    conn.send((hub.url, {name: len(data) for name, data in files.items()}))
    conn.recv()
    hub.stop()


class _HubProcess:
    """The fake Hub, served from a process of its own (``url`` as FakeHub has it)."""

    def __init__(self) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child,), daemon=True)
        self._process.start()
        self.url, self.sizes = self._conn.recv()

    def stop(self) -> None:
        self._conn.send("stop")
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()


@contextlib.contextmanager
def _one_core():
    """This thread (and the threads it starts) on one core only, while the block runs."""
    cores = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cores)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, cores)


def _rate(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e6


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed(fn, *args) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the whole process) of one call, started with no dirty
    pages of an earlier row still being written: hf_hub_download leaves ~134 MB for the
    kernel to write after it returns, and an install's fsync queued behind that write-back
    measured the run before it, not itself."""
    os.sync()
    cpu, started = _cpu_s(), time.perf_counter()
    fn(*args)
    return time.perf_counter() - started, _cpu_s() - cpu


def _plain_get(hub, size: int) -> None:
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import get_session

    url = hf_hub_url(REPO, "output.safetensors", revision=BRANCH, endpoint=hub.url)
    got = 0
    with get_session().stream("GET", url, follow_redirects=True) as response:
        for chunk in response.iter_bytes():
            got += len(chunk)
    assert got == size


def _hf_download(hub, dest: Path, names) -> None:
    from huggingface_hub import hf_hub_download

    for name in names:
        hf_hub_download(REPO, name, revision=BRANCH, local_dir=dest, endpoint=hub.url, token=False)


def _install(hub, dest: Path, events: list) -> None:
    from specdeck.core.hub import install

    install(REPO, BRANCH, dest, endpoint=hub.url, progress=events.append)


def _cancel_at_half(hub, dest: Path, size: int) -> None:
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


def _resume(hub, dest: Path) -> None:
    from specdeck.core.hub import install

    install(REPO, BRANCH, dest, endpoint=hub.url)


def _swallow(fn, error, *args, **kwargs) -> None:
    try:
        fn(*args, **kwargs)
    except error:
        pass


def _peak_rss_growth(hub, dest: Path) -> int:
    import psutil
    from specdeck.core.hub import install

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


def _row(label: str, runs: list[tuple[float, float]], nbytes: int | None) -> list[str]:
    walls = [w for w, _ in runs]
    wall = median(walls)
    rate = f"{_rate(nbytes, wall):.0f}" if nbytes else ""
    return [label, f"{wall:.2f}", f"{min(walls):.2f}-{max(walls):.2f}", rate, f"{median([c for _, c in runs]):.2f}"]


def run(report: Report) -> None:
    from specdeck.core.bench.stats import paired_ratios, summarize_ratios

    os.environ.setdefault("SPECDECK_HOME", tempfile.mkdtemp(prefix="specdeck-bench-"))
    served = _HubProcess()  # the timed rows: the server's work is not this process's
    hub, files = _hub()  # the resume row, which needs the stall hook
    size = len(files["output.safetensors"])
    total = sum(len(d) for d in files.values())
    assert served.sizes == {name: len(data) for name, data in files.items()}
    hf_names = ("config.json", "output.safetensors")
    hf_bytes = sum(len(files[n]) for n in hf_names)
    work = Path(tempfile.mkdtemp(prefix="specdeck-bench-hub-"))
    load_before = os.getloadavg()
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in ("plain", "hf", "hf_all", "install", "resume", "hf_one_core", "install_one_core")}
    events: list[int] = []
    try:
        # warm up the connection pool, the page cache and both clients' imports
        _plain_get(served, size)
        _hf_download(served, work / "warm-hf", hf_names)
        _install(served, work / "warm-install", [])
        for i in range(RUNS):  # interleaved, so a burst of load hits every row alike
            runs["plain"].append(_timed(_plain_get, served, size))
            runs["hf"].append(_timed(_hf_download, served, work / f"hf{i}", hf_names))
            seen: list = []
            pair = [("hf_all", _hf_download, (served, work / f"hfall{i}", sorted(files))),
                    ("install", _install, (served, work / f"install{i}", seen))]
            one_core = [("hf_one_core", _hf_download, (served, work / f"hfone{i}", sorted(files))),
                        ("install_one_core", _install, (served, work / f"installone{i}", []))]
            if i % 2:  # each goes first in half the runs: no order favours either
                pair.reverse()
                one_core.reverse()
            for name, fn, args in pair:
                runs[name].append(_timed(fn, *args))
            events.append(len(seen))
            with _one_core():
                for name, fn, args in one_core:
                    runs[name].append(_timed(fn, *args))
            # last: the Hub in this process, whose threads may still be busy after the cancel
            _cancel_at_half(hub, work / f"resume{i}", size)
            runs["resume"].append(_timed(_resume, hub, work / f"resume{i}"))
            for name in ("hf", "hfall", "install", "resume", "hfone", "installone"):  # keep the disk's dirty pages few
                shutil.rmtree(work / f"{name}{i}", ignore_errors=True)
        growth = _peak_rss_growth(served, work / "rss")
    finally:
        hub.stop()
        served.stop()
        shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()

    wall = {k: median([w for w, _ in v]) for k, v in runs.items()}
    install_rate = _rate(total, wall["install"])
    hf_rate = _rate(hf_bytes, wall["hf"])
    hf_all_rate = _rate(total, wall["hf_all"])
    # > 1: the install took less time than hf_hub_download of the same files beside it
    paired = summarize_ratios(paired_ratios([w for w, _ in runs["install"]], [w for w, _ in runs["hf_all"]]))
    one_core = summarize_ratios(paired_ratios([w for w, _ in runs["install_one_core"]],
                                              [w for w, _ in runs["hf_one_core"]]))
    report.text(f"Variant: {format_bytes(total)} in {len(files)} files; weights file {format_bytes(size)}. "
                f"Median of {RUNS} interleaved runs on 127.0.0.1, the Hub in a process of its own; "
                f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after "
                f"(on {os.cpu_count()} cores). CPU s is this process's (the client's).")
    report.text()
    report.table(["transfer", "seconds (median)", "fastest-slowest", "MB/s (median)", "CPU s (median)"], [
        _row("plain GET of the weights (bytes discarded)", runs["plain"], size),
        _row("hf_hub_download (config + weights)", runs["hf"], hf_bytes),
        _row(f"hf_hub_download (the same {len(files)} files as the install)", runs["hf_all"], total),
        _row("SpecDeck install (all files, sha256, staging)", runs["install"], total),
        _row("SpecDeck resume from 50% of the weights (Hub in this process)", runs["resume"], None),
        _row(f"hf_hub_download (the same {len(files)} files), this process on one core", runs["hf_one_core"], total),
        _row("SpecDeck install, this process on one core", runs["install_one_core"], total),
    ])
    report.text(f"Install vs hf_hub_download of the same files, paired (hf_hub_download's time over "
                f"the install's, run by run): median {paired.median:.2f}x, "
                f"{paired.interval_text()}: {paired.verdict.replace('faster', 'the install is faster')}. "
                f"With this process on one core (the hashing thread has no core of its own, the case "
                f"that does not flatter it): median {one_core.median:.2f}x, {one_core.interval_text()}: "
                f"{one_core.verdict.replace('faster', 'the install is faster')}. "
                f"Medians alone: {install_rate / hf_rate:.2f}x against config + weights, "
                f"{install_rate / hf_all_rate:.2f}x against the same files. "
                f"Install vs plain GET throughput: {install_rate / _rate(size, wall['plain']):.2f}x. "
                f"Progress snapshots per install: {median(events):.0f}. "
                f"Peak memory growth during an install: {format_bytes(growth)} "
                f"(max RSS of the process: {format_bytes(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * KiB)}).")
    report.record("plain_get_s", wall["plain"])
    report.record("hf_hub_download_s", wall["hf"])
    report.record("hf_hub_download_same_files_s", wall["hf_all"])
    report.record("install_s", wall["install"])
    report.record("resume_half_s", wall["resume"])
    report.record("install_mb_per_s", install_rate)
    report.record("hf_hub_download_mb_per_s", hf_rate)
    report.record("hf_hub_download_same_files_mb_per_s", hf_all_rate)
    report.record("plain_get_mb_per_s", _rate(size, wall["plain"]))
    report.record("install_vs_hf_hub_download", install_rate / hf_rate)
    report.record("install_vs_hf_hub_download_same_files", install_rate / hf_all_rate)
    report.record("install_vs_hf_hub_download_paired", {
        "median": paired.median, "ci_low": paired.ci_low, "ci_high": paired.ci_high,
        "pairs": paired.n, "verdict": paired.verdict})
    report.record("install_vs_hf_hub_download_one_core_paired", {
        "median": one_core.median, "ci_low": one_core.ci_low, "ci_high": one_core.ci_high,
        "pairs": one_core.n, "verdict": one_core.verdict})
    report.record("runs", {k: [{"wall_s": w, "cpu_s": c} for w, c in v] for k, v in runs.items()})
    report.record("load_average", {"before": load_before, "after": load_after})
    report.record("progress_events", median(events))
    report.record("peak_rss_growth_bytes", growth)
