"""Helpers shared by the CLI commands: JSON or human output, progress on a terminal."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from specdeck.core.jsonout import dumps


def emit_json(obj: Any, stream: TextIO | None = None) -> None:
    (stream or sys.stdout).write(dumps(obj) + "\n")


def write_json(target: str, payload: Any) -> None:
    """``payload`` as JSON where a command's ``--json TARGET`` says: stdout for "-", else the
    file (written atomically; its folder was checked writable while parsing)."""
    if target == "-":
        emit_json(payload)
        return
    from specdeck.core.atomic import atomic_write_bytes
    from specdeck.core.userpath import expand_user

    path = expand_user(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (dumps(payload) + "\n").encode("utf-8"))


def print_table(rows: list[list[str]], headers: list[str], stream: TextIO | None = None) -> None:
    """A plain left-aligned text table."""
    out = stream or sys.stdout
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(str(c))) for w, c in zip(widths, row)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    out.write(line.rstrip() + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for row in rows:
        out.write("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() + "\n")
