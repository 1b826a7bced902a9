"""The Draft settings page: TabbyAPI's config.yml, its draft settings, a live diff, Save.

Reading, planning and writing run in workers (parsing a config.yml costs tens of
milliseconds; a write must never stall the window): the page keeps the latest plan, shows
exactly what Save will write, says while it saves, and shows a failed save in place.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPushButton,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)
from specdeck.core import config
from specdeck.core.changed import MODEL as MODEL_FOLDER
from specdeck.core.changed import TABBY_CONFIG, FileChanged
from specdeck.core.config import DRAFT, MODEL, ConfigDocument, Layout
from specdeck.core.errors import NotFoundError, SpecDeckError
from specdeck.gui import workers
from specdeck.gui.context import AppContext, same_path
from specdeck.gui.widgets.banner import Banner
from specdeck.gui.widgets.config_dialog import confirm_and_save, save_change
from specdeck.gui.widgets.config_fields import FieldEditor
from specdeck.gui.widgets.diff_view import DiffView

log = logging.getLogger(__name__)

PLAN_DELAY_MS = 120
SEVERITY_MARK = {"error": "✖", "warning": "⚠", "info": "ℹ"}


def load_with_choices(path: Path) -> tuple[ConfigDocument, list[str]]:
    """Worker: read config.yml and list the model folders in its draft model dir."""
    doc = config.load(path)
    return doc, draft_choices(doc)


def draft_choices(doc: ConfigDocument) -> list[str]:
    """Worker: the model folders in ``doc``'s draft model dir (none if it cannot be listed)."""
    folder = doc.resolve_dir(DRAFT, "draft_model_dir")
    try:
        return sorted(p.name for p in folder.iterdir() if (p / "config.json").is_file())
    except OSError:
        return []


def plan_with_problems(doc: ConfigDocument, changes: dict) -> tuple[config.ConfigChange, list]:
    """Worker: the planned text and what TabbyAPI would say about it."""
    change = config.plan_change(doc, changes)
    after = ConfigDocument(change.new_text, path=doc.path)
    return change, after.problems()


class DraftSettingsPage(QWidget):
    def __init__(self, context: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.context = context
        self.document: ConfigDocument | None = None
        self.change: config.ConfigChange | None = None
        self.tasks = workers.Tasks(self)
        """Reading the file ("load"), planning the edits ("plan"): the newest of each wins."""

        self._plan_timer = QTimer(self)
        self._plan_timer.setSingleShot(True)
        self._plan_timer.setInterval(PLAN_DELAY_MS)
        self._plan_timer.timeout.connect(self._replan)

        outer = QVBoxLayout(self)
        outer.addLayout(self._build_file_bar())
        self.banner = Banner()
        self.override_banner = Banner()
        outer.addWidget(self.banner)
        outer.addWidget(self.override_banner)

        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self._build_form())
        splitter.addWidget(self._build_review())
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 4)
        splitter.setSizes([520, 640])
        outer.addWidget(splitter, 1)

        QShortcut(QKeySequence.StandardKey.Save, self, activated=lambda: self.save())
        self._set_enabled(False)
        self.context.file_changed.connect(self._on_saved_elsewhere)
        self.context.config_path_changed.connect(self._on_path_changed_elsewhere)
        self.context.settings_read.connect(self._open_remembered)
        remembered = self.context.config_path
        if remembered is not None:
            self.open_path(remembered)
        else:
            self._show_welcome()

    # -- construction ------------------------------------------------------------------
    def _build_file_bar(self) -> QHBoxLayout:
        bar = QHBoxLayout()
        bar.addWidget(QLabel("<b>config.yml</b>"))
        self.path_edit = QLineEdit()
        self.path_edit.setReadOnly(True)
        self.path_edit.setPlaceholderText("No TabbyAPI config.yml opened")
        bar.addWidget(self.path_edit, 1)
        self.open_button = QPushButton("Open…")
        self.open_button.clicked.connect(self.choose_file)
        self.find_button = QPushButton("Find TabbyAPI…")
        self.find_button.setToolTip("Pick your TabbyAPI folder; SpecDeck opens its config.yml")
        self.find_button.clicked.connect(self.choose_tabby_folder)
        self.reload_button = QPushButton("Reload")
        self.reload_button.clicked.connect(self.reload)
        for button in (self.open_button, self.find_button, self.reload_button):
            bar.addWidget(button)
        self.layout_badge = QLabel()
        self.backend_badge = QLabel()
        for badge in (self.layout_badge, self.backend_badge):
            badge.setProperty("role", "badge-info")
            badge.hide()
            bar.addWidget(badge)
        return bar

    def _build_form(self) -> QWidget:
        self.fields: dict[tuple[str, str], FieldEditor] = {}
        body = QWidget()
        column = QVBoxLayout(body)
        groups = (
            ("Draft model", None,
             [s for s in config.SETTINGS if s.section == DRAFT and not s.exl3_only]),
            ("ExLlamaV3 backend only",
             "TabbyAPI's ExLlamaV2 backend ignores these and always drafts 4 tokens.",
             [s for s in config.SETTINGS if s.section == DRAFT and s.exl3_only]),
            ("Target model", "The main-model settings that matter for speculation and VRAM.",
             [s for s in config.SETTINGS if s.section == MODEL]),
        )
        for title, hint, settings in groups:
            box = QGroupBox(title)
            form = QFormLayout(box)
            form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
            if hint:
                note = QLabel(hint)
                note.setWordWrap(True)
                note.setProperty("role", "hint")
                form.addRow(note)
            for s in settings:
                editor = FieldEditor(s, box)
                editor.edited.connect(self._on_edited)
                form.addRow(editor.label, editor.container)
                form.addRow("", editor.error)
                self.fields[s.path] = editor
            column.addWidget(box)
        column.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(body)
        scroll.setMinimumWidth(460)
        return scroll

    def _build_review(self) -> QWidget:
        panel = QWidget()
        layout = QVBoxLayout(panel)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(QLabel("<b>Changes</b> — exactly what Save writes (everything else in the "
                                "file stays byte for byte):"))
        self.diff_view = DiffView(placeholder="No changes. Edit a setting to see the diff here.")
        layout.addWidget(self.diff_view, 3)
        layout.addWidget(QLabel("<b>Checks</b> (TabbyAPI's rules, on the file as it will be saved):"))
        self.problem_list = QListWidget()
        self.problem_list.setWordWrap(True)
        layout.addWidget(self.problem_list, 1)
        buttons = QHBoxLayout()
        self.status_label = QLabel()
        self.status_label.setProperty("role", "hint")
        buttons.addWidget(self.status_label, 1)
        self.revert_button = QPushButton("Revert")
        self.revert_button.clicked.connect(self.revert)
        self.save_button = QPushButton("Save")
        self.save_button.setDefault(True)
        self.save_button.clicked.connect(lambda: self.save())
        buttons.addWidget(self.revert_button)
        buttons.addWidget(self.save_button)
        layout.addLayout(buttons)
        return panel

    # -- opening -----------------------------------------------------------------------
    def _show_welcome(self) -> None:
        self.banner.show_message(
            "Open your TabbyAPI <b>config.yml</b> to edit its draft-model settings, or point "
            "SpecDeck at your TabbyAPI folder.",
            "info",
            [("Open…", self.choose_file), ("Find TabbyAPI…", self.choose_tabby_folder)],
        )

    def choose_file(self) -> None:
        start = str(self.document.path.parent) if self.document and self.document.path else ""
        path, _ = QFileDialog.getOpenFileName(
            self, "Open TabbyAPI config.yml", start, "YAML (*.yml *.yaml);;All files (*)"
        )
        if path:
            self.open_path(Path(path))

    def choose_tabby_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Your TabbyAPI folder")
        if folder:
            self.open_tabby_folder(Path(folder))

    def open_tabby_folder(self, folder: Path) -> None:
        """Open the config.yml of the TabbyAPI folder ``folder`` (looked for in a worker), or
        offer to create it."""
        def found(install) -> None:
            self.context.update_settings(self._settings_with_tabby(install.root))
            if install.config_exists:
                self.open_path(install.config)
            else:
                self._offer_create(install.config, install.sample)

        self.tasks.run("load", config.find_install, folder, on_result=found,
                       on_error=lambda exc: self.banner.show_message(str(exc), "error"))

    def _settings_with_tabby(self, root: Path):
        from dataclasses import replace

        return replace(self.context.settings, tabby_dir=str(root))

    def open_path(self, path: Path, remember: bool = True) -> None:
        """Open ``path``; ``remember`` makes it the app's current config (other pages follow)."""
        if not self.confirm_discard(then=lambda: self.open_path(path, remember)):
            return
        path = Path(path)
        self.status_label.setText(f"Reading {path.name}…")
        self.tasks.run("load", load_with_choices, path,
                       on_result=lambda result: self._on_loaded(path, *result, remember=remember),
                       on_error=lambda exc: self._on_load_failed(path, exc))

    def reload(self) -> None:
        if self.document is not None and self.document.path is not None:
            self.open_path(self.document.path)

    def _on_loaded(self, path: Path, doc: ConfigDocument, draft_names: list[str],
                   remember: bool = True) -> None:
        self.document = doc
        self.change = None
        self.path_edit.setText(str(doc.path))
        if remember and self.context.config_path != doc.path.absolute():
            self.context.set_config_path(doc.path)
        for key, editor in self.fields.items():
            editor.base_dir = doc.path.parent
            editor.load(doc.raw(*key) if doc.has(*key) else None)
        self.fields[(DRAFT, "draft_model_name")].set_choices(draft_names)
        self._show_badges(doc)
        self._show_banners(doc)
        self._show_problems(doc.problems())
        self.diff_view.set_diff("")
        self._set_enabled(True)
        self._update_buttons()
        self.status_label.setText(f"Opened {doc.path.name}.")

    def _on_load_failed(self, path: Path, exc: BaseException) -> None:
        self.status_label.setText("")
        if isinstance(exc, NotFoundError):
            self._offer_create(path, None)
            return
        self.document = None
        self._set_enabled(False)
        self.path_edit.setText(str(path))
        self.banner.show_message(
            f"<b>Cannot open {path.name}</b>: {_escape(str(exc))}", "error",
            [("Reload", lambda: self.open_path(path)), ("Open another…", self.choose_file)],
        )

    def _offer_create(self, path: Path, sample: Path | None) -> None:
        self.document = None
        self._set_enabled(False)
        self.path_edit.setText(str(path))
        actions = [("Create from SpecDeck's defaults", lambda: self.create_config(path))]
        if sample is not None:
            actions.insert(0, ("Copy TabbyAPI's config_sample.yml",
                               lambda: self.create_config(path, sample)))
        actions.append(("Open another…", self.choose_file))
        self.banner.show_message(f"<b>{_escape(str(path))}</b> does not exist yet.", "warning", actions)

    def create_config(self, path: Path, sample: Path | None = None) -> None:
        """Write a new config.yml (a copy of ``sample``, or SpecDeck's defaults) in a worker,
        then open it."""
        self.status_label.setText(f"Creating {path.name}…")

        def failed(exc: BaseException) -> None:
            self.status_label.setText("")
            self.banner.show_message(f"Could not create {path}: {_escape(str(exc))}", "error")

        def created(written: FileChanged) -> None:
            self.context.announce(written)  # a page showing that path reads the new file
            self.context.show_status(f"Created {path}.")
            self.open_path(path)

        self.tasks.run("create", config.create_config, path, sample, on_result=created,
                       on_error=failed)

    # -- display -----------------------------------------------------------------------
    def _show_badges(self, doc: ConfigDocument) -> None:
        layout_text = {
            Layout.DRAFT_MODEL: "draft_model section",
            Layout.LEGACY_NESTED: "legacy model.draft",
            Layout.NO_DRAFT_SECTION: "no draft section yet",
        }[doc.layout]
        self.layout_badge.setText(layout_text)
        self.layout_badge.setProperty(
            "role", "badge-warn" if doc.layout is Layout.LEGACY_NESTED else "badge-info")
        backend = doc.backend_hint()
        self.backend_badge.setText(f"backend: {backend or 'unknown'}")
        for badge in (self.layout_badge, self.backend_badge):
            badge.style().unpolish(badge)
            badge.style().polish(badge)
            badge.show()

    def _show_banners(self, doc: ConfigDocument) -> None:
        if doc.layout is Layout.LEGACY_NESTED:
            self.banner.show_message(
                "This file uses the <b>legacy layout</b> (draft settings nested as "
                "<code>model.draft</code>). TabbyAPI migrates it on start and drops your comments; "
                "SpecDeck can migrate it now and keep them.",
                "warning",
                [("Migrate…", self.migrate)],
            )
        else:
            self.banner.clear()
        try:
            overrides = config.model_overrides(doc)
        except SpecDeckError as exc:
            self.override_banner.show_message(_escape(str(exc)), "warning")
            return
        if overrides is not None and (overrides.draft_model or overrides.model):
            forced = {**{f"model.{k}": v for k, v in overrides.model.items()},
                      **{f"draft_model.{k}": v for k, v in overrides.draft_model.items()}}
            listing = ", ".join(f"<code>{_escape(k)}: {_escape(str(v))}</code>" for k, v in forced.items())
            self.override_banner.show_message(
                f"The target model's <b>tabby_config.yml</b> overrides these settings when it "
                f"loads: {listing}.", "warning",
                [("Edit it", lambda: self.open_path(overrides.path, remember=False))],
            )
        else:
            self.override_banner.clear()

    def _show_problems(self, problems: list, invalid_fields: list[str] = ()) -> None:
        self.problem_list.clear()
        if invalid_fields:
            item = QListWidgetItem(
                f"{SEVERITY_MARK['error']} Not valid, so not in the diff: {', '.join(invalid_fields)}.")
            item.setData(Qt.ItemDataRole.UserRole, "error")
            self.problem_list.addItem(item)
        if not problems and not invalid_fields:
            item = QListWidgetItem("✔ No problems: TabbyAPI will accept these settings.")
            self.problem_list.addItem(item)
            return
        for problem in problems:
            item = QListWidgetItem(f"{SEVERITY_MARK.get(problem.severity, '')} {problem.message}")
            item.setData(Qt.ItemDataRole.UserRole, problem.severity)
            self.problem_list.addItem(item)

    def _set_enabled(self, enabled: bool) -> None:
        for editor in self.fields.values():
            editor.container.setEnabled(enabled)
        self.reload_button.setEnabled(enabled)
        self.revert_button.setEnabled(False)
        self.save_button.setEnabled(False)

    def _update_buttons(self) -> None:
        dirty = self.is_dirty()
        errors = any(not e.error.isHidden() for e in self.fields.values())
        self.revert_button.setEnabled(dirty)
        self.save_button.setEnabled(
            dirty and not errors and self.change is not None and not self.change.is_noop
        )

    # -- editing -----------------------------------------------------------------------
    def is_dirty(self) -> bool:
        return self.document is not None and any(e.changed for e in self.fields.values())

    def pending_changes(self) -> dict[tuple[str, str], Any]:
        return {key: e.text() for key, e in self.fields.items() if e.changed}

    def _on_edited(self) -> None:
        self.save_button.setEnabled(False)
        self._plan_timer.start()

    def _replan(self) -> None:
        if self.document is None:
            return
        backend = self.document.declared_backend()
        valid = {}
        for key, editor in self.fields.items():
            if not editor.changed:
                editor.show_error(None)
                continue
            problem = editor.check(backend)
            editor.show_error(problem)
            if problem is None:
                valid[key] = editor.text()
        self.tasks.run("plan", plan_with_problems, self.document, valid,
                       on_result=lambda result: self._on_planned(*result),
                       on_error=self._on_plan_failed)

    def _on_planned(self, change: config.ConfigChange, problems: list) -> None:
        self.change = change
        self.diff_view.set_diff(change.diff())
        invalid = [e.setting.label for e in self.fields.values() if not e.error.isHidden()]
        self._show_problems(problems, invalid)
        count = len(change.changed_keys)
        text = f"{count} setting(s) changed, not saved." if count else ""
        if change.warnings:
            text = " ".join([text, *(f"Warning: {w}" for w in change.warnings)]).strip()
        self.status_label.setText(text)
        self._update_buttons()

    def _on_plan_failed(self, exc: BaseException) -> None:
        self.change = None
        self.diff_view.set_diff("")
        self.status_label.setText(f"Cannot apply: {exc}")
        self._update_buttons()

    def revert(self) -> None:
        if self.document is None:
            return
        self.tasks.cancel("plan")  # a plan of the edits being dropped must not come back
        for key, editor in self.fields.items():
            editor.load(self.document.raw(*key) if self.document.has(*key) else None)
        self.change = None
        self.diff_view.set_diff("")
        self._show_problems(self.document.problems())
        self.status_label.setText("Reverted to the file on disk.")
        self._update_buttons()

    def flush_plan(self) -> None:
        """Plan now instead of after the typing pause (used before saving)."""
        if self._plan_timer.isActive():
            self._plan_timer.stop()
            self._replan()

    # -- saving ------------------------------------------------------------------------
    def save(self, then: Callable[[], None] | None = None) -> bool:
        """Save the planned change in a worker; True when a save started. Once saved, the
        file is read again, or ``then`` runs instead (what was waiting for the save: opening
        another file, closing the window)."""
        self.flush_plan()
        change = self.change
        if change is None or change.is_noop or not self.save_button.isEnabled():
            return False
        self._show_saving(change.document.path)
        save_change(self, self.tasks, change,
                    on_saved=lambda result: self._saved(result, then), on_failed=self._save_failed,
                    context=self.context)
        return True

    def saving(self) -> bool:
        return self.tasks.running("save")

    def _show_saving(self, path: Path) -> None:
        self.status_label.setText(f"Saving {path.name}…")
        self.save_button.setEnabled(False)
        self.revert_button.setEnabled(False)

    def _saved(self, result, then: Callable[[], None] | None = None) -> None:
        backup = f" Previous version: {result.backup.name}." if result.backup else ""
        self.context.show_status(f"Saved {result.path}.{backup}")
        self.status_label.setText(f"Saved {result.path.name}.")
        # Mark the edits as saved at once (the reload below refreshes from disk).
        for editor in self.fields.values():
            editor.initial_text = editor.text()
        self.change = None
        self._update_buttons()
        if then is not None:
            then()
        else:
            self.open_path(result.path)

    def _save_failed(self, error: BaseException | None) -> None:
        """Shown in place; the edits stay, to save again (None: the user chose not to
        overwrite a file changed on disk)."""
        self.status_label.setText("Not saved." if error is None else "")
        if error is not None:
            self.banner.show_message(f"<b>Could not save</b>: {_escape(str(error))}", "error")
        self._update_buttons()

    def migrate(self) -> None:
        if self.document is None or not self.confirm_discard(then=self.migrate):
            return
        try:
            migration = config.plan_migration(self.document)
        except SpecDeckError as exc:
            self.banner.show_message(f"<b>Cannot migrate</b>: {_escape(str(exc))}", "error")
            return

        def saved(result) -> None:  # the file_changed it announced re-reads it
            self.status_label.setText("")

        if confirm_and_save(
            self, self.tasks, migration, "Migrate config.yml",
            "Move the draft settings to a top-level draft_model section, as TabbyAPI does on "
            "start, keeping your comments. The current file is kept as config.yml.bak.",
            on_saved=saved, on_failed=self._save_failed, context=self.context,
        ):
            self._show_saving(migration.document.path)

    # -- other pages and closing -------------------------------------------------------
    def _on_saved_elsewhere(self, path: str, kind: str) -> None:
        if kind == TABBY_CONFIG and self.document is not None \
                and same_path(self.document.path, path) and not self.is_dirty():
            self.open_path(Path(path))
        elif kind == MODEL_FOLDER and self.document is not None:  # an install: new choices
            field = self.fields[(DRAFT, "draft_model_name")]
            self.tasks.run("choices", draft_choices, self.document, on_result=field.set_choices)

    def _open_remembered(self) -> None:
        """settings.json was read: open the config.yml it remembers, unless one is open or
        being opened."""
        remembered = self.context.config_path
        if remembered is not None and self.document is None and not self.tasks.running("load"):
            self.open_path(remembered)

    def _on_path_changed_elsewhere(self, path: str) -> None:
        if self.document is None or str(self.document.path.absolute()) != path:
            self.open_path(Path(path))

    def confirm_discard(self, then: Callable[[], None] | None = None) -> bool:
        """Whether what was asked (opening another file, closing) may go on now. Unsaved
        edits are asked about: Save starts saving and says no for now (``then`` runs once
        the file is saved), Discard reverts them, Cancel says no."""
        if self.saving():
            self.context.show_status("Saving config.yml: wait for it to finish.")
            return False
        if not self.is_dirty():
            return True
        answer = QMessageBox.question(
            self, "Unsaved changes",
            "The draft settings have unsaved changes. Save them first?",
            QMessageBox.StandardButton.Save | QMessageBox.StandardButton.Discard
            | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Save,
        )
        if answer == QMessageBox.StandardButton.Save:
            self.save(then=then)
            return False
        if answer == QMessageBox.StandardButton.Discard:
            self.revert()
            return True
        return False

    def can_close(self) -> bool:
        return self.confirm_discard(then=lambda: self.window().close())

    def shutdown(self) -> None:
        self._plan_timer.stop()
        self.tasks.close()


def _escape(text: str) -> str:
    import html

    return html.escape(text)


def create_page(context: AppContext) -> QWidget:
    return DraftSettingsPage(context)
