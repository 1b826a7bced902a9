"""Laptop-size screenshots: `python -m tools.screenshots laptop`.

The window at 1280x720 and 1366x768 (the smallest common laptop screens), on the A/B page
after a demo run (the page that used to need 1342 px) and on Draft settings (the widest page
now, 1177 px with the sidebar). Everything must fit: nothing cut off, no horizontal scrolling.
"""

from __future__ import annotations

from pathlib import Path

from tools.shot_bench import _pump_until, demo_plan


def render(window, out_dir: Path) -> list[Path]:
    shots = []
    page = window.show_page("bench")
    page.form.set_plan(demo_plan(per_suite=1, max_new_tokens=64, repeats=1, warmup=0))
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
