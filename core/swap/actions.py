"""What `specdeck swap` and the llama-swap page both do to a config: list each model's
drafting state, build the edits for a draft setting, and plan a migration of every model.

One place for it, so the CLI and the GUI offer the same edits and the same advice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specdeck.core.config.edit import ConfigChange
from specdeck.core.engines.base import MAX_SERVER_DRAFT_TOKENS
from specdeck.core.errors import InvalidInputError
from specdeck.core.llama_flags import (
    DRAFT_MODEL,
    DRAFT_N_MAX,
    DRAFT_N_MIN,
    DRAFT_P_MIN,
    DRAFT_SIMPLE,
    N_MAX_NAMES,
    N_MAX_REMOVED,
    N_MIN_NAMES,
    N_MIN_REMOVED,
    P_MIN_ALIASES,
    P_MIN_NAMES,
    SPEC_TYPE,
)
from specdeck.core.printable import printable
from specdeck.core.servers.llama_server import judge_of, unlisted_flags
from specdeck.core.swap.config import SwapConfig, from_document, from_text
from specdeck.core.swap.edit import FlagEdit, check_editable, plan_edit
from specdeck.core.swap.migrate import findings

DRAFTING_FLAGS = (SPEC_TYPE, DRAFT_N_MAX, DRAFT_N_MIN, DRAFT_P_MIN, *P_MIN_ALIASES, *N_MAX_REMOVED,
                  *N_MIN_REMOVED)
"""Every flag removing drafting takes out, besides the draft model's."""


DRAFT_MAX_RANGE = (1, MAX_SERVER_DRAFT_TOKENS)
"""Draft max (k): at least one token a step, or nothing drafts; at most what a server may
draft (the A/B page's winner can be written, whatever its k)."""
DRAFT_MIN_RANGE = (0, MAX_SERVER_DRAFT_TOKENS)
P_MIN_RANGE = (0.0, 1.0)


@dataclass(frozen=True)
class DraftSetting:
    """What to set in a model's cmd; None leaves a flag as it is. Its numbers are checked
    here, for `swap set-draft` and the llama-swap page alike (their fields take these ranges)."""

    draft: str | None = None
    """The draft model's GGUF (-md)."""
    spec_type: str | None = None
    draft_max: int | None = None
    draft_min: int | None = None
    p_min: float | None = None
    no_draft: bool = False
    """Remove the draft model and every drafting flag (give nothing else)."""

    def __post_init__(self) -> None:
        for what, value, (low, high) in (("Draft max", self.draft_max, DRAFT_MAX_RANGE),
                                          ("Draft min", self.draft_min, DRAFT_MIN_RANGE),
                                          ("P-min", self.p_min, P_MIN_RANGE)):
            if value is not None and not low <= value <= high:
                raise InvalidInputError(f"{what} {value:g} is out of range.",
                                        f"Use {low:g} to {high:g}.")


def k_flag(kind: str | None, info=None) -> str:
    """The flag that sets k (draft max) for spec type ``kind`` in the build whose --help is
    ``info`` (None: the fallback): the type's own k flag (an n-gram type's ``-n-max`` or
    ``-size-m``), else ``--spec-draft-n-max``; with no type, what a draft model alone drafts
    with where the build does that (``--draft-max``). One rule for `swap set-draft` on a
    config.yaml and on a router's presets, and for the llama-swap page's field."""
    from specdeck.core.servers.llama_server import methods_of

    known = methods_of(info)
    method = known.method(kind) if kind else known.implied_draft
    return method.k_flag if method is not None and method.k_flag else DRAFT_N_MAX


def draft_edits(setting: DraftSetting, info=None, current_type: str | None = None
                ) -> list[FlagEdit]:
    """The flag edits for ``setting``: current llama-server names, replacing the old ones.
    ``draft_max`` sets k through the flag the spec type (the one set, else ``current_type``)
    has for it in ``info`` (the binary's --help; by default the fallback): an n-gram type's
    ``--spec-ngram-*-size-m`` or ``-n-max``, a draft type's ``--spec-draft-n-max``."""
    values = (setting.draft, setting.spec_type, setting.draft_max, setting.draft_min, setting.p_min)
    if setting.no_draft:
        if any(v is not None for v in values):
            raise InvalidInputError("Removing drafting takes no other setting; give it alone.")
        return [FlagEdit(f, None) for f in (*DRAFT_MODEL, *DRAFTING_FLAGS)]
    from specdeck.core.servers.llama_server import methods_of

    edits = []
    if setting.draft:
        edits.append(FlagEdit(DRAFT_MODEL[0], setting.draft, also=DRAFT_MODEL[1:]))
    spec = setting.spec_type or (DRAFT_SIMPLE if setting.draft else None)
    implied = methods_of(info).implied_draft
    alone = implied is not None and (spec or current_type or implied.name) == implied.name
    if spec and not alone:  # a build that drafts with -md alone takes no --spec-type for it
        edits.append(FlagEdit(SPEC_TYPE, spec))
    n_max, n_min, p_min = DRAFT_N_MAX, DRAFT_N_MIN, DRAFT_P_MIN
    if alone:  # that build's own names (ik_llama.cpp, llama.cpp before 2026: --draft-max)
        n_max, n_min, p_min = (next((f for f in implied.flags if f in names), default)
                               for names, default in ((N_MAX_NAMES, n_max),
                                                      (N_MIN_NAMES, n_min),
                                                      (P_MIN_NAMES, p_min)))
    if setting.draft_max is not None:
        flag = k_flag(implied.name if alone else spec or current_type, info)
        edits.append(FlagEdit(flag, str(setting.draft_max), replaces=tuple(
            n for n in (N_MAX_NAMES if alone else N_MAX_REMOVED) if n != flag)))
    if setting.draft_min is not None:
        edits.append(FlagEdit(n_min, str(setting.draft_min), replaces=tuple(
            n for n in (N_MIN_NAMES if alone else N_MIN_REMOVED) if n != n_min)))
    if setting.p_min is not None:
        edits.append(FlagEdit(p_min, f"{setting.p_min:g}",
                              also=tuple(n for n in P_MIN_NAMES if n != p_min)))
    if not edits:
        raise InvalidInputError("Nothing to set.", "Give a draft model, a spec type, draft "
                                "max/min or p-min, or remove drafting.")
    return edits


def plan_draft(config: SwapConfig, model_name: str, setting: DraftSetting, info=None) -> ConfigChange:
    """The change that writes ``setting`` into one model's cmd, in the names the binary that
    runs it takes, and checked against it: ``info`` (the --help of the binary the user
    named), else the binary the cmd names (core.servers.llama_server.judge_of), else the
    pinned build's names, said in a warning."""
    model = config.model(model_name)
    check_editable(model, f"Model {printable(model_name)}")
    if not model.is_llama_server:
        raise InvalidInputError(f"Model {printable(model_name)}'s cmd does not start a "
                                "llama-server.",
                                "SpecDeck edits llama-server's drafting flags only.")
    from specdeck.core.servers.llama_server import spec_type

    judge = judge_of(model.program, info)
    info = judge.info
    change = plan_edit(config, model_name, draft_edits(setting, info, spec_type(model.flags)))
    after = from_text(change.new_text, change.document.path)
    if info is not None:
        _check_written(model.flags[1:], after.model(model_name).flags[1:], info)
    hedge = () if not judge.hedged else (printable(
        f"{model_name}: written in the names of {judge.by}."),)
    return ConfigChange(change.document, change.new_text, change.changed_keys, change.values,
                        (*change.warnings, *hedge, *_still_wrong(after, model_name, info)))


def _check_written(before: tuple[str, ...], after: tuple[str, ...], info) -> None:
    """Refuse an edit whose result the binary would refuse where the cmd as it was did not:
    what SpecDeck writes must be in its --help; what the user's cmd already had is theirs."""
    from specdeck.core.servers.llama_server import problems_of

    old = set(problems_of(before, info))
    new = [p for p in problems_of(after, info) if p not in old]
    if new:
        raise InvalidInputError("This llama-server command line would not work: "
                                + "; ".join(new) + ". Nothing was changed.",
                                "Fix these flags; `llama-server --help` lists what your "
                                "build knows.")


def _still_wrong(after: SwapConfig, name: str, info=None) -> list[str]:
    """What the model's cmd still gets wrong once the setting is written: its out-of-date
    flags (which `swap migrate` fixes) and a cmd that drafts nothing at all (a draft length
    alone does not make llama-server draft). Saved without a word, such a file looked done."""
    model = after.model(name)
    found = findings(model, info, after.macro_cmds)
    said = [printable(f"{name}: {f.message}" + (" (`specdeck swap migrate` fixes this)"
                                               if f.edit is not None else ""))
            for f in found]
    drafting = model.drafting(info)
    if not drafting["drafts"] and not found:  # an old flag is the reason, and said above
        said.append(printable(f"{name} still drafts nothing ({drafting['drafter']}): give it a "
                              "drafting method (--spec-type, or a draft model with -md)."))
    return said


def plan_migration(config: SwapConfig, names: list[str] | None = None,
                   info=None, info_for_all: bool = True) -> tuple[ConfigChange | None, list[str]]:
    """Every fixable finding of the named llama-server models (all by default) applied, as one
    change of the whole file (None: nothing to fix), and what SpecDeck cannot fix itself.
    ``info`` (a binary's --help) judges the named models, and with ``info_for_all`` every
    other model too (`swap migrate --llama-server`: the binary llama-swap runs); else each
    other model is judged by the binary its own cmd names (a tune's binary is the tuned
    model's only). A flag set in a global macro is fixed in the macro, once for every model
    using it (the warning names them), unless another model using it runs a binary that
    would refuse the fix: then the fix goes into the migrated model's own cmd in place of the
    macro (the macro stays as the others need it), or, where that cannot be written, the
    model is not migrated and said why."""
    wanted = [m for m in config.models if names is None or m.name in names]
    unfixed = [f"{m.name}: {m.errors[0]}" for m in wanted if m.errors]
    names = [m.name for m in wanted if m.is_llama_server and not m.errors]  # errors: unfixed
    current, last, warnings = config, None, []
    for name in names:
        judge = judge_of(current.model(name).program, info)
        found = findings(current.model(name), judge.info, current.macro_cmds)
        unfixed += [f"{name}: {f.message}" for f in found if f.edit is None]
        if any(f.edit is not None for f in found) and judge.hedged:
            warnings.append(printable(f"{name}: migrated by llama.cpp 11434's rules, not "
                                      f"checked against its own binary ({judge.program} "
                                      f"{judge.why_not}). Check the result with your build."))
        before, last_good, said = current, last, len(warnings)
        try:
            for macro in dict.fromkeys(f.macro for f in found if f.edit is not None):
                edits = [f.edit for f in found if f.edit is not None and f.macro == macro]
                target = current.macro(macro) if macro is not None else current.model(name)
                if target.shared_with:
                    warnings.append(printable(
                        f"{'Macro' if macro else 'Model'} {macro or name}'s cmd is written "
                        f"once for several places (a YAML anchor): the fix changes "
                        f"{', '.join(target.shared_with)} too."))
                last = plan_edit(current, macro or name, edits, macro=macro is not None,
                                 shared_ok=True)
                if macro is not None:
                    last = _macro_fix(current, last, name, macro, info if info_for_all else None,
                                      warnings)
                current = from_text(last.new_text, current.path)
        except InvalidInputError as exc:
            unfixed.append(printable(f"{name}: not migrated: {exc.what} {exc.fix or ''}".strip()))
            current, last, warnings = before, last_good, warnings[:said]
            warnings = [w for w in warnings if not w.startswith(f"{name}: migrated by")]
            continue
        refused = _refused_by(judge, before.model(name), current.model(name))
        if refused:  # never written: the model would no longer start
            unfixed.append(printable(f"{name}: not migrated: {judge.info.source} would refuse "
                                     f"the result ({refused})"))
            current, last, warnings = before, last_good, warnings[:said]
            warnings = [w for w in warnings if not w.startswith(f"{name}: migrated by")]
    if last is None:
        return None, unfixed
    return ConfigChange(config.document, last.new_text, last.changed_keys, last.values,
                        tuple(dict.fromkeys(warnings))), unfixed


def _macro_fix(current: SwapConfig, change: ConfigChange, name: str, macro: str, info,
               warnings: list[str]) -> ConfigChange:
    """``change`` (the fix written into global macro ``macro`` for model ``name``) when every
    other model that expands the macro still runs with it, judged by its own binary (or
    ``info``); else the fix written into ``name``'s own cmd in place of the macro, leaving
    the macro as the others need it (core.swap.edit.inline_macro; an InvalidInputError when
    that cannot be written)."""
    from specdeck.core.swap.edit import inline_macro

    trial = from_text(change.new_text, current.path)
    users = current.users_of(macro)
    refusals = []
    for user in users:
        if user == name:
            continue
        judge = judge_of(current.model(user).program, info)
        refused = _refused_by(judge, current.model(user), trial.model(user))
        if refused:
            refusals.append(f"{user} ({judge.info.source} would refuse it: {refused})")
    if not refusals:
        warnings.append(printable(f"Macro {macro} changes for every model that uses it: "
                                  f"{', '.join(users)}."))
        return change
    why = f"macro {macro} is also used by {', '.join(refusals)}"
    try:
        inlined = inline_macro(current, name, macro, trial.macro(macro).value,
                               trial.model(name).argv)
    except InvalidInputError as exc:
        raise InvalidInputError(printable(f"{why}, so its fix cannot go into the macro; and "
                                          f"{exc.what[0].lower()}{exc.what[1:]}"),
                                exc.fix) from None
    warnings.append(printable(f"{name}: {why}: the fix is written into {name}'s own cmd in "
                              f"place of ${{{macro}}}, and the macro stays as it is."))
    return inlined


def _refused_by(judge, before, after) -> str:
    """What the binary that runs the cmd refuses in its migrated flags and did not refuse
    before ("" when nothing, or when that binary cannot be run here to ask)."""
    if judge.info is None:
        return ""
    from specdeck.core.servers.llama_server import problems_of

    old = set(problems_of(before.flags[1:], judge.info))
    return "; ".join(p for p in problems_of(after.flags[1:], judge.info) if p not in old)


def model_rows(config: SwapConfig, info=None) -> list[dict[str, Any]]:
    """One row per model: how its cmd is written, what it drafts, what is out of date, and
    whose rules judged it (``info``: the binary the user named; else the one each cmd names,
    read when it can be run here, else the pinned build's rules, said so)."""
    rows = []
    for model in config.models:
        # A cmd whose macros do not resolve is not what llama-swap would run: not judged.
        judged = model.is_llama_server and model.macros_resolved
        judge = judge_of(model.program, info) if judged else None
        found = findings(model, judge.info, config.macro_cmds) if judged else []
        rows.append({"model": model.name, "style": model.style, "lines": model.lines,
                     "llama_server": model.is_llama_server,
                     **(judge.to_json() if judge is not None else {"judged_by": None}),
                     "macros": list(model.macros_used),
                     **_shown(model.drafting(judge.info if judge is not None else None)),
                     "editable": model.tokens is not None, "not_editable": model.not_editable,
                     "errors": list(model.errors), "shared_with": list(model.shared_with),
                     "problems": [f.message for f in found],
                     "not_in_help": unlisted_flags(model.flags[1:], judge.info) if judged
                     else [],
                     "fixable": sum(1 for f in found if f.edit is not None)})
    return rows


def _shown(drafting: dict[str, Any]) -> dict[str, Any]:
    """A model's drafting state as shown: its flags through the one masker of argv
    (core.urls.shown_args), so a secret set beside them never reaches a screen."""
    from specdeck.core.urls import shown_args

    return {**drafting, "flags": list(shown_args(drafting["flags"])),
            "flags_in_macros": list(shown_args(drafting["flags_in_macros"]))}


def replan_whole(change: ConfigChange | None, doc) -> ConfigChange:
    """``change`` as a change of ``doc`` (an unchanged one when None)."""
    if change is None:
        return ConfigChange(doc, doc.text, (), {})
    return ConfigChange(doc, change.new_text, change.changed_keys, change.values, change.warnings)


def migration_of(doc, names: list[str] | None = None, info=None) -> ConfigChange:
    """plan_migration on a fresh read of the file (for a save that must re-apply)."""
    return replan_whole(plan_migration(from_document(doc), names, info)[0], doc)
