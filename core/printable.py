"""Text from files and servers, made safe to print on a terminal.

A model name in a llama-swap config.yaml, a server's error body or a GGUF's metadata string is
somebody else's text: an ESC sequence in it can clear the user's screen, retitle the terminal
or hide the text after it, and a bidirectional override can make a line read differently from
what it says. ``printable`` escapes every such character so the user sees what is really
there; ``SafeTextStream`` does it for everything the CLI writes, so no print site can forget.
"""

from __future__ import annotations

import re
from typing import Any, TextIO

# C0 controls, DEL, C1 controls (U+009B is an 8-bit CSI on some terminals), and the Unicode
# bidirectional overrides/isolates ("Trojan Source").
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# What SpecDeck's own output uses: line breaks, tabs, and a carriage return (progress lines
# that redraw themselves).
_KEPT_IN_STREAMS = frozenset("\n\t\r")


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: Any, *, newlines: bool = False) -> str:
    """``text`` with every control character escaped (``\\x1b``); with ``newlines`` line breaks
    and tabs stay. Use it for one-line fields: names, paths, a server's message."""
    text = str(text)
    if newlines:
        return _UNSAFE.sub(lambda m: m.group(0) if m.group(0) in "\n\t" else _escape(m.group(0)),
                           text)
    return _UNSAFE.sub(lambda m: _escape(m.group(0)), text)


class SafeTextStream:
    """A text stream that escapes control characters on their way to ``stream`` (line breaks,
    tabs and carriage returns pass). Everything else is the wrapped stream's."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    @property
    def wrapped(self) -> TextIO:
        return self._stream

    def write(self, text: str) -> int:
        self._stream.write(_UNSAFE.sub(
            lambda m: m.group(0) if m.group(0) in _KEPT_IN_STREAMS else _escape(m.group(0)),
            text))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
