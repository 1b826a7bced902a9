"""Save a planned change: conflict check, backup, atomic replace. Create a new config.yml.

Order of operations, so that no failure can lose the user's file:
1. nothing to write -> return (the file stays byte-identical, its mtime too);
2. the folder is locked, so SpecDeck processes save one at a time;
3. the file on disk is read again and compared with what was opened: if someone else
   changed it (another SpecDeck, TabbyAPI's own migration, a text editor), refuse unless
   forced;
4. if the saved file could not keep its owner and group, refuse (nothing written yet);
5. the bytes on disk and the new bytes are both written to temporary files (fsynced, owner,
   mode); the new bytes replace config.yml (rename), and only then the copy of the old bytes
   replaces ``config.yml.bak`` (never through a symlink): a save that fails before its file
   is in place leaves the previous backup as it was.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from specdeck.core.atomic import (
    Backup,
    WriteError,
    atomic_write_bytes,
    check_can_keep_owner,
    directory_lock,
    resolve_target,
)
from specdeck.core.changed import TABBY_CONFIG, FileChanged
from specdeck.core.config.document import ConfigDocument, fingerprint, read_config_bytes
from specdeck.core.config.edit import ConfigChange, render_scalar
from specdeck.core.config.migrate import Migration
from specdeck.core.config.schema import DRAFT, MODEL, SETTINGS
from specdeck.core.errors import InvalidInputError, SpecDeckError
from specdeck.core.userpath import expand_user

from specdeck import __version__

BACKUP_SUFFIX = ".bak"


class ConfigConflictError(SpecDeckError):
    """config.yml changed on disk after SpecDeck opened it."""


@dataclass(frozen=True)
class SaveResult:
    path: Path
    written: bool
    backup: Path | None
    kind: str = TABBY_CONFIG
    """Which file (core.changed: the document's ``what``)."""

    @property
    def changed(self) -> FileChanged | None:
        """What the save changed, for the app to announce (None: nothing was written)."""
        return FileChanged(self.path, self.kind) if self.written else None


def backup_path(path: Path) -> Path:
    return path.with_name(path.name + BACKUP_SUFFIX)


def _is_read_only(path: Path) -> bool:
    # The permission bits, not os.access: an administrator (root) can write anything, but a
    # file the user marked read-only is a clear "do not touch".
    return not path.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)


def _current_bytes(path: Path, what: str) -> bytes | None:
    """The file as it is now (None: there is none), read as any config is
    (read_config_bytes): a FIFO or a file of gigabytes put there since it was opened is
    refused, not waited on or read whole."""
    try:
        return read_config_bytes(path, what)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SpecDeckError(f"Cannot read {path} before saving: {exc.strerror or exc}.") from exc


def _check_backup_slot(backup: Path) -> None:
    """Refuse a backup path that is not a plain file: writing "through" it loses data."""
    try:
        st = backup.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise WriteError(
            f"{backup} is a symbolic link (to {os.readlink(backup)}). SpecDeck keeps its backup "
            "in a plain file so that it can never overwrite what a link points to; nothing was "
            "changed.",
            f"Remove or rename {backup.name}, then save again.",
        )
    if not stat.S_ISREG(st.st_mode):
        raise WriteError(
            f"{backup} exists and is not a plain file, so SpecDeck cannot keep its backup "
            "there; nothing was changed.",
            f"Move {backup.name} out of the way, then save again.",
        )


def save(change: ConfigChange | Migration, *, force: bool = False, backup: bool = True) -> SaveResult:
    """Write a planned change to the document's file.

    Two SpecDeck processes saving the same folder take turns (a lock on the folder), and
    each compares the file with what it read inside its turn: the second of two concurrent
    edits gets a ConfigConflictError instead of silently replacing the first.
    """
    doc = change.document
    if doc.path is None:
        raise InvalidInputError("This config has no file to save to.", "Use 'Save as' and pick a path.")
    path = resolve_target(doc.path)
    if change.new_text == doc.text:
        return SaveResult(doc.path, written=False, backup=None, kind=doc.what)
    with directory_lock(path.parent):
        on_disk = _current_bytes(path, doc.what)
        if on_disk is not None and _is_read_only(path):
            raise WriteError(
                f"{doc.path} is read-only, so SpecDeck left it as it is.",
                "Make it writable (chmod u+w) if you want SpecDeck to change it.",
            )
        if doc.disk_fingerprint is not None and not force:
            now = fingerprint(on_disk) if on_disk is not None else None
            if now != doc.disk_fingerprint:
                state = "was deleted" if on_disk is None else "was changed by another program"
                raise ConfigConflictError(
                    f"{doc.path} {state} after SpecDeck opened it.",
                    "Reload it to see the new version, or save anyway to overwrite it.",
                )
        saved_backup = None
        keep = None
        if on_disk is not None:
            st = path.stat()
            owner = (st.st_uid, st.st_gid)
            check_can_keep_owner(doc.path, owner)  # before the backup: a refusal writes nothing
            if backup:
                saved_backup = backup_path(path)
                _check_backup_slot(saved_backup)
                keep = Backup(saved_backup, on_disk, stat.S_IMODE(st.st_mode), owner)
        atomic_write_bytes(path, doc.encode(change.new_text), backup=keep)
    return SaveResult(doc.path, written=True, backup=saved_backup, kind=doc.what)


def default_config_text() -> str:
    """A minimal config.yml holding the settings SpecDeck edits, at TabbyAPI's defaults."""
    lines = [
        f"# TabbyAPI config.yml created by SpecDeck {__version__}.",
        "# It holds only the model and draft settings; TabbyAPI uses its defaults for the rest",
        "# (see config_sample.yml in your TabbyAPI folder for every option).",
        "",
    ]
    for section, title in ((MODEL, "Options for model overrides and loading"),
                           (DRAFT, "Options for draft models (speculative decoding)")):
        lines.append(f"# {title}")
        lines.append(f"{section}:")
        for s in (s for s in SETTINGS if s.section == section):
            for help_line in _wrap(s.help + (" (ExLlamaV3 backend only.)" if s.exl3_only and "ExLlamaV3" not in s.help else "")):
                lines.append(f"  # {help_line}")
            default = s.default
            value = render_scalar(s, default if default != () else ())
            lines.append(f"  {s.key}: {value}".rstrip())
            lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def _wrap(text: str, width: int = 86) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width) or [""]


SAMPLE = "TabbyAPI config_sample.yml"
"""What a sample to copy is called in messages."""


def create_config(path: str | Path, sample: str | Path | None = None) -> FileChanged:
    """Write a new config.yml: a copy of ``sample`` (TabbyAPI's config_sample.yml) or from
    SpecDeck's defaults; never over an existing file. The sample is read as a config is
    (regular file, size cap: ``read_config_bytes``) and parsed first, so what is not a
    config is refused before anything is written. Returns what it wrote, to announce (the
    Draft settings page, ``specdeck config init``)."""
    path = expand_user(path).absolute()
    if path.exists():
        raise InvalidInputError(f"{path} already exists; SpecDeck will not overwrite it.",
                                "Open it instead.")
    if not path.parent.is_dir():
        raise InvalidInputError(f"The folder {path.parent} does not exist.",
                                "Create it first or pick another place.")
    if sample is None:
        data = default_config_text().encode("utf-8")
    else:
        copied = ConfigDocument.from_file(sample, SAMPLE)
        data = copied.encode(copied.text)  # its bytes as read (a byte-order mark kept)
    atomic_write_bytes(path, data)
    return FileChanged(path, TABBY_CONFIG)
