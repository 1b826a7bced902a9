"""Write a verified winner, prove it from the file as written, or put the file back.

Only a decision that says apply (``core.tune.verify.decide``: faster than no drafting with its
whole 95% interval above 1.0, faster than the current setting, output unchanged) reaches this
module. For a llama-swap model the winner's drafting flags go into its cmd through the same
editor as ``specdeck swap set-draft`` (only those flags' characters change; a diff first; a
.bak; an atomic save), and never over a config.yaml that changed on disk while tuning ran.
Then llama-server is started from the file as written (the cmd read back, macros resolved)
and must answer a prompt and draft; if it does not, the file is rolled back to the bytes it
had before. A setup without a file (a binary and a GGUF, the demo) gets the flags to copy.
"""

from __future__ import annotations

import shlex
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from specdeck.core.changed import FileChanged
from specdeck.core.errors import SpecDeckError
from specdeck.core.tune.confirm import Asker, Confirm
from specdeck.core.tune.request import DEMO, GGUF, SWAP, TABBYAPI
from specdeck.core.tune.run import TuneResult


@dataclass(frozen=True)
class Applied:
    path: Path | None
    """The file changed (None: nothing to write, the flags are shown for copying)."""
    flags: str
    """The winner's drafting flags, as a shell would take them."""
    diff: str = ""
    written: bool = False
    backup: Path | None = None
    relaunch: str = ""
    """What the server started from the written file did (drafted and answered, or why not)."""
    rolled_back: bool = False
    why: str = ""
    """Why nothing was written, when nothing was."""
    written_fingerprint: str | None = None
    """The file's bytes as SpecDeck wrote them (sha256): a roll back never overwrites a
    file edited since."""
    backup_fingerprint: str | None = None
    """The bytes SpecDeck kept in ``backup`` (sha256): a roll back puts back only those,
    never what a backup swapped since (another file, a link) holds."""
    refused: str = ""
    """Why the write was refused before anything was written (the file changed while the
    tune ran, a read-only folder, ...): the tune's result is still reported, with this."""
    kind: str = ""
    """Which file ``path`` is (core.changed: the written document's ``what``)."""
    servers_started: int = 0
    """Servers the proof started (:func:`run_written`: the server as the file now says);
    the tune's own are ``TuneResult.servers_started``."""

    @property
    def changed(self) -> FileChanged | None:
        """What this apply (or its roll back) changed on disk, for the app to announce
        (None: nothing was written)."""
        if not self.written or self.path is None:
            return None
        return FileChanged(self.path, self.kind)


def apply(result: TuneResult, confirm: Confirm | None = None,
          cancel: threading.Event | None = None) -> Applied:
    """Write ``result``'s winner (asking ``confirm`` with the diff unless it is None: None
    means the user said yes beforehand), relaunch from the file, roll back on failure."""
    decision = result.decision
    if not decision.apply or decision.flags is None:
        raise SpecDeckError("There is no verified winner to apply.", decision.why)
    setup = result.setup
    if setup.kind == TABBYAPI:
        from specdeck.core.tune.tabby import apply_tabby

        return apply_tabby(result, confirm, cancel)
    flags = shlex.join(decision.flags)
    if setup.kind != SWAP:
        return Applied(None, flags, why="SpecDeck does not own this command line: add the "
                       "flags to your llama-server command (or your preset) yourself.")
    from specdeck.core import swap
    from specdeck.core.swap.apply import plan_apply_flags

    config = swap.load(setup.swap_config)
    migrated = _migrated(config, setup)
    change = _whole(config, plan_apply_flags(migrated, setup.swap_model, decision.flags))
    started: list[int] = []
    return counted(write_and_prove(
        setup.swap_config, flags, change, confirm, lambda: relaunch(result, cancel, started),
        proved="llama-server started from the saved file, answered and drafted.",
        noop="The file already has these flags: nothing to write.",
        unchanged=lambda: refuse_if_changed(setup.swap_config,
                                            config.document.disk_fingerprint,
                                            setup.swap_fingerprint)), started)


def counted(applied: Applied, started: list[int]) -> Applied:
    """``applied`` with the servers its proof started (each :func:`run_written`'s)."""
    return replace(applied, servers_started=sum(started))


def _migrated(config, setup):
    """``config`` with the migration the tune measured (``Setup.migration``) applied."""
    if not setup.migration:
        return config
    from specdeck.core.tune.setup import migrated_config

    return migrated_config(config, setup.swap_model, setup.binary)[0]


def _whole(config, change):
    """``change`` (of a migrated text) as one change of the file as it is on disk: its diff
    shows the migration and the winner together."""
    from specdeck.core.config.edit import ConfigChange

    return ConfigChange(config.document, change.new_text, change.changed_keys, change.values,
                        change.warnings)


def apply_migration(result: TuneResult, confirm: Confirm | None = None,
                    cancel: threading.Event | None = None) -> Applied | None:
    """Where no winner is written but the tune measured the cmd as migrated (its flags are
    out of date for its llama-server), the migration alone: shown, written as a winner is
    (with ``confirm``), and proved by a relaunch when the cmd drafts. None: nothing to
    migrate."""
    setup = result.setup
    if setup.kind != SWAP or not setup.migration or result.decision.apply:
        return None
    from specdeck.core import swap

    config = swap.load(setup.swap_config)
    migrated = _migrated(config, setup)
    change = _whole(config, _change_of(config, migrated))
    started: list[int] = []
    return counted(write_and_prove(
        setup.swap_config, "", change, confirm,
        (lambda: relaunch(result, cancel, started)) if setup.drafting else (lambda: None),
        proved="The migration is written: llama-server started from the saved file" + (
            ", answered and drafted." if setup.drafting else "."),
        noop="The file is already migrated: nothing to write.",
        unchanged=lambda: refuse_if_changed(setup.swap_config,
                                            config.document.disk_fingerprint,
                                            setup.swap_fingerprint)), started)


def _change_of(config, migrated):
    from specdeck.core.config.edit import ConfigChange

    return ConfigChange(config.document, migrated.document.text, (), {})


def apply_keeping(result: TuneResult, confirm: Confirm | None = None,
                  cancel: threading.Event | None = None, *,
                  migration_only: bool = False) -> TuneResult:
    """``result`` with what :func:`apply` (or, ``migration_only``, :func:`apply_migration`)
    did to the file. A write refused before anything was written (the file changed while
    the tune ran, a read-only folder, a backup slot that is a link) is kept in
    ``Applied.refused`` instead of raised: the verified result is the user's whatever
    becomes of the file, and the report they asked for is written."""
    from specdeck.core.errors import CancelledError

    try:
        if migration_only:
            migrated = apply_migration(result, confirm, cancel)
            return result if migrated is None else result.with_applied(migrated)
        return result.with_applied(apply(result, confirm, cancel))
    except CancelledError:
        raise
    except SpecDeckError as exc:
        setup = result.setup
        path = getattr(setup, "swap_config", None) or getattr(setup, "config", None)
        return result.with_applied(Applied(
            path, shlex.join(result.decision.flags or ()), refused=str(exc),
            why=f"Not written: {exc}"))


def saved_result(path: str | Path, *, python: str | None = None,
                 api_key_env: str | None = None, admin_key_env: str | None = None
                 ) -> TuneResult:
    """A saved tune (its tune.json, or the --report folder holding one) as a result to apply
    now: the setup read again from its files, with the fingerprint they had when the tune
    read them, so that :func:`apply` refuses a config changed since (the verified speed-up was
    measured against the file as it was), and the tune's own decision. Only a decision that
    said apply is taken. Nothing in the file is trusted (docs/tune.md, "What --apply-saved
    trusts"): the winner is rebuilt and checked against the user's binary, the binary is the
    one the config names, and a TabbyAPI's Python and keys are the command line's
    (``python``, ``api_key_env``, ``admin_key_env``), never the file's."""
    import json

    from specdeck.core.errors import InvalidInputError
    from specdeck.core.files import read_text_bounded
    from specdeck.core.printable import printable
    from specdeck.core.tune.request import (
        MAX_NEW_TOKENS,
        MAX_NEW_TOKENS_RANGE,
        PROMPTS_PER_SUITE,
        PROMPTS_PER_SUITE_RANGE,
    )
    from specdeck.core.tune.run import Decided, TuneOptions
    from specdeck.core.userpath import expand_user

    where = expand_user(path)
    file = where / "tune.json" if where.is_dir() else where
    hint = "Give the tune.json of a tune's --report folder, or the file its --json wrote."
    text = read_text_bounded(file, "saved tune", hint=hint)
    try:
        data = json.loads(text)
        setup, decision = data["setup"], data["decision"]
        kind = setup["kind"]
        saved_options = data.get("options") or {}
        options = TuneOptions(
            suites=_saved_suites(saved_options.get("suites")),
            prompts_per_suite=_whole_number(saved_options.get("prompts_per_suite"),
                                            PROMPTS_PER_SUITE, *PROMPTS_PER_SUITE_RANGE),
            max_new_tokens=_whole_number(saved_options.get("max_new_tokens"), MAX_NEW_TOKENS,
                                         *MAX_NEW_TOKENS_RANGE))
        flags = decision.get("flags")
        wanted = bool(decision.get("apply"))
        said = printable(decision.get("why") or "")[:500]
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise InvalidInputError(f"{file} is not a tune SpecDeck saved "
                                f"({printable(exc)[:200]}).", hint) from None
    if not wanted or not isinstance(flags, list) or not flags \
            or not all(isinstance(f, str) for f in flags):
        raise SpecDeckError(f"The tune saved in {file} verified no winner to apply.",
                            said or "Tune again.")
    now = _setup_now(setup, kind, python, api_key_env, admin_key_env)
    why = f"Verified by the tune saved in {file}: {said}"
    return TuneResult(now, options, (), (), None, None,
                      Decided(None, _saved_winner(now, flags), True, why))


def _whole_number(value, default: int, low: int, high: int) -> int:
    """A saved option's whole number, within what the command line takes."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{value!r} is not a whole number from {low} to {high}")
    return value


def _saved_suites(value) -> tuple[str, ...]:
    """A saved tune's prompt suites: built-in names or prompt files (checked when read)."""
    from specdeck.core.tune.run import TuneOptions

    if value is None:
        return TuneOptions().suites
    if not isinstance(value, list) or not value or len(value) > 64 \
            or not all(isinstance(v, str) and v for v in value):
        raise ValueError("its suites are not a list of names")
    return tuple(value)


def _saved_winner(setup, flags: list[str]) -> tuple[str, ...]:
    """A saved winner's flags, never trusted: for a llama-swap model rebuilt by the tune's
    own table against the binary its config.yaml names (core.tune.arguments); TabbyAPI's
    ``key=value`` draft settings checked by its config schema, a draft model by name in
    its draft folder."""
    if setup.kind == TABBYAPI:
        from specdeck.core.tune.tabby import checked_saved_settings

        return checked_saved_settings(setup, flags)
    from specdeck.core.llama_flags import DRAFT_MODEL
    from specdeck.core.servers.llama_server import binary_help
    from specdeck.core.tune.arguments import tuned_from_flags
    from specdeck.core.tune.setup import placement_flags

    # Where the draft runs is the user's own cmd's business, now: the saved file's placement
    # flags are dropped, the config's current ones kept (as the tune that saved it did).
    rebuilt = tuned_from_flags(placement_flags(tuple(flags), keep=False),
                               binary_help(setup.binary))
    if any(f in DRAFT_MODEL for f in rebuilt):
        rebuilt += setup.draft_placement
    return rebuilt


def _setup_now(saved: dict, kind: str, python: str | None = None,
               api_key_env: str | None = None, admin_key_env: str | None = None):
    """The setup a saved tune names, read again from its files, keeping the fingerprint its
    config had when the tune read it."""
    from specdeck.core.errors import InvalidInputError
    from specdeck.core.printable import printable

    if not isinstance(saved, dict):
        raise InvalidInputError("The saved tune names no setup.", "Tune again.")
    texts = {k: v for k, v in saved.items() if isinstance(v, str)}
    if kind == TABBYAPI:
        from specdeck.core.tune.tabby import read_saved_tabby

        return read_saved_tabby(texts, python, api_key_env, admin_key_env)
    if kind == SWAP:
        from specdeck.core.tune.setup import from_swap

        if "swap_config" not in texts or "swap_model" not in texts:
            raise InvalidInputError("The saved tune names no llama-swap config and model.",
                                    "Tune it again.")
        # The binary is the one config.yaml names, never the one the saved file does.
        now = from_swap(texts["swap_config"], texts["swap_model"])
        return replace(now, swap_fingerprint=texts.get("swap_fingerprint"))
    if kind in (GGUF, DEMO):
        raise InvalidInputError("A tune of a llama-server binary and a GGUF wrote no file, "
                                "and --apply-saved has none to write: its report shows the "
                                "flags to copy.", "Add them to your command yourself, or "
                                "tune a llama-swap model (--swap-config) to have them written.")
    raise InvalidInputError(f"A saved tune of a {printable(kind)[:40]!r} setup cannot be "
                            "applied.", "Tune it again.")


def refuse_if_changed(path: Path, now: str | None, when_read: str | None) -> None:
    """A ConfigConflictError when the file on disk is not the one the tune read."""
    from specdeck.core.config.store import ConfigConflictError

    if now != when_read:
        raise ConfigConflictError(
            f"{path} changed on disk since SpecDeck's tune read it; nothing was written.",
            "Tune again, so that the result is measured against the file as it is now.")


def write_and_prove(path: Path, flags: str, change, confirm: Confirm | None,
                    prove: Callable[[], str | None], proved: str, noop: str,
                    unchanged: Callable[[], None] = lambda: None) -> Applied:
    """Show ``change``'s diff (``confirm``), save it (atomic, a .bak), then ``prove`` the
    server runs as the file now says (None: it did; else why not) and put the file back byte
    for byte when it does not. A file that already says it is ``noop``; otherwise
    ``unchanged`` raises when the file is not the one the tune read (refuse_if_changed).
    Every apply goes through here. The diff is shown and kept as ``change.diff()`` gives
    it: every secret of the file masked at the source (core.urls.shown_text), a changed
    line's and a neighbouring model's alike."""
    from specdeck.core.config.store import save

    diff = change.diff()
    if change.is_noop:  # already written (by an earlier apply of this result, say)
        return Applied(path, flags, diff, why=noop)
    unchanged()
    asker = confirm if confirm is None or isinstance(confirm, Asker) else Asker(confirm)
    if asker is not None and not asker.ask(diff):
        return Applied(path, flags, diff, why=asker.declined())
    from specdeck.core.config.document import fingerprint, read_config_bytes

    original = read_config_bytes(path, change.document.what)
    saved = save(change)
    applied = Applied(path, flags, diff, written=saved.written, backup=saved.backup,
                      kind=saved.kind,
                      written_fingerprint=_fingerprint(path),
                      backup_fingerprint=fingerprint(original))
    check = prove()
    if check is None:
        return replace(applied, relaunch=proved)
    if _fingerprint(path) != applied.written_fingerprint:
        # Edited while the server was proved (by the user, or another program): a roll back
        # would throw that edit away.
        return replace(applied, relaunch=check, why=(
            f"Not rolled back: {check} But {path} changed since SpecDeck wrote it, and an "
            "edit made meanwhile is not SpecDeck's to undo: the winner's flags are still "
            f"in it. The version before tuning is in {saved.backup}."))
    _restore(path, original)
    return replace(applied, relaunch=check, rolled_back=True, why=f"Rolled back: {check}")


def relaunch(result: TuneResult, cancel: threading.Event | None = None,
             started: list[int] | None = None) -> str | None:
    """Start llama-server from the llama-swap model's cmd as the file now says, send it one
    held-out prompt; None when it answered and drafted, else what went wrong. ``started``
    gets the llama-servers it started (:func:`run_written`)."""
    from specdeck.core.bench.plan import Arm
    from specdeck.core.servers.arms import ServerArm
    from specdeck.core.servers.llama_server import (
        LaunchProfile,
        binary_help,
        drafter_from_flags,
    )
    from specdeck.core.tune.setup import from_swap

    setup = result.setup
    try:
        written = from_swap(setup.swap_config, setup.swap_model, binary=setup.binary)
        profile = LaunchProfile(written.binary, str(written.target), written.flags)
        answer = run_written(result, str(written.target),
                             Arm("written", drafter_from_flags(written.flags,
                                                               binary_help(written.binary)),
                                 ServerArm(launch=profile)), cancel, started)
    except SpecDeckError as exc:
        return f"llama-server did not run from the saved file: {exc}"
    stats = answer.stats
    if not stats.new_tokens:
        return "llama-server started from the saved file answered with no tokens."
    if not stats.drafted:
        return ("llama-server started from the saved file answered but drafted nothing "
                "(its drafting flags did not take effect).")
    return None


def run_written(result: TuneResult, model: str, written, cancel,
                started: list[int] | None = None):
    """One held-out prompt on the server as the saved file says (arm ``written``), on that
    server alone: the only one the proof starts. A no-draft server beside it would prove
    nothing of the file, cost one more load of the target (10-60 s for a large model), and
    on a GPU that holds one copy of the target it might not fit beside the written one,
    whose failure to start would then roll back a verified winner. ``started`` gets the
    servers started (the tune reports them, ``Applied.servers_started``). Its
    GenerationResult; a SpecDeckError when the server did not start or answer."""
    from specdeck.core.bench.plan import BenchPlan
    from specdeck.core.bench.runner import choose_prompts
    from specdeck.core.engines import SERVER_ENGINE
    from specdeck.core.engines.base import GenerationRequest
    from specdeck.core.servers.engine import ServerEngine
    from specdeck.core.tune.run import split_prompts

    _, held_out = split_prompts(result.options)
    prompt = choose_prompts(BenchPlan(engine=SERVER_ENGINE, suites=result.options.suites,
                                      prompt_ids=held_out[:1]))[0]
    engine = ServerEngine(exclusive=True)
    try:
        engine.prepare_arms((written,), model, cancel=cancel, reference=False)
        engine.activate_arm(written, None, cancel)
        return engine.generate(GenerationRequest(
            prompt=prompt.text, max_new_tokens=result.options.max_new_tokens,
            stop_on_eos=False, apply_chat_template=True), None, cancel)
    finally:
        if started is not None:
            started.append(engine.starts)
        engine.unload()


def _restore(path: Path, original: bytes) -> None:
    from specdeck.core.atomic import atomic_write_bytes

    atomic_write_bytes(path, original)


def roll_back(applied: Applied) -> Applied:
    """Put the file ``applied`` wrote back as it was before (its backup's bytes, atomically);
    refused when the file changed since SpecDeck wrote it (someone's later edit is theirs)."""
    from specdeck.core.config.store import ConfigConflictError

    path, backup = applied.path, applied.backup
    if not applied.written or applied.rolled_back or path is None or backup is None \
            or applied.written_fingerprint is None:
        raise SpecDeckError("There is nothing to roll back: SpecDeck has not written a file "
                            "(or already put it back).")
    if _fingerprint(path) != applied.written_fingerprint:
        raise ConfigConflictError(f"{path} changed since SpecDeck wrote it; nothing was rolled "
                                  "back.", f"Compare it with {backup} and edit it by hand.")
    original = _backup_bytes(backup, applied.backup_fingerprint, path)
    _restore(path, original)
    return replace(applied, rolled_back=True,
                   why=f"Rolled back: {path} is as it was before tuning (from {backup.name}).")


def _backup_bytes(backup: Path, expected: str | None, path: Path) -> bytes:
    """The bytes SpecDeck kept in ``backup``: read as the regular file it wrote (a link put
    there since is not followed, a FIFO not waited on) and only if they are the bytes it
    kept (``expected``, their sha256). Else a SpecDeckError, nothing rolled back."""
    from specdeck.core.config.document import fingerprint
    from specdeck.core.files import read_bounded

    hint = f"Restore {path} by hand."
    try:
        data = read_bounded(backup, "backup", follow_symlinks=False, hint=hint)
    except SpecDeckError as exc:
        raise SpecDeckError(f"{exc.what} Nothing was rolled back.", exc.fix) from None
    if expected is None or fingerprint(data) != expected:
        raise SpecDeckError(f"{backup} is not the backup SpecDeck made when it wrote {path} "
                            "(it changed since); nothing was rolled back.", hint)
    return data


def _fingerprint(path: Path) -> str | None:
    """The sha256 of ``path`` now; None when it is no config file any more (a FIFO put
    there while the server was proved is not waited on, a huge file not read whole)."""
    from specdeck.core.config.document import fingerprint, read_config_bytes

    try:
        return fingerprint(read_config_bytes(path))
    except (OSError, SpecDeckError):
        return None
