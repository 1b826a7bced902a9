"""Screenshots of the A/B bench page: `python -m tools.screenshots bench`.

A real run of the embedded demo model (SmolLM2-135M on this CPU): no draft vs n-gram
(k <= 4) on grounded-edit and code prompts.

1. bench-running.png: mid-run, both panes streaming, n-gram draft text highlighted.
2. bench-results.png: the finished plan: results table, paired speed-ups, losslessness.
3. bench-sweep.png: a k = 1..8 sweep of n-gram drafting, the sweep table and "Apply".
"""

from __future__ import annotations

import time
from pathlib import Path


def _pump_until(page, done, timeout_s: float) -> None:
    from PySide6.QtWidgets import QApplication

    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        QApplication.processEvents()
        time.sleep(0.01)


def demo_plan(suites=("code", "grounded"), per_suite: int = 2, sweep: bool = False, **sizes):
    """The demo model, no draft vs n-gram (k <= 4; a sweep: every k), on the first
    ``per_suite`` prompts of each suite: a plan of the kind the A/B page runs."""
    from specdeck.core.bench.plan import BenchPlan, default_arms
    from specdeck.core.bench.suites import first_prompts
    from specdeck.core.bench.sweep import sweep_arms

    arms = default_arms(ngram=True, k=4)
    return BenchPlan(engine="torch", model="demo",
                     arms=sweep_arms([arms[1].drafter]) if sweep else arms, suites=suites,
                     prompt_ids=tuple(p.id for p in first_prompts(suites, per_suite)), **sizes)


def render(window, out_dir: Path) -> list[Path]:
    page = window.show_page("bench")
    page.form.set_plan(demo_plan(max_new_tokens=96, repeats=1, warmup=1))
    page.start()
    # Mid-run: the second measured B run is streaming.
    _pump_until(page, lambda: page.table.rowCount() >= 3 and page.state.live.current is not None
                and page.state.live.current.new_tokens > 40,
                600)
    shots = [out_dir / "bench-running.png", out_dir / "bench-results.png"]
    window.grab().save(str(shots[0]))
    _pump_until(page, lambda: page.last_run is not None or not page.timer.isActive(), 900)
    _pump_until(page, lambda: False, 0.3)
    window.grab().save(str(shots[1]))

    page.form.set_plan(demo_plan(("grounded",), per_suite=1, sweep=True, max_new_tokens=64,
                                 repeats=1, warmup=1))
    page.start()
    _pump_until(page, lambda: page.last_summary is not None, 900)
    _pump_until(page, lambda: False, 0.3)
    shots.append(out_dir / "bench-sweep.png")
    window.grab().save(str(shots[2]))
    return shots
