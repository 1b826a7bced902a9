"""Paths as users type them: ``~`` expanded where it can be, kept as written where not.

``Path.expanduser()`` raises RuntimeError for ``~name`` when no user ``name`` exists (and for
``~`` without a home directory). A path in a config file or on the command line is user data:
such a path is a folder that does not exist, shown as written and reported as missing by
whatever checks it, never a crash.
"""

from __future__ import annotations

import os
from pathlib import Path


def must_exist(path: str | os.PathLike[str], what: str, hint: str) -> Path:
    """``path`` (``~`` expanded) if something is there; else NotFoundError "The {what} {path}
    does not exist." A path that is not there is said to be missing before anything says
    what it is not ("is not a llama-server binary", "has no venv")."""
    from specdeck.core.errors import NotFoundError

    found = expand_user(path)
    if not found.exists():
        raise NotFoundError(f"The {what} {path} does not exist.", hint)
    return found


def looks_like_a_path(text: str) -> bool:
    """A name with a folder in it ("./llama-server", "~/bin/x", "/opt/x"), not a bare command
    name that PATH would find ("llama-server")."""
    return os.sep in text or (os.altsep is not None and os.altsep in text) \
        or text.startswith(("~", "."))


def expand_user(path: str | os.PathLike[str]) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded; unchanged when that user (or a home
    directory) is unknown."""
    path = Path(path)
    try:
        return path.expanduser()
    except RuntimeError:
        return path
