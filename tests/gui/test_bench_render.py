"""What the A/B page shows (gui.bench_render), worded from real runs of tiny real models,
without Qt: no QApplication here, and importing the module loads no Qt at all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from specdeck.core.bench.live import LivePlan
from specdeck.core.bench.plan import default_arms
from specdeck.core.bench.runner import run_plan
from specdeck.core.bench.summary import summarize
from specdeck.core.bench.sweep import best_row, setting_rows, sweep_arms
from specdeck.core.errors import InvalidInputError
from specdeck.gui import bench_render as render
from tiny_models import ab_models, tiny_plan

pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_the_module_imports_no_qt():
    code = ("import json, sys; import specdeck.gui.bench_render; "
            "print(json.dumps([m for m in sys.modules if m.startswith(('PySide6', 'pyqtgraph'))]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    return ab_models(tmp_path_factory.mktemp("render-models"))


@pytest.fixture(scope="module")
def engine():
    from specdeck.core.engines import create_engine

    engine = create_engine("torch")
    yield engine
    engine.unload()


@pytest.fixture(scope="module")
def ab(models, engine):
    """A real plan (A, then n-gram at k <= 3) fed event by event to the live reducer."""
    plan = tiny_plan(models["cycle"], default_arms(ngram=True, k=3), max_prompts=2, repeats=2)
    live = LivePlan(plan)
    run = run_plan(plan, engine, on_event=live.apply)
    return run, live, summarize(run)


def test_the_running_figures_are_the_live_reducers(ab):
    run, live, _ = ab
    html = render.so_far_html(live)
    figures = live.arm_so_far("B")
    assert html.startswith("<b>So far</b>")
    assert f"<b>{figures.median_speedup:.2f}×</b></span> vs A" in html
    assert f"median of {figures.pairs} paired runs" in html
    assert f"{figures.identical}/{figures.pairs} outputs identical to A" in html
    assert f"color:{render.ARM_COLOURS[1]}'>B: n-gram" in html


def test_the_table_cells_are_each_rows_figures(ab):
    run, live, _ = ab
    for row in live.rows:
        cells = dict(zip(render.RESULT_COLUMNS, render.row_cells(row)))
        stats = row.record.result.stats
        assert (cells["Arm"], cells["Prompt"], cells["Rep"]) == (
            row.record.arm, row.record.prompt_id, str(row.record.slot.repeat + 1))
        assert cells["tok/s"] == f"{stats.tokens_per_second:.1f}"
        if row.record.arm == "A":
            assert cells["vs A"] == cells["Output vs A"] == cells["Accepted"] == ""
        else:
            assert cells["vs A"] == f"{row.speedup:.2f}×" == render.ratio_cell(row)
            assert cells["Output vs A"] == "identical" and not render.output_differs(row)
            assert cells["Accepted"] == f"{100 * stats.acceptance_rate:.0f}%"
    last = run.records[-1]
    assert render.run_metrics(last).startswith(f"{last.result.stats.tokens_per_second:.1f} tok/s")


def test_the_result_is_the_summarys(ab):
    run, live, summary = ab
    html = render.result_html(setting_rows(run, summary), None, summary, live.arms)
    ratio = summary.comparison("B").speedup
    assert html.startswith("<b>Result</b>")
    assert ratio.interval_text("–") in html
    assert summary.comparison("B").lossless.verdict in html
    assert render.finished_stage(run) == (f"Finished: {len(run.counted())} measured runs in "
                                          f"{run.finished_at - run.started_at:.1f} s")
    assert "did not draft" not in html
    # An arm that drafted nothing says so first (core.bench.summary decides; not re-derived).
    from dataclasses import replace

    idle = replace(summary, comparisons=tuple(
        replace(c, not_drafting="it drafted nothing in 2 runs") for c in summary.comparisons))
    flagged = render.result_html(setting_rows(run, idle), None, idle, live.arms)
    assert "did not draft</b>: it drafted nothing in 2 runs" in flagged


def test_a_sweep_shows_its_table_and_marks_the_best(models, engine):
    ngram = default_arms(ngram=True)[1].drafter
    plan = tiny_plan(models["cycle"], sweep_arms([ngram], ks=(1, 3)), max_prompts=1, repeats=1,
                     warmup=0)
    run = run_plan(plan, engine)
    summary = summarize(run)
    rows = setting_rows(run, summary)
    best = best_row(rows)
    html = render.result_html(rows, best, summary, [a.name for a in plan.arms])
    assert "<b>Sweep</b>" in html and "<th>k=1</th><th>k=3</th>" in html
    if best is not None:
        assert f"background:{render.BEST_CELL}" in html and f"k={best.k} ({best.score:.2f}×)" in html
        assert html.count("<b>Result</b>") == 1  # the best arm's result below the table
        text, tip = render.apply_offer(best)
        assert text == f"Apply n-gram k={best.k}…" and f"{best.score:.2f}×" in tip
    else:
        assert "no setting beat no drafting" in html


def test_history_lines_come_from_the_saved_entry(ab):
    from specdeck.core.bench.report import list_history, save_to_history

    run, _, summary = ab
    save_to_history(run, summary)
    (entry,) = list_history()
    text, tip = render.history_item(entry)
    assert f"· {Path(entry.model).name} · B {summary.comparison('B').speedup.median:.2f}×" in text
    assert "A: no draft" in tip


def test_words_without_figures():
    assert render.apply_offer(None)[0] == "Switch drafting off…"
    assert "switch the draft model off" in render.apply_intro(None, ["a <note>"])
    assert "a &lt;note&gt;" in render.apply_intro(None, ["a <note>"])
    error = InvalidInputError("No <server> given.", "Type its URL.")
    assert render.error_html(error) == "No &lt;server&gt; given. Type its URL."  # said once
    error = RuntimeError("The engine process stopped.")
    error.fix = "Start the run again."
    assert render.error_html(error) == "The engine process stopped.<br>Start the run again."
    assert render.error_html(RuntimeError("boom")) == "boom"
    assert render.rate(None) == "–" and render.percent(None) == "no drafts"
    assert [render.arm_colour_name(i) for i in range(5)] == list(render.ARM_COLOURS)
    assert render.arm_colour_name(7) != render.arm_colour_name(8)
