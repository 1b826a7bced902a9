"""Screenshot of the Tune page with a TabbyAPI result: `python -m tools.screenshots tune_tabby`.

tune-tabby.png: a TabbyAPI folder that SpecDeck starts for each setting, tuned to its verified
result: the draft model of the target's family and n-gram drafting, each at draft_num_tokens 2,
4 and 8, the drafts refused with why, the verdict and the report. A real TabbyAPI needs an
NVIDIA GPU, so the folder starts the stand-in of TabbyAPI main's start-up and API
(tests/tabby_app.py, citing TabbyAPI's source) with real tokenizers; its speeds per setting
are this module's choice (STEPS), so the figures show the page, not a measurement.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from tools.shot_bench import _pump_until

TESTS = Path(__file__).resolve().parents[1] / "tests"
STEPS = {"none": 0.012, "ngram:2:4": 0.004, "ngram:2:2": 0.007, "ngram:2:8": 0.006,
         "default": 0.009}
"""The stand-in's seconds per token for each setting (n-gram at k=4 the fastest)."""


def render(window, out_dir: Path) -> list[Path]:
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    from tabby_app import standin_main, tabby_folder

    folder = tabby_folder(Path(tempfile.mkdtemp(prefix="specdeck-shot-")) / "tabbyAPI",
                          "main").parent
    standin_main(folder, "main")
    os.environ["SPECDECK_STANDIN_STEPS"] = json.dumps(STEPS)
    page = window.show_page("tune")
    page.kind.setCurrentIndex(page.kind.findData("tabby-folder"))
    page.tabby_folder.setText(str(folder))
    page.tabby_python.setText(sys.executable)
    page.budget.setText("2m")
    page.max_new.setValue(32)
    page.prompts.setText("")
    page.start()
    _pump_until(page, lambda: page.result is not None, 600)
    _pump_until(page, lambda: False, 0.5)
    shot = out_dir / "tune-tabby.png"
    window.grab().save(str(shot))
    return [shot]
