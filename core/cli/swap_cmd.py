"""`specdeck swap ...`: llama-swap's config.yaml: show, set-draft, migrate."""

from __future__ import annotations

import sys

from specdeck.core.cli import EXIT_NEGATIVE, EXIT_OK
from specdeck.core.cli.numbers import finite, whole
from specdeck.core.cli.output import emit_json
from specdeck.core.errors import InvalidInputError
from specdeck.core.printable import printable


def register(subparsers) -> None:
    from specdeck.core import llama_flags as lf
    from specdeck.core.swap.actions import DRAFT_MAX_RANGE, DRAFT_MIN_RANGE, P_MIN_RANGE

    p = subparsers.add_parser("swap", help="llama-swap's config.yaml (or a llama-server "
                              "router's presets.ini): show, set-draft, migrate",
                              description="Read and edit the drafting flags in the cmd of "
                              "each model in a llama-swap config.yaml, or in each preset of a "
                              "llama-server router's --models-preset .ini file: only the flags "
                              "asked for change, a diff first, a backup, an atomic save.")
    sub = p.add_subparsers(dest="swap_command", required=True, metavar="COMMAND")

    def common(q, json_flag=True):
        q.add_argument("--config", required=True, metavar="FILE",
                       help="llama-swap's config.yaml, or a router's presets .ini")
        q.add_argument("--model", metavar="NAME", help="one model (default: all)")
        if json_flag:
            q.add_argument("--json", action="store_true", help="JSON output")

    def saving(q):
        q.add_argument("--yes", "-y", action="store_true", help="save without asking")
        q.add_argument("--dry-run", action="store_true", help="show the diff, save nothing")
        q.add_argument("--no-backup", action="store_true", help="do not keep config.yaml.bak")
        q.add_argument("--force", action="store_true",
                       help="save even if the file changed on disk since it was read")

    show = sub.add_parser("show", help="models, their drafting flags and what is out of date")
    common(show)
    show.add_argument("--llama-server", metavar="BINARY",
                      help="judge the flags by this binary's --help")
    show.set_defaults(handler=cmd_show)

    setd = sub.add_parser("set-draft", help="set a model's draft model and drafting flags")
    common(setd)
    setd.add_argument("--draft", metavar="GGUF", help=f"the draft model ({lf.DRAFT_MODEL[0]})")
    setd.add_argument("--no-draft", action="store_true",
                      help="remove the draft model and every drafting flag")
    setd.add_argument("--spec-type", metavar="TYPE",
                      help=f"{lf.DRAFT_SIMPLE} (with a draft model), {lf.NGRAM_SIMPLE}, "
                           f"{lf.NGRAM_MOD}, ...")
    setd.add_argument("--draft-max", type=whole(*DRAFT_MAX_RANGE), metavar="N",
                      help="most tokens drafted per step (the spec type's k flag: "
                           f"{lf.DRAFT_N_MAX}, an n-gram type's own)")
    setd.add_argument("--draft-min", type=whole(*DRAFT_MIN_RANGE), metavar="N",
                      help=f"fewest tokens drafted per step ({lf.DRAFT_N_MIN})")
    setd.add_argument("--p-min", type=finite(*P_MIN_RANGE), metavar="P",
                      help=f"minimum draft probability ({lf.DRAFT_P_MIN})")
    setd.add_argument("--llama-server", metavar="BINARY",
                      help="check the result against this binary's --help")
    saving(setd)
    setd.set_defaults(handler=cmd_set_draft)

    mig = sub.add_parser("migrate", help="rewrite removed or renamed llama-server flags")
    common(mig)
    mig.add_argument("--llama-server", metavar="BINARY",
                     help="the llama-server llama-swap runs: its --help decides what is gone "
                          "(default: the binary each cmd names, when it runs here)")
    saving(mig)
    mig.set_defaults(handler=cmd_migrate)


def _help(args):
    from specdeck.core.servers.llama_server import binary_help

    if not getattr(args, "llama_server", None):
        return None
    from specdeck.core.userpath import must_exist

    must_exist(args.llama_server, "llama-server binary",
               "Give the path of the llama-server binary llama-swap starts.")
    info = binary_help(args.llama_server)
    if info is None:
        raise InvalidInputError(f"{args.llama_server} does not run as a llama-server (its "
                                "--help said nothing SpecDeck recognises).",
                                "Give the path of the llama-server binary llama-swap starts.")
    return info


def _models(cfg, args):
    return [cfg.model(args.model)] if args.model else list(cfg.models)


def _is_presets(path) -> bool:
    return str(path).lower().endswith(".ini")


def _preset_names(presets, args) -> list[str]:
    return [presets.section(args.model).name] if args.model else [s.name for s in presets.models()]


def _show_presets(args) -> int:
    from specdeck.core.llama_flags import is_drafting_flag
    from specdeck.core.servers.llama_server import drafter_from_flags
    from specdeck.core.swap import presets as ini

    presets = ini.load(args.config)
    info = _help(args)
    judged = ini.judged_by(info)
    rows = []
    for name in _preset_names(presets, args):
        keys = presets.effective(name)
        flags = tuple(a for k, v in keys.items() for a in (ini.flag_of(k), v))
        drafting = {k: v for k, v in keys.items() if is_drafting_flag(ini.flag_of(k))}
        rows.append({"model": name, "drafting": drafting,
                     "drafter": drafter_from_flags(flags, info).label,
                     "judged_by": judged, "hedged": info is None,
                     "problems": [m for m, _, _ in ini.findings(presets, name, info)]})
    if args.json:
        emit_json({"path": presets.path, "presets": rows})
        return EXIT_OK
    for row in rows:
        shown = " ".join(f"{k}={v}" for k, v in row["drafting"].items())
        print(printable(f"[{row['model']}] drafting: {row['drafter']}"
                        + (f" ({shown})" if shown else "")))
        for problem in row["problems"]:
            said = "may be out of date" if row["hedged"] else "out of date"
            print(f"  {said}: {printable(problem)}")
    if any(row["problems"] for row in rows):
        print(printable(f"Flags {judged}."))
    return EXIT_OK


def _migrate_presets(args) -> int:
    from specdeck.core.cli.config_cmd import write_change
    from specdeck.core.config.edit import ConfigChange
    from specdeck.core.swap import presets as ini

    original = ini.load(args.config)
    info = _help(args)
    current, change, unfixed = original, None, []
    for name in _preset_names(original, args):
        for message, values, renames in ini.findings(current, name, info):
            if not values and not renames:
                unfixed.append(message)
                continue
            change = ini.plan_edit(current, name, values, renames)
            current = ini.parse(change.new_text, original.path)
    for line in unfixed:
        print(f"warning: {printable(line)}", file=sys.stderr)
    if change is None:
        print("Nothing to migrate: every preset uses current keys.")
        return EXIT_NEGATIVE if unfixed else EXIT_OK
    warnings = () if info is not None else (printable(
        f"Migrated by the pinned build's rules: {ini.judged_by(None)}."),)
    whole = ConfigChange(original.document, change.new_text, change.changed_keys, change.values,
                         warnings)
    return write_change(whole, args, "the migrated presets")


def _set_draft_presets(args) -> int:
    from specdeck.core.cli.config_cmd import write_change
    from specdeck.core.config.edit import ConfigChange
    from specdeck.core.llama_flags import (
        DRAFT_MODEL,
        DRAFT_N_MAX,
        DRAFT_N_MIN,
        P_MIN_NAMES,
        SPEC_TYPE,
    )
    from specdeck.core.swap import presets as ini
    from specdeck.core.swap.actions import draft_edits

    presets = ini.load(args.config)
    section = presets.section(args.model)
    own = {e.key for e in section.entries}
    info = _help(args)
    drafting = (*(ini.key_of(f) for f in (SPEC_TYPE, DRAFT_N_MAX, DRAFT_N_MIN, *P_MIN_NAMES)),
                *ini.DRAFT_MODEL_KEYS)
    values: dict[str, str | None] = {}
    if args.no_draft:
        draft_edits(_setting(args))  # refuses anything given beside it
        values = {k: None for k in (*drafting, *ini.REMOVED_KEYS) if k in own}
    else:
        # The names the router's llama-server takes (``info``; else the pinned build's),
        # chosen as `swap set-draft` chooses them for a cmd (core.swap.actions.draft_edits).
        spec_now = presets.effective(args.model).get(ini.SPEC_TYPE_KEY)
        for edit in draft_edits(_setting(args), info, spec_now):
            if edit.flag in DRAFT_MODEL:
                values[next((k for k in ini.DRAFT_MODEL_KEYS if k in own),
                             ini.key_of(DRAFT_MODEL[1]))] = edit.value
                continue
            names = [ini.key_of(n) for n in (edit.flag, *edit.also)]
            key = next((n for n in names if n in own), names[0])
            for old in (ini.key_of(n) for n in edit.replaces):
                if old in own and old != key:
                    values[old] = None  # its old name goes; the new one is written
            values[key] = edit.value
        if info is not None:
            unknown = [k for k, v in values.items() if v is not None
                       and ini.flag_of(k) not in info.flags
                       and k not in ini.DRAFT_MODEL_KEYS]
            if unknown:
                raise InvalidInputError(f"{info.source} lists no "
                                        f"{', '.join(ini.flag_of(k) for k in unknown)}: the preset "
                                        "would not start. Nothing was changed.",
                                        "Give the llama-server your router runs (--llama-server).")
    change = ini.plan_edit(presets, args.model, values)
    if info is None:
        change = ConfigChange(change.document, change.new_text, change.changed_keys,
                              change.values, (printable(f"Keys {ini.judged_by(None)}."),))
    return write_change(change, args, f"the drafting keys of [{args.model}]")


def cmd_show(args) -> int:
    from specdeck.core import swap
    from specdeck.core.swap import actions

    if _is_presets(args.config):
        return _show_presets(args)

    cfg = swap.load(args.config)
    rows = [r for r in actions.model_rows(cfg, _help(args))
            if not args.model or r["model"] == cfg.model(args.model).name]
    if args.json:
        emit_json({"path": cfg.path, "problems": list(cfg.problems), "models": rows})
        return EXIT_OK
    # Names, flags and messages quote the file: every control character in them is shown
    # escaped (a line break or CR in a name must not redraw the output either).
    for problem in cfg.problems:
        print(f"llama-swap refuses this file: {printable(problem)}")
    for row in rows:
        macros = f", macros {', '.join(row['macros'])}" if row["macros"] else ""
        print(printable(f"{row['model']}: {row['style']}, {row['lines']} line(s){macros}"))
        for error in row["errors"]:
            print(f"  problem: {printable(error)}")
        if row["shared_with"]:
            print(f"  its cmd is also used at: {printable(', '.join(row['shared_with']))}")
        if not row["llama_server"]:
            if not row["errors"]:
                print("  not a llama-server command")
            continue
        print(printable(f"  drafting: {row['drafter']}"
                        + (f" ({' '.join(row['flags'])})" if row["flags"] else "")))
        if row["flags_in_macros"]:
            print(printable(f"  set in macros: {' '.join(row['flags_in_macros'])}"))
        if row["judged_by"]:
            print(printable(f"  flags judged by {row['judged_by']}"))
        for problem in row["problems"]:
            said = "may be out of date" if row["hedged"] else "out of date"
            print(f"  {said}: {printable(problem)}")
        if row["not_in_help"]:
            print(printable(f"  not in its --help (kept: a build can take flags its help "
                            f"leaves out): {' '.join(row['not_in_help'])}"))
        if not row["editable"] and row["not_editable"] not in row["errors"]:
            print(f"  SpecDeck will not edit it: {printable(row['not_editable'])}")
    return EXIT_OK


def _setting(args):
    from specdeck.core.swap.actions import DraftSetting

    return DraftSetting(args.draft, args.spec_type, args.draft_max, args.draft_min, args.p_min,
                        args.no_draft)


def cmd_set_draft(args) -> int:
    from specdeck.core import swap
    from specdeck.core.cli.config_cmd import write_change
    from specdeck.core.swap import actions

    if not args.model:
        raise InvalidInputError("set-draft changes one model: give --model NAME.")
    if _is_presets(args.config):
        return _set_draft_presets(args)
    setting = _setting(args)
    actions.draft_edits(setting)  # refuse a bad combination before reading the file
    info = _help(args)

    def plan(doc):
        return actions.plan_draft(swap.from_document(doc), args.model, setting, info)

    cfg = swap.load(args.config)
    return write_change(plan(cfg.document), args, f"the drafting flags of {args.model}", replan=plan)


def cmd_migrate(args) -> int:
    from specdeck.core import swap
    from specdeck.core.cli.config_cmd import write_change
    from specdeck.core.swap import actions

    if _is_presets(args.config):
        return _migrate_presets(args)
    info = _help(args)
    cfg = swap.load(args.config)
    names = [m.name for m in _models(cfg, args)]
    change, unfixed = actions.plan_migration(cfg, names, info)
    for line in unfixed:
        print(f"warning: {printable(line)}", file=sys.stderr)
    if change is None:
        message = "Nothing to migrate: every llama-server cmd uses current flags."
        if args.json:
            emit_json({"changed": False, "path": cfg.path, "message": message,
                       "unfixed": unfixed})
        else:
            print(message)
        return EXIT_NEGATIVE if unfixed else EXIT_OK
    return write_change(change, args, "the migrated flags",
                  replan=lambda doc: actions.migration_of(doc, names, info))
