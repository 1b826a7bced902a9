"""A/B bench: run the same prompts with and without speculation, side by side, live.

The page builds a :class:`BenchPlan` from its controls and hands it to a
:class:`BenchSession` (a child process that owns the engine). A 50 ms timer drains the
session's events and updates the panes, plots and results table, so the GUI does a bounded
amount of work per frame however fast tokens arrive. Every figure comes from the core:
while the plan runs, ``core.bench.live.LivePlan`` (the reducer the CLI's progress uses too)
turns the events into rows, running medians and plot points; when it ends, the summary made
in the engine process (``core.bench.summary``). The page only renders them.
"""

from __future__ import annotations

import html
import json
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFrame,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)
from specdeck.core.bench.fields import PLAN_FIELDS
from specdeck.core.bench.live import LivePlan, Point, RunRow
from specdeck.core.bench.plan import Arm, BenchPlan, default_arms
from specdeck.core.bench.runner import (
    PlanStarted,
    RunFinished,
    RunRecord,
    RunStarted,
    RunStep,
    Stage,
)
from specdeck.core.bench.sweep import DEFAULT_KS
from specdeck.core.errors import CancelledError, SpecDeckError
from specdeck.gui.bench_view import ResultsTable, StreamPane, arm_colour
from specdeck.gui.widgets.banner import Banner

log = logging.getLogger(__name__)

DEMO = "demo"
MAX_PANES = 4
"""More arms than this (a sweep) share one pane for the drafted arms, beside the reference."""
DRAIN_INTERVAL_MS = 50
MEMORY_INTERVAL_S = 0.25
SETTINGS_PREFIX = "bench/"
HISTORY_SHOWN = 100
"""The History list shows the newest runs; older ones stay on disk in the history folder."""
SERVERS_TIP = ("One arm per server, comma-separated: [NAME=]URL[#MODEL]. The first is the "
               "no-draft reference. API keys come from SPECDECK_SERVER_API_KEY or the keyring. "
               "Arms… for launched llama-servers and per-arm key variables.")
GiB = 1024**3


def create_page(context):
    return BenchPage(context)


@dataclass
class _PlanView:
    """The plan in progress: the core's live state, and where the page shows it."""

    live: LivePlan
    panes: dict[str, StreamPane]
    """Arm name -> its pane (arms beyond MAX_PANES share one)."""
    pane: StreamPane | None = None
    """The pane of the run in progress."""
    table_rows: dict[int, int] | None = None
    """LivePlan row index -> results table row."""

    @property
    def plan(self) -> BenchPlan:
        return self.live.plan

    @property
    def arms(self) -> list[str]:
        return self.live.arms


class BenchPage(QWidget):
    def __init__(self, context, parent: QWidget | None = None, session_factory=None):
        super().__init__(parent)
        self.context = context
        self._session_factory = session_factory
        self.session = None
        self.state: _PlanView | None = None
        self.last_run = None
        self._last_memory_sample = 0.0
        self._plot_turn = 0
        self.last_summary = None
        self.last_report = None
        self._engines_probed = False

        from specdeck.gui.workers import Tasks

        self.tasks = Tasks(self)
        """Background calls by key: "probe", "history", "apply", ... (see gui.workers.Tasks)."""
        self.banner = Banner()
        self._build_setup()
        self.panes_host = QWidget()
        self.panes_layout = QHBoxLayout(self.panes_host)
        self.panes_layout.setContentsMargins(0, 0, 0, 0)
        self.highlight = QCheckBox("Highlight text from accepted drafts")
        self.highlight.setChecked(True)
        self.highlight.toggled.connect(self._set_highlight)
        panes_box = QWidget()
        panes_v = QVBoxLayout(panes_box)
        panes_v.setContentsMargins(0, 0, 0, 0)
        panes_v.addWidget(self.panes_host, 1)
        panes_v.addWidget(self.highlight)

        # pyqtgraph costs ~0.4 s to import: the plots are built after the page first shows.
        self.plots = None
        self.plots_host = QWidget()
        QVBoxLayout(self.plots_host).setContentsMargins(0, 0, 0, 0)

        self.table = ResultsTable()
        self.summary = QLabel("Press Start to run the plan.")
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.summary.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.summary.setMinimumWidth(300)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        summary_scroll = QScrollArea()
        summary_scroll.setWidget(self.summary)
        summary_scroll.setWidgetResizable(True)
        summary_scroll.setFrameShape(QFrame.Shape.NoFrame)
        results = QWidget()
        results_layout = QHBoxLayout(results)
        results_layout.setContentsMargins(0, 0, 0, 0)
        results_layout.addWidget(self.table, 3)
        results_layout.addWidget(summary_scroll, 2)

        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(panes_box)
        splitter.addWidget(self.plots_host)
        splitter.addWidget(results)
        splitter.setSizes([300, 190, 220])
        splitter.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.addWidget(self.banner)
        layout.addWidget(self.setup)
        layout.addWidget(splitter, 1)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

        self.timer = QTimer(self)
        self.timer.setInterval(DRAIN_INTERVAL_MS)
        self.timer.timeout.connect(self.pump)
        self._restore()
        self._make_panes([a.label for a in self._arms_preview()])
        self._sync_controls()

    # setup ---------------------------------------------------------------------------------
    def _build_setup(self) -> None:
        from specdeck.core.bench.suites import builtin_suites
        from specdeck.core.engines import engine_label, engine_names

        self.setup = QGroupBox("Plan")
        grid = QGridLayout(self.setup)
        self.engine = QComboBox()
        for name in engine_names():
            self.engine.addItem(engine_label(name), name)
        self._suites = builtin_suites()
        self.model = QComboBox()
        self.model.setEditable(True)
        self.model.addItem(DEMO)
        self.model.setToolTip('A model folder, or "demo" for the embedded SmolLM2-135M demo model')
        self.model.setMinimumWidth(150)
        browse_model = QToolButton()
        browse_model.setText("…")
        browse_model.clicked.connect(lambda: self._browse(self.model.lineEdit()))
        self.servers = QLineEdit()
        self.servers.setPlaceholderText("http://127.0.0.1:8080, B=http://127.0.0.1:8081")
        self.servers.setToolTip(SERVERS_TIP)
        self.probe_button = QToolButton()
        self.probe_button.setText("Probe")
        self.probe_button.setToolTip("Ask each server what it is, what it has loaded and whether "
                                     "it drafts")
        self.probe_button.clicked.connect(self.probe_servers)
        self.arms_button = QToolButton()
        self.arms_button.setText("Arms…")
        self.arms_button.setToolTip("Edit the arms one per row: running servers (URL, model, key "
                                    "variable) or llama-servers SpecDeck launches (their flags)")
        self.arms_button.clicked.connect(self.edit_server_arms)
        self._edited_arms = None
        """Arms from the Arms dialog that the one-line list cannot express (launched
        llama-servers, key variables); None: the line is the list."""
        from specdeck.gui.widgets.server_arms_dialog import LaunchSettings

        self._launch_settings = LaunchSettings()
        self._one_at_a_time = False
        self.server_info = QLabel()
        self.server_info.setProperty("role", "hint")
        self.server_info.setWordWrap(True)
        self.use_draft = QCheckBox("Draft model")
        self.draft = QLineEdit()
        self.draft.setPlaceholderText('draft model folder, or "demo"')
        self.draft.setToolTip('A draft model folder, or "demo": the embedded SmolLM2-135M drafts for '
                              "a larger SmolLM2 target")
        browse_draft = QToolButton()
        browse_draft.setText("…")
        browse_draft.clicked.connect(lambda: self._browse(self.draft))
        self.use_ngram = QCheckBox("N-gram")
        self.use_ngram.setChecked(True)
        self.k = self._spin("k", "k = ", "")
        self.k.setToolTip(PLAN_FIELDS["k"].describe())
        self.adaptive = QCheckBox("adaptive")
        self.adaptive.setToolTip("Draft fewer tokens after rejections (PyTorch engine only)")
        self.adaptive.setChecked(True)
        low, high = DEFAULT_KS[0], DEFAULT_KS[-1]
        self.sweep = QCheckBox(f"sweep k {low}–{high}")
        self.sweep.setToolTip(f"Run every k from {low} to {high} (exactly k drafts per step) for "
                              "each ticked drafter, interleaved per prompt, then apply the best")
        self.sweep.toggled.connect(self._sync_k)

        self.suite_buttons: dict[str, QToolButton] = {}
        suites_row = QHBoxLayout()
        for name, suite in self._suites.items():
            button = QToolButton()
            button.setText(name)
            button.setCheckable(True)
            button.setToolTip(suite.description)
            button.setChecked(name in ("code", "grounded"))
            self.suite_buttons[name] = button
            suites_row.addWidget(button)
        suites_row.addStretch(1)
        self.per_suite = QSpinBox()
        self.per_suite.setRange(1, max(len(s.prompts) for s in self._suites.values()))
        self.per_suite.setSuffix(" per suite")
        self.max_new = self._spin("max_new_tokens", "", " new tokens")
        self.repeats = self._spin("repeats", "× ", "")
        self.warmup = self._spin("warmup", "warm-up ", "")
        self.start_button = QPushButton("Start")
        self.start_button.setProperty("role", "primary")
        self.start_button.clicked.connect(self.start)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self.stop)
        self.export_button = QPushButton("Export report…")
        self.export_button.setToolTip("JSON (complete), CSV (one row per run), Markdown, SVG chart "
                                      "and the plan, to repeat the run")
        self.export_button.setEnabled(False)
        self.export_button.clicked.connect(self.export_report)
        self.apply_button = QPushButton("Apply best…")
        self.apply_button.setEnabled(False)
        self.apply_button.clicked.connect(self.apply_best)
        self.best_setting = None
        """core.bench.sweep.SweepRow of the finished plan's winner (None: no draft won)."""
        self.history = QComboBox()
        self.history.setMinimumWidth(150)
        self.history.setMaximumWidth(320)
        self.history.setToolTip("Past A/B runs (each saved with its report and plan)")
        self.history.setPlaceholderText("History")
        self.open_history = QToolButton()
        self.open_history.setText("Open")
        self.open_history.setToolTip("Open the selected run's report folder")
        self.open_history.clicked.connect(self._open_history)
        self.progress = QProgressBar()
        self.progress.setTextVisible(True)
        self.progress.setFormat("%v / %m runs")
        self.stage = QLabel()
        self.stage.setProperty("role", "hint")

        # One control group per row, each spanning the width: the bar fits 1280 px screens
        # (a wide grid needed 1342 px) and grows downwards instead.
        grid.addWidget(QLabel("Engine"), 0, 0)
        top = QHBoxLayout()
        top.addWidget(self.engine)
        self.target_label = QLabel("Target")
        top.addWidget(self.target_label)
        top.addWidget(self.model, 1)
        top.addWidget(browse_model)
        top.addWidget(self.servers, 1)
        top.addWidget(self.probe_button)
        top.addWidget(self.arms_button)
        self._local_only = [self.model, browse_model, browse_draft]
        grid.addLayout(top, 0, 1)
        draft_row = QHBoxLayout()
        draft_row.addWidget(self.use_draft)
        draft_row.addWidget(self.draft, 1)
        draft_row.addWidget(browse_draft)
        draft_row.addWidget(self.use_ngram)
        draft_row.addWidget(self.k)
        draft_row.addWidget(self.adaptive)
        draft_row.addWidget(self.sweep)
        draft_row.addWidget(self.server_info, 1)
        self._local_only += [self.use_draft, self.draft, self.use_ngram, self.k, self.adaptive,
                             self.sweep]
        self.drafters_label = QLabel("Drafters")
        grid.addWidget(self.drafters_label, 1, 0)
        grid.addLayout(draft_row, 1, 1)
        grid.addWidget(QLabel("Prompts"), 2, 0)
        grid.addLayout(suites_row, 2, 1)
        sizes = QHBoxLayout()
        for widget in (self.per_suite, self.max_new, self.repeats, self.warmup):
            sizes.addWidget(widget)
        sizes.addStretch(1)
        sizes.addWidget(self.start_button)
        sizes.addWidget(self.stop_button)
        grid.addWidget(QLabel("Size"), 3, 0)
        grid.addLayout(sizes, 3, 1)
        status = QHBoxLayout()
        status.addWidget(self.progress, 2)
        status.addWidget(self.stage, 2)
        status.addWidget(self.apply_button)
        status.addWidget(self.export_button)
        status.addWidget(self.history, 1)
        status.addWidget(self.open_history)
        grid.addLayout(status, 4, 0, 1, 2)
        grid.setColumnStretch(1, 1)
        for widget in (self.use_draft, self.use_ngram, self.draft):
            signal = widget.textChanged if isinstance(widget, QLineEdit) else widget.toggled
            signal.connect(self._preview_arms)
        self.k.valueChanged.connect(self._preview_arms)
        self.adaptive.toggled.connect(self._preview_arms)
        self.sweep.toggled.connect(self._preview_arms)
        self.servers.textChanged.connect(self._preview_arms)
        self.engine.currentIndexChanged.connect(self._sync_engine)
        self._show_engine_controls()  # the panes do not exist yet: no preview here

    def _serving(self) -> bool:
        return self.engine.currentData() == "server"

    def _sync_engine(self, *_args) -> None:
        self._show_engine_controls()
        self._preview_arms()

    def _show_engine_controls(self) -> None:
        """Local engines: a target and drafters. Servers: one URL per arm (their drafting is
        whatever each server was started with)."""
        serving = self._serving()
        for widget in self._local_only:
            widget.setVisible(not serving)
        self.servers.setVisible(serving)
        self.probe_button.setVisible(serving)
        self.arms_button.setVisible(serving)
        self.server_info.setVisible(serving)
        self.target_label.setText("Servers" if serving else "Target")
        self.drafters_label.setText("Found" if serving else "Drafters")
        if serving and not self.server_info.text():
            self.server_info.setText("Probe to see what each server is and whether it drafts.")

    def _server_arms(self):
        from specdeck.core.servers.arms import arms_from_urls

        if self._edited_arms is not None:
            return self._edited_arms
        return arms_from_urls(re.split(r"[,\s]+", self.servers.text().strip()))

    def edit_server_arms(self) -> None:
        from specdeck.gui.widgets.server_arms_dialog import ServerArmsDialog

        try:
            arms = self._server_arms()
        except SpecDeckError:
            arms = ()
        dialog = ServerArmsDialog(arms, self._launch_settings, self._one_at_a_time, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(lambda: self._take_arms(dialog))
        self.arms_dialog = dialog
        dialog.open()

    def _take_arms(self, dialog) -> None:
        self._launch_settings = dialog.launch_settings()
        self._one_at_a_time = dialog.one_at_a_time.isChecked()
        self._set_server_arms(dialog.arms())

    def _set_server_arms(self, arms) -> None:
        """Show ``arms`` in the one-line list when it can hold them, else as a summary."""
        plain = all(a.server.launch is None and a.server.api_key_env is None
                    and a.server.tabby is None and a.server.draft_model is None for a in arms)
        self._edited_arms = None if plain else tuple(arms)
        self.servers.setReadOnly(not plain)
        if plain:
            self.servers.setText(", ".join(
                f"{a.name}={a.server.url}" + (f"#{a.server.model}" if a.server.model else "")
                for a in arms))
            self.servers.setToolTip(SERVERS_TIP)
        else:
            self.servers.setText(" · ".join(f"{a.name}: {a.server.where}" for a in arms))
            self.servers.setToolTip("Set in Arms… (launched llama-servers or key variables "
                                    "do not fit on one line); edit them there.")
        self._preview_arms()

    def handle_request(self, argument: str) -> None:
        """From the start page: "demo" runs the demo A/B; a URL becomes a server arm."""
        if self._running():
            return
        if argument == "demo":
            self.engine.setCurrentIndex(self.engine.findData("torch"))
            self.model.setEditText(DEMO)
            self.use_draft.setChecked(False)
            self.use_ngram.setChecked(True)
            self.sweep.setChecked(False)
            self.start()
        elif argument.startswith("http"):
            self.engine.setCurrentIndex(self.engine.findData("server"))
            if self._edited_arms is not None:
                from specdeck.core.bench.plan import _arm_name
                from specdeck.core.servers.arms import url_arm

                if all(a.server.url != argument for a in self._edited_arms):
                    arm = url_arm(_arm_name(len(self._edited_arms)), argument)
                    self._set_server_arms((*self._edited_arms, arm))
            elif argument not in self.servers.text():
                self.servers.setText(", ".join(t for t in (self.servers.text().strip(), argument) if t))
            self.probe_servers()

    def probe_servers(self) -> None:
        try:
            arms = self._server_arms()
        except SpecDeckError as exc:
            self.server_info.setText(html.escape(str(exc)))
            return
        self.server_info.setText("Probing…")
        self._submit("probe", _probe_arms, arms, on_result=self._show_probes)

    def _show_probes(self, lines) -> None:
        self.server_info.setText(" · ".join(lines) or "No server given.")

    @staticmethod
    def _spin(name: str, prefix: str, suffix: str) -> QSpinBox:
        """A spin box over one of the plan's fields: its range is the CLI's and plan.json's."""
        field = PLAN_FIELDS[name]
        spin = QSpinBox()
        spin.setRange(field.low, field.high)
        spin.setValue(field.quick)
        spin.setToolTip(field.describe())
        spin.setPrefix(prefix)
        spin.setSuffix(suffix)
        return spin

    def _browse(self, line: QLineEdit) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Choose a model folder", line.text())
        if folder:
            line.setText(folder)

    def _arms_preview(self):
        if self._serving():
            try:
                return self._server_arms() or (Arm("A"),)
            except SpecDeckError:
                return (Arm("A"),)
        draft = self.draft.text().strip() if self.use_draft.isChecked() else None
        try:
            arms = default_arms(draft or None, self.use_ngram.isChecked(), self.k.value(),
                                self.adaptive.isChecked())
        except SpecDeckError:
            arms = default_arms(None, self.use_ngram.isChecked(), self.k.value())
        if self.sweep.isChecked() and len(arms) > 1:
            from specdeck.core.bench.sweep import sweep_arms

            return sweep_arms([a.drafter for a in arms[1:]])
        return arms

    def _sync_k(self) -> None:
        sweeping = self.sweep.isChecked()
        for widget in (self.k, self.adaptive):
            widget.setEnabled(not sweeping and not self._running())

    def _preview_arms(self, *_args) -> None:
        if self.state is None or not self._running():
            self._make_panes([a.label for a in self._arms_preview()])

    def plan_from_controls(self) -> BenchPlan:
        """The plan the controls describe; SpecDeckError when they describe none."""
        suites = [name for name, button in self.suite_buttons.items() if button.isChecked()]
        if not suites:
            raise SpecDeckError("No prompt suite is selected.", "Tick at least one suite.")
        prompt_ids = tuple(p.id for name in suites
                           for p in self._suites[name].prompts[: self.per_suite.value()])
        if self._serving():
            arms = self._server_arms()
            if not arms:
                raise SpecDeckError("No server is given.", "Type the reference server's URL, "
                                    "then the drafting server(s), separated by commas.")
            plan = BenchPlan(engine="server", model="server", arms=arms,
                             suites=tuple(suites), prompt_ids=prompt_ids,
                             max_new_tokens=self.max_new.value(), repeats=self.repeats.value(),
                             warmup=self.warmup.value(), one_server_at_a_time=self._one_at_a_time)
            plan.require_comparison("Give the reference server first, then the drafting "
                                    "server(s), separated by commas.")
            return plan
        if self.use_draft.isChecked() and not self.draft.text().strip():
            raise SpecDeckError("Draft model is ticked but no folder is given.",
                                "Choose the draft model's folder, or untick Draft model.")
        plan = BenchPlan(
            engine=self.engine.currentData(),
            model=self.model.currentText().strip() or DEMO,
            arms=self._arms_preview(),
            suites=tuple(suites),
            prompt_ids=prompt_ids,
            max_new_tokens=self.max_new.value(),
            repeats=self.repeats.value(),
            warmup=self.warmup.value(),
        )
        plan.require_comparison("Tick Draft model and/or N-gram.")
        return plan

    # run control ---------------------------------------------------------------------------
    def _running(self) -> bool:
        return self.session is not None and self.state is not None and self.timer.isActive()

    def start(self) -> None:
        try:
            plan = self.plan_from_controls()
        except SpecDeckError as exc:
            self.banner.show_message(html.escape(str(exc)), "error")
            return
        if self.session is None or not self.session.alive:
            from specdeck.core.bench.session import BenchSession

            self.session = (self._session_factory or BenchSession)()
            pid = getattr(self.session, "worker_pid", None)
            if pid is not None:  # the engine's VRAM is SpecDeck's own on the GPUs page
                self.context.gpu_sampler().set_own_pids({pid})
        self.banner.hide()
        self._save()
        self.export_button.setEnabled(False)
        self.apply_button.setEnabled(False)
        self.last_run = self.last_summary = self.last_report = self.best_setting = None
        self.state = _PlanView(LivePlan(plan), {}, table_rows={})
        self.table.setRowCount(0)
        self.summary.setText("Loading…")
        self.progress.setRange(0, 0)
        self.session.start(plan)
        self.timer.start()
        self._sync_controls()

    def stop(self) -> None:
        if self.session is not None:
            self.session.stop()
            self.stage.setText("Stopping after the current step…")

    def _sync_controls(self) -> None:
        running = self._running()
        self.start_button.setEnabled(not running)
        self.stop_button.setEnabled(running)
        self.setup_inputs_enabled(not running)

    def setup_inputs_enabled(self, enabled: bool) -> None:
        for widget in (self.engine, self.model, self.use_draft, self.draft, self.use_ngram, self.sweep,
                       self.per_suite, self.max_new, self.repeats, self.warmup, self.servers,
                       self.probe_button, *self.suite_buttons.values()):
            widget.setEnabled(enabled)
        self._sync_k()

    # events ------------------------------------------------------------------------------
    def pump(self) -> int:
        """Apply what the session reported since the last tick; returns the events handled."""
        if self.session is None:
            return 0
        from specdeck.core.bench.session import PlanDone, PlanFailed

        events = self.session.drain()
        steps: list[RunStep] = []
        for event in events:
            if isinstance(event, RunStep):
                steps.append(event)
                continue
            if steps:
                self._on_steps(steps)
                steps = []
            if isinstance(event, RunStarted):
                self._on_run_started(event)
            elif isinstance(event, RunFinished):
                self._on_run_finished(event)
            elif isinstance(event, Stage):
                self.stage.setText(event.text)
            elif isinstance(event, PlanStarted):
                self._on_plan_started(event)
            elif isinstance(event, PlanDone):
                self._on_done(event)
            elif isinstance(event, PlanFailed):
                self._on_failed(event.error)
        if steps:
            self._on_steps(steps)
        self._tick_live()
        return len(events)

    def _on_plan_started(self, event: PlanStarted) -> None:
        state = self.state
        state.live.apply(event)
        self._make_panes([a.label for a in event.plan.arms])
        state.panes = {arm: self._panes[min(i, len(self._panes) - 1)] for i, arm in enumerate(state.arms)}
        self._ensure_plots()
        if self.plots is not None:
            self.plots.reset(state.arms)
            self.plots.set_acceptance_title(state.live.serving)
        self.progress.setRange(0, state.live.total)
        self.progress.setValue(0)
        self.stage.setText(f"Running on {event.loaded.label}")

    def _on_run_started(self, event: RunStarted) -> None:
        state = self.state
        state.live.apply(event)
        slot = event.slot
        pane = state.pane = state.panes[slot.arm.name]
        if len(state.arms) > len(self._panes):  # a shared pane says which arm it shows now
            pane.set_title(slot.arm.label, arm_colour(state.arms.index(slot.arm.name)))
        what = "warm-up" if slot.warmup else f"repeat {slot.repeat + 1}"
        tokens = (f"{event.prompt_tokens} prompt tokens" if event.prompt_tokens
                  else "prompt tokenized by the server")
        pane.begin(f"{slot.prompt.id} · {what} · {tokens}")
        pane.metrics.setText("prefill…")
        if self.plots is not None:
            self.plots.speed[slot.arm.name].gap()
            if slot.arm.name in self.plots.accept:
                self.plots.accept[slot.arm.name].gap()

    def _on_steps(self, steps: list[RunStep]) -> None:
        """Consecutive verify steps (all of the current run, normally): one pane update."""
        state = self.state
        current = state.live.current if state else None
        mine = [s for s in steps if current is not None and s.slot == current.slot]
        for step in mine:
            state.live.apply(step)
        if mine and state.pane is not None:
            state.pane.append_steps([(s.event.text, s.event.draft_chars, s.event.accepted,
                                      len(s.event.token_ids)) for s in mine])

    def _tick_live(self) -> None:
        state = self.state
        now = time.monotonic()
        if state is None or self.plots is None:
            return
        self._plot(state.live.take_points())
        current = state.live.current
        if current is not None and current.new_tokens and state.pane is not None:
            rate, accept = current.tokens_per_second, current.acceptance_rate
            parts = [_rate(rate) if rate is not None else "",
                     f"{100 * accept:.0f}% of drafts accepted" if accept is not None else "",
                     f"{current.new_tokens} tokens"]
            state.pane.metrics.setText(" · ".join(p for p in parts if p))
        if now - self._last_memory_sample >= MEMORY_INTERVAL_S:
            self._last_memory_sample = now
            self._sample_memory(state.live.elapsed())
        self._plot_turn = (self._plot_turn + 1) % 3
        self.plots.redraw(only=self._plot_turn)

    def _plot(self, points: list[Point]) -> None:
        series = {"speed": self.plots.speed, "accept": self.plots.accept,
                  "finished": self.plots.finished, "accept_done": self.plots.accept_done}
        for point in points:
            curve = series[point.series].get(point.arm)
            if curve is not None:
                curve.add(point.t, point.value)

    def _sample_memory(self, t: float) -> None:
        loaded = self.state.live.loaded if self.state else None
        if loaded is not None and str(loaded.device).startswith("cuda"):
            frame = self.context.gpu_sampler().latest
            for gpu in frame.gpus if frame is not None else ():
                if gpu.memory_used is not None:
                    self.plots.add_memory(f"GPU {gpu.index} VRAM", t, gpu.memory_used / GiB)
            return
        import psutil

        try:
            rss = psutil.Process(self.session.worker_pid).memory_info().rss
        except (psutil.Error, ValueError):
            return
        self.plots.add_memory("engine process RSS", t, rss / GiB)

    def _on_run_finished(self, event: RunFinished) -> None:
        state = self.state
        live = state.live
        record = event.record
        was_current = live.current is not None and live.current.slot == record.slot
        changed = live.apply(event)
        self.progress.setValue(live.done)
        if was_current and state.pane is not None:
            state.pane.metrics.setText(self._run_metrics(record))
            state.pane = None
        if not record.counted:
            return
        if self.plots is not None:
            self._plot(live.take_points())
            if live.serving:
                self.plots.set_acceptance_title(True, unreported=live.acceptance_unknown)
        for index in changed:
            self._show_row(index)
        self.summary.setText(self._summary_html())

    @staticmethod
    def _run_metrics(record: RunRecord) -> str:
        stats = record.result.stats
        parts = [f"{stats.tokens_per_second:.1f} tok/s", f"{stats.new_tokens} tokens"]
        if stats.acceptance_rate is not None:
            parts.insert(1, f"{100 * stats.acceptance_rate:.0f}% accepted")
        if not record.complete:
            parts.append("stopped")
        return " · ".join(parts)

    def _show_row(self, index: int) -> None:
        """Add the live state's row ``index`` to the table, or refresh it (its reference
        finished after it: the ratio and output columns fill in now)."""
        state = self.state
        row: RunRow = state.live.rows[index]
        record, stats = row.record, row.record.result.stats
        ratio = "" if row.speedup is None else f"{row.speedup:.2f}×"
        output = "" if row.output is None else row.output.text
        table_row = state.table_rows.get(index)
        if table_row is not None:
            self.table.set_cell(table_row, 5, ratio)
            self.table.set_cell(table_row, 9, output)
            return
        accepted = "" if stats.acceptance_rate is None else f"{100 * stats.acceptance_rate:.0f}%"
        mean_len = "" if not stats.drafted else f"{stats.mean_acceptance_length:.2f}"
        ttft = "" if stats.time_to_first_token_s is None else f"{1000 * stats.time_to_first_token_s:.0f}"
        warn = 9 if row.output is not None and row.output.differs else None
        table_row = self.table.add_row(
            [record.arm, record.prompt_id, str(record.slot.repeat + 1), str(stats.new_tokens),
             f"{stats.tokens_per_second:.1f}", ratio, ttft, accepted, mean_len, output],
            arm_colour(state.arms.index(record.arm)), warn,
        )
        self.table.item(table_row, 0).setToolTip(record.slot.arm.label)
        state.table_rows[index] = table_row

    def _summary_html(self) -> str:
        """The running figures (the bootstrap interval, theory and causes come from the
        summary once the plan ends)."""
        state = self.state
        base = state.live.reference
        lines = []
        for arm in state.live.figures():
            head = _arm_head(arm.label, state.arms.index(arm.name))
            if arm.median_speedup is None:
                lines.append(f"<p>{head}: waiting for paired runs</p>")
                continue
            lines.append(
                f"<p>{head}<br>{_speedup_html(arm.median_speedup, arm.pairs, arm.min_speedup, arm.max_speedup, base)})<br>"
                f"acceptance {_percent(arm.acceptance_rate)} · "
                f"{_identical_html(arm.checkable, arm.identical, arm.pairs, base)}</p>"
            )
        return "<b>So far</b>" + "".join(lines)

    def _final_html(self, summary, only=None) -> str:
        """The finished plan, all from ``core.bench.summary`` (a sweep: ``only`` its best arm's
        row; every arm is in the table and the report)."""
        from specdeck.core.bench.report import bandwidth_text

        state = self.state
        base = summary.reference
        reference = summary.arm(base)
        lines = [f"<p>{_arm_head(reference.label, 0)}: {_rate(reference.tokens_per_second)}"
                 + (f" · weights read at {bandwidth_text(reference.weight_read_rate, reference.roofline_share)}"
                    if reference.weight_read_rate else "") + "</p>"]
        for comparison in summary.comparisons:
            if only is not None and comparison.arm != only:
                continue
            head = _arm_head(comparison.label, state.arms.index(comparison.arm))
            ratio, check = comparison.speedup, comparison.lossless
            if ratio is None:
                lines.append(f"<p>{head}: no paired runs</p>")
                continue
            verdict = {"slower": "<b style='color:#b91c1c'>slower</b>"}.get(ratio.verdict, ratio.verdict)
            parts = [
                f"{_speedup_html(ratio.median, ratio.n, ratio.minimum, ratio.maximum, base)}; "
                f"95% CI {ratio.ci_low:.2f}–{ratio.ci_high:.2f}×): {verdict}",
                f"acceptance {_percent(summary.arm(comparison.arm).acceptance_rate)} · "
                + _identical_html(check.checkable, check.identical, check.compared, base),
            ]
            parts += [f"likely cause: {html.escape(c)}" for c in comparison.causes]
            arm = summary.arm(comparison.arm)
            if arm.weight_read_rate:
                parts.append(f"{_rate(arm.tokens_per_second)} · weights read at "
                             f"{bandwidth_text(arm.weight_read_rate, arm.roofline_share)}")
            theory = comparison.theory
            if theory is not None and theory.predicted_speedup is not None:
                best = (f"; best predicted k = {theory.best_k} ({theory.best_speedup:.2f}×)"
                        if theory.best_k else "; no k is predicted to beat no drafting")
                parts.append(f"theory (Leviathan, cost ratio {html.escape(theory.cost_ratio.source)}): "
                             f"{theory.predicted_speedup:.2f}× at k = {theory.k}{best}")
            parts.append(html.escape(check.verdict))
            lines.append(f"<p>{head}<br>" + "<br>".join(parts) + "</p>")
        return "<b>Result</b>" + "".join(lines)

    def _on_done(self, done) -> None:
        run = self.last_run = done.run
        self.timer.stop()
        self._tick_live()
        if self.plots is not None:
            self.plots.redraw()
        stopped = " (stopped early)" if run.cancelled else ""
        self.stage.setText(f"Finished{stopped}: {len(run.counted())} measured runs in "
                           f"{run.finished_at - run.started_at:.1f} s")
        self.summary.setText(self._summary_html())
        self.context.show_status("A/B run finished" + stopped)
        self._sync_controls()
        self._submit(None, _keep, run, done.summary, on_result=self._show_final)

    def _submit(self, key: str | None, fn, *args, on_result=None) -> None:
        self.tasks.run(key, fn, *args, on_result=on_result, on_error=self._task_failed)

    def _task_failed(self, error: BaseException) -> None:
        self.banner.show_message(html.escape(str(error)), "error")

    def _show_final(self, result) -> None:
        from specdeck.core.bench.sweep import best_row

        summary, paths, rows = result
        if self.last_run is None or summary.counted_runs != len(self.last_run.counted()):
            return  # a newer run started meanwhile
        self.last_summary, self.last_report = summary, paths
        self.best_setting = best = best_row(rows)
        self.export_button.setEnabled(True)
        swept = len(rows) > len({r.candidate for r in rows})
        if swept:
            self.summary.setText(_sweep_html(rows, best, summary)
                                 + (self._final_html(summary, only=best.arm) if best else ""))
        else:
            self.summary.setText(self._final_html(summary))
        self._offer_apply(rows, best)
        self.refresh_history()

    # apply -------------------------------------------------------------------------------
    def _offer_apply(self, rows, best) -> None:
        if not any(r.speedup is not None for r in rows):
            return
        if self.last_run is not None and self.last_run.plan.engine == "server":
            return  # a running server's settings are not SpecDeck's to write
        if best is None:
            self.apply_button.setText("Switch drafting off…")
            why = "No setting beat decoding without a draft"
        else:
            self.apply_button.setText(f"Apply {best.candidate} k={best.k}…")
            why = f"The best setting: {best.candidate}, k={best.k}, {best.score:.2f}× (median paired)"
        self.apply_button.setEnabled(True)
        self.apply_button.setToolTip(f"{why}. Writes TabbyAPI's config.yml through the config "
                                     "editor; you see the change first.")

    def apply_best(self) -> None:
        """Write the finished plan's best setting into config.yml, after showing the diff."""
        from specdeck.core.bench.sweep import plan_apply_setting

        path = self.context.config_path
        if path is None:
            self.banner.show_message(
                "No TabbyAPI config.yml is open. Open it on the Draft settings page, then press "
                "Apply again.", "warning")
            return
        drafter = None if self.best_setting is None else self.best_setting.drafter
        self._submit("apply", plan_apply_setting, drafter, path, on_result=self._confirm_apply)

    def _confirm_apply(self, planned) -> None:
        from specdeck.gui.widgets.config_dialog import confirm_and_save

        best = self.best_setting
        what = ("switch the draft model off" if best is None
                else f"use <b>{html.escape(best.candidate)}</b> (k={best.k}, {best.score:.2f}× here)")
        notes = "".join(f"<br>{html.escape(n)}" for n in planned.notes)
        if planned.is_noop:
            self.context.show_status("config.yml already has this setting.")
            return
        saved = confirm_and_save(
            self, planned.change, "Apply the A/B result",
            f"Make TabbyAPI {what}. SpecDeck will change config.yml like this (the previous "
            f"version is kept as config.yml.bak):{notes}",
        )
        if saved is not None and saved.written:
            self.context.config_saved.emit(str(saved.path))
            self.context.show_status(f"Applied to {saved.path}.")

    def export_report(self) -> None:
        if self.last_run is None or self.last_summary is None:
            return
        folder = QFileDialog.getExistingDirectory(self, "Export the A/B report into")
        if folder:
            self.export_to(Path(folder))

    def export_to(self, folder: Path) -> None:
        from specdeck.core.bench.report import write_report

        self._submit(None, write_report, self.last_run, self.last_summary, folder,
                     on_result=lambda paths: self.context.show_status(f"A/B report written to {paths.folder}"))

    def refresh_history(self) -> None:
        from specdeck.core.bench.report import list_history

        self._submit("history", list_history, on_result=self._show_history)

    def _show_history(self, entries) -> None:
        self.history.clear()
        for entry in entries[:HISTORY_SHOWN]:
            speedups = ", ".join(f"{arm} {value:.2f}×" for arm, value in entry.speedups.items()
                                 if value is not None)
            self.history.addItem(f"{entry.created[:16].replace('T', ' ')} · {Path(entry.model).name} · "
                                 f"{speedups or 'no result'}", str(entry.folder))
            self.history.setItemData(self.history.count() - 1,
                                     "\n".join([*entry.arms, *entry.lossless.values()]),
                                     Qt.ItemDataRole.ToolTipRole)

    def _open_history(self) -> None:
        folder = self.history.currentData()
        if folder:
            from PySide6.QtCore import QUrl
            from PySide6.QtGui import QDesktopServices

            QDesktopServices.openUrl(QUrl.fromLocalFile(folder))

    def _on_failed(self, error: BaseException) -> None:
        self.timer.stop()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        if isinstance(error, CancelledError):
            self.banner.show_message("The A/B run was stopped before any measured run finished.", "info")
            self.stage.setText("Stopped")
        else:
            fix = getattr(error, "fix", "")
            text = html.escape(str(error)) + (f"<br>{html.escape(fix)}" if fix and fix not in str(error) else "")
            self.banner.show_message(text, "error")
            self.stage.setText("Failed")
        self.summary.setText("Press Start to run the plan.")
        self._sync_controls()

    # panes and plots ---------------------------------------------------------------------
    def _make_panes(self, labels: list[str]) -> None:
        for pane in getattr(self, "_panes", []):
            self.panes_layout.removeWidget(pane)
            pane.hide()  # deleteLater waits for the event loop: hide the old pane now
            pane.deleteLater()
        if len(labels) > MAX_PANES:
            labels = [labels[0], f"{len(labels) - 1} drafting arms, one at a time"]
        self._panes = [StreamPane(label, arm_colour(i)) for i, label in enumerate(labels)]
        for pane in self._panes:
            pane.set_highlight(self.highlight.isChecked())
            self.panes_layout.addWidget(pane, 1)

    @property
    def panes(self) -> list[StreamPane]:
        return list(self._panes)

    def _set_highlight(self, on: bool) -> None:
        for pane in self._panes:
            pane.set_highlight(on)

    def _ensure_plots(self) -> None:
        if self.plots is None:
            from specdeck.gui.bench_view import BenchPlots

            self.plots = BenchPlots()
            self.plots_host.layout().addWidget(self.plots)
            self.plots.reset(self.state.arms if self.state else ["A"])

    def showEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().showEvent(event)
        if self.plots is None:
            QTimer.singleShot(0, self._ensure_plots)
        self._check_demo()
        if self.history.count() == 0:
            self.refresh_history()
        if not self._engines_probed:
            # Probing the engines reads package metadata (~0.1 s cold): not on the GUI thread.
            self._engines_probed = True
            from specdeck.core.engines import list_engines

            self._submit("engines", list_engines, on_result=self._show_engine_availability)

    def _show_engine_availability(self, engines) -> None:
        for info in engines:
            index = self.engine.findData(info.name)
            if index >= 0 and not info.availability.available:
                self.engine.setItemData(index, f"Not available here: {info.availability.reason}. "
                                        f"{info.availability.install_hint}", Qt.ItemDataRole.ToolTipRole)

    def _check_demo(self) -> None:
        if self._serving() or self.model.currentText().strip() != DEMO or self._running():
            return
        from specdeck.core.engines.demo import demo_status

        status = demo_status()
        if not status.available:
            self.banner.show_message(
                html.escape(f"The demo model is not available: {status.reason}. {status.install_hint}"),
                "warning")

    # lifecycle -----------------------------------------------------------------------------
    def shutdown(self) -> None:
        self.timer.stop()
        self.tasks.close()
        self._save()
        if self.session is not None:
            self.session.shutdown()

    def _widgets(self):
        return {"engine": self.engine, "model": self.model, "use_draft": self.use_draft, "draft": self.draft,
                "use_ngram": self.use_ngram, "k": self.k, "adaptive": self.adaptive, "sweep": self.sweep,
                "per_suite": self.per_suite, "max_new": self.max_new, "repeats": self.repeats,
                "warmup": self.warmup, "servers": self.servers,
                **{f"suite_{n}": b for n, b in self.suite_buttons.items()}}

    def _save(self) -> None:
        from dataclasses import asdict

        settings = QSettings()
        for name, widget in self._widgets().items():
            settings.setValue(SETTINGS_PREFIX + name, _value(widget))
        # Arms as plan JSON (URLs without passwords, key variable names, never keys).
        edited = None if self._edited_arms is None else json.dumps(
            [a.server.to_json() | {"name": a.name} for a in self._edited_arms])
        settings.setValue(SETTINGS_PREFIX + "server_arms", edited or "")
        settings.setValue(SETTINGS_PREFIX + "launch", json.dumps(asdict(self._launch_settings)))
        settings.setValue(SETTINGS_PREFIX + "one_at_a_time", self._one_at_a_time)

    def _restore(self) -> None:
        settings = QSettings()
        for name, widget in self._widgets().items():
            value = settings.value(SETTINGS_PREFIX + name)
            if value is not None:
                _set_value(widget, value)
        self._restore_server_arms(settings)

    def _restore_server_arms(self, settings) -> None:
        from specdeck.gui.widgets.server_arms_dialog import LaunchSettings

        try:
            self._launch_settings = LaunchSettings(
                **json.loads(settings.value(SETTINGS_PREFIX + "launch") or "{}"))
            self._one_at_a_time = settings.value(SETTINGS_PREFIX + "one_at_a_time") in (
                True, "true")
            saved = settings.value(SETTINGS_PREFIX + "server_arms") or ""
            if saved:
                self._set_server_arms(_arms_from_saved(json.loads(saved)))
        except (TypeError, ValueError, KeyError, SpecDeckError) as exc:  # an old or edited file
            log.info("Ignoring the saved server arms: %s", exc)
            self._edited_arms = None
            self.servers.setReadOnly(False)


def _arms_from_saved(items) -> tuple:
    """Arms saved by BenchPage._save: ServerArm JSON with the arm's name; the first is the
    reference, launched arms draft as their flags say."""
    from specdeck.core.bench.plan import Arm
    from specdeck.core.engines.base import NO_DRAFT, DrafterKind, DrafterSpec
    from specdeck.core.servers.arms import ServerArm
    from specdeck.core.servers.llama_server import drafter_from_flags

    arms = []
    for item in items:
        server = ServerArm.from_json(item)
        if server.launch is not None:
            drafter = drafter_from_flags(tuple(server.launch.args))
        else:
            drafter = NO_DRAFT if not arms else DrafterSpec(DrafterKind.SERVER, adaptive=False)
        arms.append(Arm(str(item["name"]), drafter, server))
    return tuple(arms)


def _probe_arms(arms) -> list[str]:
    """Worker: one line per server arm (what it is, whether it drafts)."""
    from specdeck.core.servers.arms import describe

    return [describe(arm) for arm in arms]


def _keep(run, summary):
    """Worker: the run and its summary (made in the engine process) saved into the history,
    and every drafted arm ranked as a setting to apply."""
    from specdeck.core.bench.report import save_to_history
    from specdeck.core.bench.sweep import setting_rows

    return summary, save_to_history(run, summary), setting_rows(run, summary)


def _sweep_html(rows, best, summary) -> str:
    """Drafters down, k across: tok/s and median paired speed-up, the best cell marked; then
    one line on losslessness over every arm."""
    from specdeck.core.bench.sweep import sweep_grid

    ks, grid = sweep_grid(rows)
    head = "".join(f"<th>k={k}</th>" for k in ks)
    body = []
    for candidate, row_per_k in grid:
        tds = []
        for row in row_per_k:
            if row is None or row.tokens_per_second is None:
                tds.append("<td>–</td>")
                continue
            text = f"{row.tokens_per_second:.0f}" + (f"<br>{row.speedup.median:.2f}×" if row.speedup else "")
            style = " style='background:#bbf7d0'" if row is best else ""
            tds.append(f"<td align='right'{style}>{'<b>' + text + '</b>' if row is best else text}</td>")
        body.append(f"<tr><td>{html.escape(candidate)}</td>{''.join(tds)}</tr>")
    verdict = ("no setting beat no drafting" if best is None
               else f"best: {html.escape(best.candidate)}, k={best.k} ({best.score:.2f}×)")
    check = summary.lossless_overall()
    lossless = html.escape(check.verdict)
    if check.diverged:
        lossless = f"<b style='color:#b91c1c'>{lossless}</b>"
    return (f"<b>Sweep</b> (tok/s, speed-up; {verdict})<table cellspacing='0' cellpadding='3' border='1'>"
            f"<tr><th></th>{head}</tr>{''.join(body)}</table><p>{lossless}</p>")


def _arm_head(label: str, index: int) -> str:
    return f"<b style='color:{arm_colour(index).name()}'>{html.escape(label)}</b>"


def _speedup_html(median: float, n: int, low: float, high: float, base: str) -> str:
    """The headline; the caller closes the parenthesis (after the interval, when known)."""
    return (f"<span style='font-size:15pt'><b>{median:.2f}×</b></span> vs {base} "
            f"(median of {n} paired runs; min {low:.2f}×, max {high:.2f}×")


def _rate(tokens_per_second: float | None) -> str:
    return "–" if tokens_per_second is None else f"{tokens_per_second:.1f} tok/s"


def _percent(value: float | None) -> str:
    return "no drafts" if value is None else f"{100 * value:.0f}%"


def _identical_html(checkable: bool, identical: int, compared: int, base: str) -> str:
    if not checkable:
        return "sampled: losslessness not checkable"
    return f"{identical}/{compared} outputs identical to {base}"


def _value(widget):
    if isinstance(widget, (QCheckBox, QToolButton)):
        return widget.isChecked()
    if isinstance(widget, QSpinBox):
        return widget.value()
    if isinstance(widget, QLineEdit):
        return widget.text()
    if isinstance(widget, QComboBox):
        return widget.currentData() if not widget.isEditable() else widget.currentText()
    return None


def _set_value(widget, value) -> None:
    if isinstance(widget, (QCheckBox, QToolButton)):
        widget.setChecked(value in (True, "true", "1", 1))
    elif isinstance(widget, QSpinBox):
        try:
            widget.setValue(int(value))
        except (TypeError, ValueError):
            pass
    elif isinstance(widget, QLineEdit):
        widget.setText(str(value))
    elif isinstance(widget, QComboBox):
        if widget.isEditable():
            widget.setEditText(str(value))
        else:
            index = widget.findData(value)
            if index >= 0:
                widget.setCurrentIndex(index)

