"""`python -m gpukit COMMAND`: the GPU proof kit's driver (docs/gpu-proof.md).

  prepare         here, before a GPU session: tokenizer into .gpukit/, check the wheels
  next            run the pending steps within --budget seconds, write the report to --out
  run STEP        run one step again (even if done)
  status          which steps are done, failed or pending, and what to run next
  report          write gpu-<date>.md / .json from what is recorded
  measure-memory  (internal) one load's allocation, in a fresh process
  restore-ext     join a carried extension build (.gpukit/ext) so a cold machine skips it
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from gpukit.config import PRESETS
from gpukit.state import KitState, work_dir

REPO_ROOT = Path(__file__).resolve().parents[1]
CARRY_DIR = REPO_ROOT / ".gpukit"
WHEELS_DIR = REPO_ROOT / ".whl"
OUT_FILE_LIMIT = 8


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpukit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("next", "run", "status", "report"):
        p = sub.add_parser(name)
        p.add_argument("--preset", choices=sorted(PRESETS), default="gpu")
        p.add_argument("--out", type=Path, help="where the report and logs go (the device's $OUT)")
        if name == "run":
            p.add_argument("step")
        if name in ("next", "run"):
            p.add_argument("--budget", type=float, default=480.0,
                           help="seconds this command may spend on steps (default 480)")
    m = sub.add_parser("measure-memory")
    m.add_argument("--model", type=Path, required=True)
    m.add_argument("--draft", type=Path)
    m.add_argument("--ctx", type=int, required=True)
    m.add_argument("--cache-mode", default="FP16")
    m.add_argument("--draft-cache-mode")
    m.add_argument("--step-timing", type=int, metavar="K",
                   help="then time a decode step, a verification of K + 1 rows, a draft step")
    m.add_argument("--prefix-tokens", type=int, default=1024)
    m.add_argument("--repeats", type=int, default=20)
    m.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--tokenizer", type=Path, help="a folder with tokenizer.json (default: "
                   "TinyLlama's from the shared fixtures)")
    p.add_argument("--no-download", action="store_true",
                   help="only check .whl/, never download what it lacks")
    sub.add_parser("restore-ext")
    args = parser.parse_args(argv)
    return {"next": cmd_steps, "run": cmd_steps, "status": cmd_status, "report": cmd_report,
            "measure-memory": cmd_measure_memory, "prepare": cmd_prepare,
            "restore-ext": cmd_restore_ext}[args.command](args)


def cmd_steps(args: argparse.Namespace) -> int:
    from gpukit.driver import describe, log_to, run_steps
    from gpukit.steps import STEPS

    state = KitState(work_dir())
    log = log_to(state.path("logs", "kit.log"))
    only = getattr(args, "step", None)
    if only and only not in {s.name for s in STEPS}:
        print(f"unknown step {only!r}; steps: {', '.join(s.name for s in STEPS)}", file=sys.stderr)
        return 2
    def after_step(outcome) -> None:
        if args.out:  # after every step: a command cut at its limit keeps what it measured
            deliver(state, args.preset, args.out, with_extension="build" in outcome.ran)

    outcome = run_steps(STEPS, state, PRESETS[args.preset], args.budget, log, only=only,
                        after_step=after_step)
    from gpukit.steps import exl3_running

    if exl3_running():  # the budget ended before its step: measure how far it got anyway
        run_steps(STEPS, state, PRESETS[args.preset], 0, log, only="exl3",
                  after_step=after_step)
    for line in describe(STEPS, state):
        log(line)
    if outcome.failed:
        log(f"STEP FAILED: {outcome.failed} (error in the report); the steps that did not need "
            "it ran. Fix, then run the same command.")
    elif outcome.next_step:
        log(f"NEXT: run the same command again (next step: {outcome.next_step}).")
    else:
        log("ALL STEPS DONE: copy the report from $OUT into docs/benchmarks/ (docs/gpu-proof.md).")
    if args.out:
        deliver(state, args.preset, args.out, with_extension="build" in outcome.ran)
    return 1 if outcome.failed else 0


def cmd_status(args: argparse.Namespace) -> int:
    from gpukit.driver import describe, pending
    from gpukit.steps import STEPS

    state = KitState(work_dir())
    print(f"work folder: {state.root}")
    print("\n".join(describe(STEPS, state)))
    todo = pending(STEPS, state)
    print(f"next: {todo[0].name}" if todo else "all steps done")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from gpukit.report import write_report
    from gpukit.steps import STEPS

    out = args.out or REPO_ROOT / "docs" / "benchmarks"
    for path in write_report(KitState(work_dir()), STEPS, args.preset, out):
        print(path)
    return 0


def deliver(state: KitState, preset: str, out: Path, with_extension: bool) -> list[Path]:
    """The report, the trace, one combined log and (after a build) the extension's parts,
    within $OUT's 8 files."""
    from gpukit.report import write_report
    from gpukit.steps import STEPS

    files = write_report(state, STEPS, preset, out)
    logs = sorted((state.root / "logs").glob("*.log"))
    combined = out / "kit-logs.txt"
    with combined.open("w", encoding="utf-8") as handle:
        for log in logs:
            text = log.read_text(encoding="utf-8", errors="replace")
            handle.write(f"===== {log.name} (last 400 lines)\n")
            handle.write("\n".join(text.splitlines()[-400:]) + "\n")
    files.append(combined)
    trace = state.root / "trace.jsonl"
    if trace.is_file():
        files.append(Path(shutil.copy(trace, out / "gpu-trace.jsonl")))
    export = state.root / "export"
    if with_extension and export.is_dir():
        parts = sorted(export.iterdir())
        if len(files) + len(parts) <= OUT_FILE_LIMIT:
            files += [Path(shutil.copy(p, out / p.name)) for p in parts]
        else:
            print(f"extension parts not delivered: {len(parts)} files would exceed $OUT's "
                  f"{OUT_FILE_LIMIT}", file=sys.stderr)
    return files


def cmd_measure_memory(args: argparse.Namespace) -> int:
    from gpukit.ab import select_prompts
    from gpukit.memory import measure_load

    prompt = select_prompts(("prose",), 1)[0].text
    then = None
    if args.step_timing:
        from gpukit.seed_scale import time_steps

        def then(engine):
            return time_steps(engine, args.step_timing, args.prefix_tokens, args.repeats)
    measured, steps = measure_load(args.model, args.draft, args.ctx, args.cache_mode, prompt,
                                   draft_cache_mode=args.draft_cache_mode, then=then)
    data = {**measured.__dict__, **({"steps": steps} if steps else {})}
    args.out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    from gpukit.pair import TOKENIZER_FILES, find_tokenizer

    source = args.tokenizer or find_tokenizer()
    dest = CARRY_DIR / "tokenizer"
    dest.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:  # a second prepare finds the carried copy first: kept
        if (source / name).is_file() and source.resolve() != dest.resolve():
            shutil.copy(source / name, dest / name)
    print(f"tokenizer: {source} -> {dest}")
    from gpukit.install import missing_wheels

    missing = missing_wheels(WHEELS_DIR)
    if missing and not args.no_download:
        import subprocess

        from gpukit.install import pip_download_argv

        print(f"downloading {', '.join(missing)} for the device's Python into {WHEELS_DIR}")
        subprocess.run(pip_download_argv(WHEELS_DIR), check=False)
        missing = missing_wheels(WHEELS_DIR)
    if missing:
        print(f"MISSING wheels in {WHEELS_DIR}: {', '.join(missing)} (see docs/gpu-proof.md)")
        return 1
    from specdeck.core.units import format_bytes

    size = sum(f.stat().st_size for f in WHEELS_DIR.glob("*.whl"))
    print(f"wheels: {len(list(WHEELS_DIR.glob('*.whl')))} files, {format_bytes(size)} in "
          f"{WHEELS_DIR}")
    print("ready: run `bash gpukit/kit.sh` on the device with carry [.whl, .gpukit]")
    return 0


def cmd_restore_ext(args: argparse.Namespace) -> int:
    from gpukit.artifacts import join_parts

    manifests = sorted((CARRY_DIR / "ext").glob("*.parts.json"))
    if not manifests:
        return 1
    target = join_parts(manifests[0], work_dir() / "prebuilt")
    print(target.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
