"""A/B page: GUI event-loop latency while tokens stream at the highest rate we can produce

Goal (issue 7): the 99th percentile of the event loop's latency during a run stays under
16 ms (one frame at 60 Hz). A real MainWindow (offscreen) runs a real A/B plan on the
A/B page: a tiny Llama whose greedy output cycles (tests/tiny_models.py), so n-gram drafting
accepts nearly everything and the engine streams as many tokens per second as this CPU can.
A 4 ms QTimer probes the event loop; latency = how late each tick fires beyond its interval.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.report import Report

GOAL_P99_MS = 16.0
PROBE_MS = 4
ROOT = Path(__file__).resolve().parents[1]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def run(report: Report) -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("SPECDECK_HOME", tempfile.mkdtemp(prefix="specdeck-bench-home-"))
    sys.path.insert(0, str(ROOT / "tests"))
    from PySide6.QtCore import QElapsedTimer, QTimer
    from PySide6.QtWidgets import QApplication
    from specdeck.core.bench.plan import BenchPlan, default_arms
    from specdeck.core.bench.suites import first_prompts
    from specdeck.gui.app import configure_application
    from specdeck.gui.main_window import MainWindow
    from tiny_models import cycling_llama  # noqa: E402 - the tests' tiny real models

    app = QApplication.instance() or QApplication(["specdeck-bench"])
    configure_application(app)
    with tempfile.TemporaryDirectory() as tmp:
        model = cycling_llama(Path(tmp) / "cycle")
        window = MainWindow()
        window.resize(1280, 800)
        window.show()
        page = window.show_page("bench")
        suites = ("code", "grounded")  # the order of the page's suite buttons
        page.form.set_plan(BenchPlan(
            engine="torch", model=str(model), arms=default_arms(ngram=True, k=8), suites=suites,
            prompt_ids=tuple(p.id for p in first_prompts(suites, 2)),
            max_new_tokens=320,  # the tiny model's context is 512 tokens
            repeats=3, warmup=1))

        lateness: list[float] = []
        clock = QElapsedTimer()
        last = [0]

        def tick() -> None:
            now = clock.elapsed()
            if page.state is not None and page.state.live.total:  # measure once runs stream
                lateness.append(max(0.0, now - last[0] - PROBE_MS))
            last[0] = now

        probe = QTimer()
        probe.setInterval(PROBE_MS)
        probe.timeout.connect(tick)
        drained: list[int] = []
        original_pump = page.pump

        pump_ms: list[float] = []

        def counting_pump() -> int:
            started = time.perf_counter()
            n = original_pump()
            pump_ms.append(1000 * (time.perf_counter() - started))
            drained.append(n)
            return n

        page.timer.timeout.disconnect()
        page.timer.timeout.connect(counting_pump)
        clock.start()
        probe.start()
        page.start()
        deadline = time.monotonic() + 900
        while page.last_run is None and page.stop_button.isEnabled() and time.monotonic() < deadline:
            app.processEvents()
            time.sleep(0.001)
        probe.stop()
        run_ = page.last_run
        window.hide()
        page.shutdown()
    if run_ is None:
        raise RuntimeError(f"the A/B run did not finish: {page.banner.label.text() or page.stage.text()}")
    counted = run_.counted()
    rates = {arm: statistics.median(r.result.stats.tokens_per_second for r in counted if r.arm == arm)
             for arm in ("A", "B")}
    steps = sum(r.result.stats.steps for r in counted)
    seconds = sum(r.result.stats.decode_s for r in counted)
    p50, p99, worst = (_percentile(lateness, 0.5), _percentile(lateness, 0.99), max(lateness))
    report.record("probe_interval_ms", PROBE_MS)
    report.record("ticks", len(lateness))
    report.record("latency_p50_ms", p50)
    report.record("latency_p99_ms", p99)
    report.record("latency_max_ms", worst)
    report.record("median_tok_s", rates)
    report.record("engine_events_per_s", steps / seconds)
    report.record("max_events_per_drain", max(drained))
    pump_p99 = _percentile(pump_ms, 0.99)
    report.record("pump_ms_p50", _percentile(pump_ms, 0.5))
    report.record("pump_ms_p99", pump_p99)
    report.record("pump_ms_max", max(pump_ms))
    report.text(
        f"Event-loop latency during a {len(run_.records)}-run A/B plan ({len(lateness)} probe ticks "
        f"of {PROBE_MS} ms): p50 **{p50:.1f} ms**, p99 **{p99:.1f} ms**, max {worst:.1f} ms; "
        f"goal p99 < {GOAL_P99_MS:.0f} ms: {'met' if p99 < GOAL_P99_MS else 'NOT met'}.\n\n"
        f"Token rate streamed: median {rates['A']:.0f} tok/s without drafting, {rates['B']:.0f} tok/s "
        f"with n-gram (k <= 8); {steps / seconds:.0f} engine events/s while decoding; at most "
        f"{max(drained)} events applied in one 50 ms drain, which took {_percentile(pump_ms, 0.5):.1f} ms "
        f"(median), {pump_p99:.1f} ms (p99), {max(pump_ms):.1f} ms (max) of GUI-thread work.\n\n"
        "The engine runs in its own process (core/bench/worker.py): the GUI process only "
        "unpickles batches of events (verify steps at most 10 ms apart) on a reader thread and "
        "applies them every 50 ms, so the engine's Python-bound decoding no longer holds the "
        "GUI's GIL. (The earlier design, the engine on a thread of the GUI's process, is not "
        "measured here: there is no like-for-like number for it.)\n"
    )
