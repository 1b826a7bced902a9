"""Adaptive tuner vs exhaustive sweep over k (n-gram drafting, embedded demo model)

Goal (issue 7): the tuner finds a k whose tok/s is within 3% of the exhaustive sweep's best
while spending at most a third of the sweep's generation time.

Both run the same plan: the demo model (SmolLM2-135M-Instruct, float32, CPU, greedy, chat
template), the input-grounded prompts (where n-gram drafting pays), 64 new tokens. The
sweep runs A (no draft) and k = 1..8 (exactly k drafts per step), 3 repeats, interleaved;
the tuner probes A and k = 8 once, fits its cost model, confirms the two best predicted k.
"Time" is generation time (prefill + decode of every run, warm-ups included), which is what
the user waits for; model loading is shared and excluded. The tuner's pick is judged by the
sweep's own measurement of that k, so the tuner's noisier single runs cannot flatter it.
"""

from __future__ import annotations

from benchmarks.report import Report

MAX_NEW = 64
REPEATS = 3
PROMPTS = 3
GOAL_QUALITY = 0.97
GOAL_TIME = 1 / 3


def run(report: Report) -> None:
    from specdeck.core.bench.plan import Arm, BenchPlan
    from specdeck.core.bench.sweep import SweepSpec, run_sweep, sweep_table
    from specdeck.core.bench.tuner import tune_k
    from specdeck.core.engines import create_engine
    from specdeck.core.engines.base import DrafterKind, DrafterSpec, LoadSpec
    from specdeck.core.engines.demo import demo_status

    status = demo_status()
    if not status.available:
        report.text(f"Skipped: the demo model is not available ({status.reason}).")
        return
    base = BenchPlan(engine="torch", model="demo", arms=(Arm("A"),), suites=("grounded",),
                     max_prompts=PROMPTS, max_new_tokens=MAX_NEW, repeats=REPEATS, warmup=1,
                     load=LoadSpec(status.model_dir or ".", device="cpu"))
    ngram = DrafterSpec(DrafterKind.NGRAM)
    engine = create_engine("torch")
    try:
        sweep = run_sweep(SweepSpec(base, (ngram,)), engine)
        tuned = tune_k(base, ngram, k_max=8, engine=engine)
    finally:
        engine.unload()

    best = max(sweep.rows, key=lambda r: r.tokens_per_second or 0.0)
    picked = sweep.row("n-gram", tuned.best_k) if tuned.best_k else None
    picked_rate = picked.tokens_per_second if picked else sweep.baseline_tokens_per_second
    quality = (picked_rate or 0.0) / (best.tokens_per_second or 1.0)
    time_ratio = tuned.spent_s / sweep.spent_s if sweep.spent_s else float("nan")
    report.record("sweep", sweep.to_json() | {"summaries": None})
    report.record("tuner", tuned.to_json())
    report.record("sweep_best_k", best.k)
    report.record("tuner_k", tuned.best_k)
    report.record("quality", quality)
    report.record("time_ratio", time_ratio)
    report.text(f"Demo model, grounded suite ({PROMPTS} prompts), {MAX_NEW} new tokens, "
                f"sweep k = 1..8 x {REPEATS} repeats.")
    report.text("")
    report.text("Exhaustive sweep (tok/s and median paired speed-up):")
    report.text("")
    report.text(sweep_table(sweep))
    report.table(
        ["", "k", "tok/s (sweep's measurement)", "generation time", "goal", "met"],
        [
            ["sweep", best.k, f"{best.tokens_per_second:.1f}", f"{sweep.spent_s:.1f} s", "", ""],
            ["tuner", tuned.best_k, f"{picked_rate:.1f} ({quality:.1%} of best)",
             f"{tuned.spent_s:.1f} s ({time_ratio:.0%} of the sweep's)",
             f">= {GOAL_QUALITY:.0%} of best, <= {GOAL_TIME:.0%} of the time",
             "yes" if quality >= GOAL_QUALITY and time_ratio <= GOAL_TIME else "NO"],
        ],
    )
    report.text("Tuner forecast from the k = 8 probe (tokens per step, predicted speed-up): "
                + ", ".join(f"k={f.k}: {f.tokens_per_step:.2f}, {f.speedup:.2f}x"
                            for f in tuned.forecast))
    report.text("")
    report.text("Measured by the tuner: " + ", ".join(
        f"k={k}: {v:.2f}x" for k, v in sorted(tuned.measured.items())))
