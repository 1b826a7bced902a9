"""Write files so that a crash, a full disk or a power cut never leaves half a file.

The new content goes to a temporary file in the same directory (same filesystem, so the
final rename is atomic), is flushed and fsynced, takes over the original's permission
bits, and only then replaces the target. The directory is fsynced so the rename itself
survives a power cut. If anything fails, the temporary file is removed and the original is
untouched.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from specdeck.core.errors import SpecDeckError


class WriteError(SpecDeckError):
    """A file could not be written; the original (if any) is unchanged."""


def _fsync_dir(directory: Path) -> None:
    # Not every platform can open a directory (Windows); the rename is still atomic there.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def resolve_target(path: Path) -> Path:
    """The real file behind ``path``: saving through a symlink keeps the link."""
    return Path(os.path.realpath(path))


def _default_mode() -> int:
    # What open() would give a new file: 0o666 minus the process umask.
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write_bytes(path: Path, data: bytes, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` atomically.

    The file keeps its permission bits; a new file gets ``mode`` or the usual default.
    """
    target = resolve_target(Path(path))
    directory = target.parent
    if mode is None:
        try:
            mode = stat.S_IMODE(target.stat().st_mode)
        except FileNotFoundError:
            mode = _default_mode()
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise WriteError(
            f"Cannot write to {directory}: {exc.strerror or exc}.",
            "Check that the folder exists and that you have write permission there.",
        ) from exc
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise WriteError(
            f"Could not save {target}: {exc.strerror or exc}. The original file is unchanged.",
            "Free some disk space or fix the folder's permissions, then save again.",
        ) from exc
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(directory)


def atomic_write_text(path: Path, text: str, encoding: str = "utf-8") -> None:
    atomic_write_bytes(path, text.encode(encoding))
