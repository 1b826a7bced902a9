"""Migrate a legacy config.yml the way TabbyAPI does, without losing the user's comments.

TabbyAPI (common/tabby_config.py, ``_from_file``) treats a file as legacy when ``model``
holds ``draft`` or ``lora``, or ``logging`` has keys without the ``log_`` prefix. It then
moves ``model.draft`` to a top-level ``draft_model``, ``model.lora`` to ``lora``, renames
``logging.X`` to ``logging.log_X``, keeps the old file as config.yml.bak and regenerates
config.yml, which drops every comment. SpecDeck makes the same moves as text edits: each
nested block (with the comment lines just above it) is cut out, dedented, and placed after
the ``model`` section.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from specdeck.core.config.document import (
    ConfigDocument,
    ConfigError,
    is_mapping,
    is_scalar,
    mapping_entry,
)
from specdeck.core.config.edit import TextEdit, apply_edits, content_end, line_end, verify
from specdeck.core.config.schema import DRAFT, MODEL
from specdeck.core.errors import InvalidInputError

# (key under model:, top-level key TabbyAPI moves it to)
NESTED_MOVES = (("draft", DRAFT), ("lora", "lora"))


@dataclass(frozen=True)
class Migration:
    document: ConfigDocument
    new_text: str
    steps: tuple[str, ...]

    @property
    def is_noop(self) -> bool:
        return not self.steps

    def diff(self) -> str:
        from specdeck.core.config.edit import ConfigChange

        return ConfigChange(self.document, self.new_text, (), {}).diff()


def legacy_parts(doc: ConfigDocument) -> list[str]:
    """What TabbyAPI would migrate in this file (empty when nothing)."""
    parts = []
    model = doc.data.get(MODEL)
    if isinstance(model, dict):
        for nested, top in NESTED_MOVES:
            if model.get(nested):
                parts.append(f"model.{nested} -> {top}")
    logging_section = doc.data.get("logging")
    if isinstance(logging_section, dict):
        for key in logging_section:
            if not str(key).startswith("log_"):
                parts.append(f"logging.{key} -> logging.log_{key}")
    return parts


def _lines_with_ends(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _move_nested(text: str, nested: str, top: str, nl: str) -> str:
    doc = ConfigDocument(text)
    model_entry = mapping_entry(doc.root, MODEL)
    if model_entry is None or not is_mapping(model_entry[1]):
        return text
    _, model_value = model_entry
    found = mapping_entry(model_value, nested)
    if found is None:
        return text
    key_node, value_node = found
    if model_value.flow_style or (is_mapping(value_node) and value_node.flow_style):
        raise InvalidInputError(
            f"model.{nested} is written in flow style ({{...}}), which SpecDeck cannot move "
            "while keeping your layout.",
            "Let TabbyAPI migrate it on start, or move it by hand.",
        )
    if mapping_entry(doc.root, top) is not None:
        raise InvalidInputError(
            f"This file has both model.{nested} and a top-level {top}; TabbyAPI would "
            f"silently replace {top} with model.{nested}.",
            "Delete the one you do not want, then migrate.",
        )

    lines = _lines_with_ends(text)
    line_of = _line_index(text)
    first = line_of(key_node.start_mark.index)
    last = line_of(line_end(text, content_end(text, key_node, value_node)))
    # The comment lines right above the key belong to it.
    column = key_node.start_mark.column
    while first > 0 and lines[first - 1].strip().startswith("#") and _indent(lines[first - 1]) >= column:
        first -= 1
    block = lines[first : last + 1]

    moved = []
    for line in block:
        body = line.rstrip("\r\n")
        ending = line[len(body) :] or nl
        if _indent(body) >= column:
            body = body[column:]
        else:
            body = body.lstrip(" ")
        moved.append(body + ending)
    # After dedenting, the key's own line starts with the key: rename it in place.
    offset = line_of(key_node.start_mark.index) - first
    moved[offset] = top + moved[offset][len(nested) :]

    remaining = lines[:first] + lines[last + 1 :]
    if remaining and not remaining[-1].endswith(("\n", "\r")):
        remaining[-1] += nl
    # Where the model section ends now: after its last entry and the blank lines after it.
    cut_text = "".join(remaining)
    cut = ConfigDocument(cut_text)
    model_key, model_value = mapping_entry(cut.root, MODEL)
    at = _line_index(cut_text)(line_end(cut_text, content_end(cut_text, model_key, model_value))) + 1
    blank_before = False
    while at < len(remaining) and not remaining[at].strip():
        at += 1
        blank_before = True
    insert = ([] if blank_before else [nl]) + moved
    if at < len(remaining):
        insert.append(nl)  # keep a blank line before whatever section follows
    return "".join(remaining[:at] + insert + remaining[at:])


def _rename_logging_keys(text: str) -> str:
    doc = ConfigDocument(text)
    entry = mapping_entry(doc.root, "logging")
    if entry is None or not is_mapping(entry[1]):
        return text
    edits = []
    for key_node, _ in entry[1].value:
        if is_scalar(key_node) and not str(key_node.value).startswith("log_"):
            start, end = key_node.start_mark.index, key_node.end_mark.index
            edits.append(TextEdit(start, end, f"log_{key_node.value}"))
    return apply_edits(text, edits)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _line_index(text: str):
    starts = [0]
    for i, ch in enumerate(text):
        if ch == "\n":
            starts.append(i + 1)

    def line_of(index: int) -> int:
        lo, hi = 0, len(starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if starts[mid] <= index:
                lo = mid
            else:
                hi = mid - 1
        return lo

    return line_of


def _tabby_migrated(data: dict[str, Any]) -> dict[str, Any]:
    """What TabbyAPI's migration makes of the values (for verification)."""
    cfg = copy.deepcopy(data)
    model = cfg.get(MODEL) if isinstance(cfg.get(MODEL), dict) else {}
    for nested, top in NESTED_MOVES:
        if model.get(nested):
            cfg[top] = model.pop(nested)
    logging_section = cfg.get("logging")
    if isinstance(logging_section, dict):
        cfg["logging"] = {
            (k if str(k).startswith("log_") else f"log_{k}"): v for k, v in logging_section.items()
        }
    return cfg


def _refuse_shared(doc: ConfigDocument) -> None:
    """Moving text that an anchor or alias ties to another place would break the other."""
    from specdeck.core.config.document import mapping_entry, shared_nodes

    model = mapping_entry(doc.root, MODEL)
    if model is None:
        return
    shared = shared_nodes(doc.root)
    for nested, _top in NESTED_MOVES:
        entry = mapping_entry(model[1], nested)
        if entry is None:
            continue
        anchored = getattr(entry[1], "anchor", None)
        if id(entry[1]) in shared or anchored:
            others = [".".join(p) for p in shared.get(id(entry[1]), []) if p != (MODEL, nested)]
            with_what = f" with {', '.join(others)}" if others else ""
            raise ConfigError(
                f"model.{nested} is shared through a YAML anchor/alias{with_what}; moving it "
                "would break that reference, so SpecDeck changed nothing.",
                f"Give model.{nested} its own values in a text editor (or move it to "
                "the top level by hand), then migrate.")


def plan_migration(doc: ConfigDocument) -> Migration:
    """The migrated text (not written). A no-op Migration when the file is not legacy."""
    steps = tuple(legacy_parts(doc))
    if not steps:
        return Migration(doc, doc.text, ())
    text = doc.text
    model = doc.data.get(MODEL) if isinstance(doc.data.get(MODEL), dict) else {}
    _refuse_shared(doc)
    for nested, top in NESTED_MOVES:
        if model.get(nested):
            text = _move_nested(text, nested, top, doc.newline)
    text = _rename_logging_keys(text)
    try:
        verify(doc, text, _tabby_migrated(doc.data))
    except ConfigError:
        raise ConfigError(
            "SpecDeck could not migrate this file without changing its meaning, so nothing "
            "was changed.",
            "Start TabbyAPI once: it migrates the file itself (without your comments).",
        ) from None
    return Migration(doc, text, steps)
