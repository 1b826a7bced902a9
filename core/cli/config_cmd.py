"""`specdeck config ...`: show, validate, edit the draft settings, migrate, create."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from specdeck.core.cli import EXIT_NEGATIVE, EXIT_OK
from specdeck.core.cli.output import emit_json, print_table
from specdeck.core.errors import InvalidInputError

AUTO_WORDS = ("auto", "automatic", "blank", "none", "")


def register(subparsers) -> None:
    from specdeck.core.config.schema import DRAFT_SETTINGS

    parser = subparsers.add_parser(
        "config",
        help="TabbyAPI config.yml: show, validate, set the draft model, migrate",
        description="Read and edit the draft settings of a TabbyAPI config.yml. Edits change "
        "only the values you set; comments and everything else stay byte for byte.",
    )
    commands = parser.add_subparsers(dest="config_command", metavar="ACTION", required=True)

    def with_config(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--config", type=Path, metavar="PATH",
                       help="config.yml to use (default: the last one opened in SpecDeck)")
        p.add_argument("--remember", action="store_true",
                       help="also make --config the file SpecDeck opens by default (the GUI "
                       "and later commands); without it a script's --config changes nothing")
        return p

    show = with_config(commands.add_parser("show", help="print the draft and model settings"))
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(handler=cmd_show)

    validate = with_config(commands.add_parser(
        "validate", help="check every setting against TabbyAPI's rules (exit 1 on errors)"))
    validate.add_argument("--json", action="store_true")
    validate.set_defaults(handler=cmd_validate)

    set_draft = with_config(commands.add_parser(
        "set-draft",
        help="set draft-model settings (shows the diff, then saves atomically with a .bak)",
        description="Set draft-model settings. Only the given options change. Blank a value "
        "with an empty string (--name '').",
    ))
    for s in DRAFT_SETTINGS:
        if not s.cli_flag:
            continue
        backend = " [ExLlamaV3 backend only]" if s.exl3_only else ""
        extra = " Use 'auto' for automatic." if s.key == "draft_rope_alpha" else ""
        set_draft.add_argument(
            s.cli_flag, dest=s.key, metavar=s.kind.value.upper(),
            help=f"{s.help}{backend} Allowed: {s.rule()}.{extra}",
        )
    set_draft.add_argument("--yes", "-y", action="store_true", help="save without asking")
    set_draft.add_argument("--dry-run", action="store_true", help="only print the diff")
    set_draft.add_argument("--force", action="store_true",
                           help="save even if the file changed on disk since it was read")
    set_draft.add_argument("--no-backup", action="store_true", help="do not write config.yml.bak")
    set_draft.add_argument("--json", action="store_true")
    set_draft.set_defaults(handler=cmd_set_draft)

    migrate = with_config(commands.add_parser(
        "migrate", help="move a legacy model.draft section to draft_model, as TabbyAPI does"))
    migrate.add_argument("--yes", "-y", action="store_true")
    migrate.add_argument("--dry-run", action="store_true")
    migrate.add_argument("--json", action="store_true")
    migrate.set_defaults(handler=cmd_migrate)

    init = commands.add_parser("init", help="create a new config.yml from TabbyAPI's defaults")
    init.add_argument("path", type=Path)
    init.add_argument("--remember", action="store_true",
                      help="also make it the file SpecDeck opens by default")
    init.set_defaults(handler=cmd_init)


# -- helpers -----------------------------------------------------------------------------


def _load(args):
    from specdeck.core import config, settings

    path = args.config
    if path is None:
        remembered = settings.load().config_path
        if not remembered:
            raise InvalidInputError(
                "No config.yml given and none opened before.",
                "Pass --config PATH (your TabbyAPI folder's config.yml).",
            )
        path = Path(remembered)
    doc = config.load(path)
    if args.config is not None and args.remember:
        settings.save(settings.load().with_config(doc.path))
    return doc


def _describe(doc) -> dict[str, Any]:
    from specdeck.core import config
    from specdeck.core.config.schema import DRAFT, MODEL, SETTINGS

    def entry(s):
        return {
            "value": doc.value(s.section, s.key),
            "in_file": doc.has(s.section, s.key),
            "raw": doc.raw(s.section, s.key),
            "default": s.default,
            "backends": list(s.backends),
            "rule": s.rule(),
        }

    overrides = config.model_overrides(doc)
    return {
        "path": doc.path,
        "layout": doc.layout.value,
        "backend": doc.backend_hint(),
        DRAFT: {s.key: entry(s) for s in SETTINGS if s.section == DRAFT},
        MODEL: {s.key: entry(s) for s in SETTINGS if s.section == MODEL},
        "target_model_path": doc.target_model_path(),
        "draft_model_path": doc.draft_model_path(),
        "model_overrides": None if overrides is None else {
            "path": overrides.path, MODEL: overrides.model, DRAFT: overrides.draft_model,
        },
        "problems": [{"severity": p.severity, "key": ".".join(p.path) if p.path else None,
                      "message": p.message} for p in doc.problems()],
    }


def _shown(value: Any) -> str:
    from specdeck.core.printable import printable

    if value is None:
        return "(blank)"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(f"{v:g}" if isinstance(v, float) else printable(str(v))
                               for v in value) + "]"
    return printable(str(value))  # a value may hold terminal escape codes


def _print_problems(problems: list[dict]) -> None:
    from specdeck.core.printable import printable

    for p in problems:
        print(f"{p['severity']}: {printable(p['message'])}")


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        return False
    answer = input(f"{question} [y/N] ").strip().lower()
    return answer in ("y", "yes")


MAX_REAPPLY = 3


def write_change(change, args, what: str, replan=None) -> int:
    """Show the diff, confirm, save. ``replan(doc)`` plans the same edit on a fresh read:
    with --yes, a file that changed on disk while saving gets the edit re-applied to its new
    version (the other writer's change is kept), never silently overwritten."""
    from specdeck.core import config

    if change.is_noop:
        message = "No change: the file already says that."
        if args.json:
            emit_json({"changed": False, "path": change.document.path, "message": message})
        else:
            print(message)
        return EXIT_OK
    diff = change.diff()
    for warning in getattr(change, "warnings", ()):
        print(f"warning: {warning}", file=sys.stderr)
    if not args.json:
        sys.stdout.write(diff)
    if args.dry_run:
        if args.json:
            emit_json({"changed": False, "dry_run": True, "diff": diff})
        return EXIT_OK
    if not args.yes and not _confirm(f"Save {what} to {change.document.path}?"):
        if sys.stdin.isatty():
            print("Not saved.")
            return EXIT_NEGATIVE
        raise InvalidInputError(
            f"Not saved: SpecDeck writes {change.document.path.name} only when confirmed.",
            "Re-run with --yes to save, or --dry-run to only see the diff.",
        )
    force = getattr(args, "force", False)
    for attempt in range(MAX_REAPPLY + 1):
        try:
            result = config.save(change, force=force, backup=not getattr(args, "no_backup", False))
            break
        except config.ConfigConflictError:
            if force or replan is None or not args.yes or attempt == MAX_REAPPLY:
                raise
            change = replan(config.load(change.document.path))
            diff = change.diff()
            print(f"{change.document.path} changed on disk while saving; re-applying {what} "
                  "to its new version.", file=sys.stderr)
            if change.is_noop:
                print("No change: the file now already says that.")
                return EXIT_OK
            if not args.json:
                sys.stdout.write(diff)
    if args.json:
        emit_json({"changed": True, "path": result.path, "backup": result.backup, "diff": diff})
    else:
        backup = f" (previous version: {result.backup})" if result.backup else ""
        print(f"Saved {result.path}{backup}.")
    return EXIT_OK


# -- commands ----------------------------------------------------------------------------


def cmd_show(args) -> int:
    from specdeck.core.config.schema import DRAFT, EXLLAMAV3, MODEL

    doc = _load(args)
    info = _describe(doc)
    if args.json:
        emit_json(info)
        return EXIT_OK
    print(f"{doc.path}  (layout: {info['layout']}, backend: {info['backend'] or 'unknown'})")
    for section in (DRAFT, MODEL):
        print(f"\n{section}:")
        rows = []
        for key, e in info[section].items():
            where = "" if e["in_file"] else "default"
            only = "exl3" if e["backends"] == [EXLLAMAV3] else ""
            rows.append([key, _shown(e["value"]), where, only])
        print_table(rows, ["key", "value", "source", "backend"])
    if info["model_overrides"]:
        o = info["model_overrides"]
        print(f"\nThe target model's {o['path']} overrides: "
              f"{', '.join(f'{k}={v}' for k, v in {**o[MODEL], **o[DRAFT]}.items())}")
    if info["problems"]:
        print()
        _print_problems(info["problems"])
    return EXIT_OK


def cmd_validate(args) -> int:
    doc = _load(args)
    problems = _describe(doc)["problems"]
    errors = [p for p in problems if p["severity"] == "error"]
    if args.json:
        emit_json({"path": doc.path, "valid": not errors, "problems": problems})
    else:
        _print_problems(problems)
        print(f"{doc.path}: {'valid' if not errors else f'{len(errors)} error(s)'}")
    return EXIT_OK if not errors else EXIT_NEGATIVE


def cmd_set_draft(args) -> int:
    from specdeck.core import config
    from specdeck.core.config.schema import DRAFT, DRAFT_SETTINGS

    changes = {}
    for s in DRAFT_SETTINGS:
        value = getattr(args, s.key, None)
        if value is None:
            continue
        if s.key == "draft_rope_alpha" and value.strip().lower() in AUTO_WORDS:
            value = ""
        changes[(DRAFT, s.key)] = value
    if not changes:
        raise InvalidInputError("Nothing to set.", "Give at least one option, e.g. --name MyDraft.")
    doc = _load(args)
    change = config.plan_change(doc, changes)
    return write_change(change, args, "the draft settings",
                  replan=lambda fresh: config.plan_change(fresh, changes))


def cmd_migrate(args) -> int:
    from specdeck.core import config

    doc = _load(args)
    migration = config.plan_migration(doc)
    if migration.is_noop:
        if args.json:
            emit_json({"changed": False, "message": "Not a legacy file."})
        else:
            print(f"{doc.path} does not need migrating (layout: {doc.layout.value}).")
        return EXIT_OK
    if not args.json:
        print("Migrating: " + "; ".join(migration.steps))
    return write_change(migration, args, "the migrated config", replan=config.plan_migration)


def cmd_init(args) -> int:
    from specdeck.core import config, settings

    created = config.create_config(args.path)
    if args.remember:
        settings.save(settings.load().with_config(created.path))
    print(f"Created {created.path}.")
    return EXIT_OK
