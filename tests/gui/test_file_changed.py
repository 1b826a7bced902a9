"""A write announces itself (issue 45): whichever page writes TabbyAPI's config.yml or
llama-swap's config.yaml, the app's one ``file_changed`` broadcast makes every page showing
that file read it again. Driven through the real pages of one window on real files: the Tune
page's Apply and Roll back (a TabbyAPI folder, a llama-swap config) seen on the Draft settings
and llama-swap pages; a config.yml created on Draft settings and a tune's Hub download (a local
Hub) seen on the Models page.

The Tune page proves an applied setting by starting the server from the written file; that
relaunch is what tests/gui/test_tune_page.py and test_tune_page_tabby.py cover with the real
llama-server and the TabbyAPI stand-in (minutes each). Here it is answered "it ran" at once
(``relaunch`` returns None, as core.tune.apply.write_and_prove reads it), so what is checked is
what happens after the write: who hears of it."""

from __future__ import annotations

import sys

import pytest
from hubserver import memory_keyring  # noqa: F401 - a fixture
from PySide6.QtWidgets import QDialog
from specdeck.core.config import DRAFT
from specdeck.gui.main_window import MainWindow
from specdeck.gui.widgets.config_dialog import ConfirmChangeDialog
from swap_samples import tune_config
from tabby_app import make_install
from test_tune_page import _left, apply_and_save, verified

TIMEOUT = 30_000


@pytest.fixture
def answered(monkeypatch):
    """The relaunch from the written file answers (see the module's docstring)."""
    import specdeck.core.tune.apply as tune_apply
    import specdeck.core.tune.tabby as tune_tabby

    monkeypatch.setattr(tune_apply, "relaunch", lambda result, cancel=None, started=None: None)
    monkeypatch.setattr(tune_tabby, "relaunch", lambda result, cancel=None, started=None: None)


def tabby_result(folder):
    """A tune of a TabbyAPI folder verified n-gram drafting at k=4 (what
    core.tune.verify.decide returns for such a winner; decide is tested in tests/core)."""
    from specdeck.core.tune.candidates import Candidate
    from specdeck.core.tune.run import Decided, TuneOptions, TuneResult
    from specdeck.core.tune.tabby import read_install

    return TuneResult(read_install(folder, sys.executable),
                      TuneOptions(suites=("grounded",), prompts_per_suite=2, max_new_tokens=16),
                      (), (), None, None,
                      Decided(Candidate("ngram"), ("draft_mode=ngram", "draft_num_tokens=4"),
                              True, "verified"))


def test_a_tabbyapi_apply_and_roll_back_on_the_tune_page_reach_draft_settings(
        qtbot, configured_qapp, tmp_path, answered):
    folder = make_install(tmp_path / "tabbyAPI", "main", draft=None)
    config = folder / "config.yml"
    original = config.read_bytes()
    window = MainWindow()
    qtbot.addWidget(window)
    window.context.set_config_path(config)
    draft = window.show_page("draft")
    mode = draft.fields[(DRAFT, "draft_mode")]
    qtbot.waitUntil(lambda: draft.document is not None and draft.document.path == config,
                    timeout=TIMEOUT)
    shown_before = mode.text()
    assert shown_before != "ngram"

    tune = window.show_page("tune")
    tune.finished(tabby_result(folder))
    heard = []
    window.context.file_changed.connect(lambda path, kind: heard.append((path, kind)))
    apply_and_save(qtbot, tune, config)
    qtbot.waitUntil(lambda: mode.text() == "ngram", timeout=TIMEOUT)  # read again, unasked
    assert "draft_mode: ngram" in config.read_text()
    assert draft.fields[(DRAFT, "draft_num_tokens")].text() == "4"
    assert not draft.is_dirty()
    assert heard == [(str(config), "TabbyAPI config.yml")]  # one announcement per write

    qtbot.mouseClick(tune.rollback_button, _left())
    qtbot.waitUntil(lambda: mode.text() == shown_before, timeout=TIMEOUT)
    assert config.read_bytes() == original
    assert len(heard) == 2 and heard[1] == heard[0]


def test_llama_swap_writes_reach_the_llama_swap_page(qtbot, configured_qapp, tmp_path,
                                                     llama_bin, demo_gguf, answered, monkeypatch):
    config = tune_config(tmp_path, llama_bin, demo_gguf)
    window = MainWindow()
    qtbot.addWidget(window)
    swap = window.show_page("swap")
    swap.open_path(config)
    qtbot.waitUntil(lambda: swap.config is not None, timeout=TIMEOUT)
    first = swap.config

    # The Tune page writes the winner into the cmd: the llama-swap page reads the file again.
    tune = window.show_page("tune")
    tune.finished(verified(config))
    heard = []
    window.context.file_changed.connect(lambda path, kind: heard.append((path, kind)))
    apply_and_save(qtbot, tune, config)
    qtbot.waitUntil(lambda: swap.config is not first, timeout=TIMEOUT)
    assert "--spec-type ngram-simple" in swap.config.document.text
    assert swap.config.document.text == config.read_text()
    assert heard == [(str(config), "llama-swap config.yaml")]

    # Roll back: read again, as the file now is.
    applied = swap.config
    qtbot.mouseClick(tune.rollback_button, _left())
    qtbot.waitUntil(lambda: swap.config is not applied, timeout=TIMEOUT)
    assert "--spec-type" not in swap.config.document.text

    # The llama-swap page's own Save is announced the same way, once.
    monkeypatch.setattr(ConfirmChangeDialog, "exec", lambda dialog: QDialog.DialogCode.Accepted)
    names = [swap.models.item(i).data(256) for i in range(swap.models.count())]
    swap.models.setCurrentRow(names.index("smol"))
    swap.draft_max.setValue(6)
    swap.plan_edit()
    qtbot.waitUntil(lambda: swap.change is not None, timeout=TIMEOUT)
    before = swap.config
    swap.save()
    qtbot.waitUntil(lambda: swap.config is not before and swap.change is None, timeout=TIMEOUT)
    assert heard[-1] == (str(config), "llama-swap config.yaml") and len(heard) == 3
    assert swap.config.document.text == config.read_text()


def test_a_config_yml_created_on_draft_settings_reaches_the_models_page(
        qtbot, configured_qapp, tmp_path):
    """The window already names the config.yml (no config_path_changed follows): only the
    creation's announcement tells the Models page to read the folders it names."""
    from conftest import MODELS
    from specdeck.core.changed import TABBY_CONFIG

    folder = tmp_path / "tabbyAPI"
    (folder / "models").mkdir(parents=True)
    (folder / "models" / "Qwen2.5-0.5B-Instruct").symlink_to(
        MODELS / "Qwen2.5-0.5B-Instruct", target_is_directory=True)
    config = folder / "config.yml"
    window = MainWindow()
    qtbot.addWidget(window)
    window.context.set_config_path(config)  # not there yet
    models = window.show_page("models")
    qtbot.waitUntil(lambda: "Folders:" in models.library.folders_label.text(), timeout=TIMEOUT)
    draft = window.show_page("draft")
    qtbot.waitUntil(lambda: "does not exist yet" in draft.banner.label.text(), timeout=TIMEOUT)
    assert "Qwen2.5-0.5B-Instruct" not in models.library.library_rows()
    heard = []
    window.context.file_changed.connect(lambda path, kind: heard.append((path, kind)))

    draft.create_config(config)
    qtbot.waitUntil(lambda: "Qwen2.5-0.5B-Instruct" in models.library.library_rows(), timeout=TIMEOUT)
    assert heard == [(str(config), TABBY_CONFIG)]
    qtbot.waitUntil(lambda: draft.document is not None, timeout=TIMEOUT)
    models.shutdown()
    qtbot.waitUntil(lambda: not models.busy(), timeout=TIMEOUT)


def test_a_tunes_hub_download_reaches_the_models_page(qtbot, configured_qapp, tmp_path,
                                                      monkeypatch, memory_keyring):  # noqa: F811
    """A tune installs a Hub draft (the tune's own download step, against a local Hub): the
    Models page showing that repository says it is installed, unasked."""
    import threading

    from conftest import FIXTURES
    from gguf_writer import write_tokenizer_gguf
    from hubserver import FakeHub, FakeRepo
    from specdeck.core.changed import MODEL
    from specdeck.core.tune.candidates import Candidate, HubFile
    from specdeck.core.tune.downloads import download_phase
    from specdeck.core.tune.live import TuneLive
    from specdeck.core.tune.predict import Prediction
    from specdeck.core.tune.run import TuneOptions

    repo_id, name = "bartowski/Qwen2.5-0.5B-Instruct-GGUF", "Qwen2.5-0.5B-Instruct-Q8_0.gguf"
    data = write_tokenizer_gguf(FIXTURES / "models" / "Qwen2.5-0.5B-Instruct",
                                tmp_path / "q.gguf", columns=8).read_bytes()
    repo = FakeRepo(repo_id, {"main": {name: data}}, tags=("gguf",))
    drafts = tmp_path / "drafts"
    with FakeHub([repo]) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        window = MainWindow()
        qtbot.addWidget(window)
        models = window.show_page("models")
        models.installer.set_install_dir(drafts)
        models.browser.show_repo(repo_id)
        qtbot.waitUntil(lambda: name in models.browser.variant_rows(), timeout=TIMEOUT)
        assert models.browser.variant_rows()[name]["Status"] == ""
        tune = window.show_page("tune")
        tune.live = TuneLive()  # a tune under way: its events are shown
        heard = []
        window.context.file_changed.connect(lambda path, kind: heard.append((path, kind)))

        candidate = Candidate("draft-simple", drafts / name, download_bytes=len(data),
                              hub=HubFile(repo_id, repo.commit("main"), name, "Q8_0", len(data)))
        options = TuneOptions(download_budget=1 << 30, hub_endpoint=hub.url)
        kept, records = download_phase([(candidate, Prediction(1.6, 1.2, 2.1, "theory"))],
                                       drafts, options, tune.events.put, threading.Event(),
                                       None)  # what the tune's worker does, into its queue
        assert [r.status for r in records] == ["downloaded"] and kept
        tune.pump()
        qtbot.waitUntil(lambda: models.browser.variant_rows().get(name, {}).get("Status") == "installed",
                        timeout=TIMEOUT)
        assert heard == [(str(records[0].path.parent), MODEL)]
        models.shutdown()
        qtbot.waitUntil(lambda: not models.busy(), timeout=TIMEOUT)


def test_a_model_installed_into_the_draft_folder_is_offered_on_draft_settings(
        qtbot, configured_qapp, tmp_path):
    """Draft settings lists the draft folder's models as the draft's choices: an install
    there (announced as any install is: its FileChanged) lists it, the edits kept."""
    from specdeck.core.changed import MODEL, FileChanged

    folder = make_install(tmp_path / "tabbyAPI", "main", draft=None)
    window = MainWindow()
    qtbot.addWidget(window)
    window.context.set_config_path(folder / "config.yml")
    draft = window.show_page("draft")
    qtbot.waitUntil(lambda: draft.document is not None, timeout=TIMEOUT)
    combo = draft.fields[(DRAFT, "draft_model_name")].input

    def offered() -> list[str]:
        return [combo.itemText(i) for i in range(combo.count())]

    assert "Qwen2.5-0.5B-new" not in offered()
    new = draft.document.resolve_dir(DRAFT, "draft_model_dir") / "Qwen2.5-0.5B-new"
    new.mkdir()
    (new / "config.json").write_text("{}", encoding="utf-8")
    window.context.announce(FileChanged(new, MODEL))
    qtbot.waitUntil(lambda: "Qwen2.5-0.5B-new" in offered(), timeout=TIMEOUT)
