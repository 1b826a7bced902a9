"""Confirm a config.yml change: show the diff, save atomically in a worker, handle conflicts.

Every page that writes config.yml (Draft settings, "Use as draft" on the Models page,
"Apply" on the A/B page, the llama-swap page) goes through :func:`confirm_and_save` or
:func:`save_change`, so the user always sees the exact lines that will change before
anything is written, and the write never runs on the GUI thread: the page says it is
saving, and shows what went wrong in place. A save that wrote announces itself on the app's
``file_changed`` (gui.context.AppContext.announce), so every page showing the file re-reads
it: no page emits that by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QMessageBox,
    QVBoxLayout,
    QWidget,
)
from specdeck.core import config
from specdeck.gui.widgets.diff_view import DiffView


class ConfirmChangeDialog(QDialog):
    """The one dialog that shows the exact lines a write changes and asks to save them (a
    config change here, the Tune page's Apply): ``intro`` says what is written where,
    ``note`` (optional, plain text) what else the user should see, the diff wraps."""

    def __init__(self, diff: str, title: str, intro: str, parent: QWidget | None = None, *,
                 warnings: tuple[str, ...] = (), note: str = ""):
        super().__init__(parent)
        self.setWindowTitle(title)
        layout = QVBoxLayout(self)
        label = QLabel(intro)
        label.setWordWrap(True)
        layout.addWidget(label)
        self.note = QLabel(note)
        self.note.setObjectName("confirmNote")
        self.note.setTextFormat(Qt.TextFormat.PlainText)
        self.note.setWordWrap(True)
        self.note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.note.setVisible(bool(note))
        layout.addWidget(self.note)
        self.warning = QLabel("\n".join(f"Warning: {w}" for w in warnings))
        self.warning.setWordWrap(True)
        self.warning.setObjectName("warningText")
        self.warning.setVisible(bool(warnings))
        layout.addWidget(self.warning)
        self.diff = DiffView()
        self.diff.set_diff(diff)
        self.diff.setMinimumSize(640, 260)
        layout.addWidget(self.diff)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.buttons = buttons


def save_change(parent: QWidget, tasks, change, on_saved: Callable[[Any], None],
                on_failed: Callable[[BaseException | None], None], force: bool = False, *,
                context) -> None:
    """Save ``change`` in a worker (``tasks``: the page's gui.workers.Tasks), never on the
    GUI thread; what it wrote is announced on ``context`` (the app's AppContext) first. A file that changed on disk since it was read is asked about first: overwrite
    it (the version on disk kept as .bak), or not. Then ``on_saved(SaveResult)``, or
    ``on_failed(error)`` with the error to show in place (None: the user chose not to
    overwrite; nothing to show)."""

    def failed(error: BaseException) -> None:
        if isinstance(error, config.ConfigConflictError):
            if _overwrite(parent, change, error):
                save_change(parent, tasks, change, on_saved, on_failed, force=True,
                            context=context)
            else:
                on_failed(None)
            return
        on_failed(error)

    def saved(result) -> None:
        context.announce(result.changed)
        on_saved(result)

    tasks.run("save", config.save, change, force=force, on_result=saved, on_error=failed)


def _overwrite(parent: QWidget, change, conflict) -> bool:
    name = change.document.path.name
    answer = QMessageBox.question(
        parent,
        f"{name} changed on disk",
        f"{conflict.what}\n\nOverwrite it with your version? (The version on disk is kept as "
        f"{name}.bak.)",
        QMessageBox.StandardButton.Save | QMessageBox.StandardButton.Cancel,
        QMessageBox.StandardButton.Cancel,
    )
    return answer == QMessageBox.StandardButton.Save


def confirm_and_save(parent: QWidget, tasks, change, title: str, intro: str,
                     on_saved: Callable[[Any], None],
                     on_failed: Callable[[BaseException | None], None], *, context) -> bool:
    """Show the exact lines ``change`` writes; once the user accepts, save it in a worker
    (:func:`save_change`). True when a save started; False when the user cancelled, or
    when there was nothing to write (then ``on_saved`` has had a SaveResult with ``written``
    False, at once)."""
    if change.new_text == change.document.text:
        on_saved(config.SaveResult(change.document.path, written=False, backup=None,
                                   kind=change.document.what))
        return False
    dialog = ConfirmChangeDialog(change.diff(), title, intro, parent,
                                 warnings=tuple(getattr(change, "warnings", ())))
    if dialog.exec() != QDialog.DialogCode.Accepted:
        return False
    save_change(parent, tasks, change, on_saved, on_failed, context=context)
    return True
