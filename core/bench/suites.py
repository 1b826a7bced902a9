"""Prompt suites: the built-in tagged suites, public benchmarks' prompts, the user's own files.

Public benchmarks (resources/prompts/<folder>/suite.json: Spec-Bench) are selectable by name
(``spec-bench``, or one category: ``spec-bench/qa``) but are not among ``builtin_suites()``:
the default plans, the A/B page's suite buttons and the GPU kit's corpus stay the shipped five
(the A/B page offers Spec-Bench in a choice of its own, through ``spec_bench_suite``).
"""

from __future__ import annotations

import functools
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
    from specdeck.core.files import PROMPT_FILE, read_text_bounded

    path = expand_user(path)
    text = read_text_bounded(path, "prompt suite", PROMPT_FILE)  # a FIFO or /dev/zero: said, not waited on
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
        entries = _jsonl_entries(text, path)
        if entries and all(_is_question(entry) for _, entry in entries):
            prompts = _question_prompts(entries, path)
        else:
            prompts = [_prompt(entry, name, index, path)
                       for index, (_, entry) in enumerate(entries, start=1)]
    else:
        blocks = [b.strip() for b in _split_blocks(text)]
        prompts = [_prompt(b, name, i, path) for i, b in enumerate((b for b in blocks if b), start=1)]
    if not prompts:
        raise InvalidInputError(f"Prompt suite {path} holds no prompts.")
    ids = [p.id for p in prompts]
    if len(set(ids)) != len(ids):
        raise InvalidInputError(f"Prompt suite {path} repeats a prompt id.", "Give each prompt its own id.")
    return Suite(name=name, description=description, prompts=tuple(prompts), source=path)


def _jsonl_entries(text: str, path: Path) -> list[tuple[int, object]]:
    """(line number, parsed JSON) of every non-blank line."""
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entries.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise InvalidInputError(
                f"{path} line {number} is not JSON ({exc.msg.lower()} column {exc.colno}).",
                'Write one JSON object per line, such as {"prompt": "Explain TCP."}; a line '
                "break inside a prompt is written \\n.") from exc
    return entries


# Public benchmarks -------------------------------------------------------------------------
SPEC_BENCH = "spec-bench"
SPEC_BENCH_DIR = "spec_bench"
"""resources/prompts/spec_bench: the shipped categories, their licenses and source."""


@dataclass(frozen=True)
class Category:
    """One category of a public benchmark, as its suite.json describes it."""

    name: str
    label: str
    """The benchmark's own name for it (the column of its published table)."""
    dataset: str
    source_categories: tuple[str, ...] = ()
    """The question file's "category" values that belong here (MT-bench has eight)."""
    file: str = ""
    license: str = ""
    not_shipped: str = ""
    """Why its prompts are not shipped ("" when they are): their license."""


def _is_question(entry) -> bool:
    """A line of MT-bench's question format (Spec-Bench's question.jsonl uses it)."""
    return (isinstance(entry, dict) and "prompt" not in entry and "question_id" in entry
            and isinstance(entry.get("category"), str) and isinstance(entry.get("turns"), list))


def spec_bench_info() -> dict:
    """suite.json of the shipped Spec-Bench prompts: source, categories, the paper's figures."""
    from specdeck.resources import path

    return json.loads(path("prompts", SPEC_BENCH_DIR, "suite.json").read_text(encoding="utf-8"))


@functools.cache
def spec_bench_categories() -> tuple[Category, ...]:
    """Spec-Bench's six categories in its table's order, shipped or not."""
    return tuple(Category(name=c["name"], label=c["label"], dataset=c["dataset"],
                          source_categories=tuple(c.get("source_categories", ())),
                          file=c.get("file", ""), license=c.get("license", ""),
                          not_shipped=c.get("not_shipped", ""))
                 for c in spec_bench_info()["categories"])


def _category_of(source_category: str) -> str:
    """Spec-Bench's category of a question ("writing" -> "mt_bench"); its own otherwise."""
    for category in spec_bench_categories():
        if source_category in category.source_categories:
            return category.name
    return source_category


def _question_prompts(entries: list[tuple[int, object]], where: Path) -> list[Prompt]:
    """Prompts from MT-bench-format questions: the first turn of each, id ``spec-bench-<id>``,
    tagged and grouped by Spec-Bench category. A later turn answers the model's own first
    answer, which differs per model and arm, so it cannot be one fixed prompt: only the first
    turn is sent (Spec-Bench itself runs both turns as one conversation). Ordered round-robin
    over the question file's categories, so the first N of a category cover its kinds (the
    eight MT-bench ones) and of the whole file every category."""
    groups: dict[str, list[Prompt]] = {}
    for number, entry in entries:
        turns = entry["turns"]
        if not turns or not isinstance(turns[0], str) or not turns[0].strip():
            raise InvalidInputError(f"{where} line {number}: question {entry['question_id']} "
                                    "has no first turn.")
        category = _category_of(entry["category"])
        groups.setdefault(entry["category"], []).append(Prompt(
            id=f"{SPEC_BENCH}-{entry['question_id']}", text=turns[0],
            tags=(f"{SPEC_BENCH}/{category}",), suite=f"{SPEC_BENCH}/{category}"))
    by_category: dict[str, list[list[Prompt]]] = {}
    for group in groups.values():
        by_category.setdefault(group[0].suite, []).append(group)
    return _round_robin([_round_robin(kinds) for kinds in by_category.values()])


def _round_robin(groups: list[list[Prompt]]) -> list[Prompt]:
    """The first of each group, then the second of each, ..."""
    longest = max((len(g) for g in groups), default=0)
    return [g[i] for i in range(longest) for g in groups if i < len(g)]


def public_suites() -> dict[str, Suite]:
    """The shipped public benchmarks' prompts by name: ``spec-bench`` (every shipped category,
    round-robin) and ``spec-bench/<category>`` for each shipped category."""
    from specdeck.resources import path

    info = spec_bench_info()
    folder = path("prompts", SPEC_BENCH_DIR)
    suites: dict[str, Suite] = {}
    for category in spec_bench_categories():
        if category.not_shipped:
            continue
        file = folder / category.file
        prompts = load_suite(file).prompts
        suites[f"{SPEC_BENCH}/{category.name}"] = Suite(
            name=f"{SPEC_BENCH}/{category.name}",
            description=f"Spec-Bench {category.label}: {category.dataset} ({category.license}).",
            prompts=prompts, source=file)
    whole = _round_robin([list(s.prompts) for s in suites.values()])
    return {SPEC_BENCH: Suite(name=SPEC_BENCH, description=info["description"],
                              prompts=tuple(whole), source=folder / "suite.json"), **suites}


def spec_bench_category(name: str) -> Category | None:
    """The Spec-Bench category a suite name or prompt tag names (``spec-bench/qa``), shipped
    or not; None for any other name."""
    prefix = f"{SPEC_BENCH}/"
    if not name.startswith(prefix):
        return None
    return next((c for c in spec_bench_categories() if c.name == name[len(prefix):]), None)


def _not_shipped(name: str) -> Category | None:
    """The Spec-Bench category ``name`` names when it exists but is not shipped."""
    category = spec_bench_category(name)
    return category if category is not None and category.not_shipped else None


def spec_bench_suite(name: str) -> Suite:
    """The Spec-Bench prompts ``name`` names, read as ``--suite`` reads it: ``spec-bench``, a
    shipped ``spec-bench/<category>``, or a file of Spec-Bench's question format (its own
    data/spec_bench/question.jsonl: every category). SpecDeckError for anything else, a
    category that is not shipped with why."""
    suite = named_suites([name])[name]
    if not all(spec_bench_category(p.suite) for p in suite.prompts):
        raise InvalidInputError(
            f"{suite.source or name} is not a Spec-Bench question file: its lines are not "
            "MT-bench-format questions (question_id, category, turns) of Spec-Bench's categories.",
            "Choose Spec-Bench's data/spec_bench/question.jsonl.")
    return suite


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
    """The first ``per_suite`` prompts of each named suite, in order (how the A/B page and the
    GPU kit choose prompts; a plan names them in ``prompt_ids``). A suite that spans
    Spec-Bench's categories (``spec-bench``, Spec-Bench's question.jsonl) gives the first
    ``per_suite`` of each category, in the suite's own order. ``builtin``: suites by name
    already read (``builtin_suites()``, perhaps with others); the rest are read as
    ``select_prompts`` reads them."""
    known = builtin if builtin is not None else builtin_suites()
    suites = {**known, **named_suites([n for n in names if n not in known], known)}
    chosen: list[Prompt] = []
    for name in names:
        taken: dict[str, int] = {}
        for prompt in suites[name].prompts:
            if taken.get(prompt.suite, 0) < per_suite:
                taken[prompt.suite] = taken.get(prompt.suite, 0) + 1
                chosen.append(prompt)
    return chosen


def named_suites(names: Sequence[str], builtin: dict[str, Suite] | None = None) -> dict[str, Suite]:
    """The suites ``names`` name, by name: built-in suites, public benchmarks (``spec-bench``,
    ``spec-bench/<category>``) or suite files (how ``--suite`` reads every name).
    ``builtin``: ``builtin_suites()``, when the caller has read them already."""
    builtin = builtin if builtin is not None else builtin_suites()
    public = None if all(name in builtin for name in names) else public_suites()
    suites: dict[str, Suite] = {}
    for name in names:
        if name in builtin:
            suites[name] = builtin[name]
        elif name in public:
            suites[name] = public[name]
        elif expand_user(name).is_file():
            suites[name] = load_suite(name)
        elif _looks_like_a_path(name) and expand_user(name).exists() \
                and not expand_user(name).is_dir():
            suites[name] = load_suite(name)  # a FIFO or a device: load_suite says which
        elif category := _not_shipped(name):
            raise NotFoundError(
                f"Spec-Bench's {category.label} prompts ({name}) are not shipped with SpecDeck: "
                f"{category.not_shipped}",
                "Download Spec-Bench's data/spec_bench/question.jsonl yourself and pass its "
                "path as the suite: every category is read from it, with the same ids and tags.")
        elif _looks_like_a_path(name):
            path = expand_user(name)
            raise NotFoundError(
                f"Prompt file {path} " + ("is a folder, not a file." if path.is_dir() else
                                          "does not exist."),
                "Give the path of a suite file (.json, .jsonl with a \"prompt\" on each line, "
                f"or plain text), or a built-in suite: {', '.join(builtin)}.")
        else:
            raise NotFoundError(
                f"No prompt suite called {name!r}.",
                f"Built-in suites: {', '.join(builtin)}; public benchmarks: "
                f"{', '.join(public)}; or give the path of a suite file.",
            )
    _refuse_collisions(suites)
    return suites


def _refuse_collisions(suites: dict[str, Suite]) -> None:
    """Two suites of one name, or one prompt id in two suites, would be measured as one (the
    prompts are told apart by suite and id): two prompt files named alike in two folders
    ran one of them twice, silently."""
    from specdeck.core.printable import printable

    named: dict[str, str] = {}
    ids: dict[str, tuple[str, str]] = {}
    for given, suite in suites.items():
        if suite.name in named:
            raise InvalidInputError(
                f"Prompt suites {printable(named[suite.name])} and {printable(given)} are both "
                f"called {printable(suite.name)!r}, so their prompts could not be told apart.",
                "Rename one file (or the \"name\" of a .json suite).")
        named[suite.name] = given
        for prompt in suite.prompts:
            where, text = ids.setdefault(prompt.id, (given, prompt.text))
            if text != prompt.text:  # the same prompt in two suites is one prompt
                raise InvalidInputError(
                    f"Prompt id {printable(prompt.id)!r} names two different prompts, in "
                    f"{printable(where)} and in {printable(given)}.",
                    "Give each prompt its own id.")


def _looks_like_a_path(name: str) -> bool:
    """A name meant as a file (a folder in it, a suite file's suffix, or something on disk),
    not a suite's name: its error is about the file."""
    path = expand_user(name)
    return ("/" in name or "\\" in name or name.startswith("~") or path.exists()
            or path.suffix.lower() in (".json", ".jsonl", ".txt", ".md"))


def select_prompts(names: list[str]) -> list[Prompt]:
    """Prompts of the named built-in suites, public benchmarks (``spec-bench``,
    ``spec-bench/<category>``) or suite files, in order (all built-ins if empty)."""
    builtin = builtin_suites()
    chosen = names or list(builtin)
    suites = named_suites(chosen, builtin)
    return [prompt for name in chosen for prompt in suites[name].prompts]
