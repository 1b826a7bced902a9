"""Download one file into a partial file that survives interruptions, and verify it.

This is the part huggingface_hub does not offer: since 2.x, ``hf_hub_download`` writes each
download to a temporary file with a per-process name and deletes it on any failure, so an
interrupted multi-gigabyte download starts again from zero, and a download cannot be
cancelled from another thread. Here:

- bytes go to a ``.part`` file that is kept on cancel, on a dropped connection, or when the
  process dies, and the next attempt asks the server only for the rest (HTTP ``Range``);
- the file is hashed as it arrives (on a thread of its own, while the next bytes are
  received and written; the kept part is re-hashed once first) and checked
  against the checksum the Hub publishes in its tree listing: the LFS sha256, or for small
  files the git blob id. A mismatch removes the part and raises IntegrityError. Nothing is
  read back after the download: the running hash of the bytes written is the check;
- a cancel closes the connection at once, even when the server has gone silent;
- a dropped connection, a timeout, HTTP 429 or 5xx are retried with back-off, resuming where
  the bytes stopped; after ``RetryPolicy.attempts`` failures in a row without new bytes the
  error reaches the user, and the part stays for a later resume.

Requests go through huggingface_hub's shared HTTP session with its headers (user agent,
token); redirects to a CDN are followed and, being cross-origin, drop the token.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import logging
import os
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdeck.core.errors import CancelledError, SpecDeckError
from specdeck.core.hub.client import HubClient, RemoteFile
from specdeck.core.hub.errors import (
    HubConnectionError,
    InsufficientSpaceError,
    IntegrityError,
    is_transport_error,
)
from specdeck.core.units import MiB, format_bytes

log = logging.getLogger(__name__)

# Reading a file to hash it (a kept part, verify_installed): one reusable buffer filled by
# readinto, one syscall per MiB, small enough to stay in the CPU's cache between the read
# and the hash. Measured on 128 MiB in the page cache: 0.11 s of CPU, against 0.12 s for a
# new 8 MiB bytes object per read.
HASH_BLOCK = MiB
# Every this many bytes written to a part, the kernel is asked to start writing them to the
# disk (Linux: sync_file_range), so the disk works while the download goes on and the one
# fsync at the end of the file has little left to wait for, as RocksDB's bytes_per_sync and
# PostgreSQL's *_flush_after do. Only a hint: the fsync is what makes the file durable.
# Measured on this project's 2-core machine: writing 128 MiB in 64 KiB chunks, the final
# fsync took 85 ms without it and 10 ms with it (write and fsync together: 264 -> 233 ms).
WRITEBACK_BYTES = 8 * MiB
# The hashing thread is handed the chunks written in batches of about this many bytes (one
# hand-over per MiB, not per 64 KiB chunk), at most HASH_QUEUE_BATCHES batches ahead of it:
# what it holds was written already, so memory stays bounded and a resume loses nothing.
HASH_BATCH_BYTES = MiB
HASH_QUEUE_BATCHES = 8


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try before telling the user the network failed."""

    attempts: int = 5  # failures in a row that brought no new bytes
    first_delay_s: float = 1.0
    max_delay_s: float = 30.0
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 60.0  # silence from the server before the connection is retried

    def delay(self, failures: int) -> float:
        return min(self.max_delay_s, self.first_delay_s * 2 ** max(0, failures - 1))


class _Retry(Exception):
    """A transient failure: try again after ``wait`` seconds (or the policy's back-off)."""

    def __init__(self, reason: str, wait: float | None = None):
        super().__init__(reason)
        self.wait = wait


class _Restart(Exception):
    """The server did not continue where the part ends: drop the part and start over."""


def new_digest(remote: RemoteFile) -> Any:
    """A hash object that ends at ``remote.expected_digest`` if the bytes are right."""
    if remote.is_lfs:
        return hashlib.sha256()
    digest = hashlib.sha1()
    # The git blob id hashes a header, then the content.
    digest.update(b"blob %d\0" % remote.size)
    return digest


def verify_bytes(data: bytes, remote: RemoteFile) -> None:
    """IntegrityError unless ``data`` is exactly the file the Hub listed as ``remote``."""
    digest = new_digest(remote)
    digest.update(data)
    if len(data) != remote.size or digest.hexdigest() != remote.expected_digest:
        raise IntegrityError(
            f"{remote.path} from the Hub does not match its published size and {remote.checksum_label}.",
            "Try again; if it keeps failing, a proxy or mirror may be altering files.",
        )


def hash_file(path: Path, digest: Any, cancel: threading.Event | None = None) -> int:
    """Feed ``path``'s bytes to ``digest`` in one pass; returns how many there were."""
    buffer = bytearray(HASH_BLOCK)
    view = memoryview(buffer)
    total = 0
    with path.open("rb", buffering=0) as handle:
        while count := handle.readinto(buffer):
            if cancel is not None and cancel.is_set():
                raise CancelledError()
            digest.update(view[:count])
            total += count
    return total


def file_digest(path: Path, remote: RemoteFile, cancel: threading.Event | None = None) -> str:
    """The checksum of a local file, computed the way the Hub computes ``remote``'s."""
    digest = new_digest(remote)
    hash_file(path, digest, cancel)
    return digest.hexdigest()


class _DigestBehind:
    """Feeds the chunks given to ``update`` to ``digest`` on a thread of its own.

    hashlib releases the GIL while it hashes a buffer, so sha256 runs on the second core while
    this thread receives and writes the next chunk: on the hub benchmark's 134 MB (server in
    its own process), sha256 took about a quarter of an install's CPU time on one thread.
    ``close`` waits until every chunk given has been hashed; only then is ``digest`` the hash
    of the bytes written.
    """

    def __init__(self, digest: Any):
        self.digest = digest
        self._queue: queue.Queue[list[bytes] | None] = queue.Queue(maxsize=HASH_QUEUE_BATCHES)
        self._batch: list[bytes] = []
        self._batched = 0
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="specdeck-hash", daemon=True)
        self._thread.start()

    def update(self, chunk: bytes) -> None:
        self._batch.append(chunk)
        self._batched += len(chunk)
        if self._batched >= HASH_BATCH_BYTES:
            self._queue.put(self._batch)
            self._batch, self._batched = [], 0

    def close(self) -> None:
        if self._batch:
            self._queue.put(self._batch)
            self._batch, self._batched = [], 0
        self._queue.put(None)
        self._thread.join()
        if self._failed is not None:
            raise self._failed

    def _run(self) -> None:
        while (batch := self._queue.get()) is not None:
            if self._failed is not None:
                continue  # keep taking batches, so that update and close never block
            try:
                for chunk in batch:
                    self.digest.update(chunk)
            except BaseException as exc:  # handed to close(), in the downloading thread
                self._failed = exc


class _Part:
    """The partial file of one download: its bytes, and the running hash of those bytes."""

    def __init__(self, path: Path, remote: RemoteFile, cancel: threading.Event | None):
        self.path = path
        self.remote = remote
        self.digest = new_digest(remote)
        self.done = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.stat().st_size > remote.size:
            path.unlink()  # longer than the published file: it cannot be a prefix of it
        if path.exists():  # what an earlier attempt kept: hashed once, then appended to
            self.done = hash_file(path, self.digest, cancel)
        else:
            path.touch()

    @property
    def complete(self) -> bool:
        return self.done >= self.remote.size

    def restart(self) -> int:
        """Empty the part; returns how many bytes were thrown away."""
        dropped = self.done
        with self.path.open("wb"):
            pass
        self.digest = new_digest(self.remote)
        self.done = 0
        return dropped

    def discard(self) -> int:
        dropped = self.done
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self.done = 0
        return dropped


def _abort(response: Any) -> None:
    """Break ``response``'s connection from another thread.

    Closing a socket does not wake a thread blocked reading it; shutting it down does. httpx
    (and httpx2) expose the socket through the response's ``network_stream`` extension.
    """
    stream = response.extensions.get("network_stream") if hasattr(response, "extensions") else None
    sock = stream.get_extra_info("socket") if stream is not None else None
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
            return
    with contextlib.suppress(Exception):
        response.close()


def _closed_on_cancel(cancel: threading.Event | None, response: Any):
    """Break the connection as soon as ``cancel`` is set, so that a read waiting on a silent
    server returns at once (a blocked socket read cannot check the event itself)."""
    from specdeck.core.hub.client import when_set

    return when_set(cancel, lambda: _abort(response))


def _content_range(header: str | None) -> tuple[int, int | None] | None:
    """(first byte, total size) of a ``Content-Range: bytes a-b/total`` header."""
    if not header or not header.startswith("bytes "):
        return None
    span, _, total = header[6:].partition("/")
    first, _, _ = span.partition("-")
    try:
        return int(first), (int(total) if total.strip() != "*" else None)
    except ValueError:
        return None


def _retry_after(response: Any) -> float | None:
    value = response.headers.get("Retry-After")
    return float(value) if value and value.strip().isdigit() else None


def _write_error(path: Path, exc: OSError) -> SpecDeckError:
    if exc.errno == errno.ENOSPC:
        return InsufficientSpaceError(
            f"The disk filled up while writing {path.name}.",
            "Free some space, then install again: what was downloaded is kept and resumes.",
        )
    return SpecDeckError(
        f"Cannot write {path}: {exc.strerror or exc}.",
        "Check the destination folder's permissions and free space.",
    )


def download_file(
    client: HubClient,
    repo_id: str,
    commit: str,
    remote: RemoteFile,
    part_path: Path,
    *,
    on_bytes: Callable[[int], None] | None = None,
    cancel: threading.Event | None = None,
    retry: RetryPolicy = RetryPolicy(),
) -> None:
    """Complete ``part_path`` (resuming what it holds) with ``remote``'s bytes at ``commit``,
    then verify its size and checksum.

    ``on_bytes(delta)`` follows the bytes present in the part: positive as data arrives,
    negative when bytes are thrown away. Bytes already in the part at the start are not
    reported. Raises CancelledError, IntegrityError (the part is removed), HubError.
    """
    report = on_bytes or (lambda _delta: None)
    try:
        part = _Part(part_path, remote, cancel)
    except OSError as exc:
        raise _write_error(part_path, exc) from exc
    failures = 0
    while not part.complete:
        if cancel is not None and cancel.is_set():
            raise CancelledError()
        before = part.done
        try:
            _fetch_rest(client, repo_id, commit, part, report, cancel, retry)
        except _Restart as why:
            log.info("Restarting %s from the beginning: %s", remote.path, why)
            report(-part.restart())
            continue
        except _Retry as why:
            failures = 1 if part.done > before else failures + 1
            if failures > retry.attempts:
                raise HubConnectionError(
                    f"The download of {remote.path} kept failing ({why}).",
                    f"{format_bytes(part.done)} of it is kept: install again to resume "
                    "when the connection is back.",
                ) from None
            wait = why.wait if why.wait is not None else retry.delay(failures)
            log.warning("%s: %s; retrying in %.1f s (%d/%d)", remote.path, why, wait, failures, retry.attempts)
            if cancel is not None:
                if cancel.wait(wait):
                    raise CancelledError() from None
            else:
                time.sleep(wait)
    _verify(part, report)


def _fetch_rest(
    client: HubClient,
    repo_id: str,
    commit: str,
    part: _Part,
    report: Callable[[int], None],
    cancel: threading.Event | None,
    retry: RetryPolicy,
) -> None:
    """One GET for the bytes after ``part.done``; appends what arrives."""
    from huggingface_hub.utils import hf_raise_for_status

    remote = part.remote
    # identity: a compressed body would make Range offsets and sizes meaningless.
    headers = {**client.headers(), "Accept-Encoding": "identity"}
    if part.done:
        headers["Range"] = f"bytes={part.done}-"
    url = client.file_url(repo_id, commit, remote.path)
    timeout = (retry.connect_timeout_s, retry.read_timeout_s, retry.read_timeout_s, retry.connect_timeout_s)
    try:
        with client.session().stream(
            "GET", url, headers=headers, follow_redirects=True, timeout=timeout
        ) as response, _closed_on_cancel(cancel, response):
            status = response.status_code
            if status == 429 or status >= 500:
                raise _Retry(f"HTTP {status}", _retry_after(response))
            if status == 416:
                raise IntegrityError(
                    f"{remote.path} on the Hub is not the {remote.size}-byte file its listing "
                    "describes (the server refused the byte range).",
                    "The repository may have changed during the install; try again.",
                )
            if status >= 400:
                response.read()
                with client.errors(repo_id, commit):
                    hf_raise_for_status(response)
            if part.done and status == 200:
                raise _Restart("the server ignored the byte range and sent the whole file")
            if status == 206:
                span = _content_range(response.headers.get("Content-Range"))
                if span is None or span[0] != part.done:
                    raise _Restart(f"the server answered another byte range ({response.headers.get('Content-Range')})")
                if span[1] is not None and span[1] != remote.size:
                    raise IntegrityError(
                        f"{remote.path} on the Hub has {span[1]} bytes, but its listing says {remote.size}.",
                        "The repository may have changed during the install; try again.",
                    )
            _append(part, response, report, cancel)
    except (SpecDeckError, _Restart, _Retry):
        raise
    except Exception as exc:
        if cancel is not None and cancel.is_set():
            raise CancelledError() from None
        if is_transport_error(exc):
            raise _Retry(f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
        with client.errors(repo_id, commit):
            raise


@functools.cache
def _writeback() -> Callable[[int, int, int], int] | None:
    """``start(fd, offset, nbytes)``: begin writing that range of a file to disk without
    waiting for it (sync_file_range with SYNC_FILE_RANGE_WRITE; 0, or -1 on failure, which
    the caller may ignore); None where the platform has no such call."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int
    sync_file_range_write = 2  # <linux/fs.h>: SYNC_FILE_RANGE_WRITE

    def start(fd: int, offset: int, nbytes: int) -> int:
        return call(fd, offset, nbytes, sync_file_range_write)

    return start


def _write_all(handle: Any, chunk: bytes) -> None:
    """A raw file's write() may write less than it is given (a signal, a full disk)."""
    view = memoryview(chunk)
    while view:
        view = view[handle.write(view):]


def _append(part: _Part, response: Any, report: Callable[[int], None], cancel: threading.Event | None) -> None:
    """Write each chunk as it arrives, and hash it behind (_DigestBehind): the one pass over
    the new bytes.

    httpx hands over 64 KiB per read. Measured on the hub benchmark, joining chunks into
    1 MiB blocks first (as hf_hub_download joins them into 10 MiB) cost more CPU than it
    saved, and a writer thread held bytes that were not yet on disk while a server stalled;
    so each chunk is written here as it arrives, and only its hashing waits, on another core.
    """
    remote = part.remote
    writeback, written_back = _writeback(), part.done
    hasher = _DigestBehind(part.digest)
    try:
        # Unbuffered: each chunk is one write() as it arrives (httpx hands over up to
        # 64 KiB; a short read under load can be a few bytes, which a buffered writer would
        # hold back). Whatever reached us is on disk, for a resume after a dropped
        # connection or a cancel, without waiting for the file to close.
        with part.path.open("ab", buffering=0) as handle:
            for chunk in response.iter_bytes():
                if part.done + len(chunk) > remote.size:
                    report(-part.discard())
                    raise IntegrityError(
                        f"The Hub sent more bytes for {remote.path} than the {remote.size} its listing says.",
                        "The repository may have changed during the install; try again.",
                    )
                _write_all(handle, chunk)
                hasher.update(chunk)
                part.done += len(chunk)
                report(len(chunk))
                if writeback is not None and part.done - written_back >= WRITEBACK_BYTES:
                    # A hint: if it fails, the fsync below still does all the work.
                    writeback(handle.fileno(), written_back, part.done - written_back)
                    written_back = part.done
                # Checked after writing: bytes that reached us are kept for the resume.
                if cancel is not None and cancel.is_set():
                    raise CancelledError()
            if part.complete:  # once per file, after its last byte
                os.fsync(handle.fileno())
    except OSError as exc:
        raise _write_error(part.path, exc) from exc
    finally:
        hasher.close()  # the digest is then the hash of every byte in the part


def _verify(part: _Part, report: Callable[[int], None]) -> None:
    remote = part.remote
    size = part.path.stat().st_size
    actual = part.digest.hexdigest()
    if size == remote.size and actual == remote.expected_digest:
        return
    report(-part.discard())
    if size != remote.size:
        what = f"{remote.path} has {size} bytes, but the Hub lists {remote.size}."
    else:
        what = (
            f"{remote.path} failed its {remote.checksum_label} check: the Hub published "
            f"{remote.expected_digest[:16]}…, the downloaded bytes give {actual[:16]}…"
        )
    raise IntegrityError(what, "The damaged download was removed.")
