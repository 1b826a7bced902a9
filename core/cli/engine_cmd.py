"""`specdeck engines` and `specdeck generate`: the generation engines from the terminal.

    specdeck engines [--json] [--check]
    specdeck generate --model demo --ngram --prompt "Fix the typos: ..." [--json]

``generate`` streams the text to stdout as it is produced and prints the statistics to
stderr (with --json: one JSON object on stdout at the end, nothing streamed). Ctrl-C stops
the generation after the current step and still prints what was produced (exit 130).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from specdeck.core.bench.fields import PLAN_FIELDS
from specdeck.core.cli import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK
from specdeck.core.cli.interrupt import cancel_on_interrupt
from specdeck.core.cli.numbers import finite, whole
from specdeck.core.cli.output import emit_json, print_table
from specdeck.core.engines.base import (
    MAX_DRAFT_TOKENS,
    NGRAM_SIZE_RANGE,
    SHARE_OF_DRAFTS,
    DrafterKind,
    DrafterSpec,
    GenerationRequest,
    LoadSpec,
    SamplingSpec,
    StopReason,
)
from specdeck.core.errors import InvalidInputError
from specdeck.core.exl2_facts import CACHE_MODES_TEXT, DEFAULT_CACHE_MODE
from specdeck.core.models import MAX_CONTEXT
from specdeck.core.units import format_bytes


def register(subparsers: argparse._SubParsersAction) -> None:
    engines = subparsers.add_parser(
        "engines",
        help="list the generation engines and whether each can run here",
        description="List the generation engines, whether each can run on this machine, "
        "and what to install when not. Imports neither torch nor exllamav2 "
        "(unless --check).",
    )
    engines.add_argument("--json", action="store_true", help="print JSON")
    engines.add_argument(
        "--check",
        action="store_true",
        help="really import exllamav2 in a child process (may build its CUDA extension: slow)",
    )
    engines.set_defaults(handler=_engines)

    gen = subparsers.add_parser(
        "generate",
        help="generate text with or without speculative decoding and print the statistics",
        description="Generate from a prompt with one engine, streaming the text; greedy "
        "by default, so runs with and without a drafter must produce the same tokens.",
    )
    gen.add_argument("--engine", default="torch", help="torch (default) or exllamav2")
    gen.add_argument("--model", required=True, help='model folder, or "demo" for the built-in demo')
    drafter = gen.add_mutually_exclusive_group()
    drafter.add_argument("--draft", metavar="FOLDER", help="draft model folder (same tokenizer)")
    drafter.add_argument("--ngram", action="store_true", help="n-gram prompt-lookup drafting")
    d = DrafterSpec  # the defaults and limits live with the drafter's fields
    gen.add_argument("--k", type=whole(1, MAX_DRAFT_TOKENS), default=d.num_draft_tokens,
                     help=f"draft tokens per step (default {d.num_draft_tokens})")
    gen.add_argument("--ngram-min", type=whole(*NGRAM_SIZE_RANGE), default=d.ngram_min,
                     help=f"shortest n-gram match that drafts up to k (default {d.ngram_min})")
    gen.add_argument("--ngram-max", type=whole(*NGRAM_SIZE_RANGE), default=d.ngram_max,
                     help=f"longest n-gram match (default {d.ngram_max})")
    gen.add_argument("--ngram-short", type=whole(0, MAX_DRAFT_TOKENS), default=d.ngram_short,
                     help="most tokens a match shorter than --ngram-min drafts "
                     f"(default {d.ngram_short}; 0 = none)")
    prompt = gen.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", help="the prompt text")
    prompt.add_argument("--prompt-file", type=Path, help="read the prompt from a file")
    gen.add_argument("--chat", action="store_true", help="wrap the prompt in the chat template")
    max_new = PLAN_FIELDS["max_new_tokens"]  # the A/B plan's limit and default
    gen.add_argument("--max-new", type=whole(max_new.low, max_new.high), default=max_new.default,
                     help=max_new.describe())
    gen.add_argument("--no-eos", action="store_true", help="do not stop at end-of-sequence")
    gen.add_argument("--temperature", type=finite(0, 100), default=0.0, help="0 = greedy (default)")
    gen.add_argument("--top-k", type=whole(0, 1 << 24), default=0)
    gen.add_argument("--top-p", type=finite(0, 1, low_open=True), default=1.0)
    gen.add_argument("--repetition-penalty", type=finite(0, 100, low_open=True), default=1.0)
    gen.add_argument("--seed", type=whole(0, 2**63 - 1), default=None)
    gen.add_argument("--device", default="auto", help="torch engine: auto, cpu, cuda, cuda:N")
    gen.add_argument("--dtype", default="auto", help="torch engine: auto, float32, bfloat16, float16")
    gen.add_argument("--max-seq-len", type=whole(1, MAX_CONTEXT), default=None,
                     help="context length to load")
    gen.add_argument("--cache-mode", default=DEFAULT_CACHE_MODE,
                     help=f"exllamav2: {CACHE_MODES_TEXT}")
    gen.add_argument("--draft-cache-mode", default=DEFAULT_CACHE_MODE,
                     help=f"exllamav2: {CACHE_MODES_TEXT}")
    gen.add_argument(
        "--gpu-split", default=None, help="exllamav2: GB per GPU, e.g. 20,24 (default: autosplit)"
    )
    gen.add_argument("--json", action="store_true", help="print the result as JSON, no streaming")
    gen.set_defaults(handler=_generate)


# specdeck engines ---------------------------------------------------------------------------
def _engines(args: argparse.Namespace) -> int:
    from specdeck.core.engines import list_engines
    from specdeck.core.engines.demo import demo_status

    engines = list_engines(deep=args.check)
    demo = demo_status()
    if args.json:
        emit_json({"engines": engines, "demo_model": demo})
        return EXIT_OK
    rows = []
    for info in engines:
        a = info.availability
        rows.append([info.name, "yes" if a.available else "no", a.detail or a.reason])
    print_table(rows, ["engine", "available", "details"])
    for info in engines:
        if not info.availability.available and info.availability.install_hint:
            print(f"  {info.name}: {info.availability.install_hint}")
    print()
    if demo.available:
        state = f"converted at {demo.model_dir}" if demo.converted else "converts on first use"
        print(f"demo model: SmolLM2-135M-Instruct, {state} (use --model demo)")
    else:
        print(f"demo model: not available ({demo.reason}); {demo.install_hint}")
    return EXIT_OK


# specdeck generate --------------------------------------------------------------------------
def _generate(args: argparse.Namespace) -> int:
    from specdeck.core.engines import create_engine
    from specdeck.core.engines.demo import resolve_model

    request_text = _prompt_text(args)
    drafter = _drafter_spec(args)
    sampling = _sampling_spec(args)
    err = sys.stderr
    cancel = threading.Event()
    engine = create_engine(args.engine)
    quiet_library_progress_bars()
    with cancel_on_interrupt(cancel):
        model = resolve_model(args.model, _progress_printer(err), cancel)
        if drafter.model_path is not None:
            draft = resolve_model(drafter.model_path, _progress_printer(err), cancel)
            drafter = dataclasses.replace(drafter, model_path=draft)
        loaded = engine.load(_load_spec(args, model, drafter), _progress_printer(err), cancel)

        request = GenerationRequest(
            prompt=request_text,
            max_new_tokens=args.max_new,
            sampling=sampling,
            stop_on_eos=not args.no_eos,
            apply_chat_template=args.chat,
        )
        on_event = None if args.json else _stream_to(sys.stdout)
        try:
            result = engine.generate(request, on_event, cancel)
        finally:
            engine.unload()
    if args.json:
        emit_json({"loaded": loaded, "result": result})
    else:
        sys.stdout.write("\n")
        sys.stdout.flush()
        _print_stats(result, loaded, err)

    return EXIT_INTERRUPTED if result.stats.stop_reason is StopReason.CANCELLED else EXIT_OK


def _prompt_text(args: argparse.Namespace) -> str:
    if args.prompt_file is None:
        return args.prompt
    from specdeck.core.files import PROMPT_FILE, read_text_bounded

    # Bounded and never blocking: a FIFO (or /dev/stdin's pipe) is refused at once, not
    # waited on, and a file of gigabytes is not read.
    return read_text_bounded(args.prompt_file, "prompt file", PROMPT_FILE,
                             hint="Give a regular UTF-8 text file of a prompt's size "
                                  "(or the prompt itself with --prompt).")



def _drafter_spec(args: argparse.Namespace) -> DrafterSpec:
    if args.draft:
        kind, path = DrafterKind.MODEL, Path(args.draft)
    elif args.ngram:
        kind, path = DrafterKind.NGRAM, None
    else:
        kind, path = DrafterKind.NONE, None
    return DrafterSpec(
        kind=kind,
        model_path=path,
        num_draft_tokens=args.k,
        ngram_max=args.ngram_max,
        ngram_min=args.ngram_min,
        ngram_short=args.ngram_short,
    )


def _sampling_spec(args: argparse.Namespace) -> SamplingSpec:
    return SamplingSpec(
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        repetition_penalty=args.repetition_penalty,
        seed=args.seed,
    )


def _load_spec(args: argparse.Namespace, model: Path, drafter: DrafterSpec) -> LoadSpec:
    return LoadSpec(
        model_path=model,
        drafter=drafter,
        device=args.device,
        dtype=args.dtype,
        max_seq_len=args.max_seq_len,
        cache_mode=args.cache_mode,
        draft_cache_mode=args.draft_cache_mode,
        gpu_split=_gpu_split(args.gpu_split),
    )


def _gpu_split(text: str | None) -> tuple[float, ...] | None:
    if not text:
        return None
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise InvalidInputError(
            f"--gpu-split {text!r} is not a list of numbers.", "Write GB per GPU: --gpu-split 20,24"
        ) from exc
    if not values or any(v <= 0 for v in values):
        raise InvalidInputError(f"--gpu-split {text!r} needs positive GB values.")
    return values


def quiet_library_progress_bars() -> None:
    """transformers draws tqdm bars on stderr while loading; SpecDeck reports its own stages.
    The environment variable it reads at import, so transformers is not imported here (the
    server path and the packaged app must not pay for it)."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "huggingface_hub" in sys.modules:  # read its environment already
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def _progress_printer(stream: TextIO):
    last: list[str] = []

    def show(progress: Any) -> None:
        if not last or last[-1] != progress.stage:
            last.append(progress.stage)
            stream.write(f"specdeck: {progress.stage}\n")
            stream.flush()

    return show


def _stream_to(stream: TextIO):
    def write(event: Any) -> None:
        if event.text:
            stream.write(event.text)
            stream.flush()

    return write


def _print_stats(result: Any, loaded: Any, out: TextIO) -> None:
    s = result.stats
    ttft = f", first token after {s.time_to_first_token_s:.2f} s" if s.time_to_first_token_s else ""
    out.write(
        f"--- {s.new_tokens} new tokens in {s.decode_s:.2f} s: {s.tokens_per_second:.1f} tok/s "
        f"(prefill {s.prefill_s:.2f} s for {s.prompt_tokens} prompt tokens{ttft})\n"
    )
    out.write(f"    {loaded.label}; {result.sampling.label}; stopped by {s.stop_reason.value}\n")
    if s.drafted:
        positions = " ".join(
            f"{rate * 100:.0f}%" if rate is not None else "-" for rate in s.per_position_acceptance
        )
        out.write(
            f"    {s.steps} verify steps, {s.draft_steps} with a draft; accepted {s.accepted} of "
            f"{s.drafted} draft tokens ({s.acceptance_rate * 100:.0f}%), mean acceptance "
            f"length {_length(s.mean_acceptance_length)}; per position ({SHARE_OF_DRAFTS}): "
            f"{positions}\n"
        )
    elif result.drafter.kind is not DrafterKind.NONE:
        out.write(f"    {s.steps} verify steps; the drafter found nothing to propose\n")
    if s.peak_memory_bytes:
        out.write(f"    peak {s.memory_kind.upper()} {format_bytes(s.peak_memory_bytes)}\n")
    out.writelines(f"    note: {note}\n" for note in loaded.notes)
    out.flush()


__all__ = ["EXIT_ERROR", "register"]


def _length(value: float | None) -> str:
    return "not known (no drafts counted)" if value is None else f"{value:.2f}"
