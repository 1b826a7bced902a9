"""The Tune page with TabbyAPI setups (issue 27), driven through its real widgets against the
stand-in of TabbyAPI main's start-up (tests/tabby_app.py, citing TabbyAPI's source; the
speeds per setting are the test's choice, SPECDECK_STANDIN_STEPS): a TabbyAPI folder tuned
from Tune to a verified result, Apply (the diff first, config.yml written with a .bak,
TabbyAPI started from it) and Roll back byte for byte, Cancel leaving config.yml
byte-identical, a running TabbyAPI read through its admin API, what is missing said in the
banner, Start -> Tune prefilled, and the admin key never in SpecDeck's settings or report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psutil
import pytest
from PySide6.QtCore import QSettings
from tabby_app import DRAFT, make_install, standin_main, tabby_folder
from tabby_standin import TabbyHandler, start_tabby
from test_tune_page import _left, _plain, apply_and_save, start_page_finding, tune_page

STEPS = {"none": 0.012, "ngram:2:4": 0.003, "default": 0.008,
         **{f"model:{DRAFT}:{k}": 0.010 for k in (2, 4, 8)}}
"""Seconds per token: n-gram drafting at k=4 is the fastest setting (the test's choice)."""
ADMIN_KEY = TabbyHandler.admin_key  # the keys the launched stand-in checks
API_KEY = TabbyHandler.api_key


@pytest.fixture
def install(tmp_path, monkeypatch) -> Path:
    """A TabbyAPI main folder (the real config_sample as config.yml, naming the target) whose
    models are empty folders: no draft model passes the checks."""
    folder = make_install(tmp_path / "tabbyAPI", "main", draft=None)
    (folder / "api_tokens.yml").write_text(f"api_key: {API_KEY}\nadmin_key: {ADMIN_KEY}\n")
    monkeypatch.setenv("SPECDECK_STANDIN_STEPS", json.dumps(STEPS))
    monkeypatch.setenv("SPECDECK_TABBY_ADMIN_KEY", ADMIN_KEY)
    return folder


@pytest.fixture
def models_install(tmp_path, monkeypatch) -> Path:
    """A TabbyAPI main folder with real tokenizers: a draft of the target's family (searched
    at k 2, 4, 8 beside n-gram drafting), one of another family and one in EXL2 (refused)."""
    folder = tabby_folder(tmp_path / "tabbyAPI", "main").parent
    standin_main(folder, "main")
    monkeypatch.setenv("SPECDECK_STANDIN_STEPS", json.dumps(STEPS))
    monkeypatch.setenv("SPECDECK_TABBY_ADMIN_KEY", ADMIN_KEY)
    return folder


def folder_form(page, folder: Path, budget: str = "2m") -> None:
    """The form set for a TabbyAPI folder and a tune the shared CPU finishes in a minute: the
    shipped suites (half the prompts to tune on, half to verify on), short answers."""
    page.kind.setCurrentIndex(page.kind.findData("tabby-folder"))
    page.tabby_folder.setText(str(folder))
    page.tabby_python.setText(sys.executable)
    page.budget.setText(budget)
    page.max_new.setValue(16)
    page.prompts.setText("")


def tabby_servers() -> list[psutil.Process]:
    out = []
    for process in psutil.Process().children(recursive=True):
        try:
            if any(part.endswith("main.py") for part in process.cmdline()):
                out.append(process)
        except psutil.Error:
            pass
    return out


def settings_text() -> str:
    settings = QSettings()
    return "\n".join(f"{key}={settings.value(key)}" for key in settings.allKeys())


@pytest.mark.slow
def test_a_tabbyapi_folder_is_tuned_applied_and_rolled_back(qtbot, configured_qapp,
                                                            models_install):
    from specdeck.core.tune import report
    from specdeck.core.tune.live import result_lines

    install = models_install
    config = install / "config.yml"
    original = config.read_bytes()
    window, page = tune_page(qtbot)
    folder_form(page, install)
    # Nothing of llama-server's is asked for TabbyAPI (it reads config.yml), nor a download.
    assert not page.binary.isVisibleTo(page) and not page.flags.isVisibleTo(page)
    assert page.api_key_env.isVisibleTo(page) and not page.admin_key_env.isVisibleTo(page)
    assert not page.downloads.isEnabled()
    qtbot.mouseClick(page.start_button, _left())
    assert not page.start_button.isEnabled() and not page.tabby_folder.isEnabled()
    qtbot.waitUntil(lambda: page.live.phase == "search", timeout=60_000)
    assert page.live.setup.managed and page.live.setup.config == config
    rows = [page.candidates.item(r, 0).text() for r in range(page.candidates.rowCount())]
    # The draft of the target's family and n-gram drafting; the others with why not.
    assert sorted(rows) == [f"model {DRAFT}", "ngram"]
    for row, candidate in enumerate(page.live.candidates):  # core's prediction and size
        assert page.candidates.item(row, 1).text() == candidate.predicted_text
        assert page.candidates.item(row, 2).text() == candidate.size_text
        assert page.candidates.item(row, 3).text() == "on disk"
    not_tried = page.not_tried.text()
    assert "mtp (the target has no MTP layers)" in not_tried
    assert "Llama-3.2-1B" in not_tried  # another tokenizer
    assert "EXL2 weights; TabbyAPI main loads EXL3 models only" in not_tried
    # TuneLive knows TabbyAPI's settings: one per draft_num_tokens.
    assert sorted(c.label for c in page.live.cells.values()) == sorted(
        f"{label} k={k}" for label in (f"model {DRAFT}", "ngram") for k in (2, 4, 8))
    qtbot.waitUntil(lambda: page.round.text().startswith("Round 1"), timeout=60_000)

    qtbot.waitUntil(lambda: page.result is not None, timeout=400_000)
    result = page.result
    assert not result.cancelled and result.decision.apply, result.decision.why
    assert result.decision.flags == ("draft_mode=ngram", "draft_num_tokens=4")
    assert any(c.figures is not None for c in page.live.cells.values())  # measured as it ran
    shown = _plain(page.verdict.text())
    for what, text in result_lines(result):  # the verdict is core's, word for word
        assert what in shown and text in shown
    assert "Best setting (config.yml)" in shown
    assert "Candidates: predicted and measured" in page.report.toPlainText()
    assert page.apply_button.isEnabled() and not page.rollback_button.isEnabled()
    assert config.read_bytes() == original  # nothing written before Apply
    qtbot.waitUntil(lambda: not tabby_servers(), timeout=30_000)

    shown_diff = apply_and_save(qtbot, page, config)
    assert "+  draft_mode: ngram" in shown_diff["diff"]
    assert "+  draft_num_tokens: 4" in shown_diff["diff"]
    assert shown_diff["file then"] == original  # nothing written before the user said so
    assert "TabbyAPI is started from the file as written" in shown_diff["intro"]
    qtbot.waitUntil(lambda: page.result.applied is not None and page.result.applied.written,
                    timeout=120_000)
    applied = page.result.applied
    assert not applied.rolled_back, applied.why
    written = config.read_text()
    assert "  draft_mode: ngram\n" in written and "  draft_num_tokens: 4\n" in written
    assert (install / "config.yml.bak").read_bytes() == original
    assert "TabbyAPI started from the saved file answered" in page.verdict.text()
    assert page.rollback_button.isEnabled() and not page.apply_button.isEnabled()

    qtbot.mouseClick(page.rollback_button, _left())
    qtbot.waitUntil(lambda: page.result.applied.rolled_back, timeout=20_000)
    assert config.read_bytes() == original  # byte for byte
    assert "Rolled back" in page.verdict.text()
    assert page.apply_button.isEnabled() and not page.rollback_button.isEnabled()
    qtbot.waitUntil(lambda: not tabby_servers(), timeout=30_000)

    # Secrets: the keys are read from the environment and api_tokens.yml, never kept.
    page._save()
    for text in (settings_text(), report.markdown(page.result), page.report.toPlainText(),
                 page.verdict.text()):
        assert ADMIN_KEY not in text and API_KEY not in text
    assert QSettings().value("tune/tabby_folder") == str(install)


@pytest.mark.slow
def test_cancel_during_a_tabbyapi_search_leaves_config_yml_byte_identical(qtbot, configured_qapp,
                                                                         models_install):
    install = models_install
    config = install / "config.yml"
    original = config.read_bytes()
    window, page = tune_page(qtbot)
    folder_form(page, install, budget="5m")
    page.start()
    qtbot.waitUntil(lambda: page.live.plan is not None and page.live.plan.done >= 1,
                    timeout=120_000)
    assert page.live.phase == "search"
    qtbot.mouseClick(page.cancel_button, _left())
    assert "Cancelling" in page.stage.text()
    qtbot.waitUntil(lambda: page.result is not None or page.banner.isVisibleTo(page),
                    timeout=120_000)
    assert page.result is not None and page.result.cancelled
    assert not page.result.decision.apply and not page.apply_button.isEnabled()
    assert page.result.decision.why in _plain(page.verdict.text())
    assert config.read_bytes() == original
    assert not (install / "config.yml.bak").exists()
    qtbot.waitUntil(lambda: not tabby_servers(), timeout=30_000)


def test_a_running_tabbyapi_is_read_with_the_admin_key_its_variable_holds(
        qtbot, configured_qapp, install, monkeypatch):
    """The running kind goes through core's read_tabby and tune_tabby: the key variable the
    form names is read (its name is kept, never the key), and what core refuses is said in
    the banner (here: no draft model passes the checks, and only drafts are searched on a
    running TabbyAPI)."""
    secret = "admin-key-only-in-the-environment"
    server, url = start_tabby(branch="main", model_name="Qwen2.5-7B-exl3", admin_key=secret)
    try:
        monkeypatch.setenv("MY_TABBY_ADMIN", secret)
        monkeypatch.setenv("SPECDECK_SERVER_API_KEY", API_KEY)
        window, page = tune_page(qtbot)
        page.kind.setCurrentIndex(page.kind.findData("tabby"))
        assert page.admin_key_env.isVisibleTo(page) and not page.binary.isVisibleTo(page)
        page.tabby_url.setText(url)
        page.tabby_config.setText(str(install / "config.yml"))
        page.admin_key_env.setText("MY_TABBY_ADMIN")
        page.budget.setText("1m")
        qtbot.mouseClick(page.start_button, _left())
        qtbot.waitUntil(lambda: page.banner.isVisibleTo(page), timeout=60_000)
        text = page.banner.label.text()
        assert "nothing to try" in text and "Traceback" not in text
        assert page.live.setup is not None and not page.live.setup.managed  # read from it
        assert page.live.setup.url == url
        assert "draft_mode when it starts" in page.not_tried.text()  # core's words, shown
        assert QSettings().value("tune/admin_key_env") == "MY_TABBY_ADMIN"
        assert secret not in settings_text() and secret not in text
        assert page.start_button.isEnabled() and page.result is None
    finally:
        server.shutdown()
        server.server_close()


def test_what_is_missing_for_tabbyapi_is_said_in_the_banner(qtbot, configured_qapp, tmp_path,
                                                           monkeypatch):
    monkeypatch.delenv("SPECDECK_TABBY_ADMIN_KEY", raising=False)
    window, page = tune_page(qtbot)
    page.budget.setText("1m")

    def banner_after_start() -> str:
        page.banner.hide()
        qtbot.mouseClick(page.start_button, _left())
        qtbot.waitUntil(lambda: page.banner.isVisibleTo(page) and not page.tasks.running("tune"),
                        timeout=30_000)
        return page.banner.label.text()

    page.kind.setCurrentIndex(page.kind.findData("tabby-folder"))
    page.tabby_folder.setText("")
    assert "Say which TabbyAPI to tune" in banner_after_start()
    page.tabby_folder.setText(str(tmp_path / "no-such-tabbyAPI"))
    page.tabby_python.setText(sys.executable)
    missing = banner_after_start()
    assert "no-such-tabbyAPI" in missing and "Traceback" not in missing
    page.kind.setCurrentIndex(page.kind.findData("tabby"))
    page.tabby_url.setText("http://127.0.0.1:9")
    page.tabby_config.setText("")
    assert "needs the config.yml it was started from" in banner_after_start()
    page.tabby_config.setText(str(tmp_path / "config.yml"))
    assert "SPECDECK_TABBY_ADMIN_KEY is not set" in banner_after_start()
    monkeypatch.setenv("SPECDECK_TABBY_ADMIN_KEY", ADMIN_KEY)
    missing = banner_after_start()
    assert "config.yml" in missing and "Traceback" not in missing
    assert page.result is None and not tabby_servers()


def test_start_offers_tune_for_a_found_tabbyapi_folder(qtbot, configured_qapp, tmp_path,
                                                      monkeypatch):
    from specdeck.core import discovery

    folder = make_install(tmp_path / "tabbyAPI", "main", draft=None)
    window, start = start_page_finding(qtbot, tmp_path, monkeypatch)
    assert len(start.tune_buttons) == 1  # the TabbyAPI folder: the one setup found here
    qtbot.mouseClick(start.tune_buttons[0], _left())
    assert window.current_page_key() == "tune"
    page = window.page("tune")
    assert page.kind.currentData() == "tabby-folder"
    assert page.tabby_folder.text() == str(folder)
    assert not any(w.isVisibleTo(page) for w in (page.binary, page.flags, page.admin_key_env))
    assert not page.tasks.running("tune")  # prefilled, not started

    (folder / "main.py").unlink()  # a config.yml alone: a running TabbyAPI's
    page.handle_request(discovery.tabby_tune_argument(folder / "config.yml"))
    assert page.kind.currentData() == "tabby"
    assert page.tabby_config.text() == str(folder / "config.yml")
    assert page.admin_key_env.isVisibleTo(page)

