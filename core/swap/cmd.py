"""A llama-swap model's ``cmd``: its arguments, as llama-swap reads them, and where each one
is written in the file.

llama-swap (internal/config/commands.go, SanitizeCommand, at 0bdb3720) drops lines whose
first non-blank character is ``#``, turns a trailing backslash into a space, and splits the
rest with golib's shlex.Posix (quotes, backslash escapes; newlines are blanks; an unclosed
quote runs to the end). Macros (``${name}``) are substituted before that (core.swap.macros).

To edit one flag without touching the rest, SpecDeck lexes the *source text* of the cmd
(the YAML scalar as written, block indicator and indentation included) the same way and
keeps each argument's character span. It edits only where the two readings agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from specdeck.core.llama_flags import canonical, canonical_argv  # noqa: F401 - the swap modules read them here


@dataclass(frozen=True)
class Token:
    text: str
    """The argument after shell unquoting."""
    start: int
    end: int
    """Its characters in the source text (quotes included)."""
    line: int
    """0-based line of the source text it starts on."""


class UnclosedQuote(ValueError):
    """A quote that is never closed. llama-swap's splitter (shlex.Posix) does not refuse it:
    everything after it, to the end of the cmd, becomes one argument."""

    def __init__(self, quote: str, start: int, tokens: list[Token]):
        super().__init__(f"an unclosed {quote} quote")
        self.quote = quote
        self.start = start
        """Where the quote is (``offset`` included)."""
        self.tokens = tokens
        """The words as llama-swap splits them (the last runs to the end)."""


def strip_comments(value: str) -> str:
    """llama-swap's StripComments, applied before macros are substituted
    (internal/config/macros.go, stripRawCommandComments)."""
    return "\n".join(line for line in value.split("\n") if not line.strip().startswith("#"))


def sanitize(value: str) -> list[str]:
    """llama-swap's SanitizeCommand: the arguments of a cmd value (raises UnclosedQuote)."""
    return [t.text for t in lex(_continued(value))]


def split_command(value: str) -> list[str]:
    """The arguments llama-swap runs for ``value``, an unclosed quote included (it becomes
    one argument running to the end, as shlex.Posix splits it)."""
    try:
        return sanitize(value)
    except UnclosedQuote as exc:
        return [t.text for t in exc.tokens]


def _continued(value: str) -> str:
    # SanitizeCommand: comment lines go, a line ending in a backslash ends in a blank.
    lines = []
    for line in value.split("\n"):
        trimmed = line.strip()
        if trimmed.startswith("#"):
            continue
        lines.append(trimmed[:-1] + " " if trimmed.endswith("\\") else line)
    return "\n".join(lines)


_LONE_BREAK = re.compile("\r(?!\n)|\x85")


def source_breaks(text: str) -> str:
    """``text`` (YAML source) with its line breaks as llama-swap's reader sees them, at the
    same character positions: YAML reads CR LF, a lone CR and NEL as one line break each
    (yaml.v3 read_line, ruamel's scanner), so a lone CR or NEL becomes LF; a CR LF stays (its
    CR is part of the break)."""
    if "\r" not in text and "\x85" not in text:
        return text
    return _LONE_BREAK.sub("\n", text)


BLANKS = " \t\n"
"""shlex.Posix's blanks (golib shlex.go IsSpace): a CR is part of a word there."""


def lex(text: str, offset: int = 0, skip_comment_lines: bool = False,
        source: bool = False) -> list[Token]:
    """Shell words of ``text`` with their spans (shifted by ``offset``), split as
    github.com/billziss-gh/golib shlex.Posix splits them (96c1ae5: blanks are space, tab and
    LF; a backslash escapes the next character and joins lines; in double quotes it escapes
    only $ ` " \\ and a line break). With ``source`` the text is YAML source and its line
    breaks are read as YAML reads them (:func:`source_breaks`). With ``skip_comment_lines``,
    lines that are llama-swap comments are blanks, and a backslash that ends a line is a blank
    (SanitizeCommand's rules, applied in place). An unclosed quote raises UnclosedQuote."""
    blanks = BLANKS
    if source:
        text = source_breaks(text)
        blanks += "\r"  # only the CR of a CR LF is left: part of the break

    tokens: list[Token] = []
    i, n = 0, len(text)
    line_no = 0
    line_start = 0

    def joined(pos: int) -> int:
        """How many characters a backslash at ``pos`` and the line break after it take (0:
        none follows): a backslash-newline joins lines, one at the very end is dropped."""
        after = text[pos + 1:pos + 3]
        if after[:1] in ("\n", ""):
            return 1 + len(after[:1])
        return 3 if source and after == "\r\n" else 0

    def skip_join(pos: int) -> int:
        """Past a joining backslash and its line break (counting the line)."""
        nonlocal line_no, line_start
        end = pos + joined(pos)
        if text[end - 1:end] == "\n":
            line_no += 1
            line_start = end
        return end

    def at_comment_line(pos: int) -> bool:
        return skip_comment_lines and text[line_start:pos].strip() == "" and \
            text[pos:pos + 1] == "#"

    def line_end_backslash(pos: int) -> bool:
        return skip_comment_lines and text[pos] == "\\" and joined(pos) > 0 \
            and text[line_start:pos].strip() != ""

    while i < n:
        c = text[i]
        if c == "\n":
            line_no += 1
            line_start = i + 1
            i += 1
            continue
        if c in blanks:
            i += 1
            continue
        if line_end_backslash(i):
            i += 1  # a line-ending backslash: a blank
            continue
        if c == "\\" and joined(i):
            i = skip_join(i)  # a joined line (or a backslash at the very end): nothing
            continue
        if at_comment_line(i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        start, word, quoted = i, [], False
        while i < n and text[i] not in blanks:
            c = text[i]
            if c == "'":
                close = text.find("'", i + 1)
                if close < 0:
                    word.append(text[i + 1:])
                    tokens.append(Token("".join(word), offset + start, offset + n, line_no))
                    raise UnclosedQuote("'", offset + i, tokens)
                word.append(text[i + 1:close])
                i, quoted = close + 1, True
            elif c == '"':
                j, part = i + 1, []
                while j < n and text[j] != '"':
                    if text[j] == "\\" and joined(j):
                        j = skip_join(j)  # a joined line
                    elif text[j] == "\\" and text[j + 1] in '$`"\\':
                        part.append(text[j + 1])
                        j += 2
                    else:
                        part.append(text[j])
                        j += 1
                if j >= n:
                    word.append("".join(part))
                    tokens.append(Token("".join(word), offset + start, offset + n, line_no))
                    raise UnclosedQuote('"', offset + i, tokens)
                word.append("".join(part))
                i, quoted = j + 1, True
            elif c == "\\":
                if line_end_backslash(i):
                    break  # a line-ending backslash ends the word
                if joined(i):
                    i = skip_join(i)  # a joined line adds nothing
                    continue
                word.append(text[i + 1])
                i += 2
            else:
                word.append(c)
                i += 1
        if word or quoted:
            tokens.append(Token("".join(word), offset + start, offset + i, line_no))
    return tokens


def shell_quote(value: str) -> str:
    """A value as one shell word, quoted only when it must be."""
    if value and re.fullmatch(r"[A-Za-z0-9_@%+=:,./${}-]+", value):
        return value
    return "'" + value.replace("'", "'\"'\"'") + "'"
