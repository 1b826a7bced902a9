"""`specdeck tune`'s search against the exhaustive grid, on a real llama-server

Goals (issue 27): on each of three suites, the search's pick is within 3% of the best setting
of an exhaustive grid of the same settings, in at most a third of the grid's time; and every
candidate's predicted speed-up is set beside what was measured (goal: within 15%).

The setup is `specdeck tune --demo`'s: the pinned llama-server serving the demo GGUF
(SmolLM2-135M-Instruct Q4_1, 2 threads), the candidates its `--help` offers (each n-gram spec
type; draft-simple with the same model requantized to Q4_0 by llama-quantize, as a draft GGUF on
disk would be), each at the k values the tuner searches. Per suite, one plan (the suite's
prompts, greedy, fixed length, several repeats) runs twice from cold servers: every setting on
the full plan (the exhaustive grid), and the tuner's successive halving (core.bench.grid with
halving; the finalist rule of core.tune.run). Time is wall clock, server starts included (both
start every setting's server once). The exhaustive grid's best is the largest of many noisy
figures and flatters itself, so where the two picks differ a referee runs both side by side
with no drafting (interleaved, more repeats) and the search's pick is judged by its speed-up
over the grid pick's. Predictions are the tuner's prior (theory, no history), against each
candidate's best setting in the exhaustive grid; and, beside them, what a later tune on the same
prompts predicts: the search's own measurements recorded as the tuner records them (run.remember,
with the prompts' digest) and read back by predict, against the grid's, an independent
measurement of the same prompts.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.report import Report

SUITES = ("grounded", "code", "structured")
MAX_NEW = 32
REPEATS = 3
REFEREE_REPEATS = 8
FLAGS = ("-t", "2", "-c", "2048")
GOAL_QUALITY = 0.97
GOAL_TIME = 1 / 3
GOAL_PREDICTION = 0.15


def run(report: Report) -> None:
    from specdeck.core.bench.grid import ALL, run_grid
    from specdeck.core.bench.plan import BenchPlan
    from specdeck.core.bench.runner import choose_prompts
    from specdeck.core.engines import SERVER_ENGINE
    from specdeck.core.servers.engine import ServerEngine
    from specdeck.core.servers.llama_server import binary_help, servers_that_fit
    from specdeck.core.tune import setup as tune_setup
    from specdeck.core.tune.candidates import find_candidates
    from specdeck.core.tune.llama_server import candidate_cells, reference_arm
    from specdeck.core.tune.predict import predict, read_history
    from specdeck.core.tune.run import TuneOptions, _tried, finalist, prompt_set, remember

    from tools.llama_server_build import build

    binary = build()
    setup = tune_setup.demo(binary, FLAGS)
    with tempfile.TemporaryDirectory() as tmp:
        draft = Path(tmp) / "SmolLM2-135M-Instruct.Q4_0.gguf"
        subprocess.run([str(binary.parent / "llama-quantize"), "--allow-requantize",
                        str(setup.target), str(draft), "Q4_0"], check=True,
                       capture_output=True, timeout=300)
        found = find_candidates(setup, binary_help(binary).spec_types, [draft])
        predicted = [(c, predict(c, setup, "cpu", history=[])) for c in found.found]
        cells = [cell for c, _ in predicted for cell in candidate_cells(setup, c)]
        load = os.getloadavg()
        report.text(f"{len(cells)} settings ({len(predicted)} candidates: "
                    + ", ".join(c.label for c, _ in predicted)
                    + f"); per suite every prompt, {MAX_NEW} new tokens, {REPEATS} repeats; "
                    f"the referee runs {REFEREE_REPEATS} repeats. Load average at the start: "
                    f"{load[0]:.1f} on {os.cpu_count()} cores (whatever else ran on "
                    "this machine: the noise the tuner must cope with).")
        report.text("")
        engine = ServerEngine(max_servers=servers_that_fit(
            setup.facts.weight_bytes + max(c.draft_bytes for c, _ in predicted)))
        per_suite, rows, errors, later = {}, [], {}, {}
        try:
            for index, suite in enumerate(SUITES):
                base = BenchPlan(engine=SERVER_ENGINE, model=str(setup.target),
                                 arms=(reference_arm(setup),), suites=(suite,),
                                 max_new_tokens=MAX_NEW, repeats=REPEATS, warmup=1,
                                 warmup_tokens=8, apply_chat_template=True, stop_on_eos=False)
                timed = {}
                # Alternate which goes first, so a drift in the machine's load favours neither.
                for kind in (("grid", "search") if index % 2 == 0 else ("search", "grid")):
                    engine.unload()
                    t0 = time.monotonic()
                    timed[kind] = run_grid(base, base.arms[0], cells, engine, _progress(kind),
                                           halving=kind == "search")
                    timed[kind + "_s"] = time.monotonic() - t0
                grid, search = timed["grid"], timed["search"]
                best = grid.best
                pick, noise_share = finalist(search)
                by_arm = {r.cell.arm.name: r for r in grid.rows}
                in_grid = (by_arm[pick.cell.arm.name].score / best.score
                           if pick is not None and best is not None else None)
                judged = referee(base, best, pick, engine)
                quality = judged["quality"] if judged else None
                time_ratio = timed["search_s"] / timed["grid_s"]
                met = quality is not None and quality >= GOAL_QUALITY and time_ratio <= GOAL_TIME
                # A later tune on these prompts: the search's measurements as its history.
                prompts = prompt_set(TuneOptions(suites=(suite,), max_new_tokens=MAX_NEW))
                history = Path(tmp) / f"history-{suite}.jsonl"
                every = [p.id for p in choose_prompts(base)]
                remember(setup, [_tried(c, p, search, every) for c, p in predicted], "cpu",
                         history, prompts=prompts)
                for candidate, prediction in predicted:
                    tried = _tried(candidate, prediction, grid)
                    if tried.error is not None:
                        errors.setdefault(candidate.label, []).append(
                            (suite, prediction.speedup, tried.measured, tried.error,
                             prediction.low, prediction.high))
                        again = predict(candidate, setup, "cpu", read_history(history), prompts)
                        later.setdefault(candidate.label, []).append(
                            (suite, again.speedup, tried.measured, again.error(tried.measured),
                             again.source, again.low, again.high))
                per_suite[suite] = {
                    "grid": grid.to_json(), "search": search.to_json(),
                    "grid_s": timed["grid_s"], "search_s": timed["search_s"],
                    "grid_best": None if best is None else best.cell.label,
                    "grid_best_speedup": None if best is None else best.score,
                    "search_pick": None if pick is None else pick.cell.label,
                    "pick_in_grid": in_grid, "noise_share": noise_share, "referee": judged,
                    "quality": quality, "time_ratio": time_ratio, "met": met}
                rows.append([
                    suite, best.cell.label if best else "none beats no draft",
                    f"{best.score:.2f}x" if best else "-",
                    pick.cell.label if pick else "none", "-" if in_grid is None
                    else f"{in_grid:.1%}", judged["cell"] if judged else "-",
                    f"{noise_share:.1%}",
                    f"{timed['search_s']:.0f} s of {timed['grid_s']:.0f} s ({time_ratio:.0%})",
                    "yes" if met else "NO"])
                report.text(f"### {suite}: the exhaustive grid")
                report.text("")
                from specdeck.core.bench.tables import grid_table

                report.text(grid_table(grid))
                report.text("")
                baseline = grid.baseline.get(ALL)
                report.text(f"No draft: {baseline:.1f} tok/s." if baseline else "No draft: -")
                report.text("")
                report.record("suites", per_suite)
                report.checkpoint(f"{index + 1} of {len(SUITES)} suites measured")
        finally:
            engine.unload()
    report.record("settings", [c.label for c in cells])
    report.record("load_average_at_start", load)
    report.record("suites", per_suite)
    report.record("all_met", all(v["met"] for v in per_suite.values()))
    report.text("### Search against the exhaustive grid")
    report.text("")
    report.table(["suite", "grid's best", "its median speed-up", "search's pick",
                  "pick's figure in the grid (% of best)",
                  f"referee: both side by side, {REFEREE_REPEATS} repeats",
                  "noise the search measured", "search's time of the grid's",
                  f"goal (>= {GOAL_QUALITY:.0%} by the referee, <= {GOAL_TIME:.0%} of the "
                  "time) met"], rows)
    _prediction_table(report, errors, later)


def _progress(kind: str):
    """A line per 20 finished runs on stderr: a long benchmark shows it is moving."""
    import sys

    from specdeck.core.bench.runner import RunFinished

    done = [0]

    def sink(event) -> None:
        if isinstance(event, RunFinished):
            done[0] += 1
            if done[0] % 20 == 0:
                print(f"  {time.strftime('%H:%M:%S')} {kind}: {done[0]} runs",
                      file=sys.stderr, flush=True)
    return sink


def referee(base, best, pick, engine, repeats: int = REFEREE_REPEATS) -> dict | None:
    """Both picks again, side by side with no drafting, interleaved. The search's pick is
    judged head to head: its tok/s over the grid pick's in the same prompt and repeat (the
    two ran back to back), median and 95% interval over those pairs, so the referee says
    how sure it is. A pick of no drafting (none beat it) is the no-drafting arm itself. Each
    pick's speed-up over no drafting is kept beside it. None only when both found nothing."""
    from specdeck.core.bench import stats
    from specdeck.core.bench.runner import run_plan
    from specdeck.core.bench.summary import summarize

    if best is None and pick is None:
        return {"quality": 1.0, "cell": "both: no drafting"}
    if best is not None and pick is not None and best.cell.arm.name == pick.cell.arm.name:
        return {"quality": 1.0, "cell": "same setting"}
    rows = [r for r in (best, pick) if r is not None]
    arms = (base.arms[0], *(r.cell.arm for r in rows))
    run = run_plan(replace(base, arms=arms, repeats=repeats), engine)
    summary = summarize(run)

    def speedup(row) -> float:
        if row is None:
            return 1.0
        ratio = summary.comparison(row.cell.arm.name).speedup
        return ratio.median if ratio else 0.0

    def label(row) -> str:
        return "no drafting" if row is None else row.cell.label

    def name(row) -> str:
        return base.arms[0].name if row is None else row.cell.arm.name

    beside = {r.pair_key: r for r in run.counted(name(best))}
    ratios = [ratio for r in run.counted(name(pick)) if r.pair_key in beside
              if (ratio := stats.speedup(beside[r.pair_key].result.stats.tokens_per_second,
                                         r.result.stats.tokens_per_second)) is not None]
    if not ratios:
        return {"quality": 0.0, "cell": f"{label(pick)}: no pair with {label(best)} finished"}
    head = stats.summarize_ratios(ratios)
    return {"quality": head.median, "ci_low": head.ci_low, "ci_high": head.ci_high,
            "pairs": head.n, "grid_pick_speedup": speedup(best),
            "search_pick_speedup": speedup(pick),
            "cell": f"{label(pick)} {speedup(pick):.2f}x and {label(best)} "
                    f"{speedup(best):.2f}x over no drafting; head to head {head.median:.1%} "
                    f"({head.ci_low:.1%}-{head.ci_high:.1%}, {head.n} pairs)"}


def _prediction_table(report: Report, errors: dict, later: dict) -> None:
    rows, all_errors, later_errors, inside, inside_later = [], [], [], [], []
    for label, items in errors.items():
        for (suite, predicted, measured, error, low, high), \
                (_s, again, _m, again_error, source, again_low, again_high) in zip(
                    items, later[label]):
            all_errors.append(abs(error))
            later_errors.append(abs(again_error))
            inside.append(low <= measured <= high)
            inside_later.append(again_low <= measured <= again_high)
            rows.append([label, suite, f"{predicted:.2f}x [{low:.2f}, {high:.2f}]",
                         f"{measured:.2f}x", f"{error:+.0%}",
                         "yes" if abs(error) <= GOAL_PREDICTION else "NO",
                         "yes" if inside[-1] else "NO",
                         f"{again:.2f}x [{again_low:.2f}, {again_high:.2f}] "
                         f"({source.split(' (')[0]})", f"{again_error:+.0%}",
                         "yes" if abs(again_error) <= GOAL_PREDICTION else "NO",
                         "yes" if inside_later[-1] else "NO"])
    within = sum(e <= GOAL_PREDICTION for e in all_errors)
    within_later = sum(e <= GOAL_PREDICTION for e in later_errors)
    report.record("measured_inside_predicted_range", [sum(inside), len(inside)])
    report.record("later_tune_measured_inside_range", [sum(inside_later), len(inside_later)])
    report.record("prediction_errors", {k: [list(i) for i in v] for k, v in errors.items()})
    report.record("predictions_within_goal", [within, len(all_errors)])
    report.record("later_tune_prediction_errors", {k: [list(i) for i in v] for k, v in later.items()})
    report.record("later_tune_predictions_within_goal", [within_later, len(later_errors)])
    report.text("### Predicted against measured")
    report.text("")
    report.text("Measured: the candidate's best setting in the exhaustive grid, median paired "
                "speed-up. First tune: the tuner's prior, before any run. A later tune on the "
                "same prompts: what it predicts from the history the search wrote (a "
                "measurement that drafted nothing or rests on fewer than 3 pairs is not "
                "learned from, so those stay on the prior: 'theory').")
    report.text("")
    report.table(["candidate", "suite", "first tune: predicted [range]", "measured", "error",
                  f"within {GOAL_PREDICTION:.0%}", "in range",
                  "a later tune: predicted [range] (from)", "error",
                  f"within {GOAL_PREDICTION:.0%}", "in range"], rows)
    report.text(f"First tune: {within} of {len(all_errors)} predictions within "
                f"{GOAL_PREDICTION:.0%}, the measured figure inside the predicted range in "
                f"{sum(inside)} of {len(inside)}. A later tune on the same prompts: "
                f"{within_later} of {len(later_errors)} within {GOAL_PREDICTION:.0%}, "
                f"{sum(inside_later)} of {len(inside_later)} inside the range.")
