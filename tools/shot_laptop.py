"""Laptop-size screenshots: `python -m tools.screenshots laptop`.

The window at 1280x720 and 1366x768 (the smallest common laptop screens), on the A/B page
after a demo run (the page that used to need 1342 px) and on Draft settings (the widest page
now, 1177 px with the sidebar). Everything must fit: nothing cut off, no horizontal scrolling.
"""

from __future__ import annotations

from pathlib import Path

from tools.shot_bench import _pump_until


def render(window, out_dir: Path) -> list[Path]:
    shots = []
    page = window.show_page("bench")
    page.engine.setCurrentIndex(page.engine.findData("torch"))
    page.model.setEditText("demo")
    page.use_draft.setChecked(False)
    page.use_ngram.setChecked(True)
    page.sweep.setChecked(False)
    for name, button in page.suite_buttons.items():
        button.setChecked(name in ("grounded", "code"))
    page.per_suite.setValue(1)
    page.max_new.setValue(64)
    page.repeats.setValue(1)
    page.warmup.setValue(0)
    window.resize(1280, 720)
    page.start()
    _pump_until(page, lambda: page.last_summary is not None or not page.timer.isActive(), 600)
    for width, height in ((1280, 720), (1366, 768)):
        window.resize(width, height)
        _pump_until(page, lambda: False, 0.3)
        assert window.width() == width, f"the window refused {width} px: {window.width()}"
        path = out_dir / f"laptop-{width}x{height}-bench.png"
        window.grab().save(str(path))
        shots.append(path)
    window.show_page("draft")
    window.resize(1280, 720)
    _pump_until(page, lambda: False, 0.3)
    path = out_dir / "laptop-1280x720-draft.png"
    window.grab().save(str(path))
    shots.append(path)
    return shots
