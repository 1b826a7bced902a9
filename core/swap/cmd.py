"""A llama-swap model's ``cmd``: its arguments, as llama-swap reads them, and where each one
is written in the file.

llama-swap (internal/config/commands.go, SanitizeCommand, at 0bdb3720) drops lines whose
first non-blank character is ``#``, turns a trailing backslash into a space, and splits the
rest the way a POSIX shell does (quotes, backslash escapes; newlines are blanks). Macros
(``${name}``) are substituted from the model's and the global ``macros:`` first, and
``${PORT}`` and ``${MODEL_ID}`` when the model starts.

To edit one flag without touching the rest, SpecDeck lexes the *source text* of the cmd
(the YAML scalar as written, block indicator and indentation included) the same way and
keeps each argument's character span. It edits only where the two readings agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MACRO = re.compile(r"\$\{([^}]+)\}")
RUNTIME_MACROS = ("PORT", "MODEL_ID", "PID")


@dataclass(frozen=True)
class Token:
    text: str
    """The argument after shell unquoting."""
    start: int
    end: int
    """Its characters in the source text (quotes included)."""
    line: int
    """0-based line of the source text it starts on."""


def strip_comments(value: str) -> str:
    """llama-swap's StripComments, applied before macros are substituted
    (internal/config/macros.go, stripRawCommandComments)."""
    return "\n".join(line for line in value.split("\n") if not line.strip().startswith("#"))


def sanitize(value: str) -> list[str]:
    """llama-swap's SanitizeCommand: the arguments of a cmd value."""
    lines = []
    for line in value.split("\n"):
        trimmed = line.strip()
        if trimmed.startswith("#"):
            continue
        lines.append(trimmed[:-1] + " " if trimmed.endswith("\\") else line)
    return [t.text for t in lex("\n".join(lines))]


def lex(text: str, offset: int = 0, skip_comment_lines: bool = False) -> list[Token]:
    """POSIX shell words of ``text`` with their spans (shifted by ``offset``). With
    ``skip_comment_lines``, lines that are llama-swap comments are blanks, and a backslash
    that ends a line is a blank (SanitizeCommand's rules, applied in place)."""
    tokens: list[Token] = []
    i, n = 0, len(text)
    line_no = 0
    line_start = 0

    def at_comment_line(pos: int) -> bool:
        return skip_comment_lines and text[line_start:pos].strip() == "" and \
            text[pos:pos + 1] == "#"

    while i < n:
        c = text[i]
        if c == "\n":
            line_no += 1
            line_start = i + 1
            i += 1
            continue
        if c in " \t\r":
            i += 1
            continue
        if c == "\\" and skip_comment_lines and text[i + 1:i + 2] in ("\n", "") \
                and text[line_start:i].strip() != "":
            i += 1  # a line-ending backslash: a blank
            continue
        if at_comment_line(i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        start, word, quoted = i, [], False
        while i < n and text[i] not in " \t\r\n":
            c = text[i]
            if c == "'":
                close = text.find("'", i + 1)
                if close < 0:
                    raise ValueError("an unclosed ' quote")
                word.append(text[i + 1:close])
                i, quoted = close + 1, True
            elif c == '"':
                j, part = i + 1, []
                while j < n and text[j] != '"':
                    if text[j] == "\\" and j + 1 < n and text[j + 1] in '$`"\\\n':
                        part.append(text[j + 1])
                        j += 2
                    else:
                        part.append(text[j])
                        j += 1
                if j >= n:
                    raise ValueError('an unclosed " quote')
                word.append("".join(part))
                i, quoted = j + 1, True
            elif c == "\\":
                if i + 1 < n and text[i + 1] == "\n" and skip_comment_lines:
                    break  # a line-ending backslash ends the word
                word.append(text[i + 1:i + 2])
                i += 2
            else:
                word.append(c)
                i += 1
        if word or quoted:
            tokens.append(Token("".join(word), offset + start, offset + i, line_no))
    return tokens


def expand(value: str, macros: dict[str, str]) -> tuple[str, list[str]]:
    """``value`` with its macros substituted (runtime ones kept as written); the names of
    the macros it used. Macros may use macros (llama-swap resolves them up to a depth)."""
    used: list[str] = []

    def sub(match: re.Match) -> str:
        name = match.group(1)
        if name in RUNTIME_MACROS or name not in macros:
            return match.group(0)
        used.append(name)
        return str(macros[name])

    for _ in range(8):
        new = MACRO.sub(sub, value)
        if new == value:
            break
        value = new
    return value, list(dict.fromkeys(used))


def shell_quote(value: str) -> str:
    """A value as one shell word, quoted only when it must be."""
    if value and re.fullmatch(r"[A-Za-z0-9_@%+=:,./${}-]+", value):
        return value
    return "'" + value.replace("'", "'\"'\"'") + "'"
