"""Screenshot of the Draft settings page editing a real TabbyAPI config.yml."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from PySide6.QtWidgets import QApplication

from tools.fixtures import fixtures_dir, wait_until

FIXTURES = fixtures_dir()


def render(window, out_dir: Path) -> list[Path]:
    tabby = Path(tempfile.mkdtemp(prefix="tabby-")) / "tabbyAPI"
    drafts = tabby / "models"
    for name in ("TinyLlama-1.1B-Chat-v1.0-exl2-4.0bpw", "Llama-2-7b-chat-exl2-4.65bpw"):
        (drafts / name).mkdir(parents=True)
        shutil.copy(FIXTURES / "models" / "TinyLlama-1.1B-Chat-v1.0" / "config.json", drafts / name)
    config_path = tabby / "config.yml"
    config_path.write_bytes((FIXTURES / "tabbyapi" / "config_sample.exl2-checkpoint.yml").read_bytes())
    text = config_path.read_text().replace("  model_name:\n", "  model_name: Llama-2-7b-chat-exl2-4.65bpw\n", 1)
    config_path.write_text(text)

    page = window.show_page("draft")
    page.open_path(config_path)
    wait_until(lambda: page.document is not None)
    page.fields[("draft_model", "draft_model_name")].set_text("TinyLlama-1.1B-Chat-v1.0-exl2-4.0bpw")
    page.fields[("draft_model", "draft_cache_mode")].set_text("Q4")
    page.fields[("draft_model", "draft_rope_alpha")].set_text("1..5")
    page.flush_plan()
    wait_until(lambda: page.change is not None and not page.change.is_noop)
    QApplication.processEvents()
    path = out_dir / "draft-settings.png"
    window.grab().save(str(path))
    return [path]
