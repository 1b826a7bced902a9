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

The page's parts, one module each, each an object that owns its widgets and its state:
library (the local models and the folders scanned), hub_browser (search, and the shown
repository's offer and selection), install (the destination, the unfinished installs,
Install, Resume, Use as draft), hub_token (the Hugging Face token). The page owns what they
share (the window's context, the workers, the error banner) and wires what one part tells
the others.
"""

from __future__ import annotations

import html
import logging

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QGroupBox, QSplitter, QVBoxLayout, QWidget
from specdeck.core import changed
from specdeck.gui.context import AppContext
from specdeck.gui.pages.models.hub_browser import HubBrowser
from specdeck.gui.pages.models.hub_token import HubToken
from specdeck.gui.pages.models.install import Installer
from specdeck.gui.pages.models.library import Library
from specdeck.gui.widgets.banner import Banner
from specdeck.gui.workers import TaskHandle, Tasks

log = logging.getLogger(__name__)


def create_page(context: AppContext) -> QWidget:
    return ModelsPage(context)


class ModelsPage(QWidget):
    """The library on top, the Hub below. The parts (``library``, ``browser``, ``installer``,
    ``token``) share the page's workers (:meth:`run`) and error banner; what one needs of
    another is asked of its owner, what one tells the others goes through the signals wired
    here."""

    install_finished = Signal(object)
    """An InstallResult, after a successful install."""

    def __init__(self, context: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.context = context
        self.tasks = Tasks(self)
        """Keys: "library" (the scan), "compatibility", "variants" (the selected repository's),
        "install", "search", "token", ...: a newer request of a key replaces the older."""
        self.error_banner = Banner()
        self.token = HubToken(self)
        self.browser = HubBrowser(
            self, where=lambda: (self.library.dirs, self.installer.install_dir))
        self.installer = Installer(self, self.browser)
        self.library = Library(self, destination=lambda: self.installer.install_dir)

        self.library.partials_found.connect(self.installer.show_partials)
        self.browser.partials_found.connect(self.installer.show_partials)
        self.browser.selection_changed.connect(self.installer.update_buttons)
        self.installer.destination_changed.connect(self.library.refresh)
        self.installer.discarded.connect(self.library.refresh)
        self.installer.ended.connect(self._install_ended)
        self.installer.finished.connect(self.install_finished)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 8, 10, 8)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.library.box)
        splitter.addWidget(self._build_hub())
        splitter.setStretchFactor(0, 2)
        splitter.setStretchFactor(1, 5)
        splitter.setSizes([240, 520])
        splitter.setChildrenCollapsible(False)
        layout.addWidget(splitter, 1)

        context.config_path_changed.connect(lambda _path: self.installer.follow_config())
        # settings.json names config.yml (its draft folder) and extra folders: read again.
        context.settings_read.connect(self.installer.restore_destination)
        context.file_changed.connect(self._file_changed)
        self.installer.restore_destination()
        self.token.refresh()

    def _build_hub(self) -> QWidget:
        box = QGroupBox("Install a draft model (EXL2 or EXL3 branch, or GGUF file) from the Hugging Face Hub")
        layout = QVBoxLayout(box)
        layout.addWidget(self.error_banner)
        layout.addLayout(self.browser.search_row)
        layout.addLayout(self.token.row)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.browser.results_panel)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.browser.repo_label)
        right_layout.addWidget(self.browser.variants_table, 1)
        right_layout.addWidget(self.installer.panel)
        split.addWidget(right)
        split.setStretchFactor(0, 2)
        split.setStretchFactor(1, 3)
        layout.addWidget(split, 1)
        return box

    # what the parts share ------------------------------------------------------------------
    def run(self, key: str | None, fn, *args, finished=None, failed=None, progress=None,
            **kwargs) -> TaskHandle | None:
        """Run ``fn`` in a worker as the newest call of ``key`` (None: a call of its own); its
        result, error and progress reach the callbacks on the GUI thread while it is the
        newest, and never after shutdown()."""
        return self.tasks.run(key, fn, *args, on_result=finished,
                              on_error=failed or self.show_error, on_progress=progress, **kwargs)

    def show_error(self, error: BaseException) -> None:
        self.error_banner.show_message(html.escape(str(error)), "error")

    def clear_error(self) -> None:
        self.error_banner.clear()

    def config_file(self) -> str | None:
        """The window's config.yml (it names the library's folders and the target model)."""
        path = self.context.config_path
        return str(path) if path else None

    # what one part tells the others --------------------------------------------------------
    def _file_changed(self, _path: str, kind: str) -> None:
        """config.yml names the library's folder and the draft in use; an install (this
        page's, or a tune's Hub draft) adds a model to it, and changes the shown repository's
        statuses (this page's own install shows them again when it ends)."""
        if kind in (changed.TABBY_CONFIG, changed.MODEL):
            self.library.refresh()
        if kind == changed.MODEL and self.browser.offer is not None \
                and not self.installer.installing():
            self.browser.show_repo(self.browser.offer.repo_id)

    def _install_ended(self) -> None:
        """An install ended (done, failed or cancelled): the library, and the shown
        repository's statuses (installed, unfinished), are read again."""
        self.library.refresh()
        if self.browser.offer is not None:
            self.browser.show_repo(self.browser.offer.repo_id)

    def request_install(self, repo_id: str, revision: str = "") -> None:
        """Another page asked for this repo (e.g. a Hub suggestion on Compatibility): show its
        variants with ``revision`` selected, ready for the user's Install click."""
        self.browser.search_edit.setText(repo_id)
        self.browser.show_repo(repo_id, select=revision or None)
        self.context.show_status(f"Pick a bitrate of {repo_id} and press Install.")

    def busy(self) -> bool:
        """Whether any call is still in a worker (after shutdown: until each has stopped)."""
        return self.tasks.running()

    def shutdown(self) -> None:
        """Stop background work when the window closes; a running install stays resumable."""
        self.browser.save()
        self.tasks.close()
