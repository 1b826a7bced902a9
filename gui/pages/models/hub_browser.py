"""The Models page's Hub browser: search the Hub (every format, or one: EXL2, EXL3, GGUF),
pick a repository, and see what it offers: one EXL2 or EXL3 branch per bitrate, labelled with
its format, or GGUF files (their shards together), each with whether it is installed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)
from specdeck.core.errors import CancelledError
from specdeck.core.forms import form_field
from specdeck.core.hub.search import ALL_FORMATS, FORMAT_LABELS, FORMAT_RUNS_ON, FORMATS
from specdeck.gui import form_settings
from specdeck.gui.pages.models.widgets import new_label, new_table, table_item

if TYPE_CHECKING:
    from specdeck.gui.pages.models import ModelsPage

ANY_FAMILY = "any family"
VRAM_TIP = ("The weights' share of GPU memory, estimated from config.json and the bitrate. The KV "
            "cache comes on top; plan the whole draft + target pair on the GPUs & VRAM page.")
FAMILIES = ("", "llama", "qwen2", "mistral", "gemma2", "phi3", "deepseek", "command-r", "yi")
SEARCH_PREFIX = "models/search/"


@dataclass(frozen=True)
class HubSearch:
    """What the Hub browser's search form holds (core.forms' table; every field kept between
    sessions, under SEARCH_PREFIX): the words, the model family ("": any), the format
    (``ALL_FORMATS`` or one of core.hub.search's ``FORMATS``) and the author ("": any)."""

    text: str = form_field("")
    family: str = form_field("")
    format: str = form_field(ALL_FORMATS, choices=(ALL_FORMATS, *FORMATS))
    author: str = form_field("")


class HubBrowser(QObject):
    """Search, results, and the selected repository's variants (part of ModelsPage): owns
    what the shown repository offers and which of it is selected."""

    RESULT_HEADERS = ["Repository", "Downloads", "Likes", "Access", "Format"]
    VARIANT_HEADERS = ["Branch / file", "Bitrate / quant", "Download", "VRAM (weights)", "Files",
                       "Status", "Notes"]
    GGUF_PREFIX = "gguf:"
    """Row data of a GGUF file (EXL2 rows hold their branch)."""

    partials_found = Signal(list)
    """The shown repository's unfinished installs (core.hub.install.PartialInstall)."""
    selection_changed = Signal()
    """Another variant is selected, or the selected one's status changed."""

    def __init__(self, page: ModelsPage, where: Callable[[], tuple[list[Path], Path | None]]):
        """``where``: the library's folders and the install destination, where a
        repository's variants are looked for as installed or unfinished."""
        super().__init__(page)
        self._page = page
        self._where = where
        self.offer: Any = None
        """What the shown repository offers (core.hub.library.RepoOffer); None while it is
        read."""
        self._build()

    def _build(self) -> None:
        self.search_row = search = QHBoxLayout()
        self.search_edit = QLineEdit()
        self.search_edit.setPlaceholderText("Search EXL2, EXL3 and GGUF repositories, e.g. qwen2.5 0.5b instruct")
        self.search_edit.returnPressed.connect(self.search)
        self.family_combo = QComboBox()
        self.family_combo.setEditable(True)
        for family in FAMILIES:
            self.family_combo.addItem(family or ANY_FAMILY)
        self.format_combo = QComboBox()
        self.format_combo.addItem("All formats", ALL_FORMATS)
        for key, label in FORMAT_LABELS.items():
            self.format_combo.addItem(label, key)
            self.format_combo.setItemData(self.format_combo.count() - 1, FORMAT_RUNS_ON[key],
                                          Qt.ItemDataRole.ToolTipRole)
        self.format_combo.setToolTip("EXL2: TabbyAPI exl2-checkpoint · EXL3: TabbyAPI main · "
                                     "GGUF: llama-server, llama-swap, LM Studio, Ollama")
        self.author_edit = QLineEdit()
        self.author_edit.setPlaceholderText("author (optional)")
        self.author_edit.setMaximumWidth(160)
        self.author_edit.returnPressed.connect(self.search)
        self.search_button = QPushButton("Search")
        self.search_button.setDefault(True)
        self.search_button.clicked.connect(self.search)
        search.addWidget(self.search_edit, 1)
        search.addWidget(self.family_combo)
        search.addWidget(self.format_combo)
        search.addWidget(self.author_edit)
        search.addWidget(self.search_button)

        self.results_panel = QWidget()
        left_layout = QVBoxLayout(self.results_panel)
        left_layout.setContentsMargins(0, 0, 0, 0)
        self.results_table = new_table(self.RESULT_HEADERS, stretch=0)
        self.results_table.itemSelectionChanged.connect(self._repo_selected)
        self.search_status = new_label("Search for a model family or name to see EXL2, EXL3 and GGUF "
                                    "repositories.", role="hint")
        left_layout.addWidget(self.results_table, 1)
        left_layout.addWidget(self.search_status)

        self.repo_label = new_label("<b>No repository selected</b>")
        self.repo_label.setTextFormat(Qt.TextFormat.RichText)
        self.variants_table = new_table(self.VARIANT_HEADERS, stretch=len(self.VARIANT_HEADERS) - 1)
        self.variants_table.itemSelectionChanged.connect(self.selection_changed)
        self.show_search(form_settings.restore(SEARCH_PREFIX, HubSearch()))

    def search_form(self) -> HubSearch:
        """The search the form holds."""
        family = self.family_combo.currentText().strip()
        return HubSearch(text=self.search_edit.text(),
                         family="" if family == ANY_FAMILY else family,
                         format=self.format_combo.currentData(),
                         author=self.author_edit.text())

    def show_search(self, search: HubSearch) -> None:
        """Show ``search`` in the form (not run)."""
        self.search_edit.setText(search.text)
        self.family_combo.setCurrentText(search.family or ANY_FAMILY)
        self.format_combo.setCurrentIndex(self.format_combo.findData(search.format))
        self.author_edit.setText(search.author)

    def save(self) -> None:
        """Keep the search form for the next session (gui.form_settings)."""
        form_settings.save(SEARCH_PREFIX, self.search_form())

    def variant_rows(self) -> dict[str, dict[str, str]]:
        """The selected repository's branches and GGUF files: first cell -> its row."""
        from specdeck.gui.widgets.table_text import rows_by_header

        return {row["Branch / file"]: row for row in rows_by_header(self.variants_table)}

    def repositories(self) -> list[str]:
        """The search results, in order."""
        from specdeck.gui.widgets.table_text import rows_by_header

        return [row["Repository"] for row in rows_by_header(self.results_table)]

    def search(self) -> None:
        from specdeck.core.hub import search_repos

        self._page.clear_error()
        form = self.search_form()
        self.save()
        self.search_button.setEnabled(False)
        self.search_status.setText("Searching…")
        self._page.run(
            "search", search_repos, form.text, author=form.author.strip() or None,
            family=form.family or None, formats=form.format,
            finished=lambda hits: self._show_results(hits, form),
            failed=lambda exc: (self.search_button.setEnabled(True), self.search_status.setText(""),
                                self._page.show_error(exc)),
        )

    def _show_results(self, hits: list, form: HubSearch) -> None:
        self.search_button.setEnabled(True)
        table = self.results_table
        table.setRowCount(0)
        for hit in hits:
            row = table.rowCount()
            table.insertRow(row)
            access = "private" if hit.private else ("gated" if hit.gated else "open")
            tags = ", ".join(hit.tags[:8])
            table.setItem(row, 0, table_item(hit.repo_id, f"{hit.repo_id}\n{tags}" if tags else hit.repo_id, data=hit.repo_id))
            table.setItem(row, 1, table_item(f"{hit.downloads:,}", align_right=True))
            table.setItem(row, 2, table_item(f"{hit.likes:,}", align_right=True))
            table.setItem(row, 3, table_item(access))
            table.setItem(row, 4, table_item(hit.format_label, FORMAT_RUNS_ON.get(hit.format or "", "")))
        kind = FORMAT_LABELS.get(form.format, "")  # the format searched for: none for all
        what = f"{kind} repositor" if kind else "repositor"
        self.search_status.setText(
            f"{len(hits)} {what}{'ies' if len(hits) != 1 else 'y'}; pick one to see its bitrates or files."
            if hits else f"No {what}ies match. Try fewer words, another family or another format."
        )

    def select_repo(self, repo_id: str) -> None:
        """Select ``repo_id`` in the results (loading its variants)."""
        for row in range(self.results_table.rowCount()):
            if self.results_table.item(row, 0).data(Qt.ItemDataRole.UserRole) == repo_id:
                self.results_table.selectRow(row)
                return
        self.show_repo(repo_id)

    def _repo_selected(self) -> None:
        rows = self.results_table.selectionModel().selectedRows()
        if rows:
            self._page.clear_error()
            self.show_repo(self.results_table.item(rows[0].row(), 0).data(Qt.ItemDataRole.UserRole))

    def show_repo(self, repo_id: str, select: str | None = None) -> None:
        rows = self.variants_table.selectionModel().selectedRows() if self.offer else []
        same_repo = self.offer is not None and self.offer.repo_id == repo_id
        keep = (self.variants_table.item(rows[0].row(), 0).data(Qt.ItemDataRole.UserRole)
                if rows and same_repo else None)
        keep = select or keep
        self.offer = None
        self.variants_table.setRowCount(0)
        self.repo_label.setText(f"<b>{repo_id}</b> · reading its branches…")
        library_dirs, destination = self._where()
        from specdeck.core.hub.library import repo_offer

        self._page.run(
            "variants", repo_offer, repo_id, [str(d) for d in library_dirs],
            str(destination) if destination else None,
            finished=lambda result: self._show_variants(repo_id, result, keep),
            failed=lambda exc: self._variants_failed(repo_id, exc),
        )

    def _variants_failed(self, repo_id: str, error: BaseException) -> None:
        if isinstance(error, CancelledError):
            return
        self.repo_label.setText(f"<b>{repo_id}</b>")
        self._page.show_error(error)

    def _show_variants(self, repo_id: str, offer, keep: str | None = None) -> None:
        from specdeck.core.hub import format_bytes

        if offer.repo_id != repo_id:
            return
        self.offer = offer
        found = offer.variants
        ggufs = offer.ggufs
        others = "; ".join(f"{b}: {why}" for b, why in found.other_branches)
        counts = [f"{len(found.variants)} bitrate{'s' if len(found.variants) != 1 else ''}"]
        if ggufs and not found.variants:
            counts = []
        if ggufs:
            counts.append(f"{len(ggufs)} GGUF file{'s' if len(ggufs) != 1 else ''}")
        self.repo_label.setText(
            f"<b>{found.repo_id}</b> · {', '.join(counts)}"
            + (f"<br><span style='color:gray'>{others}</span>" if others and not ggufs else "")
        )
        table = self.variants_table
        table.setRowCount(0)
        for variant in found.variants:
            row = table.rowCount()
            table.insertRow(row)
            table.setItem(row, 0, table_item(variant.revision, f"commit {variant.commit}", data=variant.revision))
            fmt = f"{variant.format.upper()} · " if variant.format else ""
            table.setItem(row, 1, table_item(f"{fmt}{variant.label}", f"{variant.format_label}; bitrate from "
                                        f"{variant.bits_source or 'nowhere: unknown'}"))
            table.setItem(row, 2, table_item(format_bytes(variant.total_bytes), align_right=True))
            vram = variant.weights_vram_bytes
            table.setItem(row, 3, table_item(format_bytes(vram) if vram else "?", VRAM_TIP, align_right=True))
            table.setItem(row, 4, table_item(str(variant.file_count), align_right=True))
            table.setItem(row, 5, table_item(offer.state(variant).text))
            notes = "; ".join(variant.notes)
            table.setItem(row, 6, table_item(notes, notes or None))
        self._add_gguf_rows()
        if table.rowCount():
            keys = [table.item(r, 0).data(Qt.ItemDataRole.UserRole) for r in range(table.rowCount())]
            table.selectRow(keys.index(keep) if keep in keys else 0)
        self.partials_found.emit(list(offer.partials))
        self.selection_changed.emit()

    def _add_gguf_rows(self) -> None:
        """One row per GGUF file (shards together): llama.cpp's drafts come as files, one per
        quantization, not as branches."""
        from specdeck.core.hub import format_bytes

        table = self.variants_table
        for choice in self.offer.ggufs:
            row = table.rowCount()
            table.insertRow(row)
            table.setItem(row, 0, table_item(choice.main_file, "a GGUF file on the main branch",
                                        data=self.GGUF_PREFIX + choice.name))
            table.setItem(row, 1, table_item(f"GGUF {choice.quant or '?'}"))
            table.setItem(row, 2, table_item(format_bytes(choice.size), align_right=True))
            table.setItem(row, 3, table_item(f"≈ {format_bytes(choice.size)}", "llama.cpp loads the "
                                        "file's tensors as they are: its size is the weights' "
                                        "VRAM when every layer is offloaded", align_right=True))
            table.setItem(row, 4, table_item(str(len(choice.files)), align_right=True))
            table.setItem(row, 5, table_item(self.offer.gguf_state(choice).text))
            note = ("multimodal projector: not a draft model" if choice.is_projector
                    else "for llama-server (-md); TabbyAPI loads EXL2/EXL3 folders")
            table.setItem(row, 6, table_item(note, note))

    def selected_gguf(self):
        """The GGUF file (a core.hub.gguf.GgufChoice) selected, or None."""
        rows = self.variants_table.selectionModel().selectedRows() if self.offer else []
        if not rows:
            return None
        key = self.variants_table.item(rows[0].row(), 0).data(Qt.ItemDataRole.UserRole) or ""
        if not key.startswith(self.GGUF_PREFIX):
            return None
        name = key[len(self.GGUF_PREFIX):]
        return next((c for c in self.offer.ggufs if c.name == name), None)

    def selected_variant(self):
        rows = self.variants_table.selectionModel().selectedRows() if self.offer else []
        if not rows:
            return None
        revision = self.variants_table.item(rows[0].row(), 0).data(Qt.ItemDataRole.UserRole)
        if str(revision).startswith(self.GGUF_PREFIX):
            return None
        return self.offer.variants.find(revision)

    def select_variant(self, revision: str) -> None:
        for row in range(self.variants_table.rowCount()):
            if self.variants_table.item(row, 0).data(Qt.ItemDataRole.UserRole) == revision:
                self.variants_table.selectRow(row)
                return
        raise KeyError(revision)
