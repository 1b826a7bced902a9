"""Prompt suites: the built-in tagged suites and the user's own files."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specdeck.core.errors import InvalidInputError, NotFoundError
from specdeck.core.userpath import expand_user

SEPARATOR = "---"


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str
    tags: tuple[str, ...]
    suite: str


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    prompts: tuple[Prompt, ...]
    source: Path | None = None

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(sorted({t for p in self.prompts for t in p.tags}))


def _builtin_dir() -> Path:
    from specdeck.resources import path

    return path("prompts")


def builtin_suites() -> dict[str, Suite]:
    """The suites shipped in resources/prompts, by name."""
    suites = {}
    for file in sorted(_builtin_dir().glob("*.json")):
        suite = load_suite(file)
        suites[suite.name] = suite
    return suites


def _prompts_from_json(data: dict, name: str, where: Path) -> list[Prompt]:
    entries = data.get("prompts")
    if not isinstance(entries, list) or not entries:
        raise InvalidInputError(f"{where} has no \"prompts\" list.",
                                'Give {"prompts": [{"prompt": "..."}]}.')
    prompts = []
    for index, entry in enumerate(entries, start=1):
        prompts.append(_prompt(entry, name, index, where))
    return prompts


def _prompt(entry, suite: str, index: int, where: Path) -> Prompt:
    if isinstance(entry, str):
        entry = {"prompt": entry}
    if not isinstance(entry, dict) or not isinstance(entry.get("prompt"), str) or not entry["prompt"].strip():
        raise InvalidInputError(f"{where}: prompt {index} has no \"prompt\" text.")
    tags = entry.get("tags") or [suite]
    if isinstance(tags, str):
        tags = [tags]
    return Prompt(
        id=str(entry.get("id") or f"{suite}-{index}"),
        text=entry["prompt"],
        tags=tuple(str(t) for t in tags),
        suite=suite,
    )


def load_suite(path: str | Path) -> Suite:
    """A suite from a .json, .jsonl or plain-text file (see resources/prompts/README.md)."""
    path = expand_user(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NotFoundError(f"Prompt suite {path} does not exist.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"Cannot read prompt suite {path}: {exc}.") from exc
    name = path.stem
    description = ""
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidInputError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg}).") from exc
        if isinstance(data, list):
            data = {"prompts": data}
        name = str(data.get("name") or name)
        description = str(data.get("description") or "")
        prompts = _prompts_from_json(data, name, path)
    elif path.suffix == ".jsonl":
        prompts = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidInputError(f"{path} line {number} is not JSON: {exc.msg}.") from exc
            prompts.append(_prompt(entry, name, len(prompts) + 1, path))
    else:
        blocks = [b.strip() for b in _split_blocks(text)]
        prompts = [_prompt(b, name, i, path) for i, b in enumerate((b for b in blocks if b), start=1)]
    if not prompts:
        raise InvalidInputError(f"Prompt suite {path} holds no prompts.")
    ids = [p.id for p in prompts]
    if len(set(ids)) != len(ids):
        raise InvalidInputError(f"Prompt suite {path} repeats a prompt id.", "Give each prompt its own id.")
    return Suite(name=name, description=description, prompts=tuple(prompts), source=path)


def _split_blocks(text: str) -> list[str]:
    blocks, current = [], []
    for line in text.splitlines():
        if line.strip() == SEPARATOR:
            blocks.append("\n".join(current))
            current = []
        else:
            current.append(line)
    blocks.append("\n".join(current))
    return blocks


def first_prompts(names: Sequence[str], per_suite: int,
                  builtin: dict[str, Suite] | None = None) -> list[Prompt]:
    """The first ``per_suite`` prompts of each named built-in suite, in order (how the A/B
    page and the GPU kit choose prompts; a plan names them in ``prompt_ids``). ``builtin``:
    ``builtin_suites()``, when the caller has read them already."""
    builtin = builtin if builtin is not None else builtin_suites()
    return [prompt for name in names for prompt in builtin[name].prompts[:per_suite]]


def select_prompts(names: list[str]) -> list[Prompt]:
    """Prompts of the named built-in suites or suite files, in order (all built-ins if empty)."""
    builtin = builtin_suites()
    chosen = names or list(builtin)
    prompts: list[Prompt] = []
    for name in chosen:
        if name in builtin:
            prompts.extend(builtin[name].prompts)
        elif expand_user(name).is_file():
            prompts.extend(load_suite(name).prompts)
        else:
            raise NotFoundError(
                f"No prompt suite called {name!r}.",
                f"Built-in suites: {', '.join(builtin)}; or give the path of a suite file.",
            )
    return prompts
