"""The arms of a server A/B, one row each: a running server (URL, model, key variable), a
llama-server SpecDeck launches (its flags) or a TabbyAPI SpecDeck starts (its draft settings),
with the launch settings those rows share.

The dialog only edits: the arms are built by core.servers.arms (as the CLI builds them), and
Check runs core.servers.arms.describe in a worker (probing a server or reading a binary's
--help takes longer than a frame)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)
from specdeck.core.errors import InvalidInputError, SpecDeckError

RUNNING = "Running server"
LAUNCH = "Launch llama-server"
TABBY = "Start TabbyAPI"
COLUMNS = ("Name", "Arm", "URL, flags or draft settings", "Model", "LM Studio draft",
           "Key variable", "Found")
NAME, SOURCE, WHERE, MODEL, DRAFT, KEY, FOUND = range(len(COLUMNS))


@dataclass(frozen=True)
class LaunchSettings:
    """What every launched arm shares."""

    binary: str = ""
    gguf: str = ""
    common: str = ""
    """Flags for every launched arm, as typed (split like a shell does)."""
    tabby_folder: str = ""
    """The TabbyAPI install started for TabbyAPI arms."""
    tabby_python: str = ""
    """Its Python (blank: the install's venv)."""


class ServerArmsDialog(QDialog):
    """Edit the arms; ``arms()`` builds them (SpecDeckError says what is wrong)."""

    def __init__(self, arms: Sequence, launch: LaunchSettings, one_at_a_time: bool,
                 parent: QWidget | None = None):
        super().__init__(parent)
        from specdeck.gui.workers import Tasks

        self.tasks = Tasks(self)
        self.setWindowTitle("Server arms")
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().setVisible(False)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        header = self.table.horizontalHeader()
        for column, mode in ((NAME, QHeaderView.ResizeMode.ResizeToContents),
                             (SOURCE, QHeaderView.ResizeMode.ResizeToContents),
                             (WHERE, QHeaderView.ResizeMode.Stretch),
                             (MODEL, QHeaderView.ResizeMode.Interactive),
                             (DRAFT, QHeaderView.ResizeMode.Interactive),
                             (KEY, QHeaderView.ResizeMode.Interactive),
                             (FOUND, QHeaderView.ResizeMode.Stretch)):
            header.setSectionResizeMode(column, mode)
        header.resizeSection(MODEL, 120)
        header.resizeSection(DRAFT, 130)
        header.resizeSection(KEY, 110)
        self.table.setToolTip(
            "The first arm is the reference: a server (or launch) without drafting. Model: the "
            "name each request carries (a llama-server router or llama-swap switches by it). "
            "Draft: the draft model an LM Studio arm's requests name (LM Studio loads it). "
            "Key variable: the environment variable holding the server's API key (default "
            "SPECDECK_SERVER_API_KEY, or the keyring); the key itself is never stored. "
            "Start TabbyAPI rows: the arm's draft_model settings as key=value (e.g. "
            "draft_mode=ngram draft_num_tokens=4); the first row runs without a draft.")
        add = QPushButton("Add arm")
        add.clicked.connect(lambda: self.add_row())
        remove = QPushButton("Remove")
        remove.clicked.connect(self._remove_selected)
        self.check_button = QPushButton("Check")
        self.check_button.setToolTip("Probe each running server; check each launched arm's "
                                     "flags against the binary's --help")
        self.check_button.clicked.connect(self.check)
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.message.setProperty("role", "hint")
        rows = QHBoxLayout()
        for button in (add, remove, self.check_button):
            rows.addWidget(button)
        rows.addWidget(self.message, 1)

        self.launch_box = QGroupBox("Launched arms share")
        form = QFormLayout(self.launch_box)
        self.binary = QLineEdit(launch.binary)
        self.binary.setPlaceholderText("path of your llama-server binary")
        self.gguf = QLineEdit(launch.gguf)
        self.gguf.setPlaceholderText("the target model's .gguf")
        self.common = QLineEdit(launch.common)
        self.common.setPlaceholderText("flags for every launched arm, e.g. -ngl 99 -c 8192 -fa on")
        self.one_at_a_time = QCheckBox("One llama-server at a time (they share one GPU)")
        self.one_at_a_time.setChecked(one_at_a_time)
        form.addRow("llama-server", _with_browse(self.binary, "Choose llama-server", ""))
        form.addRow("Model", _with_browse(self.gguf, "Choose the target GGUF", "GGUF (*.gguf)"))
        form.addRow("Flags", self.common)
        form.addRow("", self.one_at_a_time)
        self.tabby_box = QGroupBox("TabbyAPI arms start")
        tabby_form = QFormLayout(self.tabby_box)
        self.tabby_folder = QLineEdit(launch.tabby_folder)
        self.tabby_folder.setPlaceholderText("your TabbyAPI folder (main.py, config.yml); its "
                                             "config.yml is copied per arm, never written")
        self.tabby_python = QLineEdit(launch.tabby_python)
        self.tabby_python.setPlaceholderText("blank: the folder's venv/bin/python")
        tabby_form.addRow("TabbyAPI", _with_browse(self.tabby_folder, "Choose TabbyAPI's folder",
                                                   None))
        tabby_form.addRow("Python", self.tabby_python)

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                   | QDialogButtonBox.StandardButton.Cancel)
        self.ok_button = buttons.button(QDialogButtonBox.StandardButton.Ok)
        buttons.accepted.connect(self._accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table, 1)
        layout.addLayout(rows)
        layout.addWidget(self.launch_box)
        layout.addWidget(self.tabby_box)
        layout.addWidget(buttons)
        self.resize(1120, 440)
        for arm in arms:
            self._add_arm(arm, launch)
        if not arms:
            self.add_row("A")
            self.add_row("B")
        self._sync_launch_box()

    # rows --------------------------------------------------------------------------------
    def add_row(self, name: str | None = None, source: str = RUNNING, where: str = "",
                model: str = "", key: str = "", draft: str = "") -> int:
        from specdeck.core.bench.plan import arm_letter

        row = self.table.rowCount()
        self.table.insertRow(row)
        combo = QComboBox()
        combo.addItems([RUNNING, LAUNCH, TABBY])
        combo.setCurrentText(source)
        combo.currentTextChanged.connect(lambda *_: self._sync_launch_box())
        self.table.setCellWidget(row, SOURCE, combo)
        values = {NAME: name or arm_letter(row), WHERE: where, MODEL: model, DRAFT: draft,
                  KEY: key, FOUND: ""}
        for column, value in values.items():
            item = QTableWidgetItem(value)
            if column == FOUND:
                item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
            self.table.setItem(row, column, item)
        self._sync_launch_box()
        return row

    def _add_arm(self, arm, launch: LaunchSettings) -> None:
        server = arm.server
        if server.tabby_launch is not None:
            settings = dict(server.tabby_launch.draft)
            reference = not self.table.rowCount()
            self.add_row(arm.name, TABBY, "" if reference else " ".join(
                f"{k}={v}" for k, v in settings.items()), key=server.api_key_env or "")
        elif server.launch is not None:
            common = tuple(shlex.split(launch.common)) if launch.common else ()
            own = server.launch.args[len(common):] if server.launch.args[:len(common)] == common \
                else server.launch.args
            self.add_row(arm.name, LAUNCH, shlex.join(own))
        else:
            self.add_row(arm.name, RUNNING, server.url or "", server.model or "",
                         server.api_key_env or "", server.draft_model or "")

    def _remove_selected(self) -> None:
        for row in sorted({i.row() for i in self.table.selectedIndexes()}, reverse=True):
            self.table.removeRow(row)
        self._sync_launch_box()

    def _text(self, row: int, column: int) -> str:
        item = self.table.item(row, column)
        return item.text().strip() if item is not None else ""

    def _source(self, row: int) -> str:
        return self.table.cellWidget(row, SOURCE).currentText()

    def _sync_launch_box(self) -> None:
        sources = {self._source(r) for r in range(self.table.rowCount())}
        self.launch_box.setEnabled(LAUNCH in sources)
        self.tabby_box.setEnabled(TABBY in sources)

    # results -----------------------------------------------------------------------------
    def launch_settings(self) -> LaunchSettings:
        return LaunchSettings(self.binary.text().strip(), self.gguf.text().strip(),
                              self.common.text().strip(), self.tabby_folder.text().strip(),
                              self.tabby_python.text().strip())

    def arms(self) -> tuple:
        """The arms the rows describe, built as the CLI builds them."""
        from specdeck.core.servers.arms import launched_arm, url_arm

        launch = self.launch_settings()
        arms = []
        for row in range(self.table.rowCount()):
            name = self._text(row, NAME)
            where = self._text(row, WHERE)
            if not name:
                raise InvalidInputError(f"Row {row + 1} has no name.", "Name every arm (A, B, ...).")
            if self._source(row) == TABBY:
                from specdeck.core.servers.tabby_launch import launched_tabby_arm

                if not launch.tabby_folder:
                    raise InvalidInputError(f"Arm {name} starts TabbyAPI: give its folder below.")
                arms.append(launched_tabby_arm(
                    name, launch.tabby_folder, where, launch.tabby_python or None,
                    self._text(row, KEY) or None, reference=not arms))
            elif self._source(row) == LAUNCH:
                if not launch.binary or not launch.gguf:
                    raise InvalidInputError(f"Arm {name} launches a llama-server: give the "
                                            "binary and the model below.")
                try:
                    own = tuple(shlex.split(where))
                    common = tuple(shlex.split(launch.common))
                except ValueError as exc:
                    raise InvalidInputError(f"Arm {name}: the flags do not parse ({exc}).") from None
                arms.append(launched_arm(name, launch.binary, launch.gguf, own, common))
            else:
                if not where:
                    raise InvalidInputError(f"Arm {name} has no URL.",
                                            "Give the server's address, e.g. http://127.0.0.1:8080.")
                arms.append(url_arm(name, where, self._text(row, MODEL), self._text(row, KEY),
                                    reference=not arms, draft_model=self._text(row, DRAFT)))
        if len(arms) < 2:
            raise InvalidInputError("A server A/B needs two arms or more.",
                                    "Add the reference first, then the drafting arm(s).")
        if len({a.name for a in arms}) != len(arms):
            raise InvalidInputError("Two arms have the same name.")
        return tuple(arms)

    def _accept(self) -> None:
        try:
            self.arms()
        except SpecDeckError as exc:
            self.message.setText(str(exc))
            return
        self.accept()

    def check(self) -> None:
        try:
            arms = self.arms()
        except SpecDeckError as exc:
            self.message.setText(str(exc))
            return
        self.message.setText("Checking…")
        self.check_button.setEnabled(False)
        self.tasks.run("check", _describe_all, arms, on_result=self._show_found,
                       on_error=self._check_failed)

    def _show_found(self, lines: list[str]) -> None:
        self.check_button.setEnabled(True)
        self.message.setText("")
        for row, line in enumerate(lines[: self.table.rowCount()]):
            found = line.split(": ", 1)[-1]
            self.table.item(row, FOUND).setText(found)
            self.table.item(row, FOUND).setToolTip(found)

    def _check_failed(self, exc: BaseException) -> None:
        self.check_button.setEnabled(True)
        self.message.setText(str(exc))


def _describe_all(arms) -> list[str]:
    """Worker: what each arm is (core.servers.arms.describe never raises)."""
    from specdeck.core.servers.arms import describe

    return [describe(arm) for arm in arms]


def _with_browse(line: QLineEdit, title: str, pattern: str | None) -> QWidget:
    """``line`` with a browse button: a file matching ``pattern``, or a folder when None."""
    box = QWidget()
    row = QHBoxLayout(box)
    row.setContentsMargins(0, 0, 0, 0)
    row.addWidget(line, 1)
    button = QToolButton()
    button.setText("…")

    def browse() -> None:
        if pattern is None:
            path = QFileDialog.getExistingDirectory(box, title, line.text())
        else:
            path, _ = QFileDialog.getOpenFileName(box, title, line.text(), pattern)
        if path:
            line.setText(path)

    button.clicked.connect(browse)
    row.addWidget(button)
    return box
