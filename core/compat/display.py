"""Show a token the way a person reads it: "Ġthe" and "▁the" are " the", "<0x0A>" a newline."""

from __future__ import annotations

import json
import re
from functools import lru_cache

from specdeck.core.compat.vocab import Vocab, VocabType, byte_to_unicode

_SPM_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")
"""A byte that was not UTF-8, kept by the surrogateescape decoding of GGUF strings (so two
different byte strings stay different, as llama.cpp compares them)."""


def shown_bytes(text: str) -> str:
    """``text`` with each byte that was not UTF-8 written ``\\xff``: printable, and still
    distinct from its neighbours."""
    return _ESCAPED_BYTE.sub(lambda m: f"\\x{ord(m.group(0)) - 0xDC00:02x}", text)


@lru_cache(maxsize=1)
def _unicode_to_byte() -> dict[str, int]:
    return {char: byte for byte, char in byte_to_unicode().items()}


def token_display(vocab: Vocab, token_id: int) -> str | None:
    """The text a token stands for; None when the vocabulary has no such id. Bytes that were
    not UTF-8 stay escaped surrogates: print it with ``quoted`` (or ``shown_bytes``)."""
    text = vocab.texts[token_id] if 0 <= token_id < len(vocab.texts) else None
    if text is None or token_id in vocab.special_ids:
        return text
    if vocab.byte_level:
        table = _unicode_to_byte()
        if all(char in table for char in text):
            return bytes(table[char] for char in text).decode("utf-8", "backslashreplace")
        return text
    if vocab.vocab_type is VocabType.SPM:
        byte = _SPM_BYTE.fullmatch(text)
        if byte:
            return bytes([int(byte.group(1), 16)]).decode("utf-8", "backslashreplace")
        return text.replace("\u2581", " ")
    return text


def quoted(text: str | None) -> str:
    """A token display in quotes with newlines and control characters escaped."""
    if text is None:
        return "(none)"
    # After json.dumps, which leaves the escaped bytes as they are: "x\xffy", not "x\\xffy".
    return shown_bytes(json.dumps(text, ensure_ascii=False))
