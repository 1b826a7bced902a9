"""The Models page's install: the destination folder (config.yml's draft_model_dir, or one the
user chose, kept between sessions), Install with progress (bytes, rate, time left, file),
Cancel keeping what was downloaded, Resume or Discard of an unfinished install, and, after an
EXL2 or EXL3 install, "Use as draft" (the config.yml change previewed, then saved atomically
through the config editor); after a GGUF install, the llama-server flags that draft with it.
"""

from __future__ import annotations

import html
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)
from specdeck.core.errors import CancelledError
from specdeck.gui import form_settings
from specdeck.gui.pages.compatibility import BADGE_ROLES
from specdeck.gui.pages.models.widgets import new_label, set_role
from specdeck.gui.widgets.banner import Banner

if TYPE_CHECKING:
    from specdeck.gui.pages.models import ModelsPage
    from specdeck.gui.pages.models.hub_browser import HubBrowser

SETTINGS_PREFIX = "models/"
PROGRESS_STEPS = 1000


@dataclass(frozen=True)
class InstallChoice:
    """What the page keeps between sessions: the folder the user chose to install into
    ("": config.yml's draft_model_dir, which follows the config opened)."""

    install_dir: str = ""


def _install_and_use(install, *args, progress=None, cancel=None, **kwargs):
    """Worker: ``install`` (an EXL2 branch or a GGUF file), then what the installed folder
    is for (read from its files here, not on the GUI thread)."""
    from specdeck.core.hub.library import installed_use

    result = install(*args, progress=progress, cancel=cancel, **kwargs)
    return result, installed_use(result.path)


def _default_dir(config_path: str | None) -> Path | None:
    """Worker: config.yml's draft_model_dir (read from the file), or None."""
    from specdeck.core.hub import default_install_dir

    return default_install_dir(config_path)


class Installer(QObject):
    """Install, its destination and what follows it (part of ModelsPage): owns the
    destination, the unfinished installs offered for Resume, and the last install's result.
    What to install is the browser's selection."""

    finished = Signal(object)
    """An InstallResult, after a successful install."""
    destination_changed = Signal()
    """Installs go into another folder (the library scans it)."""
    ended = Signal()
    """An install ended (done, failed or cancelled)."""
    discarded = Signal()
    """An unfinished install was deleted from the destination."""

    def __init__(self, page: ModelsPage, browser: HubBrowser):
        super().__init__(page)
        self._page = page
        self._browser = browser
        self._install_dir: Path | None = None
        self._partials: list = []
        self._last_result: Any = None
        """The last successful install (core.hub.install.InstallResult): "Use as draft" sets it."""
        self._rename_offer: Any = None
        """A Variant whose folder name clashed, offered another name once its install ended."""
        self.panel = self._build()

    def _build(self) -> QWidget:
        panel = QWidget()
        layout = QVBoxLayout(panel)
        layout.setContentsMargins(0, 0, 0, 0)

        dest = QHBoxLayout()
        dest.addWidget(QLabel("Install into:"))
        self.dest_label = new_label("")
        self.dest_label.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        dest.addWidget(self.dest_label, 1)
        change = QPushButton("Change…")
        change.clicked.connect(self._choose_destination)
        dest.addWidget(change)
        layout.addLayout(dest)

        self.partial_banner = Banner()
        layout.addWidget(self.partial_banner)

        actions = QHBoxLayout()
        self.install_button = QPushButton("Install")
        self.install_button.setSizePolicy(QSizePolicy.Policy.Minimum, QSizePolicy.Policy.Fixed)
        self.install_button.clicked.connect(self.start_install)
        self.progress_bar = QProgressBar()
        self.progress_bar.setRange(0, PROGRESS_STEPS)
        self.progress_bar.setTextVisible(True)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel_install)
        self.cancel_button.setEnabled(False)
        actions.addWidget(self.install_button)
        actions.addWidget(self.progress_bar, 1)
        actions.addWidget(self.cancel_button)
        layout.addLayout(actions)
        self.progress_label = new_label("")
        layout.addWidget(self.progress_label)

        result = QGridLayout()
        self.result_label = new_label("")
        self.result_label.setTextFormat(Qt.TextFormat.RichText)
        self.compat_badge = new_label("", wrap=False)
        self.compat_badge.hide()
        self.use_button = QPushButton("Use as draft")
        self.use_button.setToolTip("Set this model as draft_model in config.yml (you see the change first).")
        self.use_button.clicked.connect(self.use_as_draft)
        self.use_button.hide()
        result.addWidget(self.result_label, 0, 0, 1, 3)
        result.addWidget(self.compat_badge, 1, 0)
        result.addWidget(self.use_button, 1, 2)
        result.setColumnStretch(1, 1)
        layout.addLayout(result)
        self.update_buttons()
        return panel

    @property
    def partials(self) -> list:
        """Unfinished installs offered for Resume (core.hub.install.PartialInstall)."""
        return list(self._partials)

    def installing(self) -> bool:
        return self._page.tasks.running("install")

    @property
    def install_dir(self) -> Path | None:
        return self._install_dir

    def restore_destination(self) -> None:
        """The folder the user chose on this page last time; else config.yml's."""
        stored = form_settings.restore(SETTINGS_PREFIX, InstallChoice()).install_dir
        if stored:  # a folder the user chose on this page wins over config.yml's
            self._install_dir = Path(stored)
            self._show_destination()
            self.destination_changed.emit()
        else:
            self._use_config_destination()

    def follow_config(self) -> None:
        """Another config.yml was opened: install into its draft_model_dir from now on."""
        form_settings.save(SETTINGS_PREFIX, InstallChoice())
        self._use_config_destination()

    def _use_config_destination(self) -> None:
        self._install_dir = None
        self._show_destination()
        self.destination_changed.emit()
        self._page.run("default_dir", _default_dir, self._page.config_file(),
                       finished=self._got_default_dir, failed=lambda exc: self._got_default_dir(None))

    def _got_default_dir(self, path: Path | None) -> None:
        if path is not None and self._install_dir is None:
            self._install_dir = Path(path)
            self._show_destination()
            self.destination_changed.emit()

    def set_install_dir(self, path: str | Path) -> None:
        self._install_dir = Path(path)
        form_settings.save(SETTINGS_PREFIX, InstallChoice(str(self._install_dir)))
        self._show_destination()
        self.destination_changed.emit()

    def _show_destination(self) -> None:
        if self._install_dir is None:
            self.dest_label.setText("no folder yet: open your config.yml (draft_model_dir) or choose one")
            set_role(self.dest_label, "error")
        else:
            self.dest_label.setText(str(self._install_dir))
            set_role(self.dest_label, None)
        self.update_buttons()

    def _choose_destination(self) -> None:
        start = str(self._install_dir or Path.home())
        chosen = QFileDialog.getExistingDirectory(self._page, "Install draft models into", start)
        if chosen:
            self.set_install_dir(chosen)

    def update_buttons(self) -> None:
        """Install and Cancel for the browser's selection, the destination and whether an
        install runs."""
        installing = self.installing()
        offer = self._browser.offer
        gguf = self._browser.selected_gguf()
        if gguf is not None:
            installed = offer.gguf_state(gguf).installed
            self.install_button.setEnabled(self._install_dir is not None and not installing
                                           and not installed and not gguf.is_projector)
            self.install_button.setText("Installed" if installed else f"Install GGUF {gguf.quant or gguf.name}")
            self.install_button.setToolTip(
                "A multimodal projector, not a draft model." if gguf.is_projector else
                f"Installs {len(gguf.files)} file(s) into {self._install_dir or '?'}/"
                f"{offer.gguf_folder(gguf)}")
            self.cancel_button.setEnabled(installing)
            return
        variant = self._browser.selected_variant()
        installed = variant is not None and offer.state(variant).installed
        can = variant is not None and self._install_dir is not None and not installing and not installed
        self.install_button.setEnabled(can)
        if installed:
            self.install_button.setText("Installed")
            self.install_button.setToolTip("This exact version is already in the library.")
        elif variant is not None:
            self.install_button.setText(f"Install {variant.label}")
            self.install_button.setToolTip(f"Installs as {self._install_dir or '?'}/{variant.folder_name}")
        else:
            self.install_button.setText("Install")
        self.cancel_button.setEnabled(installing)

    def start_install(self, name: str | None = None) -> None:
        gguf = self._browser.selected_gguf()
        if gguf is not None and self._install_dir is not None and not self.installing():
            self._begin_install(self._browser.offer.repo_id, "main", name, gguf=gguf.name)
            return
        variant = self._browser.selected_variant()
        if variant is None or self._install_dir is None or self.installing():
            return
        self._begin_install(variant.repo_id, variant.revision, name)

    def resume_install(self) -> None:
        if self._partials and not self.installing():
            partial = self._partials[0]
            self._begin_install(partial.repo_id, partial.revision, partial.folder_name,
                                gguf=partial.gguf)

    def _begin_install(self, repo_id: str, revision: str, name: str | None,
                       gguf: str | None = None) -> None:
        from specdeck.core.hub import install

        self._page.clear_error()
        self.result_label.clear()
        self.use_button.hide()
        self.compat_badge.hide()
        self.progress_bar.setValue(0)
        self.progress_label.setText(f"Starting {repo_id}@{revision}" + (f" {gguf}" if gguf else "") + "…")
        if gguf is not None:
            from specdeck.core.hub.gguf import install_gguf

            call, args = install_gguf, (repo_id, gguf, str(self._install_dir))
        else:
            call, args = install, (repo_id, revision, self._install_dir)
        handle = self._page.tasks.run("install", _install_and_use, call, *args, name=name,
                                on_result=lambda done: self._install_done(*done),
                                on_error=self._install_failed, on_progress=self._install_progress,
                                on_done=self._install_ended)
        if handle is None:
            return
        self._show_partials()
        self.update_buttons()

    def cancel_install(self) -> None:
        if self.installing():
            self.progress_label.setText("Cancelling…")
            self._page.tasks.stop("install")

    def _install_progress(self, p) -> None:
        self.progress_bar.setValue(int(p.fraction * PROGRESS_STEPS))
        self.progress_bar.setFormat(f"{p.fraction:.0%}")
        self.progress_label.setText(p.describe())

    def _install_ended(self) -> None:
        self.update_buttons()
        self.ended.emit()
        offer, self._rename_offer = self._rename_offer, None
        if offer is not None:
            self._offer_other_name(offer)

    def _install_done(self, result, use) -> None:
        """``use``: what the installed folder is for (core.hub.library.InstalledUse)."""
        self._last_result = result
        self._page.context.announce(result.changed)
        self.progress_bar.setValue(PROGRESS_STEPS)
        self.progress_bar.setFormat("100%")
        self.progress_label.setText(
            "Already installed: nothing to download." if result.status == "already installed"
            else "Installed; every file's size and checksum verified."
        )
        m = result.model
        facts = ""
        if m is not None:
            facts = (f"<br>{m.arch.model_type} · {m.parameters_label} parameters · {m.quant.label} · "
                     f"context {m.context_length:,} · vocab {m.arch.vocab_size:,}")
        skipped = ""
        if result.skipped:
            skipped = "<br><span style='color:gray'>Left out: " + ", ".join(s.path for s in result.skipped) + "</span>"
        if not use.for_tabby:  # TabbyAPI's config.yml cannot take a GGUF draft
            flags = html.escape(shlex.join(use.llama_server_flags))
            facts = (f"<br>For llama-server: <code>{flags}</code> (the llama-swap page sets it "
                     "in a model's cmd).")
        self.result_label.setText(f"<b>{result.path.name}</b> in {result.path.parent}{facts}{skipped}")
        if use.for_tabby:
            self.use_button.show()
            self._update_use_button()
        self._check_new_model(result.path)
        self.finished.emit(result)

    def _install_failed(self, error: BaseException) -> None:
        from specdeck.core.hub import InstallConflictError

        if isinstance(error, CancelledError):
            self.progress_label.setText(str(error))
            return
        self.progress_label.setText("")
        self._page.show_error(error)
        variant = self._browser.selected_variant()
        if isinstance(error, InstallConflictError) and variant is not None and self._install_dir is not None:
            self._rename_offer = variant  # asked once the task has ended (see _install_ended)

    def _offer_other_name(self, variant) -> None:
        """Ask for another folder name, suggesting a free one (looked for in a worker)."""
        from specdeck.core.hub import free_folder_name

        self._page.run("free_name", free_folder_name, self._install_dir, variant.folder_name,
                       finished=lambda suggestion: self._ask_other_name(variant, suggestion))

    def _ask_other_name(self, variant, suggestion: str) -> None:
        name, ok = QInputDialog.getText(self._page, "Install under another name",
                                        "That folder exists. Install this variant as:", text=suggestion)
        if ok and name.strip():
            self._begin_install(variant.repo_id, variant.revision, name.strip())

    def show_partials(self, partials: list) -> None:
        """Offer ``partials`` (the unfinished installs a scan or a repository's offer found)
        for Resume."""
        self._partials = list(partials)
        self._show_partials()

    def _show_partials(self) -> None:
        from specdeck.core.hub import format_bytes

        if not self._partials or self.installing():
            self.partial_banner.clear()
            return
        p = self._partials[0]
        more = f" (and {len(self._partials) - 1} more)" if len(self._partials) > 1 else ""
        self.partial_banner.show_message(
            f"Unfinished install: <b>{html.escape(p.spec)}</b> · {p.fraction:.0%} "
            f"({format_bytes(p.bytes_done)} of {format_bytes(p.bytes_total)}){more}",
            "warning",
            [("Resume", self.resume_install), ("Discard", self._discard_partial)],
        )

    def _discard_partial(self) -> None:
        from specdeck.core.hub import discard_partial

        if not self._partials:
            return
        partial = self._partials[0]
        answer = QMessageBox.question(self._page, "Discard unfinished install",
                                      f"Delete what was downloaded for {partial.spec}?")
        if answer == QMessageBox.StandardButton.Yes:
            self._page.run(None, discard_partial, partial, finished=lambda _r: self.discarded.emit())

    def _check_new_model(self, path: Path) -> None:
        def show(badges: dict) -> None:
            badge = badges.get(path.as_posix())
            if badge is None:
                return
            self.compat_badge.setText(f"{badge.label} with the target model")
            self.compat_badge.setToolTip(badge.summary)
            set_role(self.compat_badge, BADGE_ROLES.get(badge.verdict, "badge-info"))
            self.compat_badge.show()

        from specdeck.core.hub.library import target_badges

        self._page.run("new_model_compatibility", target_badges, self._page.config_file(),
                       [path.as_posix()], finished=show, failed=lambda exc: None)

    def _update_use_button(self) -> None:
        has_config = self._page.context.config_path is not None
        self.use_button.setEnabled(has_config)
        self.use_button.setToolTip(
            "Set this model as draft_model in config.yml (you see the change first)." if has_config
            else "Open your TabbyAPI config.yml first (Draft settings page)."
        )

    def use_as_draft(self) -> None:
        from specdeck.core.hub.draft import plan_use_as_draft

        config_path = self._page.context.config_path
        if self._last_result is None or config_path is None:
            return
        self._page.run("use_as_draft", plan_use_as_draft, self._last_result.path, config_path,
                       finished=self._confirm_change)

    def _confirm_change(self, change) -> None:
        from specdeck.gui.widgets.config_dialog import confirm_and_save

        name = self._last_result.path.name if self._last_result else "the model"

        def saved(result) -> None:
            self.use_button.setEnabled(True)
            path = str(result.path)
            if result.written:  # announced by the save: the library re-reads it
                self._page.context.show_status(f"Draft model set to {name} in {path}.")
            else:
                self._page.context.show_status(f"{name} already is the draft model in {path}.")

        def failed(error: BaseException | None) -> None:
            self.use_button.setEnabled(True)
            self._page.context.show_status("config.yml was not changed.")
            if error is not None:
                self._page.show_error(error)

        if confirm_and_save(
            self._page, self._page.tasks, change, "Use as draft model",
            f"Make <b>{html.escape(name)}</b> TabbyAPI's draft model. SpecDeck will change config.yml "
            "like this (the previous version is kept as config.yml.bak):",
            on_saved=saved, on_failed=failed, context=self._page.context,
        ):
            self.use_button.setEnabled(False)
            self._page.context.show_status("Saving config.yml…", 0)
