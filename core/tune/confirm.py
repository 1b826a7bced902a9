"""How the write of a tune's winner is confirmed (core.tune.apply.write_and_prove), apart
from the tuner so that the command line can build its askers without importing it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

NOT_CONFIRMED = "Not confirmed: nothing was written."


@dataclass(frozen=True)
class Asker:
    """How a write is confirmed: ``ask(diff)`` is True to write it; ``declined()`` is what the
    report says when it is not (the command line says why it did not ask: --dry-run, or no
    terminal)."""

    ask: Callable[[str], bool]
    declined: Callable[[], str] = lambda: NOT_CONFIRMED


Confirm = Callable[[str], bool] | Asker
"""Shown the diff; True to write it (a bare callable declines with NOT_CONFIRMED)."""
