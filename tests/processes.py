"""Which running processes this test session started, however they were started.

The suite runs on several workers at once (pytest-xdist), each launching llama-servers on the
same demo GGUF: a test that asks "is a llama-server of this model still running?" must count
only its own session's. Every process a session starts inherits ``SESSION_MARK`` in its
environment (conftest sets it before any test runs), children of children and processes left
behind by a crashed parent included, so the mark tells ours from another worker's.
"""

from __future__ import annotations

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
