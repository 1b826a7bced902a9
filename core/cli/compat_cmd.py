"""`specdeck check TARGET DRAFT` and `specdeck suggest TARGET`.

check exits 0 when the pair is compatible (with or without warnings), 1 when it is not,
3 when it cannot be decided (a tokenizer file is missing), 2 on an error.
suggest exits 0 when it has suggestions, 1 when it has none.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import TextIO

from specdeck.core.cli import EXIT_NEGATIVE, EXIT_OK
from specdeck.core.cli.numbers import finite, whole
from specdeck.core.cli.output import emit_json

WIDTH = 100
MODEL_HELP = "a model folder, or a Hugging Face Hub id org/name[@revision]"


def register(subparsers: argparse._SubParsersAction) -> None:
    from specdeck.core.vram.weights import BPW_RANGE

    check = subparsers.add_parser(
        "check",
        help="can DRAFT speculate for TARGET? (tokenizer, special tokens, context)",
        description="Check a draft/target pair before loading anything: llama.cpp's tokenizer "
        "rules plus ExLlamaV2's risks. Exit 0 compatible, 1 incompatible, 3 undecided "
        "(a tokenizer file is missing), 2 error.",
    )
    check.add_argument("target", help=f"the big model: {MODEL_HELP}")
    check.add_argument("draft", help=f"the small model: {MODEL_HELP}")
    _add_common(check)
    check.add_argument("--examples", type=whole(0, 10_000), default=12, metavar="N",
                       help="how many differing tokens to list (default 12)")
    check.set_defaults(handler=run_check)

    suggest = subparsers.add_parser(
        "suggest",
        help="rank draft models for TARGET from your model folders and known Hub drafts",
        description="Rank draft candidates: every model in your folders is checked; EXL2 "
        "drafts of the target's tokenizer family on the Hub are listed as unverified unless "
        "--verify fetches their tokenizer files. Exit 0 with suggestions, 1 without.",
    )
    suggest.add_argument("target", help=f"the big model: {MODEL_HELP}")
    _add_common(suggest)
    suggest.add_argument("--models-dir", action="append", default=[], metavar="DIR",
                         help="a folder of models to consider (repeatable)")
    suggest.add_argument("--config", metavar="CONFIG_YML",
                         help="TabbyAPI config.yml whose model folders to scan "
                         "(default: the one SpecDeck has open)")
    suggest.add_argument("--no-hub", action="store_true", help="leave out Hub drafts")
    suggest.add_argument("--verify", action="store_true",
                         help="fetch each Hub draft's tokenizer files and check them")
    suggest.add_argument("--gpus", metavar="GB,GB",
                         help="GPU sizes to plan VRAM for (e.g. 24,24); default: this machine's")
    suggest.add_argument("--bpw", type=finite(*BPW_RANGE), metavar="BITS",
                         help="the target's EXL2 bitrate, for planning VRAM when the target "
                         "folder is not an EXL2 quant (e.g. 4.0)")
    suggest.add_argument("--limit", type=whole(1, 1000), default=10, metavar="N",
                         help="how many suggestions to show (default 10)")
    suggest.set_defaults(handler=run_suggest)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    from specdeck.core.compat.check import MAX_SEQ_LEN_RANGE

    parser.add_argument("--max-seq-len", type=whole(*MAX_SEQ_LEN_RANGE), metavar="TOKENS",
                        help="the context the target runs at (TabbyAPI model.max_seq_len); "
                        "default: its native context")


def _hub_endpoint() -> str | None:
    from specdeck.core import settings

    return settings.load().hub_endpoint


def run_check(args: argparse.Namespace) -> int:
    from specdeck.core.compat import check

    report = check(args.target, args.draft, max_seq_len=args.max_seq_len,
                   endpoint=_hub_endpoint(), examples=max(0, args.examples))
    if args.json:
        emit_json(report)
    else:
        print_report(report, sys.stdout)
    return report.verdict.exit_code


def run_suggest(args: argparse.Namespace) -> int:
    from specdeck.core import settings
    from specdeck.core.compat import suggest

    saved = settings.load()
    config_path = args.config or settings.remembered_config()
    result = suggest(
        args.target,
        model_dirs=args.models_dir,
        config_path=config_path,
        saved=saved,
        include_hub=not args.no_hub,
        verify_hub=args.verify,
        max_seq_len=args.max_seq_len,
        endpoint=saved.hub_endpoint,
        limit=max(1, args.limit),
        gpus=args.gpus,
        bpw=args.bpw,
    )
    if args.json:
        emit_json(result)
    else:
        print_suggestions(result, sys.stdout)
    return EXIT_OK if result.suggestions else EXIT_NEGATIVE


# human output ---------------------------------------------------------------------------


def _wrap(text: str, indent: int) -> str:
    return textwrap.fill(text, WIDTH, initial_indent=" " * indent, subsequent_indent=" " * indent)


def _side_line(label: str, side) -> str:
    from specdeck.core.models import format_parameters

    facts = [side.vocab_type if side.vocab_type != "UNKNOWN" else "tokenizer unknown",
             f"{side.vocab_size:,} tokens" if side.vocab_size else f"{side.known_ids:,} ids known",
             f"head {side.head_rows:,}" if side.head_rows else None,
             f"context {side.context_length:,}" if side.context_length else None,
             format_parameters(side.parameters) if side.parameters else None,
             side.quantization]
    return f"{label:<7} {side.name}  ({', '.join(f for f in facts if f)})"


def print_report(report, out: TextIO) -> None:
    from specdeck.core.compat.display import quoted

    out.write(_side_line("Target", report.target) + "\n")
    out.write(_side_line("Draft", report.draft) + "\n\n")
    out.write(f"{report.verdict.label.upper()}\n{_wrap(report.summary, 0)}\n\n")
    for rule in report.rules:
        out.write(f"  {rule.status.value.upper():<8}{rule.title}\n")
        out.write(_wrap(rule.detail, 10) + "\n")
        if rule.target or rule.draft:
            out.write(_wrap(f"target: {rule.target}  |  draft: {rule.draft}", 10) + "\n")
    vocab = report.vocab
    if vocab.mismatches:
        out.write(f"\nDiffering tokens (first {len(vocab.mismatches)} of {vocab.differing:,}):\n")
        out.write(f"  {'id':>8}  {'target':<30}  draft\n")
        for m in vocab.mismatches:
            out.write(f"  {m.id:>8}  {quoted(m.target.display):<30}  {quoted(m.draft.display)}\n")
    span = f"{vocab.first_id:,}–{vocab.end_id - 1:,}"
    out.write(f"\nToken ids compared: {vocab.compared:,} ({span}),"
              f" differing {vocab.differing:,}, not comparable {vocab.not_compared:,}.\n")
    t = report.timings
    out.write(f"Checked in {t.total_s:.2f} s (target {t.load_target_s:.2f} s, draft "
              f"{t.load_draft_s:.2f} s, comparison {t.compare_s * 1000:.1f} ms).\n")


def print_suggestions(result, out: TextIO) -> None:
    from specdeck.core.models import format_parameters

    size = f", {format_parameters(result.target_parameters)}" if result.target_parameters else ""
    family = f"; tokenizer family: {result.family}" if result.family else ""
    out.write(f"Draft suggestions for {result.target}{size}{family}\n\n")
    if not result.suggestions:
        out.write("  No compatible draft found in "
                  f"{', '.join(map(str, result.scanned_dirs)) or 'any model folder'}"
                  f"{'' if result.family else ', and the target matches no known Hub family'}.\n")
    for s in result.suggestions:
        ratio = f"{s.ratio:.1f}x" if s.ratio else "?x"
        params = format_parameters(s.parameters) if s.parameters else "?"
        status = s.status.replace("_", " ")
        vram = {True: ", fits VRAM", False: ", too big for VRAM", None: ""}[s.fits_vram]
        out.write(f"{s.rank:>3}. {s.name}  [{s.origin}, {params}, {ratio}, {status}{vram}]\n")
        out.write(_wrap(s.reason, 5) + "\n")
        if s.repo_id and s.revisions:
            out.write(_wrap(f"revisions: {', '.join(s.revisions)}", 5) + "\n")
    if result.rejected:
        out.write(f"\nNot suitable ({len(result.rejected)}):\n")
        for r in result.rejected:
            out.write(_wrap(f"{r.name}: {r.reason}", 2) + "\n")
    if result.vram_note:
        hint = " Plan for other GPUs with --gpus 24,24." if "GPU" in result.vram_note else ""
        out.write(_wrap(f"note: {result.vram_note}{hint}", 0) + "\n")
    for problem in result.problems:
        out.write(_wrap(f"note: {problem}", 0) + "\n")
