"""A/B page refusing a plan it cannot run: `python -m tools.screenshots bench_errors`.

bench-nothing-to-compare.png: a server A/B with the reference server alone; Start says
what is missing (core's BenchPlan.require_comparison, worded for the page) and nothing runs.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path


def render(window, out_dir: Path) -> list[Path]:
    from PySide6.QtWidgets import QApplication
    from specdeck.core.bench.fields import PLAN_FIELDS
    from specdeck.core.engines import SERVER_ENGINE, SERVER_MODEL
    from specdeck.core.servers.arms import arms_from_urls

    from tools.shot_bench import demo_plan

    page = window.show_page("bench")
    # The form's quick sizes; the arms: the reference alone.
    shown = demo_plan(per_suite=1, **{name: PLAN_FIELDS[name].quick
                                       for name in ("max_new_tokens", "repeats", "warmup")})
    page.form.set_plan(replace(shown, engine=SERVER_ENGINE, model=SERVER_MODEL,
                               arms=arms_from_urls(["http://127.0.0.1:8080"])))
    page.start()
    QApplication.processEvents()
    shot = out_dir / "bench-nothing-to-compare.png"
    window.grab().save(str(shot))
    return [shot]
