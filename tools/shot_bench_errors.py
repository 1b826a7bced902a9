"""A/B page refusing a plan it cannot run: `python -m tools.screenshots bench_errors`.

bench-nothing-to-compare.png: a server A/B with the reference server alone; Start says
what is missing (core's BenchPlan.require_comparison, worded for the page) and nothing runs.
"""

from __future__ import annotations

from pathlib import Path


def render(window, out_dir: Path) -> list[Path]:
    from PySide6.QtWidgets import QApplication

    page = window.show_page("bench")
    page.engine.setCurrentIndex(page.engine.findData("server"))
    page.servers.setText("http://127.0.0.1:8080")
    page.start()
    QApplication.processEvents()
    shot = out_dir / "bench-nothing-to-compare.png"
    window.grab().save(str(shot))
    return [shot]
