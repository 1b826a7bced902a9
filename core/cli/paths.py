"""argparse types for folders the command writes into: a folder that cannot be written is
refused while parsing, before a long run that would end unable to save what it measured."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from specdeck.core.userpath import expand_user


def output_folder(text: str) -> Path:
    """A folder to write into (made later if missing): not a file, and inside a folder this
    user may write in (the nearest one that exists)."""
    path = expand_user(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(
            f"{text} is a file, not a folder; name a folder (it is made if missing)")
    existing = path
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"{existing} is a file, so {text} cannot be made")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write in {existing}; name a folder you own")
    return path


output_folder.__name__ = "folder"  # argparse names the type in its messages
