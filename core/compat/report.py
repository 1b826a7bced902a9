"""The result of a compatibility check: a verdict, every rule with its reason, the numbers.

``CompatReport.to_json()`` is the stable shape that ``specdeck check --json`` prints and
docs/compat.md documents; add fields, never rename or remove them without bumping
``SCHEMA_VERSION``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1


class Status(str, enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    UNKNOWN = "unknown"
    """The rule could not be evaluated: a file it needs is missing."""


class CompatVerdict(str, enum.Enum):
    COMPATIBLE = "compatible"
    WARNINGS = "compatible_with_warnings"
    INCOMPATIBLE = "incompatible"
    INCONCLUSIVE = "inconclusive"
    """A deciding rule could not be evaluated: the pair is neither cleared nor refused."""

    @property
    def label(self) -> str:
        return {
            CompatVerdict.COMPATIBLE: "Compatible",
            CompatVerdict.WARNINGS: "Compatible with warnings",
            CompatVerdict.INCOMPATIBLE: "Incompatible",
            CompatVerdict.INCONCLUSIVE: "Inconclusive",
        }[self]

    @property
    def cleared(self) -> bool:
        """Whether the check clears the pair to draft with: compatible, with warnings or
        without (incompatible is refused; inconclusive is not cleared either). What a choice
        made for the user needs: the tune, which writes its winner into a config, tries only
        such drafts (core.tune.candidates.draft_refusal), as the demo picks its partner."""
        return self in (CompatVerdict.COMPATIBLE, CompatVerdict.WARNINGS)

    @property
    def refused(self) -> bool:
        """Whether the check refuses the pair everywhere: incompatible only. An inconclusive
        pair is not refused where the user chose it and a measurement checks it: an A/B's
        engines load it with a note saying so (core.engines.common.require_compatible_draft;
        the A/B compares every drafted output with the no-draft one, so a pair that changes
        the output shows as lossy), and `suggest` lists it last with the check's words."""
        return self is CompatVerdict.INCOMPATIBLE

    @property
    def exit_code(self) -> int:
        """`specdeck check`'s exit status: 0 usable, 1 refused, 3 undecided (2 is an error)."""
        return {CompatVerdict.COMPATIBLE: 0, CompatVerdict.WARNINGS: 0, CompatVerdict.INCOMPATIBLE: 1,
                CompatVerdict.INCONCLUSIVE: 3}[self]


@dataclass(frozen=True)
class RuleResult:
    key: str
    """Stable identifier, e.g. "token_text"."""
    title: str
    status: Status
    detail: str
    """One or two sentences: what was found and, when it matters, what to do."""
    target: str | None = None
    draft: str | None = None
    blocking: bool = True
    """A failure makes the pair incompatible; an unknown makes the verdict inconclusive."""
    origin: str = "llama.cpp"
    """Whose rule this is: llama.cpp, ExLlamaV2, TabbyAPI or SpecDeck."""


@dataclass(frozen=True)
class TokenText:
    text: str | None
    """The token as stored in the vocabulary ("Ġthe", "▁the", "<0x0A>"); None: no token."""
    display: str | None
    """What it stands for (" the", "\\n")."""
    special: bool = False

    def to_json(self) -> dict:
        """Bytes of a GGUF token that are not UTF-8 (kept as escaped surrogates, so that two
        such tokens stay different) are written \\xNN: JSON text cannot hold them."""
        from specdeck.core.compat.display import shown_bytes

        return {"text": None if self.text is None else shown_bytes(self.text),
                "display": None if self.display is None else shown_bytes(self.display),
                "special": self.special}


@dataclass(frozen=True)
class Mismatch:
    id: int
    target: TokenText
    draft: TokenText


@dataclass(frozen=True)
class VocabComparison:
    target_size: int | None
    draft_size: int | None
    first_id: int
    """The first id compared (llama.cpp skips 0-4, usually <unk>/<s>/</s>)."""
    end_id: int
    """One past the last id compared."""
    compared: int
    differing: int
    not_compared: int
    """Ids in [first_id, end_id) that one side does not know (incomplete vocabulary)."""
    mismatches: tuple[Mismatch, ...]
    """The first differing ids, with their text on both sides."""

    @property
    def identical(self) -> int:
        return self.compared - self.differing

    @property
    def complete(self) -> bool:
        return self.not_compared == 0


@dataclass(frozen=True)
class SideSummary:
    """What the report says about one model."""

    name: str
    spec: str
    folder: Path
    repo_id: str | None
    revision: str | None
    vocab_type: str
    tokenizer_format: str
    tokenizer_files: tuple[str, ...]
    vocab_size: int | None
    known_ids: int
    head_rows: int | None
    context_length: int | None
    parameters: int | None
    quantization: str | None
    bos_id: int | None
    eos_id: int | None
    add_bos: bool
    add_eos: bool
    stop_ids: tuple[int, ...]
    has_chat_template: bool
    load_seconds: float
    cache: str


@dataclass(frozen=True)
class Timings:
    load_target_s: float
    load_draft_s: float
    compare_s: float
    total_s: float


@dataclass(frozen=True)
class CompatReport:
    verdict: CompatVerdict
    summary: str
    target: SideSummary
    draft: SideSummary
    rules: tuple[RuleResult, ...]
    vocab: VocabComparison
    timings: Timings
    max_seq_len: int | None
    """The context the target is assumed to run at (the context rule's input)."""

    def rule(self, key: str) -> RuleResult:
        for result in self.rules:
            if result.key == key:
                return result
        raise KeyError(key)

    @property
    def warnings(self) -> tuple[RuleResult, ...]:
        return tuple(r for r in self.rules if r.status is Status.WARN)

    def to_json(self) -> dict[str, Any]:
        vocab = self.vocab
        return {
            "schema": SCHEMA_VERSION,
            "verdict": self.verdict.value,
            "summary": self.summary,
            "target": self.target,
            "draft": self.draft,
            "rules": list(self.rules),
            "vocab": {
                "target_size": vocab.target_size,
                "draft_size": vocab.draft_size,
                "target_head_rows": self.target.head_rows,
                "draft_head_rows": self.draft.head_rows,
                "first_id": vocab.first_id,
                "end_id": vocab.end_id,
                "compared": vocab.compared,
                "identical": vocab.identical,
                "differing": vocab.differing,
                "not_compared": vocab.not_compared,
            },
            "mismatches": list(vocab.mismatches),
            "max_seq_len": self.max_seq_len,
            "timings": self.timings,
        }


def decide(rules: Iterable[RuleResult]) -> CompatVerdict:
    """Blocking failures refuse the pair; blocking unknowns leave it undecided."""
    rules = tuple(rules)
    if any(r.blocking and r.status is Status.FAIL for r in rules):
        return CompatVerdict.INCOMPATIBLE
    if any(r.blocking and r.status is Status.UNKNOWN for r in rules):
        return CompatVerdict.INCONCLUSIVE
    if any(r.status in (Status.WARN, Status.FAIL) for r in rules):
        return CompatVerdict.WARNINGS
    return CompatVerdict.COMPATIBLE
