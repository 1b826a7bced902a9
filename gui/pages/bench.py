"""A/B bench: run the same prompts with and without speculation, side by side, live.

The form (gui.bench_form) describes a :class:`BenchPlan`; Start hands it to a
:class:`BenchSession` (core.bench.session: a child process that owns the engine). The live
pump (gui.live_pump, the Tune page's too) drains the session's events every 50 ms and
updates the panes, plots and results table, so the GUI does a bounded amount of work per
frame however fast tokens arrive. Every figure comes from the core: while the plan runs,
``core.bench.live.LivePlan`` (the reducer the CLI's progress uses too) turns the events into
rows, running medians and plot points; when it ends, the summary made in the engine process
(``core.bench.summary``). gui.bench_render words them; the page only puts the words in its
widgets.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)
from specdeck.core.bench.live import LivePlan, Point, RunRow
from specdeck.core.bench.plan import BenchPlan
from specdeck.core.bench.runner import (
    PlanStarted,
    RunFinished,
    RunStarted,
    RunStep,
    Stage,
)
from specdeck.core.engines.base import DrafterKind
from specdeck.core.engines.demo import DEMO_ALIAS
from specdeck.core.errors import CancelledError, SpecDeckError
from specdeck.gui import bench_render as render
from specdeck.gui.bench_form import BenchForm, plan_from_choices
from specdeck.gui.bench_view import ResultsTable, StreamPane, arm_colour
from specdeck.gui.live_pump import LivePump
from specdeck.gui.widgets.banner import Banner
from specdeck.gui.widgets.elided_label import ElidedLabel

log = logging.getLogger(__name__)

MAX_PANES = 4
"""More arms than this (a sweep) share one pane for the drafted arms, beside the reference."""
MEMORY_INTERVAL_S = 0.25
HISTORY_SHOWN = 100
"""The History list shows the newest runs; older ones stay on disk in the history folder."""
IDLE_TEXT = "Press Start to run the plan."
# What the progress bar says with no plan running: reset, a bar shows no text at all and
# reads as an empty input field.
NO_RUNS = "No runs yet"
RUNS_FORMAT = "%v / %m runs"


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
        from specdeck.gui.workers import Tasks

        self.context = context
        self._session_factory = session_factory
        self.session = None
        self.state: _PlanView | None = None
        self.last_run = None
        self._last_memory_sample = 0.0
        self._started_sampler = False
        """This page started the window's GPU sampler (for the memory plot): it stops it."""
        self.last_summary = None
        self.last_report = None
        self.best_setting = None
        """core.bench.sweep.SweepRow of the finished plan's winner (None: no draft won)."""
        self.passed_over = []
        """(SweepRow, why) of the settings measured faster than it that cannot win
        (core.bench.winner.passed_over): said beside the offer."""
        self._engines_probed = False
        self.tasks = Tasks(self)
        """Background calls by key: "history", "apply", "engines", ... (gui.workers.Tasks)."""

        self.banner = Banner()
        self.form = BenchForm()
        self.form.arms_changed.connect(self._preview_arms)
        self.form.refused.connect(self._task_failed)
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
        self.summary = QLabel(IDLE_TEXT)
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

        self.live_pump = LivePump(
            lambda: self.session.drain() if self.session is not None else [], self._show_events,
            self)
        self.timer = self.live_pump.timer
        self.form.restore()
        self._make_panes([a.label for a in self.form.preview_arms()])
        self._sync_controls()

    # setup ---------------------------------------------------------------------------------
    def _build_setup(self) -> None:
        """The form, Start and Stop at the end of its size row, then progress, Apply, Export
        and History."""
        self.setup = QGroupBox("Plan")
        self.start_button = QPushButton("Start")
        self.start_button.setProperty("role", "primary")
        self.start_button.clicked.connect(self.start)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self.stop)
        self.form.size_row.addWidget(self.start_button)
        self.form.size_row.addWidget(self.stop_button)
        self.export_button = QPushButton("Export report…")
        self.export_button.setToolTip("JSON (complete), CSV (one row per run), Markdown, SVG chart "
                                      "and the plan, to repeat the run")
        self.export_button.setEnabled(False)
        self.export_button.clicked.connect(self.export_report)
        self.apply_button = QPushButton("Apply best…")
        self.apply_button.setEnabled(False)
        self.apply_button.clicked.connect(self.apply_best)
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
        self.progress.setToolTip("Runs of the plan, warm-ups included")
        self._progress_idle()
        # Elided: a stage can name a launched server's whole command line, and a plain
        # label's minimum width would widen the window to fit it (the full text is its tooltip).
        self.stage = ElidedLabel(min_chars=20)
        self.stage.setProperty("role", "hint")

        status = QHBoxLayout()
        status.addWidget(self.progress, 2)
        status.addWidget(self.stage, 2)
        status.addWidget(self.apply_button)
        status.addWidget(self.export_button)
        status.addWidget(self.history, 1)
        status.addWidget(self.open_history)
        box = QVBoxLayout(self.setup)
        box.addWidget(self.form)
        box.addLayout(status)

    def handle_request(self, argument: str) -> None:
        """From the start page: "demo" runs the demo A/B (no draft vs n-gram on the demo
        model, with the form's prompts and sizes); a URL becomes a server arm."""
        if self._running():
            return
        if argument == "demo":
            demo = replace(self.form.choices(), engine="torch", model=DEMO_ALIAS, use_draft=False,
                           ngram=True, sweep=False)
            try:
                self.form.set_plan(plan_from_choices(demo))
            except SpecDeckError as exc:
                self.banner.show_message(render.error_html(exc), "error")
                return
            self.start()
        elif argument.startswith("http"):
            self.form.add_server(argument)
            self.form.probe_servers()

    def _preview_arms(self) -> None:
        if self.state is None or not self._running():
            self._make_panes([a.label for a in self.form.preview_arms()])

    # run control ---------------------------------------------------------------------------
    def _running(self) -> bool:
        return self.session is not None and self.state is not None and self.live_pump.running()

    def start(self) -> None:
        """Run the plan the form describes (a banner says why not, when it describes none)."""
        try:
            plan = self.form.plan()
        except SpecDeckError as exc:
            self.banner.show_message(render.error_html(exc), "error")
            return
        if self.session is None or not self.session.alive:
            from specdeck.core.bench.session import BenchSession

            self.session = (self._session_factory or BenchSession)()
            pid = getattr(self.session, "worker_pid", None)
            if pid is not None:  # the engine's VRAM is SpecDeck's own on the GPUs page
                self.context.gpu_sampler().set_own_pids({pid})
        self.banner.hide()
        self.form.save()
        self.export_button.setEnabled(False)
        self.apply_button.setEnabled(False)
        self.last_run = self.last_summary = self.last_report = self.best_setting = None
        self.passed_over = []
        self.state = _PlanView(LivePlan(plan), {}, table_rows={})
        self.table.setRowCount(0)
        self.summary.setText("Loading…")
        self.progress.setRange(0, 0)
        self.session.start(plan)
        self.live_pump.start()
        self._sync_controls()

    def _progress_idle(self) -> None:
        """A full-width bar that says no plan has run (rather than a blank white box)."""
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setFormat(NO_RUNS)

    def stop(self) -> None:
        if self.session is not None:
            self.session.stop()
            self.stage.setText("Stopping after the current step…")

    def _sync_controls(self) -> None:
        running = self._running()
        self.start_button.setEnabled(not running)
        self.stop_button.setEnabled(running)
        self.form.set_editable(not running)

    # events ------------------------------------------------------------------------------
    def pump(self) -> int:
        """Apply what the session reported since the last tick; returns the events handled."""
        return self.live_pump.pump()

    def _show_events(self, events) -> None:
        if self.session is None:
            return
        from specdeck.core.bench.session import PlanDone, PlanFailed

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
                if self.state is None or self.state.live.current is None:
                    self.stage.setText(event.text)  # loading; a run's own line stays
            elif isinstance(event, PlanStarted):
                self._on_plan_started(event)
            elif isinstance(event, PlanDone):
                self._on_done(event)
            elif isinstance(event, PlanFailed):
                self._on_failed(event.error)
        if steps:
            self._on_steps(steps)
        self._tick_live()

    def _on_plan_started(self, event: PlanStarted) -> None:
        state = self.state
        state.live.apply(event)
        self._make_panes([a.label for a in event.plan.arms])
        state.panes = {arm: self._panes[min(i, len(self._panes) - 1)] for i, arm in enumerate(state.arms)}
        self._ensure_plots()
        if self.plots is not None:
            self.plots.reset(state.arms)
            self.plots.mark_loading(state.live.runs_from)
            self.plots.set_acceptance_title(state.live.serving)
            self._show_positions()
        self.progress.setFormat(RUNS_FORMAT)
        self.progress.setRange(0, state.live.total)
        self.progress.setValue(0)
        self.stage.setText(f"Running on {event.loaded.label}")

    def _on_run_started(self, event: RunStarted) -> None:
        state = self.state
        state.live.apply(event)
        slot = event.slot
        self.stage.setText(render.running_stage(slot, state.live.done, state.live.total))
        if not state.live.rows:
            self.summary.setText(render.WAITING_FOR_PAIRS)
        pane = state.pane = state.panes[slot.arm.name]
        if len(state.arms) > len(self._panes):  # a shared pane says which arm it shows now
            pane.set_title(slot.arm.label, arm_colour(state.arms.index(slot.arm.name)))
        pane.begin(render.run_heading(slot, event.prompt_tokens))
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
            state.pane.metrics.setText(render.live_metrics(current))
        if now - self._last_memory_sample >= MEMORY_INTERVAL_S:
            self._last_memory_sample = now
            self._sample_memory(state.live.elapsed())
        self.live_pump.redraw_in_turn(self.plots, 3)

    def _plot(self, points: list[Point]) -> None:
        series = {"speed": self.plots.speed, "accept": self.plots.accept,
                  "finished": self.plots.finished, "accept_done": self.plots.accept_done}
        for point in points:
            curve = series[point.series].get(point.arm)
            if curve is not None:
                curve.add(point.t, point.value)

    def _memory_source(self) -> str:
        """Whose memory the plot shows (render.memory_title's kinds): the GPUs NVML reads
        for a CUDA engine or servers on this machine, the engine process's RSS on a CPU;
        for a server elsewhere nothing, since this machine's memory is not the server's."""
        live = self.state.live if self.state else None
        if live is None or live.loaded is None:
            return ""
        if live.serving:
            return "gpu" if render.servers_are_local(live.plan.arms) else "server-remote"
        return "gpu" if str(live.loaded.device).startswith("cuda") else "rss"

    def _sample_memory(self, t: float) -> None:
        source = self._memory_source()
        if source == "gpu":
            sampler = self.context.gpu_sampler()
            if not sampler.is_running:  # polled on its own thread
                sampler.start()
                self._started_sampler = True
            frame = sampler.latest
            if frame is None:
                return
            seen = [g for g in frame.gpus if g.memory_used is not None]
            for gpu in seen:
                self.plots.add_memory(f"GPU {gpu.index} used", t, gpu.memory_used)
            if self.state.live.serving and not seen:
                source = "server-hidden"  # never the client's memory in the server's place
        elif source == "rss":
            import psutil

            try:
                rss = psutil.Process(self.session.worker_pid).memory_info().rss
            except (psutil.Error, ValueError):
                return
            self.plots.add_memory("engine process RSS", t, rss)
        if source:
            self.plots.set_memory_title(render.memory_title(source))

    def _show_positions(self, summary=None) -> None:
        """The position chart, per drafting arm: from the finished summary, or while the plan
        runs from its counted runs so far (the same core function makes both)."""
        from specdeck.core.bench.summary import draft_positions

        state = self.state
        if self.plots is None or state is None:
            return
        drafting = [a.name for a in state.live.plan.arms[1:]
                    if a.drafter.kind is not DrafterKind.NONE]
        if summary is not None:
            self.plots.show_positions([(name, summary.arm(name).positions) for name in drafting])
            return
        records = [row.record for row in state.live.rows]
        entries = []
        for name in drafting:
            mine = [r for r in records if r.arm == name]
            entries.append((name, draft_positions(mine) if mine else None))
        self.plots.show_positions(entries)

    def _on_run_finished(self, event: RunFinished) -> None:
        state = self.state
        live = state.live
        record = event.record
        was_current = live.current is not None and live.current.slot == record.slot
        changed = live.apply(event)
        self.progress.setValue(live.done)
        if was_current and state.pane is not None:
            state.pane.metrics.setText(render.run_metrics(record))
            state.pane = None
        if not record.counted:
            return
        if self.plots is not None:
            self._plot(live.take_points())
            if live.serving:
                self.plots.set_acceptance_title(True, unreported=live.acceptance_unknown)
            self._show_positions()
        for index in changed:
            self._show_row(index)
        self.summary.setText(render.so_far_html(live))

    def _show_row(self, index: int) -> None:
        """Add the live state's row ``index`` to the table, or refresh it (its reference
        finished after it: the ratio and output columns fill in now)."""
        state = self.state
        row: RunRow = state.live.rows[index]
        table_row = state.table_rows.get(index)
        if table_row is not None:
            self.table.set_cell(table_row, render.RATIO, render.ratio_cell(row))
            self.table.set_cell(table_row, render.OUTPUT, render.output_cell(row))
            return
        table_row = self.table.add_row(
            render.row_cells(row), arm_colour(state.arms.index(row.record.arm)),
            render.OUTPUT if render.output_differs(row) else None,
        )
        self.table.item(table_row, render.ARM).setToolTip(row.record.slot.arm.label)
        state.table_rows[index] = table_row

    def _on_done(self, done) -> None:
        run = self.last_run = done.run
        self.live_pump.stop()  # shown from the pump: the events being shown are the last
        self._tick_live()
        if self.plots is not None:
            self.plots.redraw()
        self.stage.setText(render.finished_stage(run))
        self.summary.setText(render.so_far_html(self.state.live))
        self.context.show_status("A/B run finished" + (" (stopped early)" if run.cancelled else ""))
        self._sync_controls()
        self._submit(None, _keep, run, done.summary, on_result=self._show_final)

    def _submit(self, key: str | None, fn, *args, on_result=None) -> None:
        self.tasks.run(key, fn, *args, on_result=on_result, on_error=self._task_failed)

    def _task_failed(self, error: BaseException) -> None:
        self.banner.show_message(render.error_html(error), "error")

    def _show_final(self, result) -> None:
        from specdeck.core.bench.sweep import SweepRow, best_row
        from specdeck.core.bench.winner import passed_over

        summary, paths, rows = result
        if self.last_run is None or summary.counted_runs != len(self.last_run.counted()):
            return  # a newer run started meanwhile
        self.last_summary, self.last_report = summary, paths
        self.best_setting = best = best_row(rows)
        self.passed_over = passed_over(rows, SweepRow.standing, best)
        self.export_button.setEnabled(True)
        self.summary.setText(render.result_html(rows, best, summary, self.state.arms,
                                                self.passed_over))
        self._show_positions(summary)
        self._offer_apply(rows, best)
        self.refresh_history()

    # apply -------------------------------------------------------------------------------
    def _offer_apply(self, rows, best) -> None:
        from specdeck.core.bench.sweep import why_not_applicable

        if not any(r.speedup is not None for r in rows):
            return
        why = why_not_applicable(self.last_run.plan) if self.last_run is not None else ""
        if why:  # the demo, or servers: no TabbyAPI config.yml to write (it told of one)
            self.apply_button.setEnabled(False)
            self.apply_button.setToolTip(why)
            return
        text, tip = render.apply_offer(best, self.passed_over)
        self.apply_button.setText(text)
        self.apply_button.setEnabled(True)
        self.apply_button.setToolTip(tip)

    def apply_best(self) -> None:
        """Write the finished plan's best setting into config.yml, after showing the diff."""
        from specdeck.core.bench.sweep import plan_apply_setting, why_not_applicable

        why = why_not_applicable(self.last_run.plan) if self.last_run is not None else ""
        if why:
            self.banner.show_message(why, "info")
            return
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

        if planned.is_noop:
            self.context.show_status("config.yml already has this setting.")
            return
        if confirm_and_save(self, self.tasks, planned.change, "Apply the A/B result",
                            render.apply_intro(self.best_setting, planned.notes,
                                               self.passed_over),
                            on_saved=self._applied, on_failed=self._apply_failed,
                            context=self.context):
            self.apply_button.setEnabled(False)
            self.context.show_status("Saving config.yml…", 0)

    def _applied(self, saved) -> None:
        self.apply_button.setEnabled(True)
        if saved.written:  # announced by the save
            self.context.show_status(f"Applied to {saved.path}.")

    def _apply_failed(self, error: BaseException | None) -> None:
        self.apply_button.setEnabled(True)
        self.context.show_status("config.yml was not changed.")
        if error is not None:
            self.banner.show_message(render.error_html(error), "error")

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
            text, tip = render.history_item(entry)
            self.history.addItem(text, str(entry.folder))
            self.history.setItemData(self.history.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)

    def _open_history(self) -> None:
        folder = self.history.currentData()
        if folder:
            from PySide6.QtCore import QUrl
            from PySide6.QtGui import QDesktopServices

            QDesktopServices.openUrl(QUrl.fromLocalFile(folder))

    def _on_failed(self, error: BaseException) -> None:
        self.live_pump.stop()  # shown from the pump: the events being shown are the last
        self._tick_live()
        if self.plots is not None:  # every plot with its last points, fitted to them
            self.plots.redraw()
        if not self.state.live.total:  # failed loading: no plan ran ("0 / 1 runs" was untrue)
            self._progress_idle()
        if isinstance(error, CancelledError):
            self.banner.show_message("The A/B run was stopped before any measured run finished.", "info")
            self.stage.setText("Stopped")
        else:
            self.banner.show_message(render.error_html(error), "error")
            self.stage.setText("Failed")
        self.summary.setText(IDLE_TEXT)
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
        engine = self.form.engine
        for info in engines:
            index = engine.findData(info.name)
            if index >= 0 and not info.availability.available:
                engine.setItemData(index, f"Not available here: {info.availability.reason}. "
                                   f"{info.availability.install_hint}", Qt.ItemDataRole.ToolTipRole)

    def _check_demo(self) -> None:
        choices = self.form.choices()
        if choices.serving or choices.model.strip() != DEMO_ALIAS or self._running():
            return
        from specdeck.core.engines.demo import demo_status

        status = demo_status()
        if not status.available:
            import html

            self.banner.show_message(
                html.escape(f"The demo model is not available: {status.reason}. {status.install_hint}"),
                "warning")

    # lifecycle -----------------------------------------------------------------------------
    def shutdown(self) -> None:
        self.live_pump.stop()
        self.tasks.close()
        if self._started_sampler:
            self.context.gpu_sampler().stop()
        self.form.shutdown()
        self.form.save()
        if self.session is not None:
            self.session.shutdown()


def _keep(run, summary):
    """Worker: the run and its summary (made in the engine process) saved into the history,
    and every drafted arm ranked as a setting to apply."""
    from specdeck.core.bench.report import save_to_history
    from specdeck.core.bench.sweep import setting_rows

    return summary, save_to_history(run, summary), setting_rows(run, summary)
