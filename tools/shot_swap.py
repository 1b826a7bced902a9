"""Screenshot of the llama-swap page migrating a user's out-of-date config.yaml."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from PySide6.QtWidgets import QApplication

from tools.fixtures import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def render(window, out_dir: Path) -> list[Path]:
    from swap_samples import USER

    path = Path(tempfile.mkdtemp(prefix="swap-")) / "config.yaml"
    path.write_text(USER)
    page = window.show_page("swap")
    page.open_path(path)
    wait_until(lambda: page.config is not None)
    page.models.setCurrentRow(0)
    page.plan_migrate_all()
    wait_until(lambda: page.change is not None)
    QApplication.processEvents()
    shot = out_dir / "swap-migrate.png"
    window.grab().save(str(shot))
    return [shot]
