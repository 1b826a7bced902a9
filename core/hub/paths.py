"""File and folder names from a repository, checked before anything touches the disk.

A repository's tree listing is data from the network: a file named ``../../.bashrc`` or
``/etc/cron.d/x`` must never be written where its name points. Every name is checked here
first, and an installer refuses the whole repository if any name is unsafe, rather than
quietly skipping files and installing something different from what was published.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

# Windows device names: a file called "con.json" cannot be created there.
_WINDOWS_DEVICES = re.compile(r"^(con|prn|aux|nul|com[1-9]|lpt[1-9])(\..*)?$", re.IGNORECASE)
_MAX_COMPONENT = 255


def path_problem(name: str) -> str | None:
    """Why ``name`` (a path inside a repository) is unsafe to write, or None if it is safe."""
    if not name:
        return "empty name"
    if "\x00" in name or any(ord(c) < 32 for c in name):
        return "control characters in the name"
    if "\\" in name:
        return "backslash in the name (a Windows path separator)"
    if name.startswith("/"):
        return "absolute path"
    if re.match(r"^[A-Za-z]:", name):
        return "drive letter"
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "'..', '.' or empty path component"
    for part in parts:
        if len(part.encode("utf-8", "surrogatepass")) > _MAX_COMPONENT:
            return "path component longer than 255 bytes"
        if _WINDOWS_DEVICES.match(part) or part.endswith((" ", ".")):
            return "name that Windows cannot store"
    return None


def safe_join(root: Path, name: str) -> Path:
    """``root / name`` after checking ``name``; ValueError if it could land outside ``root``."""
    problem = path_problem(name)
    if problem:
        raise ValueError(f"unsafe path {name!r}: {problem}")
    target = root.joinpath(*PurePosixPath(name).parts)
    # Belt and braces: a symlink planted inside root must not lead outside either.
    real_root = root.resolve()
    real_target = target.resolve()
    if real_target != real_root and real_root not in real_target.parents:
        raise ValueError(f"unsafe path {name!r}: resolves outside {root}")
    return target


def folder_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be an install folder name (one plain, visible component)."""
    if not name or not name.strip():
        return "the name is empty"
    if "/" in name or "\\" in name:  # before the dot rule: "../x" is about leaving --dest
        return ("the name must be a single folder, without '/' or '\\' (it would put the "
                "model outside the destination)")
    if name.startswith("."):
        return "names starting with '.' are hidden, and SpecDeck uses them for unfinished installs"
    return path_problem(name)
