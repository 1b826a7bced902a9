"""Where the real-world fixtures are: tests/data/fixtures in this repository (copied from the
project's shared fixtures, each folder with its SOURCE.txt), or SPECDECK_FIXTURES."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fixtures_dir() -> Path:
    return Path(os.environ.get("SPECDECK_FIXTURES", ROOT / "tests" / "data" / "fixtures"))


def wait_until(condition, timeout: float = 10.0, what: str = "the state to screenshot") -> None:
    """Run Qt's event loop until ``condition()`` holds (TimeoutError after ``timeout`` s)."""
    import time

    from PySide6.QtWidgets import QApplication

    end = time.monotonic() + timeout
    while not condition():
        QApplication.processEvents()
        if time.monotonic() > end:
            raise TimeoutError(f"the page did not reach {what} in {timeout:.0f} s")
        time.sleep(0.01)
