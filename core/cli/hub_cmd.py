"""`specdeck models`, `specdeck search`, `specdeck variants`, `specdeck install`: the local
library and EXL2, EXL3 and GGUF models from the Hugging Face Hub, headless."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from specdeck.core.cli import EXIT_INTERRUPTED, EXIT_OK
from specdeck.core.cli.interrupt import cancel_on_interrupt
from specdeck.core.cli.numbers import whole
from specdeck.core.cli.output import emit_json, print_table
from specdeck.core.errors import CancelledError, InvalidInputError

ENDPOINT_HELP = "Hub endpoint (default: HF_ENDPOINT, SpecDeck's setting, or https://huggingface.co)"


def register(subparsers) -> None:
    from specdeck.core.hub.search import ALL_FORMATS, FORMATS

    models = subparsers.add_parser("models", help="list the local model library")
    # --models-dir, as suggest and bench spell it; --dir, as this command first did.
    models.add_argument("--models-dir", "--dir", dest="dir", action="append", default=[],
                        metavar="DIR", help="also scan this folder (repeatable)")
    models.add_argument("--config", metavar="CONFIG_YML",
                        help="TabbyAPI config.yml whose model folders to scan (default: the "
                        "one SpecDeck last opened)")
    models.add_argument("--json", action="store_true", help="print JSON")
    models.set_defaults(handler=run_models)

    search = subparsers.add_parser("search", help="find EXL2, EXL3 and GGUF models on the Hugging Face Hub")
    search.add_argument("text", nargs="*", help="words that must all appear in the repository id")
    search.add_argument("--author", help="only repositories of this user or organization")
    search.add_argument("--family", help="model family, e.g. llama, qwen2, mistral")
    search.add_argument("--format", choices=(*FORMATS, ALL_FORMATS), default=ALL_FORMATS,
                        help="only this format (default all): exl2 runs on TabbyAPI exl2-checkpoint, "
                        "exl3 on TabbyAPI main, gguf on llama.cpp servers")
    search.add_argument("--limit", type=whole(1, 1000), default=30, help="at most this many results (default 30)")
    search.add_argument("--endpoint", help=ENDPOINT_HELP)
    search.add_argument("--json", action="store_true", help="print JSON")
    search.set_defaults(handler=run_search)

    variants = subparsers.add_parser("variants", help="list the variants of a repo: EXL2/EXL3 branches, GGUF files")
    variants.add_argument("repo", metavar="REPO", help="owner/name or a huggingface.co URL")
    variants.add_argument("--endpoint", help=ENDPOINT_HELP)
    variants.add_argument("--json", action="store_true", help="print JSON")
    variants.set_defaults(handler=run_variants)

    install = subparsers.add_parser(
        "install",
        help="download and verify a draft (an EXL2/EXL3 branch, or a GGUF file with --gguf) "
        "into the draft model folder",
        description="Download REPO at BRANCH into DEST/<repo name>-<bpw>bpw, verifying every file's "
        "checksum. An interrupted install resumes when run again; Ctrl-C cancels cleanly.",
    )
    install.add_argument("repo", metavar="REPO[@BRANCH]", help="e.g. owner/Model-exl2@4.0bpw")
    install.add_argument("--dest", metavar="DIR",
                         help="folder to install into (default: draft_model_dir of config.yml)")
    install.add_argument("--config", metavar="CONFIG_YML",
                         help="take the default --dest from this config.yml (default: the open one)")
    install.add_argument("--name", help="folder name (default: <repo name>-<bpw>bpw, or "
                         "<repo name>-<quant> for a GGUF)")
    install.add_argument("--gguf", metavar="QUANT|FILE",
                         help="a GGUF repository: the quantization (Q8_0, Q4_K_M, ...) or file "
                         "to install (all its shards); `specdeck variants REPO` lists them")
    install.add_argument("--endpoint", help=ENDPOINT_HELP)
    install.add_argument("--token-stdin", action="store_true",
                         help="read a Hugging Face token from standard input (never from the command line)")
    install.add_argument("--dry-run", action="store_true", help="show what would be installed, download nothing")
    install.add_argument("--json", action="store_true", help="print the result as JSON")
    install.set_defaults(handler=run_install)


def _token(args: argparse.Namespace) -> str | None:
    if not getattr(args, "token_stdin", False):
        return None
    value = sys.stdin.readline().strip()
    if not value:
        raise InvalidInputError("--token-stdin was given but standard input held no token.")
    return value


# models -------------------------------------------------------------------------------
def run_models(args: argparse.Namespace) -> int:
    from specdeck.core.hub import find_partial_installs, format_bytes, model_dirs, scan_library

    dirs = model_dirs(args.config, tuple(args.dir))
    if not dirs:
        raise InvalidInputError(
            "No model folders to scan: no --models-dir was given, and SpecDeck knows no "
            "TabbyAPI config.yml (none given with --config, none opened before).",
            "Pass --models-dir FOLDER (repeatable) or --config path/to/config.yml.",
        )
    entries, problems = scan_library(dirs)
    partials = [p for d in dirs for p in find_partial_installs(d)]
    if args.json:
        emit_json({
            "folders": [str(d) for d in dirs],
            "models": [e.to_json() for e in entries],
            "problems": [{"path": str(p.path), "reason": p.reason} for p in problems],
            "unfinished_installs": [
                {"spec": p.spec, "folder_name": p.folder_name, "bytes_done": p.bytes_done,
                 "bytes_total": p.bytes_total} for p in partials
            ],
        })
        return EXIT_OK
    from specdeck.core.hub.search import SERVER_OF

    rows = []
    for e in entries:
        m = e.model
        rows.append([
            m.name, m.arch.model_type, m.parameters_label, format_bytes(m.files_bytes), m.quant.label,
            SERVER_OF.get(m.quant.method, "?"), str(m.context_length), str(m.arch.vocab_size),
            e.source.spec if e.source else "",
        ])
    if rows:
        print_table(rows, ["name", "arch", "params", "size", "quantization", "runs on", "context", "vocab",
                           "from"])
    else:
        print(f"No models in {', '.join(str(d) for d in dirs)}.")
    for p in problems:
        print(f"! {p.path}: {p.reason}", file=sys.stderr)
    for p in partials:
        print(f"Unfinished install: {p.spec} ({p.fraction:.0%}); run `specdeck install {p.spec}` to resume.")
    return EXIT_OK


# search / variants --------------------------------------------------------------------
def run_search(args: argparse.Namespace) -> int:
    from specdeck.core.hub import search_repos
    from specdeck.core.hub.search import FORMAT_LABELS, check_formats

    formats = check_formats(args.format)
    hits = search_repos(" ".join(args.text), author=args.author, family=args.family,
                        limit=args.limit, formats=formats, endpoint=args.endpoint)
    if args.json:
        emit_json(hits)
        return EXIT_OK
    if not hits:
        print(f"No {'/'.join(FORMAT_LABELS[f] for f in formats)} repositories found.")
        return EXIT_OK
    rows = [[h.repo_id, h.format_label, str(h.downloads), str(h.likes), "gated" if h.gated else ""]
            for h in hits]
    print_table(rows, ["repository", "format", "downloads", "likes", ""])
    return EXIT_OK


def run_variants(args: argparse.Namespace) -> int:
    from specdeck.core.hub import format_bytes, list_variants
    from specdeck.core.hub.gguf import list_gguf
    from specdeck.core.jsonout import to_jsonable

    found = list_variants(args.repo, endpoint=args.endpoint)
    ggufs = list_gguf(args.repo, endpoint=args.endpoint)
    if args.json:
        emit_json({**to_jsonable(found), "gguf": [
            {"name": c.name, "quant": c.quant, "size": c.size, "files": [f.path for f in c.files],
             "main_file": c.main_file, "projector": c.is_projector} for c in ggufs]})
        return EXIT_OK
    if ggufs:
        rows = [[c.quant or "?", c.name, format_bytes(c.size), str(len(c.files)),
                 "multimodal projector" if c.is_projector else ""] for c in ggufs]
        print_table(rows, ["quant", "file", "download", "files", "notes"])
        print(f"Install one: specdeck install {found.repo_id} --gguf QUANT --dest DIR")
        if not found.variants:
            return EXIT_OK
    if found.variants:
        rows = [[v.revision, v.format_label, v.label, format_bytes(v.total_bytes),
                 format_bytes(v.weights_vram_bytes) if v.weights_vram_bytes else "?",
                 str(v.file_count), v.folder_name, "; ".join(v.notes)] for v in found.variants]
        print_table(rows, ["branch", "format", "bitrate", "download", "VRAM (weights)", "files", "installs as", "notes"])
    else:
        print(f"{found.repo_id} has no branch with an installable model.")
    for branch, why in found.other_branches:
        print(f"({branch}: {why})")
    return EXIT_OK


# install ------------------------------------------------------------------------------
class TerminalProgress:
    """On a terminal, a tqdm bar (bytes, rate, time left, the file; it follows the terminal's
    width); elsewhere (logs, CI) one plain line per file and per phase."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last_file: str | None = None
        self._last_phase: str | None = None
        self._bar = None

    def __call__(self, p) -> None:
        if self.live:
            self._draw(p)
        else:
            self._log(p)

    def _draw(self, p) -> None:
        from specdeck.core.hub.progress import PHASE_LABELS
        from tqdm import tqdm

        if self._bar is None or (p.total and self._bar.total != p.total):
            self.close()
            self._bar = tqdm(total=p.total or None, unit="B", unit_scale=True,
                             unit_divisor=1000, file=self.stream, dynamic_ncols=True,
                             desc=f"{p.repo_id}@{p.revision}", leave=True, mininterval=0.2)
        self._bar.n = p.done
        what = p.file if p.phase == "downloading" and p.file else PHASE_LABELS.get(p.phase, p.phase)
        self._bar.set_postfix_str(what or "", refresh=False)
        self._bar.refresh()

    def _log(self, p) -> None:
        if p.phase == "downloading" and p.file != self._last_file:
            self._last_file = p.file
            self.stream.write(f"{p.describe()}\n")
        elif p.phase != "downloading" and p.phase != self._last_phase:
            self.stream.write(f"{p.describe()}\n")
        self._last_phase = p.phase
        self.stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


@contextmanager
def _cancel_on_ctrl_c():
    """Ctrl-C (or SIGTERM, SIGHUP) sets a cancel event: a clean, resumable stop instead of
    raising mid-write (core.cli.interrupt)."""
    cancel = threading.Event()
    with cancel_on_interrupt(cancel):
        yield cancel


def _destination(args: argparse.Namespace) -> Path:
    from specdeck.core.hub import default_install_dir

    if args.dest:
        return Path(args.dest)
    default = default_install_dir(args.config)
    if default is None:
        raise InvalidInputError(
            "No destination folder: no TabbyAPI config.yml is open to take draft_model_dir from.",
            "Pass --dest FOLDER, or --config path/to/config.yml.",
        )
    return default


def run_install(args: argparse.Namespace) -> int:
    from specdeck.core.hub import format_bytes, install, plan_install

    token = _token(args)
    dest = _destination(args)
    choice = None
    if args.gguf:
        from specdeck.core.hub.gguf import plan_gguf_install

        plan, choice = plan_gguf_install(args.repo, args.gguf, dest, name=args.name,
                                         endpoint=args.endpoint, token=token)
    else:
        plan = plan_install(args.repo, dest=dest, name=args.name, endpoint=args.endpoint,
                            token=token)
    if args.dry_run:
        if args.json:
            emit_json({"repo_id": plan.repo_id, "revision": plan.revision, "commit": plan.commit,
                       "target": str(plan.target), "total_bytes": plan.total_bytes,
                       "files": [f.path for f in plan.files], "skipped": [s.path for s in plan.skipped]})
        else:
            print(f"Would install {plan.spec} (commit {plan.commit[:10]}) into {plan.target}: "
                  f"{len(plan.files)} files, {format_bytes(plan.total_bytes)}.")
            for s in plan.skipped:
                print(f"  leaving out {s.path}: {s.reason}")
        return EXIT_OK
    bar = None if args.json else TerminalProgress()
    started = time.monotonic()
    with _cancel_on_ctrl_c() as cancel:
        try:
            result = install(plan.repo_id, plan.revision, endpoint=args.endpoint, token=token,
                             progress=bar, cancel=cancel, plan=plan)
        except CancelledError as exc:
            if bar:
                bar.close()
            print(f"specdeck: {exc}", file=sys.stderr)
            return EXIT_INTERRUPTED
        finally:
            if bar:
                bar.close()
    if args.json:
        emit_json(result)
        return EXIT_OK
    _print_result(result, time.monotonic() - started)
    if choice is not None:
        main = result.path / choice.files[0].path
        print(f"  To use it as the draft model: -md {main} (llama-server), or "
              f"specdeck swap set-draft --config config.yaml --model NAME --draft {main}")
    return EXIT_OK


def _print_result(result, seconds: float) -> None:
    from specdeck.core.hub import format_bytes

    if result.status == "already installed":
        print(f"{result.repo_id}@{result.revision} is already installed in {result.path}.")
    else:
        resumed = f", {format_bytes(result.resumed_bytes)} resumed" if result.resumed_bytes else ""
        print(f"Installed {result.repo_id}@{result.revision} into {result.path}: {result.files} files, "
              f"{format_bytes(result.total_bytes)}{resumed}, every checksum verified ({seconds:.1f} s).")
    for s in result.skipped:
        print(f"  left out {s.path}: {s.reason}")
    m = result.model
    if m is not None:
        print(f"  {m.arch.model_type} · {m.parameters_label} parameters · {m.quant.label} · "
              f"context {m.context_length} · vocab {m.arch.vocab_size}")
        print(f"  To use it as the draft model: draft_model_dir: {result.path.parent}, "
              f"draft_model_name: {result.path.name}")
