"""The window shell: sidebar pages, lazy construction, state restore, About box."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QGuiApplication

from specdeck.gui.main_window import MainWindow
from specdeck.gui.pages import PAGES


def test_sidebar_lists_every_page_in_order(qtbot, configured_qapp):
    window = MainWindow()
    qtbot.addWidget(window)
    titles = [window.sidebar.item(i).text() for i in range(window.sidebar.count())]
    assert titles == ["Start", "Models", "Draft settings", "llama-swap", "Compatibility", "GPUs & VRAM",
                      "A/B bench", "Tune"]


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


def test_a_page_needs_only_its_own_width_whichever_pages_were_opened_before(qtbot,
                                                                           configured_qapp):
    """The window's minimum was the widest page ever built: after one look at Draft settings
    (1177 px), the Start page, the demo A/B and Tune no longer fitted a 1024 px screen."""
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    start = window.show_page("start")
    alone = window.minimumSizeHint().width()
    draft = window.show_page("draft")
    assert window.minimumSizeHint().width() >= draft.minimumSizeHint().width() > alone
    window.show_page("start")
    assert window.minimumSizeHint().width() == alone
    window.resize(1024, 640)
    qtbot.waitUntil(lambda: window.width() == 1024)
    assert start.width() + window.sidebar.width() <= 1024
    window.show_page("draft")  # it still gets the room it needs when shown
    assert window.minimumSizeHint().width() >= draft.minimumSizeHint().width()


def test_no_heavy_imports_at_startup(tmp_path):
    # A fresh interpreter: earlier tests in this process may have imported torch already.
    probe = tmp_path / "painted"
    script = (
        "import json, sys\n"
        "from specdeck.gui.app import run_gui\n"
        "rc = run_gui()\n"
        "print(json.dumps({'rc': rc, 'heavy': [m for m in ('torch', 'exllamav2', 'transformers', 'pynvml')"
        " if m in sys.modules]}))\n"
    )
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", SPECDECK_STARTUP_PROBE=str(probe))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert probe.exists(), "the window never painted"
    assert result == {"rc": 0, "heavy": []}


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


def test_what_specdeck_is_is_said_the_same_in_about_help_and_the_package(qtbot,
                                                                          configured_qapp):
    """One line says what SpecDeck is; About, `specdeck --help` and pyproject.toml's
    description said 'for ExLlamaV2 / TabbyAPI' long after it served every kind of server
    core.servers.kinds knows."""
    import html
    import re
    from pathlib import Path

    from specdeck import SUMMARY
    from specdeck.core.cli import build_parser
    from specdeck.core.servers.kinds import ServerKind
    from specdeck.gui.about import AboutDialog

    root = Path(__file__).resolve().parents[2]
    pyproject = (root / "pyproject.toml").read_text(encoding="utf-8")  # no tomllib on 3.10
    assert re.search(r'^description = "(.*)"$', pyproject, re.MULTILINE).group(1) == SUMMARY

    def squeezed(text: str) -> str:  # argparse wraps at spaces and hyphens, at any width
        return "".join(text.split())

    assert squeezed(SUMMARY[1:]) in squeezed(build_parser().format_help())
    dialog = AboutDialog()
    qtbot.addWidget(dialog)
    about = dialog.findChild(type(dialog.layout().itemAt(0).widget())).text()
    assert html.escape(SUMMARY) in about
    names = {"tabbyapi": "TabbyAPI", "llama-server": "llama-server", "llama-swap": "llama-swap",
             "vllm": "vLLM", "sglang": "SGLang", "lmstudio": "LM Studio", "ollama": "Ollama"}
    for kind in ServerKind:  # a new kind fails here until the line names it
        if kind is not ServerKind.OPENAI:  # any other OpenAI-compatible server
            assert names[kind.value] in SUMMARY, kind


def test_a_remembered_config_that_vanished_is_forgotten_with_one_notice(qtbot, configured_qapp,
                                                                        tmp_path, monkeypatch):
    import threading

    from specdeck.core import settings
    from specdeck.gui import context as context_module

    gone = tmp_path / "config.yml"
    gone.write_text("model: {}\n")
    settings.save(settings.load().with_config(gone))
    gone.unlink()
    looked_on = []
    real = context_module._is_file
    monkeypatch.setattr(context_module, "_is_file", lambda path: looked_on.append(
        threading.current_thread() is threading.main_thread()) or real(path))
    window = MainWindow()
    qtbot.addWidget(window)
    qtbot.waitUntil(lambda: "no longer exists" in window.statusBar().currentMessage(),
                    timeout=10_000)
    assert str(gone) in window.statusBar().currentMessage()
    assert looked_on == [False]  # issue 45: the disk is looked at in a worker
    window.context.flush()  # settings.json is written in a worker
    assert settings.load().config_path is None
    assert str(gone) not in settings.load().recent_configs
    again = MainWindow()  # the next launch says nothing more
    qtbot.addWidget(again)
    assert str(gone) not in again.statusBar().currentMessage()


def test_a_page_that_fails_to_build_shows_the_error_and_its_traceback(qtbot, configured_qapp,
                                                                        monkeypatch, tmp_path):
    from specdeck.gui.pages import compatibility

    def broken(context):
        raise KeyError("tokenizer_cache")  # a bug inside the page's construction

    monkeypatch.setattr(compatibility, "create_page", broken)
    window = MainWindow()
    qtbot.addWidget(window)
    window.resize(1280, 800)
    window.show()
    page = window.show_page("compat")
    assert window.stack.currentWidget() is page
    text = page.message.text()
    assert "KeyError" in text and "tokenizer_cache" in text and "Not built yet" not in text
    assert "Compatibility could not open" in page.findChildren(type(page.message))[0].text()
    # The traceback is one click away, and names the failing function.
    assert not page.details.isVisible()
    qtbot.mouseClick(page.details_button, Qt.MouseButton.LeftButton)
    assert page.details.isVisible() and page.details_button.text() == "Hide details"
    assert "in broken" in page.details.toPlainText() and "KeyError: 'tokenizer_cache'" in \
        page.details.toPlainText()
    page.copy()
    assert QGuiApplication.clipboard().text() == page.details.toPlainText()
    # The other pages still open.
    assert type(window.show_page("start")).__name__ == "StartPage"
    window.show_page("compat")
    window.grab().save(str(tmp_path / "failed-page.png"))
