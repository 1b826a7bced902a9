"""State shared by the pages of one window: settings, the current config.yml, status."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path

from PySide6.QtCore import QObject, QThreadPool, Signal
from specdeck.core import settings as settings_store
from specdeck.core.settings import Settings


def _is_file(path: str) -> bool:
    return Path(path).is_file()


def _read_settings() -> tuple[Settings, str | None]:
    """Worker: settings.json, and the config.yml it remembers if that no longer exists."""
    saved = settings_store.load()
    remembered = saved.config_path
    return saved, (remembered if remembered and not _is_file(remembered) else None)


def same_path(shown: str | Path | None, announced: str) -> bool:
    """Whether a page's file is the one ``file_changed`` names (both made absolute, by
    name: no disk is touched on the GUI thread)."""
    return shown is not None and \
        os.path.normpath(os.path.abspath(shown)) == os.path.normpath(os.path.abspath(announced))


class AppContext(QObject):
    """One per main window. Pages read shared state here and listen to its signals."""

    config_path_changed = Signal(str)
    """The user opened another TabbyAPI config.yml (absolute path)."""
    file_changed = Signal(str, str)
    """SpecDeck wrote a file the user owns: its path and kind (core.changed: TabbyAPI's
    config.yml, llama-swap's config.yaml, a presets file, a model folder). Every write is
    announced here, by :meth:`announce`, whichever page made it; a page showing that file
    re-reads it."""
    status_message = Signal(str, int)
    """Text for the status bar, and how long to show it in ms (0 = until replaced)."""
    page_requested = Signal(str, str)
    """Open a page (a PAGES key) with an optional argument: "demo" for the A/B page, a
    config.yml path for Draft settings, a server URL for the A/B page."""
    install_requested = Signal(str, str)
    """A page asks for a Hub model to be installed: repo id, revision ("" = the default)."""
    config_forgotten = Signal(str)
    """The config.yml remembered from last time no longer exists, and is forgotten (its
    path): found by a worker after start-up, so the window says it then."""
    settings_read = Signal()
    """settings.json has been read (in a worker, once, after the window opened): pages that
    show what it names (the config.yml remembered, extra model folders) read it now. Until
    then :attr:`settings` are the defaults with whatever was changed meanwhile."""

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        from specdeck.gui.workers import Tasks

        self.tasks = Tasks(self)
        self._writer = QThreadPool(self)
        self._writer.setMaxThreadCount(1)
        """settings.json is read, then written, by one thread, in order: the newest settings
        land last."""
        self._settings = Settings()
        self._gpu_sampler = None
        self._changes: list[Callable[[Settings], Settings]] | None = []
        """What was changed before settings.json was read (applied to what it holds then);
        None once it was read."""
        self._read: list[tuple[Settings, str | None]] = []
        """What the worker read, where ``flush`` finds it before it is delivered."""
        # Read in a worker: a slow or gone disk never holds the window.
        self.tasks.run("read", self._read_into, self._read, pool=self._writer,
                       on_result=lambda _read: self._settings_arrived())

    @staticmethod
    def _read_into(box: list) -> None:  # worker
        box.append(_read_settings())

    def _settings_arrived(self) -> None:
        if self._changes is None or not self._read:
            return  # taken already (by flush)
        saved, gone = self._read[0]
        changes, self._changes = self._changes, None
        for change in changes:
            saved = change(saved)
        forgotten = gone is not None and saved.config_path == gone  # not if another was opened
        if forgotten:
            saved = saved.without_config()
        self._settings = saved
        if changes or forgotten:
            self._save()
        self.settings_read.emit()
        if forgotten:
            self.config_forgotten.emit(gone)

    def gpu_sampler(self):
        """The window's one GPU telemetry sampler (specdeck.core.gpu.Sampler).

        Created on first use and not started: whoever shows telemetry starts it; the GPUs
        page stops it when the window closes. Sharing one keeps one NVML session and one
        history for every page that plots GPU memory.
        """
        if self._gpu_sampler is None:
            from specdeck.core.gpu.sampler import Sampler

            self._gpu_sampler = Sampler()
        return self._gpu_sampler

    @property
    def settings(self) -> Settings:
        return self._settings

    def update_settings(self, new: Settings) -> None:
        """Use ``new`` from now on; settings.json is written in a worker (a failure is said
        in the status bar: the settings still hold for this session). Before settings.json
        is read, the fields ``new`` changes are kept, and applied to what it holds."""
        self._change(new, lambda saved, old=self._settings: replace(saved, **{
            f.name: getattr(new, f.name) for f in fields(Settings)
            if getattr(new, f.name) != getattr(old, f.name)}))

    def _change(self, new: Settings, change: Callable[[Settings], Settings]) -> None:
        self._settings = new
        if self._changes is not None:
            self._changes.append(change)  # written once what it changes has been read
        else:
            self._save()

    def _save(self) -> None:
        self.tasks.run("settings", settings_store.save, self._settings, pool=self._writer,
                       on_error=self._settings_not_saved)

    def _settings_not_saved(self, error: BaseException) -> None:
        self.show_status(f"Could not save SpecDeck's settings: {error}", 0)

    def flush(self, timeout_ms: int = 10_000) -> bool:
        """Wait until the settings being written are on disk (the window is closing)."""
        if not self._writer.waitForDone(timeout_ms):
            return False
        self._settings_arrived()  # read, not delivered yet: what was changed is written now
        return self._writer.waitForDone(timeout_ms)

    @property
    def config_path(self) -> Path | None:
        value = self._settings.config_path
        return Path(value) if value else None

    def set_config_path(self, path: str | Path) -> None:
        self._change(self._settings.with_config(path), lambda saved: saved.with_config(path))
        self.config_path_changed.emit(str(self.config_path))

    def announce(self, changed) -> None:
        """Tell every page what a write changed (a core.changed.FileChanged; None: nothing
        was written, nothing to say)."""
        if changed is not None:
            self.file_changed.emit(str(changed.path), changed.kind)

    def show_status(self, text: str, timeout_ms: int = 5000) -> None:
        self.status_message.emit(text, timeout_ms)
