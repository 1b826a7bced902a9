"""argparse types for the folders and files a command writes into: one that cannot be written
is refused while parsing, before a long run that would end unable to save what it measured."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from specdeck.core.userpath import expand_user


def _writable_below(path: Path, text: str) -> None:
    """``path`` can be made: the nearest folder above it that exists is a folder this user
    may write in."""
    existing = path
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"{existing} is a file, so {text} cannot be made")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write in {existing}; name a folder you own")


def output_folder(text: str) -> Path:
    """A folder to write into (made later if missing): not a file, and inside a folder this
    user may write in (the nearest one that exists)."""
    path = expand_user(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(
            f"{text} is a file, not a folder; name a folder (it is made if missing)")
    _writable_below(path, text)
    return path


def output_file(text: str) -> str:
    """A file to write (its folder made later if missing), or "-" for standard output: not
    a folder, and where this user may write (an existing file: writable itself)."""
    if text == "-":
        return text
    path = expand_user(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; name a file to write")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise argparse.ArgumentTypeError(f"cannot write {text}; name a file you own")
    else:
        _writable_below(path.parent, text)
    return str(path)


output_folder.__name__ = "folder"  # argparse names the type in its messages
output_file.__name__ = "file"
