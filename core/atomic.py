"""Write files so that a crash, a full disk or a power cut never leaves half a file.

The new content goes to a temporary file in the same directory (same filesystem, so the
final rename is atomic), is flushed and fsynced, takes over the original's permission
bits, owner and group, and only then replaces the target. The directory is fsynced so the
rename itself survives a power cut. If anything fails, the temporary file is removed and the
original is untouched. A save that keeps a backup (``config.yml.bak``) writes it the same way
and renames it into place only after the new file is in place, so a failed save never costs
the user their previous backup either.

A rename gives the file a new inode, owned by whoever wrote it: root saving the TabbyAPI
service user's config.yml (mode 640) would lock the service out of its own file. So the
owner and group are carried over, and where this process may not do that, the write is
refused before anything is replaced (see :func:`check_can_keep_owner`).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from specdeck.core.errors import SpecDeckError

try:  # POSIX; elsewhere saves are still atomic, only not serialised between processes
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


class WriteError(SpecDeckError):
    """A file could not be written; the original (if any) is unchanged."""


class OwnershipError(WriteError):
    """The new file could not be given the original's owner or group."""


def fsync_dir(directory: Path) -> None:
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


def _owner_name(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return f"uid {uid}"


def _group_name(gid: int) -> str:
    try:
        import grp

        return grp.getgrgid(gid).gr_name
    except (ImportError, KeyError):
        return f"gid {gid}"


def check_can_keep_owner(path: Path, owner: tuple[int, int]) -> None:
    """Raise OwnershipError if a file written now could not get ``owner`` (uid, gid).

    Only root may give a file to another user; any user may give a file they own to one of
    their own groups. Called before anything is written, so a refusal changes nothing.
    """
    if not hasattr(os, "geteuid"):  # pragma: no cover - Windows has no POSIX owners
        return
    uid, gid = owner
    me = os.geteuid()
    if me == 0:
        return
    if uid != me:
        raise OwnershipError(
            f"{path} belongs to {_owner_name(uid)}, and SpecDeck runs as {_owner_name(me)}: a "
            f"saved copy would belong to {_owner_name(me)}, and {_owner_name(uid)} (the server, "
            "say) might no longer read it. Nothing was changed.",
            f"Run SpecDeck as {_owner_name(uid)} (or with sudo) to edit this file.",
        )
    if gid != os.getegid() and gid not in os.getgroups():
        raise OwnershipError(
            f"{path} belongs to group {_group_name(gid)}, which {_owner_name(me)} is not in: a "
            "saved copy would lose that group, and members of it might no longer read it. "
            "Nothing was changed.",
            f"Run SpecDeck as a member of {_group_name(gid)} (or with sudo) to edit this file.",
        )


def _give_owner(fd: int, path: Path, owner: tuple[int, int]) -> None:
    st = os.fstat(fd)
    if (st.st_uid, st.st_gid) == owner or not hasattr(os, "fchown"):
        return
    try:
        os.fchown(fd, *owner)
    except PermissionError:
        check_can_keep_owner(path, owner)  # raises with the reason
        raise


@dataclass(frozen=True)
class Backup:
    """A copy of what a save replaces, kept next to it (``config.yml.bak``)."""

    path: Path
    """Written as a plain file: a symlink there is replaced, never followed."""
    data: bytes
    mode: int
    owner: tuple[int, int] | None = None


def _stage(target: Path, data: bytes, mode: int, owner: tuple[int, int] | None) -> Path:
    """A temporary file next to ``target`` holding ``data``, flushed, fsynced, with ``owner``
    and ``mode``: ready to be renamed over ``target``. Nothing is left behind on failure."""
    directory = target.parent
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
            if owner is not None:
                # Before the mode: chown clears set-id bits, and it must not widen access.
                _give_owner(handle.fileno(), target, owner)
        os.chmod(tmp, mode)
    except OSError as exc:
        _discard(tmp)
        raise WriteError(
            f"Could not save {target}: {exc.strerror or exc}. The original file is unchanged.",
            "Free some disk space or fix the folder's permissions, then save again.",
        ) from exc
    except BaseException:
        _discard(tmp)
        raise
    return tmp


def _discard(*paths: Path | None) -> None:
    for path in paths:
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink()


def atomic_write_bytes(
    path: Path,
    data: bytes,
    mode: int | None = None,
    *,
    owner: tuple[int, int] | None = None,
    follow_symlinks: bool = True,
    backup: Backup | None = None,
) -> None:
    """Replace ``path`` with ``data`` atomically.

    The file keeps its permission bits, owner and group; a new file gets ``mode`` (or the
    usual default) and ``owner`` (or this process's). With ``follow_symlinks=False`` a
    symlink at ``path`` is itself replaced by the file and what it pointed to is untouched.

    With ``backup``, its data replaces the backup file too, but only once the new file is in
    place: both are written and fsynced first, the file is renamed, then the backup. A save
    that fails at any step before leaves the file *and its previous backup* as they were.
    """
    path = Path(path)
    target = resolve_target(path) if follow_symlinks else Path(os.path.abspath(path))
    directory = target.parent
    try:
        existing = target.stat() if follow_symlinks else target.lstat()
    except FileNotFoundError:
        existing = None
    if existing is not None and stat.S_ISLNK(existing.st_mode):
        existing = None  # replacing the link itself: nothing of it to keep
    if mode is None:
        mode = stat.S_IMODE(existing.st_mode) if existing is not None else _default_mode()
    if owner is None and existing is not None:
        owner = (existing.st_uid, existing.st_gid)
    backup_target = Path(os.path.abspath(backup.path)) if backup is not None else None
    staged_backup = None
    if backup is not None:
        staged_backup = _stage(backup_target, backup.data, backup.mode, backup.owner)
    try:
        tmp = _stage(target, data, mode, owner)
    except BaseException:
        _discard(staged_backup)
        raise
    kept = f", and so is {backup_target.name}" if backup is not None else ""
    try:
        os.replace(tmp, target)
    except OSError as exc:
        _discard(tmp, staged_backup)
        raise WriteError(
            f"Could not save {target}: {exc.strerror or exc}. The original file is "
            f"unchanged{kept}.",
            "Free some disk space or fix the folder's permissions, then save again.",
        ) from exc
    except BaseException:
        _discard(tmp, staged_backup)
        raise
    fsync_dir(directory)
    if staged_backup is None:
        return
    try:
        os.replace(staged_backup, backup_target)
    except OSError as exc:
        raise WriteError(
            f"{target} was saved, but its backup {backup_target.name} could not be updated "
            f"({exc.strerror or exc}): the previous {backup_target.name} is unchanged, and the "
            f"version this save replaced is in {staged_backup}.",
            f"Keep {staged_backup.name} (rename it) if you want that version.",
        ) from exc
    fsync_dir(directory)


def atomic_write_text(path: Path, text: str, encoding: str = "utf-8") -> None:
    atomic_write_bytes(path, text.encode(encoding))


@contextlib.contextmanager
def directory_lock(
    directory: Path, on_wait: Callable[[], None] | None = None
) -> Iterator[None]:
    """Hold an exclusive lock on ``directory`` so that SpecDeck processes save one at a time.

    The lock is taken on the folder itself (flock on its descriptor), not on the file: a save
    replaces the file's inode, and a lock file would be one more thing in the user's folder.
    Other programs do not take it; the compare-before-write in the callers covers them.
    ``on_wait`` is called once if another holder makes this one wait (to say so on screen).
    """
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        yield  # a folder we cannot open cannot be written either; the write will say why
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
