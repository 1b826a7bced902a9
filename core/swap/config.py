"""A llama-swap config.yaml: its models, each model's ``cmd`` and the drafting flags in it.

Read with the same reader as TabbyAPI's config.yml (size limit, no FIFOs, alias bombs
refused, positions kept), so a save goes through the same conflict check, backup and
atomic replace (core.config.store).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdeck.core.changed import SWAP_CONFIG
from specdeck.core.config.document import (
    ConfigDocument,
    ConfigError,
    is_mapping,
    is_scalar,
    is_sequence,
)
from specdeck.core.engines.base import DrafterKind
from specdeck.core.errors import InvalidInputError, NotFoundError
from specdeck.core.printable import printable
from specdeck.core.swap import macros
from specdeck.core.swap.cmd import (
    Token,
    UnclosedQuote,
    canonical,
    canonical_argv,
    lex,
    sanitize,
    source_breaks,
    split_command,
    strip_comments,
)
from specdeck.core.units import MiB, format_bytes
from specdeck.core.userpath import expand_user

STYLES = {None: "plain", "": "plain", "|": "literal block (|)", ">": "folded block (>)",
          "'": "single-quoted", '"': "double-quoted"}


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
    errors: tuple[str, ...] = ()
    """What is wrong with it as llama-swap reads it: a macro left unresolved (llama-swap
    refuses the config), macros too large to expand, an unclosed quote."""
    macros_resolved: bool = True
    """False when its macros leave ``${name}`` or grow too large: argv is not what llama-swap
    runs (it refuses the config, or SpecDeck stopped expanding)."""
    shared_with: tuple[str, ...] = ()
    """Other places the same YAML node is used (an anchor and its aliases or merges): an edit
    of this cmd changes them too."""

    @property
    def is_llama_server(self) -> bool:
        return bool(self.argv) and ("llama-server" in Path(self.argv[0]).name
                                    or any(a.endswith("llama.cpp:server") for a in self.argv))

    @property
    def program(self) -> str:
        """The llama-server that runs this cmd, as the cmd names it: its first word, or for a
        container (``docker run ... ghcr.io/ggml-org/llama.cpp:server``) the image, whose
        llama-server is not on this machine: the container tool's own ``--help`` (docker's)
        says nothing about llama-server's flags."""
        if not self.argv or "llama-server" in Path(self.argv[0]).name:
            return self.argv[0] if self.argv else ""
        return next((a for a in self.argv if a.endswith("llama.cpp:server")), self.argv[0])

    @property
    def in_container(self) -> bool:
        """Whether llama-server runs in a container (``docker run ... llama.cpp:server``):
        not a program SpecDeck can start on this machine."""
        return self.is_llama_server and self.program != self.argv[0]

    @property
    def flags(self) -> tuple[str, ...]:
        """argv with each long flag named as llama-server matches it (``--draft_max`` is
        ``--draft-max``)."""
        return canonical_argv(self.argv)

    def flag_value(self, *names: str) -> str | None:
        """The value of the last of ``names`` (any spelling llama-server accepts) in argv
        ("--flag value" or "--flag=value")."""
        from specdeck.core.servers.llama_server import flag_value

        return flag_value(self.flags, *(canonical(n) for n in names))

    def drafting(self, info=None) -> dict[str, Any]:
        """The drafting flags llama-swap passes (after macros), for showing; what they draft
        with as ``info`` (the help of the binary that runs them; by default the fallback)
        reads them."""
        from specdeck.core.servers.llama_server import drafter_from_flags, drafting_flags

        flags = drafting_flags(self.flags)
        drafter = drafter_from_flags(self.flags, info)
        words = [t.text for t in self.tokens] if self.tokens is not None \
            else split_command(strip_comments(self.value))
        own = {canonical(w.split("=")[0]) for w in words}
        in_macros = [f for f in flags if f.startswith("-") and f.split("=")[0] not in own]
        return {"flags": list(flags), "drafts": drafter.kind is not DrafterKind.NONE,
                "drafter": drafter.label, "flags_in_macros": in_macros}


@dataclass(frozen=True)
class SwapConfig:
    document: ConfigDocument
    models: tuple[ModelCmd, ...]
    macros: dict[str, str] = field(default_factory=dict)
    macro_cmds: tuple[ModelCmd, ...] = ()
    """The global macros, read like cmds (their own words and where they are written), so a
    flag set in a macro can be edited where it is written."""
    problems: tuple[str, ...] = ()
    """What llama-swap refuses in the file's macro declarations (it would not start)."""
    aliases: dict[str, str] = field(default_factory=dict)
    """A model's other names (its ``aliases:`` list, which llama-swap answers requests for)
    -> the model's own name."""

    @property
    def path(self) -> Path | None:
        return self.document.path

    def model(self, name: str) -> ModelCmd:
        """The model called ``name``, or that has ``name`` among its aliases."""
        own = self.aliases.get(name, name) if all(m.name != name for m in self.models) \
            else name
        for model in self.models:
            if model.name == own:
                return model
        names = ", ".join(printable(m.name) for m in self.models) or "none"
        aliases = (f"; aliases: {', '.join(printable(a) for a in self.aliases)}"
                   if self.aliases else "")
        raise InvalidInputError(f"{self.path} has no model {name!r} (it has: {names}{aliases}).",
                                "Use a name from its models: section, or one of their "
                                "aliases.")

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
        doc = ConfigDocument.from_file(path, SWAP_CONFIG)
    except NotFoundError:
        raise NotFoundError(f"{expand_user(path)} does not exist.",
                            "Give the path of your llama-swap config.yaml.") from None
    return from_document(doc)


def from_text(text: str, path: Path | None = None) -> SwapConfig:
    return from_document(ConfigDocument(text, path=path, what=SWAP_CONFIG))


MERGE_TAG = "tag:yaml.org,2002:merge"
MAX_TOTAL_CHARS = 16 * MiB
"""The most all cmds and macros of one file may expand to together (each is bounded by
core.swap.macros.MAX_CMD_CHARS): a 4 MB file of models that each use a large macro must not
take gigabytes to read."""
MAX_WORK_CHARS = 512 * MiB
"""The most string building and scanning expanding one file's macros may take (about a second
here): a file of thousands of chained macros is refused rather than read for minutes. A real
config's macros take a few KiB."""


def _is_merge(key_node) -> bool:
    return is_scalar(key_node) and (key_node.tag == MERGE_TAG or key_node.value == "<<")


def effective_entries(node) -> list[tuple[Any, Any]]:
    """(key node, value node) of a mapping with YAML merge keys (``<<: *base``, ``<<: [*a,
    *b]``) resolved as yaml.v3 and ruamel resolve them: the mapping's own keys win, then the
    merged mappings in the order given, each with its own merges."""
    found: dict[Any, tuple[Any, Any]] = {}
    pending = [node]
    seen: set[int] = set()
    while pending:
        current = pending.pop(0)
        if not is_mapping(current) or id(current) in seen:
            continue
        seen.add(id(current))
        merges = []
        for key_node, value_node in current.value:
            if _is_merge(key_node):
                merges.extend(value_node.value if is_sequence(value_node) else [value_node])
            elif is_scalar(key_node):
                found.setdefault(str(key_node.value), (key_node, value_node))
        pending[:0] = merges  # a merged mapping's own merges come before the next one
    return list(found.values())


def effective_entry(node, key: str):
    return next(((k, v) for k, v in effective_entries(node) if str(k.value) == key), None)


def _places(root, wanted: set[int]) -> dict[int, list[str]]:
    """Where each node of ``wanted`` appears in the file, as dotted key paths: written there,
    or through an alias (a merge key's mappings are followed where they are merged, by
    :func:`effective_entries`, not here). The alias-bomb guard has bounded the walk."""
    places: dict[int, list[str]] = {}
    stack: list[tuple[Any, tuple[str, ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if node is None:
            continue
        if id(node) in wanted:
            places.setdefault(id(node), []).append(".".join(path))
        if is_mapping(node):
            for key_node, value_node in node.value:
                if not _is_merge(key_node):
                    stack.append((value_node, path + (str(key_node.value),)))
        elif is_sequence(node):
            stack.extend((item, path + (str(i),)) for i, item in enumerate(node.value))
    return places


def from_document(doc: ConfigDocument) -> SwapConfig:
    where = doc.path.name if doc.path else "config.yaml"
    entry = effective_entry(doc.root, "models")
    if entry is None or not is_mapping(entry[1]):
        raise ConfigError(f"{where} has no models: section, so it is not a llama-swap config.",
                          "Give the config.yaml that llama-swap runs with (--config).")
    data = doc.data
    problems = []
    global_entry = effective_entry(doc.root, "macros")
    global_macros = macros.declarations(data.get("macros"))
    table = macros.Table(global_macros.macros)
    problems += _merge_in_macros(global_entry[1] if global_entry else None, "")
    problems += global_macros.problems
    reader = _Reader(doc, where)
    found = []
    for key_node, value_node in effective_entries(entry[1]):
        name = str(key_node.value)
        cmd = effective_entry(value_node, "cmd") if is_mapping(value_node) else None
        if cmd is None or not is_scalar(cmd[1]):
            continue  # a peer or an upstream without cmd: nothing to edit
        own = data["models"].get(name) or {}
        if not isinstance(own.get("cmd"), str):
            continue
        own_entry = effective_entry(value_node, "macros")
        own_macros = macros.declarations(own.get("macros"), f"model {printable(name)}: ")
        problems += _merge_in_macros(own_entry[1] if own_entry else None,
                                     f"model {printable(name)}: ")
        problems += own_macros.problems
        merged = macros.Scope(table, own_macros.macros, model_id=name)
        # The value as a YAML reader gives it (the node's own value marks folds in `>`
        # blocks for round-tripping).
        found.append((name, cmd[1], own["cmd"], merged,
                      global_macros.refused + own_macros.refused))
    macro_nodes = _macro_nodes(global_entry, global_macros)
    places = _places(doc.root, {id(f[1]) for f in found} | {id(n) for _, n, _ in macro_nodes})
    merged_into: dict[int, list[str]] = {}
    for name, node, *_ in found:
        merged_into.setdefault(id(node), []).append(f"models.{name}.cmd")
    models = []
    for name, node, value, merged, refused in found:
        others = _others(places.get(id(node), []), f"models.{name}.cmd", merged_into[id(node)])
        models.append(reader.read(name, node, value, merged, refused, others, model_id=name))
    macro_cmds = []
    for name, node, value in macro_nodes:
        # A macro's own value sees the macros declared before it.
        before = macros.Scope(table, upto=table.index[name])
        others = _others(places.get(id(node), []), f"macros.{name}", [])
        macro_cmds.append(reader.read(name, node, value, before, global_macros.refused, others))
    return SwapConfig(doc, tuple(models), dict(global_macros.macros), tuple(macro_cmds),
                      tuple(dict.fromkeys(problems)), _aliases(data.get("models")))


def _aliases(models) -> dict[str, str]:
    """Each alias a model lists (``aliases: [a, b]``) -> the model's name."""
    out: dict[str, str] = {}
    for name, body in (models.items() if isinstance(models, dict) else ()):
        listed = body.get("aliases") if isinstance(body, dict) else None
        for alias in listed if isinstance(listed, list) else ():
            if isinstance(alias, str) and alias:
                out.setdefault(alias, str(name))
    return out


MAX_PLACES_SHOWN = 8


def _others(paths: list[str], own: str, merged_into: list[str]) -> tuple[str, ...]:
    """The other places a node is used, the first few by name (a thousand models sharing one
    anchor must not make a million names)."""
    others = [p for p in dict.fromkeys([*paths, *merged_into]) if p != own]
    if len(others) > MAX_PLACES_SHOWN:
        return (*others[:MAX_PLACES_SHOWN], f"{len(others) - MAX_PLACES_SHOWN} more")
    return tuple(others)


def _merge_in_macros(node, where: str) -> list[str]:
    if is_mapping(node) and any(_is_merge(k) for k, _ in node.value):
        return [f"{where}macros use a YAML merge key (<<); llama-swap reads macros in the "
                "order written and refuses the name '<<'"]
    return []


def _macro_nodes(entry, declared: macros.Declared) -> list[tuple[str, Any, str]]:
    """The global macros llama-swap accepts, as (name, node, text), in declaration order."""
    if entry is None or not is_mapping(entry[1]):
        return []
    texts = dict(declared.macros)
    return [(str(k.value), v, texts[str(k.value)]) for k, v in entry[1].value
            if not _is_merge(k) and is_scalar(v) and str(k.value) in texts]


class _Reader:
    """Reads cmds (and macros read like cmds) of one document, within one expansion budget."""

    def __init__(self, doc: ConfigDocument, where: str):
        self.doc = doc
        self.where = where
        self.text = source_breaks(doc.text)
        """The file's text with YAML's line breaks as LF, at the same positions."""
        self.budget = MAX_TOTAL_CHARS
        self.work = macros.Budget(MAX_WORK_CHARS)

    def line_of(self, index: int) -> int:
        return self.text.count("\n", 0, index) + 1

    def read(self, name: str, node, value: str, merged, refused, shared_with,
             model_id: str | None = None) -> ModelCmd:
        start, end = node.start_mark.index, node.end_mark.index
        style = STYLES.get(node.style, str(node.style))
        lines = self.text.count("\n", start, end) + 1
        kept = () if model_id is not None else ("MODEL_ID",)
        try:
            expansion = macros.expand(strip_comments(value), merged, refused=refused, kept=kept,
                                      budget=self.work)
        except macros.TooTangled:
            raise ConfigError(
                f"{self.where}'s macros use each other so much that expanding them would take "
                f"more than {format_bytes(MAX_WORK_CHARS)} of work; a llama-swap config's macros "
                "take a few KiB.",
                "Check the macros that use other macros; SpecDeck will not read this file.",
            ) from None
        self.budget -= 0 if expansion.too_large else len(expansion.text)  # what is kept
        if self.budget < 0:
            raise ConfigError(
                f"{self.where}'s macros expand to more than {format_bytes(MAX_TOTAL_CHARS)} in "
                "all; a llama-swap config's cmds hold a few KiB.",
                "Check the macros that use other macros; SpecDeck will not read this file.")
        common = dict(name=name, value=value, style=style, span=(start, end),
                      macros_used=expansion.used, lines=lines, shared_with=shared_with,
                      macros_resolved=expansion.problem is None)
        if expansion.too_large:
            return ModelCmd(argv=(), tokens=None, not_editable=expansion.problem,
                            errors=(expansion.problem,), **common)
        errors = [expansion.problem] if expansion.problem else []
        try:
            argv = tuple(sanitize(expansion.text))
        except UnclosedQuote as exc:
            argv = tuple(t.text for t in exc.tokens)
            errors.append(f"once its macros are substituted ({', '.join(expansion.used)}), it "
                          f"has {exc}: {UNCLOSED_EFFECT}")
        tokens, reason = self._source_tokens(node, start, end)
        if reason is not None and "unclosed" in reason:
            errors = [e for e in errors if "unclosed" not in e] + [reason]
        if tokens is not None:
            try:
                expected = sanitize(value)
            except ValueError:
                expected = None
            if [t.text for t in tokens] != expected:
                tokens, reason = None, ("SpecDeck cannot match the cmd's text to its arguments "
                                        "(an unusual quoting or escape)")
        return ModelCmd(argv=argv, tokens=None if tokens is None else tuple(tokens),
                        not_editable=reason, errors=tuple(errors), **common)

    def _source_tokens(self, node, start: int, end: int):
        text = self.doc.text
        raw = text[start:end]
        try:
            if node.style in ("|", ">"):
                first_break = source_breaks(raw).find("\n")
                if first_break < 0:
                    return [], None
                body_start = start + first_break + 1
                return lex(text[body_start:end], offset=body_start, skip_comment_lines=True,
                           source=True), None
            if node.style == "'":
                if "''" in raw[1:-1]:
                    return None, "its single-quoted cmd contains '' escapes"
                return lex(raw[1:-1], offset=start + 1, source=True), None
            if node.style == '"':
                if "\\" in raw[1:-1]:
                    return None, "its double-quoted cmd contains backslash escapes"
                return lex(raw[1:-1], offset=start + 1, source=True), None
            return lex(raw, offset=start, source=True), None
        except UnclosedQuote as exc:
            return None, (f"line {self.line_of(exc.start)} has {exc}: {UNCLOSED_EFFECT}")


UNCLOSED_EFFECT = ("llama-swap passes everything after it, to the end of the cmd, as one "
                   "argument; close the quote")
