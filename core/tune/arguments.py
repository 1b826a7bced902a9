"""What a tune launches and writes: SpecDeck's own table of it, and the one builder.

A tune produces these llama-server arguments and nothing else (``TABLE``): the spec type, a
draft model's GGUF for a type that needs one, and numbers for that type's own flags (k
first of all). Every setting the search launches and every winner written into a llama-swap
cmd, fresh or from a saved tune (``--apply-saved``), is built here from those parts and
checked against the user's binary, as its ``--help`` says: a type it lists, with a name that
is a name (``core.llama_flags.name_problem``: no flag, no ``${...}``, no shell syntax), flags
it names for that type, whole numbers or decimals as their values (never a word, a path or
a URL), and a draft that is a GGUF file on this machine. Whatever else was read from outside
(a --help, a saved tune.json) is data: a flag outside the table, a Hub-download flag above
all (``core.llama_flags.HUB_DOWNLOAD``), is refused with its name.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from specdeck.core import llama_flags
from specdeck.core.errors import InvalidInputError, SpecDeckError
from specdeck.core.swap.actions import DRAFT_MAX_RANGE, DRAFT_MIN_RANGE, P_MIN_RANGE

TABLE = (
    (llama_flags.SPEC_TYPE, "a spec type the binary's --help lists"),
    (llama_flags.DRAFT_MODEL[0], "a draft GGUF on this machine, by its absolute path"),
    ("--spec-<type>-...", "a number for a flag the --help names for that spec type (k: its "
                          "-n-max or -size-m)"),
    ("--draft-max ...", "on a build that drafts with -md alone (no draft-* spec type: "
                        "llama.cpp before 2026, ik_llama.cpp), a number for the draft flags "
                        "its --help names, with no --spec-type"),
)
"""Every argument a tune produces, and what its value may be."""
NUMBER = re.compile(r"\d{1,7}(?:\.\d{1,6})?")
"""A flag's value: a whole number or a decimal, below 10 million."""
RANGES = (
    ("-p-min", *P_MIN_RANGE, False),
    ("-size-n", 1, llama_flags.NGRAM_NUMBER_MAX, True),
    ("-n-match", 1, llama_flags.NGRAM_NUMBER_MAX, True),
    ("-min-hits", 1, llama_flags.NGRAM_NUMBER_MAX, True),
    ("-size-m", *DRAFT_MAX_RANGE, True), ("-n-max", *DRAFT_MAX_RANGE, True),
    ("-n-min", *DRAFT_MIN_RANGE, True),
    *((flag, *DRAFT_MAX_RANGE, True) for flag in llama_flags.N_MAX_REMOVED),
    *((flag, *DRAFT_MIN_RANGE, True) for flag in llama_flags.N_MIN_REMOVED),
)
"""The numbers a tune sets, by how their flag's name ends (an n-gram type's lookup and draft
lengths, min hits and n-match, a draft's most and fewest tokens and its p-min; on a build
that drafts with -md alone, the --draft-max family core.llama_flags says the pinned build
removed), and the range each may take: an n-gram type's lookup size, n-match and min hits
as llama.cpp 11434 checks them (``llama_flags.NGRAM_NUMBER_MAX``); a number of draft tokens
(ngram-simple's size-m, the n-max/n-min pairs) and p-min as `swap set-draft` and the
llama-swap page take them (core.swap.actions: ``DRAFT_MAX_RANGE``, up to
``MAX_SERVER_DRAFT_TOKENS``; ``DRAFT_MIN_RANGE``; ``P_MIN_RANGE``, a probability)."""


def number_range(flag: str) -> tuple[float, float, bool] | None:
    """(lowest, highest, whole) for a number a tune sets through ``flag``; None: a tune sets
    no number through it (a thread count, a priority, a device: the user's to set)."""
    found = [(suffix, low, high, whole) for suffix, low, high, whole in RANGES
             if (flag == suffix if suffix.startswith("--") else flag.endswith(suffix))]
    if not found:
        return None
    _, low, high, whole = max(found, key=lambda r: len(r[0]))
    return low, high, whole


def _number_problem(flag: str, value: str, name: str) -> str | None:
    """Why ``value`` cannot be ``flag``'s number (None: it can)."""
    from specdeck.core.printable import printable

    shown = printable(value)[:80]
    if not NUMBER.fullmatch(value):
        return f"{name} {shown!r}: its value must be a number"
    found = number_range(flag)
    if found is None:
        return f"{name} is not a flag a tune sets"
    low, high, whole = found
    number = float(value)
    if whole and not value.isdigit():
        return f"{name} {shown}: must be a whole number"
    if not low <= number <= high:
        return (f"{name} {shown}: must be from {low:g} to {high:g} (as llama.cpp takes it, and "
                "a tune sets it)")
    return None
HINT = "Tune again: SpecDeck writes only the flags its own tune produces."


def tuned_args(spec_type: str, draft: Path | str | None = None,
               numbers: Sequence[tuple[str, str]] = (), info=None) -> tuple[str, ...]:
    """The arguments of one tuned setting (``TABLE``), each checked against ``info`` (the
    user's binary's ``--help``, core.servers.llama_server.HelpInfo): an InvalidInputError
    naming every problem, before anything is launched or written."""
    problems = _problems(spec_type, draft, numbers, info)
    if problems:
        raise InvalidInputError("Not a setting SpecDeck launches or writes: "
                                + "; ".join(problems) + ".", HINT)
    implied = _implied(spec_type, info)
    out: tuple[str, ...] = () if implied else (llama_flags.SPEC_TYPE, spec_type)
    if draft is not None:
        out += (llama_flags.DRAFT_MODEL[0], str(draft))
    for flag, value in numbers:
        out += (flag, value)
    return out


def tuned_from_flags(flags: Sequence[str], info) -> tuple[str, ...]:
    """``flags`` (a saved tune's winner, say) rebuilt by :func:`tuned_args`: read as the
    table's parts and checked again, or refused naming what is not in the table."""
    from specdeck.core.printable import printable

    spec_type = draft = None
    numbers: list[tuple[str, str]] = []
    outside: list[str] = []
    implied_method = getattr(info, "implied_draft", None)
    implied_flags = set(implied_method.flags) if implied_method is not None else set()
    words = [str(f) for f in flags]
    i = 0
    while i < len(words):
        name, eq, value = words[i].partition("=")
        if not eq:
            value = words[i + 1] if i + 1 < len(words) else ""
        step = 1 if eq else 2
        if name == llama_flags.SPEC_TYPE:
            spec_type = value
        elif name in llama_flags.DRAFT_MODEL:
            draft = value
        elif (name.startswith("--spec-") or name in implied_flags) \
                and name not in llama_flags.HUB_DOWNLOAD:
            numbers.append((name, value))
        else:
            outside.append(name if name.startswith("-") else words[i])
            step = 1
        i += step
    hub = [f for f in outside if f in llama_flags.HUB_DOWNLOAD]
    problems = []
    if hub:
        problems.append(f"{', '.join(hub)} would make llama-server download a model from "
                        "the network")
    rest = [printable(f)[:80] for f in outside if f not in hub]
    if rest:
        problems.append(f"{', '.join(rest)} is not a flag a tune produces")
    if spec_type is None and draft is not None and implied_method is not None:
        spec_type = implied_method.name  # this build drafts with -md alone
    if spec_type is None:
        problems.append("it names no --spec-type")
    if problems:
        raise InvalidInputError("Not a setting SpecDeck writes: " + "; ".join(problems) + ".",
                                HINT)
    return tuned_args(spec_type, draft, numbers, info)


def _problems(spec_type: str, draft, numbers, info) -> list[str]:
    from specdeck.core.printable import printable

    if info is None:
        return ["the binary's --help could not be read, so nothing can be checked against it"]
    problems = []
    shown = printable(spec_type)[:80]
    why = llama_flags.name_problem(spec_type)
    implied = _implied(spec_type, info)
    if why is not None:
        problems.append(f"--spec-type {shown!r}: {why}")
    elif spec_type not in info.spec_types and not implied:
        problems.append(f"--spec-type {shown}: this llama-server does not list it")
    method = info.method(spec_type)
    own = set(method.flags) if method is not None else set()
    for flag, value in numbers:
        name = printable(flag)[:80]
        if not (llama_flags.FLAG_NAME.fullmatch(flag) or (implied and flag in own)) \
                or flag in llama_flags.HUB_DOWNLOAD:
            problems.append(f"{name} is not a spec type's flag")
        elif flag not in own or flag not in info.flags:
            problems.append(f"{name}: this llama-server's --help names no such flag for "
                            f"{shown}")
        else:
            why = _number_problem(flag, value, name)
            if why is not None:
                problems.append(why)
    if draft is not None:
        problems += _draft_problems(str(draft))
    elif implied or (method is not None and method.needs.startswith("a draft model")):
        problems.append(f"{shown} needs a draft model (-md)")
    return problems


def _implied(spec_type: str, info) -> bool:
    """Is ``spec_type`` the drafting this build does with -md alone, no --spec-type written
    (``llama_flags.implied_draft``)?"""
    method = getattr(info, "implied_draft", None)
    return method is not None and spec_type == method.name


def draft_problems(draft: str | Path, on_disk: bool = True) -> list[str]:
    """Why ``draft`` cannot be launched and written as a -md GGUF ([]: it can): checked when
    a draft is found (``on_disk`` False: a Hub draft not downloaded yet, its path only), so a
    file whose name cannot become an argument is a candidate not tried, with why, never a
    tune that stops when it comes to launch it."""
    return _draft_problems(str(draft), on_disk)


def _draft_problems(draft: str, on_disk: bool = True) -> list[str]:
    """Why ``draft`` cannot be written as a -md GGUF ([]: it can)."""
    from specdeck.core.files import open_regular_file
    from specdeck.core.printable import printable

    shown = printable(draft)[:200]
    if "${" in draft:
        return [f"-md {shown}: it holds a ${{...}} macro, which llama-swap would substitute"]
    if draft.startswith("-") or "://" in draft or not Path(draft).is_absolute():
        return [f"-md {shown}: not the absolute path of a file on this machine"]
    if not on_disk:
        return []
    try:  # a FIFO or a folder is said as what it is, never waited on
        with open_regular_file(draft, "draft model") as handle:
            magic = handle.read(4)
    except SpecDeckError as missing:
        return [missing.what.rstrip(".")]
    except OSError as exc:
        return [f"-md {shown}: {exc.strerror or exc}"]
    if magic != b"GGUF":
        return [f"-md {shown} is not a GGUF file"]
    return []
