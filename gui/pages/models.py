"""The Models page: the local model library, and drafts to install from the Hub (an EXL2
branch for TabbyAPI exl2-checkpoint, an EXL3 branch for TabbyAPI main, or a GGUF file for
llama-server).

Top: every model folder SpecDeck knows (config.yml's model and draft folders, extra folders,
the install destination) with its architecture, size, bitrate, context, vocabulary, a
compatibility badge against config.yml's target model, and where it came from.

Bottom: search the Hub (every format, or one: EXL2, EXL3, GGUF), pick a repository, pick a
bitrate (one EXL2 or EXL3 branch each, labelled with its format) or a GGUF
file (its shards together), Install. Progress shows bytes, rate, time left and the file;
Cancel keeps what was downloaded, and an unfinished install (cancelled, failed, or cut off by
a restart) is offered for Resume. After an EXL2 or EXL3 install, "Use as draft" previews the
config.yml change (refused, with the reason, when config.yml's TabbyAPI branch cannot load
that format) and saves it atomically through the config editor; after a GGUF install,
the page shows the llama-server flags that draft with it.

Everything slow (network, disk scans, keyring, tokenizers) runs in gui.workers. What is
installed, in which state, under which folder name, and what a folder is for is decided in
specdeck.core.hub.library; the page renders it.
"""

from __future__ import annotations

import html
import logging
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QLineEdit,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from specdeck.core import changed
from specdeck.core.errors import CancelledError
from specdeck.gui import form_settings
from specdeck.gui.context import AppContext
from specdeck.gui.pages.compatibility import BADGE_ROLES
from specdeck.gui.widgets.banner import Banner
from specdeck.gui.workers import TaskHandle, Tasks

log = logging.getLogger(__name__)

SETTINGS_PREFIX = "models/"


@dataclass(frozen=True)
class InstallChoice:
    """What the page keeps between sessions: the folder the user chose to install into
    ("": config.yml's draft_model_dir, which follows the config opened)."""

    install_dir: str = ""
ANY_FAMILY = "any family"
VRAM_TIP = ("The weights' share of GPU memory, estimated from config.json and the bitrate. The KV "
            "cache comes on top; plan the whole draft + target pair on the GPUs & VRAM page.")
FAMILIES = ("", "llama", "qwen2", "mistral", "gemma2", "phi3", "deepseek", "command-r", "yi")
PROGRESS_STEPS = 1000
# Text colours of the library's compatibility column (the badge colours of style.qss).
VERDICT_COLOURS = {
    "compatible": "#16a34a",
    "compatible_with_warnings": "#d97706",
    "incompatible": "#dc2626",
}


def create_page(context: AppContext) -> QWidget:
    return ModelsPage(context)


def _item(text: str, tooltip: str | None = None, align_right: bool = False, data: Any = None) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    item.setFlags(Qt.ItemFlag.ItemIsSelectable | Qt.ItemFlag.ItemIsEnabled)
    if tooltip:
        item.setToolTip(tooltip)
    if align_right:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    if data is not None:
        item.setData(Qt.ItemDataRole.UserRole, data)
    return item


def _table(headers: list[str], stretch: int = 0) -> QTableWidget:
    table = QTableWidget(0, len(headers))
    table.setHorizontalHeaderLabels(headers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.verticalHeader().setVisible(False)
    table.setAlternatingRowColors(True)
    table.setWordWrap(False)
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Stretch)
    return table


def _label(text: str = "", role: str | None = None, wrap: bool = True) -> QLabel:
    label = QLabel(text)
    label.setWordWrap(wrap)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    if role:
        label.setProperty("role", role)
    return label


def _set_role(label: QLabel, role: str | None) -> None:
    label.setProperty("role", role or "")
    label.style().unpolish(label)
    label.style().polish(label)


# ---------------------------------------------------------------------------------------
# The calls that run in workers: plain functions of core, nothing Qt.


def _token_status() -> str:
    from specdeck.core.hub import resolve_token

    token = resolve_token()
    if token is None:
        return "No Hugging Face token: public repositories only."
    return f"Using the Hugging Face token from {token.source.value}."


def _sign_in(value: str) -> str:
    from specdeck.core.hub import TokenSource, save_token, whoami

    user = whoami(value)
    where = save_token(value)
    kept = "kept in the system keyring" if where == TokenSource.KEYRING else "kept for this session only (no system keyring)"
    return f"Signed in as {user}; token {kept}."


def _forget() -> str:
    from specdeck.core.hub import forget_token

    forget_token()
    return _token_status()


def _install_and_use(install, *args, progress=None, cancel=None, **kwargs):
    """Worker: ``install`` (an EXL2 branch or a GGUF file), then what the installed folder
    is for (read from its files here, not on the GUI thread)."""
    from specdeck.core.hub.library import installed_use

    result = install(*args, progress=progress, cancel=cancel, **kwargs)
    return result, installed_use(result.path)


# ---------------------------------------------------------------------------------------


class ModelsPage(QWidget):
    install_finished = Signal(object)
    """An InstallResult, after a successful install."""

    LIBRARY_HEADERS = ["Name", "Architecture", "Parameters", "Size", "Quantization", "Context", "Vocab",
                       "Compatibility", "Installed from"]
    RESULT_HEADERS = ["Repository", "Downloads", "Likes", "Access", "Format"]
    VARIANT_HEADERS = ["Branch / file", "Bitrate / quant", "Download", "VRAM (weights)", "Files",
                       "Status", "Notes"]
    GGUF_PREFIX = "gguf:"
    """Row data of a GGUF file (EXL2 rows hold their branch)."""

    def __init__(self, context: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.context = context
        self.tasks = Tasks(self)
        """Keys: "library" (the scan), "compatibility", "variants" (the selected repository's),
        "install", "search", "token", ...: a newer request of a key replaces the older."""
        self._offer: Any = None
        """What the selected repository offers (core.hub.library.RepoOffer)."""
        self._partials: list = []
        self._library_dirs: list[Path] = []
        self._last_result: Any = None
        self._install_dir: Path | None = None
        self._rename_offer: Any = None  # a Variant whose folder name clashed

        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 8, 10, 8)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self._build_library())
        splitter.addWidget(self._build_hub())
        splitter.setStretchFactor(0, 2)
        splitter.setStretchFactor(1, 5)
        splitter.setSizes([240, 520])
        splitter.setChildrenCollapsible(False)
        layout.addWidget(splitter, 1)

        context.config_path_changed.connect(lambda _path: self._config_changed())
        context.file_changed.connect(self._file_changed)
        stored = form_settings.restore(SETTINGS_PREFIX, InstallChoice()).install_dir
        if stored:  # a folder the user chose on this page wins over config.yml's
            self._install_dir = Path(stored)
            self._show_destination()
            self.refresh_library()
        else:
            self._use_config_destination()
        self._run("token", _token_status, finished=self.token_label.setText)

    def _file_changed(self, _path: str, kind: str) -> None:
        """config.yml names the library's folder and the draft in use."""
        if kind == changed.TABBY_CONFIG:  # an install re-reads it when it ends
            self.refresh_library()

    # building ------------------------------------------------------------------------
    def _build_library(self) -> QWidget:
        box = QGroupBox("Local library")
        layout = QVBoxLayout(box)
        row = QHBoxLayout()
        self.folders_label = _label("", role="hint")
        self.folders_label.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        add = QPushButton("Add folder…")
        add.clicked.connect(self._add_folder)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setToolTip("Scan the folders again")
        self.refresh_button.clicked.connect(self.refresh_library)
        row.addWidget(self.folders_label, 1)
        row.addWidget(add)
        row.addWidget(self.refresh_button)
        layout.addLayout(row)
        self.library_table = _table(self.LIBRARY_HEADERS, stretch=len(self.LIBRARY_HEADERS) - 1)
        layout.addWidget(self.library_table)
        self.library_status = _label("", role="hint")
        layout.addWidget(self.library_status)
        return box

    def _build_hub(self) -> QWidget:
        box = QGroupBox("Install a draft model (EXL2 or EXL3 branch, or GGUF file) from the Hugging Face Hub")
        layout = QVBoxLayout(box)
        self.error_banner = Banner()
        layout.addWidget(self.error_banner)

        search = QHBoxLayout()
        self.search_edit = QLineEdit()
        self.search_edit.setPlaceholderText("Search EXL2, EXL3 and GGUF repositories, e.g. qwen2.5 0.5b instruct")
        self.search_edit.returnPressed.connect(self.search)
        self.family_combo = QComboBox()
        self.family_combo.setEditable(True)
        for family in FAMILIES:
            self.family_combo.addItem(family or ANY_FAMILY)
        from specdeck.core.hub.search import FORMAT_LABELS, FORMAT_RUNS_ON

        self.format_combo = QComboBox()
        self.format_combo.addItem("All formats", "all")
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
        layout.addLayout(search)

        token = QHBoxLayout()
        self.token_label = _label("", role="hint")
        self.token_button = QPushButton("Set token…")
        self.token_button.setToolTip("For gated and private repositories. Stored in the system keyring, "
                                     "never in config.yml or SpecDeck's settings.")
        self.token_button.clicked.connect(self._ask_token)
        self.forget_button = QPushButton("Forget token")
        self.forget_button.clicked.connect(
            lambda: self._run("token", _forget, finished=self.token_label.setText))
        token.addWidget(self.token_label, 1)
        token.addWidget(self.token_button)
        token.addWidget(self.forget_button)
        layout.addLayout(token)

        split = QSplitter(Qt.Orientation.Horizontal)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        self.results_table = _table(self.RESULT_HEADERS, stretch=0)
        self.results_table.itemSelectionChanged.connect(self._repo_selected)
        self.search_status = _label("Search for a model family or name to see EXL2, EXL3 and GGUF "
                                    "repositories.", role="hint")
        left_layout.addWidget(self.results_table, 1)
        left_layout.addWidget(self.search_status)
        split.addWidget(left)
        split.addWidget(self._build_install())
        split.setStretchFactor(0, 2)
        split.setStretchFactor(1, 3)
        layout.addWidget(split, 1)
        return box

    def _build_install(self) -> QWidget:
        panel = QWidget()
        layout = QVBoxLayout(panel)
        layout.setContentsMargins(0, 0, 0, 0)
        self.repo_label = _label("<b>No repository selected</b>")
        self.repo_label.setTextFormat(Qt.TextFormat.RichText)
        layout.addWidget(self.repo_label)
        self.variants_table = _table(self.VARIANT_HEADERS, stretch=len(self.VARIANT_HEADERS) - 1)
        self.variants_table.itemSelectionChanged.connect(self._update_buttons)
        layout.addWidget(self.variants_table, 1)

        dest = QHBoxLayout()
        dest.addWidget(QLabel("Install into:"))
        self.dest_label = _label("")
        self.dest_label.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        dest.addWidget(self.dest_label, 1)
        change = QPushButton("Change…")
        change.clicked.connect(self._choose_destination)
        dest.addWidget(change)
        layout.addLayout(dest)

        self.partial_banner = Banner()
        layout.addWidget(self.partial_banner)

        actions = QHBoxLayout()
        self.install_button = QPushButton("Install")
        self.install_button.setSizePolicy(QSizePolicy.Policy.Minimum, QSizePolicy.Policy.Fixed)
        self.install_button.clicked.connect(self.start_install)
        self.progress_bar = QProgressBar()
        self.progress_bar.setRange(0, PROGRESS_STEPS)
        self.progress_bar.setTextVisible(True)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel_install)
        self.cancel_button.setEnabled(False)
        actions.addWidget(self.install_button)
        actions.addWidget(self.progress_bar, 1)
        actions.addWidget(self.cancel_button)
        layout.addLayout(actions)
        self.progress_label = _label("")
        layout.addWidget(self.progress_label)

        result = QGridLayout()
        self.result_label = _label("")
        self.result_label.setTextFormat(Qt.TextFormat.RichText)
        self.compat_badge = _label("", wrap=False)
        self.compat_badge.hide()
        self.use_button = QPushButton("Use as draft")
        self.use_button.setToolTip("Set this model as draft_model in config.yml (you see the change first).")
        self.use_button.clicked.connect(self.use_as_draft)
        self.use_button.hide()
        result.addWidget(self.result_label, 0, 0, 1, 3)
        result.addWidget(self.compat_badge, 1, 0)
        result.addWidget(self.use_button, 1, 2)
        result.setColumnStretch(1, 1)
        layout.addLayout(result)
        self._update_buttons()
        return panel

    # workers -------------------------------------------------------------------------
    def _run(self, key: str | None, fn, *args, finished=None, failed=None, progress=None,
             **kwargs) -> TaskHandle | None:
        """Run ``fn`` in a worker as the newest call of ``key`` (None: a call of its own); its
        result, error and progress reach the callbacks on the GUI thread while it is the
        newest, and never after shutdown()."""
        return self.tasks.run(key, fn, *args, on_result=finished,
                              on_error=failed or self._show_error, on_progress=progress, **kwargs)

    def _show_error(self, error: BaseException) -> None:
        self.error_banner.show_message(html.escape(str(error)), "error")

    def _clear_error(self) -> None:
        self.error_banner.clear()

    # what the page shows, by column name (tests and tools read these) ------------------
    def library_rows(self) -> dict[str, dict[str, str]]:
        """The library table: model name -> {column header: text}."""
        from specdeck.gui.widgets.table_text import rows_by_header

        return {row["Name"]: row for row in rows_by_header(self.library_table)}

    def variant_rows(self) -> dict[str, dict[str, str]]:
        """The selected repository's branches and GGUF files: first cell -> its row."""
        from specdeck.gui.widgets.table_text import rows_by_header

        return {row["Branch / file"]: row for row in rows_by_header(self.variants_table)}

    def repositories(self) -> list[str]:
        """The search results, in order."""
        from specdeck.gui.widgets.table_text import rows_by_header

        return [row["Repository"] for row in rows_by_header(self.results_table)]

    @property
    def partials(self) -> list:
        """Unfinished installs offered for Resume (core.hub.install.PartialInstall)."""
        return list(self._partials)

    def busy(self) -> bool:
        """Whether any call is still in a worker (after shutdown: until each has stopped)."""
        return self.tasks.running()

    def installing(self) -> bool:
        return self.tasks.running("install")

    def shutdown(self) -> None:
        """Stop background work when the window closes; a running install stays resumable."""
        self.tasks.close()

    # library -------------------------------------------------------------------------
    @property
    def install_dir(self) -> Path | None:
        return self._install_dir

    def _config_changed(self) -> None:
        """Another config.yml was opened: install into its draft_model_dir from now on."""
        form_settings.save(SETTINGS_PREFIX, InstallChoice())
        self._use_config_destination()

    def _use_config_destination(self) -> None:
        self._install_dir = None
        self._show_destination()
        self.refresh_library()
        self._run("default_dir", self._default_dir, finished=self._got_default_dir,
                  failed=lambda exc: self._got_default_dir(None))

    def _default_dir(self) -> Path | None:
        from specdeck.core.hub import default_install_dir

        return default_install_dir(self._config_path())

    def _got_default_dir(self, path: Path | None) -> None:
        if path is not None and self._install_dir is None:
            self._install_dir = Path(path)
            self._show_destination()
            self.refresh_library()

    def _config_path(self) -> str | None:
        path = self.context.config_path
        return str(path) if path else None

    def set_install_dir(self, path: str | Path) -> None:
        self._install_dir = Path(path)
        form_settings.save(SETTINGS_PREFIX, InstallChoice(str(self._install_dir)))
        self._show_destination()
        self.refresh_library()

    def _show_destination(self) -> None:
        if self._install_dir is None:
            self.dest_label.setText("no folder yet: open your config.yml (draft_model_dir) or choose one")
            _set_role(self.dest_label, "error")
        else:
            self.dest_label.setText(str(self._install_dir))
            _set_role(self.dest_label, None)
        self._update_buttons()

    def _choose_destination(self) -> None:
        start = str(self._install_dir or Path.home())
        chosen = QFileDialog.getExistingDirectory(self, "Install draft models into", start)
        if chosen:
            self.set_install_dir(chosen)

    def _add_folder(self) -> None:
        chosen = QFileDialog.getExistingDirectory(self, "Add a model folder", str(Path.home()))
        if chosen:
            settings = self.context.settings
            if chosen not in settings.extra_model_dirs:
                from dataclasses import replace

                self.context.update_settings(replace(settings, extra_model_dirs=(*settings.extra_model_dirs, chosen)))
            self.refresh_library()

    def refresh_library(self) -> None:
        from specdeck.core.hub.library import scan_for_install

        # Scans can overlap (a new folder while one runs): only the latest one is shown.
        self._run("library", scan_for_install, self._config_path(),
                  str(self._install_dir) if self._install_dir else None,
                  finished=self._show_library)

    def _show_library(self, scan) -> None:
        from specdeck.core.hub import format_bytes
        from specdeck.core.hub.library import target_badges
        from specdeck.core.hub.search import SERVER_OF

        self._library_dirs = list(scan.dirs)
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
                _item(m.name, str(m.path), data=str(m.path)),
                _item(m.arch.model_type),
                _item(m.parameters_label, align_right=True),
                _item(format_bytes(m.files_bytes), align_right=True),
                _item(m.quant.label, f"Runs on {SERVER_OF.get(m.quant.method, 'no server SpecDeck drives')}"),
                _item(f"{m.context_length:,}", align_right=True),
                _item(f"{m.arch.vocab_size:,}", align_right=True),
                _item("…", "Checking against config.yml's target model"),
                _item(source, f"commit {entry.source.commit}" if entry.source else "not installed by SpecDeck"),
            ]
            for column, cell in enumerate(cells):
                table.setItem(row, column, cell)
        notes = [f"{p.path.name}: {p.reason}" for p in scan.problems] + list(scan.errors)
        count = len(scan.entries)
        status = f"{count} model{'s' if count != 1 else ''}."
        if notes:
            status += " Could not read: " + "; ".join(notes)
        self.library_status.setText(status)
        self._partials = list(scan.partials)
        self._show_partials()
        drafts = [e.model.path.as_posix() for e in scan.entries]
        self._run("compatibility", target_badges, self._config_path(), drafts,
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

    # search and variants -------------------------------------------------------------
    def search(self) -> None:
        from specdeck.core.hub import search_repos

        self._clear_error()
        family = self.family_combo.currentText().strip()
        if family == ANY_FAMILY:
            family = ""
        self.search_button.setEnabled(False)
        self.search_status.setText("Searching…")
        self._run(
            "search", search_repos, self.search_edit.text(), author=self.author_edit.text() or None,
            family=family or None, formats=self.format_combo.currentData(),
            finished=self._show_results,
            failed=lambda exc: (self.search_button.setEnabled(True), self.search_status.setText(""),
                                self._show_error(exc)),
        )

    def _show_results(self, hits: list) -> None:
        from specdeck.core.hub.search import FORMAT_RUNS_ON

        self.search_button.setEnabled(True)
        table = self.results_table
        table.setRowCount(0)
        for hit in hits:
            row = table.rowCount()
            table.insertRow(row)
            access = "private" if hit.private else ("gated" if hit.gated else "open")
            tags = ", ".join(hit.tags[:8])
            table.setItem(row, 0, _item(hit.repo_id, f"{hit.repo_id}\n{tags}" if tags else hit.repo_id, data=hit.repo_id))
            table.setItem(row, 1, _item(f"{hit.downloads:,}", align_right=True))
            table.setItem(row, 2, _item(f"{hit.likes:,}", align_right=True))
            table.setItem(row, 3, _item(access))
            table.setItem(row, 4, _item(hit.format_label, FORMAT_RUNS_ON.get(hit.format or "", "")))
        kind = self.format_combo.currentText() if self.format_combo.currentData() != "all" else ""
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
            self._clear_error()
            self.show_repo(self.results_table.item(rows[0].row(), 0).data(Qt.ItemDataRole.UserRole))

    def request_install(self, repo_id: str, revision: str = "") -> None:
        """Another page asked for this repo (e.g. a Hub suggestion on Compatibility): show its
        variants with ``revision`` selected, ready for the user's Install click."""
        self.search_edit.setText(repo_id)
        self.show_repo(repo_id, select=revision or None)
        self.context.show_status(f"Pick a bitrate of {repo_id} and press Install.")

    def show_repo(self, repo_id: str, select: str | None = None) -> None:
        rows = self.variants_table.selectionModel().selectedRows() if self._offer else []
        same_repo = self._offer is not None and self._offer.repo_id == repo_id
        keep = (self.variants_table.item(rows[0].row(), 0).data(Qt.ItemDataRole.UserRole)
                if rows and same_repo else None)
        keep = select or keep
        self._offer = None
        self.variants_table.setRowCount(0)
        self.repo_label.setText(f"<b>{repo_id}</b> · reading its branches…")
        dirs = [str(d) for d in self._library_dirs]
        from specdeck.core.hub.library import repo_offer

        self._run(
            "variants", repo_offer, repo_id, dirs,
            str(self._install_dir) if self._install_dir else None,
            finished=lambda result: self._show_variants(repo_id, result, keep),
            failed=lambda exc: self._variants_failed(repo_id, exc),
        )

    def _variants_failed(self, repo_id: str, error: BaseException) -> None:
        if isinstance(error, CancelledError):
            return
        self.repo_label.setText(f"<b>{repo_id}</b>")
        self._show_error(error)

    def _show_variants(self, repo_id: str, offer, keep: str | None = None) -> None:
        from specdeck.core.hub import format_bytes

        if offer.repo_id != repo_id:
            return
        self._offer = offer
        found = offer.variants
        self._partials = list(offer.partials)
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
            table.setItem(row, 0, _item(variant.revision, f"commit {variant.commit}", data=variant.revision))
            fmt = f"{variant.format.upper()} · " if variant.format else ""
            table.setItem(row, 1, _item(f"{fmt}{variant.label}", f"{variant.format_label}; bitrate from "
                                        f"{variant.bits_source or 'nowhere: unknown'}"))
            table.setItem(row, 2, _item(format_bytes(variant.total_bytes), align_right=True))
            vram = variant.weights_vram_bytes
            table.setItem(row, 3, _item(format_bytes(vram) if vram else "?", VRAM_TIP, align_right=True))
            table.setItem(row, 4, _item(str(variant.file_count), align_right=True))
            table.setItem(row, 5, _item(offer.state(variant).text))
            notes = "; ".join(variant.notes)
            table.setItem(row, 6, _item(notes, notes or None))
        self._add_gguf_rows()
        if table.rowCount():
            keys = [table.item(r, 0).data(Qt.ItemDataRole.UserRole) for r in range(table.rowCount())]
            table.selectRow(keys.index(keep) if keep in keys else 0)
        self._show_partials()
        self._update_buttons()

    def _add_gguf_rows(self) -> None:
        """One row per GGUF file (shards together): llama.cpp's drafts come as files, one per
        quantization, not as branches."""
        from specdeck.core.hub import format_bytes

        table = self.variants_table
        for choice in self._offer.ggufs:
            row = table.rowCount()
            table.insertRow(row)
            table.setItem(row, 0, _item(choice.main_file, "a GGUF file on the main branch",
                                        data=self.GGUF_PREFIX + choice.name))
            table.setItem(row, 1, _item(f"GGUF {choice.quant or '?'}"))
            table.setItem(row, 2, _item(format_bytes(choice.size), align_right=True))
            table.setItem(row, 3, _item(f"≈ {format_bytes(choice.size)}", "llama.cpp loads the "
                                        "file's tensors as they are: its size is the weights' "
                                        "VRAM when every layer is offloaded", align_right=True))
            table.setItem(row, 4, _item(str(len(choice.files)), align_right=True))
            table.setItem(row, 5, _item(self._offer.gguf_state(choice).text))
            note = ("multimodal projector: not a draft model" if choice.is_projector
                    else "for llama-server (-md); TabbyAPI loads EXL2/EXL3 folders")
            table.setItem(row, 6, _item(note, note))

    def selected_gguf(self):
        """The GGUF file (a core.hub.gguf.GgufChoice) selected, or None."""
        rows = self.variants_table.selectionModel().selectedRows() if self._offer else []
        if not rows:
            return None
        key = self.variants_table.item(rows[0].row(), 0).data(Qt.ItemDataRole.UserRole) or ""
        if not key.startswith(self.GGUF_PREFIX):
            return None
        name = key[len(self.GGUF_PREFIX):]
        return next((c for c in self._offer.ggufs if c.name == name), None)

    def selected_variant(self):
        rows = self.variants_table.selectionModel().selectedRows() if self._offer else []
        if not rows:
            return None
        revision = self.variants_table.item(rows[0].row(), 0).data(Qt.ItemDataRole.UserRole)
        if str(revision).startswith(self.GGUF_PREFIX):
            return None
        return self._offer.variants.find(revision)

    def select_variant(self, revision: str) -> None:
        for row in range(self.variants_table.rowCount()):
            if self.variants_table.item(row, 0).data(Qt.ItemDataRole.UserRole) == revision:
                self.variants_table.selectRow(row)
                return
        raise KeyError(revision)

    # install -------------------------------------------------------------------------
    def _update_buttons(self) -> None:
        installing = self.installing()
        gguf = self.selected_gguf() if hasattr(self, "variants_table") else None
        if gguf is not None:
            installed = self._offer.gguf_state(gguf).installed
            self.install_button.setEnabled(self._install_dir is not None and not installing
                                           and not installed and not gguf.is_projector)
            self.install_button.setText("Installed" if installed else f"Install GGUF {gguf.quant or gguf.name}")
            self.install_button.setToolTip(
                "A multimodal projector, not a draft model." if gguf.is_projector else
                f"Installs {len(gguf.files)} file(s) into {self._install_dir or '?'}/"
                f"{self._offer.gguf_folder(gguf)}")
            self.cancel_button.setEnabled(installing)
            return
        variant = self.selected_variant() if hasattr(self, "variants_table") else None
        installed = variant is not None and self._offer.state(variant).installed
        can = variant is not None and self._install_dir is not None and not installing and not installed
        self.install_button.setEnabled(can)
        if installed:
            self.install_button.setText("Installed")
            self.install_button.setToolTip("This exact version is already in the library.")
        elif variant is not None:
            self.install_button.setText(f"Install {variant.label}")
            self.install_button.setToolTip(f"Installs as {self._install_dir or '?'}/{variant.folder_name}")
        else:
            self.install_button.setText("Install")
        self.cancel_button.setEnabled(installing)

    def start_install(self, name: str | None = None) -> None:
        gguf = self.selected_gguf()
        if gguf is not None and self._install_dir is not None and not self.installing():
            self._begin_install(self._offer.repo_id, "main", name, gguf=gguf.name)
            return
        variant = self.selected_variant()
        if variant is None or self._install_dir is None or self.installing():
            return
        self._begin_install(variant.repo_id, variant.revision, name)

    def resume_install(self) -> None:
        if self._partials and not self.installing():
            partial = self._partials[0]
            self._begin_install(partial.repo_id, partial.revision, partial.folder_name,
                                gguf=partial.gguf)

    def _begin_install(self, repo_id: str, revision: str, name: str | None,
                       gguf: str | None = None) -> None:
        from specdeck.core.hub import install

        self._clear_error()
        self.result_label.clear()
        self.use_button.hide()
        self.compat_badge.hide()
        self.progress_bar.setValue(0)
        self.progress_label.setText(f"Starting {repo_id}@{revision}" + (f" {gguf}" if gguf else "") + "…")
        if gguf is not None:
            from specdeck.core.hub.gguf import install_gguf

            call, args = install_gguf, (repo_id, gguf, str(self._install_dir))
        else:
            call, args = install, (repo_id, revision, self._install_dir)
        handle = self.tasks.run("install", _install_and_use, call, *args, name=name,
                                on_result=lambda done: self._install_done(*done),
                                on_error=self._install_failed, on_progress=self._install_progress,
                                on_done=self._install_ended)
        if handle is None:
            return
        self._show_partials()
        self._update_buttons()

    def cancel_install(self) -> None:
        if self.installing():
            self.progress_label.setText("Cancelling…")
            self.tasks.stop("install")

    def _install_progress(self, p) -> None:
        self.progress_bar.setValue(int(p.fraction * PROGRESS_STEPS))
        self.progress_bar.setFormat(f"{p.fraction:.0%}")
        self.progress_label.setText(p.describe())

    def _install_ended(self) -> None:
        self._update_buttons()
        self.refresh_library()
        if self._offer is not None:
            self.show_repo(self._offer.repo_id)  # new statuses: installed, unfinished
        offer, self._rename_offer = self._rename_offer, None
        if offer is not None:
            self._offer_other_name(offer)

    def _install_done(self, result, use) -> None:
        """``use``: what the installed folder is for (core.hub.library.InstalledUse)."""
        self._last_result = result
        self.context.announce(result.changed)
        self.progress_bar.setValue(PROGRESS_STEPS)
        self.progress_bar.setFormat("100%")
        self.progress_label.setText(
            "Already installed: nothing to download." if result.status == "already installed"
            else "Installed; every file's size and checksum verified."
        )
        m = result.model
        facts = ""
        if m is not None:
            facts = (f"<br>{m.arch.model_type} · {m.parameters_label} parameters · {m.quant.label} · "
                     f"context {m.context_length:,} · vocab {m.arch.vocab_size:,}")
        skipped = ""
        if result.skipped:
            skipped = "<br><span style='color:gray'>Left out: " + ", ".join(s.path for s in result.skipped) + "</span>"
        if not use.for_tabby:  # TabbyAPI's config.yml cannot take a GGUF draft
            flags = html.escape(shlex.join(use.llama_server_flags))
            facts = (f"<br>For llama-server: <code>{flags}</code> (the llama-swap page sets it "
                     "in a model's cmd).")
        self.result_label.setText(f"<b>{result.path.name}</b> in {result.path.parent}{facts}{skipped}")
        if use.for_tabby:
            self.use_button.show()
            self._update_use_button()
        self._check_new_model(result.path)
        self.install_finished.emit(result)

    def _install_failed(self, error: BaseException) -> None:
        from specdeck.core.hub import InstallConflictError

        if isinstance(error, CancelledError):
            self.progress_label.setText(str(error))
            return
        self.progress_label.setText("")
        self._show_error(error)
        variant = self.selected_variant()
        if isinstance(error, InstallConflictError) and variant is not None and self._install_dir is not None:
            self._rename_offer = variant  # asked once the task has ended (see _install_ended)

    def _offer_other_name(self, variant) -> None:
        """Ask for another folder name, suggesting a free one (looked for in a worker)."""
        from specdeck.core.hub import free_folder_name

        self._run("free_name", free_folder_name, self._install_dir, variant.folder_name,
                  finished=lambda suggestion: self._ask_other_name(variant, suggestion))

    def _ask_other_name(self, variant, suggestion: str) -> None:
        name, ok = QInputDialog.getText(self, "Install under another name",
                                        "That folder exists. Install this variant as:", text=suggestion)
        if ok and name.strip():
            self._begin_install(variant.repo_id, variant.revision, name.strip())

    def _show_partials(self) -> None:
        from specdeck.core.hub import format_bytes

        if not self._partials or self.installing():
            self.partial_banner.clear()
            return
        p = self._partials[0]
        more = f" (and {len(self._partials) - 1} more)" if len(self._partials) > 1 else ""
        self.partial_banner.show_message(
            f"Unfinished install: <b>{html.escape(p.spec)}</b> · {p.fraction:.0%} "
            f"({format_bytes(p.bytes_done)} of {format_bytes(p.bytes_total)}){more}",
            "warning",
            [("Resume", self.resume_install), ("Discard", self._discard_partial)],
        )

    def _discard_partial(self) -> None:
        from specdeck.core.hub import discard_partial

        if not self._partials:
            return
        partial = self._partials[0]
        answer = QMessageBox.question(self, "Discard unfinished install",
                                      f"Delete what was downloaded for {partial.spec}?")
        if answer == QMessageBox.StandardButton.Yes:
            self._run(None, discard_partial, partial, finished=lambda _r: self.refresh_library())

    # after install -------------------------------------------------------------------
    def _check_new_model(self, path: Path) -> None:
        def show(badges: dict) -> None:
            badge = badges.get(path.as_posix())
            if badge is None:
                return
            self.compat_badge.setText(f"{badge.label} with the target model")
            self.compat_badge.setToolTip(badge.summary)
            _set_role(self.compat_badge, BADGE_ROLES.get(badge.verdict, "badge-info"))
            self.compat_badge.show()

        from specdeck.core.hub.library import target_badges

        self._run("new_model_compatibility", target_badges, self._config_path(),
                  [path.as_posix()], finished=show, failed=lambda exc: None)

    def _update_use_button(self) -> None:
        has_config = self.context.config_path is not None
        self.use_button.setEnabled(has_config)
        self.use_button.setToolTip(
            "Set this model as draft_model in config.yml (you see the change first)." if has_config
            else "Open your TabbyAPI config.yml first (Draft settings page)."
        )

    def use_as_draft(self) -> None:
        from specdeck.core.hub.draft import plan_use_as_draft

        if self._last_result is None or self.context.config_path is None:
            return
        self._run("use_as_draft", plan_use_as_draft, self._last_result.path, self.context.config_path, finished=self._confirm_change)

    def _confirm_change(self, change) -> None:
        from specdeck.gui.widgets.config_dialog import confirm_and_save

        name = self._last_result.path.name if self._last_result else "the model"

        def saved(result) -> None:
            self.use_button.setEnabled(True)
            path = str(result.path)
            if result.written:  # announced by the save: the library re-reads it
                self.context.show_status(f"Draft model set to {name} in {path}.")
            else:
                self.context.show_status(f"{name} already is the draft model in {path}.")

        def failed(error: BaseException | None) -> None:
            self.use_button.setEnabled(True)
            self.context.show_status("config.yml was not changed.")
            if error is not None:
                self._show_error(error)

        if confirm_and_save(
            self, self.tasks, change, "Use as draft model",
            f"Make <b>{html.escape(name)}</b> TabbyAPI's draft model. SpecDeck will change config.yml "
            "like this (the previous version is kept as config.yml.bak):",
            on_saved=saved, on_failed=failed, context=self.context,
        ):
            self.use_button.setEnabled(False)
            self.context.show_status("Saving config.yml…", 0)

    # token ---------------------------------------------------------------------------
    def _ask_token(self) -> None:
        value, ok = QInputDialog.getText(
            self, "Hugging Face token",
            "Paste a read token from huggingface.co/settings/tokens.\n"
            "It is checked with the Hub, then kept in the system keyring (never in config.yml).\n"
            "HF_TOKEN, when set, takes precedence.",
            QLineEdit.EchoMode.Password,
        )
        if ok and value.strip():
            self.token_label.setText("Checking the token…")
            self._run("token", _sign_in, value.strip(), finished=self.token_label.setText,
                      failed=lambda exc: (self._show_error(exc), self._run(
                          "token", _token_status, finished=self.token_label.setText)))
