"""State shared by the pages of one window: settings, the current config.yml, status."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, QThreadPool, Signal
from specdeck.core import settings as settings_store
from specdeck.core.settings import Settings


class AppContext(QObject):
    """One per main window. Pages read shared state here and listen to its signals."""

    config_path_changed = Signal(str)
    """The user opened another TabbyAPI config.yml (absolute path)."""
    config_saved = Signal(str)
    """A config.yml was written by SpecDeck (absolute path); pages re-read it."""
    status_message = Signal(str, int)
    """Text for the status bar, and how long to show it in ms (0 = until replaced)."""
    page_requested = Signal(str, str)
    """Open a page (a PAGES key) with an optional argument: "demo" for the A/B page, a
    config.yml path for Draft settings, a server URL for the A/B page."""
    install_requested = Signal(str, str)
    """A page asks for a Hub model to be installed: repo id, revision ("" = the default)."""

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        from specdeck.gui.workers import Tasks

        self.tasks = Tasks(self)
        self._writer = QThreadPool(self)
        self._writer.setMaxThreadCount(1)
        """settings.json is written by one thread, in order: the newest settings land last."""
        self._settings = settings_store.load()
        self._gpu_sampler = None
        self.forgotten_config: str | None = None
        """A remembered config.yml that no longer existed at start-up, now forgotten."""
        remembered = self._settings.config_path
        if remembered and not Path(remembered).is_file():
            self.forgotten_config = remembered
            self.update_settings(self._settings.without_config())

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
        in the status bar: the settings still hold for this session)."""
        self._settings = new
        self.tasks.run("settings", settings_store.save, new, pool=self._writer,
                       on_error=self._settings_not_saved)

    def _settings_not_saved(self, error: BaseException) -> None:
        self.show_status(f"Could not save SpecDeck's settings: {error}", 0)

    def flush(self, timeout_ms: int = 10_000) -> bool:
        """Wait until the settings being written are on disk (the window is closing)."""
        return self._writer.waitForDone(timeout_ms)

    @property
    def config_path(self) -> Path | None:
        value = self._settings.config_path
        return Path(value) if value else None

    def set_config_path(self, path: str | Path) -> None:
        self.update_settings(self._settings.with_config(path))
        self.config_path_changed.emit(str(self.config_path))

    def show_status(self, text: str, timeout_ms: int = 5000) -> None:
        self.status_message.emit(text, timeout_ms)
