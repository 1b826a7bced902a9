"""The Models page: the local model library, and drafts to install from the Hub (an EXL2
branch for TabbyAPI exl2-checkpoint, an EXL3 branch for TabbyAPI main, or a GGUF file for
llama-server).

Top: every model folder SpecDeck knows (config.yml's model and draft folders, extra folders,
the install destination) with its architecture, size, bitrate, context, vocabulary, a
compatibility badge against config.yml's target model, and where it came from.

Bottom: search the Hub (every format, or one: EXL2, EXL3, GGUF), pick a repository, pick a
bitrate (one EXL2 or EXL3 branch each, labelled with its format) or a GGUF
file (its shards together), Install. Progress shows bytes, rate, time left and the file;
Cancel keeps what was downloaded, and an unfinished install (cancelled, failed, or cut off by
a restart) is offered for Resume. After an EXL2 or EXL3 install, "Use as draft" previews the
config.yml change (refused, with the reason, when config.yml's TabbyAPI branch cannot load
that format) and saves it atomically through the config editor; after a GGUF install,
the page shows the llama-server flags that draft with it.

Everything slow (network, disk scans, keyring, tokenizers) runs in gui.workers. What is
installed, in which state, under which folder name, and what a folder is for is decided in
specdeck.core.hub.library; the page renders it.

The page's parts, one module each: library (the local models), hub_browser (search and a
repository's variants), install (destination, Install, Resume, Use as draft), hub_token
(the Hugging Face token).
"""

from __future__ import annotations

import html
import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QSplitter, QVBoxLayout, QWidget
from specdeck.gui import form_settings
from specdeck.gui.context import AppContext
from specdeck.gui.pages.models.hub_browser import HubBrowserPart
from specdeck.gui.pages.models.hub_token import TokenPart, _token_status
from specdeck.gui.pages.models.install import SETTINGS_PREFIX, InstallChoice, InstallPart
from specdeck.gui.pages.models.library import LibraryPart
from specdeck.gui.workers import TaskHandle, Tasks

log = logging.getLogger(__name__)


def create_page(context: AppContext) -> QWidget:
    return ModelsPage(context)


class ModelsPage(LibraryPart, HubBrowserPart, InstallPart, TokenPart, QWidget):
    """The library on top, the Hub below; each part in its module, sharing the page's
    workers (``_run``) and error banner."""

    install_finished = Signal(object)
    """An InstallResult, after a successful install."""

    def __init__(self, context: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.context = context
        self.tasks = Tasks(self)
        """Keys: "library" (the scan), "compatibility", "variants" (the selected repository's),
        "install", "search", "token", ...: a newer request of a key replaces the older."""
        self._offer: Any = None
        """What the selected repository offers (core.hub.library.RepoOffer)."""
        self._partials: list = []
        self._library_dirs: list[Path] = []
        self._last_result: Any = None
        self._install_dir: Path | None = None
        self._rename_offer: Any = None  # a Variant whose folder name clashed

        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 8, 10, 8)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self._build_library())
        splitter.addWidget(self._build_hub())
        splitter.setStretchFactor(0, 2)
        splitter.setStretchFactor(1, 5)
        splitter.setSizes([240, 520])
        splitter.setChildrenCollapsible(False)
        layout.addWidget(splitter, 1)

        context.config_path_changed.connect(lambda _path: self._config_changed())
        context.file_changed.connect(self._file_changed)
        stored = form_settings.restore(SETTINGS_PREFIX, InstallChoice()).install_dir
        if stored:  # a folder the user chose on this page wins over config.yml's
            self._install_dir = Path(stored)
            self._show_destination()
            self.refresh_library()
        else:
            self._use_config_destination()
        self._run("token", _token_status, finished=self.token_label.setText)

    def _run(self, key: str | None, fn, *args, finished=None, failed=None, progress=None,
             **kwargs) -> TaskHandle | None:
        """Run ``fn`` in a worker as the newest call of ``key`` (None: a call of its own); its
        result, error and progress reach the callbacks on the GUI thread while it is the
        newest, and never after shutdown()."""
        return self.tasks.run(key, fn, *args, on_result=finished,
                              on_error=failed or self._show_error, on_progress=progress, **kwargs)

    def _show_error(self, error: BaseException) -> None:
        self.error_banner.show_message(html.escape(str(error)), "error")

    def _clear_error(self) -> None:
        self.error_banner.clear()

    def busy(self) -> bool:
        """Whether any call is still in a worker (after shutdown: until each has stopped)."""
        return self.tasks.running()

    def shutdown(self) -> None:
        """Stop background work when the window closes; a running install stays resumable."""
        self.tasks.close()
