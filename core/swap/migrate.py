"""What last year's llama-swap cmds say that current llama-server no longer accepts, and the
edit that says it today.

Current llama.cpp removed ``--draft``/``--draft-n``/``--draft-max`` and ``--draft-min``/
``--draft-n-min`` (``--spec-draft-n-max``/``--spec-draft-n-min``, or the n-gram type's own
flags), and ``--spec-ngram-size-n``/``-m`` (each n-gram type has its own), drafts with
``-md`` only given ``--spec-type``, and takes ``on|off|auto`` after ``--flash-attn`` (a bare
one swallows the next flag as its value). Every spelling llama-server accepts for a flag is
the same flag here: its short and long names, and a long name written with ``_``
(``--flash_attn``, ``--draft_max``: common/arg.cpp reads ``_`` as ``-`` after ``--``).
The binary that will run the cmd decides (``info``: the ``--help`` of the binary the cmd
names, or of the one the user gives): which names are gone, which replacement it has, whether
``-md`` drafts alone (llama.cpp before 2026 and ik_llama.cpp draft with ``-md`` and
``--draft-max``: nothing there is out of date), whether ``--flash-attn`` takes a value; a
fix is offered only in names that binary lists. Without a binary, the pinned llama.cpp's list
(core.llama_flags.REMOVED), which whoever shows the findings says they are judged by. Which
n-gram type has its own ``-n-max``/``-n-min`` comes from the same help (``HelpInfo.methods``).
"""

from __future__ import annotations

from dataclasses import dataclass

from specdeck.core import llama_flags
from specdeck.core.llama_flags import FLASH, FLASH_VALUES, canonical
from specdeck.core.servers.llama_server import (
    HelpInfo,
    flash_needs_value,
    methods_of,
    spec_type,
)
from specdeck.core.swap.config import ModelCmd
from specdeck.core.swap.edit import FlagEdit


@dataclass(frozen=True)
class Finding:
    message: str
    edit: FlagEdit | None
    """The fix, when SpecDeck can write one (None: no equivalent, or where it is written
    cannot be edited)."""
    macro: str | None = None
    """The global macro the fix is written in (every model using it gets it); None: the
    model's own cmd."""


def findings(model: ModelCmd, info: HelpInfo | None = None,
             macros: tuple[ModelCmd, ...] = ()) -> list[Finding]:
    """What ``model``'s cmd says that current llama-server refuses, each with its fix.
    ``macros`` (SwapConfig.macro_cmds): a flag set in one of the global macros the cmd uses
    is fixed in that macro."""
    argv = model.flags
    own = [t.text for t in model.tokens] if model.tokens is not None else []
    own_names = {canonical(a.split("=", 1)[0]) for a in own if a.startswith("-")}
    names = [a.split("=", 1)[0] for a in argv if a.startswith("-")]
    removed = {canonical(f) for f in (info.removed if info is not None
                                      else llama_flags.REMOVED)}
    kind = spec_type(argv)
    has_draft_model = any(n in llama_flags.DRAFT_MODEL for n in names)
    out: list[Finding] = []

    def add(message: str, flag: str, edit: FlagEdit | None) -> None:
        if flag in own_names:
            out.append(Finding(message, edit))
            return
        macro = next((m for m in macros if m.name in model.macros_used and m.tokens
                      and any(canonical(t.text.split("=", 1)[0]) == flag for t in m.tokens)), None)
        if macro is None:
            out.append(Finding(f"{message} (it comes from a macro: {', '.join(model.macros_used)}; "
                               "edit the macro)", None))
        else:
            out.append(Finding(f"{message} (in macro {macro.name})", edit, macro.name))

    for flag in dict.fromkeys(names):
        if flag not in removed:
            continue
        value = model.flag_value(flag)
        new = llama_flags.replacement(flag, methods_of(info).method(kind), has_draft_model)
        if flag in llama_flags.N_MAX_REMOVED or flag in llama_flags.N_MIN_REMOVED:
            if not _offers(info, new):
                out.append(Finding(f"{flag} was removed, and {info.source} lists no {new}: "
                                   "remove it or check that build's --help", None))
                continue
            add(f"{flag} was removed: {new} now", flag,
                FlagEdit(new, value if value is not None else None, replaces=(flag,)))
        elif flag in llama_flags.NGRAM_REMOVED:
            if new is not None and _offers(info, new):
                add(f"{flag} was removed: {new} now (each n-gram type has its own)", flag,
                    FlagEdit(new, value, replaces=(flag,)))
            else:
                add(f"{flag} was removed, and this cmd's --spec-type ({kind or 'none'}) has no "
                    "equivalent: remove it", flag, FlagEdit(flag, None))
        else:
            advice = next((a for f, a in info.removed.items() if canonical(f) == flag), "") \
                if info is not None else ""
            out.append(Finding(f"{flag} was removed from llama-server: {advice}".rstrip(": "), None))
    from specdeck.core.servers.llama_server import unknown_drafting_flags

    for flag in unknown_drafting_flags(tuple(argv[1:]), info):
        add(f"{info.source} does not know {flag}, and llama-server refuses to start on a flag "
            "it does not know: remove it or check that build's --help", flag, None)
    if has_draft_model and llama_flags.SPEC_TYPE not in names \
            and methods_of(info).implied_draft is None:
        # Added to the model's own cmd, wherever its draft model is named.
        flag = next(n for n in names if n in llama_flags.DRAFT_MODEL)
        simple = llama_flags.DRAFT_SIMPLE
        if info is None or simple in info.spec_types:
            out.append(Finding(f"{flag} alone no longer drafts: add --spec-type {simple}",
                               FlagEdit(llama_flags.SPEC_TYPE, simple)))
        else:
            out.append(Finding(f"{flag} alone does not draft in {info.source}, which lists no "
                               f"--spec-type {simple}", None))
    for i, arg in enumerate(argv):
        if arg in FLASH and flash_needs_value(info) \
                and (i + 1 >= len(argv) or argv[i + 1] not in FLASH_VALUES):
            written = model.argv[i]  # as the user spelt it (--flash_attn stays so)
            swallowed = f" (it would take {argv[i + 1]} as its value)" if i + 1 < len(argv) else ""
            add(f"{written} now needs on, off or auto{swallowed}: {written} on", arg,
                FlagEdit(written, "on", also=FLASH))
    return out


def _offers(info: HelpInfo | None, flag: str) -> bool:
    """Whether the binary whose help is ``info`` takes ``flag`` (without a binary: the pinned
    build's names, which SpecDeck writes)."""
    return info is None or flag in info.flags
