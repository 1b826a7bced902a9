"""The start page: a first launch opens on it, its buttons lead to the pages, and what it
finds on this machine (a real llama-server capture replayed on a local port, a TabbyAPI
config.yml) comes with a next step that works."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QLabel
from replay_server import replay  # noqa: F401 - a fixture

from specdeck.gui.main_window import MainWindow
WORD_JOINER = "\u2060"  # what keeps the path on one line (gui/pages/start.py)

DATA = Path(__file__).resolve().parents[1] / "data" / "servers"


def test_a_first_launch_opens_on_the_start_page_and_later_ones_where_the_user_left(
        qtbot, configured_qapp):
    QSettings().remove("window/page")
    window = MainWindow()
    qtbot.addWidget(window)
    assert window.current_page_key() == "start"
    window.show_page("compat")
    window.close()
    again = MainWindow()
    qtbot.addWidget(again)
    assert again.current_page_key() == "compat"


def test_findings_come_with_a_next_step_that_opens_the_right_page(qtbot, configured_qapp,
                                                                  replay, tmp_path, monkeypatch):
    from specdeck.core import discovery

    models = {"/v1/models": (200, "application/json", b'{"object": "list", "data": [{"id": "m"}]}')}
    server, _ = replay(body=(DATA / "llama-server-plain-stream.sse").read_bytes(), routes=models)
    tabby = tmp_path / "tabbyAPI"
    tabby.mkdir()
    (tabby / "config.yml").write_text("draft_model:\n  draft_model_name:\n")
    monkeypatch.setattr(discovery, "_home", lambda: tmp_path)
    window = MainWindow()
    qtbot.addWidget(window)
    page = window.show_page("start")
    page._discover = lambda: discovery.discover(ports={server.port: "test"})
    page.refresh()
    qtbot.waitUntil(lambda: any("openai at" in r[0].text() for r in page.rows), timeout=20_000)
    texts = [label.text() for label, _, _ in page.rows]
    assert any(f"TabbyAPI config: {tabby / 'config.yml'}" in t for t in texts)
    assert any(f"openai at http://127.0.0.1:{server.port}" in t for t in texts)
    row = next(r for r in page.rows if "openai at" in r[0].text())
    row[2].click()  # Go: the A/B page, engine Servers, that URL as an arm
    bench = window.page("bench")
    assert window.current_page_key() == "bench"
    from specdeck.gui.bench_form import plan_from_choices

    shown = plan_from_choices(bench.form.choices(), comparison=False)  # one server so far
    assert shown.engine == "server"
    assert f"http://127.0.0.1:{server.port}" in [a.server.url for a in shown.arms]
    config_row = next(r for r in page.rows if "TabbyAPI config" in r[0].text())
    config_row[2].click()
    assert window.current_page_key() == "draft"
    assert window.context.config_path == tabby / "config.yml"


def test_the_task_buttons_open_their_pages(qtbot, configured_qapp):
    window = MainWindow()
    qtbot.addWidget(window)
    page = window.show_page("start")
    for key in ("models", "compat", "bench"):
        page.task_buttons[key].click()
        assert window.current_page_key() == key


def test_findings_read_as_written_and_point_to_pages_not_commands(qtbot, configured_qapp,
                                                                  tmp_path, monkeypatch):
    """Issue 44: a finding with an apostrophe read "isn&#x27;t" (escaped text in a label Qt
    took for plain text), and a llama-swap finding told a GUI user to run a command line."""
    from specdeck.core import discovery

    swap = tmp_path / ".config" / "llama-swap" / "config.yaml"
    swap.parent.mkdir(parents=True)
    swap.write_text("models: {}\n")
    monkeypatch.setattr(discovery, "llama_swap_configs", lambda: [swap])
    window = MainWindow()
    qtbot.addWidget(window)
    page = window.show_page("start")
    page._discover = lambda: [discovery.Discovery("No NVIDIA GPU: the driver isn't loaded",
                                                  "Plan VRAM for the GPUs you'd use.", "gpus",
                                                  found=False),
                              *discovery.discover(ports={})]
    page.refresh()
    qtbot.waitUntil(lambda: len(page.rows) > 1, timeout=20_000)
    label, step, _ = page.rows[0]
    assert label.text() == "– No NVIDIA GPU: the driver isn't loaded"
    assert step.text() == "Plan VRAM for the GPUs you'd use."
    swap_row = next(r for r in page.rows if "llama-swap config" in r[0].text())
    assert "specdeck " not in swap_row[1].text() and "llama-swap page" in swap_row[1].text()
    swap_row[2].click()
    assert window.current_page_key() == "swap"


def test_the_start_page_says_what_tuning_the_demo_needs(qtbot, configured_qapp, tmp_path,
                                                        monkeypatch, llama_bin):
    """Issue 44: "Tune the demo…" needs a llama-server, which the Start page did not say; its
    error then named a command-line flag. Now the Start page says which llama-server it will
    use or that one is needed, and the Tune page asks for one in its own words. Issue 45:
    both look for it on disk in a worker, never on the GUI thread."""
    import threading

    from specdeck.core.tune import setup

    looked_on = []
    real = setup.llama_server_candidates
    monkeypatch.setattr(setup, "llama_server_candidates", lambda: looked_on.append(
        threading.current_thread() is threading.main_thread()) or real())
    monkeypatch.setattr(setup.shutil, "which", lambda name: None)
    monkeypatch.setenv("SPECDECK_LLAMA_CACHE", str(tmp_path / "no-build"))
    monkeypatch.setattr(setup.Path, "home", classmethod(lambda cls: tmp_path))
    monkeypatch.delenv("SPECDECK_LLAMA_SERVER", raising=False)
    window = MainWindow()
    qtbot.addWidget(window)
    page = window.show_page("start")
    qtbot.waitUntil(lambda: "needs a llama-server binary: none is on PATH"
                    in page.demo_hint.text(), timeout=10_000)
    page.tune_demo_button.click()
    tune = window.page("tune")
    assert window.current_page_key() == "tune"
    qtbot.waitUntil(lambda: "no llama-server found" in tune.binary.placeholderText(),
                    timeout=10_000)
    tune.binary.setText("")
    tune.start()
    text = tune.banner.label.text()
    assert "needs a llama-server" in text and "Browse" in text and "--" not in text
    # One found (here the pinned build, as SPECDECK_LLAMA_SERVER names it): both say which,
    # once they look again (the Start page's Refresh, the Tune page's choice of the demo).
    monkeypatch.setenv("SPECDECK_LLAMA_SERVER", str(llama_bin))
    page.refresh()
    qtbot.waitUntil(lambda: f"Tuning it runs llama-server ({llama_bin})"
                    in page.demo_hint.text().replace(WORD_JOINER, ""), timeout=10_000)
    tune.kind.setCurrentIndex(tune.kind.findData("llama-server"))
    tune.kind.setCurrentIndex(tune.kind.findData("demo"))
    qtbot.waitUntil(lambda: str(llama_bin) in tune.binary.placeholderText(), timeout=10_000)
    assert tune.request().binary == str(llama_bin)
    assert looked_on and not any(looked_on)


def test_a_look_for_servers_cut_short_by_the_app_quitting_ends_quietly(monkeypatch):
    """`make run` quit by its start-up probe printed a traceback: the start page's worker was
    still looking for servers when the interpreter shut down, and concurrent.futures refuses
    new work then. Nobody is left to show the answer: the look ends with none."""
    import concurrent.futures.thread as futures_thread

    from specdeck.core import discovery

    monkeypatch.setattr(futures_thread, "_shutdown", True)  # what its atexit hook sets
    assert discovery.servers({1: "anything"}) == []
    monkeypatch.setattr(futures_thread, "_shutdown", False)
    assert discovery.servers({}) == []  # an ordinary empty look still works


def test_the_install_card_and_the_models_tip_name_every_format_the_hub_installs(qtbot,
                                                                                configured_qapp):
    """The Start card and the sidebar's Models tip said EXL2 only, while the Models page
    searches and installs every format of ``hub.search.FORMATS``."""
    from specdeck.core.hub.search import FORMAT_LABELS, FORMATS

    window = MainWindow()
    qtbot.addWidget(window)
    page = window.show_page("start")
    card = page.task_buttons["models"].parentWidget()
    texts = " ".join(label.text() for label in card.findChildren(QLabel))
    models_row = next(window.sidebar.item(i) for i in range(window.sidebar.count())
                      if window.sidebar.item(i).text() == "Models")
    for fmt in FORMATS:
        assert FORMAT_LABELS[fmt] in texts
        assert FORMAT_LABELS[fmt] in models_row.toolTip()


def _wrapped_lines(label: QLabel) -> list[str]:
    """The lines a word-wrapped plain-text label breaks its text into at its width."""
    from PySide6.QtGui import QTextDocument, QTextOption

    document = QTextDocument()
    document.setDefaultFont(label.font())
    option = QTextOption()
    option.setWrapMode(QTextOption.WrapMode.WordWrap)
    document.setDefaultTextOption(option)
    document.setPlainText(label.text())
    document.setTextWidth(label.contentsRect().width())
    document.size()  # lays the text out (lazily done otherwise)
    lines = []
    block = document.begin()
    while block.isValid():
        layout = block.layout()
        for i in range(layout.lineCount()):
            line = layout.lineAt(i)
            lines.append(block.text()[line.textStart():line.textStart() + line.textLength()])
        block = block.next()
    return [line.replace(WORD_JOINER, "") for line in lines]


def test_the_demo_hints_llama_server_path_is_never_broken_across_lines(
        qtbot, configured_qapp, llama_bin, monkeypatch):
    """Word wrap broke the path after "(/" ("llama-server (/" then "root/.cache/...")."""
    monkeypatch.setenv("SPECDECK_LLAMA_SERVER", str(llama_bin))
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    page = window.show_page("start")
    qtbot.waitUntil(lambda: str(llama_bin) in page.demo_hint.text().replace(WORD_JOINER, ""),
                    timeout=10_000)
    for width in (1280, 1024):
        window.resize(width, 700)
        qtbot.waitUntil(lambda w=width: window.width() == w)
        qtbot.wait(20)  # the resize's layout request
        lines = _wrapped_lines(page.demo_hint)
        assert len(lines) > 1  # it does wrap, only elsewhere
        assert any(f"({llama_bin})" in line for line in lines), lines
    assert page.demo_hint.toolTip() == str(llama_bin)  # whole, were it elided
