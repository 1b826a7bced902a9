"""`specdeck gpus` (live telemetry, trace recording) and `specdeck vram` (the VRAM plan)."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from specdeck.core import llama_flags
from specdeck.core.cli import EXIT_NEGATIVE, EXIT_OK
from specdeck.core.cli.numbers import finite, whole
from specdeck.core.cli.output import emit_json, print_table
from specdeck.core.cli.paths import output_file
from specdeck.core.exl2_facts import (
    CACHE_MODES_TEXT,
    CACHE_STEP,
    DEFAULT_AUTOSPLIT_RESERVE_TEXT,
    DEFAULT_CACHE_MODE,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_SEQ_LEN,
)
from specdeck.core.units import GiB, format_bytes


def register(subparsers) -> None:
    from specdeck.core.vram.exl3 import CACHE_BITS_TEXT
    from specdeck.core.vram.inputs import CONTEXT_RANGE
    from specdeck.core.vram.weights import BPW_RANGE, HEAD_BITS_RANGE

    gpus = subparsers.add_parser(
        "gpus",
        help="list NVIDIA GPUs: memory, utilisation, power, temperature, processes",
        description="One look at every NVIDIA GPU through NVML. Without a GPU (or driver) it "
        "says so and exits 1. --record saves a telemetry trace the GUI can replay.",
    )
    gpus.add_argument("--json", action="store_true", help="print the frame as JSON")
    gpus.add_argument("--replay", metavar="TRACE", help="show the first frame of a trace file instead")
    gpus.add_argument("--record", type=output_file, metavar="FILE", help="record a trace (JSON Lines) to FILE")
    gpus.add_argument("--duration", type=finite(0, 7 * 86400, low_open=True), default=60.0, metavar="S",
                      help="seconds to record (default 60)")
    gpus.add_argument("--interval", type=finite(0.01, 3600), default=0.25, metavar="S",
                      help="seconds between samples when recording (default 0.25)")
    gpus.add_argument("--description", default="", help="a line describing the recording")
    gpus.set_defaults(handler=run_gpus)

    vram = subparsers.add_parser(
        "vram",
        help="plan VRAM for a target (and draft) model on your GPUs or typed-in ones",
        description="Place the target and draft as TabbyAPI would (exl2-checkpoint + ExLlamaV2 "
        "for EXL2 folders, main + ExLlamaV3 for EXL3 folders) and say whether "
        "they fit, with a per-GPU breakdown, the largest context that fits, and what to "
        "change if they do not. Exits 0 if it fits, 1 if not.",
    )
    vram.add_argument("--model", metavar="DIR|GGUF", help="the target model folder, or a .gguf "
                      "for a llama-server plan")
    vram.add_argument("--draft", metavar="DIR|GGUF", help="the draft model folder (or .gguf)")
    vram.add_argument("--mtp", action="store_true", help="an EXL3 target drafts with its own MTP "
                      "layers (TabbyAPI main's draft_mode: mtp)")
    llama = vram.add_argument_group(
        "llama-server (GGUF)", "With a .gguf --model, or a llama-swap model: layers, KV cache and "
        "draft placed as llama.cpp places them, read from the files' headers and the flags.")
    llama.add_argument("--llama-args", default="", metavar='"FLAGS"',
                       help='the llama-server flags, e.g. "-c 16384 -ngl 99 -ctk q8_0 -ctv q8_0 '
                       '-ngld 99 --device-draft CUDA1"')
    llama.add_argument("--swap-config", metavar="FILE",
                       help="plan what a llama-swap model's cmd loads (-m, -md and its flags)")
    llama.add_argument("--swap-model", metavar="NAME", help="with --swap-config: the model")
    llama.add_argument("--compute-reserve-mb", type=finite(0, 1 << 20), metavar="MIB",
                       help="kept per GPU for llama.cpp's compute buffers (default: the "
                            "plan's allowance, which its notes state)")
    llama.add_argument("--host-ram", type=finite(0, 1 << 20, low_open=True), metavar="GiB",
                       help="the host memory what stays off the GPUs must fit in "
                       "(default: this machine's)")
    vram.add_argument("--ctx", type=whole(*CONTEXT_RANGE), metavar="N",
                      help="context (max_seq_len); -1: the target's native context; default "
                      f"(or 0): TabbyAPI's, min(native, {DEFAULT_MAX_SEQ_LEN})")
    vram.add_argument("--cache-mode", default=DEFAULT_CACHE_MODE,
                      help=f"{CACHE_MODES_TEXT} (default {DEFAULT_CACHE_MODE}); for EXL3 also "
                      f"k,v bits {CACHE_BITS_TEXT}, e.g. 8,4")
    vram.add_argument("--draft-cache-mode", default=DEFAULT_CACHE_MODE,
                      help="the draft's cache mode")
    vram.add_argument("--gpus", metavar="GB,GB", help="plan for these GPUs, e.g. 32,24, "
                      "instead of the ones in this machine")
    vram.add_argument("--bpw", type=finite(*BPW_RANGE), help="the target's bpw, for a folder that is not "
                      "an EXL2 or EXL3 quant (config.json is enough), or to override an EXL3's")
    vram.add_argument("--draft-bpw", type=finite(*BPW_RANGE), help="the draft's bpw, likewise")
    vram.add_argument("--head-bits", type=whole(*HEAD_BITS_RANGE), help="the target head's bits with --bpw (default 6)")
    vram.add_argument("--draft-head-bits", type=whole(*HEAD_BITS_RANGE), help="the draft head's bits with --draft-bpw")
    vram.add_argument("--gpu-split", metavar="GB,GB", help="TabbyAPI gpu_split (default: autosplit)")
    vram.add_argument("--draft-gpu-split", metavar="GB,GB", help="TabbyAPI draft_gpu_split")
    vram.add_argument("--no-autosplit", action="store_true",
                      help="gpu_split_auto: false (everything on CUDA 0 unless --gpu-split)")
    vram.add_argument("--reserve-mb", metavar="MB,MB", default=DEFAULT_AUTOSPLIT_RESERVE_TEXT,
                      help="TabbyAPI autosplit_reserve per GPU in MB (default "
                      f"{DEFAULT_AUTOSPLIT_RESERVE_TEXT})")
    vram.add_argument("--chunk-size", type=whole(1, 1 << 20), default=DEFAULT_CHUNK_SIZE,
                      help=f"TabbyAPI chunk_size (default {DEFAULT_CHUNK_SIZE}; it uses at least {CACHE_STEP})")
    vram.add_argument("--logits-rows", type=whole(1, 256), default=16, metavar="N",
                      help="logits rows per forward pass (default 16, TabbyAPI's "
                      "max_output_len; SpecDeck's own ExLlamaV2 engine allocates 33)")
    vram.add_argument("--no-flash-attn", action="store_true",
                      help="plan for a GPU older than Ampere (no flash-attn: bigger buffers)")
    vram.add_argument("--count-in-use", action="store_true",
                      help="treat memory other programs hold now as unavailable (live GPUs)")
    vram.add_argument("--json", action="store_true", help="print the plan as JSON")
    vram.set_defaults(handler=run_vram)


# gpus -------------------------------------------------------------------------------------
def run_gpus(args: argparse.Namespace) -> int:
    from specdeck.core.gpu import read_once

    if args.record:
        return _record(args)
    if args.replay:
        from specdeck.core.gpu.replay import ReplaySource

        frame = read_once(ReplaySource(args.replay, loop=False))
    else:
        frame = read_once()
    if args.json:
        emit_json(frame)
    else:
        print_frame(frame)
    return EXIT_OK if frame.has_gpus else EXIT_NEGATIVE


def _record(args: argparse.Namespace) -> int:
    from specdeck.core.errors import InvalidInputError
    from specdeck.core.gpu.replay import ReplaySource, record_trace
    from specdeck.core.gpu.sampler import default_source

    if args.duration <= 0 or args.interval <= 0:
        raise InvalidInputError("--duration and --interval must be positive numbers of seconds.")
    source = ReplaySource(args.replay, loop=False) if args.replay else default_source()

    def progress(fraction: float) -> None:
        if sys.stderr.isatty():
            sys.stderr.write(f"\rrecording {fraction:4.0%}")
            sys.stderr.flush()

    path = record_trace(source, args.record, args.duration, args.interval,
                        args.description, progress=progress)
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    print(f"Saved {path}")
    return EXIT_OK


def _gib(value: int | None) -> str:
    """A number for a table whose header says GiB."""
    return "N/A" if value is None else f"{value / GiB:.2f}"


def _bytes(value: int | None) -> str:
    return "N/A" if value is None else format_bytes(value)


def _number(value: float | None, unit: str, digits: int = 0) -> str:
    return "N/A" if value is None else f"{value:.{digits}f}{unit}"


def print_frame(frame, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    if frame.synthetic:
        out.write(f"(replaying a synthetic trace: {frame.source})\n")
    if not frame.has_gpus:
        out.write(f"{frame.headline}.\n")
        if frame.fix:
            out.write(f"{frame.fix}\n")
        if frame.detail:
            out.write(f"Details: {frame.detail}\n")
        return
    rows = []
    for g in frame.gpus:
        cuda = "-" if g.cuda_index is None else f"{g.cuda_index}{'' if g.cuda_index_exact else '?'}"
        if g.status.problem:
            rows.append([str(g.index), cuda, g.name, g.status.problem, "", "", ""])
            continue
        memory = f"{_bytes(g.memory_used)} / {_bytes(g.usable_total)}"
        power = _number(g.power_w, "")
        if g.power_limit_w is not None:
            power += f" / {g.power_limit_w:.0f}"
        rows.append([str(g.index), cuda, g.name, memory, _number(g.utilization_gpu, "%"),
                     power + " W", _number(g.temperature_c, " C")])
    print_table(rows, ["GPU", "CUDA", "Name", "Memory used / usable", "Util", "Power", "Temp"], out)
    processes = [[str(g.index), str(p.pid), p.name + (" (this app)" if p.is_self else ""),
                  _bytes(p.used_bytes)] for g in frame.gpus for p in g.processes]
    if processes:
        out.write("\n")
        print_table(processes, ["GPU", "PID", "Process", "Memory"], out)
    if frame.driver_version:
        out.write(f"\nDriver {frame.driver_version}.")
        if any(not g.cuda_index_exact for g in frame.gpus):
            out.write(" CUDA indices marked ? are estimated (CUDA_DEVICE_ORDER=FASTEST_FIRST).")
        out.write("\n")


# vram -------------------------------------------------------------------------------------
def run_vram(args: argparse.Namespace) -> int:
    from specdeck.core import vram
    from specdeck.core.errors import InvalidInputError

    _refuse_mixed_formats(args.model, args.draft)
    if args.swap_config or (args.model and str(args.model).lower().endswith(".gguf")):
        return _vram_gguf(args)
    if not args.model:
        raise InvalidInputError("Which model? Give --model (a folder, or a .gguf), or "
                                "--swap-config FILE --swap-model NAME.")

    if args.ctx == 0:
        raise InvalidInputError("--ctx 0 is not a context length.",
                                "Give tokens (e.g. --ctx 16384), -1 for the model's own context, "
                                "or leave it out for TabbyAPI's default.")

    inputs = vram.PlanInputs(
        model=args.model,
        draft=args.draft,
        context=args.ctx,
        cache_mode=args.cache_mode,
        draft_cache_mode=args.draft_cache_mode,
        gpus=args.gpus,
        bpw=args.bpw,
        draft_bpw=args.draft_bpw,
        head_bits=args.head_bits,
        draft_head_bits=args.draft_head_bits,
        gpu_split=args.gpu_split,
        draft_gpu_split=args.draft_gpu_split,
        autosplit=not args.no_autosplit,
        autosplit_reserve_mb=args.reserve_mb,
        chunk_size=args.chunk_size,
        count_in_use=args.count_in_use,
        flash_attention=not args.no_flash_attn,
        mtp=args.mtp,
    )
    from dataclasses import replace

    from specdeck.core.vram.costs import DEFAULT_OVERHEADS

    overheads = replace(DEFAULT_OVERHEADS, max_output_len=args.logits_rows)
    result = vram.plan_from_inputs(inputs, overheads=overheads)
    if args.json:
        emit_json(result)
    else:
        print_plan(result)
    return EXIT_OK if result.fits else EXIT_NEGATIVE


def _refuse_mixed_formats(model: str | None, draft: str | None) -> None:
    """A GGUF with a model folder (EXL2, EXL3): llama.cpp loads only GGUFs and TabbyAPI only
    folders, so no server loads the pair (core.compat.rules says the same for compat)."""
    from specdeck.core.compat.rules import mixed_format_problem

    problem = mixed_format_problem(model, draft)
    if problem is not None:
        from specdeck.core.errors import InvalidInputError

        raise InvalidInputError(problem, "Plan a GGUF draft for a GGUF target, or a folder for a folder.")


def _vram_gguf(args: argparse.Namespace) -> int:
    """The llama-server plan: GGUF target/draft from --model/--draft and --llama-args, or from
    a llama-swap model's cmd."""
    import shlex

    from specdeck.core.errors import InvalidInputError
    from specdeck.core.vram.gguf import (
        DEFAULT_RESERVE_MB,
        LlamaFlags,
        plan_gguf,
        plan_lines,
        read_gguf_model,
    )
    from specdeck.core.vram.inputs import PlanInputs, resolve_gpus

    if args.swap_config:
        from specdeck.core import swap

        if not args.swap_model:
            raise InvalidInputError("--swap-config needs --swap-model NAME.")
        model = swap.load(args.swap_config).model(args.swap_model)
        if not model.macros_resolved:  # its argv is not what llama-swap would run
            raise InvalidInputError(f"Model {args.swap_model}: {model.errors[0]}.",
                                    "Fix its macros first.")
        argv = list(model.argv[1:])
        from specdeck.core.servers.llama_server import flag_value

        target = flag_value(tuple(argv), *llama_flags.TARGET_MODEL)
        draft = flag_value(tuple(argv), *llama_flags.DRAFT_MODEL)
        if not target:
            raise InvalidInputError(f"Model {args.swap_model}'s cmd names no -m GGUF.",
                                    "SpecDeck plans llama-server cmds that load a local GGUF.")
    else:
        try:
            argv = shlex.split(args.llama_args)
        except ValueError as exc:  # an unclosed quote
            raise InvalidInputError(f"--llama-args cannot be split into flags ({exc}).",
                                    "Close the quote.") from None
        target, draft = args.model, args.draft
    flags = LlamaFlags.from_args(argv)
    from specdeck.core.vram.costs import DEFAULT_OVERHEADS

    gpus = resolve_gpus(PlanInputs(model=str(target), gpus=args.gpus,
                                    count_in_use=args.count_in_use), None, DEFAULT_OVERHEADS)
    plan = plan_gguf(read_gguf_model(target), read_gguf_model(draft) if draft else None, flags,
                     gpus, DEFAULT_RESERVE_MB if args.compute_reserve_mb is None
                     else args.compute_reserve_mb, _host_ram(args.host_ram))
    if args.json:
        emit_json(plan.to_json())
    else:
        print("\n".join(plan_lines(plan)))
    return EXIT_OK if plan.fits else EXIT_NEGATIVE


def _host_ram(gigabytes: float | None) -> int:
    """The host memory to plan for: ``--host-ram`` GiB, else this machine's (psutil)."""
    if gigabytes is not None:
        return int(gigabytes * GiB)
    import psutil

    return int(psutil.virtual_memory().total)


def print_plan(result, out: TextIO | None = None) -> None:
    from specdeck.core.vram import OVERHEAD_LABELS, format_bytes

    out = out or sys.stdout
    draft = f" + draft {result.draft}" if result.draft else ""
    out.write(f"VRAM plan: {result.target}{draft}\n")
    modes = f"cache {result.cache_mode}" + (f", draft cache {result.draft_cache_mode}" if result.draft else "")
    out.write(f"Context {result.context} tokens, {modes}, {result.split}\n\n")
    rows = []
    for g in result.gpus:
        layers = []
        if g.target_layers:
            layers.append("target {}-{}".format(*g.target_layers))
        if g.draft_layers:
            layers.append("draft {}-{}".format(*g.draft_layers))
        rows.append([g.label, _gib(g.capacity_bytes), _gib(g.target_weights),
                     _gib(g.target_cache), _gib(g.draft_weights), _gib(g.draft_cache),
                     _gib(g.overhead_bytes), _gib(g.free_bytes), ", ".join(layers) or "-"])
    print_table(rows, ["GPU", "Usable", "Target", "Target KV", "Draft", "Draft KV",
                       "Overhead", "Free", "Layers"], out)
    out.write("(GiB; overhead = CUDA context, scratch, cache staging, RoPE tables, activations, "
              "allocator slack)\n")
    for g in result.gpus:
        if g.overhead_bytes:
            parts = ", ".join(f"{OVERHEAD_LABELS[k]} {format_bytes(v)}" for k, v in g.overhead.items() if v)
            out.write(f"  {g.label} overhead: {parts}\n")
    out.write("\n")
    verdict = result.verdict.value.upper()
    if result.headroom_bytes < 0:
        out.write(f"Verdict: {verdict}, at least {format_bytes(-result.headroom_bytes)} short.\n")
    else:
        out.write(f"Verdict: {verdict}, headroom {format_bytes(result.headroom_bytes)} "
                  f"(tight below {format_bytes(result.margin_bytes)}).\n")
    if result.problem:
        out.write(f"  {result.problem}\n")
    out.write(f"Largest context that fits: {_context(result.max_context)}"
              + (f" with the draft, {_context(result.max_context_without_draft)} without"
                 if result.draft else "")
              + f" (searched up to {result.context_limit}).\n")
    out.write(f"System RAM for token embeddings: {format_bytes(result.system_ram_bytes)}.\n")
    for note in result.notes:
        out.write(f"Note: {note}\n")
    if result.suggestions:
        out.write("\nTo make it fit:\n" if not result.fits else "\nFor more headroom:\n")
        for tip in result.suggestions:
            out.write(f"  - {tip}\n")


def _context(tokens: int | None) -> str:
    return "none" if tokens is None else str(tokens)

