"""How a command is stopped from outside: Ctrl-C, SIGTERM (a service manager, ``kill``) and
SIGHUP (the terminal closed) all set the command's cancel event, so it stops after the
current step with its output, its report and the user's files as they were (a download
stays resumable); the same signal again aborts at once."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
                     if hasattr(signal, name))
"""Ctrl-C, a service manager's or ``kill``'s SIGTERM, and the terminal closing (SIGHUP) all
stop a command the same way: cleanly, with its report."""


@contextmanager
def cancel_on_interrupt(cancel: threading.Event) -> Iterator[None]:
    """First Ctrl-C (or SIGTERM, SIGHUP): stop after the current step and keep the output,
    the report and the user's files as they were. Second: abort."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_stop(signum: int, frame: Any) -> None:
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()
        what = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        sys.stderr.write(f"\nspecdeck: {what}: stopping after this step (again to abort)\n")

    previous = {number: signal.signal(number, on_stop) for number in STOP_SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
