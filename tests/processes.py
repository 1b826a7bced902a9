"""Which running processes this test session started, however they were started.

The suite runs on several workers at once (pytest-xdist), each launching llama-servers on the
same demo GGUF: a test that asks "is a llama-server of this model still running?" must count
only its own session's. Every process a session starts inherits ``SESSION_MARK`` in its
environment (conftest sets it before any test runs), children of children and processes left
behind by a crashed parent included, so the mark tells ours from another worker's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

import psutil

SESSION_MARK = "SPECDECK_TEST_SESSION"


def mark_this_session() -> None:
    os.environ[SESSION_MARK] = f"{os.getpid()}-{psutil.Process().create_time()}"


def ours(process: psutil.Process) -> bool:
    """Started by this test session (or by what it started)."""
    try:
        return process.environ().get(SESSION_MARK) == os.environ.get(SESSION_MARK)
    except (psutil.Error, OSError):
        return False


def running(cmdline_matches: Callable[[list[str]], bool]) -> list[psutil.Process]:
    """This session's live processes whose command line matches."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            cmdline = process.info["cmdline"] or []
            if cmdline and cmdline_matches(cmdline) and process.pid != os.getpid() \
                    and process.status() != psutil.STATUS_ZOMBIE and ours(process):
                found.append(process)
        except psutil.Error:
            continue
    return found


def gone_after_kill(script: str, timeout: float = 30.0) -> list[psutil.Process]:
    """Run ``script`` in a child Python until it prints "ready", SIGKILL it, and wait (at
    most ``timeout`` s) until every process it had started has ended: what a test fixture or
    SpecDeck starts must not outlive a killed parent. The processes it had started (each
    ended), for the caller's own checks; AssertionError naming the survivors."""
    import signal
    import subprocess
    import sys
    import time

    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              text=True)
    try:
        line = parent.stdout.readline()
        assert line.strip() == "ready", f"the child said {line!r}, not ready"
        started = psutil.Process(parent.pid).children(recursive=True)
        shown = {p.pid: " ".join(p.cmdline()[:3]) for p in started}
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
    finally:
        parent.kill()
        parent.wait(10)
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in started if _alive(p)]
        if not alive:
            return started
        if time.monotonic() > deadline:
            names = [shown[p.pid] for p in alive]
            for process in alive:  # the test failed; it leaves nothing behind either
                with contextlib.suppress(psutil.Error):
                    process.kill()
            raise AssertionError(f"outlived their killed parent: {names}")
        time.sleep(0.05)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
