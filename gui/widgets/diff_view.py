"""A read-only unified diff with added / removed lines coloured."""

from __future__ import annotations

from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QSyntaxHighlighter,
    QTextCharFormat,
    QTextOption,
)
from PySide6.QtWidgets import QPlainTextEdit, QWidget


def _format(foreground: str, background: str | None = None, bold: bool = False) -> QTextCharFormat:
    fmt = QTextCharFormat()
    fmt.setForeground(QColor(foreground))
    if background:
        fmt.setBackground(QColor(background))
    if bold:
        fmt.setFontWeight(QFont.Weight.Bold)
    return fmt


class _DiffHighlighter(QSyntaxHighlighter):
    ADDED = _format("#14532d", "#dcfce7")
    REMOVED = _format("#7f1d1d", "#fee2e2")
    HUNK = _format("#1e3a8a", bold=True)
    HEADER = _format("#4b5563", bold=True)

    def highlightBlock(self, text: str) -> None:  # noqa: N802 - Qt's name
        if text.startswith(("+++", "---")):
            fmt = self.HEADER
        elif text.startswith("+"):
            fmt = self.ADDED
        elif text.startswith("-"):
            fmt = self.REMOVED
        elif text.startswith("@@"):
            fmt = self.HUNK
        else:
            return
        self.setFormat(0, len(text), fmt)


class DiffView(QPlainTextEdit):
    def __init__(self, parent: QWidget | None = None, placeholder: str = "No changes."):
        super().__init__(parent)
        self.setReadOnly(True)
        # Wrapped: a one-line change (a llama-swap cmd) must not end off-screen to the right;
        # a wrapped line is one block, so its colour covers every row it takes.
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.setPlaceholderText(placeholder)
        self._highlighter = _DiffHighlighter(self.document())

    def set_diff(self, diff: str) -> None:
        self.setPlainText(diff)
