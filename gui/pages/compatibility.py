"""The Compatibility page: pick a target and a draft, check the pair, see every rule and why.

Everything slow runs in workers: scanning the model library, the check itself (reading two
vocabularies; Hub ids fetch their tokenizer files first) and the draft suggestions. The
page only turns core results into widgets.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)
from specdeck.core import changed
from specdeck.core.compat.check import MAX_SEQ_LEN_RANGE
from specdeck.core.compat.report import CompatVerdict
from specdeck.core.errors import CancelledError
from specdeck.core.forms import bounds, form_field
from specdeck.gui.context import AppContext
from specdeck.gui.pages import spec
from specdeck.gui.workers import Tasks

log = logging.getLogger(__name__)

BADGE_ROLES = {
    CompatVerdict.COMPATIBLE: "badge-ok",
    CompatVerdict.WARNINGS: "badge-warn",
    CompatVerdict.INCOMPATIBLE: "badge-bad",
    CompatVerdict.INCONCLUSIVE: "badge-info",
}
"""A verdict's badge look (a str enum: its value, as core.hub.library.Badge keeps it, finds
it too)."""
STATUS_LOOK = {  # status value -> (label, colour)
    "pass": ("✓ Pass", "#16a34a"),
    "warn": ("! Warn", "#d97706"),
    "fail": ("✗ Fail", "#dc2626"),
    "unknown": ("? Unknown", "#6b7280"),
}
VRAM_LOOK = {True: "Fits", False: "Too big", None: "?"}
UNVERIFIED_LABEL = "Unverified (Hub)"


def suggestion_status(status: str) -> str:
    """A suggestion's compatibility in words: a verdict's own label (CompatVerdict.label), or
    that a Hub draft was not checked."""
    from specdeck.core.compat.suggest import UNVERIFIED

    if status == UNVERIFIED:
        return UNVERIFIED_LABEL
    try:
        return CompatVerdict(status).label
    except ValueError:
        return status


NATIVE_CONTEXT = MAX_SEQ_LEN_RANGE[0] - 1
"""The context below core's range: none given, the target's native context."""


@dataclass(frozen=True)
class PairChoices:
    """What the page's form holds (core.forms' table): the target and the draft (a folder, a
    .gguf file or a Hub id, as `specdeck check` takes them) and the context the target runs
    at (``NATIVE_CONTEXT``: its native one). Not kept between sessions: each session starts
    from the pair config.yml names."""

    target: str = form_field("", kept=False)
    draft: str = form_field("", kept=False)
    context: int = form_field(NATIVE_CONTEXT, low=NATIVE_CONTEXT, high=MAX_SEQ_LEN_RANGE[1],
                              kept=False)

    @property
    def max_seq_len(self) -> int | None:
        """The context to check at, as core.compat.check takes it (None: the native one)."""
        return self.context if self.context != NATIVE_CONTEXT else None

    def swapped(self) -> PairChoices:
        return replace(self, target=self.draft, draft=self.target)


def create_page(context: AppContext) -> QWidget:
    return CompatibilityPage(context)


def scan_library(saved, config_path: str | None) -> dict[str, Any]:
    """Worker job: the models in the library folders (``saved``: the settings the page
    shows) and the pair config.yml names."""
    from specdeck.core.compat.library import read_config_models
    from specdeck.core.errors import SpecDeckError
    from specdeck.core.hub.locations import library_dirs
    from specdeck.core.models import scan_models

    dirs, problems = library_dirs(config_path, saved=saved)
    models, _ = scan_models(dirs)
    configured = None
    if config_path:
        try:
            configured = read_config_models(config_path)
        except SpecDeckError as exc:
            problems.append(str(exc))
    return {"models": models, "configured": configured, "problems": problems}


def _severity(rule) -> int:
    """Table order: what refuses the pair, what leaves it undecided, warnings, the rest."""
    status = rule.status.value
    if status == "fail":
        return 0
    if status == "unknown" and rule.blocking:
        return 1
    return {"warn": 2, "unknown": 3}.get(status, 4)


def _restyle(widget: QWidget, role: str) -> None:
    widget.setProperty("role", role)
    widget.style().unpolish(widget)
    widget.style().polish(widget)


def _item(text: str, tooltip: str | None = None) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
    if tooltip:
        item.setToolTip(tooltip)
    return item


def _table(headers: list[str], stretch: int) -> QTableWidget:
    table = QTableWidget(0, len(headers))
    table.setHorizontalHeaderLabels(headers)
    table.verticalHeader().setVisible(False)
    table.setWordWrap(True)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    header = table.horizontalHeader()
    for column in range(len(headers)):
        mode = (QHeaderView.ResizeMode.Stretch if column == stretch
                else QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(column, mode)
    # Wrapped cells need their row heights redone whenever the columns get their real width
    # (a table filled while its tab is hidden is laid out narrow first).
    header.sectionResized.connect(lambda *_: table.resizeRowsToContents())
    return table


def start_folder(value: str, file: bool) -> str:
    """Worker: where Browse… opens for the model picked so far (a user's path, maybe on a
    slow or gone disk): its folder (a file's own folder, for GGUF…), else the home folder."""
    path = Path(value)
    if file:
        return str(path.parent if path.is_file() else Path.home())
    return value if path.is_dir() else str(Path.home())


class ModelPicker(QWidget):
    """Choose a model: one from the library, a typed folder or Hub id, or Browse…."""

    def __init__(self, placeholder: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.tasks = Tasks(self)
        """Browse…'s look at the disk for where to open."""
        self.combo = QComboBox()
        self.combo.setEditable(True)
        self.combo.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.combo.setMinimumContentsLength(40)
        self.combo.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.combo.lineEdit().setPlaceholderText(placeholder)
        self.browse = QPushButton("Browse…")
        self.browse.clicked.connect(self._browse)
        self.browse_gguf = QPushButton("GGUF…")
        self.browse_gguf.setToolTip("A llama.cpp model file (.gguf): its vocabulary is read "
                                    "from the header. A GGUF on the Hub: org/name:Q8_0")
        self.browse_gguf.clicked.connect(self._browse_gguf)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.combo, 1)
        layout.addWidget(self.browse)
        layout.addWidget(self.browse_gguf)

    def set_library(self, models: list) -> None:
        """Offer ``models`` (ModelInfo) in the list, keeping what the user has entered."""
        current = self.value()
        self.combo.blockSignals(True)
        self.combo.clear()
        for info in models:
            label = f"{info.name}  ({info.parameters_label}, {info.quant.label})"
            self.combo.addItem(label, str(info.path))
            self.combo.setItemData(self.combo.count() - 1, str(info.path),
                                   Qt.ItemDataRole.ToolTipRole)
        self.combo.blockSignals(False)
        self.set_value(current)

    def value(self) -> str:
        """The folder or Hub id to check."""
        text = self.combo.currentText().strip()
        index = self.combo.currentIndex()
        if index >= 0 and self.combo.itemText(index) == text:
            return str(self.combo.itemData(index) or text)
        return text

    def set_value(self, value: str) -> None:
        index = self.combo.findData(value)
        if index >= 0:
            self.combo.setCurrentIndex(index)
        else:
            self.combo.setCurrentIndex(-1)
            self.combo.setEditText(value)

    def _browse(self) -> None:
        self.tasks.run("browse", start_folder, self.value(), False, on_result=self._pick_folder)

    def _pick_folder(self, start: str) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Model folder", start)
        if folder:
            self.set_value(folder)

    def _browse_gguf(self) -> None:
        self.tasks.run("browse", start_folder, self.value(), True, on_result=self._pick_gguf)

    def _pick_gguf(self, start: str) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "GGUF model file", start, "GGUF (*.gguf)")
        if path:
            self.set_value(path)


class CompatibilityPage(QWidget):
    report_shown = Signal(object)
    """Emitted with each CompatReport shown (tests and screenshots wait on it)."""
    suggestions_shown = Signal(object)
    error_shown = Signal(str)

    def __init__(self, context: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.context = context
        self.tasks = Tasks(self)
        self._library_loaded = False
        self.report = None
        self.suggestions = None
        self._build()
        context.config_path_changed.connect(lambda _path: self.refresh_library())
        context.settings_read.connect(self.refresh_library)  # its folders and config.yml
        context.file_changed.connect(self._file_changed)
        self.refresh_library()

    def _file_changed(self, _path: str, kind: str) -> None:
        """config.yml names the library's folder; an install adds to it."""
        if kind in (changed.TABBY_CONFIG, changed.MODEL):
            self.refresh_library()

    # layout ----------------------------------------------------------------------------
    def _build(self) -> None:
        page = spec("compat")
        title = QLabel(f"<h2>{page.title}</h2>")
        intro = QLabel(
            "Can this draft speculate for this target? The check compares the tokenizers id "
            "by id (llama.cpp's rules) and looks for ExLlamaV2's risks, before anything is "
            "loaded. Pick a model from your library, type a folder or a .gguf file, or a Hub "
            "id such as <code>turboderp/Llama-3.2-1B-exl2@4.0bpw</code> (a Hub GGUF: "
            "<code>org/name:Q8_0</code>, only its header is fetched).")
        intro.setWordWrap(True)
        intro.setProperty("role", "hint")

        self.target = ModelPicker("Target model: folder, .gguf file or Hub id")
        self.draft = ModelPicker("Draft model: folder, .gguf file or Hub id")
        self.context_len = QSpinBox()
        self.context_len.setRange(*bounds(PairChoices, "context"))
        self.context_len.setSingleStep(1024)
        self.context_len.setSpecialValueText("target's native context")
        self.context_len.setSuffix(" tokens")
        self.context_len.setToolTip("The context the target runs at (TabbyAPI model.max_seq_len).")
        self.check_button = QPushButton("Check pair")
        self.check_button.setDefault(True)
        self.check_button.clicked.connect(self.start_check)
        self.swap_button = QPushButton("Swap")
        self.swap_button.clicked.connect(self.swap)
        self.suggest_button = QPushButton("Suggest drafts")
        self.suggest_button.setToolTip("Rank drafts for the target from your library and the Hub.")
        self.suggest_button.clicked.connect(self.start_suggest)

        form = QGridLayout()
        form.addWidget(QLabel("Target"), 0, 0)
        form.addWidget(self.target, 0, 1, 1, 4)
        form.addWidget(QLabel("Draft"), 1, 0)
        form.addWidget(self.draft, 1, 1, 1, 4)
        form.addWidget(QLabel("Context"), 2, 0)
        form.addWidget(self.context_len, 2, 1)
        form.addWidget(self.swap_button, 2, 2)
        form.addWidget(self.suggest_button, 2, 3)
        form.addWidget(self.check_button, 2, 4)
        form.setColumnStretch(1, 1)

        self.badge = QLabel("Not checked")
        self.badge.setProperty("role", "badge-info")
        self.badge.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.summary = QLabel("Pick a target and a draft, then Check pair.")
        self.summary.setWordWrap(True)
        self.facts = QLabel("")
        self.facts.setWordWrap(True)
        self.facts.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.busy = QLabel("")
        self.busy.setProperty("role", "hint")
        self.error = QLabel("")
        self.error.setWordWrap(True)
        self.error.setProperty("role", "error")
        self.error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error.hide()

        verdict_row = QHBoxLayout()
        verdict_row.addWidget(self.badge, 0, Qt.AlignmentFlag.AlignTop)
        verdict_text = QVBoxLayout()
        verdict_text.addWidget(self.summary)
        verdict_text.addWidget(self.facts)
        verdict_row.addLayout(verdict_text, 1)

        self.rules = _table(["Status", "Rule", "Details", "From"], stretch=2)
        self.mismatches = _table(["Id", "Target token", "Draft token"], stretch=2)
        self.mismatch_note = QLabel("")
        self.mismatch_note.setWordWrap(True)
        mismatch_tab = QWidget()
        mismatch_layout = QVBoxLayout(mismatch_tab)
        mismatch_layout.addWidget(self.mismatch_note)
        mismatch_layout.addWidget(self.mismatches, 1)

        self.suggestion_table = _table(
            ["#", "Draft", "Where", "Size", "Ratio", "Compatibility", "VRAM", "Why"], stretch=7)
        self.suggestion_table.itemSelectionChanged.connect(self._update_suggestion_buttons)
        self.suggestion_table.itemDoubleClicked.connect(lambda _item: self.check_selected())
        self.suggestion_note = QLabel("Suggest drafts ranks candidates for the target.")
        self.suggestion_note.setWordWrap(True)
        self.check_selected_button = QPushButton("Check with this draft")
        self.check_selected_button.clicked.connect(self.check_selected)
        self.install_button = QPushButton("Install…")
        self.install_button.setToolTip("Install this Hub draft (follow it on the Models page).")
        self.install_button.clicked.connect(self.install_selected)
        buttons = QHBoxLayout()
        buttons.addWidget(self.suggestion_note, 1)
        buttons.addWidget(self.check_selected_button)
        buttons.addWidget(self.install_button)
        suggestion_tab = QWidget()
        suggestion_layout = QVBoxLayout(suggestion_tab)
        suggestion_layout.addWidget(self.suggestion_table, 1)
        suggestion_layout.addLayout(buttons)
        self._update_suggestion_buttons()

        self.tabs = QTabWidget()
        self.tabs.addTab(self.rules, "Rules")
        self.tabs.addTab(mismatch_tab, "Differing tokens")
        self.tabs.addTab(suggestion_tab, "Suggested drafts")
        self.tabs.setTabEnabled(1, False)

        layout = QVBoxLayout(self)
        layout.addWidget(title)
        layout.addWidget(intro)
        layout.addLayout(form)
        layout.addWidget(self.busy)
        layout.addWidget(self.error)
        layout.addLayout(verdict_row)
        layout.addWidget(self.tabs, 1)

    # the form --------------------------------------------------------------------------
    def choices(self) -> PairChoices:
        """The pair and context the form holds."""
        return PairChoices(self.target.value(), self.draft.value(), self.context_len.value())

    def show_choices(self, choices: PairChoices) -> None:
        """Show ``choices`` in the form (not checked)."""
        self.target.set_value(choices.target)
        self.draft.set_value(choices.draft)
        self.context_len.setValue(choices.context)

    # library ---------------------------------------------------------------------------
    def refresh_library(self) -> None:
        settings = self.context.settings
        config = str(self.context.config_path) if self.context.config_path else None
        self._run("library", scan_library, settings, config,
                  on_done=self._library_scanned, quiet=True)

    def _library_scanned(self, result: dict[str, Any]) -> None:
        models = result["models"]
        self.target.set_library(models)
        self.draft.set_library(models)
        configured = result["configured"]
        if configured is not None and not self._library_loaded:
            # First visit: start from the pair TabbyAPI is set up with (what is empty of it).
            shown = self.choices()
            self.show_choices(replace(
                shown, target=shown.target or str(configured.target or ""),
                draft=shown.draft or str(configured.draft or ""),
                context=(configured.max_seq_len if shown.max_seq_len is None
                         and configured.max_seq_len else shown.context)))
        self._library_loaded = True

    # check -----------------------------------------------------------------------------
    def start_check(self) -> None:
        from specdeck.core.compat import check

        pair = self.choices()
        if not pair.target or not pair.draft:
            self._show_error("Pick both a target and a draft model first.")
            return
        self._set_busy("Checking…")
        self._run("check", check, pair.target, pair.draft, max_seq_len=pair.max_seq_len,
                  endpoint=self.context.settings.hub_endpoint, on_done=self._show_report)

    def swap(self) -> None:
        self.show_choices(self.choices().swapped())

    def _show_report(self, report) -> None:
        from specdeck.core.compat.display import quoted

        self.report = report
        self.error.hide()
        self.badge.setText(report.verdict.label)
        _restyle(self.badge, BADGE_ROLES[report.verdict])
        self.summary.setText(report.summary)
        self.facts.setText(self._facts(report))
        self._fill_rules(report)
        vocab = report.vocab
        self.mismatches.setRowCount(0)
        for m in vocab.mismatches:
            row = self.mismatches.rowCount()
            self.mismatches.insertRow(row)
            self.mismatches.setItem(row, 0, _item(f"{m.id:,}"))
            for column, token in ((1, m.target), (2, m.draft)):
                self.mismatches.setItem(row, column,
                                        _item(quoted(token.display), f"stored as {token.text!r}"))
        self.mismatch_note.setText(
            f"{vocab.differing:,} of {vocab.compared:,} ids carry different text; the first "
            f"{len(vocab.mismatches)} are listed with what each side's token stands for.")
        self.tabs.setTabEnabled(1, bool(vocab.mismatches))
        self.tabs.setTabText(1, f"Differing tokens ({vocab.differing:,})" if vocab.differing
                             else "Differing tokens")
        self.tabs.setCurrentIndex(0)
        self.report_shown.emit(report)

    @staticmethod
    def _facts(report) -> str:
        from specdeck.core.compat.vocab import VocabType

        def side(label: str, s) -> str:
            size = f"{s.vocab_size:,} tokens" if s.vocab_size else f"only {s.known_ids:,} ids known"
            head = f", head {s.head_rows:,}" if s.head_rows else ""
            kind = VocabType(s.vocab_type).label
            return f"{label} <b>{s.name}</b>: {kind}, {size}{head}"

        t = report.timings
        return (f"{side('Target', report.target)} · {side('Draft', report.draft)} · "
                f"{report.vocab.compared:,} ids compared in {t.total_s:.2f} s")

    def _fill_rules(self, report) -> None:
        bold = QFont()
        bold.setBold(True)
        self.rules.setRowCount(0)
        for rule in sorted(report.rules, key=_severity):
            row = self.rules.rowCount()
            self.rules.insertRow(row)
            label, colour = STATUS_LOOK[rule.status.value]
            status = _item(label)
            status.setForeground(QColor(colour))
            status.setFont(bold)
            kind = "Deciding rule" if rule.blocking else "Advice"
            self.rules.setItem(row, 0, status)
            self.rules.setItem(row, 1, _item(rule.title, f"{kind}; key {rule.key}"))
            details = rule.detail
            if rule.target or rule.draft:
                details += f"\nTarget: {rule.target}\nDraft: {rule.draft}"
            self.rules.setItem(row, 2, _item(details))
            self.rules.setItem(row, 3, _item(rule.origin, kind))
        self.rules.resizeRowsToContents()

    # suggestions -----------------------------------------------------------------------
    def start_suggest(self) -> None:
        from specdeck.core.compat import suggest

        pair = self.choices()
        if not pair.target:
            self._show_error("Pick the target model to find drafts for.")
            return
        settings = self.context.settings
        self._set_busy("Looking for drafts…")
        self._run("suggest", suggest, pair.target, saved=settings,
                  config_path=self.context.config_path, max_seq_len=pair.max_seq_len,
                  endpoint=settings.hub_endpoint, on_done=self._show_suggestions)

    def _show_suggestions(self, result) -> None:
        from specdeck.core.models import format_parameters

        self.suggestions = result
        self.error.hide()
        table = self.suggestion_table
        table.setRowCount(0)
        for s in result.suggestions:
            row = table.rowCount()
            table.insertRow(row)
            where = s.repo_id and "Hub" or "Library"
            values = [str(s.rank), s.name, where,
                      format_parameters(s.parameters) if s.parameters else "?",
                      f"{s.ratio:.1f}x" if s.ratio else "?",
                      suggestion_status(s.status), VRAM_LOOK[s.fits_vram], s.reason]
            for column, value in enumerate(values):
                item = _item(value, s.reason if column != 7 else None)
                if column == 0:
                    item.setData(Qt.ItemDataRole.UserRole, s)
                table.setItem(row, column, item)
        table.resizeRowsToContents()
        family = f" Tokenizer family: {result.family}." if result.family else (
            " The target matches no known Hub family.")
        vram = f" {result.vram_note}" if result.vram_note else ""
        self.suggestion_note.setText(
            f"{len(result.suggestions)} suggestion(s) for {result.target}, "
            f"{len(result.rejected)} model(s) ruled out.{family}{vram}")
        self.suggestion_note.setToolTip("\n".join(
            f"{r.name}: {r.reason}" for r in result.rejected) or "Nothing was ruled out.")
        self.tabs.setCurrentIndex(2)
        self._update_suggestion_buttons()
        self.suggestions_shown.emit(result)

    def selected_suggestion(self):
        rows = self.suggestion_table.selectionModel().selectedRows()
        if not rows:
            return None
        return self.suggestion_table.item(rows[0].row(), 0).data(Qt.ItemDataRole.UserRole)

    def _update_suggestion_buttons(self) -> None:
        chosen = self.selected_suggestion()
        self.check_selected_button.setEnabled(chosen is not None)
        self.install_button.setEnabled(chosen is not None and chosen.repo_id is not None)

    def check_selected(self) -> None:
        chosen = self.selected_suggestion()
        if chosen is None:
            return
        revision = chosen.revisions[0] if chosen.revisions else None
        draft = (str(chosen.path) if chosen.path is not None
                 else f"{chosen.repo_id}@{revision}" if revision else chosen.repo_id)
        self.show_choices(replace(self.choices(), draft=draft))
        self.start_check()

    def install_selected(self) -> None:
        chosen = self.selected_suggestion()
        if chosen is None or chosen.repo_id is None:
            return
        revision = chosen.revisions[0] if chosen.revisions else ""
        self.context.install_requested.emit(chosen.repo_id, revision)
        self.context.show_status(f"Install of {chosen.repo_id} requested: follow it on the "
                                  "Models page.")

    # workers ---------------------------------------------------------------------------
    def _run(self, key: str, fn: Callable[..., Any], *args: Any,
             on_done: Callable[[Any], None], quiet: bool = False, **kwargs: Any) -> None:
        """Run ``fn`` in the background; a newer run of the same kind replaces the older."""
        self.tasks.run(key, fn, *args, on_result=on_done,
                       on_error=lambda exc: self._show_failure(exc, quiet),
                       on_progress=lambda text: self.busy.setText(str(text)),
                       on_done=self._task_done, **kwargs)

    def _task_done(self) -> None:
        if not any(self.tasks.running(k) for k in ("check", "suggest")):
            self.busy.setText("")

    def _set_busy(self, text: str) -> None:
        self.busy.setText(text)
        self.error.hide()

    def _show_failure(self, exc: BaseException, quiet: bool = False) -> None:
        if isinstance(exc, CancelledError):
            return
        if quiet:  # background refreshes only log: the page still works without them
            log.warning("Background task failed: %s", exc)
            return
        self._show_error(str(exc))

    def _show_error(self, text: str) -> None:
        self.error.setText(text)
        self.error.show()
        self.error_shown.emit(text)

    def shutdown(self) -> None:
        self.tasks.close()
        for picker in (self.target, self.draft):
            picker.tasks.close()
