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

import re
from dataclasses import dataclass

from specdeck.core.config.edit import ConfigChange
from specdeck.core.errors import InvalidInputError
from specdeck.core.printable import printable
from specdeck.core.swap.cmd import canonical, shell_quote, source_breaks
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
        return tuple(canonical(n) for n in (self.flag, *self.also, *self.replaces))


def _name(text: str) -> str:
    return canonical(text.split("=", 1)[0]) if text.startswith("-") else text


def is_flag(text: str) -> bool:
    if not text.startswith("-") or text == "-":
        return False
    try:
        float(text)
        return False
    except ValueError:
        return True


def check_editable(model: ModelCmd, what: str, shared_ok: bool = False) -> None:
    """Refuse, saying why, a cmd SpecDeck cannot edit safely: one llama-swap cannot read, one
    SpecDeck cannot map to its arguments, one shared with other places (unless
    ``shared_ok``: the caller names them)."""
    if model.errors:
        raise InvalidInputError(f"{what}: {model.errors[0]}; SpecDeck will not edit it until "
                                "that is fixed. Nothing was changed.",
                                "Fix it in a text editor first.")
    if model.tokens is None:
        raise InvalidInputError(f"{what}: SpecDeck will not edit "
                                f"{'it' if what.startswith('Macro') else 'its cmd'}: "
                                f"{model.not_editable}.", "Edit it by hand.")
    if model.shared_with and not shared_ok:
        raise InvalidInputError(
            f"{what}: its cmd is written once and also used at {', '.join(model.shared_with)} "
            "(a YAML anchor, alias or merge key): an edit here would change those too, so "
            "nothing was changed.",
            "Give it a cmd of its own in the file, then set it again.")


def plan_edit(config: SwapConfig, model_name: str, edits: list[FlagEdit],
              warnings: tuple[str, ...] = (), macro: bool = False,
              shared_ok: bool = False) -> ConfigChange:
    """The planned change (nothing written) for ``edits`` to one model's cmd, or with
    ``macro`` to one global macro's value (every model using it sees the change). With
    ``shared_ok`` a cmd written once for several models (a YAML anchor) is edited for all of
    them."""
    model = config.macro(model_name) if macro else config.model(model_name)
    what = f"Macro {printable(model_name)}" if macro else f"Model {printable(model_name)}"
    check_editable(model, what, shared_ok)
    if not model.tokens:
        raise InvalidInputError(f"{what} is empty.")
    for edit in edits:
        if edit.value is not None and edit.value is not BARE:
            _check_writable(str(edit.value), edit.flag, model, what)
    text = config.document.text
    words = [(t.text, t.start, t.end) for t in model.tokens]
    splices: list[tuple[int, int, str]] = []
    removed: list[tuple[int, int]] = []
    expected = [w[0] for w in words]
    appended: list[str] = []
    for edit in edits:
        spots = [i for i, w in enumerate(words) if _name(w[0]) in edit.names]
        if edit.value is None:
            for i in reversed(spots):
                last = i + 1 if "=" not in words[i][0] and i + 1 < len(words) \
                    and not is_flag(words[i + 1][0]) else i
                removed.append((words[i][1], words[last][2]))
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
        name = written.split("=", 1)[0]
        keep = edit.flag if canonical(name) in {canonical(r) for r in edit.replaces} else name
        if "=" in written:
            new_word = keep if edit.value is BARE else f"{keep}={edit.value}"
            splices.append((start, end, shell_quote(new_word)))
            expected[i] = new_word
            continue
        if keep != name:
            splices.append((start, end, keep))
            expected[i] = keep
        has_value = i + 1 < len(words) and not is_flag(words[i + 1][0])
        if edit.value is BARE:
            continue
        if has_value:
            splices.append((words[i + 1][1], words[i + 1][2], shell_quote(str(edit.value))))
            expected[i + 1] = str(edit.value)
        else:
            splices.append((end, end, " " + shell_quote(str(edit.value))))
            expected.insert(i + 1, str(edit.value))
            words.insert(i + 1, (str(edit.value), end, end))
    splices += [_removal(text, start, end) for start, end in _merged(text, removed)]
    if appended:
        splices.append(_append(text, model, words, appended))
    new_text = text
    # Applied from the end of the file back, so each splice's positions still hold; two at
    # one place (a value given to a bare flag that ends the cmd, and a flag appended after it)
    # go in the order they were planned.
    ordered = sorted(enumerate(splices), key=lambda s: (s[1][0], s[1][1], s[0]), reverse=True)
    for _, (start, end, replacement) in ordered:
        new_text = new_text[:start] + replacement + new_text[end:]
    _verify(config, model, new_text, expected, macro, [str(e.value) for e in edits
                                                       if e.value not in (None, BARE)])
    keys = tuple((model_name, e.flag) for e in edits)
    return ConfigChange(config.document, new_text, keys,
                        {(model_name, e.flag): e.value for e in edits}, warnings)


# What YAML lets a scalar hold (YAML 1.2 c-printable): no other control character can be
# written into a config.yaml, in any style.
_NOT_YAML = re.compile("[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _check_writable(value: str, flag: str, model: ModelCmd, what: str) -> None:
    """Refuse a value SpecDeck cannot write into this cmd's YAML style so that llama-swap
    reads it back as one argument, saying that the limit is SpecDeck's, not the file's."""
    word = shell_quote(value)
    style = model.style
    by_hand = "Write the flag by hand in a text editor"
    if "\n" in value or "\r" in value or "\x85" in value:
        why = ("it has a line break, and llama-swap reads a cmd line by line (it drops lines "
               "that start with #, joins lines that end with \\), so SpecDeck does not "
               "write one inside an argument")
        fix = "Use a path without a line break."
    elif _NOT_YAML.search(value):
        why = "it has a control character, which YAML does not allow in a file"
        fix = "Use a path without control characters."
    elif "${" in value and value not in {t.text for t in model.tokens}:
        # llama-swap substitutes ${...} anywhere in a cmd, quoted or not, and has no escape
        # for it: a value of SpecDeck's own cannot hold one (the user's own macro uses, which
        # a migration carries over as written, can)
        why = "it holds '${', which llama-swap reads as a macro and has no escape for"
        fix = "Rename or link the file to a path without '${'."
    elif style == "plain" and (": " in word or word.endswith(":") or " #" in word
                               or "\t#" in word):
        why = "in a plain (unquoted) YAML cmd, ': ' would start a new key and ' #' a comment"
        fix = f"{by_hand}, or make the cmd a block (cmd: |), which can hold them."
    elif style == "single-quoted" and "'" in word:
        why = "it needs a quote ('), which would end this single-quoted YAML cmd"
        fix = f"{by_hand}, or make the cmd a block (cmd: |)."
    elif style == "double-quoted" and ('"' in word or "\\" in word):
        why = 'it needs a " or \\, which this double-quoted YAML cmd would read as its own'
        fix = f"{by_hand}, or make the cmd a block (cmd: |)."
    else:
        return
    raise InvalidInputError(
        f"{what}: SpecDeck cannot write {flag} {value!r} into its {style} cmd safely: {why}. "
        "Your file is fine; nothing was changed.", fix)


def _line_bounds(lines: str, start: int, end: int) -> tuple[int, int]:
    """Where the line(s) holding ``start``..``end`` begin and end (before their break) in
    ``lines``, the file's text with its line breaks as LF at the same positions."""
    line_start = lines.rfind("\n", 0, start) + 1
    line_end = lines.find("\n", end)
    return line_start, len(lines) if line_end < 0 else line_end


def _merged(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Removed words next to each other on a line (``-md d.gguf --spec-type x``) as one span,
    so that their blanks are taken once and a line left empty goes whole."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and text[merged[-1][1]:start].strip(" \t") == "":
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _removal(text: str, start: int, end: int) -> tuple[int, int, str]:
    """Remove a flag (and its value) with the blanks before it; its whole line when nothing
    else is on it."""
    line_start, line_end = _line_bounds(source_breaks(text), start, end)
    before, after = text[line_start:start], text[end:line_end]
    if before.strip() == "" and after.strip() in ("", "\\"):
        return line_start, min(line_end + 1, len(text)), ""
    if before.strip() == "":
        # First on its line: the blanks before it are the line's indentation (in a block
        # cmd, YAML's), so the blanks after it go instead.
        while end < line_end and text[end] in " \t":
            end += 1
        return start, end, ""
    while start > line_start and text[start - 1] in " \t":
        start -= 1
    return start, end, ""


def _line_break(text: str, at: int) -> str:
    """The line break the file uses at ``at`` (or, at its end, its first one): LF, CR LF or
    a lone CR, so that a new line is written the way the file writes its lines."""
    if text[at:at + 1] == "\r":
        return "\r"
    if text[at:at + 1] == "\n":
        return "\r\n" if text[at - 1:at] == "\r" else "\n"
    return "\r\n" if "\r\n" in text else "\r" if "\r" in text else "\n"


def _append(text: str, model: ModelCmd, words, appended: list[str]) -> tuple[int, int, str]:
    last_end = words[-1][2] if words else model.tokens[-1].end
    if model.style.endswith("block (|)") or model.style.endswith("block (>)"):
        lines_text = source_breaks(text)
        line_start, line_end = _line_bounds(lines_text, last_end, last_end)
        newline = _line_break(text, line_end)
        if newline == "\r\n" and text[line_end - 1:line_end] == "\r":
            line_end -= 1  # the line's own CR stays at its end
        line = text[line_start:line_end]
        indent = line[: len(line) - len(line.lstrip())]
        continued = any(lines_text[t.start:_line_bounds(lines_text, t.end, t.end)[1]].rstrip()
                        .endswith("\\") for t in model.tokens[:-1])
        tail = line[last_end - line_start:]
        head = " \\" if continued and not tail.rstrip().endswith("\\") else ""
        lines = [f"{newline}{indent}{a}" for a in appended]
        if continued:
            lines = [f"{piece} \\" if k < len(lines) - 1 else piece for k, piece in enumerate(lines)]
        return line_end, line_end, head + "".join(lines)
    return last_end, last_end, "".join(f" {a}" for a in appended)


def _verify(config: SwapConfig, model: ModelCmd, new_text: str, expected: list[str],
            macro: bool = False, values: list[str] = ()) -> None:
    what = f"macro {printable(model.name)}" if macro else f"model {printable(model.name)}"
    own = f"{' '.join(repr(v) for v in values)} " if values else ""
    try:
        after = from_text(new_text, config.path)
        again = after.macro(model.name) if macro else after.model(model.name)
    except Exception as exc:  # noqa: BLE001 - any failure to read it back is a refusal
        problem = str(exc).split(". Fix", 1)[0].replace(config.path.name if config.path else
                                                        "config.yaml", "the edited file")
        raise InvalidInputError(f"SpecDeck cannot write {own}into {what}'s {model.style} cmd "
                                f"safely: the edited file would not read back ({problem}). "
                                "Your file is fine; nothing was changed.",
                                "Write it by hand in a text editor.") from None
    got = [t.text for t in again.tokens or ()]
    if got != expected:
        raise InvalidInputError(f"SpecDeck cannot write {own}into {what}'s {model.style} cmd "
                                "safely: llama-swap would read the edited cmd differently from "
                                "what was asked. Your file is fine; nothing was changed.",
                                "Write it by hand in a text editor.")
    # Everything else reads as before: every model's cmd as written (a macro edit changes
    # what they expand to, not what they say), and every other macro; a cmd written once for
    # several places (a YAML anchor) changes in all of them.
    same_models = {m.name for m in config.models if m.span == model.span}
    same_macros = {m.name for m in config.macro_cmds if m.span == model.span}

    def written(cfg: SwapConfig):
        return ({m.name: m.value for m in cfg.models if m.name not in same_models},
                {m.name: m.value for m in cfg.macro_cmds if m.name not in same_macros})

    if written(config) != written(after):
        raise InvalidInputError("SpecDeck's edit would change other models or macros too; "
                                "nothing was changed.", "Edit it by hand.")


def inline_macro(config: SwapConfig, model_name: str, macro: str, value: str,
                 expected: tuple[str, ...]) -> ConfigChange:
    """The change that writes ``value`` (macro ``macro``'s words as they must be for this
    model, e.g. migrated for its llama-server) into model ``model_name``'s own cmd in place
    of its ``${macro}``, leaving the macro as it is for every other model that uses it. The
    result must run ``expected`` (what the model would run with the macro set to ``value``)
    and change nothing else; otherwise it is refused, nothing written."""
    model = config.model(model_name)
    what = f"Model {printable(model_name)}"
    check_editable(model, what)
    use = "${" + macro + "}"
    text = config.document.text
    spots = [t for t in model.tokens or () if text[t.start:t.end] == use]
    if not spots or "\n" in value or "\r" in value or _NOT_YAML.search(value):
        raise InvalidInputError(
            f"{what} uses macro {printable(macro)} "
            + ("inside a word or through another macro" if not spots else
               "and its value cannot be written on one line of the cmd")
            + ": SpecDeck cannot write the macro's words into its cmd alone.",
            f"Give {printable(model_name)} its own drafting flags in its cmd by hand.")
    new_text = text
    for token in sorted(spots, key=lambda t: t.start, reverse=True):
        new_text = new_text[:token.start] + value + new_text[token.end:]
    try:
        after = from_text(new_text, config.path)
        ok = after.model(model_name).argv == tuple(expected) and all(
            m.value == after.model(m.name).value for m in config.models if m.name != model_name
        ) and [(m.name, m.value) for m in config.macro_cmds] == \
            [(m.name, m.value) for m in after.macro_cmds]
    except Exception:  # noqa: BLE001 - any failure to read it back is a refusal
        ok = False
    if not ok:
        raise InvalidInputError(f"SpecDeck cannot write macro {printable(macro)}'s words into "
                                f"model {printable(model_name)}'s {model.style} cmd safely: "
                                "llama-swap would read it differently. Nothing was changed.",
                                f"Give {printable(model_name)} its own drafting flags in its "
                                "cmd by hand.")
    return ConfigChange(config.document, new_text, ((model_name, use),), {(model_name, use): value})
