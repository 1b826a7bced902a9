"""Token counts iterated in the order a libstdc++ ``std::unordered_map`` iterates them.

llama.cpp's ngram-cache drafter (common/ngram-cache.cpp, ``try_draft``) picks the most
frequent next token of an n-gram by walking a ``std::unordered_map<llama_token, int32_t>`` and
keeping the first of equal counts. A tie is common (two tokens seen once each after a 2-gram
pass its 50% threshold), so which token it drafts is decided by the map's iteration order,
which the C++ standard leaves to the library. The pinned llama-server is built with GCC 12's
libstdc++ (``strings llama-server`` says ``GCC: (Debian 12.2.0-14+deb12u1)``), whose hash table
(bits/hashtable.h, ``_M_insert_bucket_begin`` and ``_M_rehash_aux``) behaves as follows:

- a node joins a bucket that already holds nodes at the front of that bucket's run;
- a node of an empty bucket goes to the front of the whole list;
- when one more element would exceed the bucket count (max_load_factor 1.0), the table grows
  to the next size of ``GROWTH`` and re-inserts every node, in the old iteration order, by
  the same two rules;
- a copy keeps the order (the drafter copies the map before it walks it).

The bucket of a token is ``hash % bucket_count`` with ngram-cache's own hash,
``token * 11400714819323198485`` modulo 2**64 (common/ngram-cache.h,
``common_token_hash_function``). ``GROWTH`` was read from that libstdc++ itself by inserting
into such a map and printing ``bucket_count()`` whenever it changed (the test
``test_replay_stdorder`` compiles the same check and compares whole iteration orders).
A build with another C++ library (libc++ on macOS, MSVC) breaks ties in its own order: the
replay counts the drafts a tie decided (``NgramCache.ties``) so a report can say how many
could differ there.
"""

from __future__ import annotations

TOKEN_HASH = 11400714819323198485
MASK64 = (1 << 64) - 1

GROWTH = (13, 29, 59, 127, 257, 541, 1109, 2357, 5087, 10273, 20753, 42043, 85229, 172933,
          351061, 712697, 1447153, 2938679, 5967347)
"""Bucket counts of a growing libstdc++ (GCC 12) unordered_map: 1 while empty, 13 from the
first element, then the next of these when the element count would exceed the current one."""


def token_hash(token: int) -> int:
    return (token * TOKEN_HASH) & MASK64


class OrderedCounts:
    """``token -> count`` with libstdc++'s iteration order (see the module's docstring)."""

    __slots__ = ("counts", "order", "buckets", "next_resize")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.order: list[int] = []
        self.buckets = 1
        self.next_resize = 0  # an empty table allocates on its first insert

    def add(self, token: int, n: int = 1) -> None:
        """``map.emplace(token, n)`` when absent, else ``map[token] += n``."""
        if token in self.counts:
            self.counts[token] += n
            return
        if len(self.counts) + 1 > self.next_resize:
            self._rehash(self._next_size())
        self._insert(self.order, token, self.buckets)
        self.counts[token] = n

    def _next_size(self) -> int:
        for size in GROWTH:
            if size > self.buckets:
                return size
        raise OverflowError("more distinct tokens after one n-gram than the table covers")

    def _rehash(self, buckets: int) -> None:
        order: list[int] = []
        for token in self.order:
            self._insert(order, token, buckets)
        self.order, self.buckets, self.next_resize = order, buckets, buckets

    @staticmethod
    def _insert(order: list[int], token: int, buckets: int) -> None:
        bucket = token_hash(token) % buckets
        for i, other in enumerate(order):
            if token_hash(other) % buckets == bucket:
                order.insert(i, token)  # the front of its bucket's run
                return
        order.insert(0, token)  # an empty bucket: the front of the list

    def items(self) -> list[tuple[int, int]]:
        """(token, count) in iteration order."""
        return [(t, self.counts[t]) for t in self.order]

    def __len__(self) -> int:
        return len(self.counts)
