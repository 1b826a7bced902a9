"""The Models page's local library: every model folder SpecDeck knows (config.yml's model and
draft folders, extra folders, the install destination) with its architecture, size,
bitrate, context, vocabulary, a compatibility badge against config.yml's target model, and
where it came from. The folders are scanned in a worker (core.hub.library).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)
from specdeck.core.compat.report import CompatVerdict
from specdeck.gui.pages.models.widgets import new_label, new_table, table_item

if TYPE_CHECKING:
    from specdeck.gui.pages.models import ModelsPage

# Text colours of the library's compatibility column (the badge colours of style.qss).
VERDICT_COLOURS = {
    CompatVerdict.COMPATIBLE: "#16a34a",
    CompatVerdict.WARNINGS: "#d97706",
    CompatVerdict.INCOMPATIBLE: "#dc2626",
}
"""Keyed by verdict (a str enum: core.hub.library.Badge's value finds it)."""


class Library(QObject):
    """The library's box, its scan and its compatibility column (part of ModelsPage): owns
    the folders the last scan read."""

    LIBRARY_HEADERS = ["Name", "Architecture", "Parameters", "Size", "Quantization", "Context", "Vocab",
                       "Compatibility", "Installed from"]

    partials_found = Signal(list)
    """The unfinished installs a scan found in the install destination
    (core.hub.install.PartialInstall)."""

    def __init__(self, page: ModelsPage, destination: Callable[[], Path | None]):
        """``destination``: where installs go now (the folder is scanned too)."""
        super().__init__(page)
        self._page = page
        self._destination = destination
        self.dirs: list[Path] = []
        """The folders the last scan read (the Hub browser looks there for installed copies)."""
        self.box = self._build()

    def _build(self) -> QWidget:
        box = QGroupBox("Local library")
        layout = QVBoxLayout(box)
        row = QHBoxLayout()
        self.folders_label = new_label("", role="hint")
        self.folders_label.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        add = QPushButton("Add folder…")
        add.clicked.connect(self._add_folder)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setToolTip("Scan the folders again")
        self.refresh_button.clicked.connect(self.refresh)
        row.addWidget(self.folders_label, 1)
        row.addWidget(add)
        row.addWidget(self.refresh_button)
        layout.addLayout(row)
        self.library_table = new_table(self.LIBRARY_HEADERS, stretch=len(self.LIBRARY_HEADERS) - 1)
        layout.addWidget(self.library_table)
        self.library_status = new_label("", role="hint")
        layout.addWidget(self.library_status)
        return box

    def library_rows(self) -> dict[str, dict[str, str]]:
        """The library table: model name -> {column header: text}."""
        from specdeck.gui.widgets.table_text import rows_by_header

        return {row["Name"]: row for row in rows_by_header(self.library_table)}

    def _add_folder(self) -> None:
        chosen = QFileDialog.getExistingDirectory(self._page, "Add a model folder", str(Path.home()))
        if chosen:
            context = self._page.context
            settings = context.settings
            if chosen not in settings.extra_model_dirs:
                from dataclasses import replace

                context.update_settings(replace(settings, extra_model_dirs=(*settings.extra_model_dirs, chosen)))
            self.refresh()

    def refresh(self) -> None:
        from specdeck.core.hub.library import scan_for_install

        # Scans can overlap (a new folder while one runs): only the latest one is shown.
        destination = self._destination()
        self._page.run("library", scan_for_install, self._page.config_file(),
                       str(destination) if destination else None, finished=self._show_library)

    def _show_library(self, scan) -> None:
        from specdeck.core.hub import format_bytes
        from specdeck.core.hub.library import target_badges
        from specdeck.core.hub.search import SERVER_OF

        self.dirs = list(scan.dirs)
        self.folders_label.setText(
            "Folders: " + (", ".join(str(d) for d in scan.dirs) if scan.dirs else
                           "none yet (open config.yml or add a folder)")
        )
        table = self.library_table
        table.setRowCount(0)
        for entry in scan.entries:
            m = entry.model
            row = table.rowCount()
            table.insertRow(row)
            source = entry.source.spec if entry.source else ""
            cells = [
                table_item(m.name, str(m.path), data=str(m.path)),
                table_item(m.arch.model_type),
                table_item(m.parameters_label, align_right=True),
                table_item(format_bytes(m.files_bytes), align_right=True),
                table_item(m.quant.label, f"Runs on {SERVER_OF.get(m.quant.method, 'no server SpecDeck drives')}"),
                table_item(f"{m.context_length:,}", align_right=True),
                table_item(f"{m.arch.vocab_size:,}", align_right=True),
                table_item("…", "Checking against config.yml's target model"),
                table_item(source, f"commit {entry.source.commit}" if entry.source else "not installed by SpecDeck"),
            ]
            for column, cell in enumerate(cells):
                table.setItem(row, column, cell)
        notes = [f"{p.path.name}: {p.reason}" for p in scan.problems] + list(scan.errors)
        count = len(scan.entries)
        status = f"{count} model{'s' if count != 1 else ''}."
        if notes:
            status += " Could not read: " + "; ".join(notes)
        self.library_status.setText(status)
        self.partials_found.emit(list(scan.partials))
        drafts = [e.model.path.as_posix() for e in scan.entries]
        self._page.run("compatibility", target_badges, self._page.config_file(), drafts,
                       finished=self._show_compatibility, progress=self._show_compatibility,
                       failed=lambda exc: self._show_compatibility({}))

    def _show_compatibility(self, badges: dict) -> None:
        table = self.library_table
        column = self.LIBRARY_HEADERS.index("Compatibility")
        for row in range(table.rowCount()):
            path = table.item(row, 0).data(Qt.ItemDataRole.UserRole)
            cell = table.item(row, column)
            badge = badges.get(path)
            if badge is not None:
                cell.setText(badge.label)
                cell.setToolTip(badge.summary)
                if badge.verdict in VERDICT_COLOURS:
                    cell.setForeground(QColor(VERDICT_COLOURS[badge.verdict]))
            elif cell.text() == "…":
                cell.setText("—")
                cell.setToolTip("Not checked: needs config.yml with a target model, and the compatibility checker.")
