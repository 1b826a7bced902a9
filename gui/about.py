"""The About box: SpecDeck's version and the versions of what it runs on."""

from __future__ import annotations

import html
import platform
import sys
from importlib import metadata

from PySide6.QtCore import Qt, qVersion
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QPushButton,
    QTextBrowser,
    QVBoxLayout,
)

from specdeck import SUMMARY, __version__

# Distribution names whose versions matter when a user reports a problem. Read from
# metadata: importing torch or exllamav2 here would cost seconds (or fail without CUDA).
COMPONENTS = (
    "PySide6-Essentials",
    "pyqtgraph",
    "numpy",
    "ruamel.yaml",
    "huggingface-hub",
    "tokenizers",
    "nvidia-ml-py",
    "torch",
    "transformers",
    "exllamav2",
)


def component_versions() -> list[tuple[str, str]]:
    rows = [("SpecDeck", __version__), ("Python", platform.python_version()), ("Qt", qVersion())]
    for name in COMPONENTS:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            version = "not installed"
        rows.append((name, version))
    rows.append(("Platform", f"{platform.system()} {platform.release()} ({platform.machine()})"))
    return rows


def versions_text() -> str:
    return "\n".join(f"{name}: {version}" for name, version in component_versions())


class AboutDialog(QDialog):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setWindowTitle("About SpecDeck")
        layout = QVBoxLayout(self)
        title = QLabel(
            f"<h2>SpecDeck {__version__}</h2>"
            f"<p>{html.escape(SUMMARY)}.</p><p>Pick a draft, check it, fit it, install it, "
            "set it up, and prove the speed-up.</p>"
        )
        title.setWordWrap(True)
        title.setTextFormat(Qt.TextFormat.RichText)
        layout.addWidget(title)
        table = QTextBrowser()
        rows = "".join(
            f"<tr><td><b>{name}</b></td><td>&nbsp;&nbsp;{version}</td></tr>"
            for name, version in component_versions()
        )
        table.setHtml(f"<table>{rows}</table>")
        table.setMinimumSize(420, 260)
        layout.addWidget(table)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        copy = QPushButton("Copy versions")
        copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(versions_text()))
        buttons.addButton(copy, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.python_executable = sys.executable
