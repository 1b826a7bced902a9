"""The Tune page (issue 27), driven through its real widgets: a real tune of the demo GGUF on
the pinned llama-server from Tune to the result, Cancel during the search leaving a llama-swap
config byte-identical, Apply (the diff shown first, then written and proven by starting
llama-server from the file) and Roll back, and Start -> Tune prefilled.

Which setting wins on a shared 2-core machine depends on its load, so the live tests check
what must hold whatever wins: every method the binary offers is listed (tried, or why not),
the page's words are core's, nothing is written unless applied, and no llama-server is left
running."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from specdeck.gui.main_window import MainWindow
from swap_samples import tune_config

PROMPTS = ("List the numbers from 1 to 20, separated by commas.",
           "Repeat this sentence three times: the cat sat on the mat.")


def prompts_file(folder: Path) -> Path:
    path = folder / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS), encoding="utf-8")
    return path


def tune_page(qtbot, window=None):
    """The Tune page once it knows the demo's default llama-server (looked for in a worker):
    a result shown before that belongs to a form whose binary then changes under it."""
    window = window or MainWindow()
    qtbot.addWidget(window)
    page = window.show_page("tune")
    qtbot.waitUntil(lambda: not page.looking_for_binary(), timeout=30_000)
    return window, page


def small(page, llama_bin: Path, folder: Path, budget: str = "20s") -> None:
    """The form set for a tune the shared CPU finishes in a minute or two: two prompts (one
    to tune on, one to verify on), short answers, a short budget."""
    page.binary.setText(str(llama_bin))
    page.budget.setText(budget)
    page.max_new.setValue(16)
    page.prompts.setText(str(prompts_file(folder)))


def verified(config: Path):
    """A tune result whose verification said apply n-gram drafting to model smol (what
    core.tune.verify.decide returns for a winner verified faster with its output unchanged;
    decide is tested in tests/core/test_tune.py). Its flags draft on the held-out prompt that
    the relaunch from the written file sends (llama-server's default n-gram size drafts
    nothing on short answers)."""
    from specdeck.core.tune.candidates import Candidate
    from specdeck.core.tune.run import Decided, TuneOptions, TuneResult
    from specdeck.core.tune.setup import from_swap

    flags = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2")
    return TuneResult(from_swap(config, "smol"),
                      TuneOptions(suites=("grounded",), prompts_per_suite=2, max_new_tokens=48),
                      (), (), None, None,
                      Decided(Candidate("ngram-simple"), flags, True, "verified"))


def apply_and_save(qtbot, page, config: Path) -> dict:
    """Click Apply, then Save in the dialog that shows the diff, as a user would; returns what
    the dialog showed ("diff", its question "intro") and the file's bytes then."""
    from PySide6.QtWidgets import QLabel
    from specdeck.gui.widgets.diff_view import DiffView

    shown = {}

    def save_in_dialog():  # runs inside the dialog's own event loop, as a user's click would
        dialog = QApplication.activeModalWidget()
        if dialog is not None and "diff" not in shown:
            shown["diff"] = dialog.findChild(DiffView).toPlainText()
            shown["intro"] = " ".join(label.text() for label in dialog.findChildren(QLabel))
            shown["file then"] = config.read_bytes()
            dialog.accept()

    watcher = QTimer(page)
    watcher.timeout.connect(save_in_dialog)
    watcher.start(50)
    qtbot.mouseClick(page.apply_button, _left())
    qtbot.waitUntil(lambda: "diff" in shown, timeout=60_000)
    watcher.stop()
    return shown


def llama_servers() -> set[int]:
    """This worker's llama-servers: a module that ran before on the same worker may keep its
    own alive (a fixture's), so each test compares with what ran before it started."""
    return {p.pid for p in psutil.Process().children(recursive=True)
            if "llama-server" in p.name()}


@pytest.fixture
def servers_left():
    """The llama-servers started since the test began that still run."""
    before = llama_servers()
    return lambda: llama_servers() - before


@pytest.mark.slow
def test_a_demo_tune_runs_from_tune_to_the_result(qtbot, servers_left, configured_qapp, llama_bin,
                                                  demo_gguf, tmp_path):
    from specdeck.core.servers.llama_server import binary_help
    from specdeck.core.tune import report
    from specdeck.core.tune.live import result_lines

    window, page = tune_page(qtbot)
    page.kind.setCurrentIndex(page.kind.findData("demo"))
    small(page, llama_bin, tmp_path)
    page.flags.setText("-t 1 -c 1024")
    qtbot.mouseClick(page.start_button, _left())
    assert not page.start_button.isEnabled() and page.cancel_button.isEnabled()
    assert not page.binary.isEnabled()  # the form is what runs: not editable meanwhile
    qtbot.waitUntil(lambda: page.live.phase == "search", timeout=120_000)
    offered = [t for t in binary_help(llama_bin).spec_types if t != "none"]
    listed = {page.candidates.item(r, 0).text().split()[0]
              for r in range(page.candidates.rowCount())}
    listed |= {n.what.split()[0] for n in page.live.not_tried
               if f"{n.what} ({n.why})" in page.not_tried.text()}
    assert set(offered) <= listed  # every method the binary lists: a candidate, or why not
    first = page.live.candidates[0]
    assert page.candidates.item(0, 1).text() == first.predicted_text  # core's prediction
    assert page.candidates.item(0, 3).text() == "on disk"
    # every setting was predicted from one plain run first: the table says why the search
    # measures the few it does (accepted length by position against a step's cost)
    rows = page.live.forecast_rows()
    assert rows and page.tables.currentWidget() is page.forecast
    assert page.forecast.rowCount() == len(rows)
    assert [page.forecast.item(0, c).text() for c in range(len(rows[0]))] == list(rows[0])
    assert "✔ Predict" in page.phases.text()
    qtbot.waitUntil(lambda: page.round.text().startswith("Round 1"), timeout=120_000)

    qtbot.waitUntil(lambda: page.result is not None, timeout=600_000)
    result = page.result
    # The plot drew the runs: each finished run's mark at least (16-token runs on a quiet
    # machine end inside the live rate's window, so they may have no rate points).
    assert page.plots.points() >= sum(1 for t in result.tried if t.measured is not None)
    assert page.phases.text().endswith("<b>▶ Result</b>")
    assert page.best.text() == page.live.best_text(final=True)  # over: not "so far"
    assert "so far" not in page.best.text()
    shown = _plain(page.verdict.text())
    for what, text in result_lines(result):  # the verdict is core's, word for word
        assert what in shown and text in shown
    assert result.decision.why in shown
    assert "Candidates: predicted and measured" in page.report.toPlainText()
    assert page.report.toPlainText().count("\n") > report.markdown(result).count("\n") / 3
    assert page.apply_button.isEnabled() == result.decision.apply
    assert not page.rollback_button.isEnabled()
    assert page.start_button.isEnabled() and not page.cancel_button.isEnabled()
    assert any(t.measured is not None for t in result.tried)
    qtbot.waitUntil(lambda: not servers_left(), timeout=30_000)


@pytest.mark.slow
def test_cancel_during_the_search_leaves_the_config_byte_identical(qtbot, servers_left,
                                                                   configured_qapp, llama_bin,
                                                                   demo_gguf, tmp_path):
    config = tune_config(tmp_path, llama_bin, demo_gguf, "--spec-type ngram-mod")
    original = config.read_bytes()
    window, page = tune_page(qtbot)
    page.handle_request(str(config))
    qtbot.waitUntil(lambda: page.model.currentData() == "smol", timeout=20_000)
    small(page, llama_bin, tmp_path, budget="5m")
    page.start()
    qtbot.waitUntil(lambda: page.live.plan is not None and page.live.plan.done >= 1,
                    timeout=300_000)
    assert page.live.phase == "search"
    qtbot.mouseClick(page.cancel_button, _left())
    assert "Cancelling" in page.stage.text()
    qtbot.waitUntil(lambda: page.result is not None or not page.banner.isHidden(), timeout=120_000)
    assert page.result is not None and page.result.cancelled
    assert not page.result.decision.apply
    assert page.result.decision.why in _plain(page.verdict.text())
    assert "Cancelled" in page.result.decision.why
    # Cut short in round 1: the page says nothing as settled ("In the search, ...").
    assert page.best.text() == page.live.best_text(final=True, cancelled=True)
    assert "cancel" in page.best.text().lower()
    assert not page.apply_button.isEnabled()
    assert config.read_bytes() == original
    assert not (tmp_path / "config.yaml.bak").exists()
    qtbot.waitUntil(lambda: not servers_left(), timeout=30_000)


@pytest.mark.slow
def test_apply_shows_the_diff_writes_proves_and_rolls_back(qtbot, servers_left, configured_qapp,
                                                           llama_bin, demo_gguf, tmp_path):

    config = tune_config(tmp_path, llama_bin, demo_gguf)
    original = config.read_bytes()
    result = verified(config)
    window, page = tune_page(qtbot)
    page.finished(result)
    assert page.apply_button.isEnabled() and not page.rollback_button.isEnabled()

    shown = apply_and_save(qtbot, page, config)
    assert "+" in shown["diff"] and "--spec-type ngram-simple" in shown["diff"]
    assert shown["file then"] == original  # nothing written before the user said so
    qtbot.waitUntil(lambda: page.result.applied is not None and page.result.applied.written,
                    timeout=180_000)
    applied = page.result.applied
    assert not applied.rolled_back, applied.why
    assert "--spec-type ngram-simple --spec-ngram-simple-size-n 2" in config.read_text()
    assert (tmp_path / "config.yaml.bak").read_bytes() == original
    assert "answered and drafted" in page.verdict.text()
    assert page.rollback_button.isEnabled() and not page.apply_button.isEnabled()

    qtbot.mouseClick(page.rollback_button, _left())
    qtbot.waitUntil(lambda: page.result.applied.rolled_back, timeout=20_000)
    assert config.read_bytes() == original
    assert "Rolled back" in page.verdict.text()
    assert "Rolled back" in page.report.toPlainText()
    assert page.apply_button.isEnabled() and not page.rollback_button.isEnabled()
    qtbot.waitUntil(lambda: not servers_left(), timeout=30_000)


@pytest.mark.slow
def test_roll_back_refuses_a_file_edited_after_apply(qtbot, configured_qapp, llama_bin,
                                                    demo_gguf, tmp_path):
    from specdeck.core.tune.apply import apply

    config = tune_config(tmp_path, llama_bin, demo_gguf)
    result = verified(config)
    result = result.with_applied(apply(result))
    assert result.applied.written and not result.applied.rolled_back
    window, page = tune_page(qtbot)
    page.finished(result)
    edited = config.read_text() + "# my own edit after tuning\n"
    config.write_text(edited)
    qtbot.mouseClick(page.rollback_button, _left())
    qtbot.waitUntil(lambda: not page.banner.isHidden(), timeout=20_000)
    assert "changed since SpecDeck wrote it" in page.banner.label.text()
    assert config.read_text() == edited  # the user's later edit is theirs
    assert not page.result.applied.rolled_back


def start_page_finding(qtbot, home: Path, monkeypatch):
    """The Start page of a new window, showing what it finds with ``home`` as the user's home
    (no port asked); waits for its Tune… buttons."""
    from specdeck.core import discovery

    monkeypatch.setattr(discovery, "_home", lambda: home)
    window = MainWindow()
    qtbot.addWidget(window)
    start = window.show_page("start")
    start._discover = lambda: discovery.discover(ports={})
    start.refresh()
    qtbot.waitUntil(lambda: bool(start.tune_buttons), timeout=20_000)
    return window, start


def test_start_offers_tune_for_a_found_llama_swap_config_and_the_demo(
        qtbot, configured_qapp, tmp_path, monkeypatch):
    folder = tmp_path / "llama-swap"
    folder.mkdir()
    config = tune_config(folder, Path("/opt/llama/llama-server"), tmp_path / "model.gguf")
    window, start = start_page_finding(qtbot, tmp_path, monkeypatch)
    assert len(start.tune_buttons) == 1  # the llama-swap config: the one setup found here
    qtbot.mouseClick(start.tune_buttons[0], _left())
    assert window.current_page_key() == "tune"
    page = window.page("tune")
    assert page.kind.currentData() == "llama-swap"
    assert page.swap_config.text() == str(config)
    assert not page.flags.isEnabled()  # a llama-swap model's flags are its cmd's
    qtbot.waitUntil(lambda: page.model.count() == 2, timeout=20_000)
    assert page.model.currentData() == "smol"
    remote = page.model.findData("remote")
    assert not page.model.model().item(remote).isEnabled()  # not a llama-server: why, shown
    assert "does not run llama-server" in page.model.itemData(remote, _tooltip())

    window.show_page("start")
    qtbot.mouseClick(start.tune_demo_button, _left())
    assert window.current_page_key() == "tune"
    assert page.kind.currentData() == "demo" and page.flags.isEnabled()


def test_what_is_wrong_with_the_form_is_said_in_place(qtbot, configured_qapp, tmp_path):
    window, page = tune_page(qtbot)
    page.kind.setCurrentIndex(page.kind.findData("llama-server"))
    page.binary.setText("")
    qtbot.mouseClick(page.start_button, _left())
    assert not page.banner.isHidden()
    assert "Say which llama-server and GGUF" in page.banner.label.text()
    page.kind.setCurrentIndex(page.kind.findData("demo"))
    qtbot.waitUntil(lambda: not page.looking_for_binary(), timeout=10_000)  # which llama-server
    page.budget.setText("ten minutes")
    qtbot.mouseClick(page.start_button, _left())
    assert "is not a duration" in page.banner.label.text()
    page.budget.setText("1m")
    page.flags.setText("-t '2")
    qtbot.mouseClick(page.start_button, _left())
    assert "flags cannot be read" in page.banner.label.text()
    assert page.result is None and not page.tasks.running("tune")


@dataclass(frozen=True)
class SomethingNew:
    text: str


def test_candidates_show_predictions_and_download_events_as_they_come(qtbot, configured_qapp):
    from specdeck.core.tune.candidates import Candidate, NotTried
    from specdeck.core.tune.downloads import Downloaded, Downloading
    from specdeck.core.tune.live import TuneLive
    from specdeck.core.tune.predict import Prediction
    from specdeck.core.tune.run import CandidatesFound, Phase

    window, page = tune_page(qtbot)
    page.live = TuneLive()
    ngram = Candidate("ngram-mod")
    draft = Candidate("draft-simple", Path("/models/draft-0.5b.gguf"), draft_bytes=300 << 20,
                      download_bytes=80 << 20)
    for event in (Phase("candidates", "Reading what llama-server can draft with"),
                  CandidatesFound(((draft, Prediction(1.6, 1.2, 2.1, "theory (a)")),
                                   (ngram, Prediction(1.1, 0.9, 1.4, "theory (b)"))),
                                  (NotTried("draft-eagle3", "needs an EAGLE-3 head"),)),
                  Downloading(draft.label, "bartowski/draft-GGUF", "draft-0.5b.gguf",
                              12 << 20, 80 << 20)):
        page.events.put(event)
    assert page.pump() == 3
    rows = rows_of(page.candidates)
    assert rows[0] == ["draft-simple draft-0.5b.gguf", "1.60x (1.20-2.10)", "300 MiB",
                       "downloading 12.0 MiB of 80.0 MiB", "-"]
    assert rows[1][:4] == ["ngram-mod", "1.10x (0.90-1.40)", "-", "on disk"]
    assert len(rows) == 2
    assert page.not_tried.text() == "Not tried: draft-eagle3 (needs an EAGLE-3 head)"
    assert page.candidates.item(0, 1).toolTip() == "theory (a)"
    assert "▶ Candidates" in page.phases.text()
    page.events.put(Downloaded(draft.label, "bartowski/draft-GGUF", "draft-0.5b.gguf",
                               "downloaded", 80 << 20, 80 << 20, 3.0))
    page.events.put(SomethingNew("Checking the download's sha256"))
    page.events.put(object())  # an event the page knows nothing of: ignored, not a crash
    assert page.pump() == 3
    assert rows_of(page.candidates)[0][3] == "✔ downloaded"
    assert page.stage.text() == "Checking the download's sha256"
    page.events.put(Downloaded(draft.label, "bartowski/draft-GGUF", "draft-0.5b.gguf",
                               "failed", 80 << 20, why="the Hub answered 500 twice"))
    page.pump()
    assert rows_of(page.candidates)[0][3] == "failed: the Hub answered 500 twice"


def rows_of(table) -> list[list[str]]:
    return [[table.item(r, c).text() if table.item(r, c) else ""
             for c in range(table.columnCount())] for r in range(table.rowCount())]


def _plain(rich: str) -> str:
    from PySide6.QtGui import QTextDocument

    document = QTextDocument()
    document.setHtml(rich)
    return " ".join(document.toPlainText().split())


def _tooltip():
    from PySide6.QtCore import Qt

    return Qt.ItemDataRole.ToolTipRole


def _left():
    from PySide6.QtCore import Qt

    return Qt.MouseButton.LeftButton


def _broken_words(browser) -> list[str]:
    """Words the browser's layout split between two letters across two lines inside a table
    cell (Qt's default wraps anywhere: 'grounde' / 'd'; after a hyphen is a word's break)."""
    from PySide6.QtGui import QTextCursor

    broken = []
    block = browser.document().begin()
    while block.isValid():
        layout, text = block.layout(), block.text()
        if QTextCursor(block).currentTable() is not None and layout is not None:
            for i in range(1, layout.lineCount()):
                at = layout.lineAt(i).textStart()
                if 0 < at < len(text) and text[at - 1].isalnum() and text[at].isalnum():
                    broken.append(text)
        block = block.next()
    return broken


def test_the_reports_table_never_splits_a_word(qtbot, configured_qapp):
    """At 1280 x 800 the report's seven-column table is narrower than its words: a column
    read 'grounde d'. Words stay whole; the table scrolls sideways instead."""
    window, page = tune_page(qtbot)
    window.resize(1280, 800)
    window.show()
    rows = "".join(f"| ngram-map-k k={k} (dropped, round 1: slower than no drafting) | "
                   f"103.2 (0.97x) | 95.1 (0.99x) | 99.0 (1.01x) | 98.7 (0.99x) | "
                   f"drafted nothing | lossless |\n" for k in (1, 2, 4, 8, 16))
    page.report.setMarkdown("| setting | grounded | code | structured | all | accepted | "
                            "lossless |\n|---|---|---|---|---|---|---|\n" + rows)
    qtbot.waitUntil(lambda: page.report.document().size().width() > 0, timeout=5_000)
    QApplication.processEvents()
    assert page.report.viewport().width() < 700  # narrow enough that Qt's default breaks one
    assert _broken_words(page.report) == []


def swap_form(qtbot, page, config: Path) -> None:
    """The form set to tune ``config``'s smol model (its models read in a worker)."""
    from specdeck.gui.pages.tune import SWAP

    page.kind.setCurrentIndex(page.kind.findData(SWAP))
    page.swap_config.setText(str(config))
    page.load_models()
    qtbot.waitUntil(lambda: page.model.currentData() == "smol", timeout=20_000)


def test_a_result_belongs_to_the_setup_that_produced_it(qtbot, configured_qapp, llama_bin,
                                                        demo_gguf, tmp_path):
    """Issue 44: after switching the Tune page's setup to the demo, a llama-swap result kept
    Apply enabled, and old banners outlived their setup. Apply is for the result's setup
    only, its banner goes with it, and switching back makes the result applicable again."""
    from specdeck.gui.pages.tune import DEMO, SWAP

    config = tune_config(tmp_path, llama_bin, demo_gguf)
    window, page = tune_page(qtbot)
    swap_form(qtbot, page, config)
    page.finished(verified(config))
    assert page.apply_button.isEnabled() and page.stale_note.isHidden()
    page.banner.show_message("a banner about this llama-swap result", "warning")

    page.kind.setCurrentIndex(page.kind.findData(DEMO))
    assert not page.apply_button.isEnabled()
    assert page.banner.isHidden()
    assert not page.stale_note.isHidden()
    assert "This result is for A llama-swap model smol" in page.stale_note.text()
    page.apply_result()  # refused: nothing is previewed or written for another setup
    assert not page.tasks.running("apply")

    page.kind.setCurrentIndex(page.kind.findData(SWAP))
    qtbot.waitUntil(lambda: page.model.currentData() == "smol", timeout=20_000)
    assert page.apply_button.isEnabled() and page.stale_note.isHidden()


def test_the_demos_llama_server_is_looked_for_in_a_worker(qtbot, configured_qapp, llama_bin,
                                                          demo_gguf, tmp_path, monkeypatch):
    """Issue 45: the demo's default llama-server was looked for on disk on the GUI thread
    (a few stats of the home folder's build folders), at every keystroke while a result was
    shown. It is looked for in a worker when the demo is chosen; Tune pressed meanwhile
    starts once it is known."""
    import threading

    from specdeck.core.tune import setup
    from specdeck.gui.pages.tune import DEMO, SWAP

    looked_on, slow, disk = [], threading.Event(), threading.Event()

    def candidates():
        looked_on.append(threading.current_thread() is threading.main_thread())
        if slow.is_set():
            disk.wait(10)  # a slow disk: the page goes on meanwhile
        return [llama_bin]

    monkeypatch.setattr(setup, "llama_server_candidates", candidates)
    config = tune_config(tmp_path, llama_bin, demo_gguf)
    window, page = tune_page(qtbot)
    swap_form(qtbot, page, config)
    page.finished(verified(config))  # a result shown: each edit asks whether it still applies
    slow.set()
    page.kind.setCurrentIndex(page.kind.findData(DEMO))
    page.binary.setText("")
    for key in "-t 1":
        page.flags.setText(page.flags.text() + key)
    assert page.looking_for_binary() and "looking" in page.binary.placeholderText()
    small(page, "", tmp_path)
    page.start()  # waits for the look, then starts
    assert page.result_request.kind == SWAP and not page.tasks.running("tune")
    disk.set()
    qtbot.waitUntil(lambda: page.result_request.kind == DEMO, timeout=10_000)
    assert page.result_request.binary == str(llama_bin)
    assert str(llama_bin) in page.binary.placeholderText()
    assert looked_on and not any(looked_on)
    page.cancel()
    qtbot.waitUntil(lambda: not page.tasks.running("tune"), timeout=60_000)


def test_the_apply_diff_shows_a_one_line_cmd_change_on_screen(qtbot, configured_qapp, tmp_path):
    """Issue 44: a llama-swap cmd is one long line; the Apply dialog's diff put its change
    off-screen to the right. The diff wraps (no sideways scrolling) and the dialog names the
    drafting flags it writes."""
    from PySide6.QtWidgets import QLabel
    from specdeck.core.tune.apply import Applied
    from specdeck.gui.widgets.diff_view import DiffView

    config = tmp_path / "config.yaml"
    cmd = "/opt/llama.cpp/build/bin/llama-server --port ${PORT} -m /models/big.gguf -ngl 99 -c 8192"
    flags = "--spec-type ngram-simple --spec-ngram-simple-size-n 2"
    diff = (f"--- {config}\n+++ {config}\n@@ -3 +3 @@\n-    cmd: {cmd}\n"
            f"+    cmd: {cmd} {flags}\n")
    window, page = tune_page(qtbot)
    page.result = verified_like(config)
    seen = {}

    def look():
        dialog = QApplication.activeModalWidget()
        if dialog is None:
            QTimer.singleShot(20, look)
            return
        try:
            view = dialog.findChild(DiffView)
            seen["sideways"] = view.horizontalScrollBar().maximum()
            label = dialog.findChild(QLabel, "confirmNote")
            seen["flags"] = None if label is None else label.text()
        finally:
            dialog.reject()

    QTimer.singleShot(0, look)
    assert page.confirm_diff(Applied(config, flags, diff)) is False
    assert seen["sideways"] == 0
    assert seen["flags"] == f"The drafting flags it writes: {flags}"


def verified_like(config: Path):
    """A result to confirm against (its setup names ``config``; nothing is read)."""
    from types import SimpleNamespace

    return SimpleNamespace(setup=SimpleNamespace(kind="llama-swap", managed=False))


def _all_reachable(widget) -> bool:
    """Every row of ``widget`` can be seen: shown whole, or inside a scroll area whose
    scrollbar reaches the rest."""
    from PySide6.QtWidgets import QScrollArea

    needed = widget.heightForWidth(widget.width())
    parent = widget.parentWidget()
    while parent is not None and not isinstance(parent, QScrollArea):
        parent = parent.parentWidget()
    if parent is not None:
        hidden = max(0, widget.height() - parent.viewport().height())
        return widget.height() >= needed and parent.verticalScrollBar().maximum() >= hidden
    return widget.visibleRegion().boundingRect().height() >= needed


def test_at_1024x640_the_result_can_be_read_whole(qtbot, configured_qapp, llama_bin):
    """Issue 44: at 1024x640 the Tune page's result was cut off with no scrollbar."""
    from specdeck.core.tune.candidates import Candidate
    from specdeck.core.tune.run import Decided, TuneOptions, TuneResult
    from specdeck.core.tune.setup import demo

    window, page = tune_page(qtbot)
    window.resize(1024, 640)
    window.show()
    qtbot.waitExposed(window)
    why = ("ngram-simple k=4: 1.30x over no drafting (1.21-1.39) on held-out prompts, output "
           "unchanged; your current setting measured 1.02x. ") * 4
    page.finished(TuneResult(demo(llama_bin), TuneOptions(), (), (), None, None,
                             Decided(Candidate("ngram-simple"), ("--spec-type", "ngram-simple"),
                                     True, why)))
    qtbot.waitUntil(lambda: _all_reachable(page.verdict), timeout=5000)  # once laid out
    assert window.width() <= 1024 and window.height() <= 640
    # What was not tried (a long line per method the binary offers) is reachable too.
    page.not_tried.setText("Not tried: " + "; ".join(
        f"draft-{n} (needs a draft model (-md) made for draft-{n})" for n in range(12)))
    qtbot.waitUntil(lambda: _all_reachable(page.not_tried), timeout=5000)


def test_the_tune_page_shows_its_speed_and_acceptance_plots(qtbot):
    """The Tune page shows two of the A/B page's four plots. It hid the other two by their
    parent widget, which became the whole row when the titles moved into one row: no plot
    was shown at all."""
    window, page = tune_page(qtbot)
    window.resize(1280, 800)
    window.show()
    page._ensure_plots()
    plots = page.plots
    # a widget laid into a shown one is shown from the event loop (QLayout::addChildWidget)
    qtbot.waitUntil(lambda: plots.isVisible() and plots.speed_plot.width() > 0)
    shown = (plots.speed_plot, plots.accept_plot, plots.titles["speed"], plots.titles["accept"])
    hidden = (plots.position_plot, plots.memory_plot, plots.titles["positions"],
              plots.titles["memory"])
    assert all(w.isVisibleTo(window) for w in shown)
    assert not any(w.isVisibleTo(window) for w in hidden)
    # the two share the row's width between them
    assert plots.speed_plot.width() + plots.accept_plot.width() > 0.8 * plots.width()


def test_before_a_tune_the_plots_area_says_what_will_be_there(qtbot):
    """The plots are built when a tune starts: before that their third of the page was
    blank. It says what will appear there, until the plots do."""
    from PySide6.QtWidgets import QLabel

    window, page = tune_page(qtbot)
    window.resize(1280, 800)
    window.show()
    qtbot.waitUntil(lambda: page.plots_host.height() > 0)

    def said() -> list[str]:
        return [label.text() for label in page.plots_host.findChildren(QLabel)
                if label.isVisibleTo(window) and label.text()]

    assert any("plots appear here when a tune starts" in text for text in said())
    page._ensure_plots()
    qtbot.waitUntil(lambda: page.plots.isVisible())
    assert not any("tune starts" in text for text in said())
