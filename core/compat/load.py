"""One side of a check: a model's config numbers, vocabulary and special tokens."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from specdeck.core.compat.cache import VocabCache, default_cache
from specdeck.core.compat.source import ModelSource, parse_source, resolve_folder
from specdeck.core.compat.special import SpecialTokens, read_special_tokens
from specdeck.core.compat.vocab import Vocab
from specdeck.core.errors import CancelledError
from specdeck.core.models import ModelInfo, read_model


@dataclass(frozen=True)
class CheckSide:
    """What the rules need to know about one model."""

    source: ModelSource
    folder: Path
    info: ModelInfo | None
    """config.json's numbers; None when the folder has no config.json."""
    vocab: Vocab
    special: SpecialTokens
    seconds: float
    """Time to load this side (fetching from the Hub included)."""
    cache: str
    """Where the vocabulary came from: "memory", "disk" or "none" (read from the files)."""
    gguf_numbers: dict | None = None
    """A GGUF side: its architecture, context length and output head rows (no config.json)."""

    @property
    def name(self) -> str:
        if self.source.repo_id:
            return self.source.label
        return self.folder.name

    @property
    def head_rows(self) -> int | None:
        """Rows of the output head = config.json vocab_size (often padded past the tokenizer),
        or a GGUF's output tensor rows."""
        if self.gguf_numbers is not None:
            return self.gguf_numbers.get("head_rows")
        return self.info.arch.vocab_size if self.info else None

    @property
    def context_length(self) -> int | None:
        if self.gguf_numbers is not None:
            value = self.gguf_numbers.get("context_length")
            return value if isinstance(value, int) else None
        return self.info.context_length if self.info else None

    @property
    def parameters(self) -> int | None:
        return self.info.parameters if self.info else None

    @property
    def is_gguf(self) -> bool:
        return self.gguf_numbers is not None

    @property
    def file_bytes(self) -> int | None:
        """A GGUF side's weights on disk (every shard of a split file); None elsewhere."""
        return self.gguf_numbers.get("file_bytes") if self.gguf_numbers is not None else None


def gguf_bytes(path: Path) -> int | None:
    """The size of a GGUF on disk, all its shards together (``-00001-of-00003.gguf``)."""
    from specdeck.core.compat.gguf_file import shards

    try:
        return sum(f.stat().st_size for f in shards(Path(path)))
    except OSError:
        return None


def check_cancel(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise CancelledError("Compatibility check cancelled.")


def load_model(
    spec: str | Path | ModelSource,
    *,
    endpoint: str | None = None,
    token: str | None = None,
    cache: VocabCache | None = None,
    cancel: threading.Event | None = None,
) -> CheckSide:
    """Load the side named by ``spec`` (a folder or a Hub id[@revision])."""
    started = time.perf_counter()
    source = spec if isinstance(spec, ModelSource) else parse_source(spec)
    if source.gguf is not None:
        from specdeck.core.compat.gguf_model import read_gguf

        vocab, special, numbers = read_gguf(source.gguf)
        return CheckSide(source=source, folder=source.gguf, info=None, vocab=vocab,
                           special=special, seconds=time.perf_counter() - started,
                           cache="none", gguf_numbers={**numbers,
                                                       "file_bytes": gguf_bytes(source.gguf)})
    if source.hub_gguf is not None:
        from specdeck.core.compat.gguf_hub import read_hub_gguf

        vocab, special, numbers, path, fetched = read_hub_gguf(
            source.repo_id, source.revision, source.hub_gguf, endpoint=endpoint, token=token,
            cancel=cancel)
        return CheckSide(source=source, folder=Path(path), info=None, vocab=vocab,
                           special=special, seconds=time.perf_counter() - started,
                           cache="none", gguf_numbers={**numbers, "header_bytes": fetched})
    folder = resolve_folder(source, endpoint=endpoint, token=token, cancel=cancel)
    check_cancel(cancel)
    info = read_model(folder) if (folder / "config.json").is_file() else None
    vocab, origin = (cache or default_cache()).read(folder)
    check_cancel(cancel)
    special = read_special_tokens(folder, vocab)
    return CheckSide(
        source=source,
        folder=folder,
        info=info,
        vocab=vocab,
        special=special,
        seconds=time.perf_counter() - started,
        cache=origin,
    )
