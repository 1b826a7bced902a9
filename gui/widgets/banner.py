"""A message strip at the top of a page: text, a severity colour, action buttons."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget

COLOURS = {
    "info": ("#1e3a8a", "#dbeafe"),
    "warning": ("#78350f", "#fef3c7"),
    "error": ("#7f1d1d", "#fee2e2"),
    "ok": ("#14532d", "#dcfce7"),
}


class Banner(QFrame):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("banner")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setTextFormat(Qt.TextFormat.RichText)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.label, 1)
        self._buttons: list[QPushButton] = []
        self._layout = layout
        self.severity = "info"
        self.hide()

    def show_message(
        self, text: str, severity: str = "info", actions: list[tuple[str, Callable[[], None]]] = ()
    ) -> None:
        self.severity = severity
        foreground, background = COLOURS[severity]
        self.setStyleSheet(
            f"QFrame#banner {{ background: {background}; border-radius: 4px; }}"
            f"QFrame#banner QLabel {{ color: {foreground}; }}"
        )
        self.label.setText(text)
        for button in self._buttons:
            button.deleteLater()
        self._buttons = []
        for title, callback in actions:
            button = QPushButton(title)
            button.clicked.connect(callback)
            self._layout.addWidget(button)
            self._buttons.append(button)
        self.show()

    def buttons(self) -> list[QPushButton]:
        return list(self._buttons)

    def clear(self) -> None:
        self.hide()
