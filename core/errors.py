"""Errors a user can cause, and how they are worded.

A :class:`SpecDeckError` says what happened and what to do about it. The GUI shows it in
place, the CLI prints it on one line and exits non-zero. Anything else that escapes is a
bug in SpecDeck.
"""

from __future__ import annotations


class SpecDeckError(Exception):
    """A problem the user can fix: ``what`` happened, ``fix`` says what to do."""

    def __init__(self, what: str, fix: str | None = None):
        self.what = what.rstrip()
        self.fix = fix.rstrip() if fix else None
        super().__init__(str(self))

    def __str__(self) -> str:
        if not self.fix:
            return self.what
        separator = " " if self.what.endswith((".", "!", "?", ":")) else ". "
        return f"{self.what}{separator}{self.fix}"


class NotFoundError(SpecDeckError):
    """A file, folder, model or repository the user named does not exist."""


class InvalidInputError(SpecDeckError):
    """A value the user gave breaks a rule (the message states the rule)."""


class CancelledError(SpecDeckError):
    """The user cancelled a long operation; nothing was left half-done."""

    def __init__(self, what: str = "Cancelled.", fix: str | None = None):
        super().__init__(what, fix)
