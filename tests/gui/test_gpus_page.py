"""The GPUs & VRAM page, rendered offscreen in a real MainWindow.

Telemetry comes from the real NVML path (absent here: the no-GPU state) and from the demo
trace through ReplaySource; plans come from the real planner on real fixture configs.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import MODELS, REPO_ROOT
from PySide6.QtCore import Qt
from specdeck.core.gpu import read_once
from specdeck.core.gpu.replay import load_trace
from specdeck.core.units import GiB, format_bytes
from specdeck.gui.main_window import MainWindow

DATA = REPO_ROOT / "tests" / "data" / "models"
DEMO = REPO_ROOT / "resources" / "traces" / "demo-5090-4090-70b.jsonl"
NO_GPU_HERE = not read_once().has_gpus


@pytest.fixture
def window(qtbot, configured_qapp):
    win = MainWindow()
    qtbot.addWidget(win)
    win.resize(1280, 800)
    win.show()
    yield win
    win.close()


def open_page(window, qtbot):
    page = window.show_page("gpus")
    qtbot.waitUntil(lambda: page.sampler.latest is not None and page.plots is not None,
                    timeout=10_000)
    return page


def fill_form(page, target, bpw, draft=None, draft_bpw=0.0, context=16384, typed="32,24",
              cache="Q4"):
    from specdeck.core.vram import PlanInputs

    page.form.fill(PlanInputs(model=str(target), bpw=bpw, draft=str(draft) if draft else None,
                              draft_bpw=draft_bpw, context=context, cache_mode=cache,
                              draft_cache_mode=cache, gpus=typed))
    page.form.use_typed_gpus(typed is not None)


def plan_now(page, qtbot):
    qtbot.mouseClick(page.form.plan_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not page.tasks.running("plan"), timeout=20_000)
    qtbot.waitUntil(lambda: page.form.plan_button.isEnabled(), timeout=5_000)


def replay_demo(page, frames) -> int:
    """Step the demo replay ``frames`` times by hand (repeatable); the rows the sampler thread
    had recorded before it was stopped (it may take a frame or two first)."""
    page.play_demo()
    page.sampler.stop()
    before = page.sampler.rows_recorded(1)
    for _ in range(frames):
        page.sampler.poll_once()
    page.refresh()
    return before


@pytest.mark.skipif(not NO_GPU_HERE, reason="this machine has an NVIDIA GPU")
def test_without_a_gpu_the_page_says_so_and_planning_still_works(window, qtbot):
    page = open_page(window, qtbot)
    assert page.state_badge.text() == "NO GPU"
    assert "No NVIDIA GPU detected" in page.state_text.text()
    assert page.demo_button.isVisible() and not page.live_button.isVisible()
    assert not page.cards.isVisible() and not page.telemetry.isVisible()

    fill_form(page, DATA / "Llama-2-70b-hf", 2.5, MODELS / "TinyLlama-1.1B-Chat-v1.0", 4.0)
    plan_now(page, qtbot)
    plan = page.result.bars.plan
    assert plan is not None and page.result.verdict.text() == "FITS"
    assert [g.name for g in plan.gpus] == ["32 GB GPU", "24 GB GPU"]
    assert "headroom" in page.result.summary.text()
    assert "Largest context that fits" in page.result.details.text()
    # The painted bars carry the plan's numbers: GPU 0 holds the whole 70B + draft.
    page.result.bars.repaint()
    labels = {(s.gpu, s.label): s.nbytes for s in page.result.bars.segments}
    assert labels[(0, "target weights")] == plan.gpu(0).target_weights
    assert labels[(0, "draft cache")] == plan.gpu(0).draft_cache
    assert (1, "target weights") not in labels and labels[(1, "free")] == plan.gpu(1).free_bytes


def test_demo_trace_fills_cards_plots_and_processes(window, qtbot):
    page = open_page(window, qtbot)
    before = replay_demo(page, 420)  # 105 s: loaded, decoding
    assert page.state_badge.text() == "DEMO" and "synthetic" in page.state_text.text()
    assert page.live_button.isVisible() and not page.demo_button.isVisible()
    cards = page.cards.cards
    assert [cards[i].title.text() for i in sorted(cards)] == ["NVIDIA GeForce RTX 4090",
                                                             "NVIDIA GeForce RTX 5090"]
    assert cards[0].indices.text() == "nvidia-smi 0 · CUDA 1"
    frame = page.sampler.latest
    assert cards[1].memory.format() == (f"{format_bytes(frame.gpu(1).memory_used)} / "
                                        f"{format_bytes(frame.gpu(1).usable_total)}")
    assert page.processes.rowCount() == 4
    assert page.processes.item(0, 2).text() == "python3"
    assert page.own_usage.text() == "SpecDeck itself: 0 B"
    # The curves show the last 120 s: at 4 Hz, every sample taken so far (one per poll).
    samples = page.sampler.rows_recorded(1)
    assert samples == before + 420
    x, y = page.plots.memory_curves[1].getData()
    assert len(x) == samples and x[-1] == 0.0 and x[0] == pytest.approx(-(samples - 1) * 0.25)
    assert y[-1] == pytest.approx(frame.gpu(1).memory_used / GiB)
    ux, uy = page.plots.util_curves[0].getData()
    assert uy[-1] == frame.gpu(0).utilization_gpu


def test_plots_stay_bounded_over_a_long_replay(window, qtbot):
    page = open_page(window, qtbot)
    replay_demo(page, 10)
    held = page.sampler.history_bytes()
    for _ in range(3000):  # 12.5 minutes of trace: more than the 10-minute history
        page.sampler.poll_once()
    page.refresh()
    assert page.sampler.history_bytes() == held
    assert len(page.sampler.history(0)["t"]) == page.sampler.capacity
    x, _ = page.plots.memory_curves[0].getData()
    assert len(x) == 481  # 120 s window at 4 Hz, both ends included
    assert np.all(np.diff(x) > 0)


def test_plan_on_the_replayed_gpus_marks_live_use(window, qtbot):
    page = open_page(window, qtbot)
    replay_demo(page, 420)
    fill_form(page, DATA / "Llama-3.1-70B-Instruct", 4.0, MODELS / "Llama-3.2-1B", 4.0,
              context=32768, typed=None)
    plan_now(page, qtbot)
    plan = page.result.bars.plan
    assert plan is not None and plan.verdict.value == "fits"
    # Planned in CUDA order: GPU 0 is the 5090 (NVML 1), GPU 1 the 4090 (NVML 0).
    assert [(g.name, g.nvml_index) for g in plan.gpus] == [("NVIDIA GeForce RTX 5090", 1),
                                                         ("NVIDIA GeForce RTX 4090", 0)]
    # The plan names each GPU as its card does ("CUDA 0"), never "GPU 0" where the cards,
    # plots and process table's GPU 0 is the other card.
    assert [g.label for g in plan.gpus] == ["CUDA 0: RTX 5090", "CUDA 1: RTX 4090"]
    for g in plan.gpus:
        assert page.cards.cards[g.nvml_index].indices.text().endswith(f"CUDA {g.index}")
    frame = page.sampler.latest
    assert page.result.bars.live_used == {0: frame.gpu(1).memory_used, 1: frame.gpu(0).memory_used}
    # The synthetic trace's loader follows the plan, so plan and reality agree on the 5090.
    assert abs(plan.gpu(0).used_bytes - frame.gpu(1).memory_used) < 0.5 * GiB


def test_timer_redraws_from_the_sampler_thread(window, qtbot, monkeypatch):
    page = open_page(window, qtbot)
    from specdeck.core.gpu.sampler import DEFAULT_INTERVAL_S

    # the page redraws at the sampler's rate (4 Hz)
    assert page.timer.interval() == round(DEFAULT_INTERVAL_S * 1000)
    assert "pyqtgraph" in __import__("sys").modules  # loaded after the first show, not before
    page.play_demo()  # the sampler thread now replays at 4 Hz
    qtbot.waitUntil(lambda: len(page.cards.cards) == 2, timeout=10_000)
    qtbot.waitUntil(lambda: page.plots.memory_curves
                    and len(page.plots.memory_curves[1].getData()[0]) >= 3, timeout=10_000)
    window.close()
    assert not page.sampler.is_running  # closing the window stops telemetry


def test_plan_errors_show_in_place(window, qtbot):
    page = open_page(window, qtbot)
    fill_form(page, "/no/such/model", 4.0)
    plan_now(page, qtbot)
    assert page.result.error.isVisible()
    assert "does not exist" in page.result.error.text()
    assert page.result.bars.plan is None
    fill_form(page, MODELS / "Llama-2-7b-hf", 0.0)  # no bpw for a folder without EXL2 files
    plan_now(page, qtbot)
    assert "bpw" in page.result.error.text()


def test_a_plan_that_does_not_fit_lists_what_to_change(window, qtbot):
    page = open_page(window, qtbot)
    fill_form(page, DATA / "Llama-3.1-70B-Instruct", 4.0, MODELS / "Llama-3.2-1B", 4.0,
              context=65536, cache="FP16")
    plan_now(page, qtbot)
    assert page.result.verdict.text() == "DOES NOT FIT"
    details = page.result.details.text()
    assert "To make it fit" in details and "cache_mode: Q8" in details
    assert "short" in page.result.summary.text()


def test_form_is_remembered(window, qtbot, configured_qapp):
    page = open_page(window, qtbot)
    fill_form(page, DATA / "Llama-2-70b-hf", 2.5, context=8192, typed="48")
    plan_now(page, qtbot)
    window.close()
    again = MainWindow()
    qtbot.addWidget(again)
    form = again.show_page("gpus").form
    assert form.target.path.text() == str(DATA / "Llama-2-70b-hf")
    assert form.target.bpw.value() == 2.5 and form.context.value() == 8192
    assert form.gpu_sizes.text() == "48" and form.gpu_source.currentIndex() == 1
    again.close()


def test_from_config_yml_fills_the_form_reading_the_file_off_the_gui_thread(
        window, qtbot, tmp_path, monkeypatch):
    """Issue 45: the page parsed config.yml on the GUI thread. The button reads it in a
    worker (the reader is watched, not replaced) and fills the form from what it says."""
    import threading

    from specdeck.core import config

    path = tmp_path / "config.yml"
    path.write_text(f"model:\n  model_dir: {DATA}\n  model_name: Llama-2-70b-hf\n"
                    "  max_seq_len: 8192\n  cache_mode: Q6\n", encoding="utf-8")
    read_on = []
    real_load = config.load

    def watched(*args, **kwargs):
        read_on.append(threading.current_thread() is threading.main_thread())
        return real_load(*args, **kwargs)

    monkeypatch.setattr(config, "load", watched)
    page = open_page(window, qtbot)
    window.context.set_config_path(path)
    assert page.form.from_config.isVisibleTo(page)
    qtbot.mouseClick(page.form.from_config, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.form.target.path.text() == str(DATA / "Llama-2-70b-hf"),
                    timeout=10_000)
    assert read_on == [False]  # read once, and not on the GUI thread
    assert page.form.context.value() == 8192


def test_from_config_fills_the_form_from_the_open_config_yml_and_plans(window, qtbot,
                                                                         tmp_path):
    """The button reads the config.yml open in SpecDeck: its target and draft, context and
    cache modes land in the form, and the plan runs on them (here it says what the folders
    lack: no EXL2 files, so no bitrate)."""
    page = open_page(window, qtbot)
    assert page.form.from_config.isVisibleTo(page)
    qtbot.mouseClick(page.form.from_config, Qt.MouseButton.LeftButton)
    assert "Open a TabbyAPI config.yml first" in page.result.summary.text()

    config = tmp_path / "config.yml"
    config.write_text(f"model:\n  model_dir: {DATA}\n  model_name: Llama-3.1-70B-Instruct\n"
                      "  max_seq_len: 32768\n  cache_mode: Q6\n"
                      f"draft_model:\n  draft_model_dir: {MODELS}\n"
                      "  draft_model_name: Llama-3.2-1B\n  draft_cache_mode: Q8\n")
    window.context.set_config_path(config)
    page.form.use_typed_gpus(True)
    qtbot.mouseClick(page.form.from_config, Qt.MouseButton.LeftButton)
    form = page.form
    qtbot.waitUntil(lambda: form.target.path.text() == str(DATA / "Llama-3.1-70B-Instruct"),
                    timeout=10_000)  # read in a worker
    assert form.draft.path.text() == str(MODELS / "Llama-3.2-1B")
    assert (form.context.value(), form.cache_mode.currentText(),
            form.draft_cache_mode.currentText()) == (32768, "Q6", "Q8")
    assert form.gpu_source.currentIndex() == 1  # the typed GPUs stay: config.yml names none
    qtbot.waitUntil(lambda: not page.tasks.running("plan") and page.result.error.isVisible(),
                    timeout=20_000)
    assert "bpw" in page.result.error.text()


def test_environment_replay_is_the_default_source(qtbot, configured_qapp, monkeypatch):
    monkeypatch.setenv("SPECDECK_GPU_REPLAY", str(DEMO))
    win = MainWindow()
    qtbot.addWidget(win)
    win.show()
    page = win.show_page("gpus")
    qtbot.waitUntil(lambda: page.sampler.latest is not None and page.sampler.latest.has_gpus,
                    timeout=10_000)
    assert page.sampler.latest.synthetic
    first = load_trace(DEMO).frames[0]
    assert page.sampler.latest.gpu(0).name == first.gpu(0).name
    win.close()


def test_page_renders_offscreen(window, qtbot, tmp_path):
    page = open_page(window, qtbot)
    replay_demo(page, 200)
    image = page.grab()
    assert not image.isNull() and image.width() > 800 and image.height() > 600
    out = tmp_path / "gpus.png"
    assert image.save(str(out)) and out.stat().st_size > 10_000


def test_building_the_page_defers_pyqtgraph_and_nvml(tmp_path):
    """A window that opens on this page must paint before the plots' imports."""
    import json
    import os
    import subprocess
    import sys

    code = (
        "import os, sys, json\n"
        "from PySide6.QtWidgets import QApplication\n"
        "app = QApplication(['t'])\n"
        "from specdeck.gui.context import AppContext\n"
        "from specdeck.gui.pages.gpus import create_page\n"
        "page = create_page(AppContext())\n"
        "print(json.dumps([m for m in ('pyqtgraph', 'pynvml') if m in sys.modules]))\n"
    )
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", SPECDECK_HOME=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def _placeholder_fits(edit) -> bool:
    """Whether a line edit shows its whole placeholder (QLineEdit elides one that does not
    fit its contents rect less its 2 px margins, qlineedit.cpp)."""
    from PySide6.QtWidgets import QStyle, QStyleOptionFrame

    option = QStyleOptionFrame()
    edit.initStyleOption(option)
    room = edit.style().subElementRect(QStyle.SubElement.SE_LineEditContents, option, edit)
    margins = edit.textMargins()
    width = room.width() - margins.left() - margins.right() - 4
    return edit.fontMetrics().horizontalAdvance(edit.placeholderText()) <= width


def test_every_placeholder_on_the_plan_form_fits_its_field(window, qtbot):
    """The target's placeholder showed "target model folder (EXL2, or co…"."""
    from PySide6.QtWidgets import QLineEdit

    page = open_page(window, qtbot)
    edits = [e for e in page.form.findChildren(QLineEdit) if e.placeholderText()]
    assert page.form.target.path in edits
    assert [e.placeholderText() for e in edits if not _placeholder_fits(e)] == []
    assert "config.json" in page.form.target.path.toolTip()  # the rest of what it said


@pytest.mark.skipif(not NO_GPU_HERE, reason="this machine has an NVIDIA GPU")
@pytest.mark.parametrize("width", [1280, 960])
def test_the_no_gpu_banner_is_whole_with_no_blank_band_under_it(window, qtbot, width):
    """Without GPUs the live half was a fixed 90 px: a blank band under a two-line banner,
    its text cut off where it wraps to more lines."""
    window.resize(width, 800)
    page = open_page(window, qtbot)
    qtbot.waitUntil(lambda: page.state_badge.text() == "NO GPU", timeout=5_000)
    qtbot.wait(50)  # the resize's and the new text's layout requests
    text = page.state_text
    assert text.height() >= text.heightForWidth(text.width())  # no line cut off
    bottom = max(w.mapTo(page, w.rect().bottomLeft()).y() for w in (text, page.state_badge))
    form_top = page.form.mapTo(page, page.form.rect().topLeft()).y()
    # Below the banner: the splitter's handle and the form's title, nothing more.
    assert form_top - bottom <= page.splitter.handleWidth() + page.form.fontMetrics().height() + 8
