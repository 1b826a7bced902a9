"""Paths as users type them: ``~`` expanded where it can be, kept as written where not.

``Path.expanduser()`` raises RuntimeError for ``~name`` when no user ``name`` exists (and for
``~`` without a home directory). A path in a config file or on the command line is user data:
such a path is a folder that does not exist, shown as written and reported as missing by
whatever checks it, never a crash.
"""

from __future__ import annotations

import os
from pathlib import Path


def expand_user(path: str | os.PathLike[str]) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded; unchanged when that user (or a home
    directory) is unknown."""
    path = Path(path)
    try:
        return path.expanduser()
    except RuntimeError:
        return path
