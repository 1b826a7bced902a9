"""The curated list of EXL2 drafts on the Hub, by tokenizer family (resources/compat).

A target belongs to a family when every anchor token it knows has the family's text and
its tokenizer size is within llama.cpp's 128 of the family's. That makes Hub drafts worth
suggesting before anything is downloaded; it proves nothing, so they stay "unverified"
until their own tokenizer files are checked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from specdeck.core.compat.compare import MAX_SIZE_DIFFERENCE
from specdeck.core.compat.vocab import Vocab
from specdeck.core.errors import SpecDeckError

from specdeck import resources

# Fewer known anchors than this is too little evidence for a family match.
MIN_ANCHORS = 3


@dataclass(frozen=True)
class KnownDraft:
    repo: str
    base_model: str
    flavour: str
    """"base" or "instruct": drafts of the target's flavour share its EOS token."""
    parameters: int
    context_length: int
    revisions: tuple[str, ...]
    """Branches (bitrates) seen on the repo's page; empty when none was recorded."""
    source: str
    """The Hub page this entry was checked against."""
    family: str


@dataclass(frozen=True)
class Family:
    id: str
    name: str
    tokenizer: str
    """What kind of tokenizer, in words ("byte-level BPE, 151,665 tokens")."""
    vocab_size: int
    anchors: tuple[tuple[int, str], ...]
    anchors_from: str
    drafts: tuple[KnownDraft, ...]


@lru_cache(maxsize=1)
def known_families() -> tuple[Family, ...]:
    path = resources.path("compat", "known_drafts.json")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        families = []
        for entry in data["families"]:
            drafts = tuple(
                KnownDraft(
                    repo=d["repo"],
                    base_model=d["base_model"],
                    flavour=d["flavour"],
                    parameters=int(d["parameters"]),
                    context_length=int(d["context_length"]),
                    revisions=tuple(d["revisions"]),
                    source=d["source"],
                    family=entry["id"],
                )
                for d in entry["drafts"]
            )
            anchors = tuple(sorted((int(k), v) for k, v in entry["anchors"].items()))
            families.append(Family(entry["id"], entry["name"], entry["tokenizer"],
                                   int(entry["vocab_size"]), anchors, entry["anchors_from"],
                                   drafts))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        # Shipped data: a broken file is a packaging bug, but say so in words.
        raise SpecDeckError(f"SpecDeck's list of known drafts ({path}) is unreadable: {exc}.",
                            "Reinstall SpecDeck.") from exc
    return tuple(families)


def family_match(family: Family, vocab: Vocab) -> bool:
    """Whether ``vocab`` looks like ``family``'s tokenizer (see the module docstring)."""
    if vocab.size is not None and abs(vocab.size - family.vocab_size) > MAX_SIZE_DIFFERENCE:
        return False
    known = 0
    for token_id, text in family.anchors:
        actual = vocab.texts[token_id] if token_id < len(vocab.texts) else None
        if actual is None and not vocab.complete:
            continue  # unknown in an incomplete vocabulary: no evidence either way
        if actual != text:
            return False
        known += 1
    return known >= MIN_ANCHORS


def find_family(vocab: Vocab) -> Family | None:
    return next((f for f in known_families() if family_match(f, vocab)), None)
