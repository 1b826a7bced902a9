"""Soak: 100 consecutive demo A/B runs in one GUI session

Goal (issue 16): memory growth under 5% and no growth in Python objects or threads after the
first ten runs. A real MainWindow (offscreen) runs the demo A/B (the embedded SmolLM2-135M,
no draft vs n-gram) again and again from the A/B page, as a user pressing Start would: each
plan runs in the engine process, streams into the panes and plots, is summarized in a worker
and saved to the history. After every plan: the GUI process's RSS, the engine process's RSS,
Python's live objects (after a full collection), threads, and Qt widgets.
"""

from __future__ import annotations

import gc
import os
import statistics
import tempfile
import threading
import time

from benchmarks.report import Report

RUNS = 100
SETTLED = 10
"""Growth is measured from the end of this run (the first runs fill caches and pools)."""
GOAL_RSS_GROWTH = 0.05


def run(report: Report, runs: int = RUNS) -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("SPECDECK_HOME", tempfile.mkdtemp(prefix="specdeck-soak-home-"))
    import psutil
    from PySide6.QtWidgets import QApplication
    from specdeck.core.bench.plan import BenchPlan, default_arms
    from specdeck.core.bench.suites import first_prompts
    from specdeck.core.units import format_bytes
    from specdeck.gui.app import configure_application
    from specdeck.gui.main_window import MainWindow

    app = QApplication.instance() or QApplication(["specdeck-soak"])
    configure_application(app)
    window = MainWindow()
    window.resize(1280, 800)
    window.show()
    page = window.show_page("bench")
    prompt = first_prompts(["grounded"], 1)[0]
    page.form.set_plan(BenchPlan(engine="torch", model="demo", arms=default_arms(ngram=True, k=4),
                                 suites=("grounded",), prompt_ids=(prompt.id,),
                                 max_new_tokens=24, repeats=1, warmup=0))
    me = psutil.Process()
    samples = []
    started = time.monotonic()
    for i in range(runs):
        before = page.last_summary
        page.start()
        deadline = time.monotonic() + 300
        while (page.last_summary is before or page.stop_button.isEnabled()) \
                and time.monotonic() < deadline:
            app.processEvents()
            time.sleep(0.005)
        if page.last_summary is before:
            raise RuntimeError(f"run {i + 1} did not finish: {page.banner.label.text()}")
        for _ in range(20):  # let the finished run's queued events settle
            app.processEvents()
            time.sleep(0.005)
        gc.collect()
        engines = [c for c in me.children(recursive=True) if c.is_running()]
        samples.append({
            "run": i + 1,
            "gui_rss": me.memory_info().rss,
            "engine_rss": sum(c.memory_info().rss for c in engines),
            "objects": len(gc.get_objects()),
            "threads": threading.active_count(),
            "widgets": len(QApplication.allWidgets()),
            "history": page.history.count(),
        })
    spent = time.monotonic() - started
    page.shutdown()
    window.close()

    settled, last = samples[SETTLED - 1], samples[-1]

    def growth(key: str) -> float:
        return (last[key] - settled[key]) / settled[key]

    per_run_objects = statistics.linear_regression(
        [s["run"] for s in samples[SETTLED - 1:]], [s["objects"] for s in samples[SETTLED - 1:]]
    ).slope
    report.record("runs", runs)
    report.record("seconds", spent)
    report.record("samples", samples)
    report.record("gui_rss_growth", growth("gui_rss"))
    report.record("engine_rss_growth", growth("engine_rss"))
    report.record("objects_growth", last["objects"] - settled["objects"])
    report.record("objects_per_run_slope", per_run_objects)
    report.record("threads_growth", last["threads"] - settled["threads"])
    report.record("widgets_growth", last["widgets"] - settled["widgets"])
    met = growth("gui_rss") < GOAL_RSS_GROWTH and growth("engine_rss") < GOAL_RSS_GROWTH \
        and last["threads"] <= settled["threads"] and last["widgets"] <= settled["widgets"] \
        and per_run_objects < 1.0
    report.text(
        f"{runs} demo A/B plans (no draft vs n-gram, 1 grounded prompt, 24 new tokens, 1 "
        f"repeat) back to back in one offscreen MainWindow, {spent:.0f} s in all. From the end "
        f"of run {SETTLED} to the end of run {runs}:\n")
    report.table(
        ["measure", f"after run {SETTLED}", f"after run {runs}", "change"],
        [["GUI process RSS", format_bytes(settled['gui_rss']), format_bytes(last['gui_rss']),
          f"{growth('gui_rss'):+.2%}"],
         ["engine process RSS", format_bytes(settled['engine_rss']),
          format_bytes(last['engine_rss']), f"{growth('engine_rss'):+.2%}"],
         ["Python objects (GUI, after gc)", settled["objects"], last["objects"],
          f"{last['objects'] - settled['objects']:+d} ({per_run_objects:+.1f} per run, fitted)"],
         ["threads (GUI)", settled["threads"], last["threads"],
          f"{last['threads'] - settled['threads']:+d}"],
         ["Qt widgets", settled["widgets"], last["widgets"],
          f"{last['widgets'] - settled['widgets']:+d}"],
         ["history entries shown", settled["history"], last["history"],
          f"{last['history'] - settled['history']:+d}"]])
    report.text(
        f"\nGoal: RSS growth under {GOAL_RSS_GROWTH:.0%} in both processes, no more threads, "
        f"widgets or Python objects (under one a run, fitted) than after run {SETTLED}: "
        f"{'met' if met else 'NOT met'}. Every finished plan adds one history entry (a saved "
        "report; the History list shows the newest 100).\n\n"
        "The first run of this benchmark (2026-11-23) found 24 Python objects kept per plan, "
        "+2148 over 90 plans: the two background-task handles of each plan (summary, history "
        "list) stayed children of the A/B page. gui/workers.py now deletes a handle when its "
        "task is done (tests/gui/test_workers.py checks it); the table above is after the fix.\n")
