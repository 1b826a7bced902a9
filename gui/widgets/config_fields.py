"""One editor widget per config setting, built from the schema table.

The widget shows the value as written in the file (blank when blank or absent) and gives
back what the user typed; validation and normalisation stay in core (schema.normalize).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QWidget,
)
from specdeck.core.config.schema import MODEL, Kind, Setting, normalize
from specdeck.core.errors import InvalidInputError


def display_text(setting: Setting, value: Any) -> str:
    """How a file value reads in an editor ("" for blank)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ", ".join(f"{v:g}" if isinstance(v, (int, float)) else str(v) for v in value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


class FieldEditor(QObject):
    """The editor of one setting: an input widget, a label, an error line."""

    edited = Signal()

    def __init__(self, setting: Setting, parent: QWidget | None = None):
        super().__init__(parent)
        self.setting = setting
        self.initial_text = ""
        self.error = QLabel()
        self.error.setProperty("role", "error")
        self.error.setWordWrap(True)
        self.error.hide()
        self.label = QLabel(setting.label)
        tip = f"{setting.key}: {setting.help}\nAllowed: {setting.rule()}."
        self.label.setToolTip(tip)
        self.container = QWidget(parent)
        row = QHBoxLayout(self.container)
        row.setContentsMargins(0, 0, 0, 0)
        self.input = self._make_input()
        self.input.setToolTip(tip)
        self.input.setObjectName(f"field_{setting.section}_{setting.key}")
        row.addWidget(self.input, 1)
        self.browse: QPushButton | None = None
        if setting.kind is Kind.PATH:
            self.browse = QPushButton("Browse…")
            self.browse.clicked.connect(self._browse)
            row.addWidget(self.browse)
        self.base_dir: Path | None = None

    # -- widgets -----------------------------------------------------------------------
    def _make_input(self) -> QWidget:
        s = self.setting
        blank = f"blank: {s.blank_meaning}"
        if s.kind in (Kind.BOOL, Kind.CHOICE, Kind.CACHE_MODE):
            combo = QComboBox()
            combo.addItem(f"({blank})", "")
            options = ("true", "false") if s.kind is Kind.BOOL else s.choices
            for option in options:
                combo.addItem(option, option)
            # The main cache also takes ExLlamaV3 bit pairs, which cannot all be listed.
            combo.setEditable(s.kind is Kind.CACHE_MODE and s.section == MODEL)
            combo.currentIndexChanged.connect(lambda _=0: self.edited.emit())
            if combo.isEditable():
                combo.editTextChanged.connect(lambda _="": self.edited.emit())
            return combo
        if s.key == "draft_model_name":
            combo = QComboBox()
            combo.setEditable(True)
            combo.lineEdit().setPlaceholderText(blank)
            combo.editTextChanged.connect(lambda _="": self.edited.emit())
            return combo
        line = QLineEdit()
        line.setPlaceholderText(blank)
        line.textChanged.connect(lambda _="": self.edited.emit())
        return line

    def _browse(self) -> None:
        start = self.text() or (str(self.base_dir) if self.base_dir else "")
        if start and self.base_dir and not Path(start).is_absolute():
            start = str(self.base_dir / start)
        chosen = QFileDialog.getExistingDirectory(self.container, self.setting.label, start)
        if chosen:
            self.set_text(chosen)

    # -- values ------------------------------------------------------------------------
    def text(self) -> str:
        widget = self.input
        if isinstance(widget, QComboBox):
            if widget.isEditable():
                index = widget.findText(widget.currentText())
                if index == 0 and widget.itemData(0) == "":
                    return ""
                return widget.currentText().strip()
            return str(widget.currentData() or "")
        return widget.text().strip()

    def set_text(self, text: str) -> None:
        widget = self.input
        if isinstance(widget, QComboBox):
            index = widget.findData(text) if text else 0
            if index < 0:
                index = widget.findText(text)
            if index >= 0 and not (widget.isEditable() and text and widget.itemText(index) != text):
                widget.setCurrentIndex(index)
            elif widget.isEditable():
                widget.setEditText(text)
            else:
                widget.addItem(f"{text} (not valid)", text)
                widget.setCurrentIndex(widget.count() - 1)
            if widget.isEditable() and not text:
                widget.setEditText("")
        else:
            widget.setText(text)

    def load(self, file_value: Any) -> None:
        """Show the file's value; it becomes the baseline for "changed"."""
        text = display_text(self.setting, file_value)
        self.initial_text = text
        blocker = self.input.blockSignals(True)
        self.set_text(text)
        self.input.blockSignals(blocker)
        self.show_error(None)

    def set_choices(self, names: list[str]) -> None:
        """Suggestions for an editable combo (e.g. the folders in the draft model dir)."""
        widget = self.input
        if not isinstance(widget, QComboBox) or not widget.isEditable():
            return
        current = widget.currentText()
        blocker = widget.blockSignals(True)
        widget.clear()
        widget.addItems(names)
        widget.setEditText(current)
        widget.blockSignals(blocker)

    @property
    def changed(self) -> bool:
        return self.text() != self.initial_text

    def check(self, backend: str | None = None) -> str | None:
        """The rule the current input breaks, or None."""
        try:
            normalize(self.setting, self.text(), backend)
        except InvalidInputError as exc:
            return exc.what
        return None

    def show_error(self, message: str | None) -> None:
        self.error.setText(message or "")
        self.error.setVisible(bool(message))
        self.input.setProperty("invalid", bool(message))
        self.input.setStyleSheet("border: 1px solid #dc2626;" if message else "")
