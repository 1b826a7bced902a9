"""The Models page driven like a user would, against the fake Hub on 127.0.0.1."""

from __future__ import annotations

import pytest
from hubserver import GATED_REPO, GOOD_TOKEN, TINY_REPO, fake_hub, memory_keyring  # noqa: F401 - fixtures
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QInputDialog
from specdeck.gui.context import AppContext
from specdeck.gui.pages.models import ModelsPage

WEIGHTS = "output.safetensors"
TIMEOUT = 30_000


@pytest.fixture
def drafts(tmp_path):
    return tmp_path / "drafts"


@pytest.fixture(autouse=True)
def every_byte_reported(monkeypatch):
    """Installs report progress at every chunk, not at most every 0.1 s: a download the
    fake Hub holds mid-file (Stall) then shows where it stands, whatever the machine's pace."""
    import importlib
    from functools import partial

    from specdeck.core.hub.progress import ProgressTracker

    install = importlib.import_module("specdeck.core.hub.install")
    monkeypatch.setattr(install, "ProgressTracker", partial(ProgressTracker, interval=0.0))


@pytest.fixture
def page(qtbot, configured_qapp, fake_hub, monkeypatch, drafts):
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)  # the page finds the Hub the way users set it
    page = ModelsPage(AppContext())
    qtbot.addWidget(page)
    page.installer.set_install_dir(drafts)
    page.resize(1200, 800)
    page.show()
    yield page
    page.shutdown()
    qtbot.waitUntil(lambda: not page.busy(), timeout=TIMEOUT)


def open_repo(qtbot, page, text: str, repo_id: str) -> None:
    page.browser.search_edit.clear()
    qtbot.keyClicks(page.browser.search_edit, text)
    qtbot.mouseClick(page.browser.search_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.browser.results_table.rowCount() > 0, timeout=TIMEOUT)
    page.browser.select_repo(repo_id)
    qtbot.waitUntil(lambda: page.browser.variants_table.rowCount() > 0, timeout=TIMEOUT)


def variant_status(page, revision: str) -> str:
    return page.browser.variant_rows()[revision]["Status"]


def library_rows(page) -> dict[str, dict[str, str]]:
    return page.library.library_rows()


def test_find_pick_install_and_see_it_in_the_library(qtbot, page, fake_hub, drafts):
    size = len(fake_hub.repos[TINY_REPO].branches["6_5"][WEIGHTS])
    stall = fake_hub.stall(WEIGHTS, at=size // 2)  # held there: the progress bar mid-way
    open_repo(qtbot, page, "tinyllama", TINY_REPO)
    assert page.browser.repositories() == [TINY_REPO, "soloquant/TinyLlama-1.1B-Chat-v1.0-4.0bpw-h6-exl2"]
    assert [row["Bitrate / quant"] for row in page.browser.variant_rows().values()] == [
        "EXL2 · 4.0 bpw · h6", "EXL2 · 6.5 bpw · h6", "EXL2 · 8.0 bpw · h8"]
    page.browser.select_variant("6_5")
    assert page.installer.install_button.isEnabled() and "6.5 bpw" in page.installer.install_button.text()

    with qtbot.waitSignal(page.install_finished, timeout=TIMEOUT) as finished:
        qtbot.mouseClick(page.installer.install_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: stall.reached.is_set() and 0 < page.installer.progress_bar.value() < 1000,
                        timeout=TIMEOUT)
        assert page.installer.cancel_button.isEnabled() and not page.installer.install_button.isEnabled()
        assert "MB/s" in page.installer.progress_label.text() or "of" in page.installer.progress_label.text()
        stall.release()

    result = finished.args[0]
    folder = drafts / "TinyLlama-1.1B-Chat-v1.0-exl2-6.5bpw"
    assert result.path == folder
    for path, data in fake_hub.repos[TINY_REPO].branches["6_5"].items():
        assert (folder / path).read_bytes() == data
    assert page.installer.progress_bar.value() == 1000
    assert "verified" in page.installer.progress_label.text()
    assert "TinyLlama-1.1B-Chat-v1.0-exl2-6.5bpw" in page.installer.result_label.text()
    assert "6.5 bpw" in page.installer.result_label.text() and "32,000" in page.installer.result_label.text()
    assert not page.installer.use_button.isHidden()
    qtbot.waitUntil(lambda: folder.name in library_rows(page), timeout=TIMEOUT)
    row = library_rows(page)[folder.name]
    assert (row["Architecture"], row["Quantization"], row["Installed from"]) == (
        "llama", "EXL2 6.5 bpw h6", f"{TINY_REPO}@6_5")
    qtbot.waitUntil(lambda: page.browser.variants_table.rowCount() == 3 and variant_status(page, "6_5") == "installed",
                    timeout=TIMEOUT)
    assert page.browser.selected_variant().revision == "6_5", "the selection survives the refresh"
    assert page.installer.install_button.text() == "Installed" and not page.installer.install_button.isEnabled()
    assert not page.installer.cancel_button.isEnabled()
    page.browser.select_variant("8.0bpw")
    assert page.installer.install_button.isEnabled()


def test_cancel_mid_file_then_resume_after_a_restart(qtbot, page, fake_hub, drafts, configured_qapp):
    size = len(fake_hub.repos[TINY_REPO].branches["4.0bpw"][WEIGHTS])
    stall = fake_hub.stall(WEIGHTS, at=size // 2)
    open_repo(qtbot, page, "tinyllama", TINY_REPO)
    page.browser.select_variant("4.0bpw")
    qtbot.mouseClick(page.installer.install_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(stall.reached.is_set, timeout=TIMEOUT)
    qtbot.mouseClick(page.installer.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.installer.install_button.isEnabled(), timeout=TIMEOUT)
    stall.release()
    assert "cancelled" in page.installer.progress_label.text() and "resumes" in page.installer.progress_label.text()
    assert not (drafts / "TinyLlama-1.1B-Chat-v1.0-exl2-4.0bpw").exists()
    qtbot.waitUntil(lambda: not page.installer.partial_banner.isHidden(), timeout=TIMEOUT)
    assert f"{TINY_REPO}@4.0bpw" in page.installer.partial_banner.label.text()
    qtbot.waitUntil(lambda: variant_status(page, "4.0bpw").startswith("unfinished"), timeout=TIMEOUT)

    # A new window (as after a restart) finds the unfinished install and resumes it.
    again = ModelsPage(AppContext())
    qtbot.addWidget(again)
    again.show()
    qtbot.waitUntil(lambda: not again.installer.partial_banner.isHidden(), timeout=TIMEOUT)
    assert again.installer.install_dir == drafts
    resume = next(b for b in again.installer.partial_banner.buttons() if b.text() == "Resume")
    with qtbot.waitSignal(again.install_finished, timeout=TIMEOUT) as finished:
        qtbot.mouseClick(resume, Qt.MouseButton.LeftButton)
    assert finished.args[0].resumed_bytes > 0
    ranges = [r.range for r in fake_hub.file_requests() if r.file == WEIGHTS and r.origin == "cdn"]
    assert ranges[0] is None and ranges[-1].startswith("bytes=") and ranges[-1] != "bytes=0-"
    assert (drafts / "TinyLlama-1.1B-Chat-v1.0-exl2-4.0bpw" / WEIGHTS).read_bytes() == \
        fake_hub.repos[TINY_REPO].branches["4.0bpw"][WEIGHTS]
    qtbot.waitUntil(lambda: again.installer.partial_banner.isHidden(), timeout=TIMEOUT)
    again.shutdown()
    qtbot.waitUntil(lambda: not again.busy(), timeout=TIMEOUT)


def test_a_name_clash_offers_another_name(qtbot, page, fake_hub, drafts, monkeypatch):
    mine = drafts / "TinyLlama-1.1B-Chat-v1.0-exl2-8.0bpw"
    mine.mkdir(parents=True)
    (mine / "keep.txt").write_text("mine")
    asked = []

    def answer(parent, title, label, text=""):
        asked.append((text, page.error_banner.label.text()))
        return text, True

    monkeypatch.setattr(QInputDialog, "getText", staticmethod(answer))
    open_repo(qtbot, page, "tinyllama", TINY_REPO)
    page.browser.select_variant("8.0bpw")
    with qtbot.waitSignal(page.install_finished, timeout=TIMEOUT) as finished:
        qtbot.mouseClick(page.installer.install_button, Qt.MouseButton.LeftButton)
    ((suggested, error_shown),) = asked
    assert suggested == "TinyLlama-1.1B-Chat-v1.0-exl2-8.0bpw-2"
    assert "left untouched" in error_shown
    assert finished.args[0].path == drafts / "TinyLlama-1.1B-Chat-v1.0-exl2-8.0bpw-2"
    assert [p.name for p in mine.iterdir()] == ["keep.txt"]


def test_errors_show_in_place(qtbot, page):
    page.browser.show_repo("nobody/nothing-exl2")
    qtbot.waitUntil(lambda: page.error_banner.isVisible(), timeout=TIMEOUT)
    assert "not found" in page.error_banner.label.text()
    assert page.error_banner.severity == "error"
    assert not page.installer.install_button.isEnabled()


def test_set_a_token_for_a_gated_repo(qtbot, page, monkeypatch, memory_keyring):
    qtbot.waitUntil(lambda: "No Hugging Face token" in page.token.token_label.text(), timeout=TIMEOUT)
    monkeypatch.setattr(QInputDialog, "getText", staticmethod(lambda *a, **k: (GOOD_TOKEN, True)))
    qtbot.mouseClick(page.token.token_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "Signed in as alice" in page.token.token_label.text(), timeout=TIMEOUT)
    assert "keyring" in page.token.token_label.text()
    assert GOOD_TOKEN not in page.token.token_label.text()
    assert GOOD_TOKEN in memory_keyring.store.values()
    page.browser.show_repo(GATED_REPO)
    qtbot.waitUntil(lambda: page.browser.variants_table.rowCount() == 1, timeout=TIMEOUT)
    (row,) = page.browser.variant_rows().values()
    assert row["Notes"] == ""  # config.json readable: no "needs access" note
    qtbot.mouseClick(page.token.forget_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "No Hugging Face token" in page.token.token_label.text(), timeout=TIMEOUT)
    assert memory_keyring.store == {}


def test_use_as_draft_needs_a_config(qtbot, page):
    open_repo(qtbot, page, "tinyllama", TINY_REPO)
    with qtbot.waitSignal(page.install_finished, timeout=TIMEOUT):
        qtbot.mouseClick(page.installer.install_button, Qt.MouseButton.LeftButton)
    assert not page.installer.use_button.isHidden()
    assert not page.installer.use_button.isEnabled()
    assert "config.yml" in page.installer.use_button.toolTip()


def test_use_as_draft_edits_config_yml_after_showing_the_diff(qtbot, page, drafts, tmp_path, monkeypatch):
    from conftest import TABBY
    from specdeck.core import config
    from specdeck.gui.widgets import config_dialog

    config_yml = tmp_path / "tabby" / "config.yml"
    config_yml.parent.mkdir()
    config_yml.write_text((TABBY / "config_sample.exl2-checkpoint.yml").read_text())
    original = config_yml.read_text()
    page.context.set_config_path(config_yml)
    page.installer.set_install_dir(drafts)
    shown = []

    def accept(dialog):
        shown.append(dialog.diff.toPlainText())
        return config_dialog.QDialog.DialogCode.Accepted

    monkeypatch.setattr(config_dialog.ConfirmChangeDialog, "exec", accept)
    open_repo(qtbot, page, "tinyllama", TINY_REPO)
    with qtbot.waitSignal(page.install_finished, timeout=TIMEOUT) as finished:
        qtbot.mouseClick(page.installer.install_button, Qt.MouseButton.LeftButton)
    assert page.installer.use_button.isEnabled()
    with qtbot.waitSignal(page.context.file_changed, timeout=TIMEOUT):
        qtbot.mouseClick(page.installer.use_button, Qt.MouseButton.LeftButton)
    name = finished.args[0].path.name
    (diff,) = shown
    assert f"+  draft_model_name: {name}" in diff, "the change was shown before saving"
    doc = config.load(config_yml)
    assert doc.draft_model_path() == finished.args[0].path
    assert (config_yml.parent / "config.yml.bak").read_text() == original


def test_library_compatibility_against_the_config_target(qtbot, page, fake_hub, drafts, tmp_path):
    from conftest import MODELS
    from specdeck.core.hub import install

    install(TINY_REPO, "4.0bpw", drafts)
    install("testorg/Qwen2.5-0.5B-Instruct-exl2", "4.0bpw", drafts)
    config_yml = tmp_path / "config.yml"
    config_yml.write_text(f"model:\n  model_dir: {MODELS}\n  model_name: Llama-2-7b-hf\n"
                          f"draft_model:\n  draft_model_dir: {drafts}\n")
    page.context.set_config_path(config_yml)

    def verdicts():
        rows = library_rows(page)
        return {name: rows[name]["Compatibility"] for name in ("TinyLlama-1.1B-Chat-v1.0-exl2-4.0bpw",
                                                 "Qwen2.5-0.5B-Instruct-exl2-4.0bpw", "Llama-2-7b-hf") if name in rows}

    qtbot.waitUntil(lambda: len(verdicts()) == 3 and verdicts()["Llama-2-7b-hf"] == "Target model"
                    and not {"…", "—"} & set(verdicts().values()), timeout=TIMEOUT)
    found = verdicts()
    assert found["TinyLlama-1.1B-Chat-v1.0-exl2-4.0bpw"].startswith("Compatible")  # same tokenizer as Llama 2
    assert found["Qwen2.5-0.5B-Instruct-exl2-4.0bpw"] == "Incompatible"
    assert found["Llama-2-7b-hf"] == "Target model"
    # A fresh install is checked against the target right away.
    open_repo(qtbot, page, "tinyllama", TINY_REPO)
    page.browser.select_variant("6_5")
    with qtbot.waitSignal(page.install_finished, timeout=TIMEOUT):
        qtbot.mouseClick(page.installer.install_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.installer.compat_badge.isVisible(), timeout=TIMEOUT)
    assert page.installer.compat_badge.text().startswith("Compatible")
    assert page.installer.compat_badge.property("role") in ("badge-ok", "badge-warn")


def test_install_request_from_another_page_opens_the_variant(qtbot, configured_qapp, fake_hub, monkeypatch):
    from specdeck.gui.main_window import MainWindow

    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    window.show_page("compat")
    window.context.install_requested.emit(TINY_REPO, "8.0bpw")
    assert window.current_page_key() == "models"
    page = window.page("models")
    qtbot.waitUntil(lambda: page.browser.variants_table.rowCount() == 3, timeout=TIMEOUT)
    assert page.browser.selected_variant().revision == "8.0bpw"
    assert page.browser.search_edit.text() == TINY_REPO
    page.shutdown()
    qtbot.waitUntil(lambda: not page.busy(), timeout=TIMEOUT)


def _reopened(qtbot) -> ModelsPage:
    """The Models page of the next session (what the last one kept in the settings)."""
    again = ModelsPage(AppContext())
    qtbot.addWidget(again)
    return again


def _close(qtbot, page) -> None:
    page.shutdown()
    qtbot.waitUntil(lambda: not page.busy(), timeout=TIMEOUT)


def test_the_hub_search_form_round_trips_through_its_widgets_and_the_settings(qtbot, page):
    from dataclasses import replace

    from specdeck.core.hub.search import ALL_FORMATS
    from specdeck.gui.pages.models.hub_browser import ANY_FAMILY, HubSearch

    browser = page.browser
    search = HubSearch(text="tiny llama", family="llama", format="gguf", author="someone")
    browser.show_search(search)
    assert browser.search_form() == search
    assert browser.format_combo.currentText() == "GGUF"
    assert browser.family_combo.currentText() == "llama"
    # what the user picks reads back as the model
    browser.family_combo.setCurrentIndex(browser.family_combo.findText(ANY_FAMILY))
    browser.format_combo.setCurrentIndex(0)
    searched = replace(search, family="", format=ALL_FORMATS)
    assert browser.search_form() == searched
    qtbot.mouseClick(browser.search_button, Qt.MouseButton.LeftButton)  # a search keeps it
    qtbot.waitUntil(browser.search_button.isEnabled, timeout=TIMEOUT)
    again = _reopened(qtbot)
    assert again.browser.search_form() == searched
    assert again.browser.family_combo.currentText() == ANY_FAMILY
    _close(qtbot, again)


def test_a_hand_edited_hub_search_gives_each_bad_field_its_default(qtbot, page):
    from PySide6.QtCore import QSettings
    from specdeck.gui.pages.models.hub_browser import SEARCH_PREFIX, HubSearch

    store = QSettings()
    for key, value in (("text", "qwen"), ("family", "qwen2"), ("format", "exl9"),
                       ("author", ["a", "list"])):
        store.setValue(SEARCH_PREFIX + key, value)
    store.sync()
    again = _reopened(qtbot)
    assert again.browser.search_form() == HubSearch(text="qwen", family="qwen2")
    assert again.browser.format_combo.currentIndex() == 0  # all formats
    _close(qtbot, again)


# GGUF drafts ---------------------------------------------------------------------------------
GGUF_REPO = "bartowski/Qwen2.5-0.5B-Instruct-GGUF"


@pytest.fixture
def gguf_page(qtbot, configured_qapp, memory_keyring, monkeypatch, drafts, tmp_path):  # noqa: F811
    """The Models page against a fake Hub holding a GGUF repository: one file per quant, one
    split in two shards, and a multimodal projector."""
    from conftest import FIXTURES
    from gguf_writer import write_tokenizer_gguf
    from hubserver import FakeHub, FakeRepo

    data = write_tokenizer_gguf(FIXTURES / "models" / "Qwen2.5-0.5B-Instruct",
                                tmp_path / "q.gguf", columns=8).read_bytes()
    half = len(data) // 2
    files = {"README.md": b"# GGUF\n", "Qwen2.5-0.5B-Instruct-Q8_0.gguf": data,
             "Qwen2.5-0.5B-Instruct-Q4_K_M-00001-of-00002.gguf": data[:half],
             "Qwen2.5-0.5B-Instruct-Q4_K_M-00002-of-00002.gguf": data[half:],
             "mmproj-Qwen2.5-0.5B-Instruct-f16.gguf": data[: half // 4]}
    with FakeHub([FakeRepo(GGUF_REPO, {"main": files}, tags=("gguf",))]) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        page = ModelsPage(AppContext())
        qtbot.addWidget(page)
        page.installer.set_install_dir(drafts)
        page.resize(1200, 800)
        page.show()
        yield page, hub, files
        page.shutdown()
        qtbot.waitUntil(lambda: not page.busy(), timeout=TIMEOUT)


def _rows(page) -> dict[str, dict[str, str]]:
    return page.browser.variant_rows()


def _select(page, file_name: str) -> None:
    page.browser.select_variant(page.browser.GGUF_PREFIX + file_name.removesuffix(".gguf").split("-00001-of-")[0])


def test_a_gguf_repo_lists_its_files_and_installs_one_verified(qtbot, gguf_page, drafts):
    from specdeck.core.hub import format_bytes

    page, hub, files = gguf_page
    page.browser.show_repo(GGUF_REPO)
    qtbot.waitUntil(lambda: page.browser.variants_table.rowCount() == 3, timeout=TIMEOUT)
    rows = _rows(page)
    q4 = rows["Qwen2.5-0.5B-Instruct-Q4_K_M-00001-of-00002.gguf"]
    assert q4["Bitrate / quant"] == "GGUF Q4_K_M" and q4["Files"] == "2" and q4["Download"] == format_bytes(len(files[
        "Qwen2.5-0.5B-Instruct-Q4_K_M-00001-of-00002.gguf"]) * 2 + (len(files[
            "Qwen2.5-0.5B-Instruct-Q4_K_M-00002-of-00002.gguf"]) - len(files[
                "Qwen2.5-0.5B-Instruct-Q4_K_M-00001-of-00002.gguf"])))
    assert "projector" in rows["mmproj-Qwen2.5-0.5B-Instruct-f16.gguf"]["Notes"]
    _select(page, "mmproj-Qwen2.5-0.5B-Instruct-f16.gguf")
    assert not page.installer.install_button.isEnabled()  # a projector is not a draft

    _select(page, "Qwen2.5-0.5B-Instruct-Q4_K_M-00001-of-00002.gguf")
    assert page.installer.install_button.isEnabled() and page.installer.install_button.text() == "Install GGUF Q4_K_M"
    first = "Qwen2.5-0.5B-Instruct-Q4_K_M-00001-of-00002.gguf"
    stall = hub.stall(first, at=len(files[first]) // 2)
    seen = []
    page.installer.progress_bar.valueChanged.connect(seen.append)
    page.installer.start_install()
    qtbot.waitUntil(lambda: stall.reached.is_set() and page.installer.progress_bar.value() > 0,
                    timeout=TIMEOUT)
    stall.release()
    qtbot.waitUntil(lambda: not page.installer.installing() and bool(page.installer.result_label.text()), timeout=TIMEOUT)
    folder = drafts / "Qwen2.5-0.5B-Instruct-GGUF-Q4_K_M"
    for name in ("Qwen2.5-0.5B-Instruct-Q4_K_M-00001-of-00002.gguf",
                 "Qwen2.5-0.5B-Instruct-Q4_K_M-00002-of-00002.gguf"):
        assert (folder / name).read_bytes() == files[name]
    assert any(0 < v < page.installer.progress_bar.maximum() for v in seen)  # it moved while downloading
    assert "-md " in page.installer.result_label.text() and not page.installer.use_button.isVisible()
    qtbot.waitUntil(lambda: _rows(page).get(
        "Qwen2.5-0.5B-Instruct-Q4_K_M-00001-of-00002.gguf", {}).get("Status") == "installed",
        timeout=TIMEOUT)
    _select(page, "Qwen2.5-0.5B-Instruct-Q4_K_M-00001-of-00002.gguf")
    assert page.installer.install_button.text() == "Installed" and not page.installer.install_button.isEnabled()


def test_a_cancelled_gguf_install_leaves_nothing_that_looks_installed(qtbot, gguf_page, drafts):
    page, hub, files = gguf_page
    name = "Qwen2.5-0.5B-Instruct-Q8_0.gguf"
    stall = hub.stall(name, at=len(files[name]) // 2)  # held mid-file until cancelled
    page.browser.show_repo(GGUF_REPO)
    qtbot.waitUntil(lambda: page.browser.variants_table.rowCount() == 3, timeout=TIMEOUT)
    _select(page, name)
    page.installer.start_install()
    qtbot.waitUntil(lambda: stall.reached.is_set() and page.installer.progress_bar.value() > 0,
                    timeout=TIMEOUT)
    page.installer.cancel_install()
    qtbot.waitUntil(lambda: not page.installer.installing(), timeout=TIMEOUT)
    stall.release()
    assert not (drafts / "Qwen2.5-0.5B-Instruct-GGUF-Q8_0").exists()
    qtbot.waitUntil(lambda: page.browser.variants_table.rowCount() == 3, timeout=TIMEOUT)
    assert _rows(page)["Qwen2.5-0.5B-Instruct-Q8_0.gguf"]["Status"] == ""
    # The unfinished download is offered for resuming, as a GGUF (not the whole main branch).
    qtbot.waitUntil(lambda: page.installer.partial_banner.isVisible(), timeout=TIMEOUT)
    assert page.installer.partials[0].gguf == "Qwen2.5-0.5B-Instruct-Q8_0.gguf"
    page.installer.resume_install()
    qtbot.waitUntil(lambda: not page.installer.installing() and bool(page.installer.result_label.text()),
                    timeout=TIMEOUT)
    folder = drafts / "Qwen2.5-0.5B-Instruct-GGUF-Q8_0"
    assert [p.name for p in folder.iterdir() if not p.name.startswith(".")] == [
        "Qwen2.5-0.5B-Instruct-Q8_0.gguf"]
    assert (folder / "Qwen2.5-0.5B-Instruct-Q8_0.gguf").read_bytes() == files[
        "Qwen2.5-0.5B-Instruct-Q8_0.gguf"]


def test_the_other_name_offered_after_a_conflict_is_looked_for_off_the_gui_thread(
        qtbot, page, drafts, monkeypatch):
    """Issue 45: the free folder name was looked for on disk on the GUI thread. It is found
    in a worker (the real free_folder_name, watched), then offered."""
    import threading
    from types import SimpleNamespace

    import specdeck.core.hub as hub

    drafts.mkdir(parents=True, exist_ok=True)
    (drafts / "tiny").mkdir()
    looked_on, offered = [], []
    real = hub.free_folder_name

    def watched(dest, name):
        looked_on.append(threading.current_thread() is threading.main_thread())
        return real(dest, name)

    monkeypatch.setattr(hub, "free_folder_name", watched)
    monkeypatch.setattr(QInputDialog, "getText",
                        lambda *args, text="", **kwargs: (offered.append(text), ("", False))[1])
    page.installer._offer_other_name(SimpleNamespace(repo_id=TINY_REPO, revision="main",
                                           folder_name="tiny"))
    qtbot.waitUntil(lambda: bool(offered), timeout=10_000)
    assert offered == ["tiny-2"] and looked_on == [False]
