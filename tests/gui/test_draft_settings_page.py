"""The Draft settings page driven like a user: open, edit, see the diff, save, reload."""

from __future__ import annotations

import difflib

import pytest
from conftest import TABBY
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QDialogButtonBox, QMessageBox

from specdeck.core import config
from specdeck.gui.context import AppContext
from specdeck.gui.pages.draft_settings import DraftSettingsPage

NAME = ("draft_model", "draft_model_name")
CACHE = ("draft_model", "draft_cache_mode")
ALPHA = ("draft_model", "draft_rope_alpha")

TIMEOUT = 30_000
"""Generous: a wait ends as soon as its condition holds; 5 s ran out once on a loaded
machine (the conflict test, 2026-11-27)."""


@pytest.fixture
def cfg(tmp_path):
    path = tmp_path / "tabbyAPI" / "config.yml"
    path.parent.mkdir()
    path.write_bytes((TABBY / "config_sample.exl2-checkpoint.yml").read_bytes())
    return path


@pytest.fixture
def page(qtbot, configured_qapp):
    context = AppContext()
    widget = DraftSettingsPage(context)
    qtbot.addWidget(widget)
    widget.resize(1200, 800)
    widget.show()
    return widget


def open_and_wait(qtbot, page, path):
    page.open_path(path)
    qtbot.waitUntil(lambda: page.document is not None and page.document.path == path, timeout=TIMEOUT)


def type_into(qtbot, editor, text):
    """Type like a user: clear the field, then key in the text."""
    widget = editor.input
    line = widget.lineEdit() if hasattr(widget, "lineEdit") and widget.lineEdit() else widget
    line.selectAll()
    qtbot.keyClick(line, Qt.Key.Key_Delete)
    qtbot.keyClicks(line, text)


def choose(editor, text):
    index = editor.input.findData(text)
    assert index >= 0, text
    editor.input.setCurrentIndex(index)


def wait_planned(qtbot, page):
    page.flush_plan()
    qtbot.waitUntil(lambda: page.change is not None, timeout=TIMEOUT)


def click_in_modal(button_role):
    """Click a button of the next modal dialog, as a user would."""

    def click():
        dialog = QApplication.activeModalWidget()
        if dialog is None:
            QTimer.singleShot(20, click)
            return
        if isinstance(dialog, QMessageBox):
            dialog.button(button_role).click()
        else:
            dialog.findChild(QDialogButtonBox).button(button_role).click()

    QTimer.singleShot(0, click)


def test_edit_two_fields_see_diff_save_reload(qtbot, page, cfg):
    original = cfg.read_text()
    open_and_wait(qtbot, page, cfg)
    assert page.fields[CACHE].text() == "FP16"
    assert not page.save_button.isEnabled()

    type_into(qtbot, page.fields[NAME], "TinyLlama-1.1B-exl2-4.0bpw")
    choose(page.fields[CACHE], "Q4")
    wait_planned(qtbot, page)
    diff = page.diff_view.toPlainText()
    assert "+  draft_model_name: TinyLlama-1.1B-exl2-4.0bpw" in diff
    assert "-  draft_cache_mode: FP16" in diff and "+  draft_cache_mode: Q4" in diff
    assert page.save_button.isEnabled()

    qtbot.mouseClick(page.save_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not page.is_dirty() and page.document.raw(*CACHE) == "Q4", timeout=TIMEOUT)
    saved = cfg.read_text()
    changed = [line for line in difflib.ndiff(original.splitlines(), saved.splitlines())
               if line.startswith(("+ ", "- "))]
    assert changed == ["- draft_model_name:", "+ draft_model_name: TinyLlama-1.1B-exl2-4.0bpw",
                       "- draft_cache_mode: FP16", "+ draft_cache_mode: Q4"] or len(changed) == 4
    assert config.backup_path(cfg).read_text() == original

    # A fresh page (as after a restart) shows the saved values from the remembered path.
    page.context.flush()  # as closing the window does: settings.json is written
    again = DraftSettingsPage(AppContext())
    qtbot.addWidget(again)
    qtbot.waitUntil(lambda: again.document is not None, timeout=TIMEOUT)
    assert again.document.path == cfg
    assert again.fields[NAME].text() == "TinyLlama-1.1B-exl2-4.0bpw"
    assert again.fields[CACHE].text() == "Q4"


def test_invalid_value_shows_rule_and_blocks_save(qtbot, page, cfg):
    before = cfg.read_bytes()
    open_and_wait(qtbot, page, cfg)
    type_into(qtbot, page.fields[ALPHA], "auto")
    wait_planned(qtbot, page)
    editor = page.fields[ALPHA]
    assert editor.error.isVisible()
    assert "TabbyAPI expects a number" in editor.error.text()
    assert not page.save_button.isEnabled()
    assert page.save() is False
    assert cfg.read_bytes() == before
    type_into(qtbot, page.fields[ALPHA], "2.5")
    page.flush_plan()
    qtbot.waitUntil(lambda: page.save_button.isEnabled(), timeout=TIMEOUT)
    assert not editor.error.isVisible()


def test_revert_restores_the_file_values(qtbot, page, cfg):
    open_and_wait(qtbot, page, cfg)
    type_into(qtbot, page.fields[NAME], "Something")
    wait_planned(qtbot, page)
    qtbot.mouseClick(page.revert_button, Qt.MouseButton.LeftButton)
    assert page.fields[NAME].text() == ""
    assert not page.is_dirty() and page.diff_view.toPlainText() == ""


def test_conflict_asks_before_overwriting(qtbot, page, cfg):
    open_and_wait(qtbot, page, cfg)
    choose(page.fields[CACHE], "Q8")
    wait_planned(qtbot, page)
    cfg.write_text(cfg.read_text() + "# changed by hand\n")
    click_in_modal(QMessageBox.StandardButton.Cancel)
    assert page.save() is True  # saving, in a worker: the conflict is asked about there
    assert page.status_label.text() == f"Saving {cfg.name}…" and not page.save_button.isEnabled()
    qtbot.waitUntil(lambda: page.status_label.text() == "Not saved.", timeout=TIMEOUT)
    assert cfg.read_text().endswith("# changed by hand\n")
    assert page.save_button.isEnabled() and page.is_dirty()  # the edit stays, to save again
    click_in_modal(QMessageBox.StandardButton.Save)
    assert page.save() is True
    # Done when the page hears so: the file is renamed into place before its backup is.
    qtbot.waitUntil(lambda: not page.is_dirty(), timeout=TIMEOUT)
    assert "draft_cache_mode: Q8" in cfg.read_text()
    assert config.backup_path(cfg).read_text().endswith("# changed by hand\n")


def test_a_save_that_fails_is_shown_in_place_and_the_edits_stay(qtbot, page, cfg):
    open_and_wait(qtbot, page, cfg)
    choose(page.fields[CACHE], "Q8")
    wait_planned(qtbot, page)
    before = cfg.read_bytes()
    cfg.chmod(0o444)  # read-only: SpecDeck refuses to change it
    assert page.save() is True
    qtbot.waitUntil(lambda: page.banner.isVisible() and page.banner.severity == "error",
                    timeout=TIMEOUT)
    cfg.chmod(0o644)
    assert "Could not save" in page.banner.label.text() and "read-only" in page.banner.label.text()
    assert cfg.read_bytes() == before and page.is_dirty() and page.save_button.isEnabled()
    assert page.save() is True  # writable again: the same edits save
    qtbot.waitUntil(lambda: "draft_cache_mode: Q8" in cfg.read_text(), timeout=TIMEOUT)


def test_saving_before_closing_closes_once_saved(qtbot, page, cfg, monkeypatch):
    open_and_wait(qtbot, page, cfg)
    choose(page.fields[CACHE], "Q4")
    wait_planned(qtbot, page)
    closed = []
    monkeypatch.setattr(page, "window", lambda: type("W", (), {"close": lambda self: closed.append(1)})())
    click_in_modal(QMessageBox.StandardButton.Save)
    assert page.can_close() is False  # not yet: the file is being saved
    qtbot.waitUntil(lambda: closed == [1], timeout=TIMEOUT)
    assert "draft_cache_mode: Q4" in cfg.read_text() and not page.is_dirty()


def test_legacy_file_offers_migration(qtbot, page, tmp_path):
    legacy = tmp_path / "config.yml"
    legacy.write_bytes((TABBY / "config_sample.581e1fc.yml").read_bytes())
    open_and_wait(qtbot, page, legacy)
    assert page.banner.isVisible() and "legacy layout" in page.banner.label.text()
    migrate = next(b for b in page.banner.buttons() if b.text() == "Migrate…")
    click_in_modal(QDialogButtonBox.StandardButton.Save)
    qtbot.mouseClick(migrate, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.document.layout is config.Layout.DRAFT_MODEL, timeout=TIMEOUT)
    assert config.load(legacy).raw("draft_model", "draft_model_name") == "A model name"
    assert not page.banner.isVisible()


def test_missing_config_can_be_created(qtbot, page, tmp_path):
    path = tmp_path / "config.yml"
    page.open_path(path)
    qtbot.waitUntil(lambda: page.banner.isVisible() and "does not exist" in page.banner.label.text(),
                    timeout=TIMEOUT)
    create = next(b for b in page.banner.buttons() if "defaults" in b.text())
    qtbot.mouseClick(create, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.document is not None, timeout=TIMEOUT)
    assert path.is_file() and page.document.errors() == []


def test_bad_yaml_is_shown_in_place(qtbot, page, tmp_path):
    path = tmp_path / "config.yml"
    path.write_text("model:\n  model_name: [oops\n")
    page.open_path(path)
    qtbot.waitUntil(lambda: "line 3" in page.banner.label.text(), timeout=TIMEOUT)
    assert page.banner.severity == "error"
    assert not page.fields[NAME].container.isEnabled()


def test_find_tabby_folder_and_model_override_note(qtbot, page, tmp_path, monkeypatch):
    import threading

    lookers, real = [], config.find_install

    def watched(folder):
        lookers.append(threading.current_thread())
        return real(folder)

    monkeypatch.setattr(config, "find_install", watched)
    tabby = tmp_path / "tabbyAPI"
    (tabby / "models" / "Big").mkdir(parents=True)
    (tabby / "main.py").write_text("")
    (tabby / "config.yml").write_text("model:\n  model_dir: models\n  model_name: Big\n")
    (tabby / "models" / "Big" / "config.json").write_text("{}")
    (tabby / "models" / "Big" / "tabby_config.yml").write_text(
        "draft_model:\n  draft_model_name: Forced-Draft\n")
    page.open_tabby_folder(tabby)
    qtbot.waitUntil(lambda: page.document is not None, timeout=TIMEOUT)
    assert lookers and threading.main_thread() not in lookers  # the folder looked at in a worker
    assert page.context.settings.tabby_dir == str(tabby)
    assert page.override_banner.isVisible()
    assert "Forced-Draft" in page.override_banner.label.text()


def test_closing_with_unsaved_edits_asks(qtbot, page, cfg):
    open_and_wait(qtbot, page, cfg)
    type_into(qtbot, page.fields[NAME], "Unsaved")
    click_in_modal(QMessageBox.StandardButton.Cancel)
    assert page.can_close() is False
    click_in_modal(QMessageBox.StandardButton.Discard)
    assert page.can_close() is True
    assert cfg.read_text() == (TABBY / "config_sample.exl2-checkpoint.yml").read_text()
