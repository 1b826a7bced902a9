"""Compare two vocabularies id by id (llama.cpp's rule: same text for every id from 5 on)."""

from __future__ import annotations

from specdeck.core.compat.display import token_display
from specdeck.core.compat.report import Mismatch, TokenText, VocabComparison
from specdeck.core.compat.vocab import Vocab

# llama.cpp common/speculative.cpp: SPEC_VOCAB_CHECK_START_TOKEN_ID and
# SPEC_VOCAB_MAX_SIZE_DIFFERENCE.
CHECK_START_ID = 5
MAX_SIZE_DIFFERENCE = 128
EXAMPLES = 12


def _token(vocab: Vocab, token_id: int) -> TokenText:
    text = vocab.texts[token_id] if token_id < len(vocab.texts) else None
    return TokenText(text, token_display(vocab, token_id), token_id in vocab.special_ids)


def _comparison_end(target: Vocab, draft: Vocab) -> int:
    """Compare up to the smaller size; an incomplete side's size is not known."""
    if target.complete and draft.complete:
        return min(len(target.texts), len(draft.texts))
    if target.complete:
        return len(target.texts)
    if draft.complete:
        return len(draft.texts)
    return max(len(target.texts), len(draft.texts))


def compare_vocabs(
    target: Vocab, draft: Vocab, *, examples: int = EXAMPLES, start: int = CHECK_START_ID
) -> VocabComparison:
    """Which ids from ``start`` up to the smaller vocabulary carry different text."""
    t, d = target.texts, draft.texts
    end = max(start, _comparison_end(target, draft))
    if target.complete and draft.complete:
        # Identical vocabularies (the common case) compare as whole tuples, in C.
        if t[start:end] == d[start:end]:
            differing_ids: list[int] = []
        else:
            differing_ids = [i for i in range(start, end) if t[i] != d[i]]
        compared, not_compared = end - start, 0
    else:
        differing_ids, compared, not_compared = _compare_known(target, draft, start, end)
    mismatches = tuple(
        Mismatch(i, _token(target, i), _token(draft, i)) for i in differing_ids[:examples]
    )
    return VocabComparison(
        target_size=target.size,
        draft_size=draft.size,
        first_id=start,
        end_id=end,
        compared=compared,
        differing=len(differing_ids),
        not_compared=not_compared,
        mismatches=mismatches,
    )


def _compare_known(target: Vocab, draft: Vocab, start: int, end: int) -> tuple[list[int], int, int]:
    """Compare only the ids both sides know; in an incomplete vocabulary None means unknown."""
    t, d = target.texts, draft.texts
    differing: list[int] = []
    compared = not_compared = 0
    for i in range(start, end):
        a = t[i] if i < len(t) else None
        b = d[i] if i < len(d) else None
        if (a is None and not target.complete) or (b is None and not draft.complete):
            not_compared += 1
            continue
        compared += 1
        if a != b:
            differing.append(i)
    return differing, compared, not_compared
