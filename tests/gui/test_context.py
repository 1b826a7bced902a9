"""The window's shared state writes SpecDeck's settings off the GUI thread, in order, and
says so in the status bar when it cannot."""

from __future__ import annotations

import threading

from specdeck.core import settings as store
from specdeck.gui.context import AppContext


def test_settings_are_written_in_a_worker_newest_last(qtbot, configured_qapp, monkeypatch):
    context = AppContext()
    writers = []
    real_save = store.save
    monkeypatch.setattr(store, "save", lambda s: (writers.append(threading.current_thread()),
                                                  real_save(s)))
    for n in range(20):
        context.update_settings(store.Settings(extra_model_dirs=(f"/models/{n}",)))
        assert context.settings.extra_model_dirs == (f"/models/{n}",)  # in use at once
    assert context.flush()
    assert store.load().extra_model_dirs == ("/models/19",)
    assert writers and threading.main_thread() not in writers


def test_a_failed_write_is_said_in_the_status_bar(qtbot, configured_qapp):
    context = AppContext()
    messages = []
    context.status_message.connect(lambda text, _ms: messages.append(text))
    store.settings_path().unlink(missing_ok=True)
    store.settings_path().mkdir(parents=True)  # a folder where the file should go
    context.update_settings(store.Settings(hub_endpoint="http://127.0.0.1:9"))
    qtbot.waitUntil(lambda: bool(messages), timeout=5000)
    assert messages[0].startswith("Could not save SpecDeck's settings")
    assert context.settings.hub_endpoint == "http://127.0.0.1:9"  # still used this session
