"""Remember vocabularies already read, in memory and on disk.

Reading a 150k-token vocabulary from its source costs 60-200 ms (tiktoken files and
SentencePiece protobufs are the slow ones); reading it back from the cache costs ~15 ms.
Entries are keyed by the folder and the size and modification time of every file the
vocabulary was read from, so editing or replacing a tokenizer file invalidates them. The
disk cache lives under SpecDeck's cache folder and keeps the most recently used entries;
losing it costs only time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from specdeck.core import appdirs
from specdeck.core.atomic import atomic_write_text
from specdeck.core.compat.tokenizer_files import read_vocab, vocab_source_files
from specdeck.core.compat.vocab import Vocab, VocabType
from specdeck.core.errors import NotFoundError, SpecDeckError
from specdeck.core.files import METADATA_FILE, read_text_bounded

log = logging.getLogger(__name__)

# Bump when the way vocabularies are read changes, so old entries are not reused.
CACHE_FORMAT = 1
MEMORY_ENTRIES = 8
DISK_ENTRIES = 32

CACHE_MEMORY = "memory"
CACHE_DISK = "disk"
CACHE_NONE = "none"

Signature = tuple[str, tuple[tuple[str, int, int], ...]]


def signature(folder: Path) -> Signature:
    """What identifies a folder's vocabulary: its path and each source file's size and mtime."""
    real = folder.resolve()
    files = []
    for name in vocab_source_files(real):
        stat = (real / name).stat()
        files.append((name, stat.st_size, stat.st_mtime_ns))
    return str(real), tuple(files)


def _vocab_to_json(vocab: Vocab) -> dict[str, Any]:
    return {
        "texts": list(vocab.texts),
        "vocab_type": vocab.vocab_type.value,
        "source_format": vocab.source_format,
        "files": list(vocab.files),
        "complete": vocab.complete,
        "byte_level": vocab.byte_level,
        "special_ids": sorted(vocab.special_ids),
        "notes": list(vocab.notes),
    }


def _vocab_from_json(data: dict[str, Any]) -> Vocab:
    return Vocab(
        texts=tuple(data["texts"]),
        vocab_type=VocabType(data["vocab_type"]),
        source_format=str(data["source_format"]),
        files=tuple(data["files"]),
        complete=bool(data["complete"]),
        byte_level=bool(data["byte_level"]),
        special_ids=frozenset(int(i) for i in data["special_ids"]),
        notes=tuple(data["notes"]),
    )


class VocabCache:
    """Read vocabularies through a memory cache and a disk cache.

    ``directory`` is the disk cache folder; None means ``<SpecDeck cache>/compat``, looked
    up on each call (tests give every test its own SPECDECK_HOME).
    """

    def __init__(self, directory: Path | None = None, *, use_disk: bool = True):
        self._directory = directory
        self._use_disk = use_disk
        self._memory: OrderedDict[Signature, Vocab] = OrderedDict()
        self._lock = threading.Lock()

    def directory(self) -> Path:
        return self._directory or appdirs.cache_dir() / "compat"

    def clear_memory(self) -> None:
        with self._lock:
            self._memory.clear()

    def read(self, folder: Path) -> tuple[Vocab, str]:
        """The vocabulary of ``folder`` and where it came from (memory, disk or none)."""
        key = signature(folder)
        with self._lock:
            vocab = self._memory.get(key)
            if vocab is not None:
                self._memory.move_to_end(key)
                return vocab, CACHE_MEMORY
        origin = CACHE_DISK
        vocab = self._load_disk(key) if self._use_disk else None
        if vocab is None:
            origin = CACHE_NONE
            vocab = read_vocab(folder)
            if self._use_disk:
                self._store_disk(key, vocab)
        with self._lock:
            self._memory[key] = vocab
            while len(self._memory) > MEMORY_ENTRIES:
                self._memory.popitem(last=False)
        return vocab, origin

    # disk ------------------------------------------------------------------------------
    def _entry_path(self, key: Signature) -> Path:
        digest = hashlib.sha256(json.dumps([CACHE_FORMAT, key]).encode()).hexdigest()[:32]
        return self.directory() / f"vocab-{digest}.json"

    def _load_disk(self, key: Signature) -> Vocab | None:
        path = self._entry_path(key)
        try:
            data = json.loads(read_text_bounded(path, "vocabulary cache entry", METADATA_FILE))
            # JSON has no tuples: compare the signature in its JSON form.
            if data.get("format") != CACHE_FORMAT or data.get("signature") != json.loads(
                json.dumps(key)
            ):
                return None
            vocab = _vocab_from_json(data["vocab"])
        except (FileNotFoundError, NotFoundError):
            return None
        except (OSError, ValueError, KeyError, TypeError, SpecDeckError) as exc:
            log.info("Ignoring unreadable vocabulary cache entry %s: %s", path, exc)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # recently used: kept by the pruning below
        return vocab

    def _store_disk(self, key: Signature, vocab: Vocab) -> None:
        path = self._entry_path(key)
        payload = {"format": CACHE_FORMAT, "signature": key, "vocab": _vocab_to_json(vocab)}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps(payload, ensure_ascii=False))
        except (OSError, SpecDeckError, UnicodeError) as exc:
            # A cache that cannot be written only costs time; the check itself goes on (a
            # folder name that is not valid UTF-8 cannot be written into the JSON, say).
            log.info("Could not write the vocabulary cache %s: %s", path, exc)
            return
        self._prune()

    def _prune(self) -> None:
        try:
            entries = sorted(self.directory().glob("vocab-*.json"),
                             key=lambda p: p.stat().st_mtime, reverse=True)
            for stale in entries[DISK_ENTRIES:]:
                stale.unlink()
        except OSError as exc:
            log.info("Could not prune the vocabulary cache: %s", exc)


_default: VocabCache | None = None
_default_lock = threading.Lock()


def default_cache() -> VocabCache:
    """The process-wide cache (created on first use, not at import)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = VocabCache()
        return _default
