"""Confirm a config.yml change: show the diff, save atomically, handle conflicts.

Every page that writes config.yml (Draft settings, "Use as draft" on the Models page,
"Apply" on the A/B page) goes through :func:`confirm_and_save`, so the user always sees
the exact lines that will change before anything is written.
"""

from __future__ import annotations

from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QMessageBox,
    QVBoxLayout,
    QWidget,
)

from specdeck.core import config
from specdeck.core.errors import SpecDeckError
from specdeck.gui.widgets.diff_view import DiffView


class ConfirmChangeDialog(QDialog):
    def __init__(self, change, title: str, intro: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle(title)
        layout = QVBoxLayout(self)
        label = QLabel(intro)
        label.setWordWrap(True)
        layout.addWidget(label)
        warnings = getattr(change, "warnings", ())
        self.warning = QLabel("\n".join(f"Warning: {w}" for w in warnings))
        self.warning.setWordWrap(True)
        self.warning.setObjectName("warningText")
        self.warning.setVisible(bool(warnings))
        layout.addWidget(self.warning)
        self.diff = DiffView()
        self.diff.set_diff(change.diff())
        self.diff.setMinimumSize(640, 320)
        layout.addWidget(self.diff)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.buttons = buttons


def save_change(parent: QWidget, change, force: bool = False) -> config.SaveResult | None:
    """Save, asking before overwriting a file that changed on disk. None if not saved."""
    try:
        return config.save(change, force=force)
    except config.ConfigConflictError as exc:
        name = change.document.path.name
        answer = QMessageBox.question(
            parent,
            f"{name} changed on disk",
            f"{exc.what}\n\nOverwrite it with your version? (The version on disk is kept as "
            f"{name}.bak.)",
            QMessageBox.StandardButton.Save | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel,
        )
        if answer == QMessageBox.StandardButton.Save:
            return save_change(parent, change, force=True)
        return None
    except SpecDeckError as exc:
        QMessageBox.warning(parent, f"Could not save {change.document.path.name}", str(exc))
        return None


def confirm_and_save(parent: QWidget, change, title: str, intro: str) -> config.SaveResult | None:
    if change.new_text == change.document.text:
        return config.SaveResult(change.document.path, written=False, backup=None)
    dialog = ConfirmChangeDialog(change, title, intro, parent)
    if dialog.exec() != QDialog.DialogCode.Accepted:
        return None
    return save_change(parent, change)
