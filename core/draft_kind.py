"""What a drafting setting drafts with, whatever its server: a draft model of its own (its
memory, and a forward of its own per drafted token), the target's own MTP layers (about one
layer's forward per drafted token, no second model), or the context (an n-gram lookup: next to
free).

llama-server's spec types say it through their family (``core.llama_flags.drafts_with_model``:
every draft-* type but draft-mtp drafts with the -md model) and TabbyAPI's ``draft_mode``
values through the modes that need no draft model (``core.config.schema.MODELLESS_DRAFT_MODES``).
Successive halving's cost (``core.bench.halving.setting_cost``: cheaper settings first) and the
tune's predictions (``core.tune.predict``: a draft's cost ratio, the acceptance it expects) read
this one answer, so an MTP or n-gram setting is never costed as a draft model in one and not
in the other.
"""

from __future__ import annotations

from specdeck.core import llama_flags
from specdeck.core.config.schema import (
    DRAFT_MODE_DISABLED,
    DRAFT_MODE_MODEL,
    DRAFT_MODE_MTP,
    MODELLESS_DRAFT_MODES,
)

DRAFT_MODEL = "draft"
"""Drafts with a draft model."""
MTP = "mtp"
"""Drafts with the target's own MTP layers."""
NGRAM = "ngram"
"""Drafts by looking up the context."""
NOTHING = ""
"""Drafts nothing (llama-server's ``--spec-type none``, TabbyAPI's ``disabled``)."""


def draft_kind(method: str | None, draft: bool = False) -> str:
    """What a setting drafts with: ``method`` is a llama-server spec type or a TabbyAPI
    draft_mode (None: none given), ``draft`` whether a draft model is named beside it (-md,
    draft_model_name). A mode or type that needs no draft model drafts without one even
    where one is named: TabbyAPI ignores draft_model_name in its ngram and mtp modes, and
    llama-server drafts only with the types its --spec-type lists (common/speculative.cpp
    ``common_speculative_init`` adds no draft-simple beside an n-gram type, though it loads
    the -md model). A draft named without a method drafts with it (a build that drafts with
    -md alone, or a type llama-server infers from the draft's GGUF)."""
    if method in (llama_flags.SPEC_NONE, DRAFT_MODE_DISABLED):
        return NOTHING
    if method in (llama_flags.DRAFT_MTP, DRAFT_MODE_MTP):
        return MTP
    if method in MODELLESS_DRAFT_MODES or \
            (method is not None and llama_flags.family_of(method) == llama_flags.NGRAM_FAMILY):
        return NGRAM
    if draft or method == DRAFT_MODE_MODEL or \
            (method is not None and llama_flags.drafts_with_model(method)):
        return DRAFT_MODEL
    return NGRAM if method is not None else NOTHING
