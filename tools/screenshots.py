"""Render SpecDeck's pages offscreen into docs/screenshots/: `python -m tools.screenshots`.

Every module `tools/shot_<name>.py` defines ``render(window, out_dir) -> list[Path]``: it
drives a real MainWindow (already shown, 1280x800) into the state worth showing and saves
``window.grab()``. Run some with `python -m tools.screenshots draft models`.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
import tempfile
from pathlib import Path

OUT_DIR = Path(__file__).resolve().parents[1] / "docs" / "screenshots"


def main(argv: list[str]) -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("SPECDECK_HOME", tempfile.mkdtemp(prefix="specdeck-shots-"))
    from PySide6.QtWidgets import QApplication
    from specdeck.gui.app import configure_application
    from specdeck.gui.main_window import MainWindow

    app = QApplication.instance() or QApplication(["specdeck-screenshots"])
    configure_application(app)
    import tools

    names = sorted(i.name for i in pkgutil.iter_modules(tools.__path__) if i.name.startswith("shot_"))
    wanted = [f"shot_{n}" for n in argv] or names
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name in wanted:
        module = importlib.import_module(f"tools.{name}")
        window = MainWindow()
        window.resize(1280, 800)
        window.show()
        app.processEvents()
        for path in module.render(window, OUT_DIR):
            print(path)
        window.hide()  # not close(): pages with unsaved edits would ask to save
        window.deleteLater()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
