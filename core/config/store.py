"""Save a planned change: conflict check, backup, atomic replace. Create a new config.yml.

Order of operations, so that no failure can lose the user's file:
1. nothing to write -> return (the file stays byte-identical, its mtime too);
2. the file on disk is read again and compared with what was opened: if someone else
   changed it (TabbyAPI's own migration, a text editor), refuse unless forced;
3. the bytes on disk are copied to ``config.yml.bak`` (atomically);
4. the new bytes replace config.yml atomically (temp file, fsync, rename).
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

from specdeck import __version__
from specdeck.core.atomic import WriteError, atomic_write_bytes, resolve_target
from specdeck.core.config.document import ConfigDocument, fingerprint
from specdeck.core.config.edit import ConfigChange, render_scalar
from specdeck.core.config.migrate import Migration
from specdeck.core.config.schema import DRAFT, MODEL, SETTINGS
from specdeck.core.errors import InvalidInputError, SpecDeckError

BACKUP_SUFFIX = ".bak"


class ConfigConflictError(SpecDeckError):
    """config.yml changed on disk after SpecDeck opened it."""


@dataclass(frozen=True)
class SaveResult:
    path: Path
    written: bool
    backup: Path | None


def backup_path(path: Path) -> Path:
    return path.with_name(path.name + BACKUP_SUFFIX)


def _is_read_only(path: Path) -> bool:
    # The permission bits, not os.access: an administrator (root) can write anything, but a
    # file the user marked read-only is a clear "do not touch".
    return not path.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)


def _current_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SpecDeckError(f"Cannot read {path} before saving: {exc.strerror or exc}.") from exc


def save(change: ConfigChange | Migration, *, force: bool = False, backup: bool = True) -> SaveResult:
    """Write a planned change to the document's file."""
    doc = change.document
    if doc.path is None:
        raise InvalidInputError("This config has no file to save to.", "Use 'Save as' and pick a path.")
    path = resolve_target(doc.path)
    if change.new_text == doc.text:
        return SaveResult(doc.path, written=False, backup=None)
    on_disk = _current_bytes(path)
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
    if backup and on_disk is not None:
        saved_backup = backup_path(path)
        atomic_write_bytes(saved_backup, on_disk, mode=stat.S_IMODE(path.stat().st_mode))
    atomic_write_bytes(path, doc.encode(change.new_text))
    return SaveResult(doc.path, written=True, backup=saved_backup)


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


def create_config(path: str | Path) -> ConfigDocument:
    """Write a new config.yml from the defaults; refuses to overwrite an existing file."""
    path = Path(path).expanduser()
    if path.exists():
        raise InvalidInputError(f"{path} already exists; SpecDeck will not overwrite it.",
                                "Open it instead.")
    if not path.parent.is_dir():
        raise InvalidInputError(f"The folder {path.parent} does not exist.",
                                "Create it first or pick another place.")
    atomic_write_bytes(path, default_config_text().encode("utf-8"))
    return ConfigDocument.from_file(path)
