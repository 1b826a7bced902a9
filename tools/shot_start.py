"""Screenshot of the start page: `python -m tools.screenshots start`.

start.png: what a first launch shows on this machine (no GPU, no TabbyAPI, no server: each
with its next step), the three tasks and the demo A/B button.
"""

from __future__ import annotations

from pathlib import Path

from tools.shot_bench import _pump_until


def render(window, out_dir: Path) -> list[Path]:
    page = window.show_page("start")
    _pump_until(page, lambda: bool(page.rows) and not page.tasks.running("demo-hint"), 30)
    _pump_until(page, lambda: False, 0.3)
    shot = out_dir / "start.png"
    window.grab().save(str(shot))
    return [shot]
