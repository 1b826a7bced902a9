"""The A/B page's Arms dialog with TabbyAPIs that SpecDeck starts (issue 29): rows whose
source is "Start TabbyAPI" with their draft settings, Check saying what each will start, and
the page running the plan through to its results; against the stand-in of TabbyAPI main's
start-up (tests/tabby_app.py), whose speeds are the test's choice."""

from __future__ import annotations

import json
import sys

import pytest
from specdeck.gui.pages.bench import BenchPage
from tabby_app import make_install


@pytest.fixture
def page(qtbot, configured_qapp):
    from specdeck.gui.context import AppContext

    page = BenchPage(AppContext())
    qtbot.addWidget(page)
    page.resize(1280, 760)
    page.show()
    yield page
    page.shutdown()


def test_arms_dialog_starts_tabbyapi_per_arm_and_the_page_runs_it(qtbot, page, tmp_path,
                                                                  monkeypatch):
    from dataclasses import replace

    from specdeck.core.bench.suites import first_prompts
    from specdeck.gui.widgets.server_arms_dialog import FOUND, SOURCE, TABBY, WHERE

    folder = make_install(tmp_path / "tabbyAPI", "main", draft=None)
    (folder / "api_tokens.yml").write_text("api_key: tabby-api-key\nadmin_key: tabby-admin-key\n")
    before = (folder / "config.yml").read_bytes()
    monkeypatch.setenv("SPECDECK_STANDIN_STEPS", json.dumps({"none": 0.012, "ngram:2:4": 0.004}))
    form = page.form
    form.engine.setCurrentIndex(form.engine.findData("server"))
    form.arms_button.click()
    dialog = form.arms_dialog
    assert not dialog.tabby_box.isEnabled()
    for row in range(2):
        dialog.table.cellWidget(row, SOURCE).setCurrentText(TABBY)
    assert dialog.tabby_box.isEnabled() and not dialog.launch_box.isEnabled()
    dialog.table.item(1, WHERE).setText("draft_mode=ngram draft_num_tokens=4")
    dialog.tabby_folder.setText(str(folder))
    dialog.tabby_python.setText(sys.executable)
    dialog.check_button.click()
    qtbot.waitUntil(lambda: dialog.table.item(1, FOUND).text() != "", timeout=30_000)
    assert "starts TabbyAPI with draft_mode: disabled" in dialog.table.item(0, FOUND).text()
    assert "draft_mode: ngram, draft_num_tokens: 4" in dialog.table.item(1, FOUND).text()
    dialog.table.item(1, WHERE).setText("draft_mode=eagle")  # TabbyAPI's rule refuses it
    dialog.ok_button.click()
    assert "draft_mode" in dialog.message.text() and dialog.isVisible()
    dialog.table.item(1, WHERE).setText("draft_mode=ngram draft_num_tokens=4")
    dialog.ok_button.click()
    arms = form.plan().arms
    assert [a.server.tabby_launch.draft for a in arms] == [
        (("draft_mode", "disabled"),), (("draft_mode", "ngram"), ("draft_num_tokens", 4))]
    form.set_plan(replace(form.plan(), suites=("code",), repeats=2, warmup=0, max_new_tokens=24,
                          prompt_ids=tuple(p.id for p in first_prompts(("code",), 1))))
    page.start()
    qtbot.waitUntil(lambda: page.last_summary is not None, timeout=120_000)
    assert len(page.last_run.counted()) == 4
    assert page.last_summary.comparison("B").speedup.median > 1.3
    assert (folder / "config.yml").read_bytes() == before
    form.arms_button.click()  # the rows come back as they were typed
    again = form.arms_dialog
    assert again.table.cellWidget(1, SOURCE).currentText() == TABBY
    assert again.table.item(1, WHERE).text() == "draft_mode=ngram draft_num_tokens=4"
    assert again.tabby_folder.text() == str(folder)
    again.reject()
