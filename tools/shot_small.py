"""What a new user sees on small screens: `python -m tools.screenshots small`.

The pages of a first session, each at 1280x720 and 1024x640 (issue 44: at 1024x640 the Tune
page's result was cut off with no scrollbar):

- small-start-WxH.png: the Start page (what it found, and which llama-server tuning the demo
  will run, or that one is needed).
- small-bench-WxH.png: the demo A/B finished (a real run of the embedded demo model on this
  CPU: no draft vs n-gram, k <= 4): the seconds spent loading shaded on the time plots, the
  position chart's title naming its figure, Apply off with why (the demo has no config).
- small-tune-WxH.png: a real tune of the demo GGUF on the pinned llama-server (tools/
  llama_server_build.py) with a short budget, finished: its verdict, which scrolls where it
  does not fit, beside the report.
"""

from __future__ import annotations

from pathlib import Path

from tools.shot_bench import _pump_until, demo_plan

SIZES = ((1280, 720), (1024, 640))
TUNE_BUDGET = "90s"


def _shoot(window, page, out_dir: Path, name: str) -> list[Path]:
    shots = []
    for width, height in SIZES:
        window.resize(width, height)
        _pump_until(page, lambda: False, 0.5)
        assert (window.width(), window.height()) == (width, height), \
            f"the window refused {width}x{height}: {window.width()}x{window.height()}"
        path = out_dir / f"small-{name}-{width}x{height}.png"
        window.grab().save(str(path))
        shots.append(path)
    return shots


def render(window, out_dir: Path) -> list[Path]:
    from tools.llama_server_build import build

    shots = []
    page = window.show_page("start")
    _pump_until(page, lambda: bool(page.rows) and not page.tasks.running("demo-hint"), 30)
    shots += _shoot(window, page, out_dir, "start")

    page = window.show_page("bench")
    page.form.set_plan(demo_plan(per_suite=1, max_new_tokens=48, repeats=1, warmup=0))
    page.start()
    _pump_until(page, lambda: page.last_summary is not None, 1800)
    shots += _shoot(window, page, out_dir, "bench")

    page = window.show_page("tune")
    page.kind.setCurrentIndex(page.kind.findData("demo"))
    page.binary.setText(str(build()))
    page.flags.setText("-t 2 -c 1024")
    page.budget.setText(TUNE_BUDGET)
    page.max_new.setValue(32)
    page.prompts.setText("")
    page.start()
    _pump_until(page, lambda: page.result is not None, 1800)
    shots += _shoot(window, page, out_dir, "tune")
    return shots
