"""The llama-swap page: the drafting flags in each model's cmd of a llama-swap config.yaml.

Open the config.yaml llama-swap runs with: every model is listed with what it drafts and
what is out of date for current llama-server (removed ``--draft-max``, ``-md`` without
``--spec-type``, a bare ``--flash-attn``). Pick a model to set its draft model and drafting
flags, or migrate every model at once; the diff shows exactly what Save writes (only the
flags asked for change; comments, macros, quoting and every other model stay byte for byte),
and Save keeps a backup and replaces the file atomically.

Everything here is ``core.swap`` (the same edits as ``specdeck swap``); reading the file,
planning an edit and asking a llama-server binary for its --help run in workers. Names,
flags and messages come from the user's file: they are shown with control characters
escaped (core.printable) and, in rich-text labels and tooltips, HTML-escaped (:func:`_html`),
so a name like ``<img src=...>`` or one with terminal escapes reads as what it is.
"""

from __future__ import annotations

import html
import logging
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSpinBox,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)
from specdeck.core.changed import SWAP_CONFIG
from specdeck.core.errors import SpecDeckError
from specdeck.core.printable import printable
from specdeck.gui import form_settings, workers
from specdeck.gui.context import same_path
from specdeck.gui.widgets.banner import Banner
from specdeck.gui.widgets.config_dialog import confirm_and_save
from specdeck.gui.widgets.diff_view import DiffView

log = logging.getLogger(__name__)

PLAN_DELAY_MS = 150
SETTINGS_PREFIX = "swap/"
UNCHANGED = "unchanged"


def create_page(context):
    return SwapPage(context)


@dataclass(frozen=True)
class SwapChoices:
    """What the page keeps between sessions: the config.yaml open and the llama-server
    binary asked for its --help (core.forms' table: every field kept, as text)."""

    config: str = ""
    llama_server: str = ""


def read_remembered(path: Path, binary: str):
    """Worker: :func:`read_config` of the config.yaml opened last time; None once it is gone."""
    return read_config(path, binary) if path.is_file() else None


def read_config(path: Path, binary: str):
    """Worker: the config, its model rows, and the binary's --help (None without one)."""
    from specdeck.core import swap
    from specdeck.core.swap.actions import model_rows

    info = _binary_help(binary)
    config = swap.load(path)
    return config, model_rows(config, info), info


def _binary_help(binary: str):
    if not binary:
        return None
    from specdeck.core.servers.llama_server import binary_help

    info = binary_help(binary)
    if info is None:
        raise SpecDeckError(f"{binary} does not run as a llama-server (its --help said nothing "
                            "SpecDeck recognises).",
                            "Give the llama-server binary llama-swap starts, or clear the field.")
    return info


def plan_setting(config, model: str, setting, info):
    """Worker: the change writing ``setting`` into ``model``'s cmd."""
    from specdeck.core.swap.actions import plan_draft

    return plan_draft(config, model, setting, info), []


def plan_migration(config, info):
    """Worker: every model's out-of-date flags rewritten, and what cannot be."""
    from specdeck.core.swap.actions import plan_migration as plan

    return plan(config, None, info)


class SwapPage(QWidget):
    def __init__(self, context, parent: QWidget | None = None):
        super().__init__(parent)
        self.context = context
        self.config = None
        self.info = None
        self.rows: list[dict] = []
        self.change = None
        self.tasks = workers.Tasks(self)
        """Reading the file ("load") and planning an edit ("plan"): newer requests supersede
        older ones still in a worker."""

        self._plan_timer = QTimer(self)
        self._plan_timer.setSingleShot(True)
        self._plan_timer.setInterval(PLAN_DELAY_MS)
        self._plan_timer.timeout.connect(self.plan_edit)

        outer = QVBoxLayout(self)
        outer.addLayout(self._build_file_bar())
        self.banner = Banner()
        outer.addWidget(self.banner)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self._build_models())
        splitter.addWidget(self._build_editor())
        splitter.addWidget(self._build_review())
        for index, stretch in enumerate((3, 4, 6)):
            splitter.setStretchFactor(index, stretch)
        splitter.setChildrenCollapsible(False)
        outer.addWidget(splitter, 1)
        self._set_enabled(False)
        context.file_changed.connect(self._file_changed)

        self.show_choices(form_settings.restore(SETTINGS_PREFIX, SwapChoices()))

    def choices(self) -> SwapChoices:
        return SwapChoices(config="" if self.config is None else str(self.config.path),
                           llama_server=self.binary.text().strip())

    def show_choices(self, choices: SwapChoices) -> None:
        """Use ``choices``' binary and open its config.yaml (the welcome when it is gone)."""
        self.binary.setText(choices.llama_server)
        if not choices.config:
            self._show_welcome()
            return
        path = Path(choices.config)
        self.status.setText(f"Reading {path.name}…")
        self.tasks.run("load", read_remembered, path, choices.llama_server,
                       on_result=lambda result: self._loaded(path, *result) if result
                       else self._remembered_gone(),
                       on_error=lambda exc: self._load_failed(path, exc))

    def _remembered_gone(self) -> None:
        self.status.setText("")
        self._show_welcome()

    def _show_welcome(self) -> None:
        self.banner.show_message(
            "Open the <b>config.yaml</b> llama-swap runs with to see and edit each model's "
            "drafting flags.", "info", [("Open…", self.choose_file)])

    # construction ------------------------------------------------------------------------
    def _build_file_bar(self) -> QHBoxLayout:
        bar = QHBoxLayout()
        bar.addWidget(QLabel("<b>config.yaml</b>"))
        self.path_edit = QLineEdit()
        self.path_edit.setReadOnly(True)
        self.path_edit.setPlaceholderText("No llama-swap config.yaml opened")
        bar.addWidget(self.path_edit, 2)
        open_button = QPushButton("Open…")
        open_button.clicked.connect(self.choose_file)
        self.reload_button = QPushButton("Reload")
        self.reload_button.clicked.connect(self.reload)
        bar.addWidget(open_button)
        bar.addWidget(self.reload_button)
        bar.addWidget(QLabel("llama-server"))
        self.binary = QLineEdit()
        self.binary.setPlaceholderText("optional: the binary llama-swap starts")
        self.binary.setToolTip("With the binary, out-of-date flags are judged by its own --help "
                               "and every edit must parse with it; without, by SpecDeck's table.")
        self.binary.editingFinished.connect(self.reload)
        browse = QToolButton()
        browse.setText("…")
        browse.clicked.connect(self.choose_binary)
        bar.addWidget(self.binary, 1)
        bar.addWidget(browse)
        return bar

    def _build_models(self) -> QWidget:
        box = QGroupBox("Models")
        layout = QVBoxLayout(box)
        self.models = QListWidget()
        self.models.setWordWrap(True)
        box.setMinimumWidth(240)
        self.models.currentRowChanged.connect(self._show_model)
        layout.addWidget(self.models, 1)
        self.migrate_button = QPushButton("Migrate all out-of-date flags")
        self.migrate_button.setToolTip("Rewrite every removed or renamed llama-server flag in "
                                       "every model's cmd; the diff shows what changes")
        self.migrate_button.clicked.connect(self.plan_migrate_all)
        layout.addWidget(self.migrate_button)
        return box

    def _build_editor(self) -> QWidget:
        from specdeck.core import llama_flags as lf

        box = QGroupBox("Drafting")
        layout = QVBoxLayout(box)
        self.model_info = QLabel()
        self.model_info.setWordWrap(True)
        self.model_info.setTextFormat(Qt.TextFormat.RichText)
        self.model_info.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.model_info)
        form = QFormLayout()
        self.draft = QLineEdit()
        self.draft.setPlaceholderText(UNCHANGED)
        self.draft.setToolTip(f"The draft model's GGUF ({lf.DRAFT_MODEL[0]}); {lf.SPEC_TYPE} "
                              f"{lf.DRAFT_SIMPLE} is added when the cmd names no spec type")
        browse = QToolButton()
        browse.setText("…")
        browse.clicked.connect(self.choose_draft)
        row = QHBoxLayout()
        row.addWidget(self.draft, 1)
        row.addWidget(browse)
        form.addRow(f"Draft model ({lf.DRAFT_MODEL[0]})", row)
        self.spec_type = QComboBox()
        self.spec_type.addItem(UNCHANGED, None)
        self.spec_type_source = QLabel()
        self.spec_type_source.setVisible(False)
        types = QHBoxLayout()
        types.addWidget(self.spec_type, 1)
        types.addWidget(self.spec_type_source)
        form.addRow(lf.SPEC_TYPE, types)
        from specdeck.core.swap.actions import DRAFT_MAX_RANGE, DRAFT_MIN_RANGE, P_MIN_RANGE

        self.draft_max = self._count(f"{lf.DRAFT_N_MAX}: most tokens drafted per step",
                                     DRAFT_MAX_RANGE)
        self.draft_min = self._count(f"{lf.DRAFT_N_MIN}: fewest tokens drafted per step",
                                     DRAFT_MIN_RANGE)
        form.addRow("Draft max", self.draft_max)
        form.addRow("Draft min", self.draft_min)
        self.p_min = QDoubleSpinBox()
        self.p_min.setRange(P_MIN_RANGE[0] - 0.01, P_MIN_RANGE[1])  # the lowest: unchanged
        self.p_min.setSingleStep(0.05)
        self.p_min.setDecimals(2)
        self.p_min.setSpecialValueText(UNCHANGED)
        self.p_min.setValue(-0.01)
        self.p_min.setToolTip(f"{lf.DRAFT_P_MIN}: the draft's minimum probability to go on")
        form.addRow("P-min", self.p_min)
        self.no_draft = QCheckBox("Remove drafting")
        self.no_draft.setToolTip("Take the draft model and every drafting flag out of the cmd")
        form.addRow(self.no_draft)
        layout.addLayout(form)
        layout.addWidget(QLabel("<b>Out of date</b> for the llama-server that runs it:"))
        self.findings = QListWidget()
        self.findings.setWordWrap(True)
        self.findings.setMaximumHeight(140)
        layout.addWidget(self.findings)
        layout.addStretch(1)
        for widget in (self.draft, self.spec_type, self.draft_max, self.draft_min, self.p_min,
                       self.no_draft):
            signal = {QLineEdit: "textChanged", QComboBox: "currentIndexChanged",
                      QCheckBox: "toggled"}.get(type(widget), "valueChanged")
            getattr(widget, signal).connect(self._edited)
        return box

    @staticmethod
    def _count(tip: str, accepted: tuple[int, int]) -> QSpinBox:
        """A count field taking core.swap.actions' range, and one below it: "unchanged"."""
        spin = QSpinBox()
        spin.setRange(accepted[0] - 1, accepted[1])
        spin.setSpecialValueText(UNCHANGED)
        spin.setValue(spin.minimum())
        spin.setToolTip(tip)
        return spin

    def _build_review(self) -> QWidget:
        panel = QWidget()
        layout = QVBoxLayout(panel)
        layout.setContentsMargins(0, 0, 0, 0)
        heading = QLabel("<b>Changes</b> — exactly what Save writes (everything else stays "
                         "byte for byte):")
        heading.setWordWrap(True)
        layout.addWidget(heading)
        self.diff_view = DiffView(placeholder="No changes. Set a drafting flag, or migrate, to "
                                              "see the diff here.")
        layout.addWidget(self.diff_view, 1)
        self.unfixed = QLabel()
        self.unfixed.setWordWrap(True)
        self.unfixed.setProperty("role", "hint")
        layout.addWidget(self.unfixed)
        buttons = QHBoxLayout()
        self.status = QLabel()
        self.status.setTextFormat(Qt.TextFormat.PlainText)  # it quotes names from the file
        self.status.setProperty("role", "hint")
        self.status.setWordWrap(True)
        buttons.addWidget(self.status, 1)
        self.revert_button = QPushButton("Revert")
        self.revert_button.clicked.connect(self.revert)
        self.save_button = QPushButton("Save…")
        self.save_button.setProperty("role", "primary")
        self.save_button.clicked.connect(self.save)
        buttons.addWidget(self.revert_button)
        buttons.addWidget(self.save_button)
        layout.addLayout(buttons)
        return panel

    # opening -----------------------------------------------------------------------------
    def choose_file(self) -> None:
        start = str(self.config.path.parent) if self.config and self.config.path else ""
        path, _ = QFileDialog.getOpenFileName(self, "Open llama-swap's config.yaml", start,
                                              "YAML (*.yaml *.yml);;All files (*)")
        if path:
            self.open_path(Path(path))

    def choose_binary(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "The llama-server binary llama-swap starts")
        if path:
            self.binary.setText(path)
            self.reload()

    def choose_draft(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "The draft model", "", "GGUF (*.gguf);;All files (*)")
        if path:
            self.draft.setText(path)

    def handle_request(self, argument: str) -> None:
        """From the Start page: a llama-swap config.yaml it found, opened here."""
        self.open_path(Path(argument))

    def open_path(self, path: Path) -> None:
        self.status.setText(f"Reading {path.name}…")
        self.tasks.run("load", read_config, Path(path), self.binary.text().strip(),
                       on_result=lambda result: self._loaded(path, *result),
                       on_error=lambda exc: self._load_failed(path, exc))

    def reload(self) -> None:
        path = self.config.path if self.config is not None else None
        if path is None and self.path_edit.text():
            path = Path(self.path_edit.text())
        if path is not None:
            self.open_path(path)

    def _file_changed(self, path: str, kind: str) -> None:
        """SpecDeck wrote a file (this page's Save, the Tune page's Apply or Roll back): the
        open config.yaml is read again if it was that one."""
        if kind == SWAP_CONFIG and self.config is not None and same_path(self.config.path, path):
            self.open_path(Path(self.config.path))

    def _loaded(self, path: Path, config, rows, info) -> None:
        previous = self._current_name()
        self.config, self.rows, self.info = config, rows, info
        self.path_edit.setText(str(config.path))
        form_settings.save(SETTINGS_PREFIX, self.choices())
        self._fill_spec_types(info)
        self.models.blockSignals(True)
        self.models.clear()
        for row in rows:
            item = QListWidgetItem(_model_line(row))
            item.setData(Qt.ItemDataRole.UserRole, row["model"])
            item.setToolTip(_tooltip([*row["errors"], *row["problems"]] or [row["drafter"]]))
            self.models.addItem(item)
        self.models.blockSignals(False)
        names = [r["model"] for r in rows]
        self._set_enabled(bool(rows))
        self.models.setCurrentRow(names.index(previous) if previous in names else 0 if rows else -1)
        stale = sum(1 for r in rows if r["problems"])
        hedged = sum(1 for r in rows if r.get("hedged"))
        judge = ("the chosen llama-server's --help" if info is not None else
                 "each cmd's own llama-server" + (f"; {hedged} by llama.cpp 11434's rules, "
                                                  "their binary not being here" if hedged else ""))
        self.status.setText(f"{len(rows)} models; {stale} with out-of-date flags (judged by "
                            f"{judge}).")
        self.migrate_button.setEnabled(any(r["fixable"] for r in rows))
        self._file_banner()

    def _file_banner(self) -> None:
        """What is wrong with the whole file stays in view (a plan's error replaces it only
        until the next plan)."""
        if self.config is not None and self.config.problems:
            self.banner.show_message("<b>llama-swap refuses this file</b>: "
                                     + "<br>".join(_html(p) for p in self.config.problems),
                                     "warning")
        elif self.config is not None and not self.rows:
            self.banner.show_message(f"{_html(self.config.path.name)} has no model with a cmd.",
                                     "warning")
        else:
            self.banner.hide()

    def _load_failed(self, path: Path, exc: BaseException) -> None:
        self.status.setText("")
        fix = getattr(exc, "fix", "")
        self.banner.show_message(f"<b>Cannot open {_html(path.name)}</b>: {_html(exc)}"
                                 + (f"<br>{_html(fix)}" if fix else ""), "error",
                                 [("Open another…", self.choose_file)])

    def _fill_spec_types(self, info) -> None:
        """The binary's own spec types (its --help); without a binary, the fallback list,
        which says it is one."""
        from specdeck.core.servers.llama_server import methods_of

        methods = methods_of(info)
        current = self.spec_type.currentData()
        self.spec_type.blockSignals(True)
        self.spec_type.clear()
        self.spec_type.addItem(UNCHANGED, None)
        for method in methods.methods:
            self.spec_type.addItem(method.name, method.name)
            tip = (f"needs {method.needs}" if method.needs else "drafts from the context") + (
                f"; k: {method.k_flag} (default {method.k_default})" if method.k_flag else "")
            self.spec_type.setItemData(self.spec_type.count() - 1, tip,
                                       Qt.ItemDataRole.ToolTipRole)
        self.spec_type.setToolTip(f"Spec types from {methods.source}."
                                  + (" Give the llama-server binary to list its own."
                                     if methods.fallback else ""))
        self.spec_type_source.setText("<i>fallback list</i>" if methods.fallback else "")
        self.spec_type_source.setToolTip(self.spec_type.toolTip())
        self.spec_type_source.setVisible(methods.fallback)
        index = self.spec_type.findData(current)
        self.spec_type.setCurrentIndex(max(index, 0))
        self.spec_type.blockSignals(False)

    # one model ---------------------------------------------------------------------------
    def _current_name(self) -> str | None:
        item = self.models.currentItem()
        return None if item is None else item.data(Qt.ItemDataRole.UserRole)

    def _row(self, name: str | None) -> dict | None:
        return next((r for r in self.rows if r["model"] == name), None)

    def _show_model(self, _index: int) -> None:
        row = self._row(self._current_name())
        self._clear_form()
        self.findings.clear()
        if row is None:
            self.model_info.setText("")
            return
        self.model_info.setText(_model_html(row))
        for problem in row["problems"]:
            self.findings.addItem(f"⚠ {printable(problem)}")
        if not row["problems"]:
            self.findings.addItem("Nothing: every flag is current.")
        editable = row["llama_server"] and row["editable"] and not row["errors"]
        for widget in self._form_widgets():
            widget.setEnabled(editable)
        self._show_current(self.config.model(row["model"]) if row["llama_server"] else None)
        self._show_change(None)

    def _show_current(self, model) -> None:
        """Each field's placeholder says what the cmd has now (the field left as it is keeps
        it)."""
        from specdeck.core import llama_flags as lf

        def now(*flags):
            value = model.flag_value(*flags) if model is not None else None
            return UNCHANGED if value is None else f"{UNCHANGED} ({value})"

        self.draft.setPlaceholderText(now(*lf.DRAFT_MODEL))
        self.spec_type.setItemText(0, now(lf.SPEC_TYPE))
        self.draft_max.setSpecialValueText(now(self._k_flag(model), *lf.N_MAX_REMOVED))
        self.draft_min.setSpecialValueText(now(lf.DRAFT_N_MIN, *lf.N_MIN_REMOVED))
        self.p_min.setSpecialValueText(now(lf.DRAFT_P_MIN, *lf.P_MIN_ALIASES))

    def _k_flag(self, model=None) -> str:
        """The flag Draft max writes: what sets k for the chosen spec type (else the cmd's),
        as the binary's --help (or the fallback) says; core.swap.actions writes the same."""
        from specdeck.core.servers.llama_server import spec_type
        from specdeck.core.swap.actions import k_flag

        if model is None and self.config is not None and self._current_name():
            row = self._row(self._current_name())
            model = self.config.model(row["model"]) if row and row["llama_server"] else None
        kind = self.spec_type.currentData() or (spec_type(model.flags) if model else None)
        flag = k_flag(kind, self.info)
        self.draft_max.setToolTip(f"{flag}: most tokens drafted per step")
        return flag

    def _form_widgets(self):
        return (self.draft, self.spec_type, self.draft_max, self.draft_min, self.p_min, self.no_draft)

    def _clear_form(self) -> None:
        for widget in self._form_widgets():
            widget.blockSignals(True)
        self.draft.clear()
        self.spec_type.setCurrentIndex(0)
        for field in (self.draft_max, self.draft_min, self.p_min):
            field.setValue(field.minimum())
        self.no_draft.setChecked(False)
        for widget in self._form_widgets():
            widget.blockSignals(False)

    def setting(self):
        """The form as a core DraftSetting (None: nothing set)."""
        from specdeck.core.swap.actions import DraftSetting

        if self.no_draft.isChecked():
            return DraftSetting(no_draft=True)
        setting = DraftSetting(
            draft=self.draft.text().strip() or None,
            spec_type=self.spec_type.currentData(),
            draft_max=_set(self.draft_max), draft_min=_set(self.draft_min),
            p_min=_set(self.p_min),
        )
        return None if setting == DraftSetting() else setting

    def _edited(self, *_args) -> None:
        self._k_flag()
        removing = self.no_draft.isChecked()
        for widget in self._form_widgets()[:-1]:
            widget.setEnabled(not removing)
        self._plan_timer.start()

    def plan_edit(self) -> None:
        """Plan the form's setting for the selected model (in a worker); the diff follows."""
        name, setting = self._current_name(), self.setting()
        if self.config is None or name is None or setting is None:
            self.tasks.cancel("plan")
            self._show_change(None)
            return
        self.status.setText("Planning…")
        self.tasks.run("plan", plan_setting, self.config, name, setting, self.info,
                       on_result=lambda result: self._planned(*result),
                       on_error=self._plan_failed)

    def plan_migrate_all(self) -> None:
        if self.config is None:
            return
        self._clear_form()
        self.tasks.run("plan", plan_migration, self.config, self.info,
                       on_result=lambda result: self._planned(*result),
                       on_error=self._plan_failed)

    def _planned(self, change, unfixed) -> None:
        self._file_banner()
        self._show_change(change, unfixed)

    def _plan_failed(self, exc: BaseException) -> None:
        self._show_change(None)
        fix = getattr(exc, "fix", "")
        self.banner.show_message(_html(exc) + (f"<br>{_html(fix)}" if fix else ""), "error")

    def _show_change(self, change, unfixed=()) -> None:
        if change is not None and change.new_text == change.document.text:
            change = None
        self.change = change
        self.diff_view.set_diff("" if change is None else change.diff())
        self.unfixed.setText("".join(f"Not fixed automatically: {_html(u)}<br>" for u in unfixed))
        self.unfixed.setVisible(bool(unfixed))
        self.save_button.setEnabled(change is not None)
        self.revert_button.setEnabled(change is not None)
        if change is None:
            self.status.setText("")
        else:
            warnings = " ".join(getattr(change, "warnings", ()))
            self.status.setText(printable(f"{len(change.diff().splitlines())} diff lines. "
                                          f"{warnings}".strip()))

    # saving ------------------------------------------------------------------------------
    def revert(self) -> None:
        self._clear_form()
        self.tasks.cancel("plan")
        self._show_change(None)

    def save(self) -> None:
        if self.change is None:
            return
        path = self.change.document.path

        def saved(result) -> None:
            if result.written:  # the save announced it: _file_changed reads it again
                self.context.show_status(f"Saved {result.path}.")
                self._clear_form()
            else:
                self._show_change(self.change)

        def failed(error: BaseException | None) -> None:
            self._show_change(self.change)  # the change stays, to save again
            if error is not None:
                self.banner.show_message(f"<b>Could not save {html.escape(path.name)}</b>: "
                                         f"{html.escape(str(error))}", "error")

        if confirm_and_save(self, self.tasks, self.change, f"Save {path.name}",
                            f"SpecDeck will change {_html(path)} like this (the "
                            f"previous version is kept as {_html(path.name)}.bak):",
                            on_saved=saved, on_failed=failed, context=self.context):
            self.save_button.setEnabled(False)
            self.revert_button.setEnabled(False)
            self.status.setText(f"Saving {path.name}…")

    # plumbing ----------------------------------------------------------------------------
    def _set_enabled(self, on: bool) -> None:
        for widget in (*self._form_widgets(), self.models, self.migrate_button, self.reload_button):
            widget.setEnabled(on)
        self.save_button.setEnabled(on and self.change is not None)
        self.revert_button.setEnabled(on and self.change is not None)

    def shutdown(self) -> None:
        self._plan_timer.stop()
        self.tasks.close()


def _set(field):
    """A field's value, None while it shows "unchanged" (its lowest value)."""
    return None if field.value() <= field.minimum() else field.value()


def _html(text) -> str:
    """Text from the file (or a message quoting it) for a rich-text label: control
    characters escaped, then HTML-escaped."""
    return html.escape(printable(text))


def _tooltip(lines: list[str]) -> str:
    # <qt> makes Qt read the tooltip as rich text whatever its first line says, so the
    # escaped text shows as written.
    return "<qt>" + "<br>".join(_html(line) for line in lines) + "</qt>"


def _model_line(row: dict) -> str:
    mark = "⚠ " if row["problems"] or row["errors"] else ""
    what = row["drafter"] if row["llama_server"] else "not a llama-server"
    if row["errors"]:
        what = "cannot be read as llama-swap reads it"
    stale = f" · {len(row['problems'])} out of date" if row["problems"] else ""
    return printable(f"{mark}{row['model']} — {what}{stale}")


def _model_html(row: dict) -> str:
    parts = [f"<b>{_html(row['model'])}</b>: {_html(row['style'])}, {row['lines']} line(s)"]
    if row["macros"]:
        parts.append("macros: " + _html(", ".join(row["macros"])))
    for error in row["errors"]:
        parts.append(f"<b>Problem</b>: {_html(error)}")
    if row["shared_with"]:
        parts.append("Its cmd is written once and also used at "
                     f"{_html(', '.join(row['shared_with']))} (a YAML anchor): SpecDeck will not "
                     "change it for one model.")
    if not row["llama_server"]:
        if not row["errors"]:
            parts.append("Its cmd does not start a llama-server: nothing to edit here.")
        return "<br>".join(parts)
    flags = " ".join(row["flags"])
    parts.append(f"drafting: <b>{_html(row['drafter'])}</b>"
                 + (f" <code>{_html(flags)}</code>" if flags else ""))
    if row.get("judged_by"):
        parts.append(("<b>Judged by</b> " if row.get("hedged") else "flags judged by ")
                     + _html(row["judged_by"]))
    if row["flags_in_macros"]:
        parts.append("also passed by its macros (migration fixes them there; the form edits "
                     "this cmd): "
                     f"<code>{_html(' '.join(row['flags_in_macros']))}</code>")
    if not row["editable"] and row["not_editable"] not in row["errors"]:
        parts.append(f"SpecDeck will not edit this cmd: {_html(row['not_editable'] or '')}")
    return "<br>".join(parts)
