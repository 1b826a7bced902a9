"""Turn a stream of token ids into a stream of text, one verify step at a time.

Decoding token by token is wrong for most tokenizers: SentencePiece drops the leading space
of the first token it decodes, and a character can span several byte-level tokens. The
usual fix (vLLM, TGI) decodes a short window twice, with and without the new tokens, and
emits the difference; text that ends in an incomplete character (U+FFFD) is held back until
the next token completes it. The window keeps the cost per step constant.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

Decode = Callable[[list[int]], str]

_INCOMPLETE = "\ufffd"


class StreamDecoder:
    """Incremental detokenizer: ``push(ids)`` returns the text those ids added."""

    def __init__(self, decode: Decode, context: Iterable[int] = ()):
        """``decode(ids) -> str`` must skip special tokens; ``context`` is the prompt's tail,
        so the first output token is decoded as a continuation (keeps its leading space)."""
        self._decode = decode
        self._ids: list[int] = list(context)[-4:]
        self._prefix = 0
        self._read = len(self._ids)
        self._emitted: list[str] = []

    def push(self, new_ids: Iterable[int]) -> str:
        self._ids.extend(new_ids)
        before = self._decode(self._ids[self._prefix : self._read])
        after = self._decode(self._ids[self._prefix :])
        if len(after) <= len(before) or after.endswith(_INCOMPLETE):
            return ""
        delta = after[len(before) :]
        self._prefix = self._read
        self._read = len(self._ids)
        self._emitted.append(delta)
        return delta

    def flush(self) -> str:
        """Whatever is still held back (an incomplete character at the very end)."""
        before = self._decode(self._ids[self._prefix : self._read])
        after = self._decode(self._ids[self._prefix :])
        delta = after[len(before) :] if len(after) > len(before) else ""
        self._prefix = self._read = len(self._ids)
        if delta:
            self._emitted.append(delta)
        return delta

    @property
    def text(self) -> str:
        """All text emitted so far."""
        return "".join(self._emitted)
