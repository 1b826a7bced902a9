"""A page that says plainly that it is not built yet."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget


class PlaceholderPage(QWidget):
    def __init__(self, title: str, summary: str, parent: QWidget | None = None):
        super().__init__(parent)
        layout = QVBoxLayout(self)
        heading = QLabel(f"<h2>{title}</h2>")
        body = QLabel(
            f"<p>{summary}</p><p><b>Not built yet.</b> This page is planned and will arrive "
            "in a coming release; the command line may already offer it "
            "(<code>specdeck --help</code>).</p>"
        )
        body.setWordWrap(True)
        body.setTextFormat(Qt.TextFormat.RichText)
        layout.addWidget(heading)
        layout.addWidget(body)
        layout.addStretch(1)
