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


def test_settings_json_is_read_in_a_worker_and_what_changed_meanwhile_is_kept(
        qtbot, configured_qapp, monkeypatch, tmp_path):
    """Issue 45: settings.json was read on the GUI thread as the window opened. It is read in
    a worker (held here, as a slow disk would hold it): the window has the defaults at once,
    a config.yml opened meanwhile is kept, and the saved folders come in when read."""
    config = tmp_path / "config.yml"
    store.save(store.Settings(extra_model_dirs=("/models/saved",), hub_endpoint="http://hub"))
    real_load, readers, disk = store.load, [], threading.Event()

    def slow_load():
        readers.append(threading.current_thread())
        disk.wait(10)
        return real_load()

    monkeypatch.setattr(store, "load", slow_load)
    context = AppContext()
    heard = []
    context.settings_read.connect(lambda: heard.append(context.settings))
    assert context.settings == store.Settings()  # the window did not wait for the disk
    context.set_config_path(config)
    assert context.config_path == config
    with qtbot.waitSignal(context.settings_read, timeout=10_000):
        disk.set()
    assert readers and threading.main_thread() not in readers
    (read,) = heard
    assert (read.config_path, read.extra_model_dirs, read.hub_endpoint) == (
        str(config), ("/models/saved",), "http://hub")
    assert context.flush()
    saved = real_load()
    assert (saved.config_path, saved.extra_model_dirs) == (str(config), ("/models/saved",))
