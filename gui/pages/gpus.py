"""GPUs & VRAM: live telemetry on top, the VRAM plan below, plan and reality side by side.

The page reads the window's shared Sampler (AppContext.gpu_sampler) from a QTimer at the
sampling rate while it is visible; the sampler itself starts the first time the page is
shown and stops when the window closes. Without an NVIDIA GPU the page says so, offers the
demo trace, and the planner still works with typed-in GPU sizes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)
from specdeck.core.errors import SpecDeckError
from specdeck.core.exl2_facts import (
    CACHE_MODES,
    DEFAULT_AUTOSPLIT_RESERVE_TEXT,
    DEFAULT_CACHE_MODE,
    DEFAULT_MAX_SEQ_LEN,
)
from specdeck.core.forms import bounds, form_field
from specdeck.core.gpu.telemetry import TelemetryFrame, TelemetryState
from specdeck.core.vram.inputs import CONTEXT_RANGE, NATIVE_CONTEXT
from specdeck.core.vram.weights import BPW_RANGE
from specdeck.gui import form_settings
from specdeck.gui.plan_bars import PlanBars
from specdeck.gui.telemetry_view import (
    GpuCards,
    ProcessTable,
    TelemetryPlots,
    own_usage_text,
    set_text,
    set_visible,
)
from specdeck.gui.workers import Tasks

log = logging.getLogger(__name__)

DEMO_TRACE = ("traces", "demo-5090-4090-70b.jsonl")
SETTINGS_PREFIX = "gpus/plan/"


def create_page(context):
    return GpusPage(context)


FILES_BPW = 0.0
"""A bpw box's value that says: measure the folder's files (below core's BPW_RANGE)."""


def _bpw_or_files(bpw: float) -> bool:
    return bpw == FILES_BPW or BPW_RANGE[0] <= bpw <= BPW_RANGE[1]


def _cache_mode(raw) -> str:
    """Before, a cache mode was kept as the dropdown's index ("1": Q8)."""
    index = isinstance(raw, int) and not isinstance(raw, bool)
    return CACHE_MODES[int(raw)] if index or isinstance(raw, str) and raw.isdigit() else raw


def _gpu_source(raw) -> bool:
    """Before, the GPU choice was kept as the dropdown's index: 0 this machine's, 1 typed."""
    return {"0": False, "1": True, 0: False, 1: True}[raw]


@dataclass(frozen=True)
class PlanChoices:
    """What the VRAM plan form holds: core's PlanInputs as typed, with the GPU sizes typed
    even while this machine's GPUs are chosen (kept between sessions, but the count of other
    programs' memory: that is about now)."""

    target: str = form_field("")
    draft: str = form_field("")
    target_bpw: float = form_field(FILES_BPW, check=_bpw_or_files)
    """0 (FILES_BPW): measured from an EXL2 folder's files; else core's BPW_RANGE."""
    draft_bpw: float = form_field(FILES_BPW, check=_bpw_or_files)
    context: int = form_field(16384, low=CONTEXT_RANGE[0], high=CONTEXT_RANGE[1])
    """-1: the target's native context; 0: TabbyAPI's default (core.vram.inputs)."""
    cache_mode: str = form_field(DEFAULT_CACHE_MODE, choices=CACHE_MODES, from_text=_cache_mode)
    draft_cache_mode: str = form_field(DEFAULT_CACHE_MODE, choices=CACHE_MODES,
                                       from_text=_cache_mode)
    typed_gpus: bool = form_field(False, key="gpu_source", to_text=lambda typed: int(typed),
                                  from_text=_gpu_source)
    gpu_sizes: str = form_field("32,24")
    gpu_split: str = form_field("")
    draft_gpu_split: str = form_field("")
    reserve: str = form_field(DEFAULT_AUTOSPLIT_RESERVE_TEXT)
    count_in_use: bool = form_field(False, kept=False)

    def inputs(self):
        """core.vram.PlanInputs the choices make."""
        from specdeck.core.vram import PlanInputs

        return PlanInputs(
            model=self.target.strip(), draft=self.draft.strip() or None, context=self.context,
            cache_mode=self.cache_mode, draft_cache_mode=self.draft_cache_mode,
            gpus=self.gpu_sizes.strip() if self.typed_gpus else None,
            bpw=self.target_bpw or None, draft_bpw=self.draft_bpw or None,
            gpu_split=self.gpu_split.strip() or None,
            draft_gpu_split=self.draft_gpu_split.strip() or None,
            autosplit_reserve_mb=self.reserve.strip() or "0",
            count_in_use=self.count_in_use and not self.typed_gpus)

    def with_inputs(self, inputs) -> "PlanChoices":
        """These choices showing ``inputs`` (a PlanInputs): typed GPU sizes switch to typed
        GPUs, while ``gpus=None`` (e.g. from a config.yml) leaves the GPU choice as it is;
        no context keeps the one shown."""
        typed = {"typed_gpus": True, "gpu_sizes": inputs.gpus} if inputs.gpus else {}
        return replace(
            self, target=inputs.model, target_bpw=inputs.bpw or 0.0, draft=inputs.draft or "",
            draft_bpw=inputs.draft_bpw or 0.0, context=inputs.context or self.context,
            cache_mode=inputs.cache_mode, draft_cache_mode=inputs.draft_cache_mode,
            gpu_split=inputs.gpu_split or "", draft_gpu_split=inputs.draft_gpu_split or "",
            reserve=inputs.autosplit_reserve_mb, **typed)


class _BpwBox(QDoubleSpinBox):
    """Bits per weight in core's BPW_RANGE, or, at its bottom, "files": the arrows step from
    files to the lowest bpw and back, never into the gap between."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setRange(FILES_BPW, BPW_RANGE[1])
        self.setSingleStep(0.05)
        self.setDecimals(2)
        self.setSpecialValueText("bpw: files")
        self.setSuffix(" bpw")

    def stepBy(self, steps: int) -> None:  # noqa: N802 - Qt's name
        low = BPW_RANGE[0]
        value = self.value()
        if value < low and steps > 0:  # from files (or a typed value below): the lowest first
            value, steps = low, steps - 1
        target = value + steps * self.singleStep()
        self.setValue(target if target >= low else FILES_BPW)


class _ContextBox(QSpinBox):
    """A plan's context in core's CONTEXT_RANGE, with its two words: -1 the target's native
    context, 0 TabbyAPI's default."""

    WORDS = {NATIVE_CONTEXT: "target's native context",
             0: f"TabbyAPI's default (at most {DEFAULT_MAX_SEQ_LEN:,})"}

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setRange(*bounds(PlanChoices, "context"))
        self.setSingleStep(1024)
        self.setSpecialValueText(self.WORDS[NATIVE_CONTEXT])
        self.setSuffix(" tokens")

    def textFromValue(self, value: int) -> str:  # noqa: N802 - Qt's name
        return self.WORDS[0] if value == 0 else super().textFromValue(value)


class _ModelPicker(QWidget):
    """A folder field with Browse and, beside it, the bpw for folders that are not EXL2."""

    def __init__(self, placeholder: str, tooltip: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.path = QLineEdit()
        # Short enough to fit the field at the form's width; the tooltip says the rest.
        self.path.setPlaceholderText(placeholder)
        self.path.setToolTip(tooltip)
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        self.bpw = _BpwBox()
        self.bpw.setToolTip("The bpw to assume for a folder with only config.json; "
                            "'files' measures an EXL2 folder's weights exactly.")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.path, 1)
        layout.addWidget(browse)
        layout.addWidget(self.bpw)

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Model folder", self.path.text())
        if folder:
            self.path.setText(folder)

    def bpw_value(self) -> float | None:
        return self.bpw.value() or None


class PlanForm(QGroupBox):
    """The plan's inputs, named as in TabbyAPI's config.yml."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__("VRAM plan", parent)
        self.target = _ModelPicker("target model folder",
                                   "The target model's folder: EXL2, or any folder with a "
                                   "config.json and the bpw beside it")
        self.draft = _ModelPicker("draft model folder (optional)",
                                  "The draft model's folder (optional): EXL2, or any folder "
                                  "with a config.json and the bpw beside it")
        self.context = _ContextBox()
        self.context.setValue(PlanChoices().context)
        self.cache_mode = QComboBox()
        self.draft_cache_mode = QComboBox()
        for combo in (self.cache_mode, self.draft_cache_mode):
            combo.addItems(CACHE_MODES)
        self.gpu_source = QComboBox()
        self.gpu_source.addItems(["This machine's GPUs", "GPU sizes typed below"])
        self.gpu_sizes = QLineEdit(PlanChoices().gpu_sizes)
        self.gpu_sizes.setPlaceholderText("GB per GPU, e.g. 32,24")
        self.gpu_split = QLineEdit()
        self.gpu_split.setPlaceholderText("autosplit")
        self.draft_gpu_split = QLineEdit()
        self.draft_gpu_split.setPlaceholderText("autosplit")
        self.reserve = QLineEdit(DEFAULT_AUTOSPLIT_RESERVE_TEXT)
        self.count_in_use = QCheckBox("Count memory other programs hold now")
        self.plan_button = QPushButton("Plan VRAM")
        self.plan_button.setDefault(True)
        self.from_config = QPushButton("From config.yml")
        self.from_config.setToolTip("Fill the form from the TabbyAPI config.yml open in SpecDeck")

        modes = QHBoxLayout()
        modes.addWidget(QLabel("target"))
        modes.addWidget(self.cache_mode)
        modes.addSpacing(12)
        modes.addWidget(QLabel("draft"))
        modes.addWidget(self.draft_cache_mode)
        modes.addStretch(1)
        gpus = QHBoxLayout()
        gpus.addWidget(self.gpu_source)
        gpus.addWidget(self.gpu_sizes, 1)
        splits = QHBoxLayout()
        splits.addWidget(self.gpu_split, 1)
        splits.addWidget(QLabel("draft"))
        splits.addWidget(self.draft_gpu_split, 1)
        splits.addWidget(QLabel("reserve MB"))
        splits.addWidget(self.reserve)
        self.reserve.setMaximumWidth(60)
        buttons = QHBoxLayout()
        buttons.addWidget(self.count_in_use)
        buttons.addStretch(1)
        buttons.addWidget(self.from_config)
        buttons.addWidget(self.plan_button)

        form = QFormLayout(self)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.addRow("Target", self.target)
        form.addRow("Draft", self.draft)
        form.addRow("Context", self.context)
        form.addRow("Cache mode", modes)
        form.addRow("GPUs", gpus)
        form.addRow("gpu_split", splits)
        form.addRow(buttons)
        self.gpu_source.currentIndexChanged.connect(self._sync)
        self._sync()

    def _sync(self) -> None:
        typed = self.gpu_source.currentIndex() == 1
        self.gpu_sizes.setEnabled(typed)
        self.count_in_use.setEnabled(not typed)

    def use_typed_gpus(self, typed: bool) -> None:
        self.gpu_source.setCurrentIndex(1 if typed else 0)

    def choices(self) -> PlanChoices:
        return PlanChoices(
            target=self.target.path.text(), draft=self.draft.path.text(),
            target_bpw=self.target.bpw.value(), draft_bpw=self.draft.bpw.value(),
            context=self.context.value(), cache_mode=self.cache_mode.currentText(),
            draft_cache_mode=self.draft_cache_mode.currentText(),
            typed_gpus=self.gpu_source.currentIndex() == 1, gpu_sizes=self.gpu_sizes.text(),
            gpu_split=self.gpu_split.text(), draft_gpu_split=self.draft_gpu_split.text(),
            reserve=self.reserve.text(), count_in_use=self.count_in_use.isChecked())

    def show_choices(self, choices: PlanChoices) -> None:
        self.use_typed_gpus(choices.typed_gpus)
        self.gpu_sizes.setText(choices.gpu_sizes)
        self.target.path.setText(choices.target)
        self.target.bpw.setValue(choices.target_bpw)
        self.draft.path.setText(choices.draft)
        self.draft.bpw.setValue(choices.draft_bpw)
        self.context.setValue(choices.context)
        self.cache_mode.setCurrentText(choices.cache_mode)
        self.draft_cache_mode.setCurrentText(choices.draft_cache_mode)
        self.gpu_split.setText(choices.gpu_split)
        self.draft_gpu_split.setText(choices.draft_gpu_split)
        self.reserve.setText(choices.reserve)
        self.count_in_use.setChecked(choices.count_in_use)

    def inputs(self):
        """core.vram.PlanInputs the form gives."""
        return self.choices().inputs()

    def fill(self, inputs) -> None:
        """Show ``inputs`` (a PlanInputs): PlanChoices.with_inputs."""
        self.show_choices(self.choices().with_inputs(inputs))

    # persistence: the last plan's inputs come back next time ---------------------------
    def save(self) -> None:
        form_settings.save(SETTINGS_PREFIX, self.choices())

    def restore(self) -> bool:
        if not form_settings.has_saved(SETTINGS_PREFIX, PlanChoices()):
            return False
        self.show_choices(form_settings.restore(SETTINGS_PREFIX, PlanChoices()))
        return True


class PlanResult(QWidget):
    """The plan's bars, verdict, largest contexts, suggestions and notes."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.verdict = QLabel()
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.bars = PlanBars()
        self.details = QLabel()
        self.details.setWordWrap(True)
        self.details.setTextFormat(Qt.TextFormat.RichText)
        self.details.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.error = QLabel()
        self.error.setProperty("role", "error")
        self.error.setWordWrap(True)
        top = QHBoxLayout()
        top.addWidget(self.verdict, 0, Qt.AlignmentFlag.AlignTop)
        top.addWidget(self.summary, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.error)
        layout.addWidget(self.bars)
        layout.addWidget(self.details, 1)
        self.show_message("Pick a target model folder and press Plan VRAM. Without GPUs here, "
                          "type their sizes to plan for another machine.")

    def show_message(self, text: str) -> None:
        self.verdict.hide()
        self.error.hide()
        self.summary.setText(text)
        _set_role(self.summary, "hint")
        self.bars.set_plan(None)
        self.bars.hide()
        self.details.clear()

    def show_error(self, error: BaseException) -> None:
        self.show_message("")
        self.error.setText(str(error) if isinstance(error, SpecDeckError)
                           else f"The plan failed: {error}")
        self.error.show()

    def show_plan(self, plan) -> None:
        from specdeck.core.vram import FitVerdict, format_bytes

        self.error.hide()
        role = {FitVerdict.FITS: "badge-ok", FitVerdict.TIGHT: "badge-warn", FitVerdict.NO_FIT: "badge-bad"}
        self.verdict.setText(plan.verdict.value.upper())
        _set_role(self.verdict, role[plan.verdict])
        self.verdict.show()
        if plan.headroom_bytes < 0:
            headroom = f"at least {format_bytes(-plan.headroom_bytes)} short"
        else:
            headroom = f"{format_bytes(plan.headroom_bytes)} headroom"
        draft = f" + {plan.draft}" if plan.draft else ""
        _set_role(self.summary, "")
        self.summary.setText(f"{headroom}. {plan.target}{draft}; {plan.context} tokens, "
                             f"cache {plan.cache_mode}"
                             + (f"/{plan.draft_cache_mode}" if plan.draft else "")
                             + f", {plan.split}.")
        self.bars.set_plan(plan)
        self.bars.show()
        lines = []
        if plan.problem:
            lines.append(f"<b>{plan.problem}</b>")
        largest = _tokens(plan.max_context)
        if plan.draft:
            lines.append(f"Largest context that fits: <b>{largest}</b> with the draft, "
                         f"<b>{_tokens(plan.max_context_without_draft)}</b> without "
                         f"(searched up to {plan.context_limit}).")
        else:
            lines.append(f"Largest context that fits: <b>{largest}</b> "
                         f"(searched up to {plan.context_limit}).")
        lines.append(f"System RAM for token embeddings: {format_bytes(plan.system_ram_bytes)}.")
        if plan.suggestions:
            heading = "To make it fit" if not plan.fits else "For more headroom"
            lines.append(f"<b>{heading}:</b><ul style='margin-top:0'>"
                         + "".join(f"<li>{_escape(t)}</li>" for t in plan.suggestions) + "</ul>")
        for note in plan.notes:
            lines.append(f"<span style='color:gray'>{_escape(note)}</span>")
        self.details.setText("<br>".join(lines))


def _set_role(label: QLabel, role: str) -> None:
    """Switch a label's style role (style.qss) and make the style notice."""
    if label.property("role") != role:
        label.setProperty("role", role)
        label.style().unpolish(label)
        label.style().polish(label)


def _tokens(value: int | None) -> str:
    return "none" if value is None else f"{value:,}"


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class GpusPage(QWidget):
    def __init__(self, context, parent: QWidget | None = None):
        super().__init__(parent)
        self.context = context
        self.sampler = context.gpu_sampler()
        self.tasks = Tasks(self)
        self._last_frame_seen: TelemetryFrame | None = None

        # the live half ---------------------------------------------------------------
        self.state_badge = QLabel()
        self.state_text = QLabel()
        self.state_text.setWordWrap(True)
        self.demo_button = QPushButton("Play the demo trace")
        self.demo_button.setToolTip("Replay a synthetic RTX 4090 + RTX 5090 trace of a 70B load")
        self.demo_button.clicked.connect(self.play_demo)
        self.live_button = QPushButton("Back to live NVML")
        self.live_button.clicked.connect(self.use_live)
        banner = QHBoxLayout()
        banner.addWidget(self.state_badge)
        banner.addWidget(self.state_text, 1)
        banner.addWidget(self.demo_button)
        banner.addWidget(self.live_button)
        self.cards = GpuCards()
        # The plots need pyqtgraph (~0.4 s to import): built after the page first shows, so
        # a window that opens on this page paints at once.
        self.plots: TelemetryPlots | None = None
        self.plots_host = QWidget()
        plots_layout = QVBoxLayout(self.plots_host)
        plots_layout.setContentsMargins(0, 0, 0, 0)
        self.processes = ProcessTable()
        self.processes.setMaximumWidth(330)
        self.own_usage = QLabel()
        self.own_usage.setProperty("role", "hint")
        processes_box = QVBoxLayout()
        processes_box.addWidget(self.processes, 1)
        processes_box.addWidget(self.own_usage)
        self.telemetry = QWidget()
        middle = QHBoxLayout(self.telemetry)
        middle.setContentsMargins(0, 0, 0, 0)
        middle.addWidget(self.plots_host, 1)
        middle.addLayout(processes_box)
        live = QWidget()
        live_layout = QVBoxLayout(live)
        live_layout.setContentsMargins(0, 0, 0, 0)
        live_layout.addLayout(banner)
        live_layout.addWidget(self.cards)
        live_layout.addWidget(self.telemetry, 1)
        live_layout.addStretch(0)  # takes the slack instead of the telemetry when it is hidden
        self._live_layout = live_layout

        # the plan half ---------------------------------------------------------------
        self.form = PlanForm()
        self.form.setMaximumWidth(520)
        self.result = PlanResult()
        self.form.plan_button.clicked.connect(self.run_plan)
        self.form.from_config.clicked.connect(self.fill_from_config)
        plan = QWidget()
        plan_layout = QHBoxLayout(plan)
        plan_layout.setContentsMargins(0, 0, 0, 0)
        plan_layout.addWidget(self.form, 0, Qt.AlignmentFlag.AlignTop)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(self.result)
        plan_layout.addWidget(scroll, 1)

        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(live)
        splitter.addWidget(plan)
        # Live telemetry gets a little more room than the plan; the user can drag it.
        splitter.setSizes([440, 360])
        splitter.setChildrenCollapsible(False)
        self.splitter = splitter
        self._live = live
        self._compact: bool | None = None
        self._banner_height: int | None = None
        layout = QVBoxLayout(self)
        layout.addWidget(splitter)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

        self.timer = QTimer(self)
        self.timer.setInterval(max(100, int(self.sampler.interval_s * 1000)))
        self.timer.timeout.connect(self.refresh)
        self.form.restore()
        self.refresh()

    # lifecycle ---------------------------------------------------------------------------
    def showEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().showEvent(event)
        self.sampler.start()
        self.timer.start()
        if self.plots is None:
            QTimer.singleShot(0, self._build_plots)
        self.refresh()

    def _fit_live_pane(self, compact: bool) -> None:
        """Without GPUs the live half is just the banner: it sits at the top at its own
        height and the planner gets the rest (instead of a banner floating in empty space).
        Only on a change, so a user's drag of the splitter is kept."""
        if compact == self._compact:
            if compact:
                self._fit_banner()  # the banner's text may have changed
            return
        self._compact = compact
        self._banner_height = None
        total = max(self.splitter.height(), 800)
        layout = self._live_layout
        layout.setStretch(layout.count() - 1, 1 if compact else 0)
        if compact:
            self._fit_banner()
        else:
            self.splitter.setSizes([total * 11 // 20, total * 9 // 20])

    def _fit_banner(self) -> None:
        """The compact live half exactly as tall as the banner at the page's width: a fixed
        height left a blank band under a short banner and cut off one wrapped narrow. Only
        when that height changes (new text, new width), so a user's drag is kept."""
        live = self._live
        self._live_layout.invalidate()  # the badge's and text's new hints, not cached ones
        height = (live.heightForWidth(self.splitter.width()) if live.hasHeightForWidth()
                  else live.sizeHint().height())
        if height == self._banner_height:
            return
        self._banner_height = height
        # The space the halves share now (setSizes scales sizes that do not sum to it); a
        # window's worth before the page is first laid out.
        total = sum(self.splitter.sizes()) if self.splitter.isVisible() else 800
        total = max(total, height + 1)
        self.splitter.setSizes([height, total - height])

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        if self._compact:  # the banner's text rewraps at the new width
            self._fit_banner()

    def _build_plots(self) -> None:
        if self.plots is None:
            self.plots = TelemetryPlots()
            self.plots_host.layout().addWidget(self.plots)
            self.refresh(force=True)

    def hideEvent(self, event) -> None:  # noqa: N802 - Qt's name
        self.timer.stop()
        super().hideEvent(event)

    def shutdown(self) -> None:
        """The window is closing: stop redrawing and stop the sampler."""
        self.timer.stop()
        self.sampler.stop()
        self.tasks.close()

    # telemetry -------------------------------------------------------------------------
    def play_demo(self) -> None:
        from specdeck.core.gpu.replay import ReplaySource
        from specdeck.resources import path

        try:
            source = ReplaySource(path(*DEMO_TRACE))
        except SpecDeckError as exc:
            self.context.show_status(f"Cannot play the demo trace: {exc}")
            return
        if self.plots is not None:
            self.plots.clear()
        self.sampler.set_source(source)
        self.sampler.start()
        self.refresh(force=True)

    def use_live(self) -> None:
        from specdeck.core.gpu.nvml import NvmlSource

        if self.plots is not None:
            self.plots.clear()
        self.sampler.set_source(NvmlSource())
        self.sampler.start()
        self.refresh(force=True)

    def refresh(self, force: bool = False) -> None:
        """Redraw from the sampler's latest frame; nothing to do if it has not changed."""
        frame = self.sampler.latest
        if frame is self._last_frame_seen and frame is not None and not force:
            return
        self._show_state(frame)
        has_gpus = frame is not None and frame.has_gpus
        self.cards.show_frame(frame if has_gpus else None)
        set_visible(self.cards, has_gpus)
        # Empty plots only take room from the planner: show them once there is history.
        showing = has_gpus or bool(self.sampler.gpu_indices())
        set_visible(self.telemetry, showing)
        self._fit_live_pane(compact=not showing)
        if self.plots is not None:
            self.plots.update_from(self.sampler)
        self.processes.show_frame(frame)
        set_text(self.own_usage, own_usage_text(frame))
        self._update_live_marks(frame)
        self._last_frame_seen = frame

    def _show_state(self, frame: TelemetryFrame | None) -> None:
        replaying = frame is not None and frame.source.startswith("replay:")
        if frame is None:
            badge, role, text = "…", "badge-info", "Reading the GPUs…"
        elif replaying:
            kind = "synthetic trace (not real hardware)" if frame.synthetic else "recorded trace"
            badge, role = "DEMO", "badge-info"
            text = f"Replaying a {kind}: {frame.source.removeprefix('replay:')}"
        elif frame.has_gpus:
            driver = f", driver {frame.driver_version}" if frame.driver_version else ""
            badge, role, text = "LIVE", "badge-ok", f"{len(frame.gpus)} GPU(s) via NVML{driver}"
        else:
            badge = "NO GPU" if frame.state in (TelemetryState.NO_LIBRARY,
                                                TelemetryState.NO_DEVICES) else "ERROR"
            role = "badge-warn"
            text = f"<b>{frame.headline}.</b> {frame.fix or ''}"
        set_text(self.state_badge, badge)
        _set_role(self.state_badge, role)
        set_text(self.state_text, text)
        set_visible(self.demo_button, not replaying and not (frame is not None and frame.has_gpus))
        set_visible(self.live_button, replaying)

    def _update_live_marks(self, frame: TelemetryFrame | None) -> None:
        plan = self.result.bars.plan
        if plan is None or frame is None or not frame.has_gpus:
            self.result.bars.set_live_used({})
            return
        used = {}
        for gpu in plan.gpus:
            reading = frame.gpu(gpu.nvml_index) if gpu.nvml_index is not None else None
            if reading is not None and reading.memory_used is not None:
                used[gpu.index] = reading.memory_used
        self.result.bars.set_live_used(used)

    # planning --------------------------------------------------------------------------
    def run_plan(self) -> None:
        from specdeck.core.vram import plan_from_inputs

        inputs = self.form.inputs()
        frame = self.sampler.latest
        self.form.plan_button.setEnabled(False)
        self.result.show_message("Planning…")
        self.tasks.run("plan", plan_from_inputs, inputs, frame, on_result=self._plan_done,
                       on_error=self._plan_failed,
                       on_done=lambda: self.form.plan_button.setEnabled(True))
        self.form.save()

    def _plan_done(self, plan) -> None:
        self.result.show_plan(plan)
        self._update_live_marks(self.sampler.latest)

    def _plan_failed(self, error: BaseException) -> None:
        self.result.show_error(error)

    def fill_from_config(self) -> None:
        """Fill the form from the config.yml open in this window, read in a worker."""
        path = self.context.config_path
        if path is None:
            self.result.show_message("Open a TabbyAPI config.yml first (Draft settings page).")
            return
        self.tasks.run("config", config_plan_inputs, path, on_result=self._config_read,
                       on_error=self.result.show_error)

    def _config_read(self, inputs) -> None:
        self.form.fill(inputs)
        self.run_plan()


def config_plan_inputs(path):
    """Worker: plan inputs from the TabbyAPI config.yml at ``path``."""
    from specdeck.core import config
    from specdeck.core.vram import inputs_from_tabby_config

    return inputs_from_tabby_config(config.load(path))
