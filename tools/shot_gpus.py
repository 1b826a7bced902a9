"""Screenshots of the GPUs & VRAM page: `python -m tools.screenshots gpus`.

1. gpus-demo.png: the demo trace replayed 105 s in (a 70B on an RTX 5090 + RTX 4090,
   decoding), with a VRAM plan for that same setup on "this machine's GPUs", so the live
   ticks sit on the planned bars.
2. gpus-no-gpu.png: this machine as it is (no NVIDIA driver), planning by typed sizes, with
   a plan that does not fit and the page's suggestions.
"""

from __future__ import annotations

import time
from pathlib import Path

from tools.fixtures import fixtures_dir

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "models"


def _fixtures() -> Path:
    return fixtures_dir() / "models"


def _settle(page, seconds: float = 0.3) -> None:
    from PySide6.QtWidgets import QApplication

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        QApplication.processEvents()
        time.sleep(0.01)


def _plan(page) -> None:
    from PySide6.QtWidgets import QApplication

    page.run_plan()
    deadline = time.monotonic() + 30
    while page.tasks.running("plan") and time.monotonic() < deadline:
        QApplication.processEvents()
        time.sleep(0.01)
    _settle(page)


def _fill(page, target: Path, bpw: float, draft: Path | None, draft_bpw: float, context: int,
          typed: str | None, cache: str = "Q4") -> None:
    from specdeck.core.vram import PlanInputs

    page.form.fill(PlanInputs(model=str(target), bpw=bpw, draft=str(draft) if draft else None,
                              draft_bpw=draft_bpw, context=context, cache_mode=cache,
                              draft_cache_mode=cache, gpus=typed))
    page.form.use_typed_gpus(typed is not None)


def render(window, out_dir: Path) -> list[Path]:
    page = window.show_page("gpus")
    _settle(page)  # the plots are built on the first turn of the event loop
    shots = []

    # 1. no GPU here: typed sizes, a plan that does not fit
    _fill(page, DATA / "Llama-3.1-70B-Instruct", 4.0, _fixtures() / "Llama-3.2-1B", 4.0,
          65536, "32,24", cache="FP16")
    _plan(page)
    no_gpu = out_dir / "gpus-no-gpu.png"
    window.grab().save(str(no_gpu))
    shots.append(no_gpu)

    # 2. the demo trace, 105 s in, planned on the replayed GPUs
    page.play_demo()
    page.sampler.stop()  # step the replay by hand for a repeatable picture
    for _ in range(420):
        page.sampler.poll_once()
    _fill(page, DATA / "Llama-3.1-70B-Instruct", 4.0, _fixtures() / "Llama-3.2-1B", 4.0,
          32768, None)
    _plan(page)
    page.refresh()
    _settle(page)
    demo = out_dir / "gpus-demo.png"
    window.grab().save(str(demo))
    shots.append(demo)
    page.use_live()
    return shots
