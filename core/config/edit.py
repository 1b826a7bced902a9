"""Change values in a config.yml by rewriting only their characters.

A change replaces the span of a value node with the new value's YAML text; a key that is
not in the file yet gets one new line at the end of its section; a missing section is
appended at the end of the file. Every result is parsed again and compared with the
intended values before anyone can save it: if SpecDeck's edit would mean anything other
than what was asked, it refuses instead of writing.
"""

from __future__ import annotations

import copy
import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specdeck.core.config.document import (
    ConfigDocument,
    ConfigError,
    is_mapping,
    is_scalar,
    is_sequence,
    mapping_entry,
    parse_values,
    shared_nodes,
)
from specdeck.core.config.schema import Kind, Setting, normalize, setting
from specdeck.core.errors import InvalidInputError

Key = tuple[str, str]


@dataclass(frozen=True)
class ConfigChange:
    """A planned edit: the new text and a diff, not yet written anywhere."""

    document: ConfigDocument
    new_text: str
    changed_keys: tuple[Key, ...]
    values: Mapping[Key, Any]
    warnings: tuple[str, ...] = ()
    """What the user should know before saving (e.g. a section shared through an anchor)."""

    @property
    def is_noop(self) -> bool:
        return self.new_text == self.document.text

    def diff(self, context: int = 2) -> str:
        """The unified diff of the change, every secret in it masked (core.urls.shown_text:
        any model's, macro's or key's, in changed and context lines alike): a diff is
        printed, shown in dialogs and kept in reports."""
        from specdeck.core.urls import shown_text

        name = self.document.path.name if self.document.path else "config.yml"
        old, new = shown_text(self.document.text), shown_text(self.new_text)
        lines = difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"{name} (on disk)",
            tofile=f"{name} (after saving)",
            n=context,
        )
        shown = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
        if not shown and not self.is_noop:
            shown = f"{name}: only a secret value changes (not shown).\n"
        return shown


# -- rendering values --------------------------------------------------------------------


def _is_plain_safe(text: str) -> bool:
    """True if ``text`` can be written unquoted and reads back as the same string."""
    if not text or text != text.strip() or "\n" in text or " #" in text or "\t" in text:
        return False
    if text[0] in "!&*[]{}|>'\"%@`#,?:-" and not (text[0] == "-" and len(text) > 1 and text[1] != " "):
        return False
    if ": " in text or text.endswith(":"):
        return False
    try:
        return parse_values(f"k: {text}\n") == {"k": text}
    except ConfigError:
        return False


def _yaml_printable(ch: str) -> bool:
    """YAML 1.2's c-printable set: what may appear unescaped in a YAML file."""
    code = ord(ch)
    return (
        code in (0x09, 0x0A, 0x0D, 0x85)
        or 0x20 <= code <= 0x7E
        or 0xA0 <= code <= 0xD7FF
        or 0xE000 <= code <= 0xFFFD
        or 0x10000 <= code <= 0x10FFFF
    ) and code != 0xFEFF


_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _double_quoted(text: str) -> str:
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif _yaml_printable(ch) and ch not in "\x85":
            out.append(ch)
        elif ord(ch) <= 0xFF:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return '"' + "".join(out) + '"'


def _quote(text: str, style: str | None) -> str:
    single_ok = all(_yaml_printable(ch) for ch in text) and not any(c in text for c in "\n\r\x85")
    if style == "'" and single_ok:
        return "'" + text.replace("'", "''") + "'"
    return _double_quoted(text)


def _number(value: float, compact: bool) -> str:
    if compact and float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def render_scalar(s: Setting, value: Any, style: str | None = None) -> str:
    """The YAML text for a normalised value (``""`` for blank)."""
    if value is None:
        return ""
    if s.kind is Kind.BOOL:
        return "true" if value else "false"
    if s.kind is Kind.INT:
        return str(int(value))
    if s.kind is Kind.FLOAT:
        return _number(value, compact=False)
    if s.kind is Kind.FLOAT_LIST:
        return "[" + ", ".join(_number(v, compact=True) for v in value) + "]"
    text = str(value)
    if style in ("'", '"') or not _is_plain_safe(text):
        return _quote(text, style)
    return text


def python_value(s: Setting, value: Any) -> Any:
    """What a YAML safe loader returns for the rendered value (for verification)."""
    if value is None:
        return None
    if s.kind is Kind.FLOAT_LIST:
        return [int(v) if float(v).is_integer() else v for v in value]
    return value


# -- positions ---------------------------------------------------------------------------


def _colon_end(text: str, key_node) -> int:
    """Index just past the ':' that follows ``key_node``."""
    i = key_node.end_mark.index
    while i < len(text) and text[i] in " \t":
        i += 1
    if i >= len(text) or text[i] != ":":
        raise ConfigError("Unexpected key syntax in config.yml (no ':' after a key).")
    return i + 1


def content_end(text: str, key_node, value_node) -> int:
    """Index just past the last character that belongs to ``value_node``."""
    if is_scalar(value_node):
        if value_node.start_mark.index == value_node.end_mark.index:
            return _colon_end(text, key_node)
        return value_node.end_mark.index
    if value_node.flow_style:
        return value_node.end_mark.index
    if not value_node.value:
        return value_node.end_mark.index
    if is_sequence(value_node):
        last = value_node.value[-1]
        return content_end(text, key_node, last) if not is_scalar(last) else last.end_mark.index
    last_key, last_value = value_node.value[-1]
    return content_end(text, last_key, last_value)


def line_end(text: str, index: int) -> int:
    """Index of the line break at or after ``index`` (len(text) on the last line)."""
    end = text.find("\n", index)
    if end < 0:
        return len(text)
    return end - 1 if end > 0 and text[end - 1] == "\r" else end


def _line_start(text: str, index: int) -> int:
    return text.rfind("\n", 0, index) + 1


def _child_indent(doc: ConfigDocument) -> int:
    """The indentation the file uses for keys inside a section (2 when unknown)."""
    if is_mapping(doc.root):
        for _, value in doc.root.value:
            if is_mapping(value) and value.value and not value.flow_style:
                return value.value[0][0].start_mark.column
    return 2


# -- planning ----------------------------------------------------------------------------


@dataclass
class TextEdit:
    start: int
    end: int
    text: str
    depth: int = 0
    """Nesting depth of the section an insertion belongs to: when two insertions land at
    the same place (the end of model.draft is also the end of model), the deeper one must
    come first or its lines would fall outside its section."""


def _value_edit(doc: ConfigDocument, s: Setting, value: Any, key_node, value_node) -> TextEdit:
    text = doc.text
    style = getattr(value_node, "style", None) if is_scalar(value_node) else None
    if style in ("|", ">"):
        raise InvalidInputError(
            f"{s.dotted} is written as a block scalar ({style}) in this file; SpecDeck edits "
            "values written on the key's own line, so it changed nothing.",
            f"Rewrite it as `{s.key}: value` in a text editor, then try again.")
    if not is_scalar(key_node):
        raise InvalidInputError(f"{s.dotted} has a complex key in this file; SpecDeck changed "
                                "nothing.", "Write it as a plain `key: value` line.")
    if is_mapping(value_node):
        raise InvalidInputError(
            f"{s.dotted} holds a nested mapping in this file, not a value.",
            "Fix that key in a text editor first.",
        )
    if is_sequence(value_node) and not value_node.flow_style and value_node.value:
        # A block list: keep block style when the new list is not empty.
        first = value_node.value[0]
        indent = text[_line_start(text, first.start_mark.index) : first.start_mark.index]
        indent = indent[: len(indent) - len(indent.lstrip(" "))]
        end = content_end(text, key_node, value_node)
        if value:
            items = [_number(v, compact=True) for v in value]
            # The first item's "- " stays where it is; later items get lines of their own
            # with the dash at the same column.
            lines = [items[0]] + [f"{indent}- {item}" for item in items[1:]]
            return TextEdit(first.start_mark.index, end, doc.newline.join(lines))
        return TextEdit(_colon_end(text, key_node), end, " []")
    if is_scalar(value_node) and value_node.start_mark.index == value_node.end_mark.index:
        at = _colon_end(text, key_node)
        rendered = render_scalar(s, value)
        return TextEdit(at, at, f" {rendered}" if rendered else "")
    style = getattr(value_node, "style", None) if is_scalar(value_node) else None
    rendered = render_scalar(s, value, style if s.kind in (Kind.TEXT, Kind.PATH) else None)
    start, end = value_node.start_mark.index, value_node.end_mark.index
    if not rendered:
        # Blanking a value: also drop the spaces between the colon and the old value.
        colon = _colon_end(text, key_node)
        if not text[colon:start].strip(" \t"):
            start = colon
    return TextEdit(start, end, rendered)


def _section_node(doc: ConfigDocument, section: str):
    """(key_node, value_node) of the section mapping in the file, or None."""
    node = doc.root
    entry = None
    for part in doc.section_path(section):
        entry = mapping_entry(node, part)
        if entry is None:
            return None
        node = entry[1]
    return entry


def _insertion(doc: ConfigDocument, section: str, new: list[tuple[Setting, Any]]) -> TextEdit:
    """New keys at the end of ``section`` (created at the end of the file if missing)."""
    text, nl = doc.text, doc.newline
    entry = _section_node(doc, section)
    if entry is None:
        indent = " " * _child_indent(doc)
        lines = [f"{indent}{s.key}: {render_scalar(s, v)}".rstrip() for s, v in new]
        prefix = "" if not text or text.endswith(("\n", "\r")) else nl
        separator = nl if text.strip() else ""
        block = f"{prefix}{separator}{section}:{nl}" + nl.join(lines) + nl
        return TextEdit(len(text), len(text), block)
    key_node, value_node = entry
    if is_mapping(value_node) and value_node.flow_style:
        items = ", ".join(f"{s.key}: {render_scalar(s, v) or 'null'}" for s, v in new)
        close = value_node.end_mark.index - 1
        glue = ", " if value_node.value else ""
        return TextEdit(close, close, glue + items)
    if is_mapping(value_node) and value_node.value:
        first_key = value_node.value[0][0]
        indent = " " * first_key.start_mark.column
        last_key, last_value = value_node.value[-1]
        at = line_end(text, content_end(text, last_key, last_value))
        lines = [f"{indent}{s.key}: {render_scalar(s, v)}".rstrip() for s, v in new]
        return TextEdit(at, at, "".join(nl + line for line in lines))
    if is_scalar(value_node) and value_node.value in ("", "~", "null", "Null", "NULL"):
        # "draft_model:" with nothing under it (everything commented out).
        parent_indent = key_node.start_mark.column
        indent = " " * (parent_indent + _child_indent(doc))
        start = _colon_end(text, key_node)
        end = value_node.end_mark.index if value_node.value else start
        lines = [f"{indent}{s.key}: {render_scalar(s, v)}".rstrip() for s, v in new]
        at = line_end(text, end)
        return TextEdit(start, at, text[end:at] + "".join(nl + line for line in lines))
    raise InvalidInputError(
        f"The {section} section of this file is not a mapping, so SpecDeck cannot add keys to it.",
        "Fix it in a text editor (it should hold `key: value` lines).",
    )


def _set_in(data: dict, path: tuple[str, ...], key: str, value: Any) -> None:
    node = data
    for part in path:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[key] = value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b or (
        isinstance(a, (int, float)) and isinstance(b, (int, float))
        and not isinstance(a, bool) and not isinstance(b, bool) and a == b
    )


def _merge_insertions(edits: list[TextEdit]) -> list[TextEdit]:
    merged: dict[int, list[TextEdit]] = {}
    others = []
    for edit in edits:
        if edit.start == edit.end:
            merged.setdefault(edit.start, []).append(edit)
        else:
            others.append(edit)
    for at, group in merged.items():
        group.sort(key=lambda e: -e.depth)
        others.append(TextEdit(at, at, "".join(e.text for e in group)))
    return others


def apply_edits(text: str, edits: list[TextEdit]) -> str:
    ordered = sorted(_merge_insertions(edits), key=lambda e: (e.start, e.end))
    for before, after in zip(ordered, ordered[1:]):
        if after.start < before.end:
            raise ConfigError("Two edits overlap in config.yml; this is a bug in SpecDeck.")
    for edit in reversed(ordered):
        text = text[: edit.start] + edit.text + text[edit.end :]
    return text


def plan_change(doc: ConfigDocument, changes: Mapping[Key, Any]) -> ConfigChange:
    """Plan setting ``changes`` ({(section, key): value}) in ``doc``.

    Values may be what a user typed ("8,0", "q4", "" for blank); each is checked against
    TabbyAPI's rule and normalised. Keys whose value would not change are left alone, so
    an unchanged form produces an unchanged file.
    """
    backend = doc.backend_hint()
    normalized: dict[Key, Any] = {}
    for (section, key), raw in changes.items():
        s = setting(section, key)
        normalized[(section, key)] = normalize(s, raw, backend)

    edits: list[TextEdit] = []
    to_insert: dict[str, list[tuple[Setting, Any]]] = {}
    changed: list[Key] = []
    warnings: list[str] = []
    shared = shared_nodes(doc.root)
    expected = copy.deepcopy(doc.data)
    for (section, key), value in normalized.items():
        s = setting(section, key)
        present = doc.has(section, key)
        if present:
            current_raw = doc.raw(section, key)
            try:
                current = normalize(s, current_raw, backend)
            except InvalidInputError:
                current = object()  # invalid in the file: any valid value is a change
            if _same(current, value) and _same(python_value(s, value), current_raw):
                continue
        elif value is None or (s.kind is Kind.FLOAT_LIST and value == () and s.default == ()):
            continue  # absent and blank mean the same thing to TabbyAPI
        changed.append((section, key))
        _set_in(expected, doc.section_path(section), key, python_value(s, value))
        entry = _section_node(doc, section)
        found = mapping_entry(entry[1], key) if entry else None
        if found is not None and id(found[1]) in shared:
            others = [".".join(p) for p in shared[id(found[1])] if p != (*doc.section_path(section), key)]
            raise InvalidInputError(
                f"{s.dotted}'s value is shared through a YAML anchor/alias with "
                f"{', '.join(others)}; changing it would change those too, so SpecDeck changed "
                "nothing.", f"Give {s.key} a value of its own in a text editor, then try again.")
        if entry is not None and id(entry[1]) in shared:
            section_path = doc.section_path(section)
            others = [".".join(p) for p in shared[id(entry[1])] if p != section_path]
            note = (f"{'.'.join(section_path)} is shared through a YAML anchor/alias with "
                    f"{', '.join(others)}: this change applies there too.")
            if note not in warnings:
                warnings.append(note)
        if found is not None:
            edits.append(_value_edit(doc, s, value, *found))
        else:
            to_insert.setdefault(section, []).append((s, value))
    for section, items in to_insert.items():
        order = {s.key: i for i, s in enumerate(_section_settings(section))}
        items.sort(key=lambda item: order.get(item[0].key, 99))
        insertion = _insertion(doc, section, items)
        insertion.depth = len(doc.section_path(section))
        edits.append(insertion)

    new_text = apply_edits(doc.text, edits) if edits else doc.text
    verify(doc, new_text, expected)
    return ConfigChange(doc, new_text, tuple(changed), normalized, tuple(warnings))


def _section_settings(section: str) -> list[Setting]:
    from specdeck.core.config.schema import SETTINGS

    return [s for s in SETTINGS if s.section == section]


def verify(doc: ConfigDocument, new_text: str, expected: Any) -> None:
    """Refuse any edit whose result does not read back as exactly ``expected``."""
    try:
        actual = parse_values(new_text, "the edited config.yml")
    except ConfigError:  # SpecDeck's own edit broke the YAML: say so, never blame the file
        raise ConfigError(
            "SpecDeck's edit of config.yml would not be valid YAML, so nothing was changed "
            "(this is a bug in SpecDeck; please report it with the file).",
            "Make this change in a text editor for now.") from None
    if actual is None:
        actual = {}
    if not _same(actual, expected):
        raise ConfigError(
            "SpecDeck's edit of config.yml did not read back as intended, so nothing was "
            "changed (this is a bug in SpecDeck; please report it with the file).",
            "Make this change in a text editor for now.",
        )
