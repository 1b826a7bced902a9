"""The main window: a navigation sidebar, the pages, a status bar."""

from __future__ import annotations

import importlib
import logging

from PySide6.QtCore import QByteArray, QSettings, QSize, Qt
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMessageBox,
    QSizePolicy,
    QStackedWidget,
    QWidget,
)
from specdeck.gui.context import AppContext
from specdeck.gui.pages import PAGES, PageSpec

log = logging.getLogger(__name__)

DEFAULT_PAGE = "start"
"""The first launch opens here; later launches reopen the page the user left."""


class MainWindow(QMainWindow):
    def __init__(self, context: AppContext | None = None):
        super().__init__()
        self.context = context or AppContext(self)
        self.setWindowTitle("SpecDeck")
        self._pages: dict[str, QWidget] = {}
        self._policies: dict[str, QSizePolicy] = {}
        """Each page's own size policy, kept while it is hidden (``_on_row_changed``)."""

        self.sidebar = QListWidget()
        self.sidebar.setObjectName("sidebar")
        self.sidebar.setIconSize(QSize(18, 18))
        self.sidebar.setFixedWidth(180)
        for page in PAGES:
            item = QListWidgetItem(page.title)
            item.setData(Qt.ItemDataRole.UserRole, page.key)
            item.setToolTip(page.summary)
            self.sidebar.addItem(item)

        self.sidebar.setFocusPolicy(Qt.FocusPolicy.NoFocus)

        self.stack = QStackedWidget()
        central = QWidget()
        layout = QHBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.sidebar)
        layout.addWidget(self.stack, 1)
        self.setCentralWidget(central)

        self.gpu_label = QLabel("")
        self.statusBar().addPermanentWidget(self.gpu_label)
        self.context.status_message.connect(self._show_status)
        self.context.install_requested.connect(self._install_requested)
        self.context.page_requested.connect(self._page_requested)
        self._build_menus()

        self.sidebar.currentRowChanged.connect(self._on_row_changed)
        self._restore_state()
        self.context.config_forgotten.connect(self._config_forgotten)

    def _config_forgotten(self, path: str) -> None:
        self.statusBar().showMessage(
            f"{path} no longer exists, so SpecDeck stopped opening it. Open your config.yml "
            "again on Draft settings.", 20000)

    # pages ---------------------------------------------------------------------------
    def page(self, key: str) -> QWidget:
        """The page widget for ``key``, built on first use."""
        if key not in self._pages:
            spec = next(p for p in PAGES if p.key == key)
            widget = self._build_page(spec)
            self._pages[key] = widget
            self.stack.addWidget(widget)
        return self._pages[key]

    def _build_page(self, spec: PageSpec) -> QWidget:
        try:
            module = importlib.import_module(spec.module)
            return module.create_page(self.context)
        except Exception as exc:  # a broken page must not take the app down
            log.exception("Could not build the %s page", spec.title)
            from specdeck.gui.pages.failed import FailedPage

            return FailedPage(spec.title, exc)

    def _install_requested(self, repo_id: str, revision: str) -> None:
        page = self.show_page("models")
        request = getattr(page, "request_install", None)
        if request is not None:
            request(repo_id, revision)

    def _page_requested(self, key: str, argument: str) -> None:
        if key == "draft" and argument:
            self.context.set_config_path(argument)
        page = self.show_page(key)
        handle = getattr(page, "handle_request", None)
        if argument and handle is not None:
            handle(argument)

    def show_page(self, key: str) -> QWidget:
        row = [p.key for p in PAGES].index(key)
        if self.sidebar.currentRow() != row:
            self.sidebar.setCurrentRow(row)
        return self.page(key)

    def current_page_key(self) -> str:
        item = self.sidebar.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item else DEFAULT_PAGE

    def _on_row_changed(self, row: int) -> None:
        if row < 0:
            return
        widget = self.page(PAGES[row].key)
        # A stack's minimum is its widest page's, shown or not: once Draft settings (1177 px)
        # had been opened, no page fitted a 1024 px screen again. Hidden pages ask for no
        # room (Ignored); the shown one asks for what it needs.
        for key, page in self._pages.items():
            own = self._policies.setdefault(key, page.sizePolicy())
            ignored = QSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Ignored)
            page.setSizePolicy(own if page is widget else ignored)
        self.stack.setCurrentWidget(widget)

    # menus and status ----------------------------------------------------------------
    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        quit_action = QAction("&Quit", self)
        quit_action.setShortcut(QKeySequence.StandardKey.Quit)
        quit_action.triggered.connect(self.close)
        file_menu.addAction(quit_action)

        go_menu = self.menuBar().addMenu("&Go")
        for index, page in enumerate(PAGES, start=1):
            action = QAction(page.title, self)
            action.setShortcut(QKeySequence(f"Ctrl+{index}"))
            action.triggered.connect(lambda _=False, key=page.key: self.show_page(key))
            go_menu.addAction(action)

        help_menu = self.menuBar().addMenu("&Help")
        about = QAction("&About SpecDeck", self)
        about.triggered.connect(self.show_about)
        help_menu.addAction(about)
        self.file_menu = file_menu

    def show_about(self) -> None:
        from specdeck.gui.about import AboutDialog

        AboutDialog(self).exec()

    def _show_status(self, text: str, timeout_ms: int) -> None:
        self.statusBar().showMessage(text, timeout_ms)

    def show_error(self, title: str, error: BaseException | str) -> None:
        QMessageBox.warning(self, title, str(error))

    # persistence -----------------------------------------------------------------------
    def _restore_state(self) -> None:
        store = QSettings()
        geometry = store.value("window/geometry")
        if isinstance(geometry, QByteArray) and not geometry.isEmpty():
            self.restoreGeometry(geometry)
        else:
            self.resize(1200, 800)
        key = store.value("window/page", DEFAULT_PAGE)
        keys = [p.key for p in PAGES]
        self.sidebar.setCurrentRow(keys.index(key) if key in keys else keys.index(DEFAULT_PAGE))

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt's name
        for widget in self._pages.values():
            can_close = getattr(widget, "can_close", None)
            if can_close is not None and not can_close():
                event.ignore()
                return
        for widget in self._pages.values():
            shutdown = getattr(widget, "shutdown", None)
            if shutdown is not None:
                shutdown()
        store = QSettings()
        store.setValue("window/geometry", self.saveGeometry())
        store.setValue("window/page", self.current_page_key())
        self.context.flush()
        super().closeEvent(event)
