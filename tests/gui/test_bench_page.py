"""The A/B bench page driven by pytest-qt on tiny real models, from Start to the results table."""

from __future__ import annotations

from pathlib import Path

import pytest
from specdeck.core.bench.plan import BenchPlan, default_arms
from specdeck.gui.bench_form import plan_from_choices
from specdeck.gui.pages.bench import BenchPage
from tiny_models import ab_models

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    return ab_models(tmp_path_factory.mktemp("bench-page-models"))


@pytest.fixture
def page(qtbot, configured_qapp):
    from specdeck.gui.context import AppContext

    page = BenchPage(AppContext())
    qtbot.addWidget(page)
    page.resize(1280, 760)
    page.show()
    yield page
    page.shutdown()


@pytest.fixture
def clocked_page(qtbot, configured_qapp):
    """The page with its engine process on the forward clock (tiny_models.clocked_torch_engine:
    each forward 1 ms whatever it verifies, a GPU's memory-bound decoding): which setting wins
    follows from the real drafts and acceptance, not from how busy the shared CPU is (on a
    loaded machine no k once beat no drafting)."""
    from specdeck.core.bench.session import BenchSession
    from specdeck.gui.context import AppContext
    from tiny_models import clocked_torch_engine

    page = BenchPage(AppContext(), session_factory=lambda: BenchSession(clocked_torch_engine))
    qtbot.addWidget(page)
    page.resize(1280, 760)
    page.show()
    yield page
    page.shutdown()


def configure(page: BenchPage, model: Path, draft: Path | None = None, ngram: bool = True,
              suites=("grounded",), per_suite: int = 1, max_new: int = 24, repeats: int = 2,
              warmup: int = 0, sweep: bool = False) -> BenchPlan:
    """Show a plan in the form (A, then the draft model and/or n-gram at k <= 4)."""
    from specdeck.core.bench.suites import first_prompts
    from specdeck.core.bench.sweep import sweep_arms

    arms = default_arms(draft, ngram, k=4)
    plan = BenchPlan(engine="torch", model=str(model),
                     arms=sweep_arms([a.drafter for a in arms[1:]]) if sweep else arms,
                     suites=suites, prompt_ids=tuple(p.id for p in first_prompts(suites, per_suite)),
                     max_new_tokens=max_new, repeats=repeats, warmup=warmup)
    page.form.set_plan(plan)
    assert plan_from_choices(page.form.choices(), comparison=False) == plan
    return plan


def test_start_runs_the_plan_and_fills_the_results_table(qtbot, page, models):
    configure(page, models["cycle"], suites=("code", "grounded"), repeats=2, warmup=1)
    page.start()
    assert page.stop_button.isEnabled() and not page.start_button.isEnabled()
    assert not page.form.model.isEnabled()
    qtbot.waitUntil(lambda: page.last_run is not None, timeout=120_000)
    run = page.last_run
    assert len(run.counted()) == 2 * 2 * 2  # prompts x repeats x arms
    rows = page.table.rows()
    assert len(rows) == 8  # warm-ups are not rows
    drafted = [r for r in rows if r["Arm"] == "B"]
    assert len(drafted) == 4
    for row in drafted:
        assert row["Output vs A"] == "identical"  # greedy: n-gram never changes a token
        assert row["vs A"].endswith("×")  # paired with A's run of the same prompt and repeat
        assert float(row["Accepted"].rstrip("%")) > 50  # the cycling model repeats itself
    assert "outputs identical to A" in page.summary.text() and "4/4" in page.summary.text()
    assert page.progress.value() == page.progress.maximum() == len(run.records)
    # Every ratio shown is the run over A's run of the same prompt and repeat, and the running
    # median the page showed is the finished summary's (one reducer, one summary, in core).
    reference = {(r.prompt_id, r.slot.repeat): r.result.stats.tokens_per_second
                 for r in run.counted("A")}
    shown = {(row["Prompt"], int(row["Rep"]) - 1): row["vs A"] for row in drafted}
    for record in run.counted("B"):
        key = (record.prompt_id, record.slot.repeat)
        assert shown[key] == f"{record.result.stats.tokens_per_second / reference[key]:.2f}×"
    qtbot.waitUntil(lambda: page.last_summary is not None, timeout=60_000)
    live = page.state.live.arm_so_far("B")
    assert live.median_speedup == pytest.approx(page.last_summary.comparison("B").speedup.median)
    assert f"{live.median_speedup:.2f}×" in page.summary.text()
    assert page.start_button.isEnabled() and not page.stop_button.isEnabled()
    # The B pane shows the last B run's text with the accepted-draft part highlighted.
    b_pane = page.panes[1]
    last_b = [r for r in run.records if r.arm == "B"][-1]
    assert b_pane.plain_text == last_b.result.text
    assert 0 < b_pane.draft_characters < len(b_pane.plain_text)
    assert page.plots is not None and page.plots.points() > 0


def test_highlight_toggle_redraws_without_losing_text(qtbot, page, models):
    configure(page, models["cycle"], repeats=1)
    page.start()
    qtbot.waitUntil(lambda: page.last_run is not None, timeout=120_000)
    pane = page.panes[1]
    text = pane.text.toPlainText()
    page.highlight.setChecked(False)
    assert pane.text.toPlainText() == text and not pane.highlight
    page.highlight.setChecked(True)
    assert pane.text.toPlainText() == text and pane.highlight


def test_draft_model_and_ngram_make_three_arms(qtbot, page, models):
    configure(page, models["target"], draft=models["draft"], ngram=True, repeats=1, max_new=12)
    assert [p.title.full_text() for p in page.panes] == [
        "A: no draft", "B: draft draft (k<=4, adaptive)", "C: n-gram (k<=4, adaptive)"]
    page.start()
    qtbot.waitUntil(lambda: page.last_run is not None, timeout=120_000)
    assert {r.arm for r in page.last_run.counted()} == {"A", "B", "C"}
    assert page.summary.text().count("outputs identical to A") == 2


def test_stop_keeps_finished_runs(qtbot, page, models):
    configure(page, models["target"], max_new=200, repeats=5, suites=("code",), per_suite=2)
    page.start()
    qtbot.waitUntil(lambda: page.table.rowCount() >= 1, timeout=120_000)
    page.stop()
    qtbot.waitUntil(lambda: page.start_button.isEnabled(), timeout=60_000)
    run = page.last_run
    assert run is not None and run.cancelled
    assert len(run.records) < 2 * 2 * 5
    assert "stopped early" in page.stage.full_text()


def test_bad_setups_are_explained_and_nothing_starts(page, models):
    configure(page, models["cycle"], ngram=False)  # the reference alone: shown, not run
    page.start()
    assert page.banner.isVisible() and "Nothing to compare" in page.banner.label.text()
    assert "Tick Draft model and/or N-gram" in page.banner.label.text()
    assert page.session is None
    # What no plan can hold, the user can still click: the form says what is missing.
    form = page.form
    for button in form.suite_buttons.values():
        button.setChecked(False)
    page.start()
    assert "No prompt suite" in page.banner.label.text()
    form.use_ngram.setChecked(False)
    form.use_draft.setChecked(True)
    form.draft.setText("")
    form.suite_buttons["code"].setChecked(True)
    page.start()
    assert "no folder" in page.banner.label.text()


def test_the_idle_progress_bar_says_no_run_yet(page):
    """Before any run, a reset bar showed no text: a blank white box under Size that read
    as an input field."""
    assert page.progress.isVisible()
    assert page.progress.text() == "No runs yet"


def test_a_missing_model_folder_fails_with_a_clear_banner(qtbot, page, tmp_path):
    configure(page, tmp_path / "nowhere")
    page.start()
    qtbot.waitUntil(lambda: page.start_button.isEnabled(), timeout=60_000)
    assert page.banner.isVisible() and page.banner.severity == "error"
    assert "nowhere" in page.banner.label.text()
    assert page.progress.text() == "No runs yet"  # not "0 / 1 runs": the plan never started




def test_finished_run_is_summarised_saved_to_history_and_exported(qtbot, page, models, tmp_path):
    import csv
    import json

    configure(page, models["cycle"], repeats=2)
    page.start()
    qtbot.waitUntil(lambda: page.last_report is not None, timeout=120_000)
    assert page.export_button.isEnabled()
    comparison = page.last_summary.comparison("B")
    assert comparison.lossless.verdict.startswith("lossless")
    assert comparison.lossless.verdict in page.summary.text()
    qtbot.waitUntil(lambda: page.history.count() >= 1, timeout=30_000)
    assert page.history.itemData(0) == str(page.last_report.folder)
    page.export_to(tmp_path / "export")
    qtbot.waitUntil(lambda: (tmp_path / "export" / page.last_report.csv.name).exists(), timeout=30_000)
    qtbot.waitUntil(lambda: not page.tasks.running(), timeout=30_000)
    data = json.loads((tmp_path / "export" / page.last_report.json.name).read_text())
    assert len(data["runs"]) == len(page.last_run.records)
    with open(tmp_path / "export" / page.last_report.csv.name, newline="") as handle:
        assert len(list(csv.DictReader(handle))) == len(page.last_run.records)


def test_sweep_finds_the_best_k_and_apply_writes_it_through_the_config_editor(
        qtbot, clocked_page, models, tmp_path, monkeypatch):
    from specdeck.core import config
    from specdeck.gui.widgets import config_dialog
    from conftest import TABBY

    page = clocked_page
    configure(page, models["cycle"], repeats=1, max_new=24, sweep=True)
    assert not page.form.k.isEnabled() and not page.form.adaptive.isEnabled()
    # Nine arms (A, k=1..8) share two panes: the reference and the drafting arm of the moment.
    assert len(page.panes) == 2
    page.start()
    qtbot.waitUntil(lambda: page.last_report is not None, timeout=180_000)
    run = page.last_run
    assert [a.name for a in run.plan.arms] == ["A", *(f"k{k}" for k in range(1, 9))]
    assert all(not a.drafter.adaptive for a in run.plan.arms[1:])
    assert len(page.table.rows()) == 9
    assert page.panes[1].title.full_text().startswith("k8: n-gram")  # the last arm run
    # The cycling model's output repeats: n-gram drafts are right, so longer drafts are
    # accepted further (deterministic under greedy) and drafting beats no drafting. The test
    # checks that the pick is the best scored row, whichever k that is.
    from specdeck.core.bench.sweep import setting_rows

    reference = page.last_summary.arm("A").tokens_per_second
    assert reference == pytest.approx(1000.0, rel=0.01)  # one token a forward of 1 ms
    rows = {row.k: row for row in setting_rows(run, page.last_summary)}
    assert sorted(rows) == list(range(1, 9))
    assert rows[8].mean_acceptance_length > rows[4].mean_acceptance_length \
        > rows[1].mean_acceptance_length
    best = page.best_setting
    assert best is not None and best.candidate == "n-gram" and best.score > 1
    assert best.score == max(row.score for row in rows.values())
    assert "Sweep" in page.summary.text() and f"k={best.k}" in page.apply_button.text()

    # No config.yml open: say where to open one, write nothing.
    page.apply_button.click()
    assert "config.yml" in page.banner.label.text() and page.banner.severity == "warning"

    config_yml = tmp_path / "config.yml"
    sample = (TABBY / "config_sample.exl2-checkpoint.yml").read_text()
    original = sample.replace("  backend:\n", "  backend: exllamav3\n", 1)
    config_yml.write_text(original)
    page.context.set_config_path(config_yml)
    shown = []

    def accept(dialog):
        shown.append(dialog.diff.toPlainText())
        return config_dialog.QDialog.DialogCode.Accepted

    monkeypatch.setattr(config_dialog.ConfirmChangeDialog, "exec", accept)
    with qtbot.waitSignal(page.context.file_changed, timeout=30_000):
        page.apply_button.click()
    assert f"+  draft_num_tokens: {best.k}" in shown[0]
    draft = config.load(config_yml).data["draft_model"]
    assert draft["draft_mode"] == "ngram" and draft["draft_num_tokens"] == best.k
    assert (tmp_path / "config.yml.bak").read_text() == original






def test_the_pages_ranges_are_the_plan_tables(page):
    from specdeck.core.bench.fields import PLAN_FIELDS

    form = page.form
    for name, spin in (("k", form.k), ("repeats", form.repeats), ("warmup", form.warmup),
                       ("max_new_tokens", form.max_new)):
        field = PLAN_FIELDS[name]
        assert (spin.minimum(), spin.maximum()) == (field.low, field.high), name
    form.k.setValue(PLAN_FIELDS["k"].high)  # the CLI's largest k, no longer capped at 8
    assert form.plan().arms[1].drafter.num_draft_tokens == PLAN_FIELDS["k"].high


@pytest.mark.slow
def test_the_demo_says_what_runs_marks_the_loading_and_offers_no_config_to_write(qtbot, page):
    """Issue 44, the demo A/B as a new user sees it: the stage said "Ready" (the engine's last
    load message) while the plan ran and the summary "Loading…" while runs streamed; the
    time axes began at 45 s with nothing to say the model was loading; and "Switch drafting
    off…" answered with a banner about TabbyAPI's config.yml, which the demo has none of."""
    from specdeck.core.bench.suites import first_prompts
    from specdeck.gui.bench_render import WAITING_FOR_PAIRS

    plan = BenchPlan(engine="torch", model="demo", arms=default_arms(ngram=True, k=4),
                     suites=("chat",), prompt_ids=tuple(p.id for p in first_prompts(("chat",), 1)),
                     max_new_tokens=24, repeats=2, warmup=0)
    page.form.set_plan(plan)
    page.start()
    qtbot.waitUntil(lambda: page.state.live.current is not None or page.last_run is not None,
                    timeout=300_000)
    if page.last_run is None:  # a run is under way: the page says which, not "Ready"
        assert page.stage.full_text().startswith("Run ") and "Ready" not in page.stage.full_text()
        assert page.summary.text() in (WAITING_FOR_PAIRS,) or "So far" in page.summary.text()
    qtbot.waitUntil(lambda: page.last_summary is not None, timeout=300_000)
    live = page.state.live
    assert live.runs_from is not None and live.runs_from > 0
    assert page.plots.loading == (0.0, live.runs_from)  # shaded, labelled, from Start
    assert page.plots.loading_label.toPlainText() == "loading"
    assert page.plots.time_shown[0] <= 0.0
    assert not page.apply_button.isEnabled()
    assert "demo model runs inside SpecDeck" in page.apply_button.toolTip()
    page.apply_best()
    assert "config.yml" not in page.banner.label.text()
    assert "demo model runs inside SpecDeck" in page.banner.label.text()
