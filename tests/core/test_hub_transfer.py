"""The installer's data path: one pass over the bytes, a resume that hashes the kept part once,
and checks that still catch every damaged byte.

Real parts: the fake Hub (a real HTTP server on 127.0.0.1, tests/hubserver.py) serving a
real 16 MiB safetensors file beside the real TinyLlama tokenizer and config fixtures, the
real filesystem, and the kernel's own count of the bytes this process read from files
(/proc/self/io, ``rchar``: every read(2)/pread(2)/readv(2), page cache included; socket
receives are not counted), so "no second pass" is checked on what the process did, not on
how long it took.
"""

from __future__ import annotations

import hashlib
import resource
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import MODELS
from hubserver import BODY_CHUNK, FakeHub, FakeRepo, exl2_branch, safetensors_bytes
from specdeck.core.errors import CancelledError, SpecDeckError
from specdeck.core.hub import IntegrityError, RetryPolicy, install, plan_install, verify_installed
from specdeck.core.hub.client import HubClient
from specdeck.core.hub.progress import InstallProgress, ProgressTracker
from specdeck.core.hub.transfer import (
    HASH_BATCH_BYTES,
    HASH_BLOCK,
    HASH_QUEUE_BATCHES,
    WRITEBACK_BYTES,
    _DigestBehind,
    _writeback,
    download_file,
    file_digest,
)

REPO = "speedorg/TinyLlama-1.1B-Chat-v1.0-exl2"
BRANCH = "4.0bpw"
WEIGHTS = "output.safetensors"
WEIGHTS_MIB = 16
FAST = RetryPolicy(first_delay_s=0.01, max_delay_s=0.05)
PROC_IO = Path("/proc/self/io")
needs_proc_io = pytest.mark.skipif(not PROC_IO.exists(), reason="the kernel's per-process I/O counters are Linux-only")


@pytest.fixture(scope="module")
def branch_files() -> dict[str, bytes]:
    files = exl2_branch(MODELS / "TinyLlama-1.1B-Chat-v1.0", 4.0, 6, layers=1, hidden=64)
    rows = WEIGHTS_MIB * 1024 * 1024 // (4 * 4096)
    tensor = np.random.default_rng(27).integers(-2**31, 2**31 - 1, (rows, 4096), dtype=np.int32)
    files[WEIGHTS] = safetensors_bytes({"model.layers.0.mlp.up_proj.q_weight": tensor})
    assert len(files[WEIGHTS]) % HASH_BLOCK, "a size that is not a whole number of read blocks"
    return files


@pytest.fixture
def hub(branch_files):
    with FakeHub([FakeRepo(REPO, {"main": branch_files, BRANCH: branch_files})]) as server:
        yield server


def bytes_read_from_files() -> int:
    for line in PROC_IO.read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("/proc/self/io has no rchar line")


def weights_entry(hub, dest):
    plan = plan_install(REPO, BRANCH, dest, endpoint=hub.url)
    return plan, next(f for f in plan.files if f.path == WEIGHTS)


def weights_ranges(hub) -> list[str | None]:
    return [r.range for r in hub.file_requests() if r.file == WEIGHTS and r.origin == "cdn"]


def cancel_at_half(hub, dest, at: int | None = None) -> int:
    """Start an install, cancel it while the weights are half sent (or stalled at ``at``);
    the bytes kept. Every byte sent before the stall must be on disk while it lasts."""
    size = len(hub.repos[REPO].branches[BRANCH][WEIGHTS])
    at = size // 2 if at is None else at
    checksum = hashlib.sha256(hub.repos[REPO].branches[BRANCH][WEIGHTS]).hexdigest()
    stall = hub.stall(WEIGHTS, at=at)
    cancel = threading.Event()
    failed: list[BaseException] = []

    def run():
        try:
            install(REPO, BRANCH, dest, endpoint=hub.url, cancel=cancel)
        except BaseException as exc:  # noqa: BLE001 - checked below
            failed.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    assert stall.reached.wait(30), "the download never reached the stall point"
    weights_part, deadline = None, time.monotonic() + 20
    while weights_part is None and time.monotonic() < deadline:  # every byte sent is on disk
        big = [p for p in dest.glob(f".*.specdeck-staging/parts/{checksum}.part") if p.stat().st_size >= at]
        weights_part = big[0] if big else time.sleep(0.02)
    cancel.set()
    thread.join(20)
    stall.release()
    assert not thread.is_alive() and isinstance(failed[0], CancelledError)
    assert weights_part is not None
    return weights_part.stat().st_size


# ---------------------------------------------------------------------------------------
# one pass


@needs_proc_io
def test_an_install_reads_no_downloaded_byte_back(hub, tmp_path, branch_files):
    install(REPO, BRANCH, tmp_path / "warm", endpoint=hub.url)  # imports and caches, once
    total = sum(len(d) for d in branch_files.values())

    before = bytes_read_from_files()
    result = install(REPO, BRANCH, tmp_path / "models", endpoint=hub.url)
    read = bytes_read_from_files() - before

    assert result.status == "installed" and result.downloaded_bytes == total
    for path, data in branch_files.items():
        assert (result.path / path).read_bytes() == data
    # A verification pass would read every byte again (total is 19 MB); what is read is
    # SpecDeck's own state and the installed config.json.
    assert read < total // 16, f"{read} bytes read back during an install of {total}"

    # The counter does see a second pass: verifying the installed folder reads it all.
    before = bytes_read_from_files()
    assert verify_installed(result.path) == []
    assert bytes_read_from_files() - before >= total


def test_bytes_received_before_a_stall_are_on_disk_while_it_lasts(hub, tmp_path):
    # The last piece before the stall is 100 bytes: a buffered writer held such a piece back
    # until the file closed (CI saw it once, when a short read under load split a chunk).
    at = BODY_CHUNK * 3 + 100
    assert cancel_at_half(hub, tmp_path / "models", at=at) == at


@needs_proc_io
def test_a_resume_hashes_the_kept_part_once(hub, tmp_path, branch_files):
    dest = tmp_path / "models"
    kept = cancel_at_half(hub, dest)
    size = len(branch_files[WEIGHTS])
    assert size // 2 <= kept < size

    before = bytes_read_from_files()
    result = install(REPO, BRANCH, dest, endpoint=hub.url)
    read = bytes_read_from_files() - before

    assert result.status == "installed" and result.resumed_bytes >= kept
    assert (result.path / WEIGHTS).read_bytes() == branch_files[WEIGHTS]
    assert weights_ranges(hub) == [None, f"bytes={kept}-"]
    # The kept half read once to rebuild its hash; twice would be the whole file again.
    assert kept <= read < kept + size // 16, f"read {read} bytes to resume from {kept}"


# ---------------------------------------------------------------------------------------
# the resumed hash


@pytest.mark.parametrize("cut", [1, HASH_BLOCK - 1, HASH_BLOCK, HASH_BLOCK + 1, 5 * HASH_BLOCK + 17, -1])
def test_a_resumed_hash_equals_the_hash_of_the_whole_file(hub, tmp_path, branch_files, cut):
    data = branch_files[WEIGHTS]
    cut = cut % len(data)
    plan, remote = weights_entry(hub, tmp_path)
    part = tmp_path / "w.part"
    part.write_bytes(data[:cut])  # what an earlier attempt kept

    seen = []
    download_file(HubClient(hub.url, False), REPO, plan.commit, remote, part, on_bytes=seen.append)

    assert part.read_bytes() == data
    assert remote.sha256 == hashlib.sha256(data).hexdigest()  # the fake Hub's published id
    assert file_digest(part, remote) == remote.sha256
    assert weights_ranges(hub) == [f"bytes={cut}-"], "only the rest was asked for"
    assert sum(seen) == len(data) - cut, "progress counts the new bytes, not the kept ones"


def test_a_byte_damaged_in_the_kept_part_is_caught(hub, tmp_path, branch_files):
    data = branch_files[WEIGHTS]
    plan, remote = weights_entry(hub, tmp_path)
    part = tmp_path / "w.part"
    damaged = bytearray(data[: len(data) // 2])
    damaged[12345] ^= 0x01  # flipped on disk while the install was stopped
    part.write_bytes(bytes(damaged))

    with pytest.raises(IntegrityError, match="sha256 check") as info:
        download_file(HubClient(hub.url, False), REPO, plan.commit, remote, part)
    assert "removed" in str(info.value)
    assert not part.exists(), "the damaged part is not kept for another resume"


def test_a_byte_damaged_after_the_resume_point_is_caught(hub, tmp_path, branch_files):
    data = branch_files[WEIGHTS]
    plan, remote = weights_entry(hub, tmp_path)
    part = tmp_path / "w.part"
    cut = len(data) // 2
    part.write_bytes(data[:cut])
    hub.corrupt(WEIGHTS, at=cut + 3 * HASH_BLOCK + 5, times=1)  # in transit, in the new bytes

    with pytest.raises(IntegrityError, match="sha256 check"):
        download_file(HubClient(hub.url, False), REPO, plan.commit, remote, part)
    assert not part.exists()
    assert weights_ranges(hub) == [f"bytes={cut}-"]


def test_an_install_resumed_over_a_damaged_part_downloads_it_again(hub, tmp_path, branch_files):
    dest = tmp_path / "models"
    kept = cancel_at_half(hub, dest)
    (part,) = [p for p in dest.glob(".*.specdeck-staging/parts/*.part") if p.stat().st_size == kept]
    with part.open("r+b") as handle:
        handle.seek(kept // 3)
        byte = handle.read(1)
        handle.seek(kept // 3)
        handle.write(bytes([byte[0] ^ 0x80]))

    result = install(REPO, BRANCH, dest, endpoint=hub.url)

    assert (result.path / WEIGHTS).read_bytes() == branch_files[WEIGHTS]
    assert weights_ranges(hub) == [None, f"bytes={kept}-", None], "resumed, refused, fetched whole"
    assert sorted(p.name for p in dest.iterdir()) == [result.path.name]


# ---------------------------------------------------------------------------------------
# errors on the writing side


def test_a_write_that_fails_mid_file_stops_the_install_and_keeps_what_was_written(hub, tmp_path, branch_files):
    """A real write error, from the kernel: a file size limit (RLIMIT_FSIZE) makes write(2)
    fail with EFBIG once the part reaches it (Python ignores SIGXFSZ, so the call fails
    instead of the process being killed)."""
    dest = tmp_path / "models"
    limit = 2 * 1024 * 1024 + 3
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        with pytest.raises(SpecDeckError, match="Cannot write .*File too large") as info:
            install(REPO, BRANCH, dest, endpoint=hub.url, retry=FAST)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert not isinstance(info.value, IntegrityError)
    assert [p.name for p in dest.iterdir() if not p.name.startswith(".")] == []
    (part,) = [p for p in dest.glob(".*.specdeck-staging/parts/*.part") if p.stat().st_size > 500_000]
    kept = part.stat().st_size
    assert 0 < kept <= limit
    assert part.read_bytes() == branch_files[WEIGHTS][:kept], "what was written is the file's start"

    result = install(REPO, BRANCH, dest, endpoint=hub.url)
    assert (result.path / WEIGHTS).read_bytes() == branch_files[WEIGHTS]
    assert f"bytes={kept}-" in weights_ranges(hub)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_early_writeback_is_a_working_call_on_linux(tmp_path):
    """The writeback hint's ctypes binding is right (a wrong argument type or flag would make
    every call fail with EINVAL, silently, since the install ignores its result)."""
    start = _writeback()
    assert start is not None
    path = tmp_path / "f"
    with path.open("wb") as handle:
        handle.write(b"x" * 3 * WRITEBACK_BYTES)
        handle.flush()
        assert start(handle.fileno(), WRITEBACK_BYTES, 2 * WRITEBACK_BYTES) == 0
        assert start(handle.fileno(), -1, 10) == -1  # the kernel does check what it is given
    assert path.read_bytes() == b"x" * 3 * WRITEBACK_BYTES


# ---------------------------------------------------------------------------------------
# progress: cheap per chunk, a snapshot per interval


class ManualClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_makes_a_snapshot_per_interval_not_per_chunk():
    clock, step = ManualClock(), 0.25  # exact in binary: no rounding at the interval's edge
    events: list[InstallProgress] = []
    tracker = ProgressTracker(events.append, InstallProgress("checking", REPO, BRANCH, total=10_000_000),
                              interval=step, clock=clock)
    tracker.start_file(WEIGHTS, 10_000_000, 0)
    assert len(events) == 1

    for _ in range(100):  # 100 chunks within one interval: no snapshot
        tracker.add(65536)
    assert len(events) == 1
    assert tracker.state.done == tracker.state.file_done == 100 * 65536  # counted all the same

    clock.now += step
    tracker.add(65536)
    assert len(events) == 2 and events[-1].done == 101 * 65536
    clock.now += step
    tracker.add(65536)
    assert len(events) == 3
    assert events[-1].rate == pytest.approx(102 * 65536 / (2 * step))
    assert events[-1].eta_s == pytest.approx((10_000_000 - 102 * 65536) / events[-1].rate)

    tracker.add(-102 * 65536)  # the file restarts: the rate starts over from there
    assert tracker.state.done == tracker.state.file_done == 0
    clock.now += step
    tracker.add(1000)
    assert events[-1].done == 1000 and events[-1].rate == pytest.approx(1000 / step)

    tracker.finish_file()
    assert events[-1].files_done == 1 and events[-1].done == 1000


# ---------------------------------------------------------------------------------------
# hashing behind the writes


class _Recording:
    """A real sha256 that notes which thread fed it."""

    def __init__(self, fail_after: int | None = None):
        self.inner = hashlib.sha256()
        self.threads: set[str] = set()
        self.calls = 0
        self.fail_after = fail_after

    def update(self, data) -> None:
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise MemoryError("hash failed")
        self.threads.add(threading.current_thread().name)
        self.inner.update(data)


@pytest.mark.parametrize("sizes", [[], [1], [65536] * 16, [65536] * 16 + [7], [HASH_BATCH_BYTES + 1, 3, 65536] * 9])
def test_the_digest_behind_is_the_hash_of_every_chunk_once_closed(sizes):
    rng = np.random.default_rng(len(sizes))
    chunks = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in sizes]
    digest = _Recording()
    behind = _DigestBehind(digest)
    for chunk in chunks:
        behind.update(chunk)
    behind.close()

    assert digest.inner.hexdigest() == hashlib.sha256(b"".join(chunks)).hexdigest()
    assert threading.current_thread().name not in digest.threads, "hashed on its own thread"


def test_a_digest_that_fails_behind_reaches_the_downloader_at_close_without_blocking_it():
    digest = _Recording(fail_after=2)
    behind = _DigestBehind(digest)
    finished = threading.Event()

    def feed() -> None:  # far more batches than the queue holds: a dead hasher would block it
        for _ in range(4 * HASH_QUEUE_BATCHES):
            behind.update(b"x" * HASH_BATCH_BYTES)
        finished.set()

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    assert finished.wait(30), "update blocked behind a failed hash"
    with pytest.raises(MemoryError, match="hash failed"):
        behind.close()
