"""A TabbyAPI config.yml as the user wrote it: its text, its values, where each value sits.

SpecDeck never re-serialises a user's file. It parses the text once with ruamel.yaml to
learn the values and the exact character span of every node, and edits by replacing those
spans (see :mod:`specdeck.core.config.edit`). Comments, blank lines, key order, quoting,
indentation, line endings and unknown keys therefore survive byte for byte.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import Any

from specdeck.core.changed import TABBY_CONFIG
from specdeck.core.config.schema import (
    DRAFT,
    DRAFT_MODE_MODEL,
    EXLLAMAV2,
    EXLLAMAV3,
    MODEL,
    SETTINGS,
    draft_mode_of,
    file_value_problem,
    normalize,
    setting,
)
from specdeck.core.errors import InvalidInputError, NotFoundError, SpecDeckError
from specdeck.core.exl2_facts import CACHE_MODES_TEXT
from specdeck.core.printable import printable
from specdeck.core.units import format_bytes
from specdeck.core.userpath import expand_user

BOM = "\ufeff"


class ConfigError(SpecDeckError):
    """config.yml cannot be read as YAML, or its shape is not TabbyAPI's."""


class Layout(str, enum.Enum):
    DRAFT_MODEL = "draft_model"
    """Top-level ``draft_model:`` (TabbyAPI since 2024-09)."""
    LEGACY_NESTED = "legacy_nested"
    """``draft:`` nested under ``model:`` (TabbyAPI 2023-11 .. 2023-12); TabbyAPI migrates it."""
    NO_DRAFT_SECTION = "no_draft_section"
    """No draft settings at all; SpecDeck adds a top-level ``draft_model:`` when needed."""


@dataclass(frozen=True)
class Problem:
    severity: str  # "error" (TabbyAPI refuses it), "warning" (it will misbehave), "info"
    path: tuple[str, str] | None
    message: str


def _yaml_rt():
    from ruamel.yaml import YAML

    return YAML(typ="rt", pure=True)


def _yaml_safe():
    from ruamel.yaml import YAML

    return YAML(typ="safe", pure=True)


def _yaml_error(exc: Exception, where: str) -> ConfigError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    # ruamel shows a repeated section's values as "{}": name the repetition instead.
    problem = problem.replace(' with value "{}" (original value: "{}")',
                              " (the section appears twice: merge them into one)")
    if mark is not None:
        location = f"line {mark.line + 1}, column {mark.column + 1}"
        return ConfigError(
            f"{where} is not valid YAML at {location}: {problem}.",
            "Fix that line in a text editor (check indentation and quotes); nothing was changed.",
        )
    return ConfigError(f"{where} is not valid YAML: {problem}.", "Fix it in a text editor.")


def parse_values(text: str, where: str = "config.yml") -> Any:
    """The plain Python values of a YAML text, the way TabbyAPI reads it (safe loader)."""
    try:
        return _yaml_safe().load(StringIO(text))
    except Exception as exc:  # ruamel raises a family of YAMLError/MarkedYAMLError types
        raise _yaml_error(exc, where) from exc


def compose(text: str, where: str = "config.yml"):
    """The node tree with positions (None for an empty document)."""
    try:
        return _yaml_rt().compose(StringIO(text))
    except Exception as exc:
        raise _yaml_error(exc, where) from exc


def is_mapping(node) -> bool:
    return node is not None and node.tag.endswith(":map") and isinstance(node.value, list)


def is_sequence(node) -> bool:
    return node is not None and node.tag.endswith(":seq")


def is_scalar(node) -> bool:
    return node is not None and not isinstance(node.value, list)


def mapping_entry(node, key: str):
    """(key_node, value_node) of ``key`` in a mapping node, or None."""
    if not is_mapping(node):
        return None
    for key_node, value_node in node.value:
        if is_scalar(key_node) and key_node.value == key:
            return key_node, value_node
    return None


def shared_nodes(root) -> dict[int, list[tuple[str, ...]]]:
    """Nodes that appear at more than one place (an anchor and its aliases): node id -> the
    key paths where it appears. Editing such a node's text changes every place at once."""
    paths: dict[int, list[tuple[str, ...]]] = {}

    def walk(node, path: tuple[str, ...]) -> None:
        if node is None:
            return
        seen = id(node) in paths
        paths.setdefault(id(node), []).append(path)
        if seen:
            return
        if is_mapping(node):
            for key_node, value_node in node.value:
                name = str(key_node.value) if is_scalar(key_node) else "?"
                walk(value_node, path + (name,))
        elif is_sequence(node):
            for i, item in enumerate(node.value):
                walk(item, path + (str(i),))

    walk(root, ())
    return {key: where for key, where in paths.items() if len(where) > 1}


MAIN_ONLY_KEYS = (
    (DRAFT, "dynamic_draft"),
    ("network", "sse_ping_interval"),
    (MODEL, "cpu_moe_offload_layers"),
    (MODEL, "template_vars_default"),
)
"""Keys in TabbyAPI main's config_sample.yml (f1f2c85) that the exl2-checkpoint branch's
(79126f9) does not have."""

MAX_EXPANDED_VALUES = 100_000
"""Values a file may hold once its YAML aliases are expanded (config_sample: ~100)."""


def read_config_bytes(path: Path, what: str = TABBY_CONFIG) -> bytes:
    """The file's bytes, refusing what is not a plain file of a config's size: a FIFO would
    block forever, /dev/zero never ends. ``what`` names the file the user meant to give
    (a TabbyAPI config.yml, a llama-swap config.yaml, a presets file), in every message."""
    import os
    import stat as stat_module

    from specdeck.core.files import CONFIG_FILE, file_kind, open_regular_file

    st = os.stat(path)  # FileNotFoundError passes to the caller
    if stat_module.S_ISDIR(st.st_mode):
        raise IsADirectoryError(path)
    if not stat_module.S_ISREG(st.st_mode):
        raise InvalidInputError(f"{path} is {file_kind(st.st_mode)}, not a file, so SpecDeck "
                                "does not read it.", f"Point SpecDeck at your {what}.")
    if st.st_size > CONFIG_FILE:
        raise InvalidInputError(
            f"{path} is {format_bytes(st.st_size)}; a {what} is a few KiB, so "
            f"SpecDeck does not open files over {format_bytes(CONFIG_FILE)}.",
            "Check that this is the right file.")
    # Opened without blocking: a FIFO put there since the stat above is refused, not waited on.
    with open_regular_file(path, what, hint=f"Point SpecDeck at your {what}.") as handle:
        return handle.read(CONFIG_FILE + 1)


def _check_expansion(root, where: str) -> None:
    """Refuse a document whose aliases expand to more values than any config holds (a
    "billion laughs" file): walking its values would never end."""
    if root is None:
        return
    sizes: dict[int, int] = {}

    def size(node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        sizes[key] = 1  # a recursive alias counts once; YAML's own loader refuses it
        if isinstance(node.value, list):
            total = 1
            for item in node.value:
                for child in (item if isinstance(item, tuple) else (item,)):
                    total += size(child)
                    if total > MAX_EXPANDED_VALUES:
                        break
        else:
            total = 1
        sizes[key] = total
        return total

    if size(root) > MAX_EXPANDED_VALUES:
        raise ConfigError(
            f"{where} uses YAML aliases (*name) that expand to more than "
            f"{MAX_EXPANDED_VALUES:,} values, far more than any server's config holds (an alias "
            "bomb).",
            "Remove the repeated aliases; SpecDeck will not read this file.")


def fingerprint(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class ConfigDocument:
    """One config.yml: text, parsed values, node positions. Immutable once built."""

    def __init__(self, text: str, path: Path | None = None, disk_fingerprint: str | None = None,
                 what: str = TABBY_CONFIG):
        self.what = what
        """Which file this is, in the words of its messages (TABBY_CONFIG, llama-swap's
        config.yaml, a presets file): a save says so (core.changed.FileChanged)."""
        self.bom = text.startswith(BOM)
        self.text = text[1:] if self.bom else text
        self.path = path
        self.disk_fingerprint = disk_fingerprint
        where = path.name if path else "config.yml"
        self.newline = "\r\n" if "\r\n" in self.text else "\n"
        self.root = compose(self.text, where)
        _check_expansion(self.root, where)  # before anything walks the values
        data = parse_values(self.text, where)
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(
                f"{where} should be a mapping of sections (network:, model:, draft_model:, ...), "
                f"but its top level is a {type(data).__name__}.",
                "Start from TabbyAPI's config_sample.yml.",
            )
        self.data: dict[str, Any] = data

    # -- reading -------------------------------------------------------------------------
    @classmethod
    def from_file(cls, path: str | Path, what: str = TABBY_CONFIG) -> "ConfigDocument":
        """The file at ``path``, the ``what`` of every message (a TabbyAPI config.yml by
        default; a llama-swap config.yaml, a presets file)."""
        path = expand_user(path).absolute()
        try:
            raw = read_config_bytes(path, what)
        except FileNotFoundError:
            raise NotFoundError(
                f"{path} does not exist.",
                "Pick your TabbyAPI config.yml, or create one from SpecDeck's defaults "
                "(`specdeck config init PATH`, or Draft settings in the app)."
                if what == TABBY_CONFIG else f"Give the path of your {what}.",
            ) from None
        except IsADirectoryError:
            raise InvalidInputError(f"{path} is a folder, not a {what}.",
                                    f"Point SpecDeck at your {what}.") from None
        except OSError as exc:
            raise SpecDeckError(f"Cannot read {path}: {exc.strerror or exc}.") from exc
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"{path} is not UTF-8 text (byte {exc.start}).",
                "TabbyAPI reads config.yml as UTF-8; re-save it as UTF-8 in a text editor.",
            ) from None
        return cls(text, path=path, disk_fingerprint=fingerprint(raw), what=what)

    def encode(self, text: str) -> bytes:
        """Bytes for ``text`` in this file's encoding (keeps a byte-order mark if it had one)."""
        return ((BOM if self.bom else "") + text).encode("utf-8")

    @property
    def layout(self) -> Layout:
        if isinstance(self.data.get(DRAFT), dict) or DRAFT in self.data:
            return Layout.DRAFT_MODEL
        model = self.data.get(MODEL)
        if isinstance(model, dict) and isinstance(model.get("draft"), dict):
            return Layout.LEGACY_NESTED
        return Layout.NO_DRAFT_SECTION

    def section_path(self, section: str) -> tuple[str, ...]:
        """Where ``section``'s keys live in this file (legacy files nest the draft)."""
        if section == DRAFT and self.layout is Layout.LEGACY_NESTED:
            return (MODEL, "draft")
        return (section,)

    def section_values(self, section: str) -> dict[str, Any]:
        node: Any = self.data
        for part in self.section_path(section):
            node = node.get(part) if isinstance(node, dict) else None
        return node if isinstance(node, dict) else {}

    def has(self, section: str, key: str) -> bool:
        return key in self.section_values(section)

    def raw(self, section: str, key: str) -> Any:
        """The value as written in the file (None when blank or absent)."""
        return self.section_values(section).get(key)

    def value(self, section: str, key: str) -> Any:
        """The value TabbyAPI would use: the file's (normalised) or TabbyAPI's default."""
        s = setting(section, key)
        raw = self.raw(section, key)
        if raw is None:
            return s.default
        try:
            normalized = normalize(s, raw, self.declared_backend())
        except InvalidInputError:
            return raw
        return s.default if normalized is None else normalized

    def declared_backend(self) -> str | None:
        """model.backend when the file sets it."""
        backend = self.section_values(MODEL).get("backend")
        if isinstance(backend, str) and backend.lower() in (EXLLAMAV2, EXLLAMAV3):
            return backend.lower()
        return None

    def backend_hint(self) -> str | None:
        """exllamav2 / exllamav3 when the file or the target model says so, else None."""
        if declared := self.declared_backend():
            return declared
        if self.is_tabby_main():
            return EXLLAMAV3
        target = self.target_model_path()
        if target is not None and (target / "config.json").is_file():
            try:
                import json

                from specdeck.core.files import MODEL_CONFIG, read_text_bounded

                quant = json.loads(read_text_bounded(target / "config.json", "config.json",
                                                     MODEL_CONFIG))
                method = (quant.get("quantization_config") or {}).get("quant_method")
            except (OSError, ValueError, AttributeError, SpecDeckError):
                return None
            if method == "exl3":
                return EXLLAMAV3
            return EXLLAMAV2
        return None

    @property
    def runs_exllamav3(self) -> bool:
        """Whether the TabbyAPI this file belongs to runs ExLlamaV3 (EXL3 models): a file
        written for main (:meth:`is_tabby_main`) or one that declares ``backend: exllamav3``.
        The tune's TabbyAPI setup and a launched TabbyAPI arm read it."""
        return self.is_tabby_main() or self.declared_backend() == EXLLAMAV3

    def is_tabby_main(self) -> bool:
        """A file written for TabbyAPI's main branch, which runs only the ExLlamaV3 backend
        since 2026-07 (exl2-checkpoint is the last branch that runs EXL2 models). Main's
        config_sample.yml (f1f2c85) has keys the exl2-checkpoint one (79126f9) lacks; both
        have draft_mode, so that alone says nothing."""
        return any(self._has_path(path) for path in MAIN_ONLY_KEYS)

    def _has_path(self, path: tuple[str, str]) -> bool:
        section = self.data.get(path[0])
        return isinstance(section, dict) and path[1] in section

    # -- paths ---------------------------------------------------------------------------
    def resolve_dir(self, section: str, key: str) -> Path:
        """A directory setting as an absolute path.

        TabbyAPI resolves relative paths from its working directory, which is the folder of
        its config.yml when started the usual way (start.sh / start.bat).
        """
        value = self.value(section, key) or setting(section, key).default
        path = expand_user(str(value))
        if not path.is_absolute() and self.path is not None:
            path = self.path.parent / path
        return path

    def target_model_path(self) -> Path | None:
        name = self.raw(MODEL, "model_name")
        if not name:
            return None
        return self.resolve_dir(MODEL, "model_dir") / str(name)

    def draft_model_path(self) -> Path | None:
        name = self.raw(DRAFT, "draft_model_name")
        if not name:
            return None
        return self.resolve_dir(DRAFT, "draft_model_dir") / str(name)

    # -- validation ----------------------------------------------------------------------
    def problems(self) -> list[Problem]:
        """Everything TabbyAPI would refuse (errors) or that will not do what it seems."""
        found: list[Problem] = []
        backend = self.backend_hint()
        for s in SETTINGS:
            if not self.has(s.section, s.key):
                continue
            why = file_value_problem(s, self.raw(s.section, s.key), backend)
            if why:
                found.append(Problem("error", s.path, why))
        found.extend(self._unknown_draft_keys())
        found.extend(self._cross_checks(backend))
        return found

    def _unknown_draft_keys(self) -> Iterator[Problem]:
        """TabbyAPI ignores keys it does not know, so a typo silently does nothing."""
        import difflib

        known = [s.key for s in SETTINGS if s.section == DRAFT]
        where = ".".join(self.section_path(DRAFT))
        for key in self.section_values(DRAFT):
            if str(key) in known:
                continue
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else "."
            yield Problem("warning", (DRAFT, str(key)),
                          f"{where}.{printable(str(key))} is not a setting TabbyAPI knows, so it "
                          f"ignores it{hint}")

    def _cross_checks(self, backend: str | None) -> Iterator[Problem]:
        if self.is_tabby_main() and self.declared_backend() == EXLLAMAV2:
            yield Problem(
                "error", (MODEL, "backend"),
                "backend is exllamav2, but this file is for TabbyAPI's main branch (it has "
                "keys only main knows), which runs only ExLlamaV3 since 2026-07 and refuses "
                "exllamav2. "
                "Use TabbyAPI's exl2-checkpoint branch for EXL2 models, or an EXL3 model.")
        if self.layout is Layout.LEGACY_NESTED:
            yield Problem(
                "info",
                None,
                "Legacy layout: the draft settings are nested as model.draft. TabbyAPI migrates "
                "them to a top-level draft_model section on start; SpecDeck can do that now "
                "and keep your comments (`specdeck config migrate`, or Migrate… on the Draft "
                "settings page).",
            )
        max_seq_len = self.raw(MODEL, "max_seq_len")
        cache_size = self.raw(MODEL, "cache_size")
        if (
            isinstance(max_seq_len, int)
            and isinstance(cache_size, int)
            and not isinstance(cache_size, bool)
            and max_seq_len > 0
            and cache_size < max_seq_len
        ):
            yield Problem(
                "error",
                (MODEL, "cache_size"),
                f"model.cache_size ({cache_size}) is less than model.max_seq_len "
                f"({max_seq_len}); TabbyAPI requires cache_size >= max_seq_len.",
            )
        cache_mode = self.raw(MODEL, "cache_mode")
        if backend == EXLLAMAV2 and isinstance(cache_mode, str) and "," in cache_mode:
            yield Problem(
                "error",
                (MODEL, "cache_mode"),
                f"model.cache_mode {cache_mode!r} is an ExLlamaV3 bit pair; the ExLlamaV2 "
                f"backend accepts {CACHE_MODES_TEXT} (TabbyAPI falls back to FP16).",
            )
        draft_name = self.raw(DRAFT, "draft_model_name")
        if draft_name:
            draft_path = self.draft_model_path()
            if draft_path is not None and not (draft_path / "config.json").is_file():
                yield Problem(
                    "warning",
                    (DRAFT, "draft_model_name"),
                    f"The draft model folder {draft_path} does not exist or has no "
                    "config.json: TabbyAPI will fail to load the draft.",
                )
        elif self.has(DRAFT, "draft_model_name") or self.layout is not Layout.NO_DRAFT_SECTION:
            if draft_mode_of(self.section_values(DRAFT)) == DRAFT_MODE_MODEL:
                yield Problem(
                    "info",
                    (DRAFT, "draft_model_name"),
                    "No draft model is set, so speculative decoding is off.",
                )
        if backend == EXLLAMAV2:
            for s in SETTINGS:
                if s.exl3_only and self.raw(s.section, s.key) not in (None, s.default):
                    yield Problem(
                        "info",
                        s.path,
                        f"{s.dotted} is an ExLlamaV3 setting; the ExLlamaV2 backend ignores it.",
                    )
        gpu_split = self.raw(MODEL, "gpu_split")
        if gpu_split and self.value(MODEL, "gpu_split_auto") is True and not self.value(
            MODEL, "tensor_parallel"
        ):
            yield Problem(
                "info",
                (MODEL, "gpu_split"),
                "model.gpu_split is ignored while model.gpu_split_auto is true.",
            )

    def errors(self) -> list[Problem]:
        return [p for p in self.problems() if p.severity == "error"]


def load(path: str | Path) -> ConfigDocument:
    """Open a TabbyAPI config.yml (or a per-model tabby_config.yml)."""
    return ConfigDocument.from_file(path)
