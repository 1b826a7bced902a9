"""What the window shows in place of a page that raised while it was built: which page,
what failed, what to do, and the traceback one click away (a broken page must neither take
the app down nor pass for a page that is merely not built yet)."""

from __future__ import annotations

import html
import traceback

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)


class FailedPage(QWidget):
    def __init__(self, title: str, error: BaseException, parent: QWidget | None = None):
        super().__init__(parent)
        self.error = error
        self.details_text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        layout = QVBoxLayout(self)
        heading = QLabel(f"<h2>{html.escape(title)} could not open</h2>")
        self.message = QLabel(
            f"<p><b>{html.escape(type(error).__name__)}:</b> {html.escape(str(error))}</p>"
            "<p>This is a fault in SpecDeck, not in your files or settings: the other pages "
            "work as usual. Please report it with the details below (Copy puts them on the "
            "clipboard; they are also in the terminal output when SpecDeck is started from a "
            "terminal).</p>")
        self.message.setWordWrap(True)
        self.message.setTextFormat(Qt.TextFormat.RichText)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        buttons = QHBoxLayout()
        self.details_button = QPushButton("Show details")
        self.details_button.setCheckable(True)
        self.details_button.toggled.connect(self._toggle)
        self.copy_button = QPushButton("Copy details")
        self.copy_button.clicked.connect(self.copy)
        buttons.addWidget(self.details_button)
        buttons.addWidget(self.copy_button)
        buttons.addStretch(1)
        self.details = QPlainTextEdit(self.details_text)
        self.details.setReadOnly(True)
        self.details.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.details.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.details.hide()
        layout.addWidget(heading)
        layout.addWidget(self.message)
        layout.addLayout(buttons)
        layout.addWidget(self.details, 1)
        layout.addStretch(0)

    def _toggle(self, shown: bool) -> None:
        self.details.setVisible(shown)
        self.details_button.setText("Hide details" if shown else "Show details")

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.details_text)
