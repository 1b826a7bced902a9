"""Change flags in a llama-swap model's cmd by rewriting only their characters.

A flag that is there gets its value (or its name, when it was renamed) replaced where it is
written; a flag to remove goes with its value (and its line, when nothing else is on it); a
new flag goes after the cmd's last argument: on a line of its own, indented like that
argument, in a block scalar (``cmd: |``), else on the same line. Comments, order, macros,
quoting and every other byte stay as they were. The result is read again the way llama-swap
reads it and compared with the intended arguments: if SpecDeck's edit would mean anything
else, it refuses instead of writing. Saving goes through core.config.store (conflict check,
backup, atomic replace).
"""

from __future__ import annotations

from dataclasses import dataclass

from specdeck.core.config.edit import ConfigChange
from specdeck.core.errors import InvalidInputError
from specdeck.core.swap.cmd import shell_quote
from specdeck.core.swap.config import ModelCmd, SwapConfig, from_text

BARE = True
"""A flag written without a value."""


@dataclass(frozen=True)
class FlagEdit:
    flag: str
    """The name to write."""
    value: str | bool | None
    """A value; BARE (a flag without one); None to remove the flag."""
    also: tuple[str, ...] = ()
    """Other names of the same setting, kept as the user spelt them."""
    replaces: tuple[str, ...] = ()
    """Old names of the setting: found, they are renamed to ``flag``."""

    @property
    def names(self) -> tuple[str, ...]:
        return (self.flag, *self.also, *self.replaces)


def _name(text: str) -> str:
    return text.split("=", 1)[0] if text.startswith("-") else text


def _is_flag(text: str) -> bool:
    if not text.startswith("-") or text == "-":
        return False
    try:
        float(text)
        return False
    except ValueError:
        return True


def plan_edit(config: SwapConfig, model_name: str, edits: list[FlagEdit],
              warnings: tuple[str, ...] = (), macro: bool = False) -> ConfigChange:
    """The planned change (nothing written) for ``edits`` to one model's cmd, or with
    ``macro`` to one global macro's value (every model using it sees the change)."""
    model = config.macro(model_name) if macro else config.model(model_name)
    what = f"Macro {model_name}" if macro else f"Model {model_name}"
    if model.tokens is None:
        raise InvalidInputError(f"{what}: SpecDeck will not edit {'it' if macro else 'its cmd'}: "
                                f"{model.not_editable}.", "Edit it by hand.")
    if not model.tokens:
        raise InvalidInputError(f"{what} is empty.")
    text = config.document.text
    words = [(t.text, t.start, t.end) for t in model.tokens]
    splices: list[tuple[int, int, str]] = []
    expected = [w[0] for w in words]
    appended: list[str] = []
    for edit in edits:
        spots = [i for i, w in enumerate(words) if _name(w[0]) in edit.names]
        if edit.value is None:
            for i in reversed(spots):
                last = i + 1 if "=" not in words[i][0] and i + 1 < len(words) \
                    and not _is_flag(words[i + 1][0]) else i
                splices.append(_removal(text, words[i][1], words[last][2]))
                del expected[i:last + 1]
                words = words[:i] + words[last + 1:]
            continue
        if not spots:
            new = [edit.flag] if edit.value is BARE else [edit.flag, str(edit.value)]
            appended.append(" ".join(shell_quote(w) for w in new))
            expected.extend(new)
            continue
        i = spots[-1]  # the one llama-server reads
        written, start, end = words[i]
        name = _name(written)
        keep = name if name not in edit.replaces else edit.flag
        if "=" in written:
            new_word = keep if edit.value is BARE else f"{keep}={edit.value}"
            splices.append((start, end, shell_quote(new_word)))
            expected[i] = new_word
            continue
        if keep != name:
            splices.append((start, end, keep))
            expected[i] = keep
        has_value = i + 1 < len(words) and not _is_flag(words[i + 1][0])
        if edit.value is BARE:
            continue
        if has_value:
            splices.append((words[i + 1][1], words[i + 1][2], shell_quote(str(edit.value))))
            expected[i + 1] = str(edit.value)
        else:
            splices.append((end, end, " " + shell_quote(str(edit.value))))
            expected.insert(i + 1, str(edit.value))
            words.insert(i + 1, (str(edit.value), end, end))
    if appended:
        splices.append(_append(text, model, words, appended))
    new_text = text
    for start, end, replacement in sorted(splices, key=lambda s: (s[0], s[1]), reverse=True):
        new_text = new_text[:start] + replacement + new_text[end:]
    _verify(config, model, new_text, expected, macro)
    keys = tuple((model_name, e.flag) for e in edits)
    return ConfigChange(config.document, new_text, keys,
                        {(model_name, e.flag): e.value for e in edits}, warnings)


def _removal(text: str, start: int, end: int) -> tuple[int, int, str]:
    """Remove a flag (and its value) with the blanks before it; its whole line when nothing
    else is on it."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    before, after = text[line_start:start], text[end:line_end]
    if before.strip() == "" and after.strip() in ("", "\\"):
        return line_start, min(line_end + 1, len(text)), ""
    while start > line_start and text[start - 1] in " \t":
        start -= 1
    return start, end, ""


def _append(text: str, model: ModelCmd, words, appended: list[str]) -> tuple[int, int, str]:
    last_end = words[-1][2] if words else model.tokens[-1].end
    if model.style.endswith("block (|)") or model.style.endswith("block (>)"):
        line_start = text.rfind("\n", 0, last_end) + 1
        line_end = text.find("\n", last_end)
        line_end = len(text) if line_end < 0 else line_end
        line = text[line_start:line_end]
        indent = line[: len(line) - len(line.lstrip())]
        continued = any(text[t.start:text.find("\n", t.end)].rstrip().endswith("\\")
                        for t in model.tokens[:-1])
        tail = line[last_end - line_start:]
        head = " \\" if continued and not tail.rstrip().endswith("\\") else ""
        newline = "\r\n" if text[line_end - 1:line_end] == "\r" else "\n"
        if newline == "\r\n":  # the line's own \r stays at its end
            line_end -= 1
        lines = [f"{newline}{indent}{a}" for a in appended]
        if continued:
            lines = [f"{piece} \\" if k < len(lines) - 1 else piece for k, piece in enumerate(lines)]
        return line_end, line_end, head + "".join(lines)
    return last_end, last_end, "".join(f" {a}" for a in appended)


def _verify(config: SwapConfig, model: ModelCmd, new_text: str, expected: list[str],
            macro: bool = False) -> None:
    what = f"macro {model.name}" if macro else f"model {model.name}"
    try:
        after = from_text(new_text, config.path)
        again = after.macro(model.name) if macro else after.model(model.name)
    except Exception as exc:  # noqa: BLE001 - any failure to read it back is a refusal
        raise InvalidInputError(f"SpecDeck's edit of {what} would not read back "
                                f"({exc}); nothing was changed.", "Edit it by hand.") from None
    got = [t.text for t in again.tokens or ()]
    if got != expected:
        raise InvalidInputError(f"SpecDeck's edit of {what} would mean something "
                                "other than what was asked; nothing was changed.",
                                "Edit it by hand.")
    # Everything else reads as before: every model's cmd as written (a macro edit changes
    # what they expand to, not what they say), and every other macro.
    def written(cfg: SwapConfig):
        return ({m.name: m.value for m in cfg.models if macro or m.name != model.name},
                {m.name: m.value for m in cfg.macro_cmds if not macro or m.name != model.name})

    if written(config) != written(after):
        raise InvalidInputError("SpecDeck's edit would change other models or macros too; "
                                "nothing was changed.", "Edit it by hand.")
