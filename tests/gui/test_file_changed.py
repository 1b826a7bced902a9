"""A write announces itself (issue 45): whichever page writes TabbyAPI's config.yml or
llama-swap's config.yaml, the app's one ``file_changed`` broadcast makes every page showing
that file read it again. Driven through the real pages of one window on real files: the Tune
page's Apply and Roll back (a TabbyAPI folder, a llama-swap config) seen on the Draft settings
and llama-swap pages.

The Tune page proves an applied setting by starting the server from the written file; that
relaunch is what tests/gui/test_tune_page.py and test_tune_page_tabby.py cover with the real
llama-server and the TabbyAPI stand-in (minutes each). Here it is answered "it ran" at once
(``relaunch`` returns None, as core.tune.apply.write_and_prove reads it), so what is checked is
what happens after the write: who hears of it."""

from __future__ import annotations

import sys

import pytest
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

    monkeypatch.setattr(tune_apply, "relaunch", lambda result, cancel=None: None)
    monkeypatch.setattr(tune_tabby, "relaunch", lambda result, cancel=None: None)


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
