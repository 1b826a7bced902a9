"""A model folder's vocabulary reduced to what the compatibility rules compare.

The rules compare token *text* id by id, as llama.cpp does, so every tokenizer format ends
up as one list ``texts[id]`` plus the tokenizer's kind (:class:`VocabType`). The files are
read by :mod:`specdeck.core.compat.tokenizer_files`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

from specdeck.core.errors import InvalidInputError

MAX_TOKEN_ID = 1 << 24
"""Ids at or past this are refused (the largest real vocabularies hold ~260k tokens): a
damaged file's 10**30 must not become a list of that many entries."""


class VocabType(str, enum.Enum):
    """Tokenizer kinds, named as llama.cpp names them (``llama_vocab_type``)."""

    SPM = "SPM"
    BPE = "BPE"
    WPM = "WPM"
    UGM = "UGM"
    OTHER = "OTHER"
    UNKNOWN = "UNKNOWN"

    @property
    def label(self) -> str:
        return _VOCAB_TYPE_LABELS[self]


_VOCAB_TYPE_LABELS = {
    VocabType.SPM: "SentencePiece BPE (SPM)",
    VocabType.BPE: "byte-level BPE",
    VocabType.WPM: "WordPiece",
    VocabType.UGM: "Unigram",
    VocabType.OTHER: "other",
    VocabType.UNKNOWN: "unknown",
}

# Where the full vocabulary can come from, in the order the engines prefer them.
FORMAT_TOKENIZER_JSON = "tokenizer.json"
FORMAT_SENTENCEPIECE = "sentencepiece"
FORMAT_TIKTOKEN = "tiktoken"
FORMAT_SLOW_BPE = "vocab.json+merges.txt"
FORMAT_ADDED_ONLY = "added tokens only"


@dataclass(frozen=True)
class Vocab:
    """The token text of every id, as far as the folder's files tell."""

    texts: tuple[str | None, ...]
    """Token text by id. None: no token has this id (or, when incomplete, it is unknown)."""
    vocab_type: VocabType
    source_format: str
    files: tuple[str, ...]
    """The files read, relative to the model folder."""
    complete: bool
    """False when no base vocabulary file exists and only added tokens are known."""
    byte_level: bool = False
    """Texts use GPT-2's byte-to-unicode alphabet ("Ġthe" is " the")."""
    special_ids: frozenset[int] = frozenset()
    """Ids of control / special added tokens."""
    notes: tuple[str, ...] = ()

    @property
    def size(self) -> int | None:
        """The number of ids (highest id + 1); None when the vocabulary is incomplete."""
        return len(self.texts) if self.complete else None

    # Both are computed on first use and kept: a 150k-token scan costs milliseconds, and the
    # rules and the report ask several times. (cached_property writes the instance __dict__
    # directly, so it works on a frozen dataclass.)
    @cached_property
    def known_ids(self) -> int:
        return len(self.texts) - self.texts.count(None)

    @cached_property
    def _index(self) -> dict[str, int]:
        index: dict[str, int] = {}
        for i, text in enumerate(self.texts):
            if text is not None and text not in index:
                index[text] = i
        return index

    def id_of(self, text: str) -> int | None:
        """The id whose text is ``text`` (the lowest one if several)."""
        return self._index.get(text)


@dataclass
class VocabBuilder:
    """A vocabulary being assembled from one base file plus added tokens."""

    texts: list[str | None]
    vocab_type: VocabType
    source_format: str
    files: list[str]
    complete: bool = True
    byte_level: bool = False
    special_ids: set[int] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)

    def put(self, token_id: int, text: str, special: bool) -> None:
        if token_id < 0:
            return
        if token_id >= MAX_TOKEN_ID:
            raise InvalidInputError(
                f"A token id of {token_id:,} is past {MAX_TOKEN_ID:,}, far beyond any real "
                "vocabulary: these tokenizer files are damaged.", "Re-download them.")
        if token_id >= len(self.texts):
            self.texts.extend([None] * (token_id + 1 - len(self.texts)))
        self.texts[token_id] = text
        if special:
            self.special_ids.add(token_id)
        else:
            self.special_ids.discard(token_id)

    def freeze(self) -> Vocab:
        return Vocab(
            texts=tuple(self.texts),
            vocab_type=self.vocab_type,
            source_format=self.source_format,
            files=tuple(self.files),
            complete=self.complete,
            byte_level=self.byte_level,
            special_ids=frozenset(self.special_ids),
            notes=tuple(self.notes),
        )


@lru_cache(maxsize=1)
def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (used by byte-level BPE)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping
