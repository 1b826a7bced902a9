"""Tune: make the user's own llama-server faster, unattended (issue 27; ``specdeck tune``).

The form says what to tune (a llama-swap model, a llama-server binary and GGUF, the demo, a
TabbyAPI folder SpecDeck starts per setting, or a running TabbyAPI with its config.yml), the
time budget, the user's prompts and the download budget. TabbyAPI's keys are read from the
environment variables the form names (core.tune.tabby.read_tabby, as ``specdeck tune``): the
page has no field for a key, so none is ever saved with its settings. Tune runs
``core.tune.run.tune`` in a worker (the page's ``Tasks``); its events go into a queue that
the page's live pump (gui.live_pump, as the A/B page's) drains into
``core.tune.live.TuneLive``, the reducer that turns them into what the page shows: the
candidates with their predicted speed-up and size, the search's round and best so far, the
live tok/s plot (the A/B page's plots), then the result. Apply goes through
``core.tune.apply`` (the diff shown first, as the CLI asks), Roll back puts the file back,
Cancel stops whatever runs and leaves the user's files as they were.

Nothing is computed here: every figure and every sentence comes from core.
"""

from __future__ import annotations

import html
import logging
import queue
import re
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QTextOption
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QDoubleSpinBox,
    QFileDialog,
    QFrame,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)
from specdeck.core.errors import CancelledError, SpecDeckError
from specdeck.core.forms import bounds
from specdeck.core.tune.request import (
    DEMO,
    GGUF,
    KINDS,
    SWAP,
    TABBY,
    TABBY_FOLDER,
    TABBY_KINDS,
    TuneForm,
    TuneRequest,
    found_llama_server,
)
from specdeck.gui import form_settings, workers
from specdeck.gui.live_pump import LivePump, queued
from specdeck.gui.widgets.banner import Banner

log = logging.getLogger(__name__)

SETTINGS_PREFIX = "tune/"
PHASES = (("candidates", "Candidates"), ("replay", "Predict"), ("search", "Search"),
          ("verify", "Verify"), ("result", "Result"))
COLUMNS = ("candidate", "predicted speed-up (range)", "size", "download", "measured so far")
FORECAST_COLUMNS = ("setting", "predicted (interval)", "mean over prompts",
                    "accepted by position", "accepted length", "full step costs")
FORECAST_TIP = ("Every setting predicted from one run without drafting: llama-server's own "
                "drafters replayed over its tokens. Accepted by position: the share of "
                "verifications whose draft was right up to that token. A full step costs: "
                "verifying the setting's longest draft, in plain decode steps, measured on "
                "this server. The search measures the best few; the verification decides.")
IDLE_TEXT = ("Say what to tune and press Tune: SpecDeck finds what your server can draft "
             "with, searches the settings within the budget, verifies the best on other prompts "
             "and offers to write it.")
PLOTS_IDLE_TEXT = ("The live plots appear here when a tune starts: each setting's decode "
                   "speed (tok/s) and draft acceptance as it runs.")
CANCELLING_TEXT = "Cancelling: stopping after the current run…"
RUNNING_TEXT = ("Tuning: the result comes after the search and the verification on held-out "
                "prompts. Cancel stops at any point and leaves your files as they were.")


def create_page(context):
    return TunePage(context)


LOOKING_TEXT = "optional: looking for a llama-server…"


def demo_binary_text(found) -> str:
    """The demo's llama-server field, empty: which binary it will use (``found``, the one
    SpecDeck found without being told), or that one is needed (the Start page says the
    same)."""
    if found is None:
        return "needed: no llama-server found on PATH, choose yours (Browse…)"
    return f"optional: default, {found}"


def run_tune(request: TuneRequest, options, sink, cancel):
    """Worker: read the setup, then tune it (``tune`` routes a TabbyAPI to its own
    candidates); every event goes to ``sink`` (a queue's put)."""
    from specdeck.core.tune.live import SetupRead
    from specdeck.core.tune.request import read_setup
    from specdeck.core.tune.run import tune

    chosen = read_setup(request)
    sink(SetupRead(chosen))
    return tune(chosen, options, on_event=sink, cancel=cancel)


def preview_apply(result):
    """Worker: what applying ``result`` would do, writing nothing: (Applied, whether there is
    a diff to confirm)."""
    from specdeck.core.tune.apply import apply

    asked: list[str] = []
    applied = apply(result, confirm=lambda diff: asked.append(diff) is not None)
    return applied, bool(asked)


class TunePage(QWidget):
    def __init__(self, context, parent: QWidget | None = None):
        super().__init__(parent)
        self.context = context
        self.tasks = workers.Tasks(self)
        """Background calls: "tune", "apply" (preview, write, roll back), "models", report."""
        self.events: queue.SimpleQueue = queue.SimpleQueue()
        self.live = None
        """core.tune.live.TuneLive of the tune shown."""
        self.result = None
        """core.tune.run.TuneResult of the finished tune (with what applying did)."""
        self.result_request: TuneRequest | None = None
        """The setup the shown result (or the tune running) belongs to: Apply is for it only."""
        self.plots = None
        self._cancelling = False
        self._found: Path | None = None
        """The llama-server the demo runs when none is given: looked for in a worker (a few
        stats of the home folder's build folders) each time the demo is chosen."""
        self._start_when_found = False
        """Tune was pressed for the demo while the look still ran: start once it answers."""
        self.banner = Banner()
        self._build_form()
        self._build_progress()
        self._build_result()
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.progress_box)
        splitter.addWidget(self.plots_host)
        splitter.addWidget(self.result_box)
        splitter.setSizes([230, 170, 260])
        splitter.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.addWidget(self.banner)
        layout.addWidget(self.form_box)
        layout.addWidget(splitter, 1)
        self.live_pump = LivePump(
            lambda: queued(self.events) if self.live is not None else [], self._show_events,
            self)
        self.timer = self.live_pump.timer
        self._restore()
        for edit in (self.swap_config, self.gguf, self.flags, self.binary, self.tabby_folder,
                     self.tabby_python, self.tabby_url, self.tabby_config):
            edit.textChanged.connect(self._setup_changed)
        for box in (self.kind, self.model):
            box.currentIndexChanged.connect(self._setup_changed)
        self._sync()

    # the form ------------------------------------------------------------------------------
    def _form_request(self) -> TuneRequest | None:
        try:
            return self.request()
        except SpecDeckError:
            return None

    def stale(self) -> bool:
        """The form names another setup than the one the shown result belongs to."""
        return self.result is not None and self._form_request() != self.result_request

    def _setup_changed(self) -> None:
        """A result and its banners belong to the setup that produced them: when the form
        names another, the banner goes, Apply is for the result's setup only, and the
        result says whose it is."""
        if self._running():
            return
        self.banner.hide()
        self._show_stale()
        self._sync()

    def _show_stale(self) -> None:
        if self.stale():
            self.stale_note.setText(
                f"This result is for {html.escape(self.result_request.describe())}; the form "
                "now names another setup. Apply writes only the setup that was tuned: switch "
                "back to it, or tune this one.")
            self.stale_note.show()
        else:
            self.stale_note.hide()
    def _build_form(self) -> None:
        self.form_box = QGroupBox("What to tune")
        self.kind = QComboBox()
        for key, text in KINDS:
            self.kind.addItem(text, key)
        self.kind.currentIndexChanged.connect(self._kind_changed)
        self.swap_config = QLineEdit()
        self.swap_config.setPlaceholderText("llama-swap's config.yaml")
        self.swap_config.editingFinished.connect(self.load_models)
        self.model = QComboBox()
        self.model.setMinimumWidth(180)
        self.model.setPlaceholderText("open a config.yaml")
        self.gguf = QLineEdit()
        self.gguf.setPlaceholderText("the target .gguf your llama-server loads")
        self.flags = QLineEdit()
        self.flags.setPlaceholderText("llama-server flags, e.g. -ngl 99 -c 8192 (optional)")
        self.binary = QLineEdit()
        self.tabby_folder = QLineEdit()
        self.tabby_folder.setPlaceholderText("your TabbyAPI folder (main.py, config.yml naming "
                                             "the model)")
        self.tabby_python = QLineEdit()
        self.tabby_python.setPlaceholderText("optional: default, the folder's venv")
        self.tabby_python.setToolTip("The Python that runs TabbyAPI (the CLI's --tabby-python)")
        self.tabby_url = QLineEdit()
        self.tabby_url.setPlaceholderText("http://127.0.0.1:5000")
        self.tabby_config = QLineEdit()
        self.tabby_config.setPlaceholderText("the config.yml it was started from")
        self.api_key_env = QLineEdit()
        self.api_key_env.setPlaceholderText("SPECDECK_SERVER_API_KEY")
        self.api_key_env.setToolTip(
            "The environment variable holding TabbyAPI's API key (the CLI's --api-key-env). "
            "Blank: SPECDECK_SERVER_API_KEY, then the install's api_tokens.yml (a TabbyAPI "
            "folder) or the keyring (a running TabbyAPI). SpecDeck never asks for the key "
            "itself.")
        self.admin_key_env = QLineEdit()
        self.admin_key_env.setPlaceholderText("SPECDECK_TABBY_ADMIN_KEY")
        self.admin_key_env.setToolTip(
            "The environment variable holding the running TabbyAPI's admin key (its "
            "api_tokens.yml admin_key; the CLI's --admin-key-env). Blank: "
            "SPECDECK_TABBY_ADMIN_KEY. SpecDeck never asks for the key itself.")
        self.budget = QLineEdit(TuneForm().budget)
        self.budget.setMaximumWidth(70)
        self.budget.setToolTip("Wall clock for the search and the verification: 90s, 10m, 1h")
        self.prompts = QLineEdit()
        self.prompts.setPlaceholderText("optional: JSON Lines with a \"prompt\" field, or a suite "
                                        "file (default: the grounded, code, structured suites)")
        self.max_new = QSpinBox()
        self.max_new.setRange(*bounds(TuneForm, "max_new"))
        self.max_new.setValue(TuneForm().max_new)
        self.max_new.setSuffix(" tokens")
        self.max_new.setToolTip("Tokens generated per run (the CLI's --max-new)")
        self.downloads = QDoubleSpinBox()
        self.downloads.setRange(*bounds(TuneForm, "downloads_gib"))
        self.downloads.setDecimals(1)
        self.downloads.setSuffix(" GiB")
        self.downloads.setToolTip("Draft GGUFs from the Hub to download at most, checked before "
                                  "any download (0: the drafts on disk only). Setting it is "
                                  "your yes: the page downloads within it without asking "
                                  "again.")
        self.start_button = QPushButton("Tune")
        self.start_button.setProperty("role", "primary")
        self.start_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel)

        self.sources = QStackedWidget()
        swap_row = _row(self.swap_config, self._browse(self.swap_config, "llama-swap's config.yaml",
                                                        "YAML (*.yaml *.yml);;All files (*)",
                                                        then=self.load_models),
                        QLabel("model"), self.model)
        gguf_row = _row(self.gguf, self._browse(self.gguf, "The target GGUF",
                                                "GGUF (*.gguf);;All files (*)"))
        demo_row = _row(QLabel("SmolLM2-135M-Instruct, embedded: no download, no GPU"))
        folder_row = _row(self.tabby_folder, self._browse(self.tabby_folder, "TabbyAPI's folder",
                                                          folder=True),
                          QLabel("Python"), self.tabby_python)
        running_row = _row(self.tabby_url, QLabel("config.yml"), self.tabby_config,
                           self._browse(self.tabby_config, "The running TabbyAPI's config.yml",
                                        "YAML (*.yml *.yaml);;All files (*)"))
        for row in (swap_row, gguf_row, demo_row, folder_row, running_row):
            self.sources.addWidget(row)
        grid = QGridLayout(self.form_box)
        grid.addWidget(QLabel("Setup"), 0, 0)
        grid.addWidget(self.kind, 0, 1)
        grid.addWidget(self.sources, 0, 2, 1, 3)
        # Row 1 holds llama-server's binary and flags, or TabbyAPI's key variables: the
        # widgets of the other kinds are hidden (a hidden widget takes no room in its cell).
        binary_label, flags_label = QLabel("llama-server"), QLabel("flags")
        binary_row = _row(self.binary, self._browse(self.binary, "The llama-server binary"))
        self.api_key_label, self.admin_key_label = QLabel("API key in"), QLabel("admin key in")
        self.llama_widgets = (binary_label, binary_row, flags_label, self.flags)
        """Fields that mean nothing for TabbyAPI (it reads its settings from config.yml)."""
        grid.addWidget(binary_label, 1, 0)
        grid.addWidget(binary_row, 1, 1, 1, 2)
        grid.addWidget(flags_label, 1, 3)
        grid.addWidget(self.flags, 1, 4)
        grid.addWidget(self.api_key_label, 1, 0)
        grid.addWidget(self.api_key_env, 1, 1, 1, 2)
        grid.addWidget(self.admin_key_label, 1, 3)
        grid.addWidget(self.admin_key_env, 1, 4)
        grid.addWidget(QLabel("Budget"), 2, 0)
        grid.addWidget(_row(self.budget, self.max_new, QLabel("prompts"), self.prompts,
                            self._browse(self.prompts, "Your prompts",
                                         "Prompts (*.jsonl *.json *.txt);;All files (*)")),
                       2, 1, 1, 2)
        grid.addWidget(QLabel("downloads"), 2, 3)
        grid.addWidget(_row(self.downloads, self.start_button, self.cancel_button), 2, 4)
        grid.setColumnStretch(2, 3)
        grid.setColumnStretch(4, 2)

    def _browse(self, edit: QLineEdit, title: str, filters: str = "", then=None,
                folder: bool = False) -> QPushButton:
        button = QPushButton("Browse…")

        def pick() -> None:
            if folder:
                path = QFileDialog.getExistingDirectory(self, title, edit.text())
            else:
                path, _ = QFileDialog.getOpenFileName(self, title, edit.text(), filters)
            if path:
                edit.setText(path)
                if then is not None:
                    then()

        button.clicked.connect(pick)
        return button

    def _kind_changed(self) -> None:
        kind = self.kind.currentData()
        self.sources.setCurrentIndex(self.kind.currentIndex())
        tabby = kind in TABBY_KINDS
        for widget in self.llama_widgets:
            widget.setVisible(not tabby)
        for widget in (self.api_key_label, self.api_key_env):
            widget.setVisible(tabby)
        for widget in (self.admin_key_label, self.admin_key_env):
            widget.setVisible(kind == TABBY)  # only a running TabbyAPI is reloaded
        self._sync_kind()
        if not tabby:
            self.binary.setPlaceholderText({
                SWAP: "optional: replaces the program in the model's cmd",
                GGUF: "the llama-server binary to run",
                DEMO: LOOKING_TEXT}[kind])
        if kind == DEMO:
            self.tasks.run("binary", found_llama_server, on_result=self._binary_found,
                           on_error=lambda _error: self._binary_found(None))

    def looking_for_binary(self) -> bool:
        """Whether the demo's default llama-server is still being looked for."""
        return self.tasks.running("binary")

    def _binary_found(self, found) -> None:
        self._found = found
        if self.kind.currentData() == DEMO:
            self.binary.setPlaceholderText(demo_binary_text(found))
        start, self._start_when_found = self._start_when_found, False
        if start and self.kind.currentData() == DEMO:
            self.start()

    def _sync_kind(self) -> None:
        """What the kind leaves editable: a llama-swap model's flags are its cmd's; TabbyAPI
        takes no flags and downloads no drafts (it tries the drafts in its draft folder)."""
        kind = self.kind.currentData()
        self.flags.setEnabled(kind in (GGUF, DEMO))
        self.downloads.setEnabled(kind not in TABBY_KINDS)

    def handle_request(self, argument: str) -> None:
        """From the Start page: "demo", a llama-swap config.yaml's path, or a TabbyAPI found
        (core.discovery's "tabby-folder:DIR" or "tabby-config:FILE"); prefilled, not started
        (the user sets the budget and presses Tune)."""
        from specdeck.core.discovery import TUNE_TABBY_CONFIG, TUNE_TABBY_FOLDER

        if self._running():
            return
        if argument == DEMO:
            self.kind.setCurrentIndex(self.kind.findData(DEMO))
        elif argument.startswith(TUNE_TABBY_FOLDER):
            self.kind.setCurrentIndex(self.kind.findData(TABBY_FOLDER))
            self.tabby_folder.setText(argument[len(TUNE_TABBY_FOLDER):])
        elif argument.startswith(TUNE_TABBY_CONFIG):
            self.kind.setCurrentIndex(self.kind.findData(TABBY))
            self.tabby_config.setText(argument[len(TUNE_TABBY_CONFIG):])
        else:
            self.kind.setCurrentIndex(self.kind.findData(SWAP))
            self.swap_config.setText(argument)
            self.load_models()

    def load_models(self) -> None:
        """The config's models in the dropdown, each tunable or with why not (a worker reads
        the file)."""
        from specdeck.core.tune.setup import swap_models

        path = self.swap_config.text().strip()
        if not path:
            return
        self.tasks.run("models", swap_models, path, on_result=self._show_models,
                       on_error=self._show_error)

    def _show_models(self, models) -> None:
        chosen = self.model.currentData()
        self.model.clear()
        for name, why in models:
            self.model.addItem(name if not why else f"{name} (cannot be tuned)", name)
            index = self.model.count() - 1
            if why:
                self.model.setItemData(index, why, Qt.ItemDataRole.ToolTipRole)
                self.model.model().item(index).setEnabled(False)
        tunable = [name for name, why in models if not why]
        if chosen in tunable or tunable:
            self.model.setCurrentIndex(self.model.findData(chosen if chosen in tunable
                                                           else tunable[0]))
        if not tunable:
            self.banner.show_message(html.escape(f"No model of {self.swap_config.text()} can be "
                                                 "tuned: hover over each for why."), "warning")

    def form(self) -> TuneForm:
        """What the form holds, as typed."""
        return TuneForm(
            kind=self.kind.currentData(), binary=self.binary.text(),
            swap_config=self.swap_config.text(), model=self.model.currentData() or "",
            gguf=self.gguf.text(), flags=self.flags.text(),
            tabby_folder=self.tabby_folder.text(), tabby_python=self.tabby_python.text(),
            tabby_url=self.tabby_url.text(), tabby_config=self.tabby_config.text(),
            api_key_env=self.api_key_env.text(), admin_key_env=self.admin_key_env.text(),
            budget=self.budget.text(), max_new=self.max_new.value(),
            prompts=self.prompts.text(), downloads_gib=self.downloads.value())

    def set_form(self, form: TuneForm) -> None:
        """Show ``form`` (a llama-swap model is chosen once the config's models are read)."""
        for name, edit in self._edits().items():
            edit.setText(getattr(form, name))
        self.max_new.setValue(form.max_new)
        self.downloads.setValue(form.downloads_gib)
        self.kind.setCurrentIndex(self.kind.findData(form.kind))
        self._kind_changed()
        if form.model and self.model.findData(form.model) >= 0:
            self.model.setCurrentIndex(self.model.findData(form.model))

    def _edits(self) -> dict[str, QLineEdit]:
        return {"binary": self.binary, "swap_config": self.swap_config, "gguf": self.gguf,
                "flags": self.flags, "budget": self.budget, "prompts": self.prompts,
                "tabby_folder": self.tabby_folder, "tabby_python": self.tabby_python,
                "tabby_url": self.tabby_url, "tabby_config": self.tabby_config,
                "api_key_env": self.api_key_env, "admin_key_env": self.admin_key_env}

    def request(self) -> TuneRequest:
        """The form as a request; a SpecDeckError says what is missing."""
        return self.form().request(lambda: self._found)

    def options(self):
        return self.form().options()

    # run control ---------------------------------------------------------------------------
    def _running(self) -> bool:
        return self.tasks.running("tune") or self.tasks.running("apply")

    def start(self) -> None:
        """Tune what the form says (a banner says why not, when it says nothing usable)."""
        from specdeck.core.tune.live import TuneLive

        if self.kind.currentData() == DEMO and not self.binary.text().strip() \
                and self.looking_for_binary():
            self._start_when_found = True  # which llama-server is known in a moment
            return
        try:
            request, options = self.request(), self.options()
        except SpecDeckError as exc:
            self._show_error(exc)
            return
        self.banner.hide()
        self._save()
        self.events = queue.SimpleQueue()
        self.live = TuneLive()
        self.result = None
        self.result_request = request
        self._show_stale()
        self._cancelling = False
        self._ensure_plots()
        if self.plots is not None:
            from specdeck.core.tune.live import SERIES

            self.plots.reset(list(SERIES))
            self.plots.set_acceptance_title(True)
        self.tasks.run("tune", run_tune, request, options, self.events.put,
                       on_result=self.finished, on_error=self._failed)
        self._show_result()
        for label in (self.round, self.best, self.stage):
            label.setText("")
        self.candidates.setRowCount(0)
        self.not_tried.setText("")
        self.live_pump.start()
        self._sync()

    def cancel(self) -> None:
        """Stop whatever runs (the tune, or an apply still checking the written file): core
        stops between steps and writes nothing it has not verified."""
        for key in ("tune", "apply"):
            self.tasks.stop(key)
        if self._running():
            self._cancelling = True
            self.stage.setText(CANCELLING_TEXT)
        self.cancel_button.setEnabled(False)

    def _sync(self) -> None:
        running = self._running()
        self.start_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        for widget in (self.kind, self.sources, self.binary, self.flags, self.budget,
                       self.max_new, self.prompts, self.downloads, self.api_key_env,
                       self.admin_key_env):
            widget.setEnabled(not running)
        if not running:
            self._sync_kind()
        result = self.result
        decision = None if result is None else result.decision
        applied = None if result is None else result.applied
        written = applied is not None and applied.written and not applied.rolled_back
        self.apply_button.setEnabled(not running and decision is not None and decision.apply
                                     and not written and not self.stale())
        self.rollback_button.setEnabled(not running and written)
        self.report_button.setEnabled(not running and result is not None)

    # events --------------------------------------------------------------------------------
    def pump(self) -> int:
        """Apply the events the worker queued since the last tick; returns how many."""
        return self.live_pump.pump()

    def _show_events(self, events) -> None:
        from specdeck.core.bench.runner import RunStarted

        for event in events:
            self.live.apply(event)
            # A write the tune made (a Hub draft it installed) is said to every page.
            self.context.announce(getattr(event, "changed", None))
            if isinstance(event, RunStarted) and self.plots is not None:
                for series in (*self.plots.speed.values(), *self.plots.accept.values()):
                    series.gap()
        if events:
            self._show_live()

    def _show_live(self) -> None:
        live = self.live
        self.phases.setText(self._phases_html(live.phase))
        self.stage.setText(CANCELLING_TEXT if self._cancelling else live.stage or live.phase_text)
        self.round.setText(live.round_text())
        self.best.setText(live.best_text() if live.cells else "")
        self._show_candidates()
        if self.plots is not None:
            self.plots.set_acceptance_title(True, unreported=live.acceptance_unknown)
            series = {"speed": self.plots.speed, "accept": self.plots.accept,
                      "finished": self.plots.finished, "accept_done": self.plots.accept_done}
            for point in live.take_points():
                curve = series[point.series].get(point.arm)
                if curve is not None:
                    curve.add(point.t, point.value)
            self.live_pump.redraw_in_turn(self.plots, 2)  # speed and acceptance

    @staticmethod
    def _phases_html(current: str) -> str:
        names = [name for name, _ in PHASES]
        at = names.index(current) if current in names else (
            names.index("result") if current == "apply" else -1)
        parts = []
        for index, (_, title) in enumerate(PHASES):
            if index < at:
                parts.append(f"✔ {title}")
            elif index == at:
                parts.append(f"<b>▶ {title}</b>")
            else:
                parts.append(f"<span style='color:#6b7280'>{title}</span>")
        return " &nbsp;›&nbsp; ".join(parts)

    def _show_candidates(self) -> None:
        live = self.live
        rows = live.candidates
        table = self.candidates
        table.setRowCount(len(rows))
        best = live.best
        for index, row in enumerate(rows):
            cells = (row.candidate.label, row.predicted_text, row.size_text, row.download,
                     row.measured_text)
            for column, text in enumerate(cells):
                item = _item(table, index, column, text)
                font = item.font()
                font.setBold(best is not None and best.candidate == row.candidate)
                item.setFont(font)
            table.item(index, 0).setToolTip(row.candidate.label)
            table.item(index, len(COLUMNS) - 1).setToolTip(row.measured_text)
            table.item(index, 1).setToolTip(row.prediction.source)
        self.not_tried.setText("Not tried: " + "; ".join(f"{n.what} ({n.why})"
                                                         for n in live.not_tried)
                               if live.not_tried else "")
        forecast = live.forecast_rows()
        if forecast and self.tables.indexOf(self.forecast) < 0:
            self.tables.addTab(self.forecast, "Predicted from one plain run")
            self.tables.setCurrentWidget(self.forecast)
        elif not forecast and self.tables.indexOf(self.forecast) >= 0:
            self.tables.removeTab(self.tables.indexOf(self.forecast))
        self.forecast.setRowCount(len(forecast))
        for index, texts in enumerate(forecast):
            for column, text in enumerate(texts):
                _item(self.forecast, index, column, text)
            self.forecast.item(index, 0).setToolTip(texts[0])

    def finished(self, result) -> None:
        """Show a finished tune (core.tune.run.TuneResult): its verdict, the report, Apply."""
        self.live_pump.finish()
        self._cancelling = False
        self.result = result
        if self.result_request is None:  # a result handed in without start(): the form's
            self.result_request = self._form_request()
        if self.live is not None:
            self._show_live()
            if self.live.cells:
                self.best.setText(self.live.best_text(final=True, cancelled=result.cancelled))
            if self.plots is not None:
                self.plots.redraw()
        self.phases.setText(self._phases_html("result"))
        self.round.setText("")
        self.stage.setText("Cancelled: see the result below." if result.cancelled
                           else "Finished: see the result below.")
        self._show_result()
        self.context.show_status("Tuning finished" + (" (cancelled)" if result.cancelled else ""))
        self._sync()

    def _failed(self, error: BaseException) -> None:
        self.live_pump.finish()
        if self.plots is not None:  # every plot with its last points, fitted to them
            self.plots.redraw()
        self._cancelling = False
        if isinstance(error, CancelledError):
            self.stage.setText("Cancelled before the search began: nothing was written.")
            self.banner.show_message("Tuning was cancelled: nothing was written.", "info")
        else:
            self.stage.setText("Tuning stopped: see the message above.")
            self._show_error(error)
        self._sync()

    def _show_error(self, error: BaseException) -> None:
        self.banner.show_message(html.escape(str(error)), "error")

    # the result, Apply, Roll back ------------------------------------------------------------
    def _show_result(self) -> None:
        from specdeck.core.tune import report
        from specdeck.core.tune.live import result_lines

        result = self.result
        if result is None:
            self.verdict.setText(RUNNING_TEXT if self.tasks.running("tune") else IDLE_TEXT)
            self.report.clear()
            return
        rows = "".join(f"<tr><td style='padding-right:12px'><b>{html.escape(what)}</b></td>"
                       f"<td>{html.escape(text)}</td></tr>" for what, text in result_lines(result))
        self.verdict.setText(f"<table>{rows}</table>")
        # The report's headings, two levels down: a section of the page, not a document.
        self.report.setMarkdown(re.sub(r"^(#+) ", r"\1## ", report.markdown(result),
                                       flags=re.MULTILINE))

    def apply_result(self) -> None:
        """Show what would be written (the diff), then write it once the user says so."""
        if self.result is None or self.stale():
            return
        self.stage.setText("Reading the file the winner goes into…")
        self.tasks.run("apply", preview_apply, self.result, on_result=self._confirm,
                       on_error=self._apply_failed)
        self._sync()

    def _confirm(self, previewed) -> None:
        from specdeck.core.tune.apply import apply
        from specdeck.core.tune.live import apply_texts

        applied, asked = previewed
        if not asked:  # nothing to confirm: flags to copy, or already in the file
            self._applied(applied)
            return
        if not self.confirm_diff(applied):
            self.stage.setText("Not written: you cancelled.")
            self._sync()
            return
        self.stage.setText(apply_texts(self.result.setup, applied.path)[1])
        self.tasks.run("apply", apply, self.result, None, on_result=self._applied,
                       on_error=self._apply_failed)
        self._sync()

    def confirm_diff(self, applied) -> bool:
        """The user sees the exact change before anything is written."""
        from specdeck.core.tune.live import apply_texts
        from specdeck.gui.widgets.config_dialog import ConfirmChangeDialog

        dialog = ConfirmChangeDialog(applied.diff, "Write the tuned setting",
                                     apply_texts(self.result.setup, applied.path)[0], self,
                                     note=f"The drafting flags it writes: {applied.flags}")
        return dialog.exec() == QDialog.DialogCode.Accepted

    def roll_back(self) -> None:
        from specdeck.core.tune.apply import roll_back

        if self.result is None or self.result.applied is None:
            return
        self.tasks.run("apply", roll_back, self.result.applied, on_result=self._applied,
                       on_error=self._apply_failed)
        self._sync()

    def _applied(self, applied) -> None:
        from specdeck.core.tune.live import applied_text

        self._cancelling = False
        self.result = self.result.with_applied(applied)
        self.stage.setText(applied_text(applied))
        self.context.announce(applied.changed)
        self._show_result()
        if applied.written and applied.path is not None:
            self.context.show_status(f"{'Rolled back' if applied.rolled_back else 'Applied to'} "
                                     f"{applied.path}.")
        self._sync()

    def _apply_failed(self, error: BaseException) -> None:
        self._cancelling = False
        if isinstance(error, CancelledError):
            self.stage.setText("Cancelled: the file is as it was.")
        else:
            self.stage.setText("Nothing was changed: see the message above.")
            self._show_error(error)
        self._sync()

    def save_report(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Save the tuning report into")
        if folder:
            self.save_report_to(Path(folder))

    def save_report_to(self, folder: Path) -> None:
        from specdeck.core.tune import report

        self.tasks.run(None, report.write, self.result, folder, on_error=self._show_error,
                       on_result=lambda path: self.context.show_status(
                           f"Tuning report written to {path}"))

    # progress and result widgets ---------------------------------------------------------------
    def _build_progress(self) -> None:
        self.progress_box = QWidget()
        self.phases = QLabel(self._phases_html(""))
        self.stage = QLabel()
        self.stage.setWordWrap(True)
        self.stage.setProperty("role", "hint")
        self.round = QLabel()
        self.best = QLabel()
        bold = self.best.font()
        bold.setBold(True)
        self.best.setFont(bold)
        for label in (self.round, self.best, self.stage):  # core's words, shown as they are
            label.setTextFormat(Qt.TextFormat.PlainText)
            label.setWordWrap(True)  # a long setting's name must not squeeze the table
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.candidates = QTableWidget(0, len(COLUMNS))
        self.candidates.setHorizontalHeaderLabels(COLUMNS)
        self.candidates.verticalHeader().setVisible(False)
        self.candidates.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.candidates.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.candidates.setWordWrap(False)
        header = self.candidates.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        # The candidate's name and its best setting share the room the figures leave (a
        # draft model's folder name is long): elided in the middle, whole in the tooltip.
        for column in (0, len(COLUMNS) - 1):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Stretch)
        self.candidates.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.candidates.verticalHeader().setDefaultSectionSize(
            self.candidates.fontMetrics().height() + 8)
        self.forecast = QTableWidget(0, len(FORECAST_COLUMNS))
        self.forecast.setHorizontalHeaderLabels(FORECAST_COLUMNS)
        self.forecast.verticalHeader().setVisible(False)
        self.forecast.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.forecast.setWordWrap(False)
        self.forecast.setToolTip(FORECAST_TIP)
        self.forecast.horizontalHeader().setSectionResizeMode(
            QHeaderView.ResizeMode.ResizeToContents)
        # the setting whole; the positions take what is left, the later ones cut first
        self.forecast.horizontalHeader().setSectionResizeMode(
            FORECAST_COLUMNS.index("accepted by position"), QHeaderView.ResizeMode.Stretch)
        self.forecast.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.forecast.verticalHeader().setDefaultSectionSize(
            self.forecast.fontMetrics().height() + 8)
        self.not_tried = QLabel()
        self.not_tried.setWordWrap(True)
        self.not_tried.setProperty("role", "hint")
        self.not_tried.setTextFormat(Qt.TextFormat.PlainText)
        # the predictions get a tab of their own once the replay has made them
        self.tables = QTabWidget()
        self.tables.addTab(self.candidates, "Candidates")
        table_box = QVBoxLayout()
        table_box.addWidget(self.tables, 1)
        # Scrolls where the progress pane is short (1024x640): its lines had been cut off.
        self.not_tried_scroll = QScrollArea()
        self.not_tried_scroll.setWidgetResizable(True)
        self.not_tried_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.not_tried_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.not_tried_scroll.setWidget(self.not_tried)
        self.not_tried_scroll.setMaximumHeight(96)
        table_box.addWidget(self.not_tried_scroll)
        status = QVBoxLayout()
        status.addWidget(self.phases)
        status.addWidget(self.round)
        status.addWidget(self.best)
        status.addWidget(self.stage)
        status.addStretch(1)
        layout = QHBoxLayout(self.progress_box)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(table_box, 3)
        layout.addLayout(status, 2)
        # pyqtgraph costs ~0.4 s to import: the plots are built when the first tune starts.
        # Until then the area says what will be there (it was a blank third of the page).
        self.plots_host = QWidget()
        self.plots_idle = QLabel(PLOTS_IDLE_TEXT)
        self.plots_idle.setWordWrap(True)
        self.plots_idle.setProperty("role", "hint")
        self.plots_idle.setAlignment(Qt.AlignmentFlag.AlignCenter)
        host = QVBoxLayout(self.plots_host)
        host.setContentsMargins(0, 0, 0, 0)
        host.addWidget(self.plots_idle)

    def _build_result(self) -> None:
        self.result_box = QGroupBox("Result")
        self.verdict = QLabel(IDLE_TEXT)
        self.verdict.setWordWrap(True)
        self.verdict.setTextFormat(Qt.TextFormat.RichText)
        self.verdict.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.verdict.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.apply_button = QPushButton("Apply…")
        self.apply_button.setProperty("role", "primary")
        self.apply_button.setToolTip("Write the verified winner (the change is shown first)")
        self.apply_button.clicked.connect(self.apply_result)
        self.rollback_button = QPushButton("Roll back")
        self.rollback_button.setToolTip("Put the file back as it was before Apply")
        self.rollback_button.clicked.connect(self.roll_back)
        self.report_button = QPushButton("Save report…")
        self.report_button.setToolTip("tune.md, tune.json and every A/B run behind them")
        self.report_button.clicked.connect(self.save_report)
        self.report = QTextBrowser()
        self.report.setOpenLinks(False)
        self.report.setFont(QFont(self.report.font().family(), 9))
        # Qt's default wraps anywhere: a narrow table column read "grounde d". Words stay whole
        # (a wide table scrolls sideways instead).
        self.report.setWordWrapMode(QTextOption.WrapMode.WordWrap)
        buttons = QVBoxLayout()
        for button in (self.apply_button, self.rollback_button, self.report_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        self.stale_note = QLabel()
        self.stale_note.setWordWrap(True)
        self.stale_note.setObjectName("staleNote")
        self.stale_note.hide()
        # The verdict scrolls: at 1024x640 its lines were cut off with no scrollbar.
        self.verdict_scroll = QScrollArea()
        self.verdict_scroll.setWidgetResizable(True)
        self.verdict_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.verdict_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.verdict_scroll.setWidget(self.verdict)
        top = QHBoxLayout()
        top.addWidget(self.verdict_scroll, 1)
        top.addLayout(buttons)
        layout = QHBoxLayout(self.result_box)
        left = QVBoxLayout()
        left.addWidget(self.stale_note)
        left.addLayout(top, 1)
        layout.addLayout(left, 1)
        layout.addWidget(self.report, 1)

    def _ensure_plots(self) -> None:
        if self.plots is None:
            from specdeck.gui.bench_view import BenchPlots

            self.plots = BenchPlots()
            # A server's memory is not the tune's question, and the tune's events carry no
            # acceptance by draft position: their plots are not shown.
            for plot in (self.plots.memory_plot, self.plots.position_plot):
                self.plots.hide_plot(plot)
            self.plots_idle.hide()
            self.plots_host.layout().addWidget(self.plots)

    # lifecycle -----------------------------------------------------------------------------
    def _restore(self) -> None:
        self.set_form(form_settings.restore(SETTINGS_PREFIX, TuneForm()))
        if self.kind.currentData() == SWAP:
            self.load_models()

    def _save(self) -> None:
        form_settings.save(SETTINGS_PREFIX, self.form())

    def shutdown(self) -> None:
        self.live_pump.stop()
        self.tasks.close()


def _row(*widgets: QWidget) -> QWidget:
    host = QWidget()
    layout = QHBoxLayout(host)
    layout.setContentsMargins(0, 0, 0, 0)
    for widget in widgets:
        layout.addWidget(widget, 1 if isinstance(widget, QLineEdit) else 0)
    return host


def _item(table: QTableWidget, row: int, column: int, text: str) -> QTableWidgetItem:
    item = table.item(row, column)
    if item is None:
        item = QTableWidgetItem(text)
        table.setItem(row, column, item)
    else:
        item.setText(text)
    return item

