"""`specdeck tune`: make your own llama-server faster, unattended (core.tune).

    specdeck tune --swap-config ~/llama-swap/config.yaml --model qwen-coder-32b --budget 10m
    specdeck tune --llama-server ./llama-server --gguf model.gguf -- -ngl 99 -c 8192
    specdeck tune --demo --llama-server ./llama-server --budget 5m --yes
    specdeck tune --tabby-folder ~/tabbyAPI --budget 20m
    specdeck tune --tabby http://127.0.0.1:5000 --tabby-config ~/tabbyAPI/config.yml
    specdeck tune --gguf model.gguf --llama-server ./llama-server --download-budget 0

Drafts from the Hub (same family, tokenizer checked from the GGUF header before any download)
are downloaded within --download-budget (default 2 GiB; 0: local drafts only), asking first
unless --yes; --budget counts from the end of the downloads.

Exit 0 when a verified winner was written (or is shown to copy), 1 when nothing was written
(nothing beat no drafting or the current setting, the output changed, --dry-run, the write
declined or rolled back), 2 on an error, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

from specdeck.core.cli import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_NEGATIVE, EXIT_OK
from specdeck.core.cli.numbers import finite, whole
from specdeck.core.cli.paths import output_file, output_folder
from specdeck.core.errors import InvalidInputError, NotFoundError
from specdeck.core.servers.key_names import add_api_key_option, add_tabby_options
from specdeck.core.tune.confirm import NOT_CONFIRMED, Asker
from specdeck.core.tune.hub import DEFAULT_DOWNLOAD_BUDGET
from specdeck.core.units import GiB, format_bytes

DEFAULT_DOWNLOAD_GIB = DEFAULT_DOWNLOAD_BUDGET / GiB


def duration(text: str) -> float:
    """--budget: core.tune.request.parse_duration, in argparse's terms."""
    from specdeck.core.tune.request import parse_duration

    try:
        return parse_duration(text)
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(exc.what) from None


def register(subparsers) -> None:
    from specdeck.core.tune import request

    p = subparsers.add_parser(
        "tune", help="make your llama-server, llama-swap model or TabbyAPI draft faster: "
        "search, verify, apply", description=(
            "Find the fastest drafting setting for the llama-server you run: every drafting "
            "method its --help lists, the draft GGUFs beside your model and drafts of its "
            "family from the Hub (within --download-budget, asking first), each setting "
            "searched on tuning prompts within the time budget, the winner verified on other "
            "prompts against your current setting and no drafting (output unchanged), then "
            "written into your llama-swap config.yaml or TabbyAPI config.yml with a diff and "
            "a backup and proven by starting the server from the written file (for a binary "
            "and GGUF, or the demo: the flags to copy). Exit 0: a verified winner written or "
            "shown; 1: nothing written; 2: an error; 130: interrupted."))
    source = p.add_argument_group("what to tune (one of)")
    source.add_argument("--swap-config", metavar="FILE", help="llama-swap's config.yaml")
    source.add_argument("--model", metavar="NAME", help="the llama-swap model to tune")
    source.add_argument("--gguf", metavar="FILE", help="the target GGUF (with --llama-server)")
    source.add_argument("--demo", action="store_true",
                        help="the embedded demo model (SmolLM2-135M), on the CPU")
    source.add_argument("--tabby-folder", metavar="DIR",
                        help="a TabbyAPI install SpecDeck starts once per setting (draft "
                        "models; on TabbyAPI main also draft modes and draft_num_tokens); its "
                        "config.yml names the model")
    source.add_argument("--tabby", metavar="URL",
                        help="a running TabbyAPI, reloaded per setting through its admin API "
                        "(draft models only: its draft mode and k are read at its start); "
                        "with --tabby-config")
    source.add_argument("--apply-saved", metavar="REPORT",
                        help="write the verified winner of an earlier tune (its --report "
                        "folder or tune.json) without tuning again: refused when the config "
                        "changed since that tune read it; asks first unless --yes")
    p.add_argument("--tabby-config", metavar="FILE",
                   help="the running TabbyAPI's config.yml (with --tabby)")
    add_api_key_option(p)
    add_tabby_options(p)
    p.add_argument("--llama-server", metavar="BINARY",
                   help="the llama-server binary (needed with --gguf; default: the llama-swap "
                   "cmd's, or for --demo the one on PATH)")
    p.add_argument("--budget", type=duration, default=request.DEFAULT_BUDGET_S, metavar="TIME",
                   help="wall clock for the search and the verification, counted after the "
                   f"downloads, which get at most as long again (default {request.BUDGET})")
    p.add_argument("--download-budget", type=finite(*request.DOWNLOAD_GIB_RANGE), metavar="GB",
                   default=DEFAULT_DOWNLOAD_GIB,
                   help="GiB of draft models to download from the Hub at most, best predicted "
                   f"first (default {DEFAULT_DOWNLOAD_GIB:g}; 0: local drafts only, the Hub is "
                   "not asked)")
    p.add_argument("--download-dir", type=output_folder, metavar="DIR",
                   help="where downloaded drafts go (default: the draft folder of the "
                   "config.yml SpecDeck has open, else SpecDeck's own models folder)")
    p.add_argument("--endpoint", metavar="URL",
                   help="the Hub to search (default: HF_ENDPOINT, SpecDeck's setting, "
                   "huggingface.co)")
    p.add_argument("--prompts", metavar="FILE", action="append", default=[],
                   help="your own prompts (JSON Lines with a \"prompt\" field, or a suite file; "
                   "repeatable; default: the shipped grounded, code and structured suites)")
    p.add_argument("--per-suite", type=whole(*request.PROMPTS_PER_SUITE_RANGE),
                   default=request.PROMPTS_PER_SUITE, metavar="N",
                   help="prompts per suite, half to tune and half to verify (default "
                   f"{request.PROMPTS_PER_SUITE})")
    p.add_argument("--max-new", type=whole(*request.MAX_NEW_TOKENS_RANGE),
                   default=request.MAX_NEW_TOKENS, metavar="N",
                   help=f"tokens generated per run (default {request.MAX_NEW_TOKENS})")
    p.add_argument("--draft-dir", metavar="DIR", action="append", default=[],
                   help="also look for draft GGUFs here (besides the target's folder)")
    p.add_argument("--gpu", action="store_true",
                   help="predict as for a GPU (default: where the server holds the model, "
                   "from llama-server --list-devices and -ngl; TabbyAPI: a GPU)")
    p.add_argument("--yes", "-y", action="store_true",
                   help="no questions: download within the budget and write the winner")
    p.add_argument("--dry-run", action="store_true", help="decide, show the diff, write nothing")
    p.add_argument("--no-replay", action="store_true",
                   help="search every candidate's k instead of predicting every setting from "
                        "one plain run and measuring the best predicted (llama-server)")
    p.add_argument("--json", type=output_file, metavar="FILE",
                   help="write the result as JSON (- = stdout)")
    p.add_argument("--report", type=output_folder, metavar="DIR",
                   help="write tune.md, tune.json, runs/")
    p.add_argument("server_args", nargs=argparse.REMAINDER,
                   help="after --: llama-server flags (with --gguf or --demo)")
    p.set_defaults(handler=cmd_tune)


def _setups_given(args) -> list[str]:
    """The flags naming a setup to tune that the command line gives."""
    return [flag for flag, value in (("--swap-config", args.swap_config), ("--gguf", args.gguf),
                                     ("--demo", args.demo), ("--tabby-folder", args.tabby_folder),
                                     ("--tabby", args.tabby)) if value]


def _setup(args):
    from specdeck.core.tune import request, setup

    flags = tuple(a for a in args.server_args if a != "--") if args.server_args else ()
    given = _setups_given(args)
    choices = ("--swap-config FILE --model NAME, or --llama-server BIN --gguf FILE, or --demo, "
               "or --tabby-folder DIR, or --tabby URL --tabby-config FILE")
    if not given:
        raise InvalidInputError(f"Say what to tune: {choices}.")
    if len(given) > 1:
        raise InvalidInputError(f"Give one setup to tune, not {' and '.join(given)}.",
                                f"One tune tunes one server: {choices}.")
    kind = (request.TABBY_FOLDER if args.tabby_folder else request.TABBY if args.tabby
            else request.SWAP if args.swap_config else request.GGUF if args.gguf
            else request.DEMO)
    asked = request.TuneRequest(
        kind, args.llama_server or "", args.swap_config or "", args.model or "",
        args.gguf or "", flags, args.tabby_folder or "", args.tabby_python or "",
        args.tabby or "", args.tabby_config or "", args.api_key_env or "",
        args.admin_key_env or "")
    try:
        return request.read_setup(asked)
    except NotFoundError as exc:
        if kind != request.DEMO:
            raise
        if exc.fix != setup.LLAMA_SERVER_HINT:
            raise
        raise NotFoundError(exc.what, "Give your llama-server binary with --llama-server.") \
            from None


def cmd_tune(args) -> int:
    from specdeck.core.cli.bench_cmd import ProgressPrinter
    from specdeck.core.cli.interrupt import cancel_on_interrupt
    from specdeck.core.tune import apply as tune_apply
    from specdeck.core.tune.run import TuneOptions, split_prompts, tune

    if args.apply_saved:
        return _apply_saved(args)
    options = TuneOptions(budget_s=args.budget,
                          suites=tuple(args.prompts) or TuneOptions().suites,
                          prompts_per_suite=args.per_suite, max_new_tokens=args.max_new,
                          draft_dirs=tuple(Path(d) for d in args.draft_dir),
                          device="gpu" if args.gpu else None,
                          download_budget=int(args.download_budget * GiB),
                          download_dir=args.download_dir, hub_endpoint=args.endpoint,
                          replay=not args.no_replay)
    split_prompts(options)  # the prompt files are read before the setup, not after a search
    chosen = _setup(args)
    cancel = threading.Event()
    err = sys.stderr
    progress = ProgressPrinter(err)
    err.write(f"specdeck: tuning {chosen.where} within {args.budget / 60:g} min\n")
    with cancel_on_interrupt(cancel):
        try:
            result = tune(chosen, options, on_event=_printer(progress, err), cancel=cancel,
                          confirm_download=None if args.yes else _ask_download)
        finally:
            progress.close()
        confirm = _dry_run if args.dry_run else None if args.yes else _ask
        if result.decision.apply:
            result = tune_apply.apply_keeping(result, confirm, cancel)
        elif not result.cancelled:  # the current setting was measured as migrated: write that
            result = tune_apply.apply_keeping(result, confirm, cancel, migration_only=True)
    return _finish(args, result)


def _finish(args, result) -> int:
    """Save and show ``result`` as asked; the exit code for it."""
    from specdeck.core.cli.output import write_json
    from specdeck.core.errors import SpecDeckError
    from specdeck.core.tune import report

    err = sys.stderr
    failed: list[str] = []  # each output is written whatever became of the others
    if args.report is not None:
        try:
            err.write(f"specdeck: report saved in {report.write(result, args.report)}\n")
        except SpecDeckError as exc:
            failed.append(str(exc))
    if args.json:
        try:
            write_json(args.json, report.to_json(result))
        except SpecDeckError as exc:
            failed.append(str(exc))
    (err if args.json == "-" else sys.stdout).write(report.markdown(result))
    applied = result.applied
    if applied is not None and applied.refused:
        failed.append(f"not written: {applied.refused}")
    for problem in failed:
        err.write(f"specdeck: {problem}\n")
    if result.cancelled:
        return EXIT_INTERRUPTED
    if failed:
        return EXIT_ERROR
    good = applied is not None and not applied.rolled_back and (applied.written or
                                                                  applied.path is None)
    return EXIT_OK if good else EXIT_NEGATIVE


def _apply_saved(args) -> int:
    """``--apply-saved``: an earlier tune's verified winner, written now (core.tune.apply)."""
    from specdeck.core.cli.interrupt import cancel_on_interrupt
    from specdeck.core.tune import apply as tune_apply

    others = _setups_given(args)
    if others:
        raise InvalidInputError(f"--apply-saved takes the setup from the saved tune; give no "
                                f"{' or '.join(others)}.")
    result = tune_apply.saved_result(args.apply_saved, python=args.tabby_python,
                                     api_key_env=args.api_key_env,
                                     admin_key_env=args.admin_key_env)
    sys.stderr.write(f"specdeck: {result.decision.why}\n")
    cancel = threading.Event()
    confirm = _dry_run if args.dry_run else None if args.yes else _ask
    with cancel_on_interrupt(cancel):
        result = tune_apply.apply_keeping(result, confirm, cancel)
    applied = result.applied
    if not applied.refused:  # _finish says why it was refused
        sys.stderr.write(f"specdeck: {applied.relaunch or applied.why}\n")
    return _finish(args, result)


def _printer(progress, err):
    from specdeck.core.tune.downloads import Downloaded, Downloading
    from specdeck.core.tune.run import CandidatesFound, Decided, Forecasted, Phase

    shown: dict[str, int] = {}

    def on_event(event) -> None:
        if isinstance(event, Phase):
            err.write(f"specdeck: [{event.name}] {event.text}\n")
        elif isinstance(event, CandidatesFound):
            for candidate, prediction in event.candidates:
                size = (f", download {format_bytes(candidate.download_bytes)} from "
                        f"{candidate.hub.repo_id}" if candidate.download_bytes else "")
                err.write(f"  {candidate.label}: predicted {prediction.speedup:.2f}x "
                          f"({prediction.low:.2f}-{prediction.high:.2f}, {prediction.source})"
                          f"{size}\n")
                if candidate.hub is not None:
                    err.write("".join(f"    {note}\n" for note in candidate.notes))
            for skipped in event.not_tried:
                err.write(f"  not tried: {skipped.what}: {skipped.why}\n")
        elif isinstance(event, Forecasted):
            forecast = event.forecast
            err.write(f"specdeck: {len(forecast.settings)} settings predicted from one plain "
                      f"run; measuring {', '.join(event.finalists) or 'none'}\n")
            for item in forecast.settings[:5]:
                p = item.predicted
                err.write(f"  {item.candidate}: {item.label}: predicted {p.speedup:.2f}x "
                          f"({p.low:.2f}-{p.high:.2f}), mean accepted length "
                          f"{p.mean_accepted_length:.2f}\n")
        elif isinstance(event, Decided):
            err.write(f"specdeck: {event.why}\n")
        elif isinstance(event, Downloading):
            tenth = 10 * event.done // max(event.total, 1)
            if shown.get(event.candidate) != tenth:  # one line per tenth, not per chunk
                shown[event.candidate] = tenth
                err.write(f"  {event.file}: {format_bytes(event.done)} of "
                          f"{format_bytes(event.total)}\n")
        elif isinstance(event, Downloaded):
            took = f" in {event.seconds:.1f} s" if event.ok else ""
            err.write(f"specdeck: {event.candidate} ({event.repo_id}): {event.status}{took}"
                      f"{': ' + event.why if event.why else ''}\n")
        else:
            progress(event)

    return on_event


def _show_only(diff: str) -> bool:
    sys.stderr.write(diff + "specdeck: --dry-run: nothing was written.\n")
    return False


_dry_run = Asker(_show_only, lambda: "--dry-run: nothing was written.")


def _ask_download(candidates, total: int, folder: Path) -> bool:
    """Downloads are asked on a terminal; with none, nothing is downloaded (say how to allow
    it)."""
    err = sys.stderr
    for candidate in candidates:
        err.write(f"  {candidate.hub.repo_id}: {Path(candidate.hub.file).name} "
                  f"({format_bytes(candidate.download_bytes)})\n")
    if not sys.stdin.isatty():
        err.write("specdeck: not downloaded: no terminal to confirm on; re-run with --yes to "
                  "download drafts within --download-budget, or --download-budget 0 to tune "
                  "with local drafts only.\n")
        return False
    err.write(f"Download {format_bytes(total)} into {folder}? [y/N] ")
    err.flush()
    return input().strip().lower() in ("y", "yes")


def _ask_terminal(diff: str) -> bool:
    sys.stderr.write(diff)
    if not sys.stdin.isatty():
        sys.stderr.write("specdeck: not written: no terminal to confirm on; re-run with --yes "
                         "to write the verified winner.\n")
        return False
    sys.stderr.write("Write this change? [y/N] ")
    sys.stderr.flush()
    return input().strip().lower() in ("y", "yes")


_ask = Asker(_ask_terminal, lambda: (
    NOT_CONFIRMED if sys.stdin.isatty() else
    "Not written: no terminal to confirm on (--yes writes it, or tune --apply-saved with "
    "this report later)."))
