"""The window shell: sidebar pages, lazy construction, state restore, About box."""

from __future__ import annotations

import sys

from PySide6.QtCore import QSettings

from specdeck.gui.main_window import MainWindow
from specdeck.gui.pages import PAGES


def test_sidebar_lists_every_page_in_order(qtbot, configured_qapp):
    window = MainWindow()
    qtbot.addWidget(window)
    titles = [window.sidebar.item(i).text() for i in range(window.sidebar.count())]
    assert titles == ["Models", "Draft settings", "Compatibility", "GPUs & VRAM", "A/B bench"]


def test_pages_are_built_on_first_show_only(qtbot, configured_qapp):
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    built_at_start = set(window._pages)
    assert len(built_at_start) == 1
    for page in PAGES:
        widget = window.show_page(page.key)
        assert window.stack.currentWidget() is widget
    assert set(window._pages) == {p.key for p in PAGES}


def test_no_heavy_imports_at_startup(qtbot, configured_qapp):
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    for heavy in ("torch", "exllamav2", "transformers"):
        assert heavy not in sys.modules, f"{heavy} imported at start-up"


def test_window_remembers_last_page(qtbot, configured_qapp):
    window = MainWindow()
    qtbot.addWidget(window)
    window.show_page("gpus")
    window.close()
    assert QSettings().value("window/page") == "gpus"
    again = MainWindow()
    qtbot.addWidget(again)
    assert again.current_page_key() == "gpus"


def test_about_lists_versions(qtbot, configured_qapp):
    from specdeck import __version__
    from specdeck.gui.about import AboutDialog, component_versions

    rows = dict(component_versions())
    assert rows["SpecDeck"] == __version__
    assert rows["exllamav2"] == "not installed"
    dialog = AboutDialog()
    qtbot.addWidget(dialog)
    assert __version__ in dialog.findChild(type(dialog.layout().itemAt(0).widget())).text()
