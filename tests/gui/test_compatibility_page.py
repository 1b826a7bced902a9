"""The Compatibility page, driven like a user would, on the real fixture models."""

from __future__ import annotations

import pytest
from conftest import MODELS
from PySide6.QtCore import Qt
from specdeck.core.compat.report import CompatVerdict
from specdeck.core.settings import Settings
from specdeck.gui.context import AppContext
from specdeck.gui.pages.compatibility import CompatibilityPage

TIMEOUT_MS = 30_000


@pytest.fixture
def library(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    for name in ("Qwen2.5-0.5B-Instruct", "TinyLlama-1.1B-Chat-v1.0"):
        (folder / name).symlink_to(MODELS / name, target_is_directory=True)
    return folder


@pytest.fixture
def page(qtbot, configured_qapp, library):
    context = AppContext()
    context.update_settings(Settings(extra_model_dirs=(str(library),)))
    widget = CompatibilityPage(context)
    qtbot.addWidget(widget)
    widget.resize(1200, 800)
    widget.show()
    qtbot.waitUntil(lambda: widget.draft.combo.count() == 2, timeout=TIMEOUT_MS)
    yield widget
    widget.shutdown()


def check(qtbot, page, target, draft):
    page.target.set_value(str(target))
    page.draft.set_value(str(draft))
    with qtbot.waitSignal(page.report_shown, timeout=TIMEOUT_MS) as shown:
        qtbot.mouseClick(page.check_button, Qt.MouseButton.LeftButton)
    return shown.args[0]


def rule_rows(page):
    return [(page.rules.item(r, 0).text(), page.rules.item(r, 1).text())
            for r in range(page.rules.rowCount())]


def test_compatible_pair_shows_a_warning_badge_and_every_rule(qtbot, page):
    report = check(qtbot, page, MODELS / "Llama-2-7b-hf", MODELS / "TinyLlama-1.1B-Chat-v1.0")
    assert page.badge.text() == "Compatible with warnings"
    assert page.badge.property("role") == "badge-warn"
    rows = rule_rows(page)
    assert len(rows) == len(report.rules) == 13
    assert rows[0] == ("! Warn", "Context length")  # problems first
    assert ("✓ Pass", "Token text, id by id") in rows
    assert "draft_rope_alpha: 2.63" in page.rules.item(0, 2).text()
    assert "Llama-2-7b-hf" in page.facts.text() and "31,995 ids compared" in page.facts.text()
    assert not page.tabs.isTabEnabled(1)  # nothing differs
    assert page.error.isHidden()


def test_incompatible_pair_lists_the_differing_tokens(qtbot, page):
    check(qtbot, page, MODELS / "Llama-2-7b-hf", MODELS / "Mistral-7B-v0.1")
    assert page.badge.text() == "Incompatible"
    assert page.badge.property("role") == "badge-bad"
    assert rule_rows(page)[0] == ("✗ Fail", "Token text, id by id")
    assert page.tabs.isTabEnabled(1) and page.tabs.tabText(1) == "Differing tokens (31,730)"
    assert [page.mismatches.item(0, c).text() for c in range(3)] == ["260", '" t"', '"    "']
    assert page.mismatches.rowCount() == 12


def test_undecidable_pair_is_inconclusive(qtbot, page):
    check(qtbot, page, MODELS / "Llama-3.1-8B", MODELS / "Llama-3.2-1B")
    assert page.badge.text() == "Inconclusive"
    assert page.badge.property("role") == "badge-info"
    assert "could not be compared" in page.summary.text()


def test_bad_input_is_shown_in_place(qtbot, page, tmp_path):
    page.target.set_value(str(tmp_path / "nope"))
    page.draft.set_value(str(MODELS / "Llama-2-7b-hf"))
    with qtbot.waitSignal(page.error_shown, timeout=TIMEOUT_MS) as shown:
        page.check_button.click()
    assert "does not exist" in shown.args[0]
    assert page.error.isVisible() and "does not exist" in page.error.text()
    page.target.set_value("")
    page.start_check()
    assert "Pick both" in page.error.text()


def test_library_models_are_offered_by_name(qtbot, page, library):
    labels = [page.draft.combo.itemText(i) for i in range(page.draft.combo.count())]
    assert labels[0].startswith("Qwen2.5-0.5B-Instruct  (494M, unquantized)")
    page.draft.combo.setCurrentIndex(1)
    assert page.draft.value() == str(library / "TinyLlama-1.1B-Chat-v1.0")
    page.target.set_value(str(MODELS / "Llama-2-7b-hf"))
    page.swap_button.click()
    assert page.target.value() == str(library / "TinyLlama-1.1B-Chat-v1.0")
    assert page.draft.value() == str(MODELS / "Llama-2-7b-hf")


def test_the_form_is_one_model_both_ways(qtbot, page, library):
    """What the page shows is a PairChoices, and a PairChoices is what it shows: a library
    model by its entry, a Hub id as typed, the native context as the spin box's lowest."""
    from specdeck.gui.pages.compatibility import NATIVE_CONTEXT, PairChoices

    pair = PairChoices(str(library / "TinyLlama-1.1B-Chat-v1.0"), "org/draft-exl2@4.0bpw", 8192)
    page.show_choices(pair)
    assert page.choices() == pair and pair.max_seq_len == 8192
    assert page.target.combo.currentText().startswith("TinyLlama-1.1B-Chat-v1.0  (")
    assert page.draft.combo.currentText() == "org/draft-exl2@4.0bpw"
    assert page.context_len.value() == 8192
    # what the user picks reads back as the model
    page.draft.combo.setCurrentIndex(
        page.draft.combo.findData(str(library / "Qwen2.5-0.5B-Instruct")))
    page.context_len.setValue(page.context_len.minimum())
    assert page.context_len.text() == "target's native context"
    shown = page.choices()
    assert shown == PairChoices(pair.target, str(library / "Qwen2.5-0.5B-Instruct"),
                                NATIVE_CONTEXT)
    assert shown.max_seq_len is None  # checked at the target's native context
    page.swap_button.click()
    assert page.choices() == shown.swapped() != shown


def test_suggestions_check_and_install(qtbot, page, library):
    page.target.set_value(str(MODELS / "Qwen2.5-7B-Instruct"))
    with qtbot.waitSignal(page.suggestions_shown, timeout=TIMEOUT_MS):
        page.suggest_button.click()
    table = page.suggestion_table
    assert page.tabs.currentIndex() == 2
    assert table.item(0, 1).text() == "Qwen2.5-0.5B-Instruct"
    assert table.item(0, 2).text() == "Library"
    assert table.item(1, 2).text() == "Hub" and table.item(1, 5).text() == "Unverified (Hub)"
    assert "ruled out" in page.suggestion_note.text()
    assert "TinyLlama-1.1B-Chat-v1.0: Incompatible" in page.suggestion_note.toolTip()
    # a checked draft's compatibility in the verdict's own words (CompatVerdict.label)
    local = table.item(0, 0).data(Qt.ItemDataRole.UserRole)
    assert table.item(0, 5).text() == CompatVerdict(local.status).label
    assert not page.check_selected_button.isEnabled()

    table.selectRow(1)  # a Hub draft: can be installed
    assert page.install_button.isEnabled()
    with qtbot.waitSignal(page.context.install_requested) as requested:
        page.install_button.click()
    assert requested.args == ["cgus/Qwen2.5-0.5B-Instruct-exl2", "main"]

    table.selectRow(0)  # the local draft: no install, one click to check it
    assert not page.install_button.isEnabled()
    with qtbot.waitSignal(page.report_shown, timeout=TIMEOUT_MS) as shown:
        page.check_selected_button.click()
    assert page.draft.value() == str(library / "Qwen2.5-0.5B-Instruct")
    assert shown.args[0].draft.name == "Qwen2.5-0.5B-Instruct"
    assert page.tabs.currentIndex() == 0


def test_configured_pair_is_preselected(qtbot, configured_qapp, tmp_path, library):
    config = tmp_path / "config.yml"
    config.write_text(f"model:\n  model_dir: {MODELS}\n  model_name: Llama-2-7b-hf\n"
                      f"  max_seq_len: 8192\ndraft_model:\n  draft_model_dir: {library}\n"
                      "  draft_model_name: TinyLlama-1.1B-Chat-v1.0\n")
    context = AppContext()
    context.set_config_path(config)
    widget = CompatibilityPage(context)
    qtbot.addWidget(widget)
    qtbot.waitUntil(lambda: widget.context_len.value() == 8192, timeout=TIMEOUT_MS)
    assert widget.target.value() == str(MODELS / "Llama-2-7b-hf")
    assert widget.draft.value() == str(library / "TinyLlama-1.1B-Chat-v1.0")
    widget.shutdown()


def test_a_gguf_file_is_picked_and_checked_against_a_folder(qtbot, page, tmp_path, monkeypatch):
    """GGUF… picks a .gguf (the vocabulary comes from its header) for a mixed pair."""
    from gguf_writer import write_tokenizer_gguf
    from PySide6.QtWidgets import QFileDialog

    gguf = write_tokenizer_gguf(MODELS / "Qwen2.5-7B-Instruct", tmp_path / "Qwen2.5-7B.gguf")
    monkeypatch.setattr(QFileDialog, "getOpenFileName",
                        staticmethod(lambda *a, **k: (str(gguf), "GGUF (*.gguf)")))
    page.target.browse_gguf.click()
    qtbot.waitUntil(lambda: page.target.value() == str(gguf), timeout=TIMEOUT_MS)
    page.draft.set_value(str(MODELS / "Qwen2.5-0.5B-Instruct"))
    with qtbot.waitSignal(page.report_shown, timeout=TIMEOUT_MS) as shown:
        page.check_button.click()
    report = shown.args[0]
    assert report.target.tokenizer_format == "GGUF tokenizer.ggml.*"
    assert dict((r.key, r.status.value) for r in report.rules)["token_text"] == "pass"


def test_browse_looks_at_the_disk_in_a_worker(qtbot, page, tmp_path, monkeypatch):
    """Issue 45: Browse… and GGUF… asked the disk, on the GUI thread, whether the model picked
    so far is a folder or a file (a path on a slow or gone disk held the window). A worker
    asks; the dialog then opens there, or in the home folder."""
    import threading
    from pathlib import Path

    from PySide6.QtWidgets import QFileDialog
    from specdeck.gui.pages import compatibility

    looked_on, opened = [], []
    real = compatibility.start_folder

    def watched(value, file):
        looked_on.append(threading.current_thread() is threading.main_thread())
        return real(value, file)

    monkeypatch.setattr(compatibility, "start_folder", watched)
    monkeypatch.setattr(QFileDialog, "getExistingDirectory",
                        staticmethod(lambda parent, title, start: opened.append(start) or ""))
    monkeypatch.setattr(QFileDialog, "getOpenFileName", staticmethod(
        lambda parent, title, start, filters: opened.append(start) or ("", "")))
    gguf = tmp_path / "ggufs" / "model.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    for picked, button, where in ((str(tmp_path), "browse", str(tmp_path)),
                                  ("org/model-exl2", "browse", str(Path.home())),
                                  (str(gguf), "browse_gguf", str(gguf.parent)),
                                  (str(tmp_path / "gone.gguf"), "browse_gguf", str(Path.home()))):
        page.target.set_value(picked)
        before = len(opened)
        getattr(page.target, button).click()
        qtbot.waitUntil(lambda: len(opened) > before, timeout=TIMEOUT_MS)
        assert opened[before:] == [where], picked
    assert len(looked_on) == 4 and not any(looked_on)
