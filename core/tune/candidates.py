"""What a setup can draft with, and the settings worth trying for each.

The server decides what exists: the ``--spec-type`` values its binary's ``--help`` lists
(never a list in the code, except when no help can be read). Each n-gram type is a
candidate; ``draft-simple`` is one candidate per draft GGUF on disk that passes the
compatibility check against the target (llama.cpp's vocabulary rules, ``core.compat``) and is
smaller than it; ``draft-mtp`` is a candidate when the target carries MTP layers. Types that
need something SpecDeck cannot find or make (an EAGLE-3 head, DFlash blocks) are listed as
not tried, with why.

Each candidate searches the flag that sets k (the most tokens drafted per step), over
``K_VALUES``: on a CPU and on a small GPU a short draft wins, on a large GPU a long one; the
search decides, not a default.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from specdeck.core import llama_flags
from specdeck.core.errors import CancelledError, SpecDeckError
from specdeck.core.tune.setup import Setup

if TYPE_CHECKING:
    from specdeck.core.compat.report import CompatReport

K_VALUES = ("4", "8", "16")
"""The k values tried for every candidate (its own k flag: --spec-draft-n-max, the n-gram
type's size)."""

@dataclass(frozen=True)
class HubFile:
    """Where a draft GGUF on the Hub comes from: the file checked before download is the file
    installed (the same commit; the installer verifies its sha256)."""

    repo_id: str
    commit: str
    file: str
    """The GGUF (the first shard of a split one) as the repository names it."""
    quant: str | None
    size: int
    """Every file of it (its shards together), in bytes."""

    @property
    def spec(self) -> str:
        return f"{self.repo_id}@{self.commit[:12]}"


@dataclass(frozen=True)
class Candidate:
    """One way of drafting: a spec type, with a draft model when it needs one."""

    spec_type: str
    draft: Path | None = None
    """The draft GGUF; for a Hub draft, where it will be once installed."""
    draft_bytes: int = 0
    """The draft's weights (for the prediction and the report)."""
    download_bytes: int = 0
    """What must be downloaded before it can run (0: on disk)."""
    notes: tuple[str, ...] = ()
    hub: HubFile | None = None
    """Where a draft from the Hub comes from (None: found on disk)."""
    k_flag: str | None = None
    """What sets k for it, as the binary's --help says (find_candidates, and the Hub's
    drafts in core.tune.run, always pass it); left out (a candidate made by hand), as
    SpecDeck's fallback list says."""
    k_values: tuple[str, ...] = K_VALUES
    """The k values searched: those of K_VALUES with which this type can draft at all."""
    implied: bool = False
    """Its build drafts with the draft model alone (llama.cpp before 2026, ik_llama.cpp): no
    ``--spec-type`` is written (``llama_flags.SpecMethod.implied``)."""
    kept: tuple[tuple[str, str], ...] = ()
    """The user's own values for this type's other flags (its lookup length, its min hits:
    ``--spec-ngram-simple-size-n 3``), kept in every setting of it, as their cmd has them."""

    def __post_init__(self) -> None:
        if self.k_flag is None:
            from specdeck.core.servers.llama_server import fallback_help

            method = fallback_help().method(self.spec_type)
            object.__setattr__(self, "k_flag", method.k_flag if method else None)

    @property
    def label(self) -> str:
        return self.spec_type if self.draft is None else f"{self.spec_type} {self.draft.name}"

    @property
    def arm_prefix(self) -> str:
        """How the names of its settings' arms begin: the search maps a measured row back to
        its candidate by it (core.tune.run)."""
        return "".join(ch if ch.isalnum() else "_" for ch in self.label)[:40] + "-"

    @property
    def flags(self) -> tuple[str, ...]:
        """Its drafting flags, with llama-server's defaults for everything searched."""
        out: tuple[str, ...] = () if self.implied else (llama_flags.SPEC_TYPE, self.spec_type)
        if self.draft is not None:
            out += (llama_flags.DRAFT_MODEL[0], str(self.draft))
        return out


@dataclass(frozen=True)
class NotTried:
    what: str
    why: str


@dataclass(frozen=True)
class Candidates:
    found: tuple[Candidate, ...]
    not_tried: tuple[NotTried, ...] = field(default=())

    @property
    def why_none(self) -> str:
        """Why nothing was found, as the not-tried say it."""
        return "; ".join(f"{n.what}: {n.why}" for n in self.not_tried) or "no spec types"


def find_candidates(setup: Setup, spec_types: Sequence[str], drafts: Iterable[Path] = (),
                    cancel: threading.Event | None = None,
                    methods: Sequence[llama_flags.SpecMethod] = ()) -> Candidates:
    """Every candidate this setup's server can run (``spec_types``: its --help's list, and
    the name of a method its build runs without one, ``drafting_methods``; ``methods``: each
    type's flags from the same help, else the fallback's): an n-gram type
    with its k flag, a draft type when SpecDeck finds what it needs, else not tried, why."""
    from specdeck.core.printable import printable
    from specdeck.core.servers.llama_server import fallback_help

    known = {m.name: m for m in (*fallback_help().methods, *methods)}
    found: list[Candidate] = []
    usable, refused_names = llama_flags.checked_spec_types(spec_types)
    # A name that is not one (a flag, a ${...} macro, shell syntax) is data, never an
    # argument: listed as not tried, with why, shown escaped.
    skipped: list[NotTried] = [NotTried(printable(name)[:80], f"read from --help, not "
                                        f"launched: {why}") for name, why in refused_names[:8]]
    if len(refused_names) > 8:
        skipped.append(NotTried(f"{len(refused_names) - 8} more spec types",
                                "read from --help, not launched: their names are not names, "
                                f"or past the first {llama_flags.MAX_SPEC_TYPES}"))
    pinned = {m.name: m for m in fallback_help().methods}
    for kind in usable:
        method = known.get(kind, llama_flags.SpecMethod(kind))
        if kind == llama_flags.SPEC_NONE:
            continue
        if methods and method.k_flag is None and pinned.get(kind, method).k_flag is not None:
            # The binary lists the type but no flag that sets its draft length: the pinned
            # build's flag is not this binary's to take.
            skipped.append(NotTried(kind, f"its --help lists no flag that sets its draft "
                                          f"length (llama.cpp 11434 has "
                                          f"{pinned[kind].k_flag}), so SpecDeck cannot set "
                                          "or say what it would measure"))
            continue
        k = {"k_flag": method.k_flag, "kept": kept_values(method, setup.flags)}
        if method.implied:
            k["implied"] = True
        if not method.needs:
            values, note = drafting_k_values(method, setup.flags)
            if not values:
                skipped.append(NotTried(kind, note))
                continue
            found.append(Candidate(kind, k_values=values, notes=(note,) if note else (), **k))
        elif kind == llama_flags.DRAFT_MTP and setup.facts.mtp_layers:
            found.append(Candidate(kind, notes=(f"{setup.facts.mtp_layers} MTP layer(s) in "
                                                f"{setup.facts.name}",), **k))
        elif kind == llama_flags.DRAFT_SIMPLE:
            models, refused = _draft_models(setup, drafts, cancel)
            found += [Candidate(kind, path, size, **k) for path, size in models]
            skipped += refused
            if not models:
                skipped.append(NotTried(kind, "no draft GGUF on disk passes the compatibility "
                                              "check"))
        else:
            skipped.append(NotTried(kind, f"needs {method.needs}; SpecDeck finds none for "
                                          f"{setup.facts.name}"))
    return Candidates(tuple(found), tuple(skipped))


def kept_values(method: llama_flags.SpecMethod, flags: Sequence[str]
                ) -> tuple[tuple[str, str], ...]:
    """The user's own numbers (in ``flags``, their whole command line) for ``method``'s flags
    other than its k flag, in the names its help gives them: kept in every tuned setting of
    that type, never dropped for llama-server's defaults."""
    from specdeck.core.servers.llama_server import flag_value
    from specdeck.core.tune.arguments import NUMBER, number_range

    kept = []
    for flag in method.flags:
        value = flag_value(tuple(flags), flag) if flag != method.k_flag else None
        if value is not None and NUMBER.fullmatch(value) and number_range(flag) is not None:
            kept.append((flag, value))
    return tuple(kept)


def drafting_k_values(method: llama_flags.SpecMethod, flags: Sequence[str]
                      ) -> tuple[tuple[str, ...], str]:
    """The k values of K_VALUES with which ``method`` can draft, and why any were left out.

    ngram-simple's k is its m-gram size (--spec-ngram-simple-size-m), and it drafts only when
    it can copy at least its lookup n-gram's size of tokens: ``copy_max < n_draft_min``
    returns no draft (common/ngram-map.cpp, common_ngram_simple_draft, lines 96-101). That
    size is the one ``flags`` (the user's whole command line) give, else the default, under
    the name the binary's help gives it (``--spec-ngram-simple-size-n``; ik_llama.cpp's
    ``--spec-ngram-size-n``); a help that names no lookup length leaves every k searched.
    With k below that size the setting is no drafting under another name; the tune_search
    benchmark of 2026-11-26 measured ngram-simple k=4 and k=8 drafting nothing on any
    prompt."""
    flag = method.size_n_flag
    if method.name != llama_flags.NGRAM_SIMPLE or flag is None:
        return K_VALUES, ""
    from specdeck.core.servers.llama_server import flag_value

    default = method.default_of(flag)
    try:
        size_n = int(flag_value(tuple(flags), flag) or default)
    except (TypeError, ValueError):
        if default is None:
            return K_VALUES, ""
        size_n = default
    values = tuple(k for k in K_VALUES if int(k) >= size_n)
    left = [k for k in K_VALUES if k not in values]
    if not left:
        return values, ""
    return values, (f"k={', '.join(left)} not searched: ngram-simple drafts only when it can "
                    f"copy at least {flag} ({size_n}) tokens, so a smaller k never drafts")


NOT_SMALLER = "not smaller than the target"


def smaller(draft_bytes: int, target_bytes: int) -> bool:
    """A draft is worth running only when it is smaller than the target (a GGUF on disk or
    on the Hub, a TabbyAPI draft folder alike): a forward of a draft as large as the target
    costs a target forward. A target of unknown size (0) refuses nothing."""
    return not target_bytes or draft_bytes < target_bytes


def smaller_than_target(draft_bytes: int, setup: Setup) -> bool:
    return smaller(draft_bytes, setup.facts.weight_bytes)


def draft_refusal(draft_bytes: int, target_bytes: int,
                  compat: Callable[[], CompatReport] | None) -> str | None:
    """Why the tune does not try a draft (None: it does): not smaller than the target
    (:func:`smaller`), or a tokenizer the compatibility check does not clear
    (``CompatVerdict.cleared``: refused or undecided) or cannot read. ``compat`` runs that
    check, only once the size passed (None: no target to check against). One rule for a
    llama-server's GGUF drafts and TabbyAPI's draft folders (core.tune.tabby)."""
    if not smaller(draft_bytes, target_bytes):
        return NOT_SMALLER
    if compat is None:
        return None
    try:
        report = compat()
    except CancelledError:
        raise
    except SpecDeckError as exc:
        return exc.what
    return None if report.verdict.cleared else report.summary


def draft_files(setup: Setup, folders: Iterable[Path] = ()) -> list[Path]:
    """GGUF files that could be drafts: beside the target and in ``folders`` (first shards
    only; projectors and the target itself left out)."""
    from specdeck.core.compat.gguf_file import split_name

    seen: dict[Path, None] = {}
    for folder in (setup.target.parent, *folders):
        try:
            files = sorted(Path(folder).glob("*.gguf"))
        except OSError:
            continue
        for path in files:
            shard = split_name(path.name)
            if shard is not None and shard[1] != 1:
                continue
            if "mmproj" in path.name.lower() or path.resolve() == setup.target.resolve():
                continue
            seen.setdefault(path.resolve(), None)
    return list(seen)


def _draft_models(setup: Setup, drafts: Iterable[Path], cancel: threading.Event | None
                  ) -> tuple[list[tuple[Path, int]], list[NotTried]]:
    from specdeck.core.compat import check
    from specdeck.core.vram.gguf import read_gguf_model

    usable: list[tuple[Path, int]] = []
    refused: list[NotTried] = []
    from specdeck.core.printable import printable
    from specdeck.core.tune.arguments import draft_problems

    for path in drafts:
        if cancel is not None and cancel.is_set():
            raise CancelledError()
        label = printable(f"{llama_flags.DRAFT_SIMPLE} {path.name}")[:120]
        why = draft_problems(path)
        if why:  # a name that cannot become an argument: never launched, never written
            refused.append(NotTried(label, why[0]))
            continue
        try:
            size = read_gguf_model(path).weight_bytes
        except SpecDeckError as exc:
            refused.append(NotTried(label, exc.what))
            continue
        why = draft_refusal(size, setup.facts.weight_bytes,
                            lambda path=path: check(setup.target, path, examples=0,
                                                    cancel=cancel))
        if why is not None:
            refused.append(NotTried(label, why))
            continue
        usable.append((path, size))
    return usable, refused


def drafting_methods(info) -> tuple[str, ...]:
    """What a build can draft with, by name: its ``--spec-type`` values, and the draft model
    that a build without a draft-* type drafts with alone (``HelpInfo.implied_draft``)."""
    implied = info.implied_draft
    return tuple(info.spec_types) + ((implied.name,) if implied is not None
                                     and implied.name not in info.spec_types else ())
