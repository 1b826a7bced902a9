"""Screenshots of the Compatibility page: `python -m tools.screenshots compat`.

Drives the real page with the real fixture models (tests/data/fixtures, or
SPECDECK_FIXTURES): a compatible pair with one warning, an incompatible pair and its
differing tokens, an undecidable pair, and the draft suggestions for a Qwen target.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from PySide6.QtWidgets import QApplication

from tools.fixtures import fixtures_dir

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = fixtures_dir()
MODELS = FIXTURES / "models"


def _wait(signal_owner, attribute: str, previous, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while getattr(signal_owner, attribute) is previous:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the page did not show a new {attribute} in {timeout:.0f} s")
        QApplication.processEvents()
        time.sleep(0.01)
    QApplication.processEvents()


def _check(page, target: str, draft: str) -> None:
    page.target.set_value(str(MODELS / target))
    page.draft.set_value(str(MODELS / draft))
    previous = page.report
    page.start_check()
    _wait(page, "report", previous)


def _save(window, out_dir: Path, name: str) -> Path:
    path = out_dir / f"compat_{name}.png"
    window.grab().save(str(path))
    return path


def render(window, out_dir: Path) -> list[Path]:
    library = Path(tempfile.mkdtemp(prefix="specdeck-shot-library-"))
    for name in ("Qwen2.5-0.5B-Instruct", "TinyLlama-1.1B-Chat-v1.0", "Llama-3.2-1B"):
        (library / name).symlink_to(MODELS / name, target_is_directory=True)
    context = window.context
    context.update_settings(context.settings.__class__(extra_model_dirs=(str(library),)))
    page = window.show_page("compat")
    page.refresh_library()
    shots = []

    _check(page, "Qwen2.5-7B-Instruct", "Qwen2.5-0.5B-Instruct")
    shots.append(_save(window, out_dir, "compatible"))

    previous = page.suggestions
    page.start_suggest()
    _wait(page, "suggestions", previous)
    page.suggestion_table.selectRow(1)
    QApplication.processEvents()
    shots.append(_save(window, out_dir, "suggestions"))

    _check(page, "Llama-2-7b-hf", "Mistral-7B-v0.1")
    shots.append(_save(window, out_dir, "incompatible"))
    page.tabs.setCurrentIndex(1)
    QApplication.processEvents()
    shots.append(_save(window, out_dir, "differing_tokens"))

    _check(page, "Llama-3.1-8B", "Llama-3.2-1B")
    shots.append(_save(window, out_dir, "inconclusive"))
    return shots
