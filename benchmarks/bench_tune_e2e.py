"""`specdeck tune --budget 8m --yes` end to end, on the demo and on a user's llama-swap config.yaml, against an exhaustive grid on held-out prompts

Goal (issue 46, after issue 27's 10 minutes): on this 2-core machine the command (real
llama-server, the demo GGUF, the n-gram types its `--help` lists and a draft GGUF that the
local test Hub serves) finishes within 120 s of wall clock, predicting every setting from one
plain run and measuring only the best predicted, with no more llama-servers started than
drafters plus two, and its winner is within 3% of the best setting that an exhaustive sweep
of the grid measures on the held-out prompts (the grid of every candidate's k values, and the
tune's own pick where the replay chose a setting outside it: another lookup length).

Two scenarios, the same budget, prompts and Hub, each tune a first one (its own empty
SPECDECK_HOME: no prediction history, nothing of the other's):

- **demo**: `specdeck tune --demo --llama-server BIN --budget 8m --yes --endpoint HUB
  --download-dir DIR --json FILE -- -t 1`;
- **llama-swap**: `specdeck tune --swap-config config.yaml --model smol ...`, on a
  config.yaml written as a user writes one (:data:`USER_CONFIG`: comments, a macro holding
  the binary, ``--host`` and ``--port ${PORT}``, the model's cmd as a literal block with
  ``-t 1``, an alias, another model), checked against llama-swap's own schema. The tune takes
  the binary, the model and ``-t 1`` from the cmd and restarts llama-server through it for
  every setting. Its config.yaml must come out untouched (no winner) or changed only in that
  cmd's drafting flags, with a .bak of the bytes before: the bytes outside the cmd are
  compared, and the cmd's other arguments. A winner written is proved by a llama-server
  started from the file: that start is shown beside the tune's own count, which the goal
  of drafters plus two is about.

Both run as a user runs them, in a subprocess. The Hub (tests/hubserver.py, a real HTTP
server on 127.0.0.1 speaking the Hub's API) holds one repository of the demo model's family:
the demo GGUF requantized to Q4_0 and Q8_0 by the pinned build's llama-quantize, so the tune
finds it by family, checks its tokenizer from the header, picks a quantization and downloads
it (verified) before searching, where it predicts it worth it. Both download into the same
folder, so the second finds on disk what the first downloaded. Wall clock counts all of it.

Then, in this process, every setting of the grid (the tune's own candidates, a downloaded
draft included) runs on the tune's held-out prompts with repeats (no halving): the
exhaustive grid, once for every scenario whose setup is the same server, model and flags
(the llama-swap cmd's are the demo's: one grid; a scenario whose are not gets its own). Each
tune's pick is judged by the grid: its figure there against the grid's best (and no drafting
counts as a setting of 1.00x: a tune that keeps no drafting is right when nothing beats it).
The grid's best is the largest of many noisy figures and flatters itself, so where the two
differ a referee runs both side by side with no drafting (interleaved, more repeats) and the
pick is judged by its speed-up over the grid's best's; picks the scenarios share are
refereed once.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from specdeck.core.engines import SERVER_ENGINE
from specdeck.core.units import format_bytes

from benchmarks.bench_tune_search import referee
from benchmarks.report import Report

ROOT = Path(__file__).resolve().parents[1]
BUDGET = "8m"
GOAL_WALL_S = 120.0
GOAL_QUALITY = 0.97
GRID_REPEATS = 2
REFEREE_REPEATS = 16
"""The referee's repeats of the 5 held-out prompts: 80 pairs, so that its head-to-head
interval (about +-2.5% on this machine) can tell a 3% miss from a tie. At 8 repeats (40
pairs, 2026-11-27) it read 96.9% with an interval of 93.4-101.6%: no verdict either way."""
REPO = "benchorg/SmolLM2-135M-Instruct-GGUF"
FLAGS = ("-t", "1")
"""One thread (since 2026-11-28): on this 2-core machine, shared by several agents' tests,
llama-server's two threads spin against each other (9 tok/s where one thread decodes 81,
load 6). The runs before used the default of two threads."""
DEMO, SWAP = "demo", "llama-swap"
SCENARIOS = (DEMO, SWAP)
SWAP_MODEL = "smol"
USER_CONFIG = """\
# llama-swap config for this box
# yaml-language-server: $schema=https://raw.githubusercontent.com/mostlygeek/llama-swap/refs/heads/main/config-schema.json
healthCheckTimeout: 120
logLevel: info

macros:
  # one llama-server build for every model; llama-swap chooses the port
  "server": >-
    {binary}
    --host 127.0.0.1
    --port ${{PORT}}

models:
  # the small one, for quick questions (one thread: this box is shared)
  "{model}":
    cmd: |
      ${{server}}
      -m {gguf}
      {flags}
    ttl: 300
    aliases:
      - "quick"

  "embed":
    # embeddings for my notes
    cmd: ${{server}} -m /models/nomic-embed-text-v1.5.Q8_0.gguf --embedding -t 1
    unlisted: true
"""
"""The llama-swap scenario's config.yaml, as a user writes one (the demo's flags in the
cmd, so that its setup is the demo's and the grid is shared)."""


@dataclass
class Tuned:
    """One scenario's tune, as it ran."""

    name: str
    setup: object
    """core.tune.setup.Setup, read here before the tune: what the grid is built from."""
    command: list[str]
    load: tuple[float, float, float]
    wall_s: float = 0.0
    exit_code: int = 0
    result: dict = field(default_factory=dict)
    """The tune's --json."""
    config: dict | None = None
    """llama-swap: what became of the user's config.yaml (:func:`config_outcome`)."""
    config_text: str = ""

    @property
    def decision(self) -> dict:
        return self.result["decision"]

    @property
    def flags(self) -> tuple[str, ...]:
        """The drafting flags of the setting the search handed to verification (empty:
        none reached it)."""
        return tuple(self.decision["flags"] or ())


def run(report: Report) -> None:
    measure(report)


def measure(report: Report, scenarios: tuple[str, ...] = SCENARIOS, budget: str = BUDGET,
            grid_repeats: int = GRID_REPEATS, referee_repeats: int = REFEREE_REPEATS) -> None:
    """The benchmark, for ``scenarios`` (a shorter ``budget`` and fewer repeats check the
    code; `make bench` runs the defaults)."""
    from specdeck.core.tune import setup as tune_setup

    from tools.llama_server_build import build

    binary = build()
    demo = tune_setup.demo(binary, FLAGS)
    load = os.getloadavg()
    report.record("load_average_at_start", load)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        files = {"README.md": b"# SmolLM2-135M-Instruct GGUF (benchmark)\n"}
        for quant in ("Q4_0", "Q8_0"):
            out = tmp / f"SmolLM2-135M-Instruct-{quant}.gguf"
            subprocess.run([str(binary.parent / "llama-quantize"), "--allow-requantize",
                            str(demo.target), str(out), quant], check=True,
                           capture_output=True, timeout=300)
            files[out.name] = out.read_bytes()
        sys.path.insert(0, str(ROOT / "tests"))
        from hubserver import FakeHub, FakeRepo

        library = tmp / "library"
        tuned = []
        with FakeHub([FakeRepo(REPO, {"main": files}, tags=("gguf", "llama"),
                               downloads=100)]) as hub:
            common = ["--budget", budget, "--yes", "--endpoint", hub.url,
                      "--download-dir", str(library)]
            for name in scenarios:
                folder = tmp / name
                folder.mkdir()
                if name == DEMO:
                    tuned.append(_tune(name, demo, [
                        "--demo", "--llama-server", str(binary), *common,
                        *_outputs(folder), "--", *FLAGS], folder, budget))
                else:
                    config = folder / "config.yaml"
                    text = user_config(binary, demo.target)
                    config.write_text(text, encoding="utf-8")
                    setup = tune_setup.from_swap(config, SWAP_MODEL)
                    one = _tune(name, setup, ["--swap-config", str(config), "--model",
                                              SWAP_MODEL, *common, *_outputs(folder)],
                                folder, budget)
                    one.config = config_outcome(config, text.encode("utf-8"), SWAP_MODEL,
                                                one.decision)
                    one.config_text = text.replace(str(binary), "LLAMA_SERVER").replace(
                        str(demo.target), "DEMO_GGUF")
                    tuned.append(one)
        for one in tuned:
            _record(report, one, tmp)
        judged, grids = _judge_all(report, tuned, library, grid_repeats, referee_repeats)
    _write(report, tuned, judged, grids, load, budget, grid_repeats, referee_repeats)


def user_config(binary: Path, gguf: Path, flags: tuple[str, ...] = FLAGS) -> str:
    """:data:`USER_CONFIG` for this machine's llama-server and the demo GGUF, checked against
    llama-swap's own schema (tests/data/fixtures/llama-swap, its commit in SOURCE.txt): a
    file llama-swap would refuse is no user's."""
    import jsonschema
    from specdeck.core.config.document import parse_values

    text = USER_CONFIG.format(binary=binary, gguf=gguf, flags=shlex.join(flags),
                              model=SWAP_MODEL)
    schema = json.loads((ROOT / "tests" / "data" / "fixtures" / "llama-swap" /
                         "config-schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft7Validator(schema).validate(parse_values(text))
    return text


def _outputs(folder: Path) -> list[str]:
    return ["--json", str(folder / "tune.json"), "--report", str(folder / "report")]


def _tune(name: str, setup, args: list[str], folder: Path, budget: str) -> Tuned:
    """``specdeck tune ARGS`` in a subprocess, as a first tune: its own SPECDECK_HOME."""
    command = [sys.executable, "-m", "specdeck", "tune", *args]
    env = dict(os.environ, PYTHON_KEYRING_BACKEND="keyring.backends.null.Keyring",
               SPECDECK_HOME=str(folder / "home"))
    one = Tuned(name, setup, command, os.getloadavg())
    print(f"   {time.strftime('%H:%M:%S')} {name}: specdeck tune (budget {budget}), load "
          f"{one.load[0]:.1f}", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True,
                          timeout=max(2 * GOAL_WALL_S, 4 * _seconds(budget)))
    one.wall_s = time.monotonic() - t0
    one.exit_code = done.returncode
    out_json = folder / "tune.json"
    if done.returncode not in (0, 1) or not out_json.exists():
        raise RuntimeError(f"specdeck tune ({name}) exited {done.returncode}: "
                           f"{done.stderr[-2000:]}")
    one.result = json.loads(out_json.read_text())
    return one


def _seconds(budget: str) -> float:
    from specdeck.core.cli.tune_cmd import duration

    return duration(budget)


def config_outcome(path: Path, before: bytes, model: str, decision: dict) -> dict:
    """What the tune did to the user's config.yaml: ``ok`` when it is untouched with no .bak
    beside it, or changed only in ``model``'s cmd (every byte outside that cmd's scalar as it
    was), only in the cmd's drafting flags (every other argument as it was, in order), to
    the decision's flags, with a .bak holding the bytes before; a file rolled back is its
    bytes before, with the .bak."""
    from specdeck.core import swap
    from specdeck.core.servers.llama_server import drafting_flags
    from specdeck.core.tune.setup import strip_drafting

    after = path.read_bytes()
    backup = path.with_name(path.name + ".bak")
    backup_ok = backup.is_file() and backup.read_bytes() == before
    if after == before:
        return {"changed": False, "backup": backup.is_file(), "backup_holds_before": backup_ok,
                "ok": not backup.is_file() or backup_ok,
                "what": "untouched" + (" (written and rolled back; the .bak holds the bytes "
                                       "before)" if backup.is_file() else ", no .bak")}
    old_text, new_text = before.decode("utf-8"), after.decode("utf-8")
    old, new = swap.from_text(old_text).model(model), swap.from_text(new_text).model(model)
    outside = (old_text[:old.span[0]] == new_text[:new.span[0]]
               and old_text[old.span[1]:] == new_text[new.span[1]:])
    others_kept = strip_drafting(old.argv) == strip_drafting(new.argv)
    written = drafting_flags(new.flags)
    as_decided = written == tuple(decision["flags"] or ())
    ok = outside and others_kept and as_decided and backup_ok and bool(decision["apply"])
    return {"changed": True, "outside_cmd_unchanged": outside,
            "other_arguments_unchanged": others_kept, "drafting_flags_written": list(written),
            "as_decided": as_decided, "backup_holds_before": backup_ok, "ok": ok,
            "what": (f"written: {model}'s cmd now drafts with `{shlex.join(written)}`"
                     f"{'' if as_decided else ' (NOT the verified flags)'}; bytes outside the cmd "
                     f"{'unchanged' if outside else 'CHANGED'}; the cmd's other arguments "
                     f"{'unchanged' if others_kept else 'CHANGED'}; .bak "
                     f"{'holds the bytes before' if backup_ok else 'MISSING or different'}")}


def _record(report: Report, one: Tuned, tmp: Path) -> None:
    result = one.result
    prefix = f"{one.name}."
    report.record(prefix + "command", " ".join(one.command[1:]).replace(str(tmp), "TMP"))
    report.record(prefix + "load_average_at_start", one.load)
    for key in ("phase_s", "decision", "downloads", "servers_started",
                "servers_started_to_prove"):
        report.record(prefix + key, result.get(key))
    report.record(prefix + "wall_s", one.wall_s)
    report.record(prefix + "exit_code", one.exit_code)
    report.record(prefix + "tune_search", result["search"])  # its rounds, rows and notes
    report.record(prefix + "setup_flags", (result.get("setup") or {}).get("flags"))
    if one.config is not None:
        report.record(prefix + "config", one.config)
        report.record(prefix + "config_text", one.config_text)


def _grid_key(setup) -> tuple:
    return (setup.binary, str(setup.target), setup.common)


def _judge_all(report: Report, tuned: list[Tuned], library: Path, grid_repeats: int,
               referee_repeats: int) -> tuple[dict, dict]:
    """Each scenario's pick judged by the exhaustive grid of its setup (one grid per distinct
    server, model and flags) and, where it is not the grid's best, by the referee (one run
    per distinct pick of a grid)."""
    from specdeck.core.bench.grid import run_grid

    groups: dict[tuple, list[Tuned]] = {}
    for one in tuned:
        groups.setdefault(_grid_key(one.setup), []).append(one)
    judged, grids = {}, {}
    for key, members in groups.items():
        setup = members[0].setup
        base, cells, engine = _grid_plan(setup, library, [m.flags for m in members],
                                         grid_repeats)
        refereed: dict[tuple[str, ...], dict | None] = {}
        try:
            t0 = time.monotonic()
            grid = run_grid(base, base.arms[0], cells, engine, _progress(), halving=False)
            grid_s = time.monotonic() - t0
            grids[key] = {"grid": grid, "seconds": grid_s, "cells": len(cells),
                          "scenarios": [m.name for m in members]}

            def judge(flags: tuple[str, ...]) -> dict | None:
                if flags not in refereed:
                    pick = _row_of(grid, flags)
                    refereed[flags] = referee(base, grid.best, pick, engine, referee_repeats)
                return refereed[flags]

            for one in members:
                judged[one.name] = _verdict(one, grid, judge)
        finally:
            engine.unload()
        report.record("grids", [{"scenarios": g["scenarios"], "grid": g["grid"].to_json(),
                                 "grid_s": g["seconds"]} for g in grids.values()])
    for one in tuned:
        report.record(f"{one.name}.judged", {k: v for k, v in judged[one.name].items()
                                            if k != "pick_row"})
    return judged, grids


def _grid_plan(setup, library: Path, picks: list[tuple[str, ...]], repeats: int):
    """The grid's base plan, its cells (every candidate's k values and each pick outside
    them) and the engine, for ``setup``."""
    from specdeck.core.bench.grid import Cell
    from specdeck.core.bench.plan import Arm, BenchPlan
    from specdeck.core.servers.arms import ServerArm
    from specdeck.core.servers.engine import ServerEngine
    from specdeck.core.servers.llama_server import (
        LaunchProfile,
        binary_help,
        drafter_from_flags,
        drafting_flags,
        servers_that_fit,
    )
    from specdeck.core.tune import hub as tune_hub
    from specdeck.core.tune.candidates import draft_files, find_candidates
    from specdeck.core.tune.llama_server import candidate_cells, reference_arm
    from specdeck.core.tune.run import TuneOptions, split_prompts

    info = binary_help(setup.binary)
    drafts = draft_files(setup, tune_hub.library_folders(library))
    found = find_candidates(setup, info.spec_types, drafts)
    cells = [cell for c in found.found for cell in candidate_cells(setup, c)]
    for n, chosen in enumerate(dict.fromkeys(p for p in picks if p)):
        if all(drafting_flags(c.arm.server.launch.args) != chosen for c in cells):
            args = setup.common + chosen  # the replay's pick, outside the k grid
            cells.append(Cell(Arm(f"tune_pick{n}", drafter_from_flags(args, info),
                                  ServerArm(launch=LaunchProfile(setup.binary,
                                                                 str(setup.target), args))),
                              "the tune's pick: " + " ".join(chosen)))
    options = TuneOptions()
    _, held_out = split_prompts(options)
    base = BenchPlan(engine=SERVER_ENGINE, model=str(setup.target),
                     arms=(reference_arm(setup),),
                     suites=options.suites, prompt_ids=held_out,
                     max_new_tokens=options.max_new_tokens, repeats=repeats, warmup=1,
                     warmup_tokens=8, apply_chat_template=True, stop_on_eos=False)
    engine = ServerEngine(max_servers=servers_that_fit(
        setup.facts.weight_bytes + max((c.draft_bytes for c in found.found), default=0)))
    return base, cells, engine


def _row_of(grid, flags: tuple[str, ...]):
    """The grid's row of the setting with these drafting flags (None: no drafting)."""
    from specdeck.core.servers.llama_server import drafting_flags

    return next((r for r in grid.rows
                 if flags and drafting_flags(r.cell.arm.server.launch.args) == flags), None)


def _verdict(one: Tuned, grid, judge) -> dict:
    """``one``'s pick against ``grid``'s best: the setting it keeps (written, or no drafting)
    and the search's finalist (what verification judged; none when no setting reached it)."""
    decision = one.decision
    pick = _row_of(grid, one.flags)
    finalist = judge(one.flags) if one.flags else None
    kept = judge(one.flags) if decision["apply"] else judge(())
    # No drafting is the 1.00x setting: a tune that keeps it is judged by the referee
    # against the grid's best (at most 1: a best slower than no drafting makes it right).
    if kept is None:
        quality = None
    else:
        quality = kept["quality"] if decision["apply"] else min(1.0, kept["quality"])
    label = "no drafting" if not decision["apply"] else (
        pick.cell.label if pick else " ".join(one.flags))
    return {"kept": label, "kept_referee": kept, "quality": quality,
            "finalist": (pick.cell.label if pick else " ".join(one.flags)) if one.flags
            else None,
            "finalist_referee": finalist,
            "finalist_quality": finalist["quality"] if finalist else None,
            "met": {"wall_clock": one.wall_s <= GOAL_WALL_S,
                    "quality": quality is not None and quality >= GOAL_QUALITY,
                    "servers": (one.result.get("servers_started") or 0)
                    <= len(one.result["tried"]) + 2,
                    **({"config": one.config["ok"]} if one.config is not None else {})}}


def _write(report: Report, tuned: list[Tuned], judged: dict, grids: dict, load, budget: str,
           grid_repeats: int, referee_repeats: int) -> None:
    from specdeck.core.bench.grid import ALL
    from specdeck.core.bench.tables import grid_table

    report.text(f"Load average at the start: {load[0]:.1f} on {os.cpu_count()} cores "
                + "(" + ", ".join(f"{one.name} tune: {one.load[0]:.1f}" for one in tuned)
                + "). Each tune is a first tune: its own empty SPECDECK_HOME, no prediction "
                "history.")
    report.text("")
    for one in tuned:
        grid = grids[_grid_key(one.setup)]["grid"]
        _scenario_table(report, one, judged[one.name], grid.best, load, budget,
                        referee_repeats)
    for key, g in grids.items():
        grid = g["grid"]
        report.text(f"### The exhaustive grid on the held-out prompts ({g['cells']} settings, "
                    f"{grid_repeats} repeats, {g['seconds']:.0f} s; it judges "
                    f"{' and '.join(g['scenarios'])}: `{shlex.join(key[2])}`)")
        report.text("")
        report.text(grid_table(grid))
        baseline = grid.baseline.get(ALL)
        report.text("")
        report.text(f"No draft: {baseline:.1f} tok/s." if baseline else "No draft: -")
        report.text("")


def _scenario_table(report: Report, one: Tuned, verdict: dict, best, load, budget: str,
                    referee_repeats: int) -> None:
    result, decision = one.result, one.decision
    title = ("`specdeck tune --demo`" if one.name == DEMO else
             f"`specdeck tune --swap-config config.yaml --model {SWAP_MODEL}` (llama-swap)")
    report.text(f"### {title}, budget {budget}")
    report.text("")
    report.text(f"Command: `{report.results[one.name + '.command']}`.")
    report.text("")
    if one.config_text:
        report.text("The user's config.yaml (valid against llama-swap's schema; LLAMA_SERVER "
                    "and DEMO_GGUF stand for the pinned build and the demo's GGUF):")
        report.text("")
        report.text("```yaml\n" + one.config_text.rstrip() + "\n```")
        report.text("")
    met = verdict["met"]
    started = result.get("servers_started") or 0
    proof = result.get("servers_started_to_prove") or 0
    drafters = len(result["tried"])
    phases = ", ".join(f"{k} {v:.0f} s" for k, v in result["phase_s"].items())
    kept_ref, finalist = verdict["kept_referee"], verdict["finalist_referee"]
    quality, finalist_q = verdict["quality"], verdict["finalist_quality"]
    rows = [
        ["load average at the start of the tune", f"{one.load[0]:.1f} on {os.cpu_count()} "
         f"cores (the benchmark's: {load[0]:.1f})", "", ""],
        ["wall clock of the command", f"{one.wall_s:.0f} s ({phases})",
         f"<= {GOAL_WALL_S:.0f} s", _yes(met["wall_clock"])],
        ["llama-servers the command started", f"{started} ({drafters} drafters)" + (
            f", and {proof} to prove the written file" if proof else ""),
         f"<= {drafters + 2} (the tune's)", _yes(met["servers"])],
        ["flags every setting kept", "`" + shlex.join(one.setup.common) + "`"
         + (" (from the cmd)" if one.name == SWAP else ""), "", ""],
        ["the tune's choice", f"{verdict['kept']} ({decision['why']})", "", ""],
        ["the exhaustive grid's best (held-out prompts)",
         "none beats no drafting" if best is None else f"{best.cell.label} {best.score:.2f}x",
         "", ""],
        ["the choice against the grid's best",
         "-" if quality is None else f"{quality:.1%}"
         + (f" (referee, {referee_repeats} repeats: {kept_ref['cell']})" if kept_ref else ""),
         f">= {GOAL_QUALITY:.0%}", _yes(met["quality"])],
        ["the search's finalist (what verification then judged) against the grid's best",
         "none: no setting reached verification" if verdict["finalist"] is None else
         f"{verdict['finalist']}: {finalist_q:.1%} (referee, {referee_repeats} repeats: "
         f"{finalist['cell']})", f">= {GOAL_QUALITY:.0%}",
         "-" if finalist_q is None else _yes(finalist_q >= GOAL_QUALITY)],
    ]
    if one.config is not None:
        rows.append(["the user's config.yaml", one.config["what"],
                     "untouched, or only the cmd's drafting flags with a .bak",
                     _yes(met["config"])])
    report.table(["what", "measured", "goal", "met"], rows)
    search = result["search"] or {}
    if search.get("notes"):
        report.text("The tune's search: " + " ".join(search["notes"]))
        report.text("")
    downloads = result["downloads"]
    report.text("Downloads: " + ("; ".join(
        f"{d['repo_id']} {d['file']}: {d['status']} ({format_bytes(d['bytes'])} in "
        f"{d['seconds']:.1f} s)" for d in downloads) if downloads else "none") + ".")
    report.text("")


def _yes(met: bool) -> str:
    return "yes" if met else "NO"


def _progress():
    from benchmarks.bench_tune_search import _progress as progress

    return progress("grid")
