"""A server process that SpecDeck starts and must end: spawned with its output in a log, tied
to SpecDeck's life (``start_tied``: every child process SpecDeck starts), health-polled until
ready, ended with terminate then kill.

core.servers.llama_server.ManagedServer and core.servers.tabby_launch.ManagedTabby are the
two kinds; each says how it is started and what "healthy" means, this module does the rest
once.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path

from specdeck.core.errors import CancelledError
from specdeck.core.servers.transport import Base, ServerError, request_json


def _die_with_parent():
    """On Linux, a function for Popen's preexec_fn that makes the child receive SIGTERM when
    the thread that forks it ends (prctl(2) PR_SET_PDEATHSIG: the kernel ties it to the
    forking thread, not the process; :func:`start_tied` forks from a thread that lives as long
    as the process). None elsewhere."""
    import sys

    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    parent = os.getpid()

    def prepare() -> None:
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return prepare


class _Forker:
    """The one thread that forks every tied child, alive as long as the process (a daemon:
    it never keeps the process from ending)."""

    def __init__(self):
        self.pid = os.getpid()
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._run, name="specdeck-forker", daemon=True).start()

    def _run(self) -> None:
        while True:
            job, done = self._jobs.get()
            try:
                done.set_result(job())
            except BaseException as exc:  # noqa: BLE001 - raised again in the caller
                done.set_exception(exc)

    def call(self, job: Callable[[], subprocess.Popen]) -> subprocess.Popen:
        done: Future = Future()
        self._jobs.put((job, done))
        return done.result()


_forker: _Forker | None = None
_forker_lock = threading.Lock()


def start_tied(argv: Sequence[str], **popen: object) -> subprocess.Popen:
    """``subprocess.Popen(argv, **popen)`` for a child that ends when this process ends in any
    way (killed with SIGKILL, crashed): a server SpecDeck (or a test) started must never
    outlive it holding a port and a GPU's memory. On Linux the kernel sends the child SIGTERM
    when its parent dies; since it does so when the forking *thread* ends, every tied child is
    forked by one thread that lives as long as the process: a server started from a worker
    thread (a Tune search, a GUI worker, a stand-in's request handler) was sent SIGTERM as soon
    as that thread ended. Elsewhere a plain Popen (``stop()`` still ends it). What the child
    starts itself is its own to end (a llama-server router ends its model instances)."""
    global _forker
    tie = _die_with_parent()
    if tie is None:
        return subprocess.Popen(list(argv), **popen)
    with _forker_lock:
        if _forker is None or _forker.pid != os.getpid():  # none yet, or a forked copy's
            _forker = _Forker()
        forker = _forker
    return forker.call(lambda: subprocess.Popen(list(argv), preexec_fn=tie, **popen))


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    """``sig`` to the process group ``process`` leads (it was started in a session of its
    own), or to the process alone where there are no groups."""
    try:
        os.killpg(process.pid, sig)
    except (AttributeError, OSError):  # no process groups here, or none left
        with contextlib.suppress(OSError):
            process.send_signal(sig)


class ManagedProcess:
    """What both managed servers share. Subclasses are dataclasses with ``log_path``,
    ``process`` and ``_log`` fields, and set ``name`` and ``stop_timeout_s``."""

    name = "The server"
    stop_timeout_s = 10.0
    log_path: Path
    process: subprocess.Popen | None
    _log: object

    def _spawn(self, argv: Sequence[str], cwd: str | Path | None = None,
               env: dict[str, str] | None = None) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in _end()
        self.process = start_tied(argv, cwd=cwd, env=env, stdout=self._log,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True)

    def _wait_healthy(self, urls: Sequence[str], healthy: Callable[[object], bool],
                      timeout: float, cancel: threading.Event | None, interval_s: float,
                      exit_hint: str) -> str:
        """The first of ``urls`` whose /health answer is ``healthy``; a ServerError if the
        process exits first (with its log's tail) or ``timeout`` passes; CancelledError."""
        deadline = time.monotonic() + timeout
        while True:
            if cancel is not None and cancel.is_set():
                raise CancelledError()
            code = self.process.poll()
            if code is not None:
                raise ServerError(f"{self.name} exited with code {code} before it was ready: "
                                  f"{self.log_tail()}", exit_hint)
            for url in urls:
                with contextlib.suppress(ServerError):
                    if healthy(request_json(Base.parse(url), "GET", "/health", timeout=2.0)):
                        return url
            if time.monotonic() > deadline:
                raise ServerError(f"{self.name} was not ready after {timeout:g} s.",
                                  f"Its log: {self.log_path}.")
            time.sleep(interval_s)

    def log_tail(self, lines: int = 3) -> str:
        """The log's last non-blank ``lines``, read from its last 64 KiB only (a server's log
        can grow to gigabytes: core.files.read_tail)."""
        from specdeck.core.files import read_tail

        data = read_tail(self.log_path)
        if data is None:
            return "(no log)"
        text = data.decode("utf-8", errors="replace")
        useful = [ln for ln in text.splitlines() if ln.strip()]
        return " | ".join(useful[-lines:]) or "(empty log)"

    def _end(self) -> None:
        """End the process and whatever it started in its process group (terminate, then
        kill: a wrapper script's server left running would hold its port and memory) and
        close its log."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            _signal_group(process, signal.SIGTERM)
            try:
                process.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait(self.stop_timeout_s)
        if process is not None:
            _signal_group(process, signal.SIGKILL)  # what it left behind in its group
        if self._log is not None:
            self._log.close()
            self._log = None
