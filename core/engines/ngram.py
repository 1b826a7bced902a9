"""Prompt lookup: draft tokens by copying what followed the same n tokens earlier.

The drafter keeps an index from every n-gram (n = ngram_min..ngram_max, or 1..ngram_max
when short matches may draft) of the sequence (prompt + output so far) to the position right after its most recent occurrence. To draft,
it looks up the sequence's last n tokens, longest n first, and proposes the tokens that
followed that earlier occurrence.

A match of at least ngram_min tokens drafts up to k tokens. A shorter one (down to a single
token) is weak evidence and drafts at most ``short_tokens`` (0: nothing): a rejected draft
costs a wider target forward for nothing, so a drafter that always guesses long makes prompts
with nothing to copy slower than no drafting, while a short guess after a one-token match pays
on structured text (keys, markup, table cells). On the demo model (CPU) a verify forward of 2
tokens costs about 10% more than one of 1, so once a step drafts at all a second token is
cheap. `make bench BENCH_ARGS=engine_choices` measures short_tokens = 2 against 0 with the
A/B protocol on every shipped suite (docs/benchmarks/engine_choices.md): faster on
structured, grounded and code prompts, even on chat, about 1% slower on prose. SpecDeck's
default is 2 (DrafterSpec.ngram_short).

Pure Python on lists of ints: the cost per token is a few dict operations.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


class PromptLookup:
    """n-gram index over a growing token sequence, and the drafts it suggests."""

    def __init__(self, ngram_max: int = 4, ngram_min: int = 2, short_tokens: int = 0):
        if not 1 <= ngram_min <= ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {ngram_min}..{ngram_max}")
        if short_tokens < 0:
            raise ValueError(f"short_tokens must be 0 or more, got {short_tokens}")
        self.ngram_max = ngram_max
        self.ngram_min = ngram_min
        self.short_tokens = short_tokens
        self._shortest = 1 if short_tokens and ngram_min > 1 else ngram_min
        """The shortest match looked up: 1 when short matches may draft."""
        self._ids: list[int] = []
        # n -> {n-gram: position of the token that followed its latest indexed occurrence}
        self._index: dict[int, dict[tuple[int, ...], int]] = {}
        self._indexed_until = 0
        self.reset(())

    @property
    def ids(self) -> Sequence[int]:
        return self._ids

    def reset(self, ids: Iterable[int]) -> None:
        """Start over with ``ids`` (usually the prompt)."""
        self._ids = list(ids)
        self._index = {n: {} for n in range(self._shortest, self.ngram_max + 1)}
        self._indexed_until = 0
        self._index_pending()

    def extend(self, new_ids: Iterable[int]) -> None:
        """Append accepted tokens."""
        self._ids.extend(new_ids)
        self._index_pending()

    def _index_pending(self) -> None:
        # An n-gram is indexed only once a token follows it: the sequence's own suffix must
        # never match itself, and a match must leave at least one token to propose.
        ids = self._ids
        last = len(ids) - 1
        for follow in range(max(self._indexed_until, 1), last + 1):
            for n, table in self._index.items():
                if follow >= n:
                    table[tuple(ids[follow - n : follow])] = follow
        self._indexed_until = max(self._indexed_until, last + 1)

    def match(self) -> tuple[int, int] | None:
        """(n, start of the continuation) of the longest suffix match, or None."""
        ids = self._ids
        for n in range(self.ngram_max, self._shortest - 1, -1):
            if len(ids) <= n:
                continue
            follow = self._index[n].get(tuple(ids[-n:]))
            if follow is not None:
                return n, follow
        return None

    def propose(self, max_tokens: int) -> list[int]:
        """Up to ``max_tokens`` draft tokens (fewer after a short match), or [] when nothing
        matches."""
        found = self.match()
        if found is None:
            return []
        n, follow = found
        if n < self.ngram_min:
            max_tokens = min(max_tokens, self.short_tokens)
        if max_tokens <= 0:
            return []
        ids = self._ids
        draft = ids[follow : follow + max_tokens]
        # A match close to the end is a repeating pattern with period len(ids) - follow:
        # keep copying through the draft itself instead of stopping short.
        period = len(ids) - follow
        while len(draft) < max_tokens:
            draft.append(draft[len(draft) - period])
        return draft
