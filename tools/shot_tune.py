"""Screenshots of the Tune page: `python -m tools.screenshots tune`.

tune-running.png: a real tune of the demo GGUF on the pinned llama-server (tools/
llama_server_build.py), mid-search: the candidates with their predictions, the settings
predicted from one plain run (accepted by position, a step's cost), the round, the best so
far, the live plot. tune-result.png: the same tune finished, with its verdict and report
(whatever this machine measured: a verified winner, or why nothing would be written).
"""

from __future__ import annotations

from pathlib import Path

from tools.shot_bench import _pump_until

BUDGET = "6m"
MAX_NEW = 32


def _measured(live) -> bool:
    """Whether a setting of the search has a paired run measured (core.tune.live)."""
    return any(c.figures is not None and c.figures.pairs for c in live.cells.values())


def render(window, out_dir: Path) -> list[Path]:
    from tools.llama_server_build import build

    page = window.show_page("tune")
    page.kind.setCurrentIndex(page.kind.findData("demo"))
    page.binary.setText(str(build()))
    page.flags.setText("-t 1 -c 1024")
    page.budget.setText(BUDGET)
    page.max_new.setValue(MAX_NEW)
    page.prompts.setText("")
    page.start()
    shots = [out_dir / "tune-running.png", out_dir / "tune-result.png"]
    # Mid-search: the finalists under way side by side, one measured at least (the first
    # runs are warm-ups: the plots and the best so far were empty then), or the search over.
    _pump_until(page, lambda: page.result is not None or page.live.phase == "verify" or (
        page.live.phase == "search" and page.live.plan is not None
        and page.live.plan.done >= 4 and _measured(page.live)), 900)
    _pump_until(page, lambda: False, 0.5)
    window.grab().save(str(shots[0]))
    _pump_until(page, lambda: page.result is not None, 1200)
    _pump_until(page, lambda: False, 0.5)
    window.grab().save(str(shots[1]))
    return shots
