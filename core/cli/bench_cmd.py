"""`specdeck bench`: A/B runs, sweeps over k and the adaptive tuner from the terminal.

    specdeck bench --demo                                  # demo model: no draft vs n-gram
    specdeck bench --model M --draft D --k 4 --suite code,chat --report out/
    specdeck bench --model M --draft D --sweep-k 1-8 --apply --config tabby/config.yml
    specdeck bench --model M --ngram --tune
    specdeck bench --plan out/plan.json                    # repeat a saved run
    specdeck bench --server http://127.0.0.1:8080 --server B=http://127.0.0.1:8081
    specdeck bench --llama-server BIN --gguf M.gguf --launch A= \
                   --launch "B=--spec-type ngram-simple --spec-ngram-simple-size-m 4"

Progress goes to stderr (a line per run: arm, prompt, tok/s, acceptance); the verdicts go to
stdout, or one JSON object with ``--json -`` (``--json FILE`` writes it to a file). Exit 0
when done, 1 when a greedy drafting arm changed the output (not lossless), 2 on errors (with
``--on-error skip``, an arm whose every measured run failed is one: the summary is still
printed), 130 when stopped with Ctrl-C (what finished is still reported).
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from specdeck.core.bench.fields import DEFAULT_K_MAX, DEFAULT_KS, DEFAULT_SUITES, PLAN_FIELDS
from specdeck.core.cli import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_NEGATIVE, EXIT_OK
from specdeck.core.cli.engine_cmd import (
    quiet_library_progress_bars,
)
from specdeck.core.cli.interrupt import cancel_on_interrupt
from specdeck.core.cli.numbers import whole
from specdeck.core.cli.output import write_json
from specdeck.core.cli.paths import output_file, output_folder
from specdeck.core.engines import SERVER_ENGINE, SERVER_MODEL
from specdeck.core.engines.demo import DEMO_ALIAS
from specdeck.core.errors import InvalidInputError
from specdeck.core.servers.key_names import add_api_key_option, add_tabby_options
from specdeck.core.userpath import expand_user


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench",
        help="A/B benchmark: with vs without speculative decoding, sweeps over k, tuning",
        description="Run the same prompts with and without a drafter, interleaved, greedy by "
        "default, and report paired speed-ups, acceptance and losslessness.",
    )
    p.add_argument("--demo", action="store_true",
                   help="the embedded demo model: no draft vs n-gram; when a larger model with "
                   "its tokenizer is on disk (e.g. SmolLM2-360M), that model as the target with "
                   "the demo as its draft, beside n-gram")
    p.add_argument("--demo-alone", action="store_true",
                   help="with --demo: the demo model only, even when a partner is on disk")
    p.add_argument("--models-dir", action="append", default=[], metavar="DIR",
                   help="with --demo: also look here for a partner model")
    p.add_argument("--engine", default="torch", help="torch (default) or exllamav2")
    p.add_argument("--model", help='target model folder, or "demo"')
    p.add_argument("--draft", action="append", default=[], metavar="FOLDER",
                   help="draft model folder (repeat for several candidates)")
    p.add_argument("--ngram", action="store_true", help="add an n-gram (prompt lookup) arm")
    ks = p.add_mutually_exclusive_group()
    ks.add_argument("--k", **_field("k"))
    ks.add_argument("--sweep-k", metavar="RANGE", help="sweep k, e.g. 1-8 or 1,2,4,8")
    p.add_argument("--tune", action="store_true",
                   help="find a good k with the adaptive tuner (a fraction of a sweep's time)")
    p.add_argument("--fixed-k", action="store_true",
                   help="draft exactly k per step (default: up to k, fewer after misses; "
                   "sweeps and the tuner always use exactly k)")
    p.add_argument("--suite", default=",".join(DEFAULT_SUITES),
                   help="comma-separated suites (code, structured, grounded, chat, prose; "
                   "spec-bench or spec-bench/CATEGORY, resources/prompts/spec_bench) or "
                   f"suite files (default {','.join(DEFAULT_SUITES)})")
    for name in ("max_prompts", "repeats", "warmup", "max_new_tokens"):
        p.add_argument(PLAN_FIELDS[name].flag, **_field(name))
    p.add_argument("--no-chat", action="store_true", help="do not apply the chat template")
    p.add_argument("--device", default="auto", help="torch engine: auto, cpu, cuda, cuda:N")
    p.add_argument("--dtype", default="auto", help="torch engine: auto, float32, bfloat16, ...")
    p.add_argument("--plan", type=Path, metavar="FILE",
                   help="run a saved plan.json (other plan options are ignored)")
    p.add_argument("--json", type=output_file, metavar="FILE",
                   help="write the result as JSON (- = stdout)")
    p.add_argument("--report", type=output_folder, metavar="DIR",
                   help="write report.json, runs.csv, summary.md, chart.svg, plan.json")
    p.add_argument("--no-history", action="store_true",
                   help="do not keep this run in SpecDeck's history")
    p.add_argument("--apply", action="store_true",
                   help="write the best setting into TabbyAPI's config.yml (needs --config; "
                   "with --tabby: the winning draft); llama-server arms: print the winning "
                   "flags to copy")
    p.add_argument("--config", type=Path, metavar="FILE", help="TabbyAPI config.yml for --apply")
    p.add_argument("--yes", "-y", action="store_true", help="save with --apply without asking")
    servers = p.add_argument_group(
        "server arms", "A/B the servers you run, or llama-servers SpecDeck launches: one arm "
        "each, the first is the no-draft reference. Keys come from --api-key-env, "
        "SPECDECK_SERVER_API_KEY or the keyring, never from a plan file.")
    servers.add_argument("--server", action="append", default=[], metavar="[NAME=]URL[#MODEL]",
                         help="a running server as one arm (llama-server, llama-swap, TabbyAPI, "
                         "vLLM, SGLang, LM Studio, Ollama, OpenAI-compatible); #MODEL names the model "
                         "to request (llama-swap switches by it)")
    servers.add_argument("--server-draft", action="append", default=[], metavar="NAME=DRAFT",
                         help="LM Studio: the draft model arm NAME's requests name (LM Studio "
                         "loads it per request), e.g. --server A=URL#qwen2.5-7b-instruct "
                         "--server B=URL#qwen2.5-7b-instruct --server-draft "
                         "B=qwen2.5-0.5b-instruct; Ollama: draft_num_predict for arm NAME "
                         "(--server-draft B=4; the reference gets 0)")
    servers.add_argument("--server-kind", metavar="KIND",
                         help="skip detection: llama-server, llama-swap, tabbyapi, vllm, "
                         "sglang, lmstudio, ollama, openai")
    add_api_key_option(servers)
    servers.add_argument("--llama-server", metavar="BINARY", help="llama-server to launch arms with")
    servers.add_argument("--gguf", metavar="FILE", help="the target model for launched arms")
    servers.add_argument("--launch", action="append", default=[], metavar='[NAME=]"FLAGS"',
                         help='one launched arm and its llama-server flags, e.g. A= (none) or '
                         '"B=--spec-type ngram-simple --spec-ngram-simple-size-m 4"; checked '
                         "against the binary's --help before anything runs")
    servers.add_argument("--server-args", default="", metavar='"FLAGS"',
                         help='flags every launched arm gets, e.g. "-t 8 -c 8192 -ngl 99"')
    p.add_argument("--on-error", choices=("stop", "skip"), default="stop",
                   help="when a run fails (a server that is down, say): stop the plan "
                   "(default), or skip the run (reported, left out of the statistics) and go on")
    servers.add_argument("--tabby", metavar="URL",
                         help="one TabbyAPI whose arms are reloads through its admin API: A "
                         "holds the model without a draft, each --tabby-draft a draft; what "
                         "was loaded is restored at the end (admin key in "
                         "SPECDECK_TABBY_ADMIN_KEY or --admin-key-env)")
    servers.add_argument("--tabby-draft", action="append", default=[], metavar="[NAME=]DRAFT",
                         help="a draft model (its folder in TabbyAPI's draft_model_dir) for one arm")
    servers.add_argument("--tabby-model", default="", metavar="NAME",
                         help="the model every TabbyAPI arm loads (default: the one loaded now)")
    servers.add_argument("--tabby-folder", metavar="DIR",
                         help="a TabbyAPI install SpecDeck starts once per arm, each from a copy "
                         "of its config.yml that differs only in the arm's draft settings "
                         "(your config.yml is not written): A without a draft, then each "
                         "--tabby-arm; compares draft modes, which a running TabbyAPI cannot "
                         "switch")
    servers.add_argument("--tabby-arm", action="append", default=[],
                         metavar='[NAME=]"KEY=VALUE ..."',
                         help='one started TabbyAPI arm\'s draft_model settings, e.g. '
                         '"B=draft_mode=ngram draft_num_tokens=4" or "C=draft_model_name='
                         'Qwen2.5-0.5B-exl3 draft_num_tokens=3"')
    add_tabby_options(servers)
    servers.add_argument("--sweep", action="append", default=[], metavar="FLAG=VALUES",
                         help="launched arms: a llama-server flag and the values to try, e.g. "
                         "spec-draft-p-min=0.5,0.75 or spec-draft-n-min=0-2 (repeat for a "
                         "grid; with --sweep-k, k through each arm's own k flag). Every "
                         "drafting --launch arm is swept; each setting runs its own A/B "
                         "against the reference; the table has a column per suite. With "
                         "--tune: successive halving, a fraction of the time")
    servers.add_argument("--swap-config", type=Path, metavar="FILE",
                         help="with --apply: write the winning llama-server drafting flags "
                         "into this llama-swap config.yaml (needs --swap-model)")
    servers.add_argument("--swap-model", metavar="NAME",
                         help="with --swap-config: the model whose cmd gets the winner")
    servers.add_argument("--one-at-a-time", action="store_true",
                         help="run one launched llama-server at a time (they share a GPU); "
                         "default: each arm's server stays up for the whole plan")
    p.set_defaults(handler=_bench)


def _field(name: str) -> dict[str, Any]:
    """argparse options for one of the plan's numeric fields (core.bench.fields)."""
    field = PLAN_FIELDS[name]
    return {"type": whole(field.low, field.high), "default": field.default, "help": field.describe()}


# Building the plan ---------------------------------------------------------------------------
def parse_k_range(text: str) -> tuple[int, ...]:
    """"1-8" or "1,2,4,8" (or a mix: "1-4,8")."""
    values: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                low, high = (int(v) for v in part.split("-", 1))
                values.extend(range(low, high + 1))
            elif part:
                values.append(int(part))
    except ValueError:
        values = []
    k = PLAN_FIELDS["k"]
    if not values or any(not k.low <= v <= k.high for v in values):
        raise InvalidInputError(f"--sweep-k {text!r} is not a list of k values from {k.low} to "
                                f"{k.high}.",
                                "Write a range such as --sweep-k 1-8 or a list such as 1,2,4,8.")
    return tuple(sorted(set(values)))


def _drafters(args: argparse.Namespace, k: int, adaptive: bool) -> list[Any]:
    from specdeck.core.engines.base import DrafterKind, DrafterSpec

    drafters = [DrafterSpec(DrafterKind.MODEL, expand_user(d), num_draft_tokens=k,
                            adaptive=adaptive) for d in args.draft]
    demo_draft = _demo_pair(args)[1]
    if demo_draft is not None:
        drafters.append(DrafterSpec(DrafterKind.MODEL, demo_draft, num_draft_tokens=k,
                                    adaptive=adaptive))
    if args.ngram or (args.demo and not args.draft):
        drafters.append(DrafterSpec(DrafterKind.NGRAM, num_draft_tokens=k, adaptive=adaptive))
    return drafters


def _demo_pair(args: argparse.Namespace) -> tuple[str | None, Path | None]:
    """(target, draft folder) for ``--demo``: ("demo", None), or a larger model on disk that
    shares the demo's tokenizer with the demo model as its draft. Decided once per command."""
    if not args.demo:
        return args.model, None
    if args.draft:  # the demo as the target of the user's own draft
        return DEMO_ALIAS, None
    cached = getattr(args, "_demo_pair", None)
    if cached is not None:
        return cached
    pair: tuple[str | None, Path | None] = (DEMO_ALIAS, None)
    if not args.demo_alone:
        from specdeck.core.engines.demo import ensure_demo_model, find_demo_partner

        demo_dir = ensure_demo_model(_stderr_stage)
        partner = find_demo_partner(demo_dir, tuple(args.models_dir))
        if partner is not None:
            print(f"Demo: {partner.name} ({partner.parameters_label}) shares the demo model's "
                  "tokenizer: it runs as the target, the demo model as its draft "
                  "(--demo-alone to skip it).", file=sys.stderr)
            pair = (str(partner.path), demo_dir)
    args._demo_pair = pair
    return pair


def _stderr_stage(progress: Any) -> None:
    print(f"{progress.stage}…", file=sys.stderr)


def build_plan(args: argparse.Namespace):
    """The plan the arguments describe (its arms: A, then one per drafter at --k)."""
    from specdeck.core.bench.plan import Arm, BenchPlan, arm_letter
    from specdeck.core.engines.base import LoadSpec

    if args.plan is not None:
        from specdeck.core.bench.report import load_plan

        return load_plan(args.plan)
    if args.server or args.launch or args.tabby or args.tabby_folder:
        return _server_plan(args)
    model = _demo_pair(args)[0] if args.demo else args.model
    if not model:
        raise InvalidInputError("specdeck bench needs a model.",
                                "Pass --model FOLDER, --demo, or --plan FILE.")
    arms = [Arm("A")]
    for drafter in _drafters(args, args.k, adaptive=not args.fixed_k):
        arms.append(Arm(arm_letter(len(arms)), drafter))
    return BenchPlan(engine=args.engine, model=str(model), arms=tuple(arms),
                     load=LoadSpec(Path("."), device=args.device, dtype=args.dtype),
                     **_prompt_fields(args))


def _prompt_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The plan fields every kind of plan takes from the flags: prompts, sizes, failures."""
    return {
        "suites": tuple(s.strip() for s in args.suite.split(",") if s.strip()),
        "max_prompts": args.max_prompts,
        "max_new_tokens": args.max_new,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "apply_chat_template": not args.no_chat,
        "on_error": args.on_error,
    }


def _server_plan(args: argparse.Namespace):
    """A plan whose arms are servers: --server URLs or --launch profiles (not both)."""
    import shlex

    from specdeck.core.bench.plan import BenchPlan, arm_letter
    from specdeck.core.servers.arms import arms_from_urls, launched_arm, split_arm_name
    from specdeck.core.servers.kinds import parse_kind

    if sum(map(bool, (args.server, args.launch, args.tabby, args.tabby_folder))) > 1:
        raise InvalidInputError("Give --server URLs, --launch profiles, one --tabby or one "
                                "--tabby-folder, not two of them.",
                                "Start the other servers yourself and pass their URLs.")
    kind = parse_kind(args.server_kind) if args.server_kind else None
    arms = []
    if args.tabby_folder:
        from specdeck.core.servers.tabby_launch import launched_tabby_arms

        if not args.tabby_arm:
            raise InvalidInputError("--tabby-folder needs at least one --tabby-arm to compare "
                                    "with.", 'E.g. --tabby-arm "B=draft_mode=ngram".')
        arms = list(launched_tabby_arms(args.tabby_folder, args.tabby_arm, args.tabby_python,
                                        args.api_key_env))
        model_label = str(args.tabby_folder)
    elif args.tabby:
        from specdeck.core.servers.arms import tabby_arms

        if not args.tabby_draft:
            raise InvalidInputError("--tabby needs at least one --tabby-draft to compare with.")
        arms = list(tabby_arms(args.tabby, args.tabby_draft, args.tabby_model,
                               args.api_key_env, args.admin_key_env))
        model_label = args.tabby_model or "tabbyapi"
    elif args.server:
        drafts = {}
        for text in args.server_draft:
            name, eq, draft = text.partition("=")
            if not eq or not name.strip() or not draft.strip():
                raise InvalidInputError(f"--server-draft {text!r}: write NAME=DRAFT.")
            drafts[name.strip()] = draft.strip()
        arms = list(arms_from_urls(args.server, kind, args.api_key_env, drafts))
        model_label = SERVER_MODEL
    else:
        if not args.llama_server or not args.gguf:
            raise InvalidInputError("--launch needs --llama-server BINARY and --gguf MODEL.")
        common = tuple(shlex.split(args.server_args))
        for i, text in enumerate(args.launch):
            name, flags = split_arm_name(text, arm_letter(i))
            try:
                own = tuple(shlex.split(flags))
            except ValueError as exc:
                raise InvalidInputError(f"--launch {text!r}: {exc}.") from None
            arms.append(launched_arm(name, args.llama_server, args.gguf, own, common))
        model_label = str(args.gguf)
    if len({a.name for a in arms}) != len(arms):
        raise InvalidInputError("Two server arms have the same name.",
                                "Name them: --server A=URL --server B=URL.")
    return BenchPlan(engine=SERVER_ENGINE, model=model_label, arms=tuple(arms),
                     one_server_at_a_time=args.one_at_a_time, **_prompt_fields(args))


def _engine_for(args, plan):
    """The engine a plan runs on: a server engine here (kept by a grid between its plans,
    its launched servers stopped by the caller), keeping up as many launched llama-servers
    as fit in memory; others are made by the runner."""
    if plan.engine != SERVER_ENGINE:
        return None
    from specdeck.core.servers.engine import ServerEngine

    return ServerEngine(max_servers=_servers_that_fit(plan))


def _servers_that_fit(plan) -> int | None:
    from specdeck.core.servers.llama_server import (
        SERVER_OVERHEAD,
        launch_bytes,
        runs_on_gpu,
        servers_that_fit,
    )

    sizes, on_gpu = [], []
    for arm in plan.arms:
        launch = arm.server.launch if arm.server is not None else None
        if arm.server is not None and arm.server.tabby_launch is not None:
            from specdeck.core.servers.tabby_launch import memory_needed

            sizes.append(memory_needed(arm.server.tabby_launch) + SERVER_OVERHEAD)
            on_gpu.append(True)  # ExLlama runs on CUDA only
        if launch is not None:
            from specdeck.core.llama_flags import DRAFT_MODEL
            from specdeck.core.servers.llama_server import flag_value

            draft = flag_value(tuple(launch.args), *DRAFT_MODEL)
            if not all(Path(f).is_file() for f in (launch.model, draft) if f):
                return None  # the launch reports the missing file
            sizes.append(launch_bytes(launch))  # a -md draft loads beside the target
            on_gpu.append(runs_on_gpu(launch.binary, tuple(launch.args)))
    return servers_that_fit(max(sizes), any(on_gpu)) if sizes else None


# Running -------------------------------------------------------------------------------------
def _bench(args: argparse.Namespace) -> int:
    serving = bool(args.server or args.launch or args.tabby or args.tabby_folder)
    if args.tune and args.sweep_k and not args.launch:
        raise InvalidInputError("--tune and --sweep-k are two ways to pick k; give one.")
    if bool(args.swap_config) != bool(args.swap_model):
        raise InvalidInputError("--swap-config and --swap-model go together: the file and the "
                                "model whose cmd gets the winner.")
    if args.swap_config:
        if not args.apply:
            raise InvalidInputError("--swap-config is where --apply writes; add --apply.")
        from specdeck.core import swap

        swap.load(args.swap_config).model(args.swap_model)  # checked before any run
    if args.apply and args.tabby:
        if args.config is None:
            raise InvalidInputError("--apply with --tabby writes the winning draft into "
                                    "TabbyAPI's config.yml: give it with --config.",
                                    "Pass --config path/to/tabbyAPI/config.yml.")
        from specdeck.core import config

        config.load(args.config)  # a missing or broken file is reported before any work
    if args.apply and not serving and not (args.plan and args.config is None):
        if args.config is None:
            raise InvalidInputError("--apply needs the TabbyAPI config.yml to change.",
                                    "Pass --config path/to/config.yml.")
        from specdeck.core import config

        config.load(args.config)  # a missing or broken file is reported before any work
    plan = build_plan(args)
    if args.apply and plan.engine != SERVER_ENGINE:
        from specdeck.core.bench.sweep import why_not_applicable

        why = why_not_applicable(plan)  # the demo: as the A/B page refuses it
        if why:
            raise InvalidInputError(why, "Leave out --apply: the result names the best "
                                         "setting.")
        if args.config is None:
            raise InvalidInputError("--apply needs the TabbyAPI config.yml to change.",
                                    "Pass --config path/to/config.yml.")
    cancel = threading.Event()
    quiet_library_progress_bars()
    progress = ProgressPrinter(sys.stderr)
    with cancel_on_interrupt(cancel):
        try:
            if plan.engine == SERVER_ENGINE and (args.sweep or args.sweep_k or args.tune):
                return _server_grid(args, plan, progress, cancel)
            if args.sweep:
                raise InvalidInputError("--sweep varies llama-server flags of --launch arms.",
                                        "For local engines use --sweep-k.")
            if args.tune:
                return _tune(args, plan, progress, cancel)
            if args.sweep_k:
                return _sweep(args, plan, progress, cancel)
            return _ab(args, plan, progress, cancel)
        finally:
            progress.close()


def _ab(args, plan, progress, cancel) -> int:
    from specdeck.core.bench.report import (
        markdown_summary,
        report_data,
        save_to_history,
        write_report,
    )
    from specdeck.core.bench.runner import run_plan
    from specdeck.core.bench.summary import summarize

    if args.plan:
        fix = f"Add a drafting arm to {args.plan} (its \"arms\" list), after the reference."
    elif plan.engine == SERVER_ENGINE:
        fix = "Give a second --server or --launch arm."
    else:
        fix = "Add --draft FOLDER and/or --ngram."
    plan.require_comparison(fix)
    if args.apply and plan.engine == SERVER_ENGINE and plan.arms[0].server.managed is None \
            and plan.arms[0].server.tabby is None and not all(a.server.model for a in plan.arms):
        raise InvalidInputError("--apply needs launched arms or a llama-server router's models: "
                                "SpecDeck cannot know the settings of another server.",
                                "Use --launch profiles, or read the winner from the report.")
    engine = _engine_for(args, plan)
    try:
        run = run_plan(plan, engine, on_event=progress, cancel=cancel)
    finally:
        if engine is not None:
            engine.unload()
            for problem in getattr(engine, "restore_problems", ()):
                progress.line(f"warning: {problem}")
    summary = summarize(run)
    written = {}
    if args.report is not None:
        written["report"] = write_report(run, summary, args.report).folder
    if not args.no_history:
        written["history"] = save_to_history(run, summary).folder
    if args.apply:
        from specdeck.core.bench.winner import comparison_standing, pick

        _say_passed_over(summary.comparisons, comparison_standing, lambda c: f"arm {c.arm}",
                         pick(summary.comparisons, comparison_standing))
    if args.apply and plan.engine == SERVER_ENGINE and plan.arms[0].server.tabby is not None:
        from specdeck.core.bench.sweep import plan_apply_draft_name

        best = _best_arm(summary, plan)
        _apply(args, None, planned=plan_apply_draft_name(
            None if best is None else best.server.tabby.draft_model_name, args.config))
    elif args.apply and plan.engine == SERVER_ENGINE and plan.arms[0].server.tabby_launch:
        _apply_tabby_settings(args, plan, _best_arm(summary, plan))
    elif args.apply and plan.engine == SERVER_ENGINE:
        best = _best_arm(summary, plan)
        _apply_flags(args, best, None if best is None else engine.arm_flags(best))
    elif args.apply:
        _apply(args, _best_arm_drafter(summary, plan))
    if args.json:
        write_json(args.json, {**report_data(run, summary), "written": written})
    else:
        sys.stdout.write(markdown_summary(run, summary))
    for what, folder in written.items():
        progress.line(f"{what} saved in {folder}")
    if run.cancelled:
        return EXIT_INTERRUPTED
    if _all_failed(summary, progress):
        return EXIT_ERROR
    diverged = any(c.lossless.diverged for c in summary.comparisons)
    return EXIT_NEGATIVE if diverged else EXIT_OK


def _all_failed(summary, progress) -> bool:
    """Say which arms failed every measured run (--on-error skip: what was skipped must not
    pass as done); True when any did."""
    for name in summary.failed_arms:
        arm = summary.arm(name)
        progress.line(f"error: every measured run of arm {name} failed ({arm.failed_runs} of "
                      f"{arm.failed_runs}): {arm.errors[0]}")
    return bool(summary.failed_arms)


def _best_arm(summary, plan):
    from specdeck.core.bench.winner import best_arm

    name = best_arm(summary)
    return None if name is None else plan.arm(name)


def _say_passed_over(items, standing, name, best) -> None:
    """Before --apply writes the winner (or no draft): which settings measured at least as
    fast cannot be the best, and why (core.bench.winner.passed_over), so that a faster figure
    in the table is never left unexplained beside what is written."""
    from specdeck.core.bench.winner import passed_over, passed_over_text

    _say(passed_over_text(passed_over(items, standing, best), standing, name))


def _say(passed: str) -> None:
    """``passed`` (core.bench.winner.passed_over_text), on stderr, before what --apply writes."""
    if passed:
        sys.stderr.write(f"specdeck: not applied although as fast: {passed}\n")


def _best_arm_drafter(summary, plan):
    best = _best_arm(summary, plan)
    return None if best is None else best.drafter


def _apply_flags(args, arm, flags: tuple[str, ...] | None) -> None:
    """A llama-server winner: into the llama-swap config given (a diff, then saved when
    confirmed), else shown for copying."""
    if not getattr(args, "swap_config", None):
        _show_best_flags(arm, flags)
        return
    if arm is not None and flags is None:
        _show_best_flags(arm, flags)
        return
    from specdeck.core import swap
    from specdeck.core.bench.sweep import BestSettingChange
    from specdeck.core.swap.apply import plan_apply_flags

    change = plan_apply_flags(swap.load(args.swap_config), args.swap_model, flags)
    notes = () if arm is not None else (
        "No setting beat decoding without a draft: the drafting flags are removed.",)
    for warning in change.warnings:
        sys.stderr.write(f"specdeck: warning: {warning}\n")
    _apply(args, None, planned=BestSettingChange(change, notes), target=args.swap_config)


def _show_best_flags(arm, flags: tuple[str, ...] | None) -> None:
    """A llama-server winner is shown for copying: SpecDeck edits TabbyAPI's config.yml, and
    a llama-server's flags live in the user's own command line or llama-swap config."""
    import shlex

    if arm is None:
        sys.stderr.write("specdeck: no setting beat decoding without a draft; nothing to apply.\n")
        return
    if flags is None:
        sys.stderr.write(f"specdeck: best: arm {arm.name}; SpecDeck does not know its server's "
                         "flags, so there is nothing to copy.\n")
        return
    from specdeck.core.servers.llama_server import drafting_flags

    flags = drafting_flags(flags)
    where = f" (router model {arm.server.model})" if arm.server.launch is None else ""
    sys.stderr.write(f"specdeck: best: arm {arm.name}{where}. Its llama-server drafting flags, "
                     f"to copy into your command line, preset or llama-swap cmd:\n"
                     f"  {shlex.join(flags)}\n")


def _sweep(args, plan, progress, cancel) -> int:
    from specdeck.core.bench.sweep import (
        SweepRow,
        SweepSpec,
        plan_apply_best,
        run_sweep,
        sweep_table,
    )

    drafters = _drafters(args, 1, adaptive=False) or [a.drafter for a in plan.arms[1:]]
    spec = SweepSpec(plan, tuple(drafters), ks=parse_k_range(args.sweep_k))
    result = run_sweep(spec, on_event=progress, cancel=cancel)
    if args.apply:
        _say_passed_over(result.rows, SweepRow.standing, lambda r: r.name, result.best)
        _apply(args, None, planned=plan_apply_best(result.best, args.config))
    if _finish(args, "sweep", result, sweep_table(result, markdown=False),
               lambda: sweep_table(result), result.runs, progress):
        return EXIT_ERROR
    return EXIT_INTERRUPTED if result.cancelled and cancel.is_set() else EXIT_OK


def _server_grid(args, plan, progress, cancel) -> int:
    """Launched llama-servers: every drafting arm at every combination of the swept flags
    (--sweep, and k through --sweep-k), each its own A/B against the reference, rendered as
    the hand-made tables are: settings down, suites across, a baseline row."""
    from specdeck.core.bench.grid import run_grid
    from specdeck.core.bench.tables import grid_table
    from specdeck.core.servers.llama_server import check_launch, grid_cells, parse_axis

    launched = [a for a in plan.arms if a.server.launch is not None]
    if len(launched) != len(plan.arms) or len(plan.arms) < 2:
        raise InvalidInputError("A server sweep takes --launch arms: the reference first, then "
                                "the drafting flags to sweep.",
                                'E.g. --launch A= --launch "B=--spec-type ngram-simple".')
    axes = [parse_axis(text) for text in args.sweep]
    ks = parse_k_range(args.sweep_k) if args.sweep_k else ()
    if not axes and not ks and args.tune:

        ks = DEFAULT_KS
    families = [(a.name, a.server.launch) for a in plan.arms[1:]]
    cells = grid_cells(families, axes, ks)
    for cell in cells:  # every cell's flags against the binary before anything starts
        check_launch(tuple(cell.arm.server.launch.args), cell.arm.server.launch.binary)
    progress.line(f"{len(cells)} settings to try, each its own A/B against arm "
                  f"{plan.arms[0].name}" + (" (successive halving)" if args.tune else ""))
    engine = _engine_for(args, plan)
    try:
        result = run_grid(plan, plan.arms[0], cells, engine, progress, cancel, halving=args.tune)
    finally:
        engine.unload()
    if args.apply:
        best = result.best
        _say(result.passed_over(best))
        _apply_flags(args, None if best is None else best.cell.arm,
                     None if best is None else best.cell.arm.server.launch.args)
    if _finish(args, "grid", result, grid_table(result, markdown=False),
               lambda: grid_table(result), result.runs, progress):
        return EXIT_ERROR
    return EXIT_INTERRUPTED if result.cancelled and cancel.is_set() else EXIT_OK


def _tune(args, plan, progress, cancel) -> int:
    from dataclasses import replace

    from specdeck.core.bench.tuner import tune_k

    drafters = _drafters(args, 1, adaptive=False) or [a.drafter for a in plan.arms[1:]]
    if len(drafters) != 1:
        raise InvalidInputError("--tune tunes one drafter at a time.",
                                "Give one --draft FOLDER or --ngram.")
    k_max = parse_k_range(args.sweep_k)[-1] if args.sweep_k else DEFAULT_K_MAX
    result = tune_k(plan, drafters[0], k_max=k_max, on_event=progress, cancel=cancel)
    if args.apply:
        best = None if result.best_k == 0 else replace(drafters[0], num_draft_tokens=result.best_k)
        _apply(args, best)
    best = "no draft" if result.best_k == 0 else f"k={result.best_k}"
    text = (f"Best: {best} ({result.best_speedup:.2f}x measured; the cost model predicted "
            f"k={result.predicted_best_k}). Measured: "
            + ", ".join(f"k={k}: {v:.2f}x" for k, v in sorted(result.measured.items()))
            + f". Spent {result.spent_s:.1f} s generating.\n"
            + "".join(f"Note: {n}\n" for n in result.notes))
    if _finish(args, "tune", result, text, lambda: text, result.runs, progress):
        return EXIT_ERROR
    return EXIT_INTERRUPTED if cancel.is_set() else EXIT_OK


def _apply_tabby_settings(args, plan, best) -> None:
    """Started TabbyAPI arms: the winner's draft settings into the install's config.yml (or
    --config); when no drafting arm won, the reference's (drafting off)."""
    from specdeck.core.bench.sweep import BestSettingChange
    from specdeck.core.servers.tabby_launch import plan_apply_settings

    launch = (best or plan.arms[0]).server.tabby_launch
    target = args.config or launch.config
    notes = () if best is not None else ("No drafting arm beat decoding without a draft: "
                                         "drafting is switched off.",)
    _apply(args, None, planned=BestSettingChange(plan_apply_settings(launch.draft, target),
                                                 notes), target=target)


def _apply(args, drafter, planned=None, target=None) -> None:
    """Show the config diff on stderr and save it when confirmed (--yes or a y answer)."""
    from specdeck.core.bench.sweep import apply_best, plan_apply_setting

    planned = planned or plan_apply_setting(drafter, args.config)
    target = target or args.config
    err = sys.stderr
    for note in planned.notes:
        err.write(f"specdeck: {note}\n")
    if planned.is_noop:
        err.write(f"specdeck: {target} already has the best setting.\n")
        return
    err.write(planned.diff)
    if not args.yes:
        if not sys.stdin.isatty():
            raise InvalidInputError(
                f"Not saved: SpecDeck writes {Path(target).name} only when confirmed.",
                "Re-run with --yes to save the best setting.")
        err.write(f"Save to {target}? [y/N] ")
        err.flush()
        if input().strip().lower() not in ("y", "yes"):
            err.write("specdeck: not saved.\n")
            return
    saved = apply_best(planned)
    backup = f" (previous version: {saved.backup})" if saved.backup else ""
    err.write(f"specdeck: saved {saved.path}{backup}.\n")


def _finish(args, name: str, result, text: str, markdown, runs, progress) -> bool:
    """A sweep's, grid's or tuner's result: its table on stdout (on stderr when --json - takes
    stdout), the JSON, and with --report the table, the JSON and every run's own report.
    True when an arm of one of its runs failed every measured run."""
    if args.report is not None:
        from specdeck.core.bench.report import write_table_report

        folder = write_table_report(args.report, name, result, markdown(), runs)
        progress.line(f"report saved in {folder}")
    if args.json:
        write_json(args.json, result)
    (sys.stderr if args.json == "-" else sys.stdout).write(text)
    from specdeck.core.bench.summary import summarize

    return any([_all_failed(summarize(run), progress) for run in runs])


class ProgressPrinter:
    """Runner events on stderr: stages once each, then each finished run with its arm's
    running paired speed-up. On a terminal the runs fill a tqdm bar (runs done of all, time
    left, the last run's figures) with the stages printed above it; elsewhere (logs, CI) one
    line per run. The figures are the A/B page's: both render ``core.bench.live.LivePlan``."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.live = bool(getattr(stream, "isatty", lambda: False)())
        self._last_stage = ""
        self._bar = None
        self.plan_state = None
        """The current plan's core.bench.live.LivePlan (a sweep or the tuner runs several)."""

    def line(self, text: str) -> None:
        if self._bar is not None:
            self._bar.write(f"specdeck: {text}", file=self.stream)
            return
        self.stream.write(f"specdeck: {text}\n")
        self.stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __call__(self, event: Any) -> None:
        from specdeck.core.bench.live import LivePlan
        from specdeck.core.bench.runner import PlanStarted, RunFinished, Stage

        if isinstance(event, PlanStarted):
            self.plan_state = LivePlan(event.plan)
            self.close()  # a new plan, a new bar (a warm server's warm-ups are skipped)
        changed = self.plan_state.apply(event) if self.plan_state is not None else []
        if isinstance(event, Stage):
            if event.text != self._last_stage:
                self._last_stage = event.text
                self.line(event.text)
        elif isinstance(event, RunFinished):
            text = self._run_text(event)
            text += "".join(f" | {figure}" for figure in self._figures(changed))
            if not self.live:
                self.line(f"[{event.record.slot.index + 1}/{event.total}] {text}")
                return
            from tqdm import tqdm

            if self._bar is None or self._bar.total != event.total:
                self.close()
                self._bar = tqdm(total=event.total, unit="run", file=self.stream,
                                 dynamic_ncols=True, desc="runs", leave=True)
            self._bar.update(1)
            self._bar.set_postfix_str(text)
            if event.record.error:
                self.line(text)
            if self._bar.n >= self._bar.total:
                self.close()  # before the results are printed

    def _figures(self, changed: list[int]) -> list[str]:
        """The running figures of the drafting arms that ``changed`` paired a run of (a run
        whose reference has not finished yet changes nothing)."""
        state = self.plan_state
        if state is None:
            return []
        arms = dict.fromkeys(state.rows[i].record.arm for i in changed
                             if state.rows[i].output is not None)
        return [state.arm_so_far(arm).to_text(state.reference) for arm in arms]

    @staticmethod
    def _run_text(event) -> str:
        record = event.record
        s = record.result.stats
        slot = record.slot
        kind = "warm-up" if slot.warmup else f"repeat {slot.repeat + 1}"
        if record.error:
            return f"{slot.arm.label} | {slot.prompt.id} {kind}: FAILED, skipped: {record.error}"
        server = record.result.server
        acceptance = "" if s.acceptance_rate is None else f", acceptance {s.acceptance_rate:.0%}"
        if getattr(server, "acceptance_problem", ""):
            acceptance = f", acceptance not usable: {server.acceptance_problem}"
        stopped = "" if record.complete else " (stopped)"
        speed = f"{s.tokens_per_second:.1f} tok/s" if s.decode_s > 0 else \
            f"speed not usable: {getattr(server, 'speed_problem', '') or 'nothing measured'}"
        said = (getattr(server, "acceptance_problem", ""), getattr(server, "speed_problem", ""))
        notes = "".join(f"; note: {n}" for n in (*getattr(server, "lost", ()),
                                                   *getattr(server, "problems", ()))
                        if not any(n in text for text in said))
        return f"{slot.arm.label} | {slot.prompt.id} {kind}: {speed}{acceptance}{stopped}{notes}"
