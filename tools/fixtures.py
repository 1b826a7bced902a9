"""Where the real-world fixtures are: tests/data/fixtures in this repository (copied from the
project's shared fixtures, each folder with its SOURCE.txt), or SPECDECK_FIXTURES."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fixtures_dir() -> Path:
    return Path(os.environ.get("SPECDECK_FIXTURES", ROOT / "tests" / "data" / "fixtures"))
